// SPDX-License-Identifier: GPL-2.0

//! Commands of every sub-module and opcode (known or not, 1..8 WQEBBs, headers with wrong
//! indices) posted through the command queue of a function the driver double initialized, with
//! patches that plant guest addresses and the function's own numbers (CEQ, CQ, QP, MR) in the
//! fields; doorbells with wild producer indices, arms, fault rules, delayed completions.

#![no_main]

use arbitrary::Arbitrary;
use erdma_fuzz::{cut, drain_cmdq, driver, mem_addr, poke, tick, Known, RawCmd};
use erdma_model::caps::Caps;
use erdma_model::cmdq::Command;
use erdma_model::regs;
use erdma_model::testing::{dp, layout};
use erdma_model::{DeviceConfig, Protocol};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Op {
    /// A command with a header the device takes (maybe with a wrong index), rung at once.
    Cmd(RawCmd),
    /// A known command (sub-module and opcode from the table), rung at once.
    Known { which: u8, cmd: RawCmd },
    /// Several commands, one doorbell.
    Batch(Vec<RawCmd>),
    /// A doorbell with any producer index.
    Ring(u16),
    /// Arms and polls (the driver's interrupt path).
    Drain,
    /// A fault rule through the control language.
    Rule {
        fail: bool,
        which: u8,
        count: u8,
        skip: u8,
        status_or_ms: u16,
    },
    /// Time passes (delayed completions).
    Tick(u16),
    /// The guest scribbles over its memory (the rings, MTTs, doorbell records).
    Scribble { at: u16, data: Vec<u8> },
    /// DEV_CTRL.RESET, then INIT again.
    Reset,
}

#[derive(Arbitrary, Debug)]
struct Input {
    iwarp: bool,
    extend_db: bool,
    test_page: bool,
    max_ah_log2: u8,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let config = DeviceConfig {
        protocol: if input.iwarp {
            Protocol::Iwarp
        } else {
            Protocol::RoceV2
        },
        test_page: input.test_page,
        caps: Caps {
            extend_db: input.extend_db,
            max_ah_log2: input.max_ah_log2 % 25,
            ..Caps::default()
        },
        ..DeviceConfig::default()
    };
    let (mut d, clock) = driver(config);
    if !d.init() {
        return;
    }
    // A CEQ, two CQs, a QP and an MR for the commands to name.
    d.create_ceq(dp::EQN, 1, 8);
    d.create_cq(1, 6);
    d.create_cq(2, 4);
    d.create_qp(7, 1, 6, 6);
    let buf = d.alloc(0x4000, 0x1000);
    d.reg_mr(1, 0, dp::PDN, buf, 0x4000, dp::ALL_ACCESS);
    let known = Known {
        bases: vec![
            layout::SCRATCH,
            layout::DP_HEAP,
            buf,
            layout::CEQS,
            layout::CEQ_DBRECS,
            d.alloc(0x1000, 0x1000),
        ],
        words: vec![
            0,
            1,
            2,
            7,
            8,
            0x100,
            dp::PDN,
            31,
            1500,
            0xffff_ffff,
            0x0010_0000,
        ],
    };
    for op in input.ops.iter().take(64) {
        match op {
            Op::Cmd(c) => {
                c.queue(&mut d, &known);
                d.ring();
                drain_cmdq(&mut d);
            }
            Op::Known { which, cmd } => {
                let c = Command::ALL[usize::from(*which) % Command::ALL.len()].code();
                let cmd = RawCmd {
                    sub: c.sub,
                    op: c.op,
                    ..cmd.clone()
                };
                cmd.queue(&mut d, &known);
                d.ring();
                drain_cmdq(&mut d);
            }
            Op::Batch(cmds) => {
                for c in cmds.iter().take(8) {
                    c.queue(&mut d, &known);
                }
                d.ring();
                drain_cmdq(&mut d);
            }
            Op::Ring(pi) => {
                d.w64(regs::CMDQ_SQ_DB, u64::from(*pi));
                drain_cmdq(&mut d);
            }
            Op::Drain => {
                drain_cmdq(&mut d);
            }
            Op::Rule {
                fail,
                which,
                count,
                skip,
                status_or_ms,
            } => {
                let c = Command::ALL[usize::from(*which) % Command::ALL.len()];
                let line = if *fail {
                    format!(
                        "fail {} status={} count={} skip={}",
                        c.name(),
                        1 + status_or_ms % 255,
                        1 + count % 4,
                        skip % 4
                    )
                } else {
                    format!(
                        "delay {} ms={} count={} skip={}",
                        c.name(),
                        status_or_ms % 2000,
                        1 + count % 4,
                        skip % 4
                    )
                };
                let _ = d.control(&line);
            }
            Op::Tick(ms) => {
                tick(&mut d, &clock, *ms);
                drain_cmdq(&mut d);
            }
            Op::Scribble { at, data } => {
                let addr = mem_addr(*at);
                poke(&mut d, addr, cut(data, 256));
            }
            Op::Reset => {
                d.w32(regs::DEV_CTRL, regs::DEV_CTRL_RESET);
                d.init();
            }
        }
    }
});
