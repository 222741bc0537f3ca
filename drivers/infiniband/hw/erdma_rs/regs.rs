// SPDX-License-Identifier: GPL-2.0

//! The adapter's register page (BAR0 offsets 0x000-0xfff).

use kernel::{
    fmt,
    io::register,
    num::Bounded,
    pci,
    prelude::*, //
};

/// Size of the register page at the start of BAR0.
pub(crate) const REG_PAGE_SIZE: usize = 0x1000;

/// BAR0, mapped whole; accesses inside the register page are checked at compile time.
pub(crate) type Bar0<'bound> = pci::Bar<'bound, REG_PAGE_SIZE>;

/// The only memory BARs the adapter has: BAR0 (registers and doorbells) and BAR2 (MSI-X).
pub(crate) const MEMORY_BARS: u32 = (1 << 0) | (1 << 2);

register! {
    /// Non-zero on a functional adapter.
    pub(crate) VERSION(u32) @ 0x000 {
        31:0 version;
    }

    /// The protocol the adapter speaks; read once at probe.
    pub(crate) DEV_PROTO(u32) @ 0x00c {
        31:0 protocol ?=> Protocol;
    }

    /// Device control: the driver writes exactly one of the bits.
    pub(crate) DEV_CTRL(u32) @ 0x010 {
        /// Start initialisation once the CMDQ and AEQ rings are programmed.
        1:1 init => bool;
        /// Return the function to its power-on state.
        0:0 reset => bool;
    }

    /// Device status.
    pub(crate) DEV_STATUS(u32) @ 0x014 {
        /// The adapter latched the CMDQ and AEQ rings after `DEV_CTRL.init`.
        1:1 init_done => bool;
        /// A reset completed.
        0:0 reset_done => bool;
    }

    /// MAC address bytes 2..5 of the companion netdev (byte 2 in the most significant bits).
    pub(crate) NETDEV_MAC_L(u32) @ 0x018 {
        31:0 bytes_2_5;
    }

    /// MAC address bytes 0..1 of the companion netdev (byte 0 in bits 15:8).
    pub(crate) NETDEV_MAC_H(u32) @ 0x01c {
        15:0 bytes_0_1;
    }

    /// CMDQ submission ring address, low half.
    pub(crate) CMDQ_SQ_ADDR_L(u32) @ 0x020 { 31:0 value; }
    /// CMDQ submission ring address, high half (written before the low half).
    pub(crate) CMDQ_SQ_ADDR_H(u32) @ 0x024 { 31:0 value; }
    /// CMDQ completion ring address, low half.
    pub(crate) CMDQ_CQ_ADDR_L(u32) @ 0x028 { 31:0 value; }
    /// CMDQ completion ring address, high half.
    pub(crate) CMDQ_CQ_ADDR_H(u32) @ 0x02c { 31:0 value; }
    /// CMDQ submission ring depth in WQEBBs; the completion ring has as many entries.
    pub(crate) CMDQ_DEPTH(u32) @ 0x030 { 31:0 value; }
    /// CMDQ event ring depth in entries.
    pub(crate) CMDQ_EQ_DEPTH(u32) @ 0x034 { 31:0 value; }
    /// CMDQ event ring address, low half.
    pub(crate) CMDQ_EQ_ADDR_L(u32) @ 0x038 { 31:0 value; }
    /// CMDQ event ring address, high half.
    pub(crate) CMDQ_EQ_ADDR_H(u32) @ 0x03c { 31:0 value; }
    /// Asynchronous event ring address, low half.
    pub(crate) AEQ_ADDR_L(u32) @ 0x040 { 31:0 value; }
    /// Asynchronous event ring address, high half.
    pub(crate) AEQ_ADDR_H(u32) @ 0x044 { 31:0 value; }
    /// Asynchronous event ring depth in entries.
    pub(crate) AEQ_DEPTH(u32) @ 0x048 { 31:0 value; }

}

// The 64-bit registers below are written with `try_write64`: the BAR mapping only guarantees
// 4-byte alignment to the compile-time checked accessors.

/// DMA address of the CMDQ submission ring's doorbell record (64-bit).
pub(crate) const CMDQ_SQ_DBREC_ADDR: usize = 0x060;
/// DMA address of the CMDQ completion ring's doorbell record (64-bit).
pub(crate) const CMDQ_CQ_DBREC_ADDR: usize = 0x068;
/// DMA address of the CMDQ event ring's doorbell record (64-bit).
pub(crate) const CMDQ_EQ_DBREC_ADDR: usize = 0x070;
/// DMA address of the AEQ's doorbell record (64-bit).
pub(crate) const AEQ_DBREC_ADDR: usize = 0x078;

/// AEQ doorbell (64-bit, an [`EqDoorbell`](crate::formats::EqDoorbell)).
pub(crate) const AEQ_DB: usize = 0x050;

/// Doorbell of event queue `eqn` (64-bit, an [`EqDoorbell`](crate::formats::EqDoorbell)): 0 is the CMDQ EQ, `n` is CEQ
/// `n - 1`.
pub(crate) const fn eq_db(eqn: u16) -> usize {
    0x100 + 8 * eqn as usize
}

/// CMDQ submission doorbell (64-bit, a [`CmdqSqDoorbell`](crate::formats::CmdqSqDoorbell)).
pub(crate) const CMDQ_SQ_DB: usize = 0x200;

/// CMDQ completion-ring doorbell (64-bit, a [`CqDoorbell`](crate::formats::CqDoorbell)).
pub(crate) const CMDQ_CQ_DB: usize = 0x300;

/// The wire protocol an adapter is configured for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// iWARP: RC only, connections set up by an MPA exchange over kernel TCP sockets.
    Iwarp,
    /// RoCEv2: RC, UD and GSI QPs, a GID table and address handles.
    RoceV2,
}

impl TryFrom<Bounded<u32, 32>> for Protocol {
    type Error = Error;

    fn try_from(value: Bounded<u32, 32>) -> Result<Self> {
        match value.get() {
            0 => Ok(Self::Iwarp),
            1 => Ok(Self::RoceV2),
            _ => Err(ENODEV),
        }
    }
}

impl From<Protocol> for Bounded<u32, 32> {
    fn from(value: Protocol) -> Self {
        match value {
            Protocol::Iwarp => 0u32.into(),
            Protocol::RoceV2 => 1u32.into(),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Iwarp => "iWARP",
            Self::RoceV2 => "RoCEv2",
        })
    }
}

/// An Ethernet MAC address, most significant byte first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MacAddr(pub(crate) [u8; 6]);

impl MacAddr {
    /// Assembles the address from the two MAC registers.
    pub(crate) fn from_regs(low: NETDEV_MAC_L, high: NETDEV_MAC_H) -> Self {
        let [_, _, b0, b1] = high.bytes_0_1().get().to_be_bytes();
        let [b2, b3, b4, b5] = low.bytes_2_5().get().to_be_bytes();
        Self([b0, b1, b2, b3, b4, b5])
    }
}

impl fmt::Display for MacAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

#[kunit_tests(erdma_rs_regs)]
mod tests {
    use super::*;

    #[test]
    fn mac_from_registers() {
        let low = NETDEV_MAC_L::zeroed().with_bytes_2_5(0x1234_5678u32);
        let high = NETDEV_MAC_H::zeroed().with_bytes_0_1(0x5254u16);
        let mac = MacAddr::from_regs(low, high);
        assert_eq!(mac, MacAddr([0x52, 0x54, 0x12, 0x34, 0x56, 0x78]));
    }

    #[test]
    fn mac_ignores_reserved_high_bits() {
        let high = NETDEV_MAC_H::from_raw(0xffff_0a0b);
        let mac = MacAddr::from_regs(NETDEV_MAC_L::zeroed(), high);
        assert_eq!(mac.0, [0x0a, 0x0b, 0, 0, 0, 0]);
    }

    #[test]
    fn protocol_values() {
        assert_eq!(
            Protocol::try_from(Bounded::<u32, 32>::from(0u32)),
            Ok(Protocol::Iwarp)
        );
        assert_eq!(
            Protocol::try_from(Bounded::<u32, 32>::from(1u32)),
            Ok(Protocol::RoceV2)
        );
        assert!(Protocol::try_from(Bounded::<u32, 32>::from(2u32)).is_err());
    }
}
