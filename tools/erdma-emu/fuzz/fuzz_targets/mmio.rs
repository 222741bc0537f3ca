// SPDX-License-Identifier: GPL-2.0

//! BAR0, BAR2 and configuration-space access sequences: reads and writes of any width at any
//! offset (biased towards registers, doorbells and the test page), DEV_CTRL, guest scribbles
//! over the admin rings and the passing of time, on a function that the driver double may
//! have initialized first.

#![no_main]

use arbitrary::Arbitrary;
use erdma_fuzz::{cut, driver, mem_addr, poke, tick};
use erdma_model::io::Io;
use erdma_model::regs::{self, test_page};
use erdma_model::{DeviceConfig, Protocol};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
enum Off {
    /// The register page.
    Reg(u16),
    /// EQ doorbells, CMDQ SQ/CQ doorbells: the right offset, maybe a few bytes off.
    Doorbell(u8, u8),
    /// SQ doorbell space.
    Sq(u32),
    /// RQ doorbell space.
    Rq(u32),
    /// CQ doorbell space.
    Cq(u32),
    /// Extended doorbell pages.
    Ext(u32),
    /// The test page.
    Test(u16),
    /// Anywhere.
    Raw(u64),
}

impl Off {
    fn get(&self) -> u64 {
        let span = |base: u64, end: u64, x: u32| base + u64::from(x) % (end - base);
        match *self {
            Off::Reg(x) => u64::from(x) % regs::REG_PAGE_SIZE,
            Off::Doorbell(which, skew) => {
                let base = match which % 6 {
                    0 => regs::CMDQ_SQ_DB,
                    1 => regs::CMDQ_CQ_DB,
                    2 => regs::AEQ_DB,
                    3 => regs::eq_db(which / 6 % regs::EQ_DB_COUNT),
                    4 => regs::DEV_CTRL,
                    _ => regs::CMDQ_SQ_DBREC_ADDR + 8 * u64::from(which / 6 % 4),
                };
                base + u64::from(skew % 8)
            }
            Off::Sq(x) => span(regs::SQDB_BASE, regs::SQDB_END, x),
            Off::Rq(x) => span(regs::RQDB_BASE, regs::RQDB_END, x),
            Off::Cq(x) => span(regs::CQDB_BASE, regs::CQDB_END, x),
            Off::Ext(x) => span(regs::EXTDB_BASE, regs::BAR0_SIZE, x),
            Off::Test(x) => regs::TEST_PAGE_BASE + u64::from(x) % regs::TEST_PAGE_SIZE,
            Off::Raw(x) => x,
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Op {
    Bar0Read {
        off: Off,
        len: u16,
    },
    Bar0Write {
        off: Off,
        data: Vec<u8>,
    },
    /// One 8-byte write (what rings a doorbell).
    Bar0Write64 {
        off: Off,
        value: u64,
    },
    Bar2Read {
        off: u64,
        len: u16,
    },
    Bar2Write {
        off: u64,
        data: Vec<u8>,
    },
    ConfigRead {
        off: u16,
        len: u16,
    },
    ConfigWrite {
        off: u16,
        data: Vec<u8>,
    },
    DevCtrl(u32),
    /// A command in the test page's mailbox, then EXECUTE.
    TestCommand(Vec<u8>),
    /// The guest writes its memory (rings, doorbell records).
    Scribble {
        at: u16,
        data: Vec<u8>,
    },
    /// Time passes.
    Tick(u16),
    /// Power-on reset of the function (FLR / a new client).
    Reset,
}

#[derive(Arbitrary, Debug)]
struct Input {
    iwarp: bool,
    test_page: bool,
    init: bool,
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
        ..DeviceConfig::default()
    };
    let (mut d, clock) = driver(config);
    if input.init {
        d.init();
    }
    let mut buf = vec![0u8; 512];
    for op in input.ops.iter().take(256) {
        match op {
            Op::Bar0Read { off, len } => {
                let n = usize::from(*len) % buf.len();
                d.dev.bar0_read(off.get(), &mut buf[..n]);
            }
            Op::Bar0Write { off, data } => d.write(off.get(), cut(data, 512)),
            Op::Bar0Write64 { off, value } => d.w64(off.get(), *value),
            Op::Bar2Read { off, len } => {
                let n = usize::from(*len) % buf.len();
                d.dev.bar2_read(*off, &mut buf[..n]);
            }
            Op::Bar2Write { off, data } => d.dev.bar2_write(*off, cut(data, 512)),
            Op::ConfigRead { off, len } => {
                let n = usize::from(*len) % buf.len();
                d.dev.pci_config_read(u64::from(*off), &mut buf[..n]);
            }
            Op::ConfigWrite { off, data } => {
                d.dev.pci_config_write(u64::from(*off), cut(data, 512))
            }
            Op::DevCtrl(v) => d.w32(regs::DEV_CTRL, *v),
            Op::TestCommand(cmd) => {
                let base = regs::TEST_PAGE_BASE;
                let mut mailbox = cut(cmd, test_page::BUF_SIZE as usize).to_vec();
                mailbox.push(0);
                let mailbox = cut(&mailbox, test_page::BUF_SIZE as usize).to_vec();
                d.write(base + test_page::MAILBOX, &mailbox);
                d.w32(base + test_page::EXECUTE, 1);
                let mut reply = [0u8; 8];
                d.dev.bar0_read(base + test_page::REPLY, &mut reply);
            }
            Op::Scribble { at, data } => {
                let addr = mem_addr(*at);
                poke(&mut d, addr, cut(data, 512));
            }
            Op::Tick(ms) => tick(&mut d, &clock, *ms),
            Op::Reset => {
                d.dev.reset();
                let mut io = Io::new(&mut d.mem, &mut d.irq);
                // A reset device must accept a new initialization.
                d.dev
                    .bar0_write(regs::DEV_CTRL, &0u32.to_le_bytes(), &mut io);
            }
        }
    }
});
