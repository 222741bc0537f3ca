// SPDX-License-Identifier: GPL-2.0

//! vfio-user front end of the eRDMA device model: serves [`erdma_model::Device`]s to QEMU's
//! `vfio-user-pci`, one UNIX socket per device, from one process.
//!
//! The transport is kept apart from the device state machine: [`backend`] turns vfio-user
//! messages into model calls, [`guest_mem`] and [`irqs`] implement the model's
//! [`erdma_model::GuestMemory`] and [`erdma_model::IrqSink`] over QEMU's shared memory and
//! eventfds, [`state`] is what a device's threads share, [`timer`] runs a device's delayed work,
//! [`control`] serves the control socket, [`sockets`] frees and removes socket files, and
//! [`runner`] runs one server thread and one timer thread per device.
//!
//! `unsafe` is confined to this crate (mmap/munmap of guest RAM, signal masks, raw copies); every
//! block carries a `// SAFETY:` comment.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod backend;
pub mod cli;
pub mod control;
pub mod guest_mem;
pub mod irqs;
pub mod logging;
pub mod runner;
pub mod signals;
pub mod sockets;
pub mod state;
pub mod timer;

#[cfg(test)]
mod protocol_tests;
