// SPDX-License-Identifier: GPL-2.0

//! UD (and the GSI QP): datagrams out of UD SEND WQEs, and datagrams in, consuming one RQE
//! each; drops counted by cause.

use super::receive::scatter;
use super::{DataPath, UD_DEFAULT_MTU};
use crate::cmdq::Gid;
use crate::device::Oddity;
use crate::fabric::{Body, Datagram, Packet, Refused, SendError};
use crate::io::{GuestMemory, Io};
use crate::roce::{self, AhTable, GidTable, GRH_SIZE};
use crate::stats::UdDrop;
use crate::wire::{op, wc, CqeExtra, QpState, Sgl, SqeHeader, UdInfo, UdSendSqe, QP_TYPE_UD};

/// The IB MTUs, largest first: a UD payload may not exceed the largest one that fits the
/// function's MTU (as ib_core derives the port's MTU from the netdev's).
const IB_MTUS: [u32; 5] = [4096, 2048, 1024, 512, 256];

/// RoCEv2 addressing as the data path uses it: the GID table (UD source GIDs; the source GID
/// index of a QP's address vector), the address handles (UD destinations) and the function's
/// MTU (the largest UD payload).
#[derive(Clone, Copy)]
pub(in crate::device) struct RoceAddressing<'a> {
    /// The GID table.
    pub gids: &'a GidTable,
    /// The address handles.
    pub ahs: &'a AhTable,
    /// The last CONF_MTU (0: none yet).
    pub mtu: u32,
}

impl RoceAddressing<'_> {
    /// The largest UD payload: the largest IB MTU within the function's MTU (CONF_MTU, the
    /// netdev's MTU; 256 below 512), [`UD_DEFAULT_MTU`] before any CONF_MTU.
    pub(in crate::device) fn ud_mtu(&self) -> u32 {
        match self.mtu {
            0 => UD_DEFAULT_MTU,
            m => IB_MTUS.into_iter().find(|&x| m >= x).unwrap_or(256),
        }
    }
}

impl DataPath<'_> {
    /// Builds the datagram of a UD SEND / SEND_WITH_IMM WQE: `(destination QPN, datagram)`, or
    /// the requester's status: 8 for a short WQE, an AHN that is not live or a payload beyond
    /// [`RoceAddressing::ud_mtu`], 13 for an AH of another PD, the local SGE codes.
    pub(super) fn ud_datagram(
        &mut self,
        qpn: u32,
        pdn: u32,
        hdr: &SqeHeader,
        wqe: &[u8],
        mem: &dyn GuestMemory,
    ) -> Result<(u32, Datagram), u8> {
        let s = UdSendSqe::decode(wqe).ok_or(wc::SEND_FORMAT)?;
        let Some(ah) = self.roce.ahs.get(s.ahn).copied() else {
            if self.warned.dp_error() {
                log::warn!("QP {qpn}: UD WQE names AH {} that does not exist", s.ahn);
            }
            return Err(wc::SEND_FORMAT);
        };
        if ah.pdn != pdn {
            if self.warned.dp_error() {
                log::warn!(
                    "QP {qpn} (PD {pdn}): UD WQE names AH {} of PD {}",
                    s.ahn,
                    ah.pdn
                );
            }
            return Err(wc::SEND_PD);
        }
        let sgl = Sgl::decode(hdr, wqe, UdSendSqe::SGL_OFFSET).ok_or(wc::SEND_FORMAT)?;
        let len: u64 = match &sgl {
            Sgl::Inline(d) => d.len() as u64,
            Sgl::Sges(sges) => sges.iter().map(|g| u64::from(g.len)).sum(),
        };
        let mtu = self.roce.ud_mtu();
        if len > u64::from(mtu) {
            if self.warned.dp_error() {
                log::warn!("QP {qpn}: UD payload of {len} bytes beyond the MTU ({mtu})");
            }
            return Err(wc::SEND_FORMAT);
        }
        let data = match sgl {
            Sgl::Inline(d) => d.to_vec(),
            Sgl::Sges(sges) => self.local_keys(qpn).gather(pdn, &sges, mem)?,
        };
        let av = ah.av;
        let sgid: Gid = match self.roce.gids.get(av.sgid_index) {
            Some(e) => e.gid,
            None => {
                // Like an RC send, the WQE is not refused; the adapter has no address for the
                // index, so the datagram leaves with the unspecified address (all zero).
                if self
                    .warned
                    .first(Oddity::UdSourceGid, u64::from(av.sgid_index))
                {
                    log::warn!(
                        "QP {qpn}: AH {} names source GID {} that is not populated; datagrams \
                         carry the zero address",
                        s.ahn,
                        av.sgid_index
                    );
                }
                [0; 16]
            }
        };
        let datagram = Datagram {
            qkey: s.qkey,
            data,
            imm: (hdr.opcode == op::SEND_WITH_IMM).then_some(s.imm),
            solicited: hdr.se,
            net_type: av.net_type,
            traffic_class: av.traffic_class,
            flow_label: av.flow_label,
            hop_limit: av.hop_limit,
            sl: av.sl,
            sgid,
            dgid: av.dgid,
        };
        Ok((s.dst_qpn, datagram))
    }

    /// Hands a datagram to the fabric; one that cannot go anywhere is dropped (counted).
    pub(super) fn send_datagram(&mut self, qpn: u32, dst_qpn: u32, d: Datagram) {
        if let Some(qp) = self.rdma.qps.get_mut(&qpn) {
            qp.sq_psn = (qp.sq_psn + 1) & 0xff_ffff;
        }
        let Some(port) = self.wire.port else {
            self.ud_drop(UdDrop::NoFabric, || {
                format!("QP {qpn} -> QP {dst_qpn}: no fabric")
            });
            return;
        };
        let dgid = d.dgid;
        let unknown = move || {
            format!(
                "QP {qpn} -> QP {dst_qpn}: destination GID {} unknown on the fabric",
                std::net::Ipv6Addr::from(dgid)
            )
        };
        let Some(to) = port.resolve(&dgid) else {
            self.ud_drop(UdDrop::UnknownGid, unknown);
            return;
        };
        let bytes = d.data.len() as u64;
        let pkt = Packet {
            src_port: 0,
            src_qpn: qpn,
            dst_qpn,
            body: Body::Datagram(d),
        };
        match port.send_datagram(to, pkt) {
            Ok(()) => self.wire.stats.tx_packet(bytes),
            Err(Refused {
                why: SendError::Unreachable,
                ..
            }) => self.ud_drop(UdDrop::UnknownGid, unknown),
            Err(Refused {
                why: SendError::Congested,
                ..
            }) => self.ud_drop(UdDrop::Congested, || {
                format!("QP {qpn} -> QP {dst_qpn}: destination inbox full")
            }),
        }
    }

    /// Counts a dropped datagram; the first drop of each cause is logged as a warning.
    fn ud_drop(&mut self, cause: UdDrop, what: impl FnOnce() -> String) {
        self.ud_drops.count(cause);
        if self.warned.first(Oddity::UdDrop, cause.index() as u64) {
            log::warn!(
                "UD datagram dropped ({}): {}; further drops for this cause are logged at debug \
                 level",
                cause.name(),
                what()
            );
        } else {
            log::debug!("UD datagram dropped ({}): {}", cause.name(), what());
        }
    }

    /// A datagram for QP `dst_qpn` from QP `src_qpn` of another (or this) function.
    pub(super) fn incoming_datagram(
        &mut self,
        src_qpn: u32,
        dst_qpn: u32,
        d: Datagram,
        io: &mut Io<'_>,
    ) {
        let cause = match self.rdma.qps.get(&dst_qpn) {
            None => Some(UdDrop::NoQp),
            Some(q) if q.qp_type != QP_TYPE_UD => Some(UdDrop::NotUd),
            Some(q) if !matches!(q.state, QpState::Rtr | QpState::Rts | QpState::Sqd) => {
                Some(UdDrop::NotReady)
            }
            Some(q) if q.qkey != d.qkey => Some(UdDrop::Qkey),
            Some(q) if q.rq.pi == q.rq.ci => Some(UdDrop::NoRqe),
            Some(_) => None,
        };
        if let Some(cause) = cause {
            let (state, qkey) = self
                .rdma
                .qps
                .get(&dst_qpn)
                .map_or(("none", 0), |q| (q.state.name(), q.qkey));
            self.ud_drop(cause, || {
                format!(
                    "QP {src_qpn} -> QP {dst_qpn} (state {state}, Q_Key {qkey:#x}), Q_Key {:#x}",
                    d.qkey
                )
            });
            return;
        }
        let info = UdInfo {
            net_type: d.net_type,
            sl: d.sl,
            src_qpn,
        };
        let rqe = match self.fetch_rqe(dst_qpn, io) {
            Some(Ok(r)) => r,
            Some(Err(code)) => {
                self.ud_receive_error(dst_qpn, code, info, io);
                return;
            }
            None => return,
        };
        let pdn = self.rdma.qps.get(&dst_qpn).map_or(0, |q| q.pdn);
        let total = GRH_SIZE + d.data.len();
        let mut bytes = Vec::with_capacity(total);
        bytes.extend_from_slice(&roce::grh_area(&d));
        bytes.extend_from_slice(&d.data);
        if let Err(code) = scatter(self.local_keys(dst_qpn), pdn, &rqe.sge, 0, &bytes, io.mem) {
            self.ud_receive_error(dst_qpn, code, info, io);
            return;
        }
        let (opcode, extra) = match d.imm {
            Some(i) => (op::RSP_SEND_IMM, CqeExtra::Imm(i)),
            None => (op::RECEIVE, CqeExtra::None),
        };
        let Some(qp) = self.rdma.qps.get_mut(&dst_qpn) else {
            return;
        };
        let index = qp.rq.consume();
        qp.rq_psn = (qp.rq_psn + 1) & 0xff_ffff;
        self.rq_cqe(
            dst_qpn,
            index,
            opcode,
            wc::SUCCESS,
            extra,
            total as u32,
            d.solicited,
            info,
            io,
        );
    }

    /// A UD receive WQE that cannot take a datagram (malformed, its SGE refused, too small):
    /// it completes with `code` and nothing is written; unlike RC the QP keeps its state (a
    /// datagram service survives one bad datagram).
    fn ud_receive_error(&mut self, qpn: u32, code: u8, info: UdInfo, io: &mut Io<'_>) {
        let Some(index) = self.fail_rqe(qpn, code, info, io) else {
            return;
        };
        if self.warned.dp_error() {
            log::warn!(
                "QP {qpn}: UD receive WQE at {index:#x} failed with status {code} (datagram from \
                 QP {}); the QP stays usable",
                info.src_qpn
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ud_payloads_stop_at_the_largest_ib_mtu_within_the_function_mtu() {
        let (gids, ahs) = (GidTable::new(4), AhTable::new(4));
        let limit = |mtu| {
            RoceAddressing {
                gids: &gids,
                ahs: &ahs,
                mtu,
            }
            .ud_mtu()
        };
        assert_eq!(limit(0), UD_DEFAULT_MTU, "before any CONF_MTU");
        assert_eq!(limit(9000), 4096);
        assert_eq!(limit(1500), 1024);
        assert_eq!(limit(512), 512);
        assert_eq!(limit(300), 256);
        assert_eq!(limit(68), 256, "256 below 512");
    }
}
