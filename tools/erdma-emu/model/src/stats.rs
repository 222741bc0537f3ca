// SPDX-License-Identifier: GPL-2.0

//! The function's traffic counters (erdma_rs_hw 3.6 GET_STATS, §2.2 statistics registers,
//! §9.3 hw counters).
//!
//! The data path counts: every WQE the requester takes from an SQ is a transmit request; every
//! packet it sends (requests and responses) a transmit packet with its payload bytes; every
//! packet it receives a receive packet with its payload bytes. The model has no rate limits and
//! is never disabled, so the GET_STATS drop counters stay at what the control language
//! (`stats ...`) set them to.
//!
//! UD datagrams the data path drops (UD is unreliable: no destination, no receive WQE, Q_Key
//! mismatch, ...) are counted apart, by cause ([`UdDrops`], the control language's
//! `query ud_drops`): they are the model's own counters, not the adapter's.
//!
//! GET_STATS writes the counters in [`Counter::ALL`] order. The statistics registers
//! (`regs::STATS`) read the same counters: erdma_rs_hw lists eleven registers and eleven GET_STATS
//! counters in the same order with matching names (TSO_IN_PKTS / tx_reqs, TSO_OUT_PKTS /
//! tx_packets, TSO_OUT_BYTES / tx_bytes, TX_DROP_PKTS / tx_disable_drop, TX_BPS/PPS_METER_DROP /
//! tx_bps/pps_limit_drop, and the same for RX); the drivers never read the registers, and the
//! model pairs them one to one.

use std::fmt::Write as _;

/// One traffic counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Counter {
    /// Transmit requests (WQEs taken from SQs).
    TxReqs,
    /// Packets sent.
    TxPackets,
    /// Payload bytes sent.
    TxBytes,
    /// Transmit drops: function disabled.
    TxDisableDrop,
    /// Transmit drops: bandwidth limit.
    TxBpsLimitDrop,
    /// Transmit drops: packet-rate limit.
    TxPpsLimitDrop,
    /// Packets received.
    RxPackets,
    /// Payload bytes received.
    RxBytes,
    /// Receive drops: function disabled.
    RxDisableDrop,
    /// Receive drops: bandwidth limit.
    RxBpsLimitDrop,
    /// Receive drops: packet-rate limit.
    RxPpsLimitDrop,
}

impl Counter {
    /// Every counter, in GET_STATS buffer order.
    pub const ALL: [Counter; 11] = [
        Counter::TxReqs,
        Counter::TxPackets,
        Counter::TxBytes,
        Counter::TxDisableDrop,
        Counter::TxBpsLimitDrop,
        Counter::TxPpsLimitDrop,
        Counter::RxPackets,
        Counter::RxBytes,
        Counter::RxDisableDrop,
        Counter::RxBpsLimitDrop,
        Counter::RxPpsLimitDrop,
    ];

    /// The name (the driver's hw counter name without `_cnt`).
    pub fn name(self) -> &'static str {
        match self {
            Counter::TxReqs => "tx_reqs",
            Counter::TxPackets => "tx_packets",
            Counter::TxBytes => "tx_bytes",
            Counter::TxDisableDrop => "tx_disable_drop",
            Counter::TxBpsLimitDrop => "tx_bps_limit_drop",
            Counter::TxPpsLimitDrop => "tx_pps_limit_drop",
            Counter::RxPackets => "rx_packets",
            Counter::RxBytes => "rx_bytes",
            Counter::RxDisableDrop => "rx_disable_drop",
            Counter::RxBpsLimitDrop => "rx_bps_limit_drop",
            Counter::RxPpsLimitDrop => "rx_pps_limit_drop",
        }
    }

    /// Every name, in [`Counter::ALL`] order.
    pub fn names() -> [&'static str; 11] {
        Counter::ALL.map(Counter::name)
    }
}

/// The counters (wrapping 64-bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrafficCounters {
    /// See [`Counter::TxReqs`].
    pub tx_reqs: u64,
    /// See [`Counter::TxPackets`].
    pub tx_packets: u64,
    /// See [`Counter::TxBytes`].
    pub tx_bytes: u64,
    /// See [`Counter::TxDisableDrop`].
    pub tx_disable_drop: u64,
    /// See [`Counter::TxBpsLimitDrop`].
    pub tx_bps_limit_drop: u64,
    /// See [`Counter::TxPpsLimitDrop`].
    pub tx_pps_limit_drop: u64,
    /// See [`Counter::RxPackets`].
    pub rx_packets: u64,
    /// See [`Counter::RxBytes`].
    pub rx_bytes: u64,
    /// See [`Counter::RxDisableDrop`].
    pub rx_disable_drop: u64,
    /// See [`Counter::RxBpsLimitDrop`].
    pub rx_bps_limit_drop: u64,
    /// See [`Counter::RxPpsLimitDrop`].
    pub rx_pps_limit_drop: u64,
}

impl TrafficCounters {
    /// The field of counter `c`.
    pub fn get_mut(&mut self, c: Counter) -> &mut u64 {
        match c {
            Counter::TxReqs => &mut self.tx_reqs,
            Counter::TxPackets => &mut self.tx_packets,
            Counter::TxBytes => &mut self.tx_bytes,
            Counter::TxDisableDrop => &mut self.tx_disable_drop,
            Counter::TxBpsLimitDrop => &mut self.tx_bps_limit_drop,
            Counter::TxPpsLimitDrop => &mut self.tx_pps_limit_drop,
            Counter::RxPackets => &mut self.rx_packets,
            Counter::RxBytes => &mut self.rx_bytes,
            Counter::RxDisableDrop => &mut self.rx_disable_drop,
            Counter::RxBpsLimitDrop => &mut self.rx_bps_limit_drop,
            Counter::RxPpsLimitDrop => &mut self.rx_pps_limit_drop,
        }
    }

    /// The value of counter `c`.
    pub fn get(&self, c: Counter) -> u64 {
        let mut copy = *self;
        *copy.get_mut(c)
    }

    /// The values in [`Counter::ALL`] order.
    pub fn values(&self) -> [u64; 11] {
        Counter::ALL.map(|c| self.get(c))
    }

    /// A WQE taken from an SQ.
    pub fn tx_request(&mut self) {
        self.tx_reqs = self.tx_reqs.wrapping_add(1);
    }

    /// A packet sent with `bytes` of payload.
    pub fn tx_packet(&mut self, bytes: u64) {
        self.tx_packets = self.tx_packets.wrapping_add(1);
        self.tx_bytes = self.tx_bytes.wrapping_add(bytes);
    }

    /// A packet received with `bytes` of payload.
    pub fn rx_packet(&mut self, bytes: u64) {
        self.rx_packets = self.rx_packets.wrapping_add(1);
        self.rx_bytes = self.rx_bytes.wrapping_add(bytes);
    }
}

/// Why a UD datagram was dropped (counted by the device that dropped it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UdDrop {
    /// Sender: the device is not attached to a fabric.
    NoFabric,
    /// Sender: no port owns the destination GID.
    UnknownGid,
    /// Sender: the destination's inbox is full.
    Congested,
    /// Receiver: the destination QPN does not exist.
    NoQp,
    /// Receiver: the destination QP is not a UD QP.
    NotUd,
    /// Receiver: the destination QP is not in RTR, RTS or SQD.
    NotReady,
    /// Receiver: the Q_Key differs from the destination QP's.
    Qkey,
    /// Receiver: no receive WQE posted.
    NoRqe,
}

impl UdDrop {
    /// Every cause, in report order.
    pub const ALL: [UdDrop; 8] = [
        UdDrop::NoFabric,
        UdDrop::UnknownGid,
        UdDrop::Congested,
        UdDrop::NoQp,
        UdDrop::NotUd,
        UdDrop::NotReady,
        UdDrop::Qkey,
        UdDrop::NoRqe,
    ];

    /// The name in `query ud_drops`.
    pub fn name(self) -> &'static str {
        match self {
            UdDrop::NoFabric => "no_fabric",
            UdDrop::UnknownGid => "unknown_gid",
            UdDrop::Congested => "congested",
            UdDrop::NoQp => "no_qp",
            UdDrop::NotUd => "not_ud",
            UdDrop::NotReady => "not_ready",
            UdDrop::Qkey => "qkey",
            UdDrop::NoRqe => "no_rqe",
        }
    }

    /// Position in [`UdDrop::ALL`].
    pub fn index(self) -> usize {
        match self {
            UdDrop::NoFabric => 0,
            UdDrop::UnknownGid => 1,
            UdDrop::Congested => 2,
            UdDrop::NoQp => 3,
            UdDrop::NotUd => 4,
            UdDrop::NotReady => 5,
            UdDrop::Qkey => 6,
            UdDrop::NoRqe => 7,
        }
    }
}

/// Dropped UD datagrams by cause (wrapping 64-bit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdDrops([u64; 8]);

impl UdDrops {
    /// Counts one drop.
    pub fn count(&mut self, cause: UdDrop) {
        let c = &mut self.0[cause.index()];
        *c = c.wrapping_add(1);
    }

    /// Drops for `cause`.
    pub fn get(&self, cause: UdDrop) -> u64 {
        self.0[cause.index()]
    }

    /// Drops for every cause.
    pub fn total(&self) -> u64 {
        self.0.iter().fold(0u64, |t, &n| t.wrapping_add(n))
    }

    /// `ud_drops=<total> <cause>=<n> ...` (the `query ud_drops` reply).
    pub fn report(&self) -> String {
        UdDrop::ALL
            .iter()
            .fold(format!("ud_drops={}", self.total()), |mut s, &c| {
                // Writing to a String cannot fail.
                let _ = write!(s, " {}={}", c.name(), self.get(c));
                s
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_follow_the_counter_order() {
        let mut t = TrafficCounters::default();
        for (i, c) in Counter::ALL.into_iter().enumerate() {
            *t.get_mut(c) = 100 + i as u64;
        }
        assert_eq!(t.values(), core::array::from_fn(|i| 100 + i as u64));
        assert_eq!(
            (t.tx_reqs, t.rx_bytes, t.rx_pps_limit_drop),
            (100, 107, 110)
        );
        t.tx_request();
        t.tx_packet(10);
        t.rx_packet(u64::MAX);
        assert_eq!(
            (
                t.tx_reqs,
                t.tx_packets,
                t.tx_bytes,
                t.rx_packets,
                t.rx_bytes
            ),
            (101, 102, 112, 107, 106),
            "counters wrap"
        );
        assert_eq!(Counter::names()[3], "tx_disable_drop");
        assert_eq!(Counter::RxBpsLimitDrop.name(), "rx_bps_limit_drop");
    }

    #[test]
    fn ud_drops_by_cause() {
        let mut d = UdDrops::default();
        assert_eq!(d.total(), 0);
        d.count(UdDrop::Qkey);
        d.count(UdDrop::Qkey);
        d.count(UdDrop::NoFabric);
        assert_eq!(
            (d.get(UdDrop::Qkey), d.get(UdDrop::NoRqe), d.total()),
            (2, 0, 3)
        );
        assert_eq!(
            d.report(),
            "ud_drops=3 no_fabric=1 unknown_gid=0 congested=0 no_qp=0 not_ud=0 not_ready=0 \
             qkey=2 no_rqe=0"
        );
        let names: std::collections::HashSet<_> = UdDrop::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), UdDrop::ALL.len());
    }
}
