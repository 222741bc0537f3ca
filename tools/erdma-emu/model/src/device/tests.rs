// SPDX-License-Identifier: GPL-2.0

//! Unit tests of the BAR0 register state machine: every register the driver touches.

use super::*;
use crate::regs::*;
use crate::testing::{RecordingIrqs, TestDriver, VecMemory};
use crate::ManualClock;

/// A device with test memory and interrupts.
struct Bench {
    dev: Device,
    mem: VecMemory,
    irq: RecordingIrqs,
}

impl Bench {
    fn new(config: DeviceConfig) -> Self {
        Bench {
            dev: Device::new(config),
            mem: VecMemory::new(0x10_0000, 0x1000),
            irq: RecordingIrqs::all_connected(),
        }
    }

    fn default() -> Self {
        Self::new(DeviceConfig::default())
    }

    fn write(&mut self, off: u64, data: &[u8]) {
        let mut io = Io::new(&mut self.mem, &mut self.irq);
        self.dev.bar0_write(off, data, &mut io);
    }

    fn w32(&mut self, off: u64, v: u32) {
        self.write(off, &v.to_le_bytes());
    }

    fn w64(&mut self, off: u64, v: u64) {
        self.write(off, &v.to_le_bytes());
    }

    fn read<const N: usize>(&mut self, off: u64) -> [u8; N] {
        let mut b = [0xa5; N];
        self.dev.bar0_read(off, &mut b);
        b
    }

    fn r32(&mut self, off: u64) -> u32 {
        u32::from_le_bytes(self.read(off))
    }

    fn r64(&mut self, off: u64) -> u64 {
        u64::from_le_bytes(self.read(off))
    }

    /// Programs the admin queues the way the Linux driver does (§2.3 steps 6 and 7).
    fn program_like_the_driver(&mut self) {
        self.w32(AEQ_ADDR_H, 0x1);
        self.w32(AEQ_ADDR_L, 0x2340_0000);
        self.w32(AEQ_DEPTH, 4096);
        self.w64(AEQ_DBREC_ADDR, 0x1_0000_0008);
        self.w32(CMDQ_SQ_ADDR_H, 0x0);
        self.w32(CMDQ_SQ_ADDR_L, 0x0010_0000);
        self.w32(CMDQ_DEPTH, 512);
        self.w64(CMDQ_SQ_DBREC_ADDR, 0x0020_0000);
        self.w32(CMDQ_CQ_ADDR_H, 0x0);
        self.w32(CMDQ_CQ_ADDR_L, 0x0011_0000);
        self.w64(CMDQ_CQ_DBREC_ADDR, 0x0020_0008);
        self.w32(CMDQ_EQ_ADDR_H, 0x0);
        self.w32(CMDQ_EQ_ADDR_L, 0x0012_0000);
        self.w32(CMDQ_EQ_DEPTH, 128);
        self.w64(CMDQ_EQ_DBREC_ADDR, 0x0020_0010);
    }

    fn init(&mut self) -> bool {
        self.w32(DEV_CTRL, DEV_CTRL_INIT);
        self.r32(DEV_STATUS) & DEV_STATUS_INIT_DONE != 0
    }
}

/// The 32-bit read-write registers and a distinctive value for each.
const RW32: [(u64, u32); 11] = [
    (CMDQ_SQ_ADDR_L, 0x1111_1000),
    (CMDQ_SQ_ADDR_H, 0x1111_0001),
    (CMDQ_CQ_ADDR_L, 0x2222_2000),
    (CMDQ_CQ_ADDR_H, 0x2222_0002),
    (CMDQ_DEPTH, 0x0000_0200),
    (CMDQ_EQ_DEPTH, 0x0000_0080),
    (CMDQ_EQ_ADDR_L, 0x3333_3000),
    (CMDQ_EQ_ADDR_H, 0x3333_0003),
    (AEQ_ADDR_L, 0x4444_4000),
    (AEQ_ADDR_H, 0x4444_0004),
    (AEQ_DEPTH, 0x0000_1000),
];

const DBRECS: [u64; 4] = [
    CMDQ_SQ_DBREC_ADDR,
    CMDQ_CQ_DBREC_ADDR,
    CMDQ_EQ_DBREC_ADDR,
    AEQ_DBREC_ADDR,
];

fn all_doorbells() -> Vec<Doorbell> {
    [Doorbell::Aeq, Doorbell::CmdqSq, Doorbell::CmdqCq]
        .into_iter()
        .chain((0..EQ_DB_COUNT).map(Doorbell::Eq))
        .collect()
}

fn assert_register_power_on(b: &mut Bench) {
    for (off, _) in RW32 {
        assert_eq!(b.r32(off), 0, "register {off:#x}");
    }
    for off in DBRECS {
        assert_eq!(b.r64(off), 0, "register {off:#x}");
    }
    assert_eq!(b.dev.admin_queues(), None);
    for db in all_doorbells() {
        assert_eq!(b.dev.last_doorbell(db), None);
    }
    assert_eq!(b.dev.last_db_space_write(), None);
}

#[test]
fn power_on_values() {
    let mut b = Bench::default();
    assert_eq!(b.r32(VERSION), DEFAULT_VERSION);
    assert_eq!(b.r32(DEV_PROTO), 1, "RoCEv2 by default");
    assert_eq!(b.r32(DEV_CTRL), 0);
    assert_eq!(
        b.r32(DEV_STATUS),
        0,
        "power-on: neither RESET_DONE nor INIT_DONE"
    );
    assert_eq!(b.r32(NETDEV_MAC_L), 0x0012_3456);
    assert_eq!(b.r32(NETDEV_MAC_H), 0x5254);
    assert_eq!(b.r32(GRP_NUM), 4);
    for s in STATS {
        assert_eq!(b.r64(s.offset), 0);
    }
    for db in all_doorbells() {
        assert_eq!(b.r64(db.offset()), 0);
    }
    assert_register_power_on(&mut b);
}

#[test]
fn version_register() {
    for version in [0, 1, 0xdead_beef] {
        let mut b = Bench::new(DeviceConfig {
            version,
            ..Default::default()
        });
        assert_eq!(b.r32(VERSION), version);
    }
}

#[test]
fn protocol_selection() {
    for (protocol, value) in [(Protocol::Iwarp, 0), (Protocol::RoceV2, 1)] {
        let mut b = Bench::new(DeviceConfig {
            protocol,
            ..Default::default()
        });
        assert_eq!(b.r32(DEV_PROTO), value);
    }
    assert_eq!("iwarp".parse(), Ok(Protocol::Iwarp));
    assert_eq!("RoCE".parse(), Ok(Protocol::RoceV2));
    assert_eq!("rocev2".parse(), Ok(Protocol::RoceV2));
    assert!("ib".parse::<Protocol>().is_err());
    assert_eq!(Protocol::Iwarp.to_string(), "iwarp");
}

#[test]
fn mac_encoding() {
    let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
    let mut b = Bench::new(DeviceConfig {
        mac,
        ..Default::default()
    });
    assert_eq!(b.r32(NETDEV_MAC_L), 0x2233_4455);
    assert_eq!(b.r32(NETDEV_MAC_H), 0x0000_0211);
    // The driver's 48-bit value H << 32 | L has MAC[0] as its most significant byte.
    let v = u64::from(b.r32(NETDEV_MAC_H)) << 32 | u64::from(b.r32(NETDEV_MAC_L));
    assert_eq!(v.to_be_bytes()[2..], mac);
    assert_eq!(
        b.r64(NETDEV_MAC_L),
        v,
        "one 8-byte read covers both registers"
    );
    assert_eq!(b.read::<1>(NETDEV_MAC_H), [0x11]);
    assert_eq!(b.read::<2>(NETDEV_MAC_L + 1), [0x44, 0x33]);
}

#[test]
fn grp_num_is_configurable() {
    let mut b = Bench::new(DeviceConfig {
        grp_num: 24,
        ..Default::default()
    });
    assert_eq!(b.r32(GRP_NUM), 24);
}

#[test]
fn read_only_registers_ignore_writes() {
    let mut b = Bench::default();
    let ro32 = [
        VERSION,
        DEV_PROTO,
        DEV_STATUS,
        NETDEV_MAC_L,
        NETDEV_MAC_H,
        GRP_NUM,
    ];
    let before: Vec<u32> = ro32.iter().map(|&off| b.r32(off)).collect();
    for off in ro32 {
        b.w32(off, 0xffff_ffff);
        b.write(off + 1, &[0]);
    }
    for s in STATS {
        b.w64(s.offset, 0x1234);
        assert_eq!(b.r64(s.offset), 0);
    }
    let after: Vec<u32> = ro32.iter().map(|&off| b.r32(off)).collect();
    assert_eq!(before, after);
    assert_eq!(b.r32(DEV_STATUS), 0);
}

#[test]
fn read_write_registers_read_back() {
    let mut b = Bench::default();
    for (off, v) in RW32 {
        b.w32(off, v);
    }
    for (off, v) in RW32 {
        assert_eq!(b.r32(off), v, "register {off:#x}");
    }
    // 8-byte reads of an _L/_H pair return the 64-bit address.
    assert_eq!(b.r64(CMDQ_SQ_ADDR_L), 0x1111_0001_1111_1000);
    // Sub-word writes merge into the register.
    b.write(CMDQ_DEPTH + 1, &[0x04]);
    assert_eq!(b.r32(CMDQ_DEPTH), 0x0000_0400);
    b.write(AEQ_ADDR_H + 2, &[0xcd, 0xab]);
    assert_eq!(b.r32(AEQ_ADDR_H), 0xabcd_0004);
    // An 8-byte write to an _L/_H pair sets both halves.
    b.w64(CMDQ_EQ_ADDR_L, 0x0000_0009_8765_4000);
    assert_eq!(b.r32(CMDQ_EQ_ADDR_L), 0x8765_4000);
    assert_eq!(b.r32(CMDQ_EQ_ADDR_H), 0x9);
}

#[test]
fn dbrec_registers_take_8_byte_and_split_writes() {
    let mut b = Bench::default();
    for (i, off) in DBRECS.into_iter().enumerate() {
        let v = 0x0000_0001_0000_0000 | ((i as u64 + 1) * 0x1000);
        b.w64(off, v);
        assert_eq!(b.r64(off), v);
        assert_eq!(b.r32(off), v as u32);
        assert_eq!(b.r32(off + 4), (v >> 32) as u32);
        b.w32(off, 0x5555_0008);
        b.w32(off + 4, 0x6);
        assert_eq!(b.r64(off), 0x6_5555_0008);
    }
}

#[test]
fn doorbells_take_8_byte_and_split_writes() {
    let mut b = Bench::default();
    for (i, db) in all_doorbells().into_iter().enumerate() {
        let off = db.offset();
        let v = 0x8000_0000_0000_0000 | (i as u64) << 32 | 0x8000_0000 | i as u64;
        b.w64(off, v);
        assert_eq!(b.dev.last_doorbell(db), Some(v), "{db:?}");
        assert_eq!(b.r64(off), 0, "doorbells are write-only");
        // Low half first: staged, nothing rung yet.
        b.w32(off, 0x1234_5678);
        assert_eq!(b.dev.last_doorbell(db), Some(v), "{db:?}");
        // High half: rings with the combined value.
        b.w32(off + 4, 0x9abc_def0);
        assert_eq!(b.dev.last_doorbell(db), Some(0x9abc_def0_1234_5678));
        // The staging does not leak into the next doorbell.
        b.w32(off + 4, 0x1);
        assert_eq!(b.dev.last_doorbell(db), Some(0x1_0000_0000));
    }
    assert!(b.irq.raised.is_empty());
}

#[test]
fn init_handshake_in_driver_order() {
    let mut b = Bench::default();
    b.program_like_the_driver();
    assert_eq!(b.r32(DEV_STATUS), 0, "nothing happens before INIT");
    assert_eq!(b.dev.admin_queues(), None);
    assert!(b.init());
    assert_eq!(b.r32(DEV_STATUS), DEV_STATUS_INIT_DONE);
    assert_eq!(b.r32(DEV_CTRL), 0, "DEV_CTRL reads 0");
    let admin = *b.dev.admin_queues().unwrap();
    let ring = |addr, depth, dbrec| RingConfig { addr, depth, dbrec };
    assert_eq!(admin.cmdq_sq, ring(0x10_0000, 512, 0x20_0000));
    assert_eq!(admin.cmdq_cq, ring(0x11_0000, 512, 0x20_0008));
    assert_eq!(admin.cmdq_eq, ring(0x12_0000, 128, 0x20_0010));
    assert_eq!(admin.aeq, ring(0x1_2340_0000, 4096, 0x1_0000_0008));
    assert_eq!(admin.get(AdminQueue::Aeq), &admin.aeq);
    assert!(b.dev.init_problems().is_empty());
}

#[test]
fn init_needs_every_register() {
    // (registers left at 0, the register INIT must blame)
    let cases: &[(&[u64], Reg)] = &[
        (
            &[CMDQ_SQ_ADDR_L, CMDQ_SQ_ADDR_H],
            Reg::RingAddrL(AdminQueue::CmdqSq),
        ),
        (
            &[CMDQ_CQ_ADDR_L, CMDQ_CQ_ADDR_H],
            Reg::RingAddrL(AdminQueue::CmdqCq),
        ),
        (
            &[CMDQ_EQ_ADDR_L, CMDQ_EQ_ADDR_H],
            Reg::RingAddrL(AdminQueue::CmdqEq),
        ),
        (&[AEQ_ADDR_L, AEQ_ADDR_H], Reg::RingAddrL(AdminQueue::Aeq)),
        (&[CMDQ_DEPTH], Reg::CmdqDepth),
        (&[CMDQ_EQ_DEPTH], Reg::CmdqEqDepth),
        (&[AEQ_DEPTH], Reg::AeqDepth),
        (&[CMDQ_SQ_DBREC_ADDR], Reg::DbrecAddr(AdminQueue::CmdqSq)),
        (&[CMDQ_CQ_DBREC_ADDR], Reg::DbrecAddr(AdminQueue::CmdqCq)),
        (&[CMDQ_EQ_DBREC_ADDR], Reg::DbrecAddr(AdminQueue::CmdqEq)),
        (&[AEQ_DBREC_ADDR], Reg::DbrecAddr(AdminQueue::Aeq)),
    ];
    for &(cleared, blamed) in cases {
        let mut b = Bench::default();
        b.program_like_the_driver();
        for &off in cleared {
            let width = decode(off).unwrap().width as usize;
            b.write(off, &[0; 8][..width]);
        }
        assert!(!b.init(), "INIT must fail without {blamed}");
        assert_eq!(b.r32(DEV_STATUS), 0);
        assert_eq!(b.dev.admin_queues(), None);
        let problems = b.dev.init_problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].reg, blamed);
        assert!(problems[0].to_string().contains(&blamed.to_string()));
        // Programming the missing register and retrying succeeds.
        b.program_like_the_driver();
        assert!(b.init());
        assert!(b.dev.init_problems().is_empty());
    }
}

#[test]
fn init_refuses_unusable_values() {
    let cases: &[(u64, u64, Reg)] = &[
        (CMDQ_DEPTH, 100, Reg::CmdqDepth),
        (CMDQ_DEPTH, 2, Reg::CmdqDepth),
        (CMDQ_DEPTH, 1 << 17, Reg::CmdqDepth),
        (CMDQ_EQ_DEPTH, 96, Reg::CmdqEqDepth),
        (AEQ_DEPTH, 0x8000_0000, Reg::AeqDepth),
        (
            CMDQ_SQ_ADDR_L,
            0x0010_0010,
            Reg::RingAddrL(AdminQueue::CmdqSq),
        ),
        (
            CMDQ_CQ_ADDR_L,
            0x0011_0008,
            Reg::RingAddrL(AdminQueue::CmdqCq),
        ),
        (
            CMDQ_EQ_ADDR_L,
            0x0012_0004,
            Reg::RingAddrL(AdminQueue::CmdqEq),
        ),
        (AEQ_ADDR_L, 0x2340_0001, Reg::RingAddrL(AdminQueue::Aeq)),
        (
            CMDQ_SQ_DBREC_ADDR,
            0x20_0004,
            Reg::DbrecAddr(AdminQueue::CmdqSq),
        ),
        (AEQ_DBREC_ADDR, 0x1, Reg::DbrecAddr(AdminQueue::Aeq)),
    ];
    for &(off, value, blamed) in cases {
        let mut b = Bench::default();
        b.program_like_the_driver();
        let width = decode(off).unwrap().width as usize;
        b.write(off, &value.to_le_bytes()[..width]);
        assert!(!b.init(), "INIT must fail with {off:#x} = {value:#x}");
        let problems = b.dev.init_problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].reg, blamed);
    }
    // A ring that runs past the end of the 64-bit address space.
    let mut b = Bench::default();
    b.program_like_the_driver();
    b.w64(AEQ_ADDR_L, 0xffff_ffff_ffff_f000);
    assert!(!b.init());
    assert_eq!(
        b.dev.init_problems()[0].reg,
        Reg::RingAddrL(AdminQueue::Aeq)
    );
}

#[test]
fn init_while_initialized_is_ignored() {
    let mut b = Bench::default();
    b.program_like_the_driver();
    assert!(b.init());
    let admin = *b.dev.admin_queues().unwrap();
    b.w32(CMDQ_DEPTH, 64);
    b.w32(AEQ_ADDR_L, 0);
    assert!(b.init());
    assert_eq!(
        b.dev.admin_queues(),
        Some(&admin),
        "latched state unchanged"
    );
    assert_eq!(b.r32(CMDQ_DEPTH), 64, "registers still read back");
}

#[test]
fn reset_returns_function_to_power_on() {
    let mut b = Bench::default();
    b.dev.pci_config_write(0x04, &0x0006u16.to_le_bytes());
    b.program_like_the_driver();
    assert!(b.init());
    for db in all_doorbells() {
        b.w64(db.offset(), 0x8000_0000);
    }
    b.w32(AEQ_DB, 0x1234); // staged low half, must not survive the reset
    b.w64(SQDB_SHARED_PAGE, 0x1);
    b.w32(DEV_CTRL, DEV_CTRL_RESET);
    assert_eq!(b.r32(DEV_STATUS), DEV_STATUS_RESET_DONE);
    assert_register_power_on(&mut b);
    b.w32(AEQ_DB + 4, 0x1);
    assert_eq!(b.dev.last_doorbell(Doorbell::Aeq), Some(0x1_0000_0000));
    assert!(
        b.dev.bus_master(),
        "DEV_CTRL.RESET leaves config space alone"
    );
    assert_eq!(b.r32(VERSION), DEFAULT_VERSION);
    // The function can be initialized again.
    b.program_like_the_driver();
    assert!(b.init());
    assert_eq!(
        b.r32(DEV_STATUS),
        DEV_STATUS_RESET_DONE | DEV_STATUS_INIT_DONE
    );
}

#[test]
fn reset_wins_over_init() {
    let mut b = Bench::default();
    b.program_like_the_driver();
    b.w32(DEV_CTRL, DEV_CTRL_RESET | DEV_CTRL_INIT);
    assert_eq!(b.r32(DEV_STATUS), DEV_STATUS_RESET_DONE);
    assert_register_power_on(&mut b);
}

#[test]
fn dev_ctrl_sub_word_and_unknown_bits() {
    let mut b = Bench::default();
    b.program_like_the_driver();
    b.write(DEV_CTRL + 1, &[0xff]); // bits 15:8 only: neither RESET nor INIT
    assert_eq!(b.r32(DEV_STATUS), 0);
    b.write(DEV_CTRL, &[0x02]); // one-byte INIT
    assert_eq!(b.r32(DEV_STATUS), DEV_STATUS_INIT_DONE);
    b.w32(DEV_CTRL, 0xffff_fff0); // unknown bits only
    assert_eq!(b.r32(DEV_STATUS), DEV_STATUS_INIT_DONE);
    // An 8-byte write covering DEV_CTRL and DEV_STATUS resets; DEV_STATUS is read-only.
    b.w64(DEV_CTRL, 0xffff_ffff_0000_0001);
    assert_eq!(b.r32(DEV_STATUS), DEV_STATUS_RESET_DONE);
}

#[test]
fn power_on_reset_of_the_whole_device() {
    let mut b = Bench::default();
    b.dev.pci_config_write(0x04, &0x0006u16.to_le_bytes());
    b.program_like_the_driver();
    assert!(b.init());
    b.dev.reset();
    assert_eq!(b.r32(DEV_STATUS), 0, "power-on, not RESET_DONE");
    assert_register_power_on(&mut b);
    assert!(!b.dev.bus_master());
    assert_eq!(b.dev.pci(), &crate::pci::ConfigSpace::new(1));
}

#[test]
fn unknown_offsets_read_zero_and_ignore_writes() {
    let mut b = Bench::default();
    let holes = [
        0x004, 0x008, 0x058, 0x0B0, 0x0B8, 0x0E8, 0x0F0, 0x208, 0x400, 0xFF8,
    ];
    for off in holes {
        b.w32(off, u32::MAX);
        assert_eq!(b.r32(off), 0, "hole {off:#x}");
        b.write(off + 1, &[0xff; 2]);
        assert_eq!(b.read::<2>(off + 1), [0; 2], "hole {off:#x}");
    }
    assert_register_power_on(&mut b);
    assert_eq!(b.r32(DEV_STATUS), 0);
    // A read straddling a register and a hole returns the register's bytes and zeros.
    assert_eq!(b.r64(VERSION), u64::from(DEFAULT_VERSION));
    assert_eq!(b.read::<4>(DEV_PROTO - 2), [0, 0, 1, 0]);
}

#[test]
fn doorbell_spaces_record_writes_and_read_zero() {
    let mut b = Bench::default();
    let cases = [
        (SQDB_SHARED_PAGE, Bar0Area::SqDoorbells),
        (SQDB_BASE + 31 * 128, Bar0Area::SqDoorbells),
        (RQDB_BASE, Bar0Area::RqDoorbells),
        (CQDB_BASE, Bar0Area::CqDoorbells),
        (CQDB_BASE + 511 * 8, Bar0Area::CqDoorbells),
        (EXTDB_BASE + 0x5000, Bar0Area::ExtDoorbells),
        (BAR0_SIZE - 8, Bar0Area::ExtDoorbells),
    ];
    for (i, &(off, area)) in cases.iter().enumerate() {
        let v = 0x0000_0005_0000_0000 | i as u64;
        b.w64(off, v);
        let w = b.dev.last_db_space_write().unwrap();
        assert_eq!(
            w,
            DbSpaceWrite {
                area,
                offset: off,
                len: 8,
                value: v
            }
        );
        assert_eq!(b.r64(off), 0);
    }
    assert_eq!(b.dev.db_space_writes(), cases.len() as u64);
    // A 128-byte direct WQE write into an SQ doorbell slot.
    b.write(SQDB_SHARED_PAGE, &[0x11; 128]);
    let w = b.dev.last_db_space_write().unwrap();
    assert_eq!((w.len, w.value), (128, 0x1111_1111_1111_1111));
}

#[test]
fn accesses_leaving_an_area_or_the_bar_are_ignored() {
    let mut b = Bench::default();
    let n = b.dev.db_space_writes();
    for off in [REG_PAGE_SIZE - 4, SQDB_END - 4, RQDB_END - 4, CQDB_END - 4] {
        b.w64(off, u64::MAX);
        assert_eq!(b.read::<8>(off), [0; 8]);
    }
    for off in [BAR0_SIZE - 4, BAR0_SIZE, u64::MAX - 3, u64::MAX] {
        b.w64(off, u64::MAX);
        assert_eq!(b.read::<8>(off), [0; 8]);
    }
    assert_eq!(b.dev.db_space_writes(), n);
    assert_register_power_on(&mut b);
}

#[test]
fn bar2_reads_zero() {
    let mut b = Bench::default();
    b.dev.bar2_write(0, &[0xff; 16]);
    let mut d = [0xa5u8; 16];
    b.dev.bar2_read(0, &mut d);
    assert_eq!(d, [0; 16]);
    b.dev.bar2_read(BAR2_SIZE - 4, &mut d);
    assert_eq!(d, [0; 16]);
    b.dev.bar2_read(u64::MAX, &mut d);
    assert_eq!(d, [0; 16]);
}

#[test]
fn empty_accesses_are_harmless() {
    let mut b = Bench::default();
    b.write(DEV_CTRL, &[]);
    b.dev.bar0_read(VERSION, &mut []);
    b.dev.pci_config_write(0, &[]);
    assert_eq!(b.r32(DEV_STATUS), 0);
}

/// Every kind of guest-triggerable line is limited to `BURST` per `INTERVAL` on the device's
/// clock, each kind on its own; the limits survive a reset (a guest can reset at will), the
/// once-per-offset memory of odd accesses does not.
#[test]
fn guest_triggerable_log_lines_are_rate_limited() {
    let clock = Arc::new(ManualClock::new());
    let mut w = WarnOnce::new(clock.clone());
    let burst = WarnOnce::BURST as usize;
    let allowed =
        |w: &mut WarnOnce, f: fn(&mut WarnOnce) -> bool| (0..1000).filter(|_| f(w)).count();
    assert_eq!(allowed(&mut w, WarnOnce::cmd_error), burst);
    assert_eq!(allowed(&mut w, WarnOnce::dp_error), burst, "its own limit");
    assert_eq!(allowed(&mut w, WarnOnce::event_drop), burst);
    assert_eq!(allowed(&mut w, WarnOnce::note), burst);
    clock.advance(WarnOnce::INTERVAL / 2);
    assert!(!w.cmd_error(), "still in the interval");
    clock.advance(WarnOnce::INTERVAL);
    assert_eq!(
        allowed(&mut w, WarnOnce::cmd_error),
        burst,
        "a new interval"
    );
    // Odd accesses: once per (kind, key), and at most BURST distinct ones per interval.
    let firsts = (0..1000u64)
        .filter(|&k| w.first(Oddity::HoleRead, k % 50))
        .count();
    assert_eq!(firsts, burst);
    w.forget_seen();
    assert!(
        !w.first(Oddity::HoleRead, 999),
        "the limit survives a reset"
    );
    clock.advance(WarnOnce::INTERVAL);
    assert!(w.first(Oddity::HoleRead, 0), "forgotten by the reset");
    assert!(!w.first(Oddity::HoleRead, 0), "once");
}

/// A guest that repeats a failing command as fast as it can gets `BURST` warnings per
/// interval, not one per command (the device's clock drives the limit).
#[test]
fn a_refused_command_storm_logs_a_bounded_number_of_warnings() {
    let clock = Arc::new(ManualClock::new());
    let mut t = TestDriver::with(DeviceConfig::default(), clock.clone(), 512, 128, 4096);
    assert!(t.init());
    for _ in 0..200 {
        // CREATE_EQ of EQN 0 is refused (status 2).
        assert_ne!(t.create_ceq(0, 1, 4).status, 0);
    }
    assert!(
        !t.dev.warned.cmd_error(),
        "the storm used up the interval's lines"
    );
    clock.advance(WarnOnce::INTERVAL);
    assert!(t.dev.warned.cmd_error());
}
