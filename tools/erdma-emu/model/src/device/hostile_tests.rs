// SPDX-License-Identifier: GPL-2.0

//! Unit tests of the hostile adapter (`hostile`, event storms, forged completions; the
//! `hostile` submodule): what the guest is told, and that the model goes on working.

use std::sync::Arc;
use std::time::Duration;

use super::cmd_tests::tp_command;
use super::DeviceConfig;
use crate::caps::Caps;
use crate::clock::ManualClock;
use crate::cmdq::{self, AllocDb, Command, ConfDevice, FreeDb, Status, DB_CQ, DB_RQ, DB_SQ};
use crate::cmdq::{Cqe, CQE_QTYPE_CMDQ};
use crate::regs;
use crate::testing::dp::EQN;
use crate::testing::TestDriver;
use crate::wire::{op, AeqEvent, U32Arg, CQE_QTYPE_RQ, CQE_QTYPE_SQ};

fn driver() -> TestDriver {
    let mut t = TestDriver::new(DeviceConfig::default());
    assert!(t.init());
    t
}

/// A driver on a manual clock, INIT done, CEQ [`EQN`] (256 entries), GID 0.
fn dp_driver(clock: &Arc<ManualClock>) -> TestDriver {
    let mut t = TestDriver::with(DeviceConfig::default(), clock.clone(), 512, 128, 4096);
    t.dp_setup(1);
    t
}

fn ok(t: &mut TestDriver, line: &str) {
    assert_eq!(t.control(line), Ok(String::new()), "{line}");
}

fn query_device(t: &mut TestDriver) -> (u64, u64) {
    let c = t.exec(Command::QueryDevice, |_| {});
    assert_eq!(c.status, 0);
    (c.resp0, c.resp1)
}

fn alloc_db(t: &mut TestDriver) -> Cqe {
    let r = AllocDb {
        enable: DB_SQ | DB_RQ | DB_CQ,
    };
    t.exec(Command::AllocDb, |s| r.write_fields(s))
}

fn free_db(t: &mut TestDriver, [sq, cdb, rdb]: [u16; 3]) -> Cqe {
    let r = FreeDb {
        enable: DB_SQ | DB_RQ | DB_CQ,
        rq_page: rdb,
        sq_page: sq,
        cq_page: cdb,
    };
    t.exec(Command::FreeDb, |s| r.write_fields(s))
}

fn destroy(t: &mut TestDriver, cmd: Command, n: u32) -> Cqe {
    t.exec(cmd, |s| U32Arg(n).write_fields(s))
}

fn aeqe(ty: u8, data0: u32) -> Option<AeqEvent> {
    Some(AeqEvent {
        ty,
        subtype: 0,
        data0,
        data1: 0,
    })
}

// ------------------------------------------------------------------------------------------------
// QUERY_DEVICE
// ------------------------------------------------------------------------------------------------

#[test]
fn hostile_caps_lie_in_query_device_only() {
    let mut t = TestDriver::new(DeviceConfig {
        test_page: true,
        ..Default::default()
    });
    // Before any driver: through the test page.
    assert_eq!(tp_command(&mut t, "hostile caps max"), (0, "ok".into()));
    assert!(t.init());
    let (r0, r1) = query_device(&mut t);
    assert_eq!(r0 & 0xff, 255, "max_mr_size");
    assert_eq!(r0 >> 8 & 0xff, 255, "max_ah");
    assert_eq!(r0 >> 16 & 0xff, 255, "max_recv_wr");
    assert_eq!(r0 >> 24 & 0xff, 0xa8, "the flags tell the truth");
    assert_eq!(r0 >> 32 & 0xff, 0, "reserved");
    assert_eq!(r0 >> 40 & 0xff, 255, "max_cqe");
    assert_eq!(r0 >> 48, 15, "max_gid, nothing above");
    assert_eq!(r1 & 0xff, 255, "max_mw");
    assert_eq!(r1 >> 8 & 0xff, 0, "reserved");
    assert_eq!(r1 >> 16 & 0xfff, 4095, "qp_blocks");
    assert_eq!(r1 >> 28 & 0xf, 15, "cc");
    assert_eq!(r1 >> 32, 0xf000_0000, "the local DMA lkey tells the truth");

    // The model keeps its checked capabilities: a CQ deeper than 2^22 and a QPN beyond
    // 1024 * 4 are still refused, the rest works.
    assert_eq!(t.create_ceq(EQN, 1, 8).status, 0);
    assert_eq!(t.create_cq(1, 23).status, Status::InvalidParam.code());
    assert_eq!(t.create_cq(1, 4).status, 0);
    assert_eq!(
        t.create_qp(4096, 1, 4, 4).status,
        Status::InvalidParam.code()
    );
    assert_eq!(t.create_qp(10, 1, 4, 4).status, 0);
    assert_eq!(t.exec(Command::QueryFwInfo, |_| {}).resp0, 0x1_0000);

    // Zero, then two fields on top: they add up.
    ok(&mut t, "hostile caps zero");
    ok(&mut t, "hostile caps max_cqe=3 cc=0xf");
    let (r0, r1) = query_device(&mut t);
    assert_eq!(r0 & 0xff_ffff, 0);
    assert_eq!((r0 >> 40 & 0xff, r0 >> 48), (3, 0));
    assert_eq!((r1 & 0xff, r1 >> 16 & 0xfff, r1 >> 28 & 0xf), (0, 0, 15));
    assert_eq!(
        t.control("query hostile"),
        Ok(
            "caps=max_mr_size:0,max_ah:0,max_recv_wr:0,max_cqe:3,max_gid:0,max_mw:0,\
            qp_blocks:0,cc:15 alloc_db=off aeq_on_destroy=off"
                .into()
        )
    );
    ok(&mut t, "hostile caps off");
    assert_eq!(query_device(&mut t), Caps::default().query_device());
}

// ------------------------------------------------------------------------------------------------
// ALLOC_DB
// ------------------------------------------------------------------------------------------------

#[test]
fn hostile_alloc_db_lies_and_allocates_nothing() {
    let mut t = driver();
    for (mode, pages) in [
        ("zero", [0, 0, 0]),
        ("beyond", [1024, 1025, 1026]),
        ("kernel", [95, 95, 95]),
    ] {
        ok(&mut t, &format!("hostile alloc_db {mode}"));
        let c = alloc_db(&mut t);
        assert_eq!(c.status, 0, "{mode}");
        let [sq, cdb, rdb] = pages;
        assert_eq!(c.resp0, cmdq::alloc_db_resp0(sq, cdb, rdb), "{mode}");
        assert_eq!(t.control("query dbs"), Ok("dbs=0".into()), "{mode}");
        assert_ne!(free_db(&mut t, pages).status, 0, "{mode}: nothing to free");
    }
    let none = AllocDb { enable: 0 };
    let c = t.exec(Command::AllocDb, |s| none.write_fields(s));
    assert_eq!(c.status, Status::InvalidParam.code(), "no role, no lie");
    let cq_only = AllocDb { enable: DB_CQ };
    let c = t.exec(Command::AllocDb, |s| cq_only.write_fields(s));
    assert_eq!(
        c.resp0,
        cmdq::alloc_db_resp0(0, 95, 0),
        "roles not asked for are 0"
    );

    // In 64 KiB units the lies follow: BAR0 ends at page 64, 0x5F000 is in page 5.
    let c = t.exec(Command::ConfDevice, |s| {
        ConfDevice {
            page_size_enable: true,
            page_shift: 16,
        }
        .write_fields(s)
    });
    assert_eq!(c.status, 0);
    assert_eq!(alloc_db(&mut t).resp0, cmdq::alloc_db_resp0(5, 5, 5));
    ok(&mut t, "hostile alloc_db beyond");
    assert_eq!(alloc_db(&mut t).resp0, cmdq::alloc_db_resp0(64, 65, 66));

    ok(&mut t, "hostile alloc_db off");
    let c = alloc_db(&mut t);
    assert_eq!(
        c.resp0,
        cmdq::alloc_db_resp0(16, 17, 18),
        "real pages again"
    );
    assert_eq!(t.control("query dbs"), Ok("dbs=1".into()));
    assert_eq!(free_db(&mut t, [16, 17, 18]).status, 0);
}

// ------------------------------------------------------------------------------------------------
// Forged completions
// ------------------------------------------------------------------------------------------------

#[test]
fn forged_cqes_land_at_the_producer_index_and_raise_the_event() {
    let mut t = TestDriver::new(DeviceConfig::default());
    let line = "cqe cqn=1 qpn=1 queue=sq index=0";
    assert!(t.control(line).is_err(), "no CQ before INIT");
    t.dp_setup(1);
    assert_eq!(t.create_cq(1, 4).status, 0);
    let e = t.control("cqe cqn=2 qpn=1 queue=sq index=0").unwrap_err();
    assert!(e.contains("no CQ 2"), "{e}");

    // A receive completion for a QP that does not exist, claiming 4 GiB - 1 bytes; the CQ
    // is armed: its CEQ hears of it.
    t.arm(1, false);
    t.take_irqs();
    let r = t.control("cqe cqn=1 qpn=77 queue=rq index=5 byte_len=0xffffffff");
    assert_eq!(r, Ok("written=1".into()));
    let c = t.poll(1).expect("a valid CQE (owner bit of the first lap)");
    assert!(c.owner);
    assert_eq!(
        (c.qpn, c.wqe_index, c.qtype, c.opcode, c.status, c.byte_len),
        (77, 5, CQE_QTYPE_RQ, op::RECEIVE, 0, u32::MAX)
    );
    assert_eq!(t.take_irqs(), [1], "the CEQ's vector");
    assert_eq!(t.ceqe(EQN, 256, 0), (true, 1));

    // Not armed: written, no event. Repeated, with an error status and an opcode.
    let r = t.control("cqe cqn=1 qpn=3 queue=sq index=0xffff status=15 opcode=0 count=3");
    assert_eq!(r, Ok("written=3".into()));
    let cqes = t.poll_all(1);
    assert_eq!(cqes.len(), 3);
    for c in cqes {
        assert_eq!(
            (c.qpn, c.wqe_index, c.qtype, c.opcode, c.status),
            (3, 0xffff, CQE_QTYPE_SQ, 0, 15)
        );
    }
    assert!(t.take_irqs().is_empty());

    // A storm on a CQ armed for solicited completions only: its 16 entries fill up, then it
    // overflows (AEQE type 3) and drops the rest. Bounded by the count either way.
    t.arm(1, true);
    let r = t.control("cqe cqn=1 qpn=3 queue=rq index=1 count=4096");
    assert_eq!(r, Ok("written=16".into()));
    assert_eq!(t.poll_aeqe(), aeqe(3, 1));
    assert_eq!(t.poll_all(1).len(), 16);
    assert_eq!(
        t.control("cqe cqn=1 qpn=3 queue=rq index=1"),
        Ok("written=0".into()),
        "a broken CQ takes no more"
    );
}

#[test]
fn forged_command_completion_is_signalled_like_a_real_one() {
    let mut t = TestDriver::new(DeviceConfig::default());
    let e = t.control("cmd-cqe index=0").unwrap_err();
    assert!(e.starts_with("cmd-cqe: device not initialized"), "{e}");
    assert!(t.init());
    t.arm_cq();
    t.take_irqs();
    assert_eq!(
        t.control("cmd-cqe index=0x1234 status=3"),
        Ok(String::new())
    );
    let c = t.poll_cqe().expect("a valid CMDQ CQE");
    assert_eq!(
        (c.owner, c.start, c.status, c.qtype),
        (true, 0x1234, 3, CQE_QTYPE_CMDQ)
    );
    assert!(t.poll_eqe(), "a CMDQ EQ entry");
    assert_eq!(t.take_irqs(), [0]);
    // Not armed again: a CQE, no event. The queue goes on.
    assert_eq!(t.control("cmd-cqe index=4"), Ok(String::new()));
    assert_eq!(t.poll_cqe().map(|c| (c.start, c.status)), Some((4, 0)));
    assert!(!t.poll_eqe());
    assert_eq!(t.exec(Command::QueryFwInfo, |_| {}).status, 0);
}

// ------------------------------------------------------------------------------------------------
// Event storms
// ------------------------------------------------------------------------------------------------

#[test]
fn event_storms_are_bounded_by_the_eq() {
    let clock = Arc::new(ManualClock::new());
    // CMDQ EQ and AEQ of 4 entries.
    let mut t = TestDriver::with(DeviceConfig::default(), clock, 16, 4, 4);
    assert!(t.init());
    t.take_irqs();
    assert_eq!(
        t.control("aeq type=0 data0=7 count=10"),
        Ok("posted=4".into())
    );
    assert_eq!(t.take_irqs(), [0], "one interrupt: the AEQ disarms");
    for _ in 0..4 {
        assert_eq!(t.poll_aeqe(), aeqe(0, 7));
    }
    assert_eq!(t.poll_aeqe(), None);
    let e = t.control("aeq type=0 data0=7").unwrap_err();
    assert!(e.contains("full"), "{e}: the driver has not told the CI");
    t.arm_aeq();
    assert_eq!(
        t.control("aeq type=3 data0=1 count=2"),
        Ok("posted=2".into())
    );
    assert_eq!(t.take_irqs(), [0]);

    assert_eq!(t.create_ceq(1, 1, 2).status, 0);
    assert_eq!(
        t.control("ceq eqn=1 cqn=5 count=65536"),
        Ok("posted=4".into())
    );
    assert_eq!(t.take_irqs(), [1]);
    assert_eq!(t.ceqe(1, 4, 3), (true, 5));
    assert!(t.control("ceq eqn=9 cqn=5 count=3").is_err(), "no such CEQ");
    assert!(t.control("ceq eqn=1 cqn=5 count=65537").is_err(), "bounded");
}

// ------------------------------------------------------------------------------------------------
// Destroy
// ------------------------------------------------------------------------------------------------

#[test]
fn aeq_on_destroy_posts_the_event_before_the_object_goes() {
    let clock = Arc::new(ManualClock::new());
    let mut t = dp_driver(&clock);
    assert_eq!(t.create_cq(1, 4).status, 0);
    assert_eq!(t.create_cq(2, 4).status, 0);
    assert_eq!(t.create_qp(10, 1, 4, 4).status, 0);
    ok(&mut t, "hostile aeq-on-destroy on");
    // Hold DESTROY_QP's completion: the event is there before the command completes.
    ok(&mut t, "delay RDMA.DESTROY_QP ms=1000");
    t.queue(Command::DestroyQp.code(), |s| U32Arg(10).write_fields(s));
    t.ring();
    assert_eq!(t.poll_aeqe(), aeqe(0, 10), "QP fatal naming the QP");
    assert!(t.poll_cqe().is_none(), "DESTROY_QP not completed yet");
    assert!(t.dev.qps().is_empty(), "destroyed after the event");
    clock.advance(Duration::from_secs(1));
    assert_eq!(t.run_due(), 1);
    assert_eq!(t.poll_cqe().map(|c| c.status), Some(0));

    assert_eq!(destroy(&mut t, Command::DestroyCq, 1).status, 0);
    assert_eq!(t.poll_aeqe(), aeqe(3, 1), "CQ error naming the CQ");
    // Objects that do not exist: no event, status 4 as always.
    let c = destroy(&mut t, Command::DestroyQp, 10);
    assert_eq!(c.status, Status::NotFound.code());
    assert_eq!(t.poll_aeqe(), None);
    ok(&mut t, "hostile aeq-on-destroy off");
    assert_eq!(destroy(&mut t, Command::DestroyCq, 2).status, 0);
    assert_eq!(t.poll_aeqe(), None);
}

#[test]
fn a_failed_destroy_keeps_the_object() {
    let mut t = dp_driver(&Arc::new(ManualClock::new()));
    assert_eq!(t.create_cq(1, 4).status, 0);
    assert_eq!(t.create_qp(10, 1, 4, 4).status, 0);
    ok(&mut t, "hostile aeq-on-destroy on");
    ok(&mut t, "fail RDMA.DESTROY_QP status=9");
    ok(&mut t, "fail RDMA.DESTROY_CQ status=1");
    assert_eq!(destroy(&mut t, Command::DestroyQp, 10).status, 9);
    assert_eq!(destroy(&mut t, Command::DestroyCq, 1).status, 1);
    assert_eq!(t.poll_aeqe(), None, "a failed command is not executed");
    assert_eq!(t.control("query objects"), Ok("objects=1/1/0/0".into()));
    // The CQ still takes completions.
    let r = t.control("cqe cqn=1 qpn=10 queue=sq index=0");
    assert_eq!(r, Ok("written=1".into()));
    assert_eq!(t.poll(1).map(|c| c.qpn), Some(10));
    // The rules are used up: the next destroys work.
    assert_eq!(destroy(&mut t, Command::DestroyQp, 10).status, 0);
    assert_eq!(destroy(&mut t, Command::DestroyCq, 1).status, 0);
    assert_eq!(t.control("query objects"), Ok("objects=0/0/0/0".into()));
}

// ------------------------------------------------------------------------------------------------
// Lifetime
// ------------------------------------------------------------------------------------------------

#[test]
fn hostile_off_clear_and_lifetime() {
    let mut t = driver();
    let truth = "caps=off alloc_db=off aeq_on_destroy=off";
    let set = |t: &mut TestDriver| {
        ok(t, "hostile caps max_cqe=200");
        ok(t, "hostile alloc_db kernel");
        ok(t, "hostile aeq-on-destroy on");
        assert_eq!(
            t.control("query hostile"),
            Ok("caps=max_cqe:200 alloc_db=kernel aeq_on_destroy=on".into())
        );
    };
    assert_eq!(t.control("query hostile"), Ok(truth.into()));
    set(&mut t);
    // Harness state: DEV_CTRL.RESET keeps it.
    t.w32(regs::DEV_CTRL, regs::DEV_CTRL_RESET);
    assert!(t.init());
    assert!(!t.dev.hostile().is_off());
    assert_eq!(query_device(&mut t).0 >> 40 & 0xff, 200);
    ok(&mut t, "hostile off");
    assert_eq!(t.control("query hostile"), Ok(truth.into()));
    assert_eq!(query_device(&mut t), Caps::default().query_device());
    set(&mut t);
    ok(&mut t, "fail any status=1");
    ok(&mut t, "clear");
    assert_eq!(t.control("query hostile"), Ok(truth.into()));
    assert_eq!(t.control("query rules"), Ok("rules=0".into()));
    set(&mut t);
    t.dev.reset_harness();
    assert!(t.dev.hostile().is_off(), "a new client starts truthful");
}
