// SPDX-License-Identifier: GPL-2.0

//! RoCEv2 addressing state of a function: the GID table (SET_GID) and the address handles
//! (CREATE_AH / DESTROY_AH), erdma_rs_hw 3.5, §7.2, §9.1.
//!
//! Both tables are sized by the capabilities QUERY_DEVICE reports: `2^max_gid` GID entries and
//! `2^max_ah` address handles; the driver picks indices and AHNs below those limits. Entries are
//! kept sparsely (ordered maps), so a large configured table costs nothing until it is used.
//!
//! * GID table: an add stores the entry, replacing what the index held (the kernel's GID cache
//!   re-adds entries after address changes); a delete needs a populated entry.
//! * Address handles: created once per AHN; destroyed only with the PD they were created with.
//!   The source GID index of the address vector must lie inside the GID table, but the entry
//!   need not be populated (the GID may be deleted while AHs still name it): a UD send through
//!   such an AH is not refused, its datagram carries the zero source address.
//!
//! Both tables are function state: `DEV_CTRL.RESET` and a client disconnect clear them.
//!
//! [`grh_area`] builds the 40 bytes a UD receive places in front of the payload (§5.6): the
//! network header the datagram would have carried on the wire, as RoCEv2 adapters present it
//! (an IPv6 header, or 20 zero bytes and an IPv4 header with a valid checksum).

use std::collections::btree_map::{BTreeMap, Entry};
use std::fmt::Write as _;
use std::net::Ipv6Addr;

use crate::cmdq::{AddressVector, CreateAh, DestroyAh, Gid, GidOp, NetType, SetGid, Status};
use crate::fabric::Datagram;

/// Size of the GRH area at the start of a UD receive buffer (an IPv6 header / a GRH).
pub const GRH_SIZE: usize = 40;
/// IPv4 header without options.
const IPV4_HEADER: usize = 20;
/// UDP header.
const UDP_HEADER: usize = 8;
/// InfiniBand base transport header.
const BTH: usize = 12;
/// Datagram extended transport header (Q_Key, source QPN).
const DETH: usize = 8;
/// Immediate data extended transport header.
const IMMDT: usize = 4;
/// Invariant CRC.
const ICRC: usize = 4;
/// IP protocol / next header: UDP.
const IPPROTO_UDP: u8 = 17;
/// IPv4 flags and fragment offset: don't fragment.
const IPV4_DF: u16 = 0x4000;

/// The IPv4 header checksum of `hdr` (an even number of bytes, the checksum field included as
/// it is): the ones' complement of the ones' complement sum of its 16-bit words. A header whose
/// checksum field holds the right value sums to 0xffff, so this returns 0 for it.
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = hdr
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The 40-byte GRH area of a UD receive of `d` (erdma_rs_hw 5.6): what RoCEv2 puts in front of
/// the payload, counted in the receive's byte count.
///
/// * IPv6 path (`d.net_type` IPv6): a 40-byte IPv6 header: version 6, traffic class, 20-bit flow
///   label, payload length (UDP + BTH + DETH [+ ImmDt] + payload + ICRC), next header UDP, hop
///   limit, source GID, destination GID.
/// * IPv4 path: bytes 0..20 zero, bytes 20..40 an IPv4 header: version 4, IHL 5, TOS = traffic
///   class, total length (IP + UDP + BTH + DETH [+ ImmDt] + payload + ICRC), identification 0,
///   DF, TTL = hop limit, protocol UDP, a valid header checksum, and the addresses in the last 4
///   bytes of the GIDs (IPv4-mapped).
///
/// Lengths beyond 16 bits (payloads are limited to the UD MTU, far below) saturate.
pub fn grh_area(d: &Datagram) -> [u8; GRH_SIZE] {
    let l4 =
        UDP_HEADER + BTH + DETH + if d.imm.is_some() { IMMDT } else { 0 } + d.data.len() + ICRC;
    let mut g = [0u8; GRH_SIZE];
    match d.net_type {
        NetType::Ipv6 => {
            let w0 = 6u32 << 28 | u32::from(d.traffic_class) << 20 | d.flow_label & 0xf_ffff;
            g[0..4].copy_from_slice(&w0.to_be_bytes());
            let plen = u16::try_from(l4).unwrap_or(u16::MAX);
            g[4..6].copy_from_slice(&plen.to_be_bytes());
            g[6] = IPPROTO_UDP;
            g[7] = d.hop_limit;
            g[8..24].copy_from_slice(&d.sgid);
            g[24..40].copy_from_slice(&d.dgid);
        }
        NetType::Ipv4 => {
            let h = &mut g[GRH_SIZE - IPV4_HEADER..];
            h[0] = 0x45;
            h[1] = d.traffic_class;
            let total = u16::try_from(IPV4_HEADER + l4).unwrap_or(u16::MAX);
            h[2..4].copy_from_slice(&total.to_be_bytes());
            // Identification 0.
            h[6..8].copy_from_slice(&IPV4_DF.to_be_bytes());
            h[8] = d.hop_limit;
            h[9] = IPPROTO_UDP;
            h[12..16].copy_from_slice(&d.sgid[12..]);
            h[16..20].copy_from_slice(&d.dgid[12..]);
            let sum = ipv4_checksum(h);
            h[10..12].copy_from_slice(&sum.to_be_bytes());
        }
    }
    g
}

/// One populated GID table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The network type given with SET_GID.
    pub net_type: NetType,
    /// The GID (network order).
    pub gid: Gid,
}

impl GidEntry {
    /// The GID as an address, for logs (`::ffff:a.b.c.d` for IPv4-mapped GIDs).
    pub fn addr(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.gid)
    }
}

/// The GID as 32 lowercase hex digits (the `query gids` spelling).
pub fn gid_hex(gid: &Gid) -> String {
    gid.iter().fold(String::with_capacity(32), |mut s, b| {
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// A MAC address as `aa:bb:cc:dd:ee:ff`, for logs.
pub fn mac_string(mac: &[u8; 6]) -> String {
    let parts: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    parts.join(":")
}

/// The GID table of a function: `2^max_gid` entries, populated by SET_GID.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GidTable {
    size: u32,
    entries: BTreeMap<u16, GidEntry>,
}

impl GidTable {
    /// An empty table of `2^size_log2` entries (`size_log2` ≤ 16: indices are 16 bits).
    pub fn new(size_log2: u8) -> Self {
        GidTable {
            size: 1 << size_log2.min(16),
            entries: BTreeMap::new(),
        }
    }

    /// Number of entries the table has room for.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// Whether `index` lies inside the table.
    pub fn in_range(&self, index: u16) -> bool {
        u32::from(index) < self.size
    }

    /// SET_GID add: stores `entry` at `index` and returns the entry it replaced.
    /// [`Status::InvalidParam`] if the index is outside the table.
    pub fn add(&mut self, index: u16, entry: GidEntry) -> Result<Option<GidEntry>, Status> {
        if !self.in_range(index) {
            return Err(Status::InvalidParam);
        }
        Ok(self.entries.insert(index, entry))
    }

    /// SET_GID delete: removes and returns the entry at `index`. [`Status::InvalidParam`] if the
    /// index is outside the table, [`Status::NotFound`] if the entry is empty.
    pub fn delete(&mut self, index: u16) -> Result<GidEntry, Status> {
        if !self.in_range(index) {
            return Err(Status::InvalidParam);
        }
        self.entries.remove(&index).ok_or(Status::NotFound)
    }

    /// SET_GID: adds (or replaces) or deletes one entry ([`GidTable::add`],
    /// [`GidTable::delete`]).
    pub fn set_gid(&mut self, r: &SetGid) -> Result<(), Status> {
        match r.op {
            GidOp::Add { net_type, gid } => {
                let entry = GidEntry { net_type, gid };
                let old = self.add(r.index, entry)?;
                match old {
                    Some(old) if old != entry => log::debug!(
                        "GID {} = {} ({net_type}), replacing {} ({})",
                        r.index,
                        entry.addr(),
                        old.addr(),
                        old.net_type
                    ),
                    Some(_) => log::debug!("GID {} re-added unchanged", r.index),
                    None => log::debug!("GID {} = {} ({net_type})", r.index, entry.addr()),
                }
            }
            GidOp::Delete => {
                let old = self.delete(r.index)?;
                log::debug!("GID {} deleted (was {})", r.index, old.addr());
            }
        }
        Ok(())
    }

    /// The entry at `index`, if populated.
    pub fn get(&self, index: u16) -> Option<&GidEntry> {
        self.entries.get(&index)
    }

    /// The populated entries, by increasing index.
    pub fn iter(&self) -> impl Iterator<Item = (u16, &GidEntry)> + '_ {
        self.entries.iter().map(|(&i, e)| (i, e))
    }

    /// Number of populated entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is populated.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// An address handle created by CREATE_AH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressHandle {
    /// The PD it was created in (DESTROY_AH must name the same one).
    pub pdn: u32,
    /// Where UD sends through this AH go.
    pub av: AddressVector,
}

/// The address handles of a function: AHNs `0..2^max_ah`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AhTable {
    size: u32,
    entries: BTreeMap<u32, AddressHandle>,
}

impl AhTable {
    /// No AHs, room for `2^size_log2` (`size_log2` ≤ 31).
    pub fn new(size_log2: u8) -> Self {
        AhTable {
            size: 1 << size_log2.min(31),
            entries: BTreeMap::new(),
        }
    }

    /// Number of AHNs (`2^max_ah`).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// CREATE_AH: [`Status::InvalidParam`] if `ahn` is out of range, [`Status::Exists`] if it is
    /// live.
    pub fn create(&mut self, ahn: u32, ah: AddressHandle) -> Result<(), Status> {
        if ahn >= self.size {
            return Err(Status::InvalidParam);
        }
        match self.entries.entry(ahn) {
            Entry::Occupied(_) => Err(Status::Exists),
            Entry::Vacant(v) => {
                v.insert(ah);
                Ok(())
            }
        }
    }

    /// DESTROY_AH: removes and returns AH `ahn`. [`Status::InvalidParam`] if `ahn` is out of
    /// range or `pdn` is not the AH's PD (the AH stays), [`Status::NotFound`] if it is not live.
    pub fn destroy(&mut self, ahn: u32, pdn: u32) -> Result<AddressHandle, Status> {
        if ahn >= self.size {
            return Err(Status::InvalidParam);
        }
        let ah = self.entries.get(&ahn).ok_or(Status::NotFound)?;
        if ah.pdn != pdn {
            return Err(Status::InvalidParam);
        }
        self.entries.remove(&ahn).ok_or(Status::NotFound)
    }

    /// CREATE_AH: every field in range first (the AHN, the source GID index in `gids`), then
    /// the AHN must be free.
    pub fn create_ah(&mut self, r: &CreateAh, gids: &GidTable) -> Result<(), Status> {
        if r.ahn >= self.size || !gids.in_range(r.av.sgid_index) {
            return Err(Status::InvalidParam);
        }
        let ah = AddressHandle {
            pdn: r.pdn,
            av: r.av,
        };
        self.create(r.ahn, ah)?;
        log::debug!(
            "AH {} created: PD {}, {} ({}) via GID {}, MAC {}, UDP source port {:#x}",
            r.ahn,
            r.pdn,
            Ipv6Addr::from(r.av.dgid),
            r.av.net_type,
            r.av.sgid_index,
            mac_string(&r.av.dmac),
            r.av.udp_sport
        );
        Ok(())
    }

    /// DESTROY_AH: the AH must exist and belong to the PD named ([`AhTable::destroy`]).
    pub fn destroy_ah(&mut self, r: &DestroyAh) -> Result<(), Status> {
        self.destroy(r.ahn, r.pdn)?;
        log::debug!("AH {} destroyed", r.ahn);
        Ok(())
    }

    /// AH `ahn`, if live.
    pub fn get(&self, ahn: u32) -> Option<&AddressHandle> {
        self.entries.get(&ahn)
    }

    /// The live AHs, by increasing AHN.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &AddressHandle)> + '_ {
        self.entries.iter().map(|(&n, ah)| (n, ah))
    }

    /// Number of live AHs.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no AH is live.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ipv4_av, ipv4_gid};

    fn entry(last: u8) -> GidEntry {
        GidEntry {
            net_type: NetType::Ipv4,
            gid: ipv4_gid([10, 0, 0, last]),
        }
    }

    #[test]
    fn gid_table() {
        let mut t = GidTable::new(4);
        assert_eq!((t.size(), t.len(), t.is_empty()), (16, 0, true));
        assert_eq!(t.add(3, entry(1)), Ok(None));
        assert_eq!(t.add(3, entry(2)), Ok(Some(entry(1))), "replaced");
        assert_eq!(t.add(15, entry(3)), Ok(None));
        assert_eq!(t.add(16, entry(3)), Err(Status::InvalidParam));
        assert_eq!(t.iter().map(|(i, _)| i).collect::<Vec<_>>(), [3, 15]);
        assert_eq!(t.get(3), Some(&entry(2)));
        assert_eq!(t.get(3).unwrap().addr().to_string(), "::ffff:10.0.0.2");
        assert_eq!(t.delete(3), Ok(entry(2)));
        assert_eq!(t.delete(3), Err(Status::NotFound));
        assert_eq!(t.delete(0xffff), Err(Status::InvalidParam));
        assert_eq!(t.len(), 1);
        assert_eq!(GidTable::new(0).size(), 1);
        assert_eq!(GidTable::new(15).size(), 32768);
        assert!(GidTable::new(15).in_range(32767));
        assert!(!GidTable::new(15).in_range(32768));
        assert_eq!(
            gid_hex(&entry(0xab).gid),
            "00000000000000000000ffff0a0000ab"
        );
        assert_eq!(
            mac_string(&[0x52, 0x54, 0, 0xab, 0xcd, 1]),
            "52:54:00:ab:cd:01"
        );
    }

    fn datagram(net_type: NetType, len: usize, imm: bool) -> Datagram {
        Datagram {
            qkey: 1,
            data: vec![0x5a; len],
            imm: imm.then_some([1, 2, 3, 4]),
            solicited: false,
            net_type,
            traffic_class: 0,
            flow_label: 0x12_3456,
            hop_limit: 0x40,
            sl: 0,
            sgid: ipv4_gid([192, 168, 0, 1]),
            dgid: ipv4_gid([192, 168, 0, 199]),
        }
    }

    #[test]
    fn ipv4_grh_area() {
        // The textbook header 4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7: total length
        // 0x73 = 20 + 8 + 12 + 8 + 63 + 4.
        let g = grh_area(&datagram(NetType::Ipv4, 63, false));
        assert_eq!(g[..20], [0; 20]);
        assert_eq!(
            g[20..],
            [
                0x45, 0, 0, 0x73, 0, 0, 0x40, 0, 0x40, 0x11, 0xb8, 0x61, 192, 168, 0, 1, 192, 168,
                0, 199
            ]
        );
        assert_eq!(ipv4_checksum(&g[20..]), 0, "a correct header sums to zero");
        assert_eq!(ipv4_checksum(&[0x45, 0, 0, 0x73]), !0x4573);
        // With an immediate: 4 more bytes.
        let g = grh_area(&datagram(NetType::Ipv4, 59, true));
        assert_eq!(g[22..24], [0, 0x73]);
        assert_eq!(ipv4_checksum(&g[20..]), 0);
    }

    #[test]
    fn ipv6_grh_area() {
        let mut d = datagram(NetType::Ipv6, 10, true);
        d.traffic_class = 0xab;
        d.sgid = [0xfe; 16];
        d.dgid = [0x20; 16];
        let g = grh_area(&d);
        // Version 6, traffic class 0xab, flow label cut to 20 bits.
        assert_eq!(g[..4], [0x6a, 0xb2, 0x34, 0x56]);
        assert_eq!(g[4..6], [0, 8 + 12 + 8 + 4 + 10 + 4]);
        assert_eq!((g[6], g[7]), (17, 0x40));
        assert_eq!(g[8..24], [0xfe; 16]);
        assert_eq!(g[24..], [0x20; 16]);
    }

    #[test]
    fn ah_table() {
        let mut t = AhTable::new(2);
        let ah = AddressHandle {
            pdn: 7,
            av: ipv4_av(0, 2),
        };
        assert_eq!(t.size(), 4);
        assert_eq!(t.create(3, ah), Ok(()));
        assert_eq!(t.create(3, ah), Err(Status::Exists));
        assert_eq!(t.create(4, ah), Err(Status::InvalidParam));
        assert_eq!(t.destroy(3, 8), Err(Status::InvalidParam), "wrong PD");
        assert_eq!(t.get(3), Some(&ah), "still there");
        assert_eq!(t.destroy(2, 7), Err(Status::NotFound));
        assert_eq!(t.destroy(u32::MAX, 7), Err(Status::InvalidParam));
        assert_eq!(t.iter().count(), 1);
        assert_eq!(t.destroy(3, 7), Ok(ah));
        assert!(t.is_empty());
        assert_eq!(t.len(), 0);
        assert_eq!(AhTable::new(24).size(), 1 << 24);
    }
}
