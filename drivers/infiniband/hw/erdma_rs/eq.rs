// SPDX-License-Identifier: GPL-2.0

//! Event queues (erdma-hw 4): rings of 16-byte entries the adapter writes and the driver
//! consumes: the CMDQ EQ, the asynchronous EQ (AEQ) and the completion EQs (CEQs).

use kernel::{
    device,
    dma::{
        Coherent,
        DmaAddress, //
    },
    io::io_read,
    prelude::*,
    sync::barrier::{
        dma_mb,
        Read, //
    },
};

use crate::{
    regs::EqDoorbell,
    ring::{
        owner_valid,
        Doorbell, //
    },
    Bar0, //
};

/// Size of an event-queue entry.
pub(crate) const EQE_SIZE: usize = 16;

/// An event-queue entry: four little-endian words; bit 31 of the first is the owner bit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Eqe(pub(crate) [u32; 4]);

/// An event-queue ring and its 8-byte doorbell record.
///
/// The consumer index is a 16-bit counter, as in the adapter's interface: depths are powers of
/// two that divide 65536, so the owner-bit lap parity stays consistent across its wrap.
pub(crate) struct EqRing {
    /// The entries, as little-endian words.
    ring: Coherent<[u32]>,
    doorbell: Doorbell,
    depth: u16,
    ci: u16,
}

/// Words per entry.
const EQE_WORDS: usize = EQE_SIZE / 4;

impl EqRing {
    /// Allocates a zeroed ring of `depth` entries (a power of two, at most 32768) whose MMIO
    /// doorbell is at BAR0 offset `doorbell`.
    pub(crate) fn new(
        dev: &device::Device<device::Bound>,
        depth: u16,
        doorbell: usize,
    ) -> Result<Self> {
        if !depth.is_power_of_two() {
            return Err(EINVAL);
        }
        Ok(Self {
            ring: Coherent::zeroed_slice(dev, usize::from(depth) * EQE_WORDS, GFP_KERNEL)?,
            doorbell: Doorbell::new(dev, doorbell)?,
            depth,
            ci: 0,
        })
    }

    /// DMA address of the ring.
    pub(crate) fn dma_addr(&self) -> DmaAddress {
        self.ring.dma_address()
    }

    /// DMA address of the doorbell record.
    pub(crate) fn dbrec_addr(&self) -> DmaAddress {
        self.doorbell.record_addr()
    }

    /// Number of entries.
    pub(crate) fn depth(&self) -> u16 {
        self.depth
    }

    /// Returns the next entry the adapter has written, if any, and consumes it.
    ///
    /// An entry is valid when its owner bit differs from the parity of the consumer's lap.
    pub(crate) fn pop(&mut self) -> Option<Eqe> {
        self.try_pop().ok().flatten()
    }

    fn try_pop(&mut self) -> Result<Option<Eqe>> {
        let base = usize::from(self.ci & (self.depth - 1)) * EQE_WORDS;
        let word0: u32 = io_read!(&self.ring, [try: base]);
        if !owner_valid(word0 >> 31, self.ci.into(), self.depth.into()) {
            return Ok(None);
        }
        // Read the rest of the entry only after seeing its owner bit.
        dma_mb(Read);
        let eqe = Eqe([
            word0,
            io_read!(&self.ring, [try: base + 1]),
            io_read!(&self.ring, [try: base + 2]),
            io_read!(&self.ring, [try: base + 3]),
        ]);
        self.ci = self.ci.wrapping_add(1);
        Ok(Some(eqe))
    }

    /// Tells the adapter how far the driver has consumed and re-arms the queue's interrupt.
    pub(crate) fn arm(&self, bar: &Bar0<'_>) {
        let db = EqDoorbell::zeroed()
            .with_arm(true)
            .with_ci(self.ci)
            .into_raw();
        self.doorbell.ring(bar, db);
    }
}
