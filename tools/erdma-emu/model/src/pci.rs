// SPDX-License-Identifier: GPL-2.0

//! Type-0 PCI configuration space (256 bytes) of the eRDMA function.
//!
//! QEMU's vfio-user client virtualises parts of config space itself (BAR addresses, the MSI-X
//! control bits), but it reads the device's copy to learn BAR types and the capability layout and
//! writes everything through, so the model behaves like hardware: read-only identification,
//! BAR sizing through write masks, a capability list with one MSI-X capability.
//!
//! Layout:
//!
//! | Offset | Contents |
//! |---|---|
//! | 0x00 | vendor 0x1ded, device 0x107f (read-only) |
//! | 0x04 | command (IO, MEM, MASTER, PARITY, SERR, INTX_DISABLE writable), status (capability list) |
//! | 0x08 | revision (configurable), class code [`CLASS_CODE`] |
//! | 0x10/0x14 | BAR0/BAR1: 64-bit non-prefetchable memory BAR of [`regs::BAR0_SIZE`] |
//! | 0x18/0x1c | BAR2/BAR3: 64-bit non-prefetchable memory BAR of [`regs::BAR2_SIZE`] (MSI-X) |
//! | 0x20/0x24 | BAR4/BAR5: not implemented (read 0, size 0) |
//! | 0x2c | subsystem vendor 0x1ded, subsystem 0x107f |
//! | 0x34 | capability pointer 0x40 |
//! | 0x3c | interrupt line (RW), interrupt pin 0 (no INTx) |
//! | 0x40 | MSI-X capability: 32 vectors, table BIR 2 offset 0, PBA BIR 2 offset 0x1000 |

use crate::regs;

/// Size of the configuration space.
pub const CONFIG_SPACE_SIZE: usize = 256;

/// Alibaba's PCI vendor ID.
pub const VENDOR_ID: u16 = 0x1ded;
/// The eRDMA device ID (the only one the drivers match).
pub const DEVICE_ID: u16 = 0x107f;
/// Subsystem vendor ID.
pub const SUBSYSTEM_VENDOR_ID: u16 = VENDOR_ID;
/// Subsystem ID.
pub const SUBSYSTEM_ID: u16 = DEVICE_ID;
/// Class code 0x028000: network controller (0x02), subclass "other" (0x80), programming
/// interface 0.
///
/// Neither driver nor rdma-core checks the class. eRDMA is an RDMA function of an Ethernet
/// adapter (iWARP or RoCEv2 over the VPC network), not an InfiniBand HCA, so "network controller /
/// other" describes it better than InfiniBand (0x0c06), and tools such as `lspci` show it as a
/// network device.
pub const CLASS_CODE: u32 = 0x02_80_00;
/// Default revision ID; the driver reports it as `hw_ver`.
pub const DEFAULT_REVISION: u8 = 0x01;

/// Offset of the vendor ID.
pub const PCI_VENDOR_ID: usize = 0x00;
/// Offset of the device ID.
pub const PCI_DEVICE_ID: usize = 0x02;
/// Offset of the command register.
pub const PCI_COMMAND: usize = 0x04;
/// Offset of the status register.
pub const PCI_STATUS: usize = 0x06;
/// Offset of the revision ID.
pub const PCI_REVISION_ID: usize = 0x08;
/// Offset of the class code (3 bytes: prog-if, subclass, class).
pub const PCI_CLASS_PROG: usize = 0x09;
/// Offset of the header type.
pub const PCI_HEADER_TYPE: usize = 0x0e;
/// Offset of BAR0; BAR n is at `PCI_BASE_ADDRESS_0 + 4 * n`.
pub const PCI_BASE_ADDRESS_0: usize = 0x10;
/// Offset of the subsystem vendor ID.
pub const PCI_SUBSYSTEM_VENDOR_ID: usize = 0x2c;
/// Offset of the subsystem ID.
pub const PCI_SUBSYSTEM_ID: usize = 0x2e;
/// Offset of the expansion ROM BAR.
pub const PCI_ROM_ADDRESS: usize = 0x30;
/// Offset of the capability pointer.
pub const PCI_CAPABILITY_LIST: usize = 0x34;
/// Offset of the interrupt line.
pub const PCI_INTERRUPT_LINE: usize = 0x3c;
/// Offset of the interrupt pin.
pub const PCI_INTERRUPT_PIN: usize = 0x3d;

/// Command register: I/O space enable.
pub const PCI_COMMAND_IO: u16 = 1 << 0;
/// Command register: memory space enable.
pub const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: bus master enable.
pub const PCI_COMMAND_MASTER: u16 = 1 << 2;
/// Command register: parity error response.
pub const PCI_COMMAND_PARITY: u16 = 1 << 6;
/// Command register: SERR# enable.
pub const PCI_COMMAND_SERR: u16 = 1 << 8;
/// Command register: INTx emulation disable.
pub const PCI_COMMAND_INTX_DISABLE: u16 = 1 << 10;
/// Writable bits of the command register.
pub const PCI_COMMAND_WRITABLE: u16 = PCI_COMMAND_IO
    | PCI_COMMAND_MEMORY
    | PCI_COMMAND_MASTER
    | PCI_COMMAND_PARITY
    | PCI_COMMAND_SERR
    | PCI_COMMAND_INTX_DISABLE;
/// Status register: the capability list is present.
pub const PCI_STATUS_CAP_LIST: u16 = 1 << 4;

/// BAR type bits of a 64-bit non-prefetchable memory BAR.
pub const PCI_BASE_ADDRESS_MEM_TYPE_64: u32 = 0b100;

/// Offset of the MSI-X capability.
pub const MSIX_CAP_OFFSET: usize = 0x40;
/// MSI-X capability ID.
pub const PCI_CAP_ID_MSIX: u8 = 0x11;
/// MSI-X message control: MSI-X enable.
pub const PCI_MSIX_FLAGS_ENABLE: u16 = 1 << 15;
/// MSI-X message control: function mask.
pub const PCI_MSIX_FLAGS_MASKALL: u16 = 1 << 14;
/// MSI-X message control: table size (N - 1).
pub const PCI_MSIX_FLAGS_QSIZE: u16 = 0x7ff;

/// The configuration space of one function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigSpace {
    data: [u8; CONFIG_SPACE_SIZE],
    wmask: [u8; CONFIG_SPACE_SIZE],
    power_on: [u8; CONFIG_SPACE_SIZE],
}

impl ConfigSpace {
    /// The power-on configuration space of an eRDMA function with the given revision ID.
    pub fn new(revision: u8) -> Self {
        let mut c = ConfigSpace {
            data: [0; CONFIG_SPACE_SIZE],
            wmask: [0; CONFIG_SPACE_SIZE],
            power_on: [0; CONFIG_SPACE_SIZE],
        };
        c.put16(PCI_VENDOR_ID, VENDOR_ID);
        c.put16(PCI_DEVICE_ID, DEVICE_ID);
        c.wmask16(PCI_COMMAND, PCI_COMMAND_WRITABLE);
        c.put16(PCI_STATUS, PCI_STATUS_CAP_LIST);
        c.data[PCI_REVISION_ID] = revision;
        c.data[PCI_CLASS_PROG..PCI_CLASS_PROG + 3].copy_from_slice(&CLASS_CODE.to_le_bytes()[..3]);
        c.data[PCI_HEADER_TYPE] = 0; // type 0, single function
        c.memory_bar64(0, regs::BAR0_SIZE);
        c.memory_bar64(2, regs::BAR2_SIZE);
        c.put16(PCI_SUBSYSTEM_VENDOR_ID, SUBSYSTEM_VENDOR_ID);
        c.put16(PCI_SUBSYSTEM_ID, SUBSYSTEM_ID);
        c.data[PCI_CAPABILITY_LIST] = MSIX_CAP_OFFSET as u8;
        c.wmask[PCI_INTERRUPT_LINE] = 0xff;
        c.data[PCI_INTERRUPT_PIN] = 0;

        let o = MSIX_CAP_OFFSET;
        c.data[o] = PCI_CAP_ID_MSIX;
        c.data[o + 1] = 0; // end of the capability list
        c.put16(o + 2, regs::MSIX_VECTORS - 1);
        c.wmask16(o + 2, PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL);
        c.put32(o + 4, regs::MSIX_TABLE_OFFSET | u32::from(regs::MSIX_BAR));
        c.put32(o + 8, regs::MSIX_PBA_OFFSET | u32::from(regs::MSIX_BAR));

        c.power_on = c.data;
        c
    }

    /// Returns the configuration space to its power-on contents.
    pub fn reset(&mut self) {
        self.data = self.power_on;
    }

    /// Reads `out.len()` bytes at `offset`. Bytes beyond the 256-byte space read as 0.
    pub fn read(&self, offset: u64, out: &mut [u8]) {
        for (i, b) in out.iter_mut().enumerate() {
            *b = Self::index(offset, i).map_or(0, |o| self.data[o]);
        }
    }

    /// Writes `data` at `offset`, through the write mask: read-only bits keep their value.
    /// Bytes beyond the 256-byte space are ignored.
    pub fn write(&mut self, offset: u64, data: &[u8]) {
        for (i, &b) in data.iter().enumerate() {
            if let Some(o) = Self::index(offset, i) {
                let m = self.wmask[o];
                self.data[o] = (self.data[o] & !m) | (b & m);
            }
        }
    }

    /// The raw 256 bytes.
    pub fn bytes(&self) -> &[u8; CONFIG_SPACE_SIZE] {
        &self.data
    }

    /// The command register.
    pub fn command(&self) -> u16 {
        self.get16(PCI_COMMAND)
    }

    /// Whether the function may initiate DMA (command register bus-master bit).
    pub fn bus_master(&self) -> bool {
        self.command() & PCI_COMMAND_MASTER != 0
    }

    /// Whether memory decoding is enabled (command register memory bit).
    pub fn memory_enabled(&self) -> bool {
        self.command() & PCI_COMMAND_MEMORY != 0
    }

    /// The MSI-X message control word.
    pub fn msix_control(&self) -> u16 {
        self.get16(MSIX_CAP_OFFSET + 2)
    }

    /// Whether MSI-X is enabled and the function is not masked.
    pub fn msix_enabled(&self) -> bool {
        let ctl = self.msix_control();
        ctl & PCI_MSIX_FLAGS_ENABLE != 0 && ctl & PCI_MSIX_FLAGS_MASKALL == 0
    }

    fn index(offset: u64, i: usize) -> Option<usize> {
        let o = usize::try_from(offset).ok()?.checked_add(i)?;
        (o < CONFIG_SPACE_SIZE).then_some(o)
    }

    /// Declares BAR `n` (and `n + 1`, its upper half) as a 64-bit non-prefetchable memory BAR.
    fn memory_bar64(&mut self, n: usize, size: u64) {
        debug_assert!(size.is_power_of_two() && size >= 16);
        let off = PCI_BASE_ADDRESS_0 + 4 * n;
        let mask = !(size - 1);
        self.put32(off, PCI_BASE_ADDRESS_MEM_TYPE_64);
        self.wmask32(off, (mask as u32) & !0xf);
        self.wmask32(off + 4, (mask >> 32) as u32);
    }

    fn get16(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.data[off], self.data[off + 1]])
    }

    fn put16(&mut self, off: usize, v: u16) {
        self.data[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn put32(&mut self, off: usize, v: u32) {
        self.data[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }

    fn wmask16(&mut self, off: usize, v: u16) {
        self.wmask[off..off + 2].copy_from_slice(&v.to_le_bytes());
    }

    fn wmask32(&mut self, off: usize, v: u32) {
        self.wmask[off..off + 4].copy_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rd(c: &ConfigSpace, off: usize, len: usize) -> u32 {
        let mut b = [0u8; 4];
        c.read(off as u64, &mut b[..len]);
        u32::from_le_bytes(b)
    }

    fn wr(c: &mut ConfigSpace, off: usize, len: usize, v: u32) {
        c.write(off as u64, &v.to_le_bytes()[..len]);
    }

    /// Writes all-ones to a BAR and returns what reads back.
    fn size_probe(c: &mut ConfigSpace, bar: usize) -> u32 {
        wr(c, PCI_BASE_ADDRESS_0 + 4 * bar, 4, 0xffff_ffff);
        rd(c, PCI_BASE_ADDRESS_0 + 4 * bar, 4)
    }

    #[test]
    fn identification_is_read_only() {
        let mut c = ConfigSpace::new(0x07);
        let before = *c.bytes();
        assert_eq!(rd(&c, 0, 4), 0x107f_1ded);
        assert_eq!(rd(&c, 8, 4), 0x0280_0007, "class 0x028000, revision 7");
        assert_eq!(rd(&c, 0x2c, 4), 0x107f_1ded);
        for off in [0x00, 0x08, 0x0c, 0x2c, 0x34, 0x3c] {
            wr(&mut c, off, 4, 0);
            wr(&mut c, off, 4, 0xffff_ffff);
        }
        assert_eq!(rd(&c, 0, 4), 0x107f_1ded);
        assert_eq!(rd(&c, 8, 4), 0x0280_0007);
        assert_eq!(rd(&c, 0x2c, 4), 0x107f_1ded);
        assert_eq!(c.bytes()[PCI_CAPABILITY_LIST], 0x40);
        assert_eq!(c.bytes()[PCI_HEADER_TYPE], 0);
        assert_eq!(c.bytes()[PCI_INTERRUPT_PIN], 0, "no INTx");
        assert_eq!(c.bytes()[PCI_INTERRUPT_LINE], 0xff, "interrupt line is RW");
        assert_eq!(&c.bytes()[..PCI_COMMAND], &before[..PCI_COMMAND]);
        assert_eq!(rd(&c, 0x0c, 4), 0, "cache line, latency, header type, BIST");
    }

    #[test]
    fn default_revision_is_one() {
        assert_eq!(
            ConfigSpace::new(DEFAULT_REVISION).bytes()[PCI_REVISION_ID],
            1
        );
    }

    #[test]
    fn command_register_writable_bits() {
        let mut c = ConfigSpace::new(1);
        assert_eq!(c.command(), 0);
        assert!(!c.bus_master() && !c.memory_enabled());
        wr(&mut c, PCI_COMMAND, 2, 0xffff);
        assert_eq!(c.command(), 0x0547);
        assert!(c.bus_master() && c.memory_enabled());
        wr(&mut c, PCI_COMMAND, 2, PCI_COMMAND_MEMORY as u32);
        assert!(!c.bus_master() && c.memory_enabled());
        // The status register is read-only (nothing W1C is ever set).
        wr(&mut c, PCI_STATUS, 2, 0xffff);
        assert_eq!(rd(&c, PCI_STATUS, 2), PCI_STATUS_CAP_LIST as u32);
    }

    #[test]
    fn bar0_is_a_4mib_64bit_memory_bar() {
        let mut c = ConfigSpace::new(1);
        assert_eq!(rd(&c, 0x10, 4), 0x4, "64-bit, non-prefetchable, memory");
        assert_eq!(size_probe(&mut c, 0), 0xffc0_0004, "4 MiB");
        assert_eq!(size_probe(&mut c, 1), 0xffff_ffff, "upper half");
        wr(&mut c, 0x10, 4, 0xfe00_0000);
        wr(&mut c, 0x14, 4, 0x1);
        assert_eq!(rd(&c, 0x10, 4), 0xfe00_0004);
        assert_eq!(rd(&c, 0x14, 4), 0x1);
        // Low address bits inside the BAR are hard-wired to zero.
        wr(&mut c, 0x10, 4, 0xfe12_3458);
        assert_eq!(rd(&c, 0x10, 4), 0xfe00_0004);
    }

    #[test]
    fn bar2_is_an_8kib_64bit_memory_bar() {
        let mut c = ConfigSpace::new(1);
        assert_eq!(rd(&c, 0x18, 4), 0x4);
        assert_eq!(size_probe(&mut c, 2), 0xffff_e004, "8 KiB");
        assert_eq!(size_probe(&mut c, 3), 0xffff_ffff, "upper half");
    }

    #[test]
    fn memory_bars_are_exactly_bar0_and_bar2() {
        let mut c = ConfigSpace::new(1);
        // What the driver computes: the set of BARs that are memory BARs with a non-zero size,
        // skipping the upper halves of 64-bit BARs.
        let mut mem_bars = 0u32;
        let mut n = 0;
        while n < 6 {
            let orig = rd(&c, PCI_BASE_ADDRESS_0 + 4 * n, 4);
            let probe = size_probe(&mut c, n);
            let is64 = orig & 0x7 == PCI_BASE_ADDRESS_MEM_TYPE_64;
            if orig & 1 == 0 && probe & !0xf != 0 {
                mem_bars |= 1 << n;
            }
            n += if is64 { 2 } else { 1 };
        }
        assert_eq!(mem_bars, 0b101);
        // BAR4, BAR5 and the ROM BAR do not exist: they read 0 and size to 0.
        for off in [0x20, 0x24, PCI_ROM_ADDRESS] {
            wr(&mut c, off, 4, 0xffff_ffff);
            assert_eq!(rd(&c, off, 4), 0, "offset {off:#x}");
        }
    }

    #[test]
    fn msix_capability_layout() {
        let mut c = ConfigSpace::new(1);
        assert_ne!(rd(&c, PCI_STATUS, 2) & PCI_STATUS_CAP_LIST as u32, 0);
        assert_eq!(rd(&c, PCI_CAPABILITY_LIST, 1), 0x40);
        let hdr = rd(&c, 0x40, 4);
        assert_eq!(hdr & 0xff, 0x11, "MSI-X");
        assert_eq!((hdr >> 8) & 0xff, 0, "last capability");
        assert_eq!((hdr >> 16) & 0x7ff, 31, "32 vectors, N-1 encoded");
        assert_eq!(rd(&c, 0x44, 4), 0x0000_0002, "table: BIR 2, offset 0");
        assert_eq!(rd(&c, 0x48, 4), 0x0000_1002, "PBA: BIR 2, offset 0x1000");
        // Only enable and function mask are writable.
        wr(&mut c, 0x40, 4, 0xffff_ffff);
        wr(&mut c, 0x44, 4, 0xffff_ffff);
        wr(&mut c, 0x48, 4, 0xffff_ffff);
        assert_eq!(rd(&c, 0x40, 4), 0xc01f_0011);
        assert_eq!(rd(&c, 0x44, 4), 0x2);
        assert_eq!(rd(&c, 0x48, 4), 0x1002);
        assert!(!c.msix_enabled(), "function masked");
        wr(&mut c, 0x42, 2, 0x8000);
        assert!(c.msix_enabled());
        assert_eq!(c.msix_control() & PCI_MSIX_FLAGS_QSIZE, 31);
    }

    #[test]
    fn sub_word_and_out_of_range_accesses() {
        let mut c = ConfigSpace::new(1);
        assert_eq!(
            rd(&c, 1, 2),
            0x7f1d,
            "unaligned read spans vendor and device ID"
        );
        let mut tail = [0xaau8; 8];
        c.read(252, &mut tail);
        assert_eq!(tail, [0; 8]);
        c.read(u64::MAX, &mut tail);
        assert_eq!(tail, [0; 8]);
        c.write(u64::MAX - 2, &[0xff; 8]);
        c.write(250, &[0xff; 64]);
        wr(&mut c, PCI_COMMAND + 1, 1, 0xff);
        assert_eq!(
            c.command(),
            0x0500,
            "byte write to the upper half of command"
        );
    }

    #[test]
    fn reset_restores_power_on() {
        let mut c = ConfigSpace::new(3);
        let power_on = *c.bytes();
        wr(&mut c, PCI_COMMAND, 2, 0x0006);
        wr(&mut c, 0x10, 4, 0xfe00_0000);
        wr(&mut c, 0x1c, 4, 0x2);
        wr(&mut c, PCI_INTERRUPT_LINE, 1, 11);
        wr(&mut c, 0x42, 2, 0xc000);
        assert!(c.bus_master());
        c.reset();
        assert_eq!(c.bytes(), &power_on);
        assert!(!c.bus_master());
    }
}
