// SPDX-License-Identifier: GPL-2.0

//! Two functions on one fabric, RoCEv2 or iWARP, with a connected RC QP pair, UD QPs (RoCEv2)
//! and MRs, and a rogue port: arbitrary packets of every kind (requests, responses, lost
//! requests, datagrams, iWARP stream messages) delivered to either function from any port, with
//! spoofed QPNs, 4-tuples, sequence numbers and cookies (the real ones, near them, or raw);
//! rogue iWARP bindings; and the legitimate traffic, state changes, resets and retransmission
//! timers they interleave with.

#![no_main]

use std::net::Ipv4Addr;
use std::sync::Arc;

use arbitrary::Arbitrary;
use erdma_fuzz::{cut, driver, exec, pick, tick, Addr};
use erdma_model::cmdq::Command;
use erdma_model::cmdq::NetType;
use erdma_model::fabric::{
    AtomicOp, Binding, Body, Conn, Datagram, Nak, NoWaker, Packet, Port, Reply, Request, StreamMsg,
};
use erdma_model::regs;
use erdma_model::testing::dp::{pump, Wqe, ALL_ACCESS, EQN, PDN};
use erdma_model::testing::{ipv4_av, ipv4_gid, TestDriver};
use erdma_model::wire::{self, IwarpConnection, ModifyQpIwarp, ModifyQpRoce, Sge};
use erdma_model::{Caps, DeviceConfig, ManualClock, Protocol};
use libfuzzer_sys::fuzz_target;

const CQ: u32 = 1;
const QA: u32 = 10;
const QB: u32 = 20;
const UD: u32 = 1;
const QKEY: u32 = 0x1111_2222;
const IP: [[u8; 4]; 2] = [[10, 0, 0, 1], [10, 0, 0, 2]];
const PORTS: [u16; 2] = [40000, 4791];
const SND: [u32; 2] = [1000, 0xffff_ffe0];

#[derive(Arbitrary, Debug)]
enum Qpn {
    Known(u8),
    Raw(u32),
}

#[derive(Arbitrary, Debug)]
enum Cookie {
    Real(bool),
    Near(bool, i8),
    Raw(u32),
}

#[derive(Arbitrary, Debug)]
enum Tuple {
    /// Side A's or B's view, maybe mirrored, maybe with a port off by some.
    Real {
        side: bool,
        mirror: bool,
        port_delta: i8,
    },
    Raw {
        src: [u8; 4],
        sport: u16,
        dst: [u8; 4],
        dport: u16,
    },
}

#[derive(Arbitrary, Debug)]
enum Seq32 {
    /// The receiver's RCV.NXT (A's or B's) plus a delta.
    Expected(bool, i16),
    Raw(u32),
}

#[derive(Arbitrary, Debug)]
enum Len {
    Small(u16),
    Raw(u32),
}

impl Len {
    fn get(&self) -> u32 {
        match *self {
            Len::Small(n) => u32::from(n),
            Len::Raw(n) => n,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum FReq {
    Send {
        data: Vec<u8>,
        // A segment's place in its message (spoofed too: any offset, last or not).
        offset: Offset,
        last: bool,
        imm: Option<[u8; 4]>,
        inv: Option<u8>,
        solicited: bool,
    },
    Write {
        addr: Addr,
        rkey: u8,
        data: Vec<u8>,
        offset: Offset,
        last: bool,
        imm: Option<[u8; 4]>,
        solicited: bool,
    },
    Read {
        addr: Addr,
        rkey: u8,
        len: Len,
    },
    Atomic {
        addr: Addr,
        rkey: u8,
        cas: bool,
        a: u64,
        b: u64,
    },
}

/// A segment's offset in its message: the first, one segment in, near the largest message,
/// or anything.
#[derive(Arbitrary, Debug)]
enum Offset {
    Zero,
    Segment(u8),
    NearMax(u16),
    Raw(u64),
}

impl Offset {
    fn get(&self) -> u64 {
        match self {
            Offset::Zero => 0,
            Offset::Segment(k) => u64::from(*k) * erdma_model::fabric::SEGMENT,
            Offset::NearMax(d) => (1u64 << 30).wrapping_sub(u64::from(*d)),
            Offset::Raw(v) => *v,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum FResult {
    Ack,
    Read(Vec<u8>),
    Atomic(u64),
    NoQp,
    Rnr,
    Remote(u8),
}

#[derive(Arbitrary, Debug)]
enum FMsg {
    Request { id: u64, req: FReq },
    ReadResponse { id: u64, data: Vec<u8> },
    AtomicResponse { id: u64, value: u64 },
    Terminate { status: Option<u8> },
}

#[derive(Arbitrary, Debug)]
struct FDatagram {
    qkey_ok: bool,
    qkey: u32,
    data: Vec<u8>,
    imm: Option<[u8; 4]>,
    solicited: bool,
    ipv6: bool,
    traffic_class: u8,
    flow_label: u32,
    hop_limit: u8,
    sl: u8,
    sgid: [u8; 16],
    dgid_real: bool,
}

#[derive(Arbitrary, Debug)]
enum FBody {
    Request {
        seq: u64,
        req: FReq,
    },
    Response {
        seq: u64,
        result: FResult,
    },
    Datagram(FDatagram),
    Lost {
        seq: u64,
        req: FReq,
    },
    Stream {
        tuple: Tuple,
        seq: Seq32,
        cookie: Cookie,
        msg: FMsg,
    },
}

#[derive(Arbitrary, Debug)]
enum Post {
    Send(u16),
    Write(u16),
    Read(u16),
    Atomic(bool),
    Ud(u16),
}

#[derive(Arbitrary, Debug)]
enum Op {
    /// A packet into the inbox of port `to` (0 A, 1 B, 2 the rogue), sent from `from`'s port.
    Inject {
        from: u8,
        to: u8,
        src_qpn: Qpn,
        dst_qpn: Qpn,
        body: FBody,
    },
    /// A stream packet sent through the fabric's routing (by the sender's binding).
    Route {
        from: u8,
        src_qpn: Qpn,
        tuple: Tuple,
        seq: Seq32,
        cookie: Cookie,
        msg: FMsg,
    },
    /// A binding by the rogue port.
    Bind {
        qpn: Qpn,
        tuple: Tuple,
        cookie: Cookie,
        peer: Cookie,
    },
    Unbind(Qpn),
    /// Legitimate traffic from A (false) or B (true).
    Post {
        side: bool,
        what: Post,
    },
    Recv {
        side: bool,
        len: u16,
    },
    Pump,
    Tick {
        ms: u16,
    },
    /// A QP state change (RoCEv2 or iWARP layout, by the function's protocol).
    Modify {
        side: bool,
        state: u8,
    },
    /// DEV_CTRL.RESET of one side (and INIT again).
    Reset(bool),
    Poll(bool),
}

#[derive(Arbitrary, Debug)]
struct Input {
    iwarp: bool,
    ops: Vec<Op>,
}

struct Fix {
    clock: Arc<ManualClock>,
    d: [TestDriver; 2],
    buf: [u64; 2],
    cookie: [u32; 2],
    rogue: Arc<Port>,
    iwarp: bool,
}

fn side(d: &mut TestDriver, iwarp: bool, host: u8, qpn: u32) -> (u64, u32) {
    if iwarp {
        assert!(d.init());
        d.create_ceq(EQN, 1, 8);
    } else {
        d.dp_setup(host);
    }
    d.create_cq(CQ, 6);
    let c = d.create_qp(qpn, CQ, 6, 5);
    let buf = d.alloc(0x1_0000, 0x1000);
    d.reg_mr(1, 0, PDN, buf, 0x1_0000, ALL_ACCESS);
    if !iwarp {
        d.create_ud_qp(UD, CQ, 5, 5, PDN);
        d.ud_ready(UD, QKEY);
        d.create_ah(1, PDN, ipv4_av(0, 3 - host));
    }
    (buf, c.resp0 as u32)
}

fn conn(i: usize, peer_cookie: u32) -> IwarpConnection {
    IwarpConnection {
        cookie: peer_cookie,
        src_ip: IP[i],
        dst_ip: IP[1 - i],
        src_port: PORTS[i],
        dst_port: PORTS[1 - i],
        snd_nxt: SND[i],
        rcv_nxt: SND[1 - i],
    }
}

fn setup(iwarp: bool) -> Fix {
    let config = DeviceConfig {
        protocol: if iwarp {
            Protocol::Iwarp
        } else {
            Protocol::RoceV2
        },
        caps: Caps {
            atomic: true,
            ..Caps::default()
        },
        ..DeviceConfig::default()
    };
    let (mut a, clock) = driver(config.clone());
    let mut b = TestDriver::with(config, clock.clone(), 512, 128, 4096);
    let f = erdma_model::testing::dp::fabric();
    a.attach(&f);
    b.attach(&f);
    let (buf_a, cookie_a) = side(&mut a, iwarp, 1, QA);
    let (buf_b, cookie_b) = side(&mut b, iwarp, 2, QB);
    if iwarp {
        b.iwarp_rts(QB, &conn(1, cookie_a));
        a.iwarp_rts(QA, &conn(0, cookie_b));
    } else {
        a.connect(QA, 2, QB);
        b.connect(QB, 1, QA);
    }
    let rogue = f.attach(Arc::new(NoWaker));
    Fix {
        clock,
        d: [a, b],
        buf: [buf_a, buf_b],
        cookie: [cookie_a, cookie_b],
        rogue,
        iwarp,
    }
}

impl Fix {
    fn port(&self, i: u8) -> Option<Arc<Port>> {
        match i % 3 {
            0 => self.d[0].dev.port().cloned(),
            1 => self.d[1].dev.port().cloned(),
            _ => Some(self.rogue.clone()),
        }
    }

    fn qpn(&self, q: &Qpn) -> u32 {
        match q {
            Qpn::Known(i) => pick(&[QA, QB, UD, 0, 2, QA + 1, 0xf_ffff], *i),
            Qpn::Raw(v) => *v,
        }
    }

    fn cookie(&self, c: &Cookie) -> u32 {
        match *c {
            Cookie::Real(s) => self.cookie[usize::from(s)],
            Cookie::Near(s, d) => self.cookie[usize::from(s)].wrapping_add(d as u32),
            Cookie::Raw(v) => v,
        }
    }

    fn tuple(&self, t: &Tuple) -> Conn {
        match *t {
            Tuple::Real {
                side,
                mirror,
                port_delta,
            } => {
                let i = usize::from(side);
                let c = Conn {
                    src_ip: Ipv4Addr::from(IP[i]),
                    src_port: PORTS[i].wrapping_add(port_delta as u16),
                    dst_ip: Ipv4Addr::from(IP[1 - i]),
                    dst_port: PORTS[1 - i],
                };
                if mirror {
                    c.mirror()
                } else {
                    c
                }
            }
            Tuple::Raw {
                src,
                sport,
                dst,
                dport,
            } => Conn {
                src_ip: Ipv4Addr::from(src),
                src_port: sport,
                dst_ip: Ipv4Addr::from(dst),
                dst_port: dport,
            },
        }
    }

    fn seq32(&self, s: &Seq32) -> u32 {
        match *s {
            Seq32::Expected(side, delta) => {
                let (i, qpn) = if side { (1, QB) } else { (0, QA) };
                let rcv = self.d[i].dev.iwarp_qp(qpn).map_or(0, |q| q.rcv_nxt);
                rcv.wrapping_add(delta as u32)
            }
            Seq32::Raw(v) => v,
        }
    }

    fn key(&self, k: u8) -> u32 {
        pick(
            &[
                wire::stag(1, 0),
                wire::stag(1, 1),
                wire::stag(2, 0),
                0xf000_0000,
                0,
            ],
            k,
        )
    }

    fn addr(&self, a: &Addr) -> u64 {
        a.get(&[
            self.buf[0],
            self.buf[1],
            self.buf[0] + 0xfff8,
            self.buf[1] + 0x1_0000,
        ])
    }

    fn req(&self, r: &FReq) -> Request {
        match r {
            FReq::Send {
                data,
                offset,
                last,
                imm,
                inv,
                solicited,
            } => Request::Send {
                data: cut(data, 4096).to_vec(),
                offset: offset.get(),
                last: *last,
                imm: *imm,
                inv: inv.map(|k| self.key(k)),
                solicited: *solicited,
            },
            FReq::Write {
                addr,
                rkey,
                data,
                offset,
                last,
                imm,
                solicited,
            } => Request::Write {
                addr: self.addr(addr),
                rkey: self.key(*rkey),
                data: cut(data, 4096).to_vec(),
                offset: offset.get(),
                last: *last,
                imm: *imm,
                solicited: *solicited,
            },
            FReq::Read { addr, rkey, len } => Request::Read {
                addr: self.addr(addr),
                rkey: self.key(*rkey),
                len: len.get(),
            },
            FReq::Atomic {
                addr,
                rkey,
                cas,
                a,
                b,
            } => Request::Atomic {
                addr: self.addr(addr),
                rkey: self.key(*rkey),
                op: if *cas {
                    AtomicOp::Cas {
                        compare: *a,
                        swap: *b,
                    }
                } else {
                    AtomicOp::Faa { add: *a }
                },
            },
        }
    }

    fn msg(&self, m: &FMsg) -> StreamMsg {
        match m {
            FMsg::Request { id, req } => StreamMsg::Request {
                id: *id,
                req: self.req(req),
            },
            FMsg::ReadResponse { id, data } => StreamMsg::ReadResponse {
                id: *id,
                data: cut(data, 4096).to_vec(),
            },
            FMsg::AtomicResponse { id, value } => StreamMsg::AtomicResponse {
                id: *id,
                value: *value,
            },
            FMsg::Terminate { status } => StreamMsg::Terminate { status: *status },
        }
    }

    fn body(&self, b: &FBody) -> Body {
        match b {
            FBody::Request { seq, req } => Body::Request {
                seq: *seq,
                req: self.req(req),
            },
            FBody::Response { seq, result } => Body::Response {
                seq: *seq,
                result: match result {
                    FResult::Ack => Ok(Reply::Ack),
                    FResult::Read(d) => Ok(Reply::Read(cut(d, 4096).to_vec())),
                    FResult::Atomic(v) => Ok(Reply::Atomic(*v)),
                    FResult::NoQp => Err(Nak::NoQp),
                    FResult::Rnr => Err(Nak::RnrExceeded),
                    FResult::Remote(s) => Err(Nak::Remote(*s)),
                },
            },
            FBody::Datagram(g) => Body::Datagram(Datagram {
                qkey: if g.qkey_ok { QKEY } else { g.qkey },
                data: cut(&g.data, 4096).to_vec(),
                imm: g.imm,
                solicited: g.solicited,
                net_type: if g.ipv6 { NetType::Ipv6 } else { NetType::Ipv4 },
                traffic_class: g.traffic_class,
                flow_label: g.flow_label,
                hop_limit: g.hop_limit,
                sl: g.sl,
                sgid: g.sgid,
                dgid: if g.dgid_real { ipv4_gid(IP[1]) } else { g.sgid },
            }),
            FBody::Lost { seq, req } => Body::Lost {
                seq: *seq,
                req: self.req(req),
            },
            FBody::Stream {
                tuple,
                seq,
                cookie,
                msg,
            } => Body::Stream {
                conn: self.tuple(tuple),
                seq: self.seq32(seq),
                cookie: self.cookie(cookie),
                msg: self.msg(msg),
            },
        }
    }

    fn pump(&mut self) {
        let [a, b] = &mut self.d;
        pump(&mut [a, b]);
        // The rogue port's inbox (responses to its requests): dropped.
        let _ = self.rogue.take_inbox();
    }

    fn post(&mut self, side: bool, what: &Post) {
        let i = usize::from(side);
        let (qpn, buf, rbuf) = if side {
            (QB, self.buf[1], self.buf[0])
        } else {
            (QA, self.buf[0], self.buf[1])
        };
        let sge = |len: u16| Sge {
            addr: buf,
            len: u32::from(len),
            key: wire::stag(1, 0),
        };
        let wqe = match *what {
            Post::Send(n) => Wqe::send(&[sge(n)]),
            Post::Write(n) => Wqe::write(wire::stag(1, 0), rbuf, &[sge(n)]),
            Post::Read(n) => Wqe::read(wire::stag(1, 0), buf, u32::from(n), wire::stag(1, 0), rbuf),
            Post::Atomic(cas) => Wqe::atomic(
                wire::stag(1, 0),
                rbuf + 8,
                cas.then_some(0),
                1,
                wire::stag(1, 0),
                buf,
            ),
            Post::Ud(n) => {
                if self.iwarp {
                    return;
                }
                let d = &mut self.d[i];
                let wqe = Wqe::ud_send(QKEY, UD, 1, &[sge(n.min(1024))]);
                d.send_wqe(UD, &wqe);
                return;
            }
        };
        self.d[i].send_wqe(qpn, &wqe);
    }
}

fuzz_target!(|input: Input| {
    let mut f = setup(input.iwarp);
    for op in input.ops.iter().take(64) {
        match op {
            Op::Inject {
                from,
                to,
                src_qpn,
                dst_qpn,
                body,
            } => {
                let (Some(port), Some(dst)) = (f.port(*from), f.port(*to)) else {
                    continue;
                };
                let pkt = Packet {
                    src_port: 0,
                    src_qpn: f.qpn(src_qpn),
                    dst_qpn: f.qpn(dst_qpn),
                    body: f.body(body),
                };
                match pkt.body {
                    Body::Response { .. } => port.send_response(dst.id(), pkt),
                    _ => {
                        let _ = port.send_request(dst.id(), pkt);
                    }
                }
            }
            Op::Route {
                from,
                src_qpn,
                tuple,
                seq,
                cookie,
                msg,
            } => {
                let Some(port) = f.port(*from) else { continue };
                let conn = f.tuple(tuple);
                let pkt = Packet {
                    src_port: 0,
                    src_qpn: f.qpn(src_qpn),
                    dst_qpn: 0,
                    body: Body::Stream {
                        conn,
                        seq: f.seq32(seq),
                        cookie: f.cookie(cookie),
                        msg: f.msg(msg),
                    },
                };
                let _ = port.send_stream(conn, pkt);
            }
            Op::Bind {
                qpn,
                tuple,
                cookie,
                peer,
            } => {
                let b = Binding {
                    conn: f.tuple(tuple),
                    cookie: f.cookie(cookie),
                    peer_cookie: f.cookie(peer),
                };
                let _ = f.rogue.bind(f.qpn(qpn), b);
            }
            Op::Unbind(q) => f.rogue.unbind(f.qpn(q)),
            Op::Post { side, what } => f.post(*side, what),
            Op::Recv { side, len } => {
                let i = usize::from(*side);
                let qpn = if *side { QB } else { QA };
                let buf = f.buf[i];
                f.d[i].post_recv(qpn, buf, u32::from(*len), wire::stag(1, 0));
                if !f.iwarp {
                    f.d[i].post_recv(UD, buf + 0x8000, u32::from(*len), wire::stag(1, 0));
                }
            }
            Op::Pump => f.pump(),
            Op::Tick { ms } => {
                for d in &mut f.d {
                    tick(d, &f.clock, *ms / 2);
                }
                f.pump();
            }
            Op::Modify { side, state } => {
                let i = usize::from(*side);
                let qpn = if *side { QB } else { QA };
                if f.iwarp {
                    let m = ModifyQpIwarp {
                        qpn,
                        state: state % 8,
                        cc: 0,
                    };
                    exec(&mut f.d[i], Command::ModifyQp.code(), |s| m.write_fields(s));
                } else {
                    let m = ModifyQpRoce {
                        qpn,
                        state: state % 8,
                        dst_qpn: 0,
                        mask: wire::qp_mask::STATE,
                        qkey: 0,
                        rq_psn: 0,
                        sq_psn: 0,
                        av: ipv4_av(0, 0),
                    };
                    exec(&mut f.d[i], Command::ModifyQp.code(), |s| m.write_fields(s));
                }
            }
            Op::Reset(side) => {
                let d = &mut f.d[usize::from(*side)];
                d.w32(regs::DEV_CTRL, regs::DEV_CTRL_RESET);
                d.init();
            }
            Op::Poll(side) => {
                let d = &mut f.d[usize::from(*side)];
                for _ in 0..64 {
                    if d.poll(CQ).is_none() {
                        break;
                    }
                }
                erdma_fuzz::drain_cmdq(d);
            }
        }
    }
    f.pump();
});
