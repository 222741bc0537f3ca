// SPDX-License-Identifier: GPL-2.0

//! The control language (`control.rs`): arbitrary lines parsed and executed on a function with
//! live queues and objects (so that `cqe`, `ceq`, `aeq`, `cmd-cqe` and the queries find
//! something), directly (the control socket) and through the BAR0 test page (mailbox bytes,
//! EXECUTE, reply); then commands and time, so that the rules and lies take effect.

#![no_main]

use erdma_fuzz::{drain_cmdq, driver, exec, tick};
use erdma_model::cmdq::Command;
use erdma_model::control;
use erdma_model::regs::{self, test_page};
use erdma_model::testing::dp::{self, ALL_ACCESS, PDN};
use erdma_model::{DeviceConfig, Protocol};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, text)) = data.split_first() else {
        return;
    };
    let config = DeviceConfig {
        protocol: if mode & 1 != 0 {
            Protocol::Iwarp
        } else {
            Protocol::RoceV2
        },
        test_page: true,
        ..DeviceConfig::default()
    };
    let (mut d, clock) = driver(config);
    if mode & 2 == 0 {
        d.init();
        d.create_ceq(dp::EQN, 1, 8);
        d.create_cq(1, 6);
        d.create_qp(7, 1, 6, 6);
        let buf = d.alloc(0x4000, 0x1000);
        d.reg_mr(1, 0, PDN, buf, 0x4000, ALL_ACCESS);
    }
    for (n, line) in text.split(|&b| b == b'\n').take(32).enumerate() {
        if (mode >> 2).wrapping_add(n as u8) & 1 == 0 {
            let line = String::from_utf8_lossy(line);
            let _ = control::parse(&line);
            let reply = d.control(&line);
            let _ = control::format_reply(&reply);
        } else {
            // The test page: the bytes as they are (NUL-terminated if there is room).
            let base = regs::TEST_PAGE_BASE;
            let mut mailbox = line[..line.len().min(test_page::BUF_SIZE as usize)].to_vec();
            if mailbox.len() < test_page::BUF_SIZE as usize {
                mailbox.push(0);
            }
            d.write(base + test_page::MAILBOX, &mailbox);
            d.w32(base + test_page::EXECUTE, 1);
            let mut reply = [0u8; test_page::BUF_SIZE as usize];
            d.dev.bar0_read(base + test_page::REPLY, &mut reply);
            let _ = d.r32(base + test_page::STATUS);
        }
    }
    // The rules and lies at work: commands, arms, time.
    for c in [
        Command::QueryDevice,
        Command::AllocDb,
        Command::CreateCq,
        Command::DestroyQp,
        Command::GetStats,
    ] {
        exec(&mut d, c.code(), |s| {
            s[8..12].copy_from_slice(&7u32.to_le_bytes());
        });
    }
    tick(&mut d, &clock, 4000);
    drain_cmdq(&mut d);
    d.write(regs::DEV_CTRL, &regs::DEV_CTRL_RESET.to_le_bytes());
    d.init();
    tick(&mut d, &clock, 4000);
});
