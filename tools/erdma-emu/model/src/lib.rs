// SPDX-License-Identifier: GPL-2.0

//! Software model of Alibaba's Elastic RDMA Adapter (eRDMA, PCI 1ded:107f).
//!
//! The model implements the adapter's behaviour against small traits for the outside world
//! ([`GuestMemory`], [`IrqSink`]), so it is unit-tested without QEMU; a transport (the `erdma-emu`
//! vfio-user server) connects it to a VM. It treats everything the guest writes as hostile: no
//! access, of any size at any offset, panics or reaches outside guest memory.
//!
//! * [`pci`]: the PCI configuration space (identity, BARs, MSI-X capability).
//! * [`regs`]: the BAR0 address map, register offsets and doorbell values, decoded in one place.
//! * [`device`]: the function's state machine: [`Device`], configured by a [`DeviceConfig`]
//!   (with [`Caps`]), including the command-queue engine.
//! * [`cmdq`]: command-queue wire formats: header, opcode table, status codes, CQE, requests.
//! * [`eq`]: the event-queue ring engine (CMDQ EQ, AEQ, CEQs) and entry formats.
//! * [`extdb`]: extended doorbell pages (ALLOC_DB/FREE_DB).
//! * [`roce`]: RoCEv2 addressing state: the GID table (SET_GID) and address handles
//!   (CREATE_AH/DESTROY_AH).
//! * [`wire`]: data-path formats: QP/CQ/MR commands, WQEs, RQEs, CQEs, doorbell values.
//! * [`mtt`]: address translation for queues and MRs.
//! * [`fabric`]: the in-process network connecting devices (RC messages by GID and QPN).
//! * [`ratelimit`]: rate limits of the log lines a guest can trigger.
//! * [`control`]: the fault-injection and inspection language (control socket, test page).
//! * [`caps`]: the capabilities reported by QUERY_DEVICE.
//! * [`io`], [`clock`]: the traits through which the device reaches guest memory, interrupts
//!   and time.
//! * `testing` (only with `cfg(test)` or the `testing` feature, never in a release build of
//!   the server): simple implementations of those traits, and a driver double, for tests.
//!
//! The hardware interface is described in `Documentation/infiniband/erdma_rs_hw.rst`; comments
//! cite its sections as `erdma_rs_hw N.M` (or `§N.M`).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod caps;
pub mod clock;
pub mod cmdq;
pub mod control;
pub mod device;
pub mod eq;
pub mod extdb;
pub mod fabric;
pub mod io;
pub mod mtt;
pub mod pci;
pub mod ratelimit;
pub mod regs;
pub mod roce;
pub mod stats;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod wire;

pub use caps::Caps;
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use device::{AdminQueues, Device, DeviceConfig, Protocol, RingConfig};
pub use eq::PostError;
pub use io::{proc_status_memory, GuestMemory, Io, IrqSink, MemError, MemErrorKind, ProcessMemory};
