// SPDX-License-Identifier: GPL-2.0

//! Guest memory shared by QEMU through DMA_MAP with a file descriptor.
//!
//! QEMU passes an fd for each guest-RAM region when the RAM is a shared file (for example
//! `memory-backend-memfd,share=on`); the server maps it `MAP_SHARED`, so device DMA is a plain
//! copy. All accesses are bounds- and permission-checked against the mappings; an access that is
//! not entirely backed fails with a [`MemError`].

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use erdma_model::{GuestMemory, MemError, MemErrorKind};

/// One `mmap`ed guest-RAM region.
struct Mapping {
    iova: u64,
    len: usize,
    host: NonNull<u8>,
    readable: bool,
    writable: bool,
}

impl Mapping {
    fn end(&self) -> u64 {
        self.iova + self.len as u64
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `host` and `len` describe a mapping created by `mmap` in `MappedMemory::map`
        // that nothing else unmaps; after this no pointer into it is used (the `Mapping` is gone).
        let rc = unsafe { libc::munmap(self.host.as_ptr().cast(), self.len) };
        if rc != 0 {
            log::error!(
                "munmap of DMA region {:#x}+{:#x} failed: {}",
                self.iova,
                self.len,
                io::Error::last_os_error()
            );
        }
    }
}

// SAFETY: a `Mapping` owns its shared mapping; the raw pointer is only dereferenced through
// `MappedMemory`, whose users synchronise (the device state lives behind a mutex). Moving the
// owner to another thread does not invalidate the mapping.
unsafe impl Send for Mapping {}

/// The guest memory regions QEMU mapped for the device, sorted by IOVA and non-overlapping.
#[derive(Default)]
pub struct MappedMemory {
    maps: Vec<Mapping>,
}

impl MappedMemory {
    /// No guest memory mapped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of mapped regions.
    pub fn len(&self) -> usize {
        self.maps.len()
    }

    /// Whether nothing is mapped.
    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    /// Maps `size` bytes of `file` at `file_offset` as guest IOVA `iova`.
    pub fn map(
        &mut self,
        iova: u64,
        size: u64,
        file: &File,
        file_offset: u64,
        readable: bool,
        writable: bool,
    ) -> io::Result<()> {
        let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        let what = format!("DMA region {iova:#x}+{size:#x} (file offset {file_offset:#x})");
        let len = usize::try_from(size)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| invalid(format!("{what}: bad size")))?;
        let end = iova
            .checked_add(size)
            .ok_or_else(|| invalid(format!("{what}: wraps the address space")))?;
        let offset = libc::off_t::try_from(file_offset)
            .map_err(|_| invalid(format!("{what}: bad file offset")))?;
        let md = file.metadata()?;
        if md.is_file() && file_offset.checked_add(size).is_none_or(|e| e > md.len()) {
            return Err(invalid(format!(
                "{what}: beyond the end of the {}-byte file",
                md.len()
            )));
        }
        let at = self.maps.partition_point(|m| m.iova < iova);
        let overlaps_prev = at > 0 && self.maps[at - 1].end() > iova;
        let overlaps_next = self.maps.get(at).is_some_and(|m| m.iova < end);
        if overlaps_prev || overlaps_next {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{what}: overlaps an existing mapping"),
            ));
        }
        let mut prot = libc::PROT_NONE;
        if readable {
            prot |= libc::PROT_READ;
        }
        if writable {
            prot |= libc::PROT_WRITE;
        }
        // SAFETY: a new shared mapping chosen by the kernel (null hint), of an fd we own for the
        // duration of the call; it aliases no Rust object. The result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                offset,
            )
        };
        if p == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("{what}: mmap: {e}")));
        }
        let host = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other(format!("{what}: mmap returned NULL")))?;
        self.maps.insert(
            at,
            Mapping {
                iova,
                len,
                host,
                readable,
                writable,
            },
        );
        Ok(())
    }

    /// Unmaps the regions that lie entirely inside `[iova, iova + size)` and returns how many.
    /// Fails, unmapping nothing, if a region only partly overlaps the range.
    pub fn unmap(&mut self, iova: u64, size: u64) -> io::Result<usize> {
        let end = iova.saturating_add(size);
        let overlapping = |m: &Mapping| m.iova < end && m.end() > iova;
        let inside = |m: &Mapping| m.iova >= iova && m.end() <= end;
        if self.maps.iter().any(|m| overlapping(m) && !inside(m)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("DMA_UNMAP {iova:#x}+{size:#x} would split a mapping"),
            ));
        }
        let before = self.maps.len();
        self.maps.retain(|m| !inside(m));
        Ok(before - self.maps.len())
    }

    /// Unmaps everything.
    pub fn unmap_all(&mut self) {
        self.maps.clear();
    }

    /// Calls `f(host, done, n)` for each piece of `[gpa, gpa + len)`: `host` points at `n` mapped
    /// bytes that correspond to bytes `done..done + n` of the access. Fails before calling `f` if
    /// any part of the range is not mapped with the needed permission.
    fn pieces(
        &self,
        gpa: u64,
        len: usize,
        write: bool,
        mut f: impl FnMut(*mut u8, usize, usize),
    ) -> Result<(), MemError> {
        let err = |at, kind| MemError { gpa, len, at, kind };
        if gpa.checked_add(len as u64).is_none() {
            return Err(err(gpa, MemErrorKind::Overflow));
        }
        // Validate the whole range first, so that a failed access transfers nothing.
        let mut plan: Vec<(*mut u8, usize, usize)> = Vec::with_capacity(1);
        let (mut at, mut done) = (gpa, 0usize);
        while done < len {
            let i = self.maps.partition_point(|m| m.iova <= at);
            let m = i
                .checked_sub(1)
                .map(|i| &self.maps[i])
                .filter(|m| at < m.end())
                .ok_or(err(at, MemErrorKind::Unmapped))?;
            if !(if write { m.writable } else { m.readable }) {
                return Err(err(at, MemErrorKind::Permission));
            }
            // In range: m.iova <= at < m.end(), so the offset is below m.len.
            let off = (at - m.iova) as usize;
            let n = (len - done).min(m.len - off);
            // SAFETY: `off < m.len`, so the result stays inside the mapping.
            let host = unsafe { m.host.as_ptr().add(off) };
            plan.push((host, done, n));
            done += n;
            at += n as u64;
        }
        for (host, done, n) in plan {
            f(host, done, n);
        }
        Ok(())
    }
}

impl GuestMemory for MappedMemory {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let dst = buf.as_mut_ptr();
        self.pieces(gpa, buf.len(), false, |host, done, n| {
            // SAFETY: `host..host + n` is inside a live readable mapping (checked by `pieces`) and
            // `dst + done..dst + done + n` inside `buf`; they cannot overlap (guest memory is never
            // a Rust object). The guest may write the bytes concurrently: only raw bytes are
            // copied and no reference to guest memory is created, so a race yields torn data,
            // which the model treats as untrusted input anyway.
            unsafe { std::ptr::copy_nonoverlapping(host, dst.add(done), n) }
        })
    }

    fn write(&mut self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        let src = data.as_ptr();
        self.pieces(gpa, data.len(), true, |host, done, n| {
            // SAFETY: `host..host + n` is inside a live writable mapping (checked by `pieces`)
            // and `src + done..src + done + n` inside `data`; see `read` for concurrent guest
            // accesses.
            unsafe { std::ptr::copy_nonoverlapping(src.add(done), host, n) }
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    /// A memfd of `size` bytes standing in for guest RAM.
    pub(crate) fn memfd(size: u64) -> File {
        // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
        let fd = unsafe { libc::memfd_create(c"erdma-emu-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0, "memfd_create: {}", io::Error::last_os_error());
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(size).unwrap();
        file
    }

    fn read_file(f: &File, off: u64, len: usize) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut v = vec![0; len];
        f.read_exact_at(&mut v, off).unwrap();
        v
    }

    #[test]
    fn read_write_through_the_mapping() {
        let f = memfd(0x4000);
        let mut m = MappedMemory::new();
        m.map(0x10_0000, 0x2000, &f, 0x1000, true, true).unwrap();
        m.write(0x10_0ffe, b"abcd").unwrap();
        assert_eq!(read_file(&f, 0x1ffe, 4), b"abcd", "shared with the file");
        let mut b = [0u8; 4];
        m.read(0x10_0ffe, &mut b).unwrap();
        assert_eq!(&b, b"abcd");
        m.write_u64_le(0x10_1ff8, 7).unwrap();
        assert_eq!(m.read_u64_le(0x10_1ff8).unwrap(), 7);
    }

    #[test]
    fn accesses_are_bounds_checked() {
        let f = memfd(0x3000);
        let mut m = MappedMemory::new();
        m.map(0x1000, 0x1000, &f, 0, true, true).unwrap();
        m.map(0x3000, 0x1000, &f, 0x1000, true, false).unwrap();
        let e = m.write(0x1ffc, &[1; 8]).unwrap_err();
        assert_eq!((e.at, e.kind), (0x2000, MemErrorKind::Unmapped));
        assert_eq!(
            read_file(&f, 0xffc, 4),
            [0; 4],
            "a failed access transfers nothing"
        );
        assert_eq!(
            m.read(0xfff, &mut [0; 2]).unwrap_err().kind,
            MemErrorKind::Unmapped
        );
        assert_eq!(
            m.read(0, &mut [0; 1]).unwrap_err().kind,
            MemErrorKind::Unmapped
        );
        assert_eq!(
            m.read(0x4000, &mut [0; 1]).unwrap_err().kind,
            MemErrorKind::Unmapped
        );
        let e = m.write(0x3000, &[1]).unwrap_err();
        assert_eq!(e.kind, MemErrorKind::Permission, "read-only mapping");
        assert!(m.read(0x3000, &mut [0; 0x1000]).is_ok());
        let e = m.read(u64::MAX - 1, &mut [0; 4]).unwrap_err();
        assert_eq!(e.kind, MemErrorKind::Overflow);
        assert!(m.read(0x9_0000, &mut []).is_ok(), "empty access");
    }

    #[test]
    fn accesses_span_adjacent_mappings() {
        let f = memfd(0x2000);
        let mut m = MappedMemory::new();
        m.map(0x2000, 0x1000, &f, 0x1000, true, true).unwrap();
        m.map(0x1000, 0x1000, &f, 0, true, true).unwrap();
        m.write(0x1ffe, &[1, 2, 3, 4]).unwrap();
        assert_eq!(read_file(&f, 0xffe, 4), [1, 2, 3, 4]);
        let mut b = [0u8; 4];
        m.read(0x1ffe, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
    }

    #[test]
    fn bad_maps_are_refused() {
        let f = memfd(0x4000);
        let mut m = MappedMemory::new();
        m.map(0x1000, 0x2000, &f, 0, true, true).unwrap();
        assert!(m.map(0x2000, 0x1000, &f, 0, true, true).is_err(), "overlap");
        assert!(m.map(0x0, 0x2000, &f, 0, true, true).is_err(), "overlap");
        assert!(m.map(0x8000, 0, &f, 0, true, true).is_err(), "empty");
        assert!(
            m.map(0x8000, 0x1000, &f, 0x3800, true, true).is_err(),
            "past EOF"
        );
        assert!(
            m.map(0x8000, 0x1000, &f, 0x100, true, true).is_err(),
            "unaligned offset"
        );
        assert!(
            m.map(u64::MAX - 0xfff, 0x2000, &f, 0, true, true).is_err(),
            "wraps"
        );
        assert_eq!(m.len(), 1);
    }

    #[test]
    fn unmap() {
        let f = memfd(0x4000);
        let mut m = MappedMemory::new();
        m.map(0x1000, 0x1000, &f, 0, true, true).unwrap();
        m.map(0x2000, 0x1000, &f, 0x1000, true, true).unwrap();
        m.map(0x8000, 0x2000, &f, 0x2000, true, true).unwrap();
        assert!(m.unmap(0x8000, 0x1000).is_err(), "would split");
        assert_eq!(m.unmap(0x1000, 0x2000).unwrap(), 2);
        assert!(m.read(0x1000, &mut [0]).is_err());
        assert!(m.read(0x8000, &mut [0]).is_ok());
        assert_eq!(m.unmap(0x1000, 0x1000).unwrap(), 0);
        m.unmap_all();
        assert!(m.is_empty());
    }
}
