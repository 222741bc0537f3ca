// SPDX-License-Identifier: GPL-2.0

//! Event queues (erdma_rs_hw 4): rings of 16-byte entries the adapter writes and the driver
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
    consts::EQE_SIZE,
    formats::{
        Aeqe,
        Ceqe,
        EqDoorbell,
        EqeWord0, //
    },
    regs::Bar0,
    ring::{
        owner_valid,
        read_entry,
        Doorbell, //
    },
};

/// The memory image of an event-queue entry.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Eqe([u32; EQE_WORDS]);

impl Eqe {
    /// The entry of a completion event queue.
    pub(crate) fn ceqe(&self) -> Option<Ceqe> {
        Ceqe::read_from_prefix(self.0.as_bytes())
            .ok()
            .map(|(e, _)| e)
    }

    /// The entry of the asynchronous event queue.
    pub(crate) fn aeqe(&self) -> Option<Aeqe> {
        Aeqe::read_from_bytes(self.0.as_bytes()).ok()
    }
}

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

    /// Consumes the entries the adapter has written, one ring's worth at most, without reading
    /// their bodies; returns how many there were. For the command queue's EQ, whose entries
    /// only signal completions.
    pub(crate) fn skip_all(&mut self) -> u32 {
        let mut n = 0;
        while n < u32::from(self.depth) && matches!(self.head_valid(), Ok(true)) {
            self.ci = self.ci.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// Whether the entry at the consumer index has been written by the adapter.
    fn head_valid(&self) -> Result<bool> {
        let base = usize::from(self.ci & (self.depth - 1)) * EQE_WORDS;
        let word0 = EqeWord0::from_raw(io_read!(&self.ring, [try: base]));
        Ok(owner_valid(
            word0.owner().into(),
            self.ci.into(),
            self.depth.into(),
        ))
    }

    fn try_pop(&mut self) -> Result<Option<Eqe>> {
        if !self.head_valid()? {
            return Ok(None);
        }
        let base = usize::from(self.ci & (self.depth - 1)) * EQE_WORDS;
        // Read the entry only after seeing its owner bit.
        dma_mb(Read);
        let eqe = Eqe(read_entry(&self.ring, base)?);
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
