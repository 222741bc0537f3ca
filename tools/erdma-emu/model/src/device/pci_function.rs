// SPDX-License-Identifier: GPL-2.0

//! The function's PCI face: its configuration space, and how an access to a BAR is judged:
//! which BAR0 area it falls in (an access that leaves its area or the BAR is refused), and
//! BAR2, whose MSI-X table and PBA QEMU emulates itself. It keeps no register or engine state;
//! it logs odd accesses through the rate limiter the device lends it.

use super::{Oddity, WarnOnce};
use crate::pci::{self, ConfigSpace};
use crate::regs::{self, Bar0Area};

/// The configuration space and the BAR layout.
#[derive(Clone, Debug)]
pub(super) struct PciFunction {
    config_space: ConfigSpace,
    /// Whether BAR0 has the test page (else that page is extended doorbell space).
    test_page: bool,
}

impl PciFunction {
    /// At power-on, with PCI revision `revision`.
    pub(super) fn new(revision: u8, test_page: bool) -> Self {
        PciFunction {
            config_space: ConfigSpace::new(revision),
            test_page,
        }
    }

    /// Returns the configuration space to power-on (a host FLR).
    pub(super) fn reset(&mut self) {
        self.config_space.reset();
    }

    /// The configuration space.
    pub(super) fn config_space(&self) -> &ConfigSpace {
        &self.config_space
    }

    /// Reads configuration space (beyond 256 bytes reads 0, logged).
    pub(super) fn config_read(&self, offset: u64, data: &mut [u8], warned: &mut WarnOnce) {
        check_config_range(offset, data.len(), warned);
        self.config_space.read(offset, data);
    }

    /// Writes configuration space (beyond 256 bytes is dropped, logged).
    pub(super) fn config_write(&mut self, offset: u64, data: &[u8], warned: &mut WarnOnce) {
        check_config_range(offset, data.len(), warned);
        self.config_space.write(offset, data);
    }

    /// An access to BAR2: nothing to do but log one beyond the BAR.
    pub(super) fn bar2_access(&self, offset: u64, len: usize, warned: &mut WarnOnce) {
        let end = offset.checked_add(len as u64);
        if end.is_none_or(|e| e > regs::BAR2_SIZE) && warned.first(Oddity::Bar2OutOfRange, 0) {
            log::warn!("BAR2 access {offset:#x}+{len} beyond the BAR, ignored");
        }
    }

    /// The BAR0 area an access falls in, or `None` (logged) if it leaves its area or BAR0.
    pub(super) fn bar0_area(
        &self,
        offset: u64,
        len: usize,
        dir: &str,
        warned: &mut WarnOnce,
    ) -> Option<Bar0Area> {
        let end = offset.checked_add(len as u64);
        match (regs::bar0_area_with(offset, self.test_page), end) {
            (Some((area, _, area_end)), Some(end)) if end <= area_end => Some(area),
            (Some((area, _, _)), Some(end)) if end <= regs::BAR0_SIZE => {
                if warned.first(Oddity::CrossesArea, offset) {
                    log::warn!(
                        "BAR0 {dir} {offset:#x}+{len} crosses the end of the {}, ignored",
                        area.name()
                    );
                }
                None
            }
            _ => {
                // Keyed by a single slot: offsets beyond the BAR are unbounded.
                if warned.first(Oddity::OutOfRange, 0) {
                    log::warn!("BAR0 {dir} {offset:#x}+{len} beyond the 4 MiB BAR, ignored");
                }
                None
            }
        }
    }
}

/// Logs a configuration-space access beyond its 256 bytes.
fn check_config_range(offset: u64, len: usize, warned: &mut WarnOnce) {
    let end = offset.checked_add(len as u64);
    if end.is_none_or(|e| e > pci::CONFIG_SPACE_SIZE as u64)
        && warned.first(Oddity::ConfigOutOfRange, offset)
    {
        log::warn!("config space access {offset:#x}+{len} beyond 256 bytes (reads 0 there)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar0_accesses_stay_in_their_area() {
        let mut warned = WarnOnce::default();
        let f = PciFunction::new(1, false);
        let area = |f: &PciFunction, off, len, w: &mut WarnOnce| f.bar0_area(off, len, "read", w);
        assert_eq!(area(&f, 0, 4, &mut warned), Some(Bar0Area::Registers));
        assert_eq!(
            area(&f, regs::SQDB_BASE - 4, 8, &mut warned),
            None,
            "crosses into the SQ doorbells"
        );
        assert_eq!(area(&f, regs::BAR0_SIZE, 1, &mut warned), None);
        assert_eq!(area(&f, u64::MAX, 2, &mut warned), None);
        let page = regs::TEST_PAGE_BASE;
        assert_eq!(area(&f, page, 8, &mut warned), Some(Bar0Area::ExtDoorbells));
        let t = PciFunction::new(1, true);
        assert_eq!(area(&t, page, 8, &mut warned), Some(Bar0Area::TestPage));
        assert_eq!(
            area(&t, page - 4, 8, &mut warned),
            None,
            "with the test page, the extended doorbells end below it"
        );
    }

    #[test]
    fn config_space_beyond_256_bytes_reads_0() {
        let mut warned = WarnOnce::default();
        let mut f = PciFunction::new(7, false);
        let mut b = [0xffu8; 4];
        f.config_read(0xfe, &mut b, &mut warned);
        assert_eq!(b[2..], [0, 0]);
        f.config_write(0x1000, &[1], &mut warned);
        f.config_read(0x08, &mut b[..1], &mut warned);
        assert_eq!(b[0], 7, "the revision");
        f.bar2_access(u64::MAX, 8, &mut warned);
    }
}
