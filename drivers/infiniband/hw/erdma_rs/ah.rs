// SPDX-License-Identifier: GPL-2.0

//! Address handles of RoCE adapters (erdma_rs_hw 3.5, 7.2): the destinations of datagrams, kept by
//! the adapter under numbers (AHNs) the driver picks, and the RoCEv2 address vector that
//! address handles and connected queue pairs share.
//!
//! The connection manager creates and destroys address handles under spinlocks: then the
//! commands busy-poll the command queue ([`Wait::Poll`]) and AHNs come from a range under an
//! interrupt-safe spinlock.

use kernel::{
    prelude::*,
    rdma::{
        self,
        qp::flow_label_udp_sport,
        AhAttr,
        AhAttrOut,
        AhSetup,
        RoceAddress, //
    },
};

use crate::{
    cmdq::Wait,
    commands::{
        AddressVector,
        AvFlow,
        CreateAh,
        DestroyAh, //
    },
    formats::low32,
    ibdev::IbData,
    kverbs::AddressHandle,
    object::{
        retire,
        Numbers, //
    },
    pd::Pd,
    sgsi::SoftRoute,
};

/// The lowest UDP source port of RoCEv2 flows (`IB_ROCE_UDP_ENCAP_VALID_PORT_MIN`).
const UDP_SPORT_MIN: u16 = 0xc000;

/// The RoCEv2 address vector of `ah`: a global routing header whose source GID is a RoCEv2 one
/// (IPv4-mapped GIDs make an IPv4 path). `udp_sport` gives the UDP source port for the flow
/// label.
pub(crate) fn address_vector(
    ah: &AhAttr<'_>,
    udp_sport: impl FnOnce(u32) -> u16,
) -> Result<AddressVector> {
    let grh = ah.grh().ok_or(EINVAL)?;
    let sgid = grh.sgid_attr().ok_or(EINVAL)?;
    if sgid.gid_type() != Some(rdma::GidType::RoceV2) {
        return Err(EINVAL);
    }
    let ipv4 = sgid.gid().to_ipv4().is_some();
    let flow_label = grh.flow_label() & 0xf_ffff;
    Ok(AddressVector {
        flow: AvFlow::zeroed()
            .with_flow_label(low32(flow_label))
            .with_ipv6(!ipv4),
        tclass: grh.traffic_class(),
        hop_limit: grh.hop_limit(),
        sl: ah.sl(),
        reserved: 0,
        udp_sport: udp_sport(flow_label),
        sgid_index: grh.sgid_index().into(),
        dmac: ah.dmac(),
        pad: [0; 2],
        dgid: grh.dgid().0,
    })
}

/// Compat mode's two IPv4 addresses (erdma_rs_hw 7.3) in the address vector `ah`: the local
/// one from its RoCEv2 source GID, the remote one from its destination GID, both IPv4-mapped
/// (`EAFNOSUPPORT` for IPv6).
pub(crate) fn compat_ips(ah: &AhAttr<'_>) -> Result<([u8; 4], [u8; 4])> {
    let grh = ah.grh().ok_or(EINVAL)?;
    let sgid = grh.sgid_attr().ok_or(EINVAL)?;
    if sgid.gid_type() != Some(rdma::GidType::RoceV2) {
        return Err(EINVAL);
    }
    let local = sgid.gid().to_ipv4().ok_or(EAFNOSUPPORT)?;
    let remote = grh.dgid().to_ipv4().ok_or(EAFNOSUPPORT)?;
    Ok((local, remote))
}

/// An address handle: the adapter's (RoCEv2), or compat mode's, which only the software GSI QP
/// sends to (erdma_rs_hw 7.3).
pub(crate) struct Ah {
    ahn: u32,
    pdn: u32,
    /// What a query reports.
    addr: RoceAddress,
    /// Compat mode's: the source GID's index and the destination's IPv4 address.
    soft: Option<(u8, [u8; 4])>,
}

impl Ah {
    /// Creates the address handle in the adapter, without sleeping unless the caller may.
    pub(crate) fn create<T: rdma::Driver<Pd = Pd>>(
        data: &IbData<'_>,
        setup: &AhSetup<'_, T>,
        attr: &AhAttr<'_>,
    ) -> Result<Self> {
        if !attr.is_roce() {
            return Err(EINVAL);
        }
        let pdn = setup.pd().data().pdn;
        if data.compat.is_some() {
            let grh = attr.grh().ok_or(EINVAL)?;
            let (_, dst) = compat_ips(attr)?;
            return Ok(Self {
                ahn: 0,
                pdn,
                addr: RoceAddress {
                    port: attr.port_num(),
                    sl: attr.sl(),
                    dgid: grh.dgid(),
                    flow_label: grh.flow_label() & 0xf_ffff,
                    sgid_index: grh.sgid_index(),
                    hop_limit: grh.hop_limit(),
                    traffic_class: grh.traffic_class(),
                    dmac: attr.dmac(),
                },
                soft: Some((grh.sgid_index(), dst)),
            });
        }
        let ahs = data.ahs()?;
        let ahn = ahs.lock().alloc()?;
        let av = address_vector(attr, |flow_label| {
            if flow_label != 0 {
                flow_label_udp_sport(flow_label)
            } else {
                // CAST: 14 bits.
                UDP_SPORT_MIN + (ahn & 0x3fff) as u16
            }
        });
        let wait = if setup.may_sleep() {
            Wait::Sleep
        } else {
            Wait::Poll
        };
        let created = av.and_then(|av| {
            let addr = RoceAddress {
                port: attr.port_num(),
                sl: av.sl,
                dgid: rdma::Gid(av.dgid),
                flow_label: av.flow.flow_label().get(),
                // CAST: the core's index is 8 bits wide.
                sgid_index: av.sgid_index as u8,
                hop_limit: av.hop_limit,
                traffic_class: av.tclass,
                dmac: av.dmac,
            };
            data.hw.exec_with(&CreateAh { pdn, ahn, av }, wait)?;
            Ok(addr)
        });
        match created {
            Ok(addr) => Ok(Self {
                ahn,
                pdn,
                addr,
                soft: None,
            }),
            Err(e) => {
                ahs.lock().free(ahn);
                Err(e)
            }
        }
    }

    /// Destroys the address handle in the adapter. If the adapter refuses, its AHN stays taken
    /// (the adapter may still use it).
    pub(crate) fn destroy(&self, data: &IbData<'_>, sleepable: bool) {
        if self.soft.is_some() {
            return;
        }
        let wait = if sleepable { Wait::Sleep } else { Wait::Poll };
        let cmd = DestroyAh {
            pdn: self.pdn,
            ahn: self.ahn,
        };
        let ahs = data.ahs().ok();
        retire(
            &data.hw,
            &cmd,
            wait,
            fmt!("DESTROY_AH {}", self.ahn),
            // Nothing finds an address handle by its number.
            || {},
            ahs.map(|a| (&**a as &dyn Numbers, self.ahn)),
            None::<()>,
        );
    }

    /// Reports the address.
    pub(crate) fn query(&self, out: &mut AhAttrOut<'_>) {
        out.set_roce(&self.addr);
    }
}

impl AddressHandle for Ah {
    fn ahn(&self) -> u32 {
        self.ahn
    }

    fn pdn(&self) -> u32 {
        self.pdn
    }
}

impl SoftRoute for Ah {
    fn soft_route(&self) -> Option<(u8, [u8; 4])> {
        self.soft
    }
}
