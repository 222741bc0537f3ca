// SPDX-License-Identifier: GPL-2.0

//! The iWARP part of a QP (erdma_rs_hw 7.1): its cookie, the adapter's and the driver's view of
//! its state, and the connection handed over at RTS with its stream's sequence numbers and
//! backlog. The object tables hold it in the QP; the iWARP engine (`iwarp`) works on it.
//!
//! # Cookies
//!
//! CREATE_QP answers with the QP's cookie (§3.5), which the driver's MPA frame carries to the
//! peer (§7.1) and the peer hands back to its adapter at RTS. The fabric delivers a stream
//! message only between two QPs whose bindings name each other by these cookies, and the
//! receiver checks the cookie the sender names again, so a cookie must be something a guest
//! cannot predict: 30 random bits per QP ([`Cookies`]), unique among the function's QPs,
//! never 0. (A QPN would not do: the driver chooses it, and another guest can guess it.) Bits
//! 31:30 are clear: in the cookie field of MODIFY_QP, bit 30 marks compat mode's QPN and bit 31
//! IPv6 (erdma_rs_hw 7.3).

use std::collections::hash_map::RandomState;
use std::collections::{BTreeSet, VecDeque};
use std::hash::BuildHasher;

use crate::fabric::{Conn, StreamMsg};
use crate::wire::IwarpState;

/// Random cookies drawn before falling back to the next free value after the last one drawn
/// (only a function holding a large share of all 2^32 values could need it).
const COOKIE_DRAWS: usize = 16;

/// Bits a cookie may have: 29:0 (bit 30 marks a compat-mode QPN, bit 31 IPv6).
pub(super) const COOKIE_MASK: u32 = (1 << 30) - 1;

/// The cookies of a function's iWARP QPs: 30 random bits each (SipHash of a counter, keyed
/// from the operating system's randomness through [`RandomState`], so neither predictable from
/// the cookies a guest sees nor shared between functions), unique among the live ones, never
/// 0. A clone draws the same values as the original.
#[derive(Clone, Debug, Default)]
pub(super) struct Cookies {
    keys: RandomState,
    /// Values drawn so far (the counter the keys hash).
    drawn: u64,
    /// The cookies of the live QPs.
    live: BTreeSet<u32>,
}

impl Cookies {
    /// The next 30 random bits.
    fn next(&mut self) -> u32 {
        let h = self.keys.hash_one(self.drawn);
        self.drawn = self.drawn.wrapping_add(1);
        // Fold the hash's two halves. CAST: both are 32 bits wide after the shift and mask.
        ((h >> 32) ^ (h & u64::from(u32::MAX))) as u32 & COOKIE_MASK
    }

    /// A cookie for a new QP: random, nonzero, not live; it is live from now on.
    pub fn draw(&mut self) -> u32 {
        let mut cookie = 0;
        for _ in 0..COOKIE_DRAWS {
            cookie = self.next();
            if cookie != 0 && self.live.insert(cookie) {
                return cookie;
            }
        }
        // Every draw collided: the next free value after the last one. The live set is far
        // smaller than 2^30 - 1 (one cookie per QP), so this ends.
        loop {
            cookie = cookie.wrapping_add(1) & COOKIE_MASK;
            if cookie != 0 && self.live.insert(cookie) {
                return cookie;
            }
        }
    }

    /// The QP of `cookie` is gone: the value may be drawn again.
    pub fn release(&mut self, cookie: u32) {
        self.live.remove(&cookie);
    }
}

/// A QP's connection as handed over at RTS.
#[derive(Clone, Debug)]
pub(super) struct IwConn {
    /// The 4-tuple, this end's view.
    pub tuple: Conn,
    /// The peer's cookie (from its MPA frame): the messages this QP sends name it, and the
    /// fabric delivers them only to the QP whose own cookie it is.
    pub cookie: u32,
    /// The cookie this QP's messages must name to be taken: its own (CREATE_QP's reply), or
    /// in compat mode its QPN with [`crate::wire::COMPAT_COOKIE`] (erdma_rs_hw 7.3).
    pub own: u32,
    /// Congestion-control algorithm (recorded only).
    pub cc: u8,
    /// Sequence number of the next byte this QP sends.
    pub snd_nxt: u32,
    /// Sequence number of the next byte this QP expects.
    pub rcv_nxt: u32,
    /// Bound on the fabric and not ended.
    pub live: bool,
    /// Messages the fabric could not deliver yet, in stream order with their sequence numbers.
    pub backlog: Backlog,
}

/// A stream's undelivered messages with their sequence numbers, and what they weigh (payload
/// plus [`crate::fabric::PACKET_COST`] each), bounded by [`super::MAX_BACKLOG_BYTES`].
#[derive(Clone, Debug, Default)]
pub(super) struct Backlog {
    q: VecDeque<(u32, StreamMsg)>,
    bytes: u64,
    /// A message did not fit: the stream is to be given up (retry exceeded).
    pub overflowed: bool,
}

impl Backlog {
    fn cost(msg: &StreamMsg) -> u64 {
        msg.payload_len() as u64 + crate::fabric::PACKET_COST
    }

    /// Whether `msg` fits (else the backlog is marked overflowed and `msg` dropped).
    pub fn push_back(&mut self, m: (u32, StreamMsg)) -> bool {
        let cost = Self::cost(&m.1);
        if self.bytes.saturating_add(cost) > super::MAX_BACKLOG_BYTES {
            self.overflowed = true;
            return false;
        }
        self.bytes += cost;
        self.q.push_back(m);
        true
    }

    /// Puts back a message taken with [`Backlog::pop_front`].
    pub fn push_front(&mut self, m: (u32, StreamMsg)) {
        self.bytes += Self::cost(&m.1);
        self.q.push_front(m);
    }

    pub fn pop_front(&mut self) -> Option<(u32, StreamMsg)> {
        let m = self.q.pop_front()?;
        self.bytes = self.bytes.saturating_sub(Self::cost(&m.1));
        Some(m)
    }

    pub fn clear(&mut self) {
        self.q.clear();
        self.bytes = 0;
    }

    pub fn front(&self) -> Option<&(u32, StreamMsg)> {
        self.q.front()
    }

    pub fn back(&self) -> Option<&(u32, StreamMsg)> {
        self.q.back()
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = &(u32, StreamMsg)> {
        self.q.iter()
    }
}

/// The iWARP part of a QP.
#[derive(Clone, Debug)]
pub(super) struct Iwarp {
    /// This QP's own cookie (CREATE_QP's reply, from [`Cookies`]): a stream message must name
    /// it to be taken.
    pub cookie: u32,
    /// The adapter's state.
    pub state: IwarpState,
    /// The state the driver last set (transitions are judged from it).
    pub driver_state: IwarpState,
    /// The connection, from RTS on (kept after it ended, for inspection).
    pub conn: Option<IwConn>,
}

impl Iwarp {
    /// A new QP with cookie `cookie`: IDLE.
    pub fn new(cookie: u32) -> Self {
        Iwarp {
            cookie,
            state: IwarpState::Idle,
            driver_state: IwarpState::Idle,
            conn: None,
        }
    }

    /// The `query qps` / `query queues` view: `STATE`, then the connection if there is one
    /// (`:TUPLE:snd=N:rcv=N:cookie=N`, `:closed` once it ended).
    pub fn describe(&self) -> String {
        let mut s = self.state.name().to_string();
        if let Some(c) = &self.conn {
            s.push_str(&format!(
                ":{}:snd={}:rcv={}:cookie={}",
                c.tuple, c.snd_nxt, c.rcv_nxt, c.cookie
            ));
            if !c.live {
                s.push_str(":closed");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_random_nonzero_and_unique_among_the_live() {
        let mut c = Cookies::default();
        let drawn: Vec<u32> = (0..4096).map(|_| c.draw()).collect();
        let set: BTreeSet<u32> = drawn.iter().copied().collect();
        assert_eq!(set.len(), drawn.len(), "no duplicates");
        assert!(!set.contains(&0));
        assert!(
            set.iter().all(|&x| x & !COOKIE_MASK == 0),
            "bits 31:30 clear"
        );
        assert!(
            drawn.iter().filter(|&&x| x < 1 << 20).count() < 24,
            "not small numbers: about 4096 / 1024 = 4 of them are expected below 2^20"
        );
        // Two functions draw different sequences.
        let mut other = Cookies::default();
        let theirs: Vec<u32> = (0..16).map(|_| other.draw()).collect();
        assert_ne!(theirs[..], drawn[..16]);
        // A released cookie may come again; a live one never does.
        c.release(drawn[0]);
        assert!(!c.live.contains(&drawn[0]));
        assert_eq!(c.live.len(), 4095);
    }

    #[test]
    fn cookies_skip_live_values_when_every_draw_collides() {
        let mut c = Cookies::default();
        // Make the next COOKIE_DRAWS draws (and 0, and the value after the last) live.
        let mut probe = c.clone();
        let next: Vec<u32> = (0..COOKIE_DRAWS).map(|_| probe.next()).collect();
        let last = next[COOKIE_DRAWS - 1];
        c.live.extend(next.iter().copied());
        c.live.insert(last.wrapping_add(1));
        let cookie = c.draw();
        assert_eq!(cookie, (last.wrapping_add(2) & COOKIE_MASK).max(1));
        assert!(c.live.contains(&cookie));
    }
}
