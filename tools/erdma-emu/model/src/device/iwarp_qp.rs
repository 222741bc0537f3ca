// SPDX-License-Identifier: GPL-2.0

//! The iWARP part of a QP (erdma_rs_hw 7.1): the adapter's and the driver's view of its state,
//! and the connection handed over at RTS with its stream's sequence numbers and backlog. The
//! object tables hold it in the QP; the iWARP engine (`iwarp`) works on it.

use std::collections::VecDeque;

use crate::fabric::{Conn, StreamMsg};
use crate::wire::IwarpState;

/// A QP's connection as handed over at RTS.
#[derive(Clone, Debug)]
pub(super) struct IwConn {
    /// The 4-tuple, this end's view.
    pub tuple: Conn,
    /// The peer's cookie (its QPN).
    pub cookie: u32,
    /// Congestion-control algorithm (recorded only).
    pub cc: u8,
    /// Sequence number of the next byte this QP sends.
    pub snd_nxt: u32,
    /// Sequence number of the next byte this QP expects.
    pub rcv_nxt: u32,
    /// Bound on the fabric and not ended.
    pub live: bool,
    /// Messages the fabric could not deliver yet, in stream order with their sequence numbers.
    pub backlog: VecDeque<(u32, StreamMsg)>,
}

/// The iWARP part of a QP.
#[derive(Clone, Debug)]
pub(super) struct Iwarp {
    /// The adapter's state.
    pub state: IwarpState,
    /// The state the driver last set (transitions are judged from it).
    pub driver_state: IwarpState,
    /// The connection, from RTS on (kept after it ended, for inspection).
    pub conn: Option<IwConn>,
}

impl Iwarp {
    /// A new QP: IDLE.
    pub fn new() -> Self {
        Iwarp {
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
