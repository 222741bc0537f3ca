// SPDX-License-Identifier: GPL-2.0

//! iWARP data-path tests: two iWARP functions on one fabric, connected the way the driver's
//! MPA connection manager hands a TCP connection over (MODIFY_QP to RTS with the 4-tuple, the
//! peer cookie and the sequence numbers). Each side learns the peer's cookie from the peer's
//! CREATE_QP reply, as the MPA exchange carries it; a third function plays the guest that
//! tries to take the connection over.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use crate::caps::Caps;
use crate::clock::ManualClock;
use crate::cmdq::{Command, Status};
use crate::device::{DeviceConfig, Protocol, RETRY_COUNT, RETRY_TIMEOUT};
use crate::fabric::{Conn, Fabric, Request, StreamMsg, MAX_CLAIMS};
use crate::regs;
use crate::testing::dp::{fabric, pump, Wqe, ALL_ACCESS, EQN, PDN};
use crate::testing::TestDriver;
use crate::wire::{
    self, access, op, wc, AeqEvent, CqeExtra, DataCqe, IwarpConnection, IwarpState, COMPAT_COOKIE,
    CQE_QTYPE_RQ, CQE_QTYPE_SQ, QP_TYPE_RC, QP_TYPE_UD,
};

const CQ: u32 = 1;
/// The active side's QP (device A, 10.0.0.1).
const QA: u32 = 10;
/// The passive side's QP (device B, 10.0.0.2).
const QB: u32 = 20;
const IP_A: [u8; 4] = [10, 0, 0, 1];
const IP_B: [u8; 4] = [10, 0, 0, 2];
const PORT_A: u16 = 40000;
const PORT_B: u16 = 4791;
/// A's socket SND.NXT after its MPA request (= B's RCV.NXT).
const A_SND: u32 = 1000;
/// B's socket SND.NXT before its MPA reply.
const B_SOCKET_SND: u32 = 0xffff_ffc0;
/// Private data in B's MPA reply.
const PDLEN: u32 = 4;
/// What B hands to the adapter (socket + 28 + private data, wrapping) and what A's socket
/// has received after the reply.
const B_SND: u32 = B_SOCKET_SND.wrapping_add(28 + PDLEN);

fn stag(index: u32) -> u32 {
    wire::stag(index, 0)
}

fn iw_config(atomic: bool) -> DeviceConfig {
    DeviceConfig {
        protocol: Protocol::Iwarp,
        caps: Caps {
            atomic,
            ..Caps::default()
        },
        ..DeviceConfig::default()
    }
}

/// An iWARP function on `clock`, INIT, CEQ, CQ 1, QP `qpn`, MR 1 (64 KiB, all rights); returns
/// the driver, the MR's buffer and the QP's cookie (CREATE_QP's reply).
fn iw_dev(
    clock: &Arc<ManualClock>,
    f: &Arc<Fabric>,
    qpn: u32,
    atomic: bool,
) -> (TestDriver, u64, u32) {
    let mut d = TestDriver::with(iw_config(atomic), clock.clone(), 512, 128, 4096);
    d.attach(f);
    assert!(d.init());
    assert_eq!(d.create_ceq(EQN, 1, 8).status, 0);
    assert_eq!(d.create_cq(CQ, 6).status, 0);
    let cookie = create_qp(&mut d, qpn);
    let buf = d.alloc(0x1_0000, 0x1000);
    assert_eq!(d.reg_mr(1, 0, PDN, buf, 0x1_0000, ALL_ACCESS).status, 0);
    (d, buf, cookie)
}

/// CREATE_QP `qpn` on CQ 1; returns its cookie.
fn create_qp(d: &mut TestDriver, qpn: u32) -> u32 {
    let c = d.create_qp(qpn, CQ, 8, 6);
    assert_eq!(c.status, 0);
    u32::try_from(c.resp0).expect("the cookie is resp0 31:0, the rest 0")
}

/// A's connection (active side): to B (whose QP's cookie is `peer`), its socket's sequence
/// numbers after the MPA exchange.
fn conn_a(peer: u32) -> IwarpConnection {
    IwarpConnection {
        cookie: peer,
        dst_ip: IP_B,
        src_ip: IP_A,
        src_port: PORT_A,
        dst_port: PORT_B,
        snd_nxt: A_SND,
        rcv_nxt: B_SND,
    }
}

/// B's connection (passive side, to A whose QP's cookie is `peer`), with the MPA reply's
/// sequence space reserved.
fn conn_b(peer: u32) -> IwarpConnection {
    IwarpConnection {
        cookie: peer,
        dst_ip: IP_A,
        src_ip: IP_B,
        src_port: PORT_B,
        dst_port: PORT_A,
        snd_nxt: B_SND,
        rcv_nxt: A_SND,
    }
}

struct Pair {
    clock: Arc<ManualClock>,
    a: TestDriver,
    b: TestDriver,
    buf_a: u64,
    buf_b: u64,
    /// QA's cookie.
    cookie_a: u32,
    /// QB's cookie.
    cookie_b: u32,
}

impl Pair {
    fn new(atomic: bool) -> Self {
        let clock = Arc::new(ManualClock::new());
        let f = fabric();
        let (a, buf_a, cookie_a) = iw_dev(&clock, &f, QA, atomic);
        let (b, buf_b, cookie_b) = iw_dev(&clock, &f, QB, atomic);
        Pair {
            clock,
            a,
            b,
            buf_a,
            buf_b,
            cookie_a,
            cookie_b,
        }
    }

    /// Both sides to RTS, the passive side first (as iw_accept does).
    fn connected(atomic: bool) -> Self {
        let mut p = Pair::new(atomic);
        assert_eq!(p.b.iwarp_rts(QB, &p.conn_b()).status, 0);
        assert_eq!(p.a.iwarp_rts(QA, &p.conn_a()).status, 0);
        p
    }

    /// A's connection, with B's cookie.
    fn conn_a(&self) -> IwarpConnection {
        conn_a(self.cookie_b)
    }

    /// B's connection, with A's cookie.
    fn conn_b(&self) -> IwarpConnection {
        conn_b(self.cookie_a)
    }

    /// A third iWARP function on the pair's fabric (the intruder), with QP `qpn`.
    fn intruder(&self, qpn: u32) -> (TestDriver, u64, u32) {
        let f = self.a.dev.port().expect("attached").fabric().clone();
        iw_dev(&self.clock, &f, qpn, true)
    }

    fn pump(&mut self) {
        pump(&mut [&mut self.a, &mut self.b]);
    }

    /// Moves the clock by one retransmission timeout and runs due work and the fabric.
    fn tick(&mut self) {
        self.clock.advance(RETRY_TIMEOUT);
        self.a.run_due();
        self.b.run_due();
        self.pump();
    }
}

fn sge(addr: u64, len: u32) -> wire::Sge {
    wire::Sge {
        addr,
        len,
        key: stag(1),
    }
}

fn sq(cqes: &[DataCqe]) -> Vec<(u8, u8)> {
    cqes.iter()
        .filter(|c| c.qtype == CQE_QTYPE_SQ)
        .map(|c| (c.opcode, c.status))
        .collect()
}

fn rq(cqes: &[DataCqe]) -> Vec<(u8, u8)> {
    cqes.iter()
        .filter(|c| c.qtype == CQE_QTYPE_RQ)
        .map(|c| (c.opcode, c.status))
        .collect()
}

fn aeqes(d: &mut TestDriver) -> Vec<(u8, u32)> {
    std::iter::from_fn(|| d.poll_aeqe())
        .map(|AeqEvent { ty, data0, .. }| (ty, data0))
        .collect()
}

fn state(d: &TestDriver, qpn: u32) -> IwarpState {
    d.dev.iwarp_qp(qpn).expect("an iWARP QP").state
}

fn send_len(n: usize) -> u32 {
    StreamMsg::Request {
        id: 0,
        req: Request::Send {
            data: vec![0; n],
            offset: 0,
            last: true,
            imm: None,
            inv: None,
            solicited: false,
        },
    }
    .stream_len()
}

/// Both QPs terminated: ERROR, unbound.
fn both_dead(p: &Pair) {
    for (d, qpn) in [(&p.a, QA), (&p.b, QB)] {
        let i = d.dev.iwarp_qp(qpn).unwrap();
        assert_eq!((i.state, i.live), (IwarpState::Error, false), "QP {qpn}");
    }
}

// ------------------------------------------------------------------------------------------------
// Commands
// ------------------------------------------------------------------------------------------------

#[test]
fn iwarp_rc_only_ud_refused_without_leftovers() {
    let clock = Arc::new(ManualClock::new());
    let (mut d, _, _) = iw_dev(&clock, &fabric(), QA, true);
    assert_eq!(
        d.create_ud_qp(11, CQ, 8, 6, PDN).status,
        Status::Unsupported.code()
    );
    assert_eq!(d.dev.qps().len(), 1, "only the RC QP");
    assert_eq!(
        d.create_qp_of(11, CQ, 8, 6, QP_TYPE_UD, PDN).status,
        Status::Unsupported.code()
    );
    // The QPN is free: an RC QP takes it.
    assert_eq!(d.create_qp(11, CQ, 8, 6).status, 0);
    // The cookie is not the QPN (see cookies_are_random_unique_and_not_the_qpn).
    assert_ne!(d.create_qp(12, CQ, 8, 6).resp0, 12);
    assert_eq!(
        d.control("query qps"),
        Ok("qps=10:IDLE,11:IDLE,12:IDLE".into())
    );
    // QUERY_QP answers with the iWARP state.
    let c = d.query_qp(11);
    assert_eq!(
        (c.status, c.resp0 >> 48 & 0xff),
        (0, IwarpState::Idle as u64)
    );
    assert_eq!(
        d.exec(Command::DestroyQp, |s| wire::U32Arg(11).write_fields(s))
            .status,
        0
    );
    assert_eq!(d.dev.qps().len(), 2);
    // The RoCEv2 addressing commands stay RoCEv2-only.
    assert_eq!(
        d.set_gid(0, crate::testing::ipv4_gid(IP_A)).status,
        Status::Unsupported.code()
    );
}

#[test]
fn iwarp_invalid_transitions_are_refused_and_change_nothing() {
    let mut p = Pair::new(true);
    let ca = p.conn_a();
    let d = &mut p.a;
    let inval = Status::InvalidParam.code();
    // From IDLE: CLOSING, TERMINATE, IDLE and unknown states are refused.
    for s in [IwarpState::Closing, IwarpState::Terminate, IwarpState::Idle] {
        assert_eq!(d.iwarp_state(QA, s).status, inval, "IDLE -> {s:?}");
    }
    assert_eq!(d.modify_iwarp_raw(QA, 6, |_| {}).status, inval);
    assert_eq!(d.modify_iwarp_raw(QA, 0xff, |_| {}).status, inval);
    assert_eq!(state(d, QA), IwarpState::Idle);
    // A QP that does not exist.
    assert_eq!(
        d.iwarp_state(99, IwarpState::Error).status,
        Status::NotFound.code()
    );
    // IDLE -> RTR -> RTS is fine; then RTS -> RTS, RTR, IDLE are not.
    assert_eq!(d.iwarp_state(QA, IwarpState::Rtr).status, 0);
    assert_eq!(state(d, QA), IwarpState::Rtr);
    assert_eq!(d.iwarp_rts(QA, &ca).status, 0);
    assert_eq!(d.iwarp_rts(QA, &ca).status, inval);
    assert_eq!(d.iwarp_state(QA, IwarpState::Rtr).status, inval);
    assert_eq!(d.iwarp_state(QA, IwarpState::Idle).status, inval);
    let info = d.dev.iwarp_qp(QA).unwrap();
    assert_eq!((info.state, info.live), (IwarpState::Rts, true));
    // RTS -> ERROR; then ERROR -> RTS, ERROR -> CLOSING are refused.
    assert_eq!(d.iwarp_state(QA, IwarpState::Error).status, 0);
    assert_eq!(d.iwarp_rts(QA, &ca).status, inval);
    assert_eq!(d.iwarp_state(QA, IwarpState::Closing).status, inval);
    assert_eq!(d.iwarp_state(QA, IwarpState::Error).status, inval);
    assert_eq!(state(d, QA), IwarpState::Error);
    // IDLE -> ERROR directly is a stop too.
    assert_eq!(d.create_qp(11, CQ, 8, 6).status, 0);
    assert_eq!(d.iwarp_state(11, IwarpState::Error).status, 0);
    assert_eq!(state(d, 11), IwarpState::Error);
}

#[test]
fn iwarp_stop_form_with_garbage_after_word_8_is_accepted() {
    let mut p = Pair::connected(true);
    // The stop form: the rest of the command is stack garbage that would make a bogus RTS
    // (another tuple, other sequence numbers).
    let c =
        p.a.modify_iwarp_raw(QA, IwarpState::Closing as u8, |s| s[12..].fill(0xa5));
    assert_eq!(c.status, 0);
    let i = p.a.dev.iwarp_qp(QA).unwrap();
    assert_eq!(i.state, IwarpState::Closing);
    assert_eq!(
        (i.conn, i.snd_nxt, i.rcv_nxt, i.cookie),
        (
            Some(Conn {
                src_ip: Ipv4Addr::from(IP_A),
                src_port: PORT_A,
                dst_ip: Ipv4Addr::from(IP_B),
                dst_port: PORT_B,
            }),
            A_SND.wrapping_add(StreamMsg::Terminate { status: None }.stream_len()),
            B_SND,
            p.cookie_b
        ),
        "the garbage was not read"
    );
    // CLOSING -> ERROR, garbage again.
    let c =
        p.a.modify_iwarp_raw(QA, IwarpState::Error as u8, |s| s[12..].fill(0x5a));
    assert_eq!(c.status, 0);
    assert_eq!(state(&p.a, QA), IwarpState::Error);
    // The peer heard of it.
    p.pump();
    assert_eq!(state(&p.b, QB), IwarpState::Error);
    assert_eq!(aeqes(&mut p.b), [(0, QB)]);
}

#[test]
fn claims_per_tuple_are_bounded() {
    let mut p = Pair::connected(true);
    // QA holds A's tuple; more QPs of A may claim it, each with its own cookie, up to
    // MAX_CLAIMS in all: they take nothing from QA's connection.
    let last = QA + MAX_CLAIMS as u32;
    for qpn in QA + 1..last {
        create_qp(&mut p.a, qpn);
        assert_eq!(p.a.iwarp_rts(qpn, &p.conn_a()).status, 0, "QP {qpn}");
    }
    create_qp(&mut p.a, last);
    assert_eq!(
        p.a.iwarp_rts(last, &p.conn_a()).status,
        Status::Exists.code(),
        "one claim too many"
    );
    assert_eq!(state(&p.a, last), IwarpState::Idle, "nothing changed");
    // Another function's claims on the tuple count on their own.
    create_qp(&mut p.b, 21);
    assert_eq!(p.b.iwarp_rts(21, &p.conn_a()).status, 0);
    // The connection still carries data, between QA and QB only.
    p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    p.a.send_wqe(QA, &Wqe::send_inline(b"still ours"));
    p.pump();
    assert_eq!(rq(&p.b.poll_all(CQ)), [(op::RECEIVE, wc::SUCCESS)]);
    assert_eq!(p.b.peek(p.buf_b, 10), b"still ours");
    assert_eq!(sq(&p.a.poll_all(CQ)), [(op::SEND, wc::SUCCESS)]);
    // A claim that goes (its QP destroyed) makes room for another.
    assert_eq!(
        p.a.exec(Command::DestroyQp, |s| wire::U32Arg(QA + 1).write_fields(s))
            .status,
        0
    );
    assert_eq!(p.a.iwarp_rts(last, &p.conn_a()).status, 0);
    assert_eq!(state(&p.b, QB), IwarpState::Rts, "QB did not hear of it");
}

// ------------------------------------------------------------------------------------------------
// Traffic
// ------------------------------------------------------------------------------------------------

#[test]
fn iwarp_rts_binds_then_send_recv() {
    let mut p = Pair::new(true);
    // Receives in IDLE; a Send rung before RTS is kept.
    let r = p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    p.a.poke(p.buf_a, b"over tcp");
    let s = p.a.send_wqe(QA, &Wqe::send(&[sge(p.buf_a, 8)]));
    p.pump();
    assert!(p.a.poll_all(CQ).is_empty() && p.b.poll_all(CQ).is_empty());
    assert_eq!(p.b.iwarp_rts(QB, &p.conn_b()).status, 0);
    assert_eq!(
        p.b.control("query qps"),
        Ok(format!(
            "qps=20:RTS:10.0.0.2:4791-10.0.0.1:40000:snd={B_SND}:rcv={A_SND}:cookie={}",
            p.cookie_a
        ))
    );
    assert_eq!(p.a.iwarp_rts(QA, &p.conn_a()).status, 0);
    p.pump();
    let ca = p.a.poll_all(CQ);
    assert_eq!(sq(&ca), [(op::SEND, wc::SUCCESS)]);
    assert_eq!((ca[0].wqe_index, ca[0].byte_len), (u32::from(s), 8));
    let cb = p.b.poll_all(CQ);
    assert_eq!(rq(&cb), [(op::RECEIVE, wc::SUCCESS)]);
    assert_eq!((cb[0].wqe_index, cb[0].byte_len), (u32::from(r), 8));
    assert_eq!(p.b.peek(p.buf_b, 8), b"over tcp");
    // One FPDU of sequence space on A's stream, seen by both ends.
    let a = p.a.dev.iwarp_qp(QA).unwrap();
    let b = p.b.dev.iwarp_qp(QB).unwrap();
    assert_eq!(a.snd_nxt, A_SND + send_len(8));
    assert_eq!(b.rcv_nxt, a.snd_nxt);
    assert_eq!((a.rcv_nxt, b.snd_nxt), (B_SND, B_SND), "the ACK takes none");
    // QUERY_QP: RTS, the sequence numbers' low 24 bits.
    assert_eq!(
        p.a.query_qp(QA).resp0,
        wire::query_qp_resp0_iwarp(a.snd_nxt, a.rcv_nxt, IwarpState::Rts)
    );
    assert_eq!(
        p.a.control("query queues"),
        Ok(format!(
            "queues=q10:RTS:1/1:0:0:0:10.0.0.1:40000-10.0.0.2:4791:snd={}:rcv={B_SND}:cookie={},\
             c1:1/0:-:-",
            a.snd_nxt, p.cookie_b
        ))
    );
    // The other way (B's stream wraps through 0), solicited with immediate.
    p.a.post_recv(QA, p.buf_a + 0x100, 0x100, stag(1));
    p.b.poke(p.buf_b + 0x200, &[7; 40]);
    p.b.send_wqe(
        QB,
        &Wqe::send(&[sge(p.buf_b + 0x200, 40)])
            .imm([1, 2, 3, 4])
            .solicited(),
    );
    p.pump();
    let ca = p.a.poll_all(CQ);
    assert_eq!(rq(&ca), [(op::RSP_SEND_IMM, wc::SUCCESS)]);
    assert_eq!(ca[0].extra, CqeExtra::Imm([1, 2, 3, 4]));
    assert_eq!(p.a.peek(p.buf_a + 0x100, 40), [7; 40]);
    assert_eq!(sq(&p.b.poll_all(CQ)), [(op::SEND_WITH_IMM, wc::SUCCESS)]);
    let b = p.b.dev.iwarp_qp(QB).unwrap();
    assert_eq!(b.snd_nxt, B_SND.wrapping_add(send_len(40)));
    assert!(b.snd_nxt < B_SND, "wrapped");
    assert_eq!(p.a.dev.iwarp_qp(QA).unwrap().rcv_nxt, b.snd_nxt);
}

#[test]
fn iwarp_write_and_write_with_immediate() {
    let mut p = Pair::connected(true);
    p.a.poke(p.buf_a, b"tagged");
    p.a.send_wqe(
        QA,
        &Wqe::write(stag(1), p.buf_b + 0x800, &[sge(p.buf_a, 6)]),
    );
    p.pump();
    assert_eq!(sq(&p.a.poll_all(CQ)), [(op::WRITE, wc::SUCCESS)]);
    assert!(p.b.poll_all(CQ).is_empty(), "a plain Write consumes no RQE");
    assert_eq!(p.b.peek(p.buf_b + 0x800, 6), b"tagged");
    p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    p.a.send_wqe(
        QA,
        &Wqe::write_inline(stag(1), p.buf_b + 0x900, b"imm").imm([9, 8, 7, 6]),
    );
    p.pump();
    assert_eq!(sq(&p.a.poll_all(CQ)), [(op::WRITE_WITH_IMM, wc::SUCCESS)]);
    let cb = p.b.poll_all(CQ);
    assert_eq!(rq(&cb), [(op::RECV_IMM, wc::SUCCESS)]);
    assert_eq!(
        (cb[0].extra, cb[0].byte_len),
        (CqeExtra::Imm([9, 8, 7, 6]), 3)
    );
    assert_eq!(p.b.peek(p.buf_b + 0x900, 3), b"imm");
    assert_eq!(
        p.b.dev.iwarp_qp(QB).unwrap().rcv_nxt,
        p.a.dev.iwarp_qp(QA).unwrap().snd_nxt
    );
}

#[test]
fn iwarp_remote_access_error_terminates_both() {
    let mut p = Pair::connected(true);
    p.a.post_recv(QA, p.buf_a + 0x100, 0x100, stag(1));
    p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    // A Write under an rkey B does not have; then a Send that is flushed.
    p.a.send_wqe(QA, &Wqe::write_inline(stag(7), p.buf_b, b"x"));
    p.a.send_wqe(QA, &Wqe::send_inline(b"y"));
    p.pump();
    let ca = p.a.poll_all(CQ);
    assert_eq!(
        sq(&ca),
        [(op::WRITE, wc::RECV_STAG), (op::SEND, wc::FLUSHED)]
    );
    assert_eq!(aeqes(&mut p.a), [(0, QA)], "requester: QP fatal");
    assert_eq!(aeqes(&mut p.b), [(2, QB)], "responder: access error");
    both_dead(&p);
    // Both RQs are flushed; B never saw the Send.
    assert_eq!(rq(&ca), [(op::RECEIVE, wc::FLUSHED)]);
    assert_eq!(rq(&p.b.poll_all(CQ)), [(op::RECEIVE, wc::FLUSHED)]);
    // A WQE posted afterwards waits for REFLUSH, as on RoCEv2.
    p.a.send_wqe(QA, &Wqe::send_inline(b"late"));
    assert!(p.a.poll_all(CQ).is_empty());
    assert_eq!(p.a.reflush(QA).status, 0);
    assert_eq!(sq(&p.a.poll_all(CQ)), [(op::SEND, wc::FLUSHED)]);
}

#[test]
fn iwarp_read_needs_remote_write_on_the_sink() {
    let mut p = Pair::connected(true);
    p.b.poke(p.buf_b + 0x400, b"remote bytes");
    // MR 2 on A: local write but no remote write.
    let sink = p.a.alloc(0x1000, 0x1000);
    let local_only = access::LOCAL_READ | access::LOCAL_WRITE;
    assert_eq!(p.a.reg_mr(2, 0, PDN, sink, 0x1000, local_only).status, 0);
    // With remote write on the sink (MR 1): fine.
    p.a.send_wqe(
        QA,
        &Wqe::read(stag(1), p.buf_a + 0x40, 12, stag(1), p.buf_b + 0x400),
    );
    p.pump();
    assert_eq!(sq(&p.a.poll_all(CQ)), [(op::READ, wc::SUCCESS)]);
    assert_eq!(p.a.peek(p.buf_a + 0x40, 12), b"remote bytes");
    // The Read Request and the Read Response each took sequence space.
    let a = p.a.dev.iwarp_qp(QA).unwrap();
    let b = p.b.dev.iwarp_qp(QB).unwrap();
    assert_eq!((a.snd_nxt, b.rcv_nxt), (A_SND + 48, A_SND + 48));
    assert_eq!((b.snd_nxt, a.rcv_nxt), (B_SND + 28, B_SND + 28));
    // Without: status 12 at the requester, the sink untouched, the connection terminated.
    p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    p.a.send_wqe(
        QA,
        &Wqe::read(wire::stag(2, 0), sink, 12, stag(1), p.buf_b + 0x400),
    );
    p.pump();
    assert_eq!(sq(&p.a.poll_all(CQ)), [(op::READ, wc::SEND_ACCESS)]);
    assert_eq!(p.a.peek(sink, 12), [0; 12]);
    both_dead(&p);
    assert_eq!(aeqes(&mut p.b), [(0, QB)], "the peer hears of it");
    assert_eq!(rq(&p.b.poll_all(CQ)), [(op::RECEIVE, wc::FLUSHED)]);
}

#[test]
fn iwarp_atomics_with_the_capability() {
    let mut p = Pair::connected(true);
    let target = p.buf_b + 0x1000;
    p.b.poke(target, &5u64.to_le_bytes());
    p.a.send_wqe(
        QA,
        &Wqe::atomic(stag(1), target, None, 10, stag(1), p.buf_a),
    );
    p.a.send_wqe(
        QA,
        &Wqe::atomic(stag(1), target, Some(15), 99, stag(1), p.buf_a + 8),
    );
    p.pump();
    assert_eq!(
        sq(&p.a.poll_all(CQ)),
        [(op::ATOMIC_FAA, wc::SUCCESS), (op::ATOMIC_CAS, wc::SUCCESS)]
    );
    assert_eq!(p.b.peek(target, 8), 99u64.to_le_bytes());
    assert_eq!(p.a.peek(p.buf_a, 8), 5u64.to_le_bytes());
    assert_eq!(p.a.peek(p.buf_a + 8, 8), 15u64.to_le_bytes());
    assert_eq!(
        p.a.dev.iwarp_qp(QA).unwrap().rcv_nxt,
        p.b.dev.iwarp_qp(QB).unwrap().snd_nxt
    );
    assert_eq!(state(&p.a, QA), IwarpState::Rts);
}

#[test]
fn iwarp_atomics_without_the_capability_fail_and_terminate() {
    let mut p = Pair::connected(false);
    let target = p.buf_b + 0x1000;
    p.b.poke(target, &5u64.to_le_bytes());
    p.a.send_wqe(
        QA,
        &Wqe::atomic(stag(1), target, None, 10, stag(1), p.buf_a),
    );
    p.pump();
    assert_eq!(sq(&p.a.poll_all(CQ)), [(op::ATOMIC_FAA, wc::SEND_FORMAT)]);
    assert_eq!(p.b.peek(target, 8), 5u64.to_le_bytes(), "not executed");
    both_dead(&p);
    assert_eq!(aeqes(&mut p.b), [(0, QB)]);
}

#[test]
fn iwarp_send_before_the_peer_is_bound_is_retransmitted() {
    let mut p = Pair::new(true);
    // The passive side reaches RTS and sends at once; the active side is not bound yet.
    assert_eq!(p.b.iwarp_rts(QB, &p.conn_b()).status, 0);
    p.b.send_wqe(QB, &Wqe::send_inline(b"early"));
    p.pump();
    let b = p.b.dev.iwarp_qp(QB).unwrap();
    assert_eq!((b.backlog, b.snd_nxt), (1, B_SND.wrapping_add(send_len(5))));
    assert_eq!(
        p.b.control("query queues")
            .unwrap()
            .split(',')
            .next()
            .unwrap(),
        format!(
            "queues=q20:RTS:1/1:1:1:0:10.0.0.2:4791-10.0.0.1:40000:snd={}:rcv=1000:cookie={}",
            b.snd_nxt, p.cookie_a
        ),
        "one request unanswered, one message waiting for retransmission"
    );
    // A reaches RTS and posts its receive; nothing arrives before B's timer fires.
    p.a.post_recv(QA, p.buf_a, 0x100, stag(1));
    assert_eq!(p.a.iwarp_rts(QA, &p.conn_a()).status, 0);
    p.pump();
    assert!(p.a.poll_all(CQ).is_empty());
    p.clock.advance(RETRY_TIMEOUT / 2);
    p.b.run_due();
    p.pump();
    assert!(p.a.poll_all(CQ).is_empty(), "not before the timer");
    p.tick();
    // Retransmitted with the same sequence number: A takes it.
    assert_eq!(rq(&p.a.poll_all(CQ)), [(op::RECEIVE, wc::SUCCESS)]);
    assert_eq!(p.a.peek(p.buf_a, 5), b"early");
    assert_eq!(sq(&p.b.poll_all(CQ)), [(op::SEND, wc::SUCCESS)]);
    let (a, b) = (p.a.dev.iwarp_qp(QA).unwrap(), p.b.dev.iwarp_qp(QB).unwrap());
    assert_eq!((b.backlog, a.rcv_nxt), (0, b.snd_nxt));
    assert!(aeqes(&mut p.a).is_empty() && aeqes(&mut p.b).is_empty());
}

#[test]
fn iwarp_peer_never_bound_retry_exceeded() {
    let mut p = Pair::new(true);
    assert_eq!(p.b.iwarp_rts(QB, &p.conn_b()).status, 0);
    p.b.send_wqe(QB, &Wqe::send_inline(b"x"));
    p.b.send_wqe(QB, &Wqe::send_inline(b"y"));
    p.pump();
    for _ in 0..RETRY_COUNT {
        p.tick();
        assert!(p.b.poll_all(CQ).is_empty(), "completed too early");
    }
    p.tick();
    assert_eq!(
        sq(&p.b.poll_all(CQ)),
        [(op::SEND, wc::RETRY_EXCEEDED), (op::SEND, wc::FLUSHED)]
    );
    assert_eq!(aeqes(&mut p.b), [(0, QB)]);
    let b = p.b.dev.iwarp_qp(QB).unwrap();
    assert_eq!((b.state, b.live, b.backlog), (IwarpState::Error, false, 0));
    // Unbound: A's RTS on the mirror tuple now finds nobody.
    assert_eq!(p.a.iwarp_rts(QA, &p.conn_a()).status, 0);
    assert!(p
        .a
        .dev
        .port()
        .unwrap()
        .bound(Conn {
            src_ip: Ipv4Addr::from(IP_B),
            src_port: PORT_B,
            dst_ip: Ipv4Addr::from(IP_A),
            dst_port: PORT_A,
        })
        .is_empty());
}

#[test]
fn iwarp_wrong_peer_cookie_is_refused() {
    let mut p = Pair::new(true);
    assert_eq!(p.b.iwarp_rts(QB, &p.conn_b()).status, 0);
    // A was told a wrong cookie: B's QPN (what the cookie used to be).
    let wrong = IwarpConnection {
        cookie: QB,
        ..p.conn_a()
    };
    assert_eq!(p.a.iwarp_rts(QA, &wrong).status, 0);
    p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    p.a.send_wqe(QA, &Wqe::send_inline(b"to whom"));
    p.pump();
    // B's binding does not answer A's (it names A's cookie, A names another one): A's message
    // is lost and retransmitted until A gives up, as with a peer that never reached RTS.
    for _ in 0..RETRY_COUNT {
        p.tick();
        assert!(p.a.poll_all(CQ).is_empty(), "completed too early");
    }
    p.tick();
    assert_eq!(sq(&p.a.poll_all(CQ)), [(op::SEND, wc::RETRY_EXCEEDED)]);
    assert_eq!(aeqes(&mut p.a), [(0, QA)]);
    // B never got it: nothing placed, RCV.NXT where it was, its stream intact.
    assert!(p.b.poll_all(CQ).is_empty(), "not delivered");
    assert_eq!(p.b.peek(p.buf_b, 7), [0; 7]);
    let b = p.b.dev.iwarp_qp(QB).unwrap();
    assert_eq!((b.state, b.live, b.rcv_nxt), (IwarpState::Rts, true, A_SND));
    assert!(aeqes(&mut p.b).is_empty());
}

#[test]
fn iwarp_forgotten_mpa_reply_reservation_breaks_the_stream() {
    let mut p = Pair::new(true);
    // The passive side hands over its socket's SND.NXT without the 28 + private-data bytes
    // the kernel will still send the MPA reply in.
    let forgot = IwarpConnection {
        snd_nxt: B_SOCKET_SND,
        ..p.conn_b()
    };
    assert_eq!(p.b.iwarp_rts(QB, &forgot).status, 0);
    assert_eq!(p.a.iwarp_rts(QA, &p.conn_a()).status, 0);
    p.a.post_recv(QA, p.buf_a, 0x100, stag(1));
    p.b.send_wqe(QB, &Wqe::send_inline(b"hello"));
    p.pump();
    assert_eq!(rq(&p.a.poll_all(CQ)), [(op::RECEIVE, wc::FLUSHED)]);
    assert_eq!(p.a.peek(p.buf_a, 5), [0; 5], "nothing placed");
    assert_eq!(sq(&p.b.poll_all(CQ)), [(op::SEND, wc::GENERAL)]);
    assert_eq!(aeqes(&mut p.a), [(0, QA)]);
    assert_eq!(aeqes(&mut p.b), [(0, QB)]);
    both_dead(&p);
}

#[test]
fn iwarp_send_without_receive_terminates_both() {
    let mut p = Pair::connected(true);
    p.a.post_recv(QA, p.buf_a, 0x100, stag(1));
    p.a.send_wqe(QA, &Wqe::send_inline(b"nobody listens"));
    p.a.send_wqe(QA, &Wqe::write_inline(stag(1), p.buf_b, b"z"));
    p.pump();
    // No RNR wait: the Send fails at once, the Write behind it is flushed.
    assert_eq!(
        sq(&p.a.poll_all(CQ)),
        [(op::SEND, wc::RECV_FORMAT), (op::WRITE, wc::FLUSHED)]
    );
    assert_eq!(p.b.peek(p.buf_b, 1), [0]);
    assert_eq!(aeqes(&mut p.b), [(1, QB)], "responder: RQ error");
    assert_eq!(aeqes(&mut p.a), [(0, QA)], "requester: QP fatal");
    both_dead(&p);
    assert_eq!(p.b.dev.iwarp_qp(QB).unwrap().backlog, 0);
    // The held queue of RoCEv2 is not used.
    assert!(p
        .b
        .control("query queues")
        .unwrap()
        .contains("q20:ERROR:0/0:0:0:0:"));
}

#[test]
fn iwarp_local_stop_reaches_the_peer() {
    for stop in [
        IwarpState::Closing,
        IwarpState::Terminate,
        IwarpState::Error,
    ] {
        let mut p = Pair::connected(true);
        p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
        // B has a Read outstanding towards A when A stops.
        p.b.post_wqe(
            QB,
            &Wqe::read(stag(1), p.buf_b + 0x100, 8, stag(1), p.buf_a),
        );
        assert_eq!(p.a.iwarp_state(QA, stop).status, 0);
        assert_eq!(state(&p.a, QA), stop);
        p.b.ring_sq(QB);
        p.pump();
        let cb = p.b.poll_all(CQ);
        assert_eq!(sq(&cb), [(op::READ, wc::FLUSHED)], "{stop:?}");
        assert_eq!(rq(&cb), [(op::RECEIVE, wc::FLUSHED)]);
        assert_eq!(aeqes(&mut p.b), [(0, QB)]);
        assert!(aeqes(&mut p.a).is_empty(), "the stopping side asked for it");
        let b = p.b.dev.iwarp_qp(QB).unwrap();
        assert_eq!((b.state, b.live), (IwarpState::Error, false));
        assert!(!p.a.dev.iwarp_qp(QA).unwrap().live);
        // B's driver stops its QP too (its view is still RTS): accepted, stays ERROR.
        assert_eq!(p.b.iwarp_state(QB, IwarpState::Closing).status, 0);
        assert_eq!(state(&p.b, QB), IwarpState::Error);
        assert_eq!(p.b.iwarp_state(QB, IwarpState::Error).status, 0);
        assert!(p.b.control("query qps").unwrap().ends_with(":closed"));
    }
}

#[test]
fn iwarp_device_reset_unbinds_and_tells_the_peer() {
    let mut p = Pair::connected(true);
    p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    p.a.w32(regs::DEV_CTRL, regs::DEV_CTRL_RESET);
    p.pump();
    assert_eq!(rq(&p.b.poll_all(CQ)), [(op::RECEIVE, wc::FLUSHED)]);
    assert_eq!(aeqes(&mut p.b), [(0, QB)]);
    assert_eq!(state(&p.b, QB), IwarpState::Error);
    // A's tuple is free again: after a new INIT, a new QP binds it.
    assert!(p.a.dev.qps().is_empty());
    let (mut a2, _, peer) = {
        let f = p.a.dev.port().unwrap().fabric().clone();
        let clock = p.clock.clone();
        let peer = p.cookie_b;
        drop(p);
        let (d, buf, _) = iw_dev(&clock, &f, QA, true);
        (d, buf, peer)
    };
    assert_eq!(a2.iwarp_rts(QA, &conn_a(peer)).status, 0);
    // And a device that goes away (a client's disconnect ends in Device::reset, then the port
    // stays; dropping the device drops its port and bindings).
    a2.dev.reset();
    assert!(a2
        .dev
        .port()
        .unwrap()
        .bound(Conn {
            src_ip: Ipv4Addr::from(IP_A),
            src_port: PORT_A,
            dst_ip: Ipv4Addr::from(IP_B),
            dst_port: PORT_B,
        })
        .is_empty());
}

// ------------------------------------------------------------------------------------------------
// Cookies and intruders
// ------------------------------------------------------------------------------------------------

/// Runs due work on every driver after one retransmission timeout, then the fabric.
fn tick_all(clock: &ManualClock, drivers: &mut [&mut TestDriver]) {
    clock.advance(RETRY_TIMEOUT);
    for d in drivers.iter_mut() {
        d.run_due();
    }
    pump(drivers);
}

#[test]
fn cookies_are_random_unique_and_not_the_qpn() {
    let clock = Arc::new(ManualClock::new());
    let f = fabric();
    let (mut d, _, first) = iw_dev(&clock, &f, QA, true);
    // Many QPs, all on QA's queue buffers (the model reads them only when they are used).
    let q = d.dp.qps[&QA].clone();
    let create = |d: &mut TestDriver, qpn| {
        let c = d.create_qp_on(qpn, CQ, [(q.sq, 8), (q.rq, 6)], QP_TYPE_RC, PDN);
        assert_eq!(c.status, 0, "QP {qpn}");
        u32::try_from(c.resp0).expect("32 bits")
    };
    let qpns = 11..2011u32;
    let mut live: BTreeMap<u32, u32> = qpns.clone().map(|n| (n, create(&mut d, n))).collect();
    live.insert(QA, first);
    let unique = |live: &BTreeMap<u32, u32>| live.values().collect::<BTreeSet<_>>().len();
    assert_eq!(unique(&live), live.len(), "no duplicates");
    assert!(live.iter().all(|(&qpn, &c)| c != 0 && c != qpn));
    assert!(
        live.values().filter(|&&c| c < 1 << 20).count() < 16,
        "not small numbers (about 1 of 2000 random ones is below 2^20)"
    );
    // Destroyed and created again: other cookies, still unique among the live QPs.
    for qpn in qpns.clone().step_by(2) {
        let c = d.exec(Command::DestroyQp, |s| wire::U32Arg(qpn).write_fields(s));
        assert_eq!(c.status, 0);
        let old = live[&qpn];
        let new = create(&mut d, qpn);
        assert_ne!(
            new, old,
            "QP {qpn}: the cookie is not a function of the QPN"
        );
        live.insert(qpn, new);
    }
    assert_eq!(unique(&live), live.len());
    assert!(live.values().all(|&c| c != 0));
    // Another function's QP of the same number has another cookie.
    let (_, _, theirs) = iw_dev(&clock, &f, QA, true);
    assert_ne!(theirs, first);
    // A RoCEv2 function answers with the QPN, as before.
    let mut roce = TestDriver::new(DeviceConfig::default());
    roce.dp_setup(1);
    assert_eq!(roce.create_cq(CQ, 6).status, 0);
    let c = roce.create_qp(QA, CQ, 8, 6);
    assert_eq!((c.status, c.resp0), (0, u64::from(QA)));
}

#[test]
fn a_tuple_claimed_first_by_another_port_does_not_capture_the_stream() {
    let mut p = Pair::new(true);
    const QX: u32 = 30;
    let (mut x, buf_x, _) = p.intruder(QX);
    // Before the victims reach RTS, the intruder binds the tuple B will bind, naming A's QPN
    // as the peer cookie (what the cookie used to be), and A's tuple, naming B's QPN.
    let as_b = IwarpConnection {
        cookie: QA,
        ..p.conn_b()
    };
    assert_eq!(x.iwarp_rts(QX, &as_b).status, 0);
    create_qp(&mut x, QX + 1);
    let as_a = IwarpConnection {
        cookie: QB,
        ..p.conn_a()
    };
    assert_eq!(x.iwarp_rts(QX + 1, &as_a).status, 0);
    x.post_recv(QX, buf_x, 0x100, stag(1));
    x.post_recv(QX + 1, buf_x + 0x100, 0x100, stag(1));
    // The victims still reach RTS and move data both ways.
    assert_eq!(p.b.iwarp_rts(QB, &p.conn_b()).status, 0);
    assert_eq!(p.a.iwarp_rts(QA, &p.conn_a()).status, 0);
    p.a.post_recv(QA, p.buf_a, 0x100, stag(1));
    p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    p.a.send_wqe(QA, &Wqe::send_inline(b"for B only"));
    p.b.send_wqe(QB, &Wqe::send_inline(b"for A only"));
    p.a.poke(p.buf_a + 0x200, b"tagged");
    p.a.send_wqe(
        QA,
        &Wqe::write(stag(1), p.buf_b + 0x800, &[sge(p.buf_a + 0x200, 6)]),
    );
    pump(&mut [&mut p.a, &mut p.b, &mut x]);
    let ca = p.a.poll_all(CQ);
    assert_eq!(sq(&ca), [(op::SEND, wc::SUCCESS), (op::WRITE, wc::SUCCESS)]);
    assert_eq!(rq(&ca), [(op::RECEIVE, wc::SUCCESS)]);
    assert_eq!(p.a.peek(p.buf_a, 10), b"for A only");
    let cb = p.b.poll_all(CQ);
    assert_eq!(sq(&cb), [(op::SEND, wc::SUCCESS)]);
    assert_eq!(rq(&cb), [(op::RECEIVE, wc::SUCCESS)]);
    assert_eq!(p.b.peek(p.buf_b, 10), b"for B only");
    assert_eq!(p.b.peek(p.buf_b + 0x800, 6), b"tagged");
    // The intruder got nothing: no CQE, no data, its sequence numbers where it set them.
    assert!(x.poll_all(CQ).is_empty());
    assert_eq!(x.peek(buf_x, 0x200), [0; 0x200]);
    for (qpn, c) in [(QX, &as_b), (QX + 1, &as_a)] {
        let i = x.dev.iwarp_qp(qpn).unwrap();
        assert_eq!(
            (i.state, i.live, i.rcv_nxt),
            (IwarpState::Rts, true, c.rcv_nxt),
            "QP {qpn}"
        );
    }
    assert!(aeqes(&mut x).is_empty());
    assert!(aeqes(&mut p.a).is_empty() && aeqes(&mut p.b).is_empty());
    let (a, b) = (p.a.dev.iwarp_qp(QA).unwrap(), p.b.dev.iwarp_qp(QB).unwrap());
    assert_eq!((a.rcv_nxt, b.rcv_nxt), (b.snd_nxt, a.snd_nxt));
    // The intruder's claims go with its QPs; the victims' bindings stay.
    drop(x);
    let port = p.a.dev.port().unwrap();
    let tuple_a = Conn {
        src_ip: Ipv4Addr::from(IP_A),
        src_port: PORT_A,
        dst_ip: Ipv4Addr::from(IP_B),
        dst_port: PORT_B,
    };
    assert_eq!(port.bound(tuple_a), [(port.id(), QA)]);
    assert_eq!(port.bound(tuple_a.mirror()).len(), 1);
}

#[test]
fn a_stream_packet_with_a_guessed_cookie_is_refused() {
    let mut p = Pair::connected(true);
    const QX: u32 = 30;
    let (mut x, buf_x, _) = p.intruder(QX);
    // The intruder knows the tuple, the QPNs and A's RCV.NXT, and tries B's side of the
    // connection with a guessed peer cookie: A's QPN, then even A's real cookie. Neither is
    // enough: A's binding names B's cookie, which the intruder's QPs do not have.
    x.poke(buf_x, b"forged!!");
    for (qpn, guess) in [(QX, QA), (QX + 1, p.cookie_a)] {
        if qpn != QX {
            create_qp(&mut x, qpn);
        }
        let forged = IwarpConnection {
            cookie: guess,
            ..p.conn_b()
        };
        assert_eq!(x.iwarp_rts(qpn, &forged).status, 0);
        x.send_wqe(qpn, &Wqe::write(stag(1), p.buf_a + 0x800, &[sge(buf_x, 8)]));
        x.send_wqe(qpn, &Wqe::send_inline(b"forged"));
    }
    p.a.post_recv(QA, p.buf_a, 0x100, stag(1));
    pump(&mut [&mut p.a, &mut p.b, &mut x]);
    let untouched = |p: &mut Pair| {
        assert_eq!(p.a.peek(p.buf_a + 0x800, 8), [0; 8], "no Write landed");
        assert_eq!(p.a.peek(p.buf_a, 8), [0; 8], "no Send landed");
        assert!(p.a.poll_all(CQ).is_empty());
        assert!(aeqes(&mut p.a).is_empty());
        let a = p.a.dev.iwarp_qp(QA).unwrap();
        assert_eq!((a.state, a.live, a.rcv_nxt), (IwarpState::Rts, true, B_SND));
    };
    untouched(&mut p);
    // The intruder's messages find no QP that answers them: retransmitted until it gives up.
    for _ in 0..=RETRY_COUNT {
        tick_all(&p.clock, &mut [&mut p.a, &mut p.b, &mut x]);
        untouched(&mut p);
    }
    let cx = x.poll_all(CQ);
    assert_eq!(cx.len(), 4);
    assert!(cx
        .iter()
        .all(|c| c.status == wc::RETRY_EXCEEDED || c.status == wc::FLUSHED));
    // The victims' connection carries on.
    p.b.send_wqe(QB, &Wqe::send_inline(b"genuine"));
    p.pump();
    assert_eq!(rq(&p.a.poll_all(CQ)), [(op::RECEIVE, wc::SUCCESS)]);
    assert_eq!(p.a.peek(p.buf_a, 7), b"genuine");
    assert_eq!(sq(&p.b.poll_all(CQ)), [(op::SEND, wc::SUCCESS)]);
}

/// Compat mode (erdma_rs_hw 7.3): each end names the other's QPN with bit 30 in the cookie
/// field, on the tuple both computed from the addresses and QPNs. B's address is the larger as
/// the out-of-tree driver compares them (the last octet weighs most), so both use QB: B sends
/// from QB's low 16 bits to the reserved base, A the other way; each direction's sequence
/// numbers start at its source port's bytes swapped, times 4.
fn compat_conns() -> (IwarpConnection, IwarpConnection) {
    const BASE: u16 = 0x7790;
    // CAST: QB is small.
    let (low, high) = (QB as u16, BASE);
    let isn = |port: u16| u32::from(port.swap_bytes()) * 4;
    let a = IwarpConnection {
        cookie: QB | COMPAT_COOKIE,
        dst_ip: IP_B,
        src_ip: IP_A,
        src_port: high,
        dst_port: low,
        snd_nxt: isn(high),
        rcv_nxt: isn(low),
    };
    let b = IwarpConnection {
        cookie: QA | COMPAT_COOKIE,
        dst_ip: IP_A,
        src_ip: IP_B,
        src_port: low,
        dst_port: high,
        snd_nxt: isn(low),
        rcv_nxt: isn(high),
    };
    (a, b)
}

#[test]
fn compat_mode_connects_by_qpns_without_cookies() {
    let mut p = Pair::new(true);
    let (ca, cb) = compat_conns();
    // Either end first: nothing was handshaken.
    assert_eq!(p.a.iwarp_rts(QA, &ca).status, 0);
    assert_eq!(p.b.iwarp_rts(QB, &cb).status, 0);
    p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    p.a.poke(p.buf_a, b"compat");
    p.a.send_wqe(QA, &Wqe::send(&[sge(p.buf_a, 6)]));
    p.pump();
    assert_eq!(sq(&p.a.poll_all(CQ)), [(op::SEND, wc::SUCCESS)]);
    assert_eq!(rq(&p.b.poll_all(CQ)), [(op::RECEIVE, wc::SUCCESS)]);
    assert_eq!(p.b.peek(p.buf_b, 6), b"compat");
    let (a, b) = (p.a.dev.iwarp_qp(QA).unwrap(), p.b.dev.iwarp_qp(QB).unwrap());
    assert_eq!(b.rcv_nxt, a.snd_nxt);
    assert_eq!(a.snd_nxt, ca.snd_nxt + send_len(6));
    // B's QP goes (its application finished): A hears nothing, as from a RoCEv2 peer; its
    // receives stay posted, and its next Send finds nobody.
    p.a.post_recv(QA, p.buf_a + 0x100, 0x100, stag(1));
    let c =
        p.b.exec(Command::DestroyQp, |s| wire::U32Arg(QB).write_fields(s));
    assert_eq!(c.status, 0);
    p.pump();
    assert!(p.a.poll_all(CQ).is_empty(), "no flush");
    assert!(aeqes(&mut p.a).is_empty(), "no Terminate");
    assert_eq!(p.a.dev.iwarp_qp(QA).unwrap().state, IwarpState::Rts);
}

#[test]
fn compat_mode_needs_both_ends_to_name_each_other() {
    let mut p = Pair::new(true);
    let (ca, cb) = compat_conns();
    // B names another QPN than A's: A's messages reach nobody, and are kept for retransmission.
    let wrong = IwarpConnection {
        cookie: (QA + 1) | COMPAT_COOKIE,
        ..cb
    };
    assert_eq!(p.a.iwarp_rts(QA, &ca).status, 0);
    assert_eq!(p.b.iwarp_rts(QB, &wrong).status, 0);
    p.b.post_recv(QB, p.buf_b, 0x100, stag(1));
    p.a.send_wqe(QA, &Wqe::send(&[sge(p.buf_a, 6)]));
    p.pump();
    assert!(p.b.poll_all(CQ).is_empty());
    // Nor does a QP in standard mode that names A's random cookie: A names QB's QPN, and the
    // stream of a standard-mode QP carries its random cookie.
    let (mut c, _, _) = p.intruder(QB);
    let std_b = IwarpConnection {
        cookie: p.a.dev.iwarp_qp(QA).unwrap().own_cookie,
        ..cb
    };
    assert_eq!(c.iwarp_rts(QB, &std_b).status, 0);
    p.pump();
    pump(&mut [&mut p.a, &mut c]);
    assert!(c.poll_all(CQ).is_empty());
}

#[test]
fn a_compat_tuple_taken_first_fails_the_victims_rts() {
    let mut p = Pair::new(true);
    let (ca, cb) = compat_conns();
    // Another guest's QP of B's number binds B's compat connection first: B's RTS is refused
    // (the two would be indistinguishable), so B's user hears of it instead of a silent split.
    let (mut x, _, _) = p.intruder(QB);
    assert_eq!(x.iwarp_rts(QB, &cb).status, 0);
    assert_eq!(p.a.iwarp_rts(QA, &ca).status, 0);
    assert_eq!(p.b.iwarp_rts(QB, &cb).status, Status::Exists.code());
}
