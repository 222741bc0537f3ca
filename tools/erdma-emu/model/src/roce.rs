// SPDX-License-Identifier: GPL-2.0

//! RoCEv2 addressing state of a function: the GID table (SET_GID) and the address handles
//! (CREATE_AH / DESTROY_AH), erdma-hw.md §3.5, §7.2, §9.1.
//!
//! Both tables are sized by the capabilities QUERY_DEVICE reports: `2^max_gid` GID entries and
//! `2^max_ah` address handles; the driver picks indices and AHNs below those limits. Entries are
//! kept sparsely (ordered maps), so a large configured table costs nothing until it is used.
//!
//! * GID table: an add stores the entry, replacing what the index held (the kernel's GID cache
//!   re-adds entries after address changes); a delete needs a populated entry.
//! * Address handles: created once per AHN; destroyed only with the PD they were created with.
//!   The source GID index of the address vector must lie inside the GID table, but the entry
//!   need not be populated (the GID may be deleted while AHs still name it: the data path checks
//!   when it sends).
//!
//! Both tables are function state: `DEV_CTRL.RESET` and a client disconnect clear them.

use std::collections::btree_map::{BTreeMap, Entry};
use std::fmt::Write as _;
use std::net::Ipv6Addr;

use crate::cmdq::{AddressVector, Gid, NetType, Status};

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
