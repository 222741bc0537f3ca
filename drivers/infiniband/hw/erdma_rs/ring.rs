// SPDX-License-Identifier: GPL-2.0

//! What the adapter's queues share: the owner-bit rule of the rings it writes, doorbells that
//! mirror every value in a record in host memory, and 64-bit addresses split into register
//! halves.

use kernel::{
    device,
    dma::{
        Coherent,
        DmaAddress, //
    },
    io::{
        io_read,
        io_write,
        Io, //
    },
    prelude::*,
    sync::barrier::{
        dma_mb,
        Write, //
    },
};

use crate::regs::Bar0;

/// Whether the entry at consumer index `ci` of a ring of `depth` entries (a power of two) is
/// valid: the adapter writes owner bit 1 on the first lap, 0 on the second, and so on.
pub(crate) fn owner_valid(owner: u32, ci: u32, depth: u32) -> bool {
    owner & 1 != (ci / depth) & 1
}

/// The high half of a 64-bit address, for `_H` registers and command fields.
pub(crate) fn upper(addr: DmaAddress) -> u32 {
    // CAST: the high half of a 64-bit address.
    (addr >> 32) as u32
}

/// The low half of a 64-bit address, for `_L` registers and command fields.
pub(crate) fn lower(addr: DmaAddress) -> u32 {
    // CAST: the low half of a 64-bit address, truncation intended.
    addr as u32
}

/// Reads word `i` of a ring in coherent memory; an error when `i` is out of range.
pub(crate) fn read32(ring: &Coherent<[u32]>, i: usize) -> Result<u32> {
    Ok(io_read!(ring, [try: i]))
}

/// Reads 64-bit word `i` of a ring or table in coherent memory.
pub(crate) fn read64(ring: &Coherent<[u64]>, i: usize) -> Result<u64> {
    Ok(io_read!(ring, [try: i]))
}

/// Writes 64-bit word `i` of a ring or table the adapter reads.
pub(crate) fn write64(ring: &Coherent<[u64]>, i: usize, v: u64) -> Result {
    io_write!(ring, [try: i], v);
    Ok(())
}

/// Reads the `N` 32-bit words of an entry at word `base` of a ring in coherent memory: the
/// entry's memory image, for a format's `read_from_bytes`.
pub(crate) fn read_entry<const N: usize>(ring: &Coherent<[u32]>, base: usize) -> Result<[u32; N]> {
    let mut words = [0u32; N];
    for (i, w) in words.iter_mut().enumerate() {
        *w = read32(ring, base + i)?;
    }
    Ok(words)
}

/// The memory image `bytes` as 64-bit words, the last one padded with zeroes.
pub(crate) fn words64(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes.chunks(8).map(|chunk| {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        u64::from_ne_bytes(b)
    })
}

/// A 64-bit MMIO doorbell and its doorbell record: 8 bytes of host memory where the adapter can
/// read the last value rung.
pub(crate) struct Doorbell {
    record: Coherent<[u64]>,
    mmio: usize,
}

impl Doorbell {
    /// A doorbell at BAR0 offset `mmio`, with a zeroed record.
    pub(crate) fn new(dev: &device::Device<device::Bound>, mmio: usize) -> Result<Self> {
        Ok(Self {
            record: Coherent::zeroed_slice(dev, 1, GFP_KERNEL)?,
            mmio,
        })
    }

    /// DMA address of the record.
    pub(crate) fn record_addr(&self) -> DmaAddress {
        self.record.dma_address()
    }

    /// Rings `value`: whatever the caller wrote to shared memory before, then the record, then
    /// the MMIO doorbell.
    pub(crate) fn ring(&self, bar: &Bar0<'_>, value: u64) {
        dma_mb(Write);
        let _ = self.write_record(value);
        dma_mb(Write);
        // Cannot fail: doorbell offsets lie inside the register page.
        let _ = bar.try_write64(value, self.mmio);
    }

    fn write_record(&self, value: u64) -> Result {
        write64(&self.record, 0, value)
    }
}

#[kunit_tests(erdma_rs_ring)]
mod tests {
    use super::*;

    #[test]
    fn owner_bit_follows_the_lap() {
        // First lap: the adapter writes owner 1.
        assert!(owner_valid(1, 0, 4));
        assert!(owner_valid(1, 3, 4));
        assert!(!owner_valid(0, 3, 4));
        // Second lap: owner 0 is new, owner 1 is last lap's entry.
        assert!(owner_valid(0, 4, 4));
        assert!(!owner_valid(1, 7, 4));
        // Across the wrap of a 16-bit counter (depths divide 65536).
        assert!(owner_valid(1, 65536, 128));
        assert!(owner_valid(0, 65535, 128));
    }

    #[test]
    fn memory_images() {
        let mut words = words64(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(words.next(), Some(0x0807_0605_0403_0201));
        assert_eq!(words.next(), Some(9));
        assert_eq!(words.next(), None);
    }

    #[test]
    fn address_halves() {
        assert_eq!(upper(0x1234_5678_9abc_def0), 0x1234_5678);
        assert_eq!(lower(0x1234_5678_9abc_def0), 0x9abc_def0);
    }
}
