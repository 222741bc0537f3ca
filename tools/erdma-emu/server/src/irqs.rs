// SPDX-License-Identifier: GPL-2.0

//! MSI-X vectors as eventfds (VFIO SET_IRQS semantics).
//!
//! QEMU hands over one eventfd per enabled vector; writing to it makes QEMU inject the MSI-X
//! message the guest programmed in the (QEMU-emulated) MSI-X table. QEMU sends runs of vectors:
//! either a run that all have an fd (one fd per vector) or a run without fds, which disconnects
//! those vectors.
//!
//! An interrupt raised while its vector has no eventfd (MSI-X not enabled yet, or QEMU tearing
//! vectors down and setting them up again when the guest enables more of them) is remembered as
//! pending and delivered as soon as SET_IRQS installs an eventfd for the vector, the way a masked
//! MSI-X vector keeps its pending bit. Without this, an event raised in that window would be lost
//! and the driver would wait forever. Pending interrupts are dropped when the function is reset
//! ([`IrqSink::cancel_pending`]) or the client disconnects.

use std::fs::File;
use std::io::{self, Write};

use erdma_model::regs::MSIX_VECTORS;
use erdma_model::IrqSink;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_TYPE_MASK, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_IRQ_SET_DATA_TYPE_MASK, VFIO_PCI_ERR_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX,
};

/// The eventfds of the MSI-X vectors.
pub struct EventFdIrqs {
    fds: Vec<Option<File>>,
    /// Bit n: vector n was raised while it had no eventfd.
    pending: u32,
}

impl Default for EventFdIrqs {
    fn default() -> Self {
        Self::new()
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

impl EventFdIrqs {
    /// No vector connected.
    pub fn new() -> Self {
        EventFdIrqs {
            fds: (0..MSIX_VECTORS).map(|_| None).collect(),
            pending: 0,
        }
    }

    /// Disconnects every vector; pending interrupts stay pending (MSI-X disabled by the guest or
    /// reprogrammed by QEMU).
    pub fn clear(&mut self) {
        self.fds.iter_mut().for_each(|f| *f = None);
    }

    /// Disconnects every vector and forgets pending interrupts (the client went away).
    pub fn disconnect(&mut self) {
        self.clear();
        self.pending = 0;
    }

    /// Vectors with a pending interrupt (bit n = vector n).
    pub fn pending(&self) -> u32 {
        self.pending
    }

    /// Number of connected vectors.
    pub fn connected(&self) -> usize {
        self.fds.iter().filter(|f| f.is_some()).count()
    }

    /// Whether `vector` has an eventfd.
    pub fn is_connected(&self, vector: u16) -> bool {
        self.fds
            .get(usize::from(vector))
            .is_some_and(Option::is_some)
    }

    /// Handles a SET_IRQS message.
    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        let data = flags & VFIO_IRQ_SET_DATA_TYPE_MASK;
        let action = flags & VFIO_IRQ_SET_ACTION_TYPE_MASK;
        if index == VFIO_PCI_ERR_IRQ_INDEX && start == 0 && count <= 1 {
            // The error IRQ is never raised: accept and drop its eventfd.
            return Ok(());
        }
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            // Only MSI-X exists; disabling another (empty) index is harmless.
            if count == 0 && fds.is_empty() {
                return Ok(());
            }
            return Err(invalid(format!(
                "SET_IRQS: IRQ index {index} has no vectors"
            )));
        }
        if action != VFIO_IRQ_SET_ACTION_TRIGGER {
            // MASK/UNMASK: QEMU masks MSI-X vectors in its own table emulation.
            log::debug!("SET_IRQS: MSI-X action {action:#x} ignored");
            return Ok(());
        }
        let range = start
            .checked_add(count)
            .filter(|&end| end <= u32::from(MSIX_VECTORS))
            .map(|end| start as usize..end as usize)
            .ok_or_else(|| invalid(format!("SET_IRQS: vectors {start}+{count} out of range")))?;
        match data {
            VFIO_IRQ_SET_DATA_NONE if count == 0 => {
                log::debug!("MSI-X disabled: all vectors disconnected");
                self.clear();
            }
            VFIO_IRQ_SET_DATA_NONE => {
                // Loopback trigger of the given vectors.
                for v in range {
                    self.raise(v as u16);
                }
            }
            VFIO_IRQ_SET_DATA_EVENTFD if fds.is_empty() => {
                self.fds[range].iter_mut().for_each(|f| *f = None);
            }
            VFIO_IRQ_SET_DATA_EVENTFD if fds.len() == range.len() => {
                for (slot, fd) in self.fds[range.clone()].iter_mut().zip(fds) {
                    *slot = Some(fd);
                }
                self.deliver_pending(range);
            }
            VFIO_IRQ_SET_DATA_EVENTFD => {
                return Err(invalid(format!(
                    "SET_IRQS: {} eventfds for {count} vectors",
                    fds.len()
                )));
            }
            _ => {
                return Err(invalid(format!(
                    "SET_IRQS: unsupported data type {data:#x}"
                )))
            }
        }
        log::debug!(
            "MSI-X vectors {start}+{count} updated, {} connected",
            self.connected()
        );
        Ok(())
    }

    /// Delivers the pending interrupts of the vectors in `range` that now have an eventfd.
    fn deliver_pending(&mut self, range: std::ops::Range<usize>) {
        for v in range {
            let bit = 1u32 << v;
            if self.pending & bit != 0 && self.fds[v].is_some() {
                self.pending &= !bit;
                log::debug!("MSI-X vector {v}: delivering the pending interrupt");
                self.raise(v as u16);
            }
        }
    }
}

impl IrqSink for EventFdIrqs {
    fn raise(&mut self, vector: u16) -> bool {
        let Some(slot) = self.fds.get_mut(usize::from(vector)) else {
            return false;
        };
        let Some(fd) = slot else {
            log::debug!("MSI-X vector {vector} has no eventfd: interrupt kept pending");
            self.pending |= 1 << vector;
            return false;
        };
        match fd.write(&1u64.to_ne_bytes()) {
            Ok(8) => true,
            Ok(n) => {
                log::warn!("MSI-X vector {vector}: short eventfd write ({n} bytes)");
                false
            }
            Err(e) => {
                log::warn!("MSI-X vector {vector}: eventfd write failed: {e}");
                false
            }
        }
    }

    fn cancel_pending(&mut self) {
        self.pending = 0;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::FromRawFd;

    /// A non-blocking eventfd.
    pub(crate) fn eventfd() -> File {
        // SAFETY: plain eventfd creation; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd: {}", io::Error::last_os_error());
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        unsafe { File::from_raw_fd(fd) }
    }

    /// The eventfd counter (0 if not signalled); resets it.
    pub(crate) fn take_count(f: &File) -> u64 {
        let mut b = [0u8; 8];
        match (&*f).read(&mut b) {
            Ok(8) => u64::from_ne_bytes(b),
            _ => 0,
        }
    }

    const TRIGGER_EVENTFD: u32 = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    const TRIGGER_NONE: u32 = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;

    #[test]
    fn runs_of_fds_and_gaps() {
        let mut irqs = EventFdIrqs::new();
        let efd: Vec<File> = (0..3).map(|_| eventfd()).collect();
        let dup = |f: &File| f.try_clone().unwrap();
        let m = VFIO_PCI_MSIX_IRQ_INDEX;
        irqs.set_irqs(m, TRIGGER_EVENTFD, 0, 1, vec![dup(&efd[0])])
            .unwrap();
        irqs.set_irqs(m, TRIGGER_EVENTFD, 1, 2, vec![]).unwrap(); // a run of -1
        irqs.set_irqs(m, TRIGGER_EVENTFD, 3, 2, vec![dup(&efd[1]), dup(&efd[2])])
            .unwrap();
        assert_eq!(irqs.connected(), 3);
        assert!(irqs.is_connected(0) && !irqs.is_connected(1) && irqs.is_connected(4));
        assert!(irqs.raise(0));
        assert!(!irqs.raise(1));
        assert!(irqs.raise(4));
        assert!(irqs.raise(4));
        assert!(!irqs.raise(32));
        assert_eq!(take_count(&efd[0]), 1);
        assert_eq!(take_count(&efd[1]), 0);
        assert_eq!(take_count(&efd[2]), 2);
        // Loopback trigger.
        irqs.set_irqs(m, TRIGGER_NONE, 3, 1, vec![]).unwrap();
        assert_eq!(take_count(&efd[1]), 1);
        // Disconnect vector 3, then disable everything.
        irqs.set_irqs(m, TRIGGER_EVENTFD, 3, 1, vec![]).unwrap();
        assert!(!irqs.raise(3));
        irqs.set_irqs(m, TRIGGER_NONE, 0, 0, vec![]).unwrap();
        assert_eq!(irqs.connected(), 0);
    }

    #[test]
    fn interrupts_without_an_eventfd_are_delivered_later() {
        let mut irqs = EventFdIrqs::new();
        let m = VFIO_PCI_MSIX_IRQ_INDEX;
        // Raised before MSI-X is enabled: pending, coalesced.
        assert!(!irqs.raise(0));
        assert!(!irqs.raise(0));
        assert!(!irqs.raise(3));
        assert!(!irqs.raise(40), "out of range: not remembered");
        assert_eq!(irqs.pending(), 0b1001);
        // QEMU enables vector 0 only: its interrupt arrives once.
        let e0 = eventfd();
        irqs.set_irqs(m, TRIGGER_EVENTFD, 0, 1, vec![e0.try_clone().unwrap()])
            .unwrap();
        assert_eq!(take_count(&e0), 1);
        assert_eq!(irqs.pending(), 0b1000);
        // QEMU tears all vectors down to re-enable more of them; an event raised in between
        // is not lost.
        irqs.set_irqs(m, TRIGGER_NONE, 0, 0, vec![]).unwrap();
        assert!(!irqs.raise(0));
        let (f0, f3) = (eventfd(), eventfd());
        let fds = vec![
            f0.try_clone().unwrap(),
            eventfd(),
            eventfd(),
            f3.try_clone().unwrap(),
        ];
        irqs.set_irqs(m, TRIGGER_EVENTFD, 0, 4, fds).unwrap();
        assert_eq!((take_count(&f0), take_count(&f3)), (1, 1));
        assert_eq!(irqs.pending(), 0);
        assert!(irqs.raise(3));
        assert_eq!(take_count(&f3), 1);
        // A reset or a disconnect drops pending interrupts.
        irqs.set_irqs(m, TRIGGER_EVENTFD, 3, 1, vec![]).unwrap();
        assert!(!irqs.raise(3));
        irqs.cancel_pending();
        assert_eq!(irqs.pending(), 0);
        assert!(!irqs.raise(3));
        irqs.disconnect();
        assert_eq!((irqs.pending(), irqs.connected()), (0, 0));
    }

    #[test]
    fn bad_requests() {
        let mut irqs = EventFdIrqs::new();
        let m = VFIO_PCI_MSIX_IRQ_INDEX;
        assert!(irqs.set_irqs(m, TRIGGER_EVENTFD, 31, 2, vec![]).is_err());
        assert!(irqs
            .set_irqs(m, TRIGGER_EVENTFD, u32::MAX, 2, vec![])
            .is_err());
        assert!(irqs
            .set_irqs(m, TRIGGER_EVENTFD, 0, 2, vec![eventfd()])
            .is_err());
        assert!(irqs
            .set_irqs(0, TRIGGER_EVENTFD, 0, 1, vec![eventfd()])
            .is_err());
        assert!(irqs.set_irqs(0, TRIGGER_NONE, 0, 0, vec![]).is_ok());
        assert_eq!(irqs.connected(), 0);
    }
}
