// SPDX-License-Identifier: GPL-2.0

//! The device's view of the outside world: guest memory (DMA), MSI-X interrupts, and the
//! memory of the process that serves it ([`ProcessMemory`], for `query memory`).
//!
//! The model never touches guest memory or interrupt lines directly; the transport (the
//! vfio-user server) implements these traits, and tests use `crate::testing` (the `testing`
//! feature).

use core::fmt;

/// Why a guest-memory access failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemErrorKind {
    /// Part of the range is not backed by guest memory the device can reach.
    Unmapped,
    /// Part of the range is mapped without the needed permission (for example a write to a
    /// read-only mapping).
    Permission,
    /// The range wraps around the end of the 64-bit address space.
    Overflow,
}

/// A failed guest-memory access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemError {
    /// Guest-physical (IOVA) start of the access.
    pub gpa: u64,
    /// Length of the access in bytes.
    pub len: usize,
    /// Guest-physical address of the first byte that could not be accessed.
    pub at: u64,
    /// What went wrong.
    pub kind: MemErrorKind,
}

impl fmt::Display for MemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            MemErrorKind::Unmapped => "not mapped",
            MemErrorKind::Permission => "not accessible (mapping permissions)",
            MemErrorKind::Overflow => "wraps the address space",
        };
        write!(
            f,
            "guest memory {:#x}+{:#x}: {:#x} {}",
            self.gpa, self.len, self.at, what
        )
    }
}

impl std::error::Error for MemError {}

/// Guest-physical memory as the device sees it through DMA.
///
/// Implementations must check every range and return an error, never panic, for ranges that are
/// not entirely backed by mapped guest memory. A failed access may have transferred a prefix of
/// the range.
pub trait GuestMemory {
    /// Copies `buf.len()` bytes from guest-physical address `gpa` into `buf`.
    fn read(&self, gpa: u64, buf: &mut [u8]) -> Result<(), MemError>;

    /// Copies `data` to guest-physical address `gpa`.
    fn write(&mut self, gpa: u64, data: &[u8]) -> Result<(), MemError>;

    /// Reads a little-endian `u64` (for example a doorbell record).
    fn read_u64_le(&self, gpa: u64) -> Result<u64, MemError> {
        let mut b = [0u8; 8];
        self.read(gpa, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Writes a little-endian `u64`.
    fn write_u64_le(&mut self, gpa: u64, value: u64) -> Result<(), MemError> {
        self.write(gpa, &value.to_le_bytes())
    }
}

/// The MSI-X vectors of the function.
pub trait IrqSink {
    /// Raises MSI-X vector `vector`. Returns whether the interrupt was delivered now. A transport
    /// should remember an interrupt raised while the vector is not connected (no eventfd yet, or
    /// while the guest reprograms MSI-X) and deliver it once the vector is connected: the model
    /// raises each event exactly once.
    fn raise(&mut self, vector: u16) -> bool;

    /// Forgets interrupts remembered for vectors that were not connected (the function was
    /// reset). The default does nothing.
    fn cancel_pending(&mut self) {}
}

/// What a register write may use besides the device state itself.
pub struct Io<'a> {
    /// Guest memory, for DMA.
    pub mem: &'a mut dyn GuestMemory,
    /// Interrupts.
    pub irq: &'a mut dyn IrqSink,
}

impl<'a> Io<'a> {
    /// Bundles guest memory and interrupts.
    pub fn new(mem: &'a mut dyn GuestMemory, irq: &'a mut dyn IrqSink) -> Self {
        Io { mem, irq }
    }
}

/// The resident memory of the process that serves the device, as its host reads it (the
/// server: `/proc/self/status`). The model never looks itself (it is a pure library); without
/// one, `query memory` says `unknown`.
pub trait ProcessMemory: Send + Sync + fmt::Debug {
    /// `(VmRSS, VmHWM)` in bytes, if known.
    fn resident(&self) -> Option<(u64, u64)>;
}

/// `(VmRSS, VmHWM)` in bytes from the text of a `/proc/<pid>/status` file; `None` if either
/// line is missing or malformed. For a [`ProcessMemory`] that reads the file.
pub fn proc_status_memory(status: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().strip_suffix("kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|kib| kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}
