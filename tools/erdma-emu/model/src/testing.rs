// SPDX-License-Identifier: GPL-2.0

//! Simple implementations of [`GuestMemory`] and [`IrqSink`] for tests.

use crate::io::{GuestMemory, IrqSink, MemError, MemErrorKind};
use crate::regs::MSIX_VECTORS;

/// Guest memory made of one flat buffer at guest-physical address `base`.
#[derive(Clone, Debug)]
pub struct VecMemory {
    base: u64,
    bytes: Vec<u8>,
}

impl VecMemory {
    /// `size` zeroed bytes at guest-physical `base`.
    pub fn new(base: u64, size: usize) -> Self {
        VecMemory {
            base,
            bytes: vec![0; size],
        }
    }

    /// Guest-physical address of the first byte.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The backing bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The backing bytes, mutable (what the "guest" writes).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// The index range of `[gpa, gpa + len)` in the buffer.
    fn range(&self, gpa: u64, len: usize) -> Result<core::ops::Range<usize>, MemError> {
        let err = |at, kind| MemError { gpa, len, at, kind };
        let len64 = len as u64;
        if gpa.checked_add(len64).is_none() {
            return Err(err(gpa, MemErrorKind::Overflow));
        }
        if len == 0 {
            return Ok(0..0);
        }
        let start = gpa
            .checked_sub(self.base)
            .and_then(|o| usize::try_from(o).ok())
            .filter(|&o| o < self.bytes.len())
            .ok_or(err(gpa, MemErrorKind::Unmapped))?;
        let avail = self.bytes.len() - start;
        if len > avail {
            return Err(err(gpa + avail as u64, MemErrorKind::Unmapped));
        }
        Ok(start..start + len)
    }
}

impl GuestMemory for VecMemory {
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let r = self.range(gpa, buf.len())?;
        buf.copy_from_slice(&self.bytes[r]);
        Ok(())
    }

    fn write(&mut self, gpa: u64, data: &[u8]) -> Result<(), MemError> {
        let r = self.range(gpa, data.len())?;
        self.bytes[r].copy_from_slice(data);
        Ok(())
    }
}

/// An [`IrqSink`] that records every delivered interrupt.
#[derive(Clone, Debug)]
pub struct RecordingIrqs {
    /// Bit n set: vector n is connected and delivers.
    pub connected: u32,
    /// Delivered vectors, in order.
    pub raised: Vec<u16>,
}

impl RecordingIrqs {
    /// All 32 vectors connected.
    pub fn all_connected() -> Self {
        Self::with_connected(u32::MAX)
    }

    /// Only the vectors whose bit is set in `mask` are connected.
    pub fn with_connected(mask: u32) -> Self {
        RecordingIrqs {
            connected: mask,
            raised: Vec::new(),
        }
    }
}

impl Default for RecordingIrqs {
    fn default() -> Self {
        Self::all_connected()
    }
}

impl IrqSink for RecordingIrqs {
    fn raise(&mut self, vector: u16) -> bool {
        if vector < MSIX_VECTORS && self.connected & (1 << vector) != 0 {
            self.raised.push(vector);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vec_memory_bounds() {
        let mut m = VecMemory::new(0x1000, 0x100);
        m.write(0x1000, &[1, 2, 3]).unwrap();
        m.write_u64_le(0x10f8, 0x1122_3344_5566_7788).unwrap();
        assert_eq!(m.read_u64_le(0x10f8).unwrap(), 0x1122_3344_5566_7788);
        let mut b = [0u8; 3];
        m.read(0x1000, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3]);
        let e = m.read(0x10ff, &mut [0u8; 2]).unwrap_err();
        assert_eq!((e.at, e.kind), (0x1100, MemErrorKind::Unmapped));
        assert_eq!(
            m.read(0xfff, &mut b).unwrap_err().kind,
            MemErrorKind::Unmapped
        );
        assert_eq!(
            m.write(0x1100, &[0]).unwrap_err().kind,
            MemErrorKind::Unmapped
        );
        let e = m.write(u64::MAX, &[0, 0]).unwrap_err();
        assert_eq!(e.kind, MemErrorKind::Overflow);
        assert!(m.read(0x5000, &mut []).is_ok(), "empty access");
        assert!(!e.to_string().is_empty());
    }

    #[test]
    fn recording_irqs() {
        let mut i = RecordingIrqs::with_connected(0b10);
        assert!(!i.raise(0));
        assert!(i.raise(1));
        assert!(!i.raise(32));
        assert!(!i.raise(u16::MAX));
        assert_eq!(i.raised, vec![1]);
    }
}
