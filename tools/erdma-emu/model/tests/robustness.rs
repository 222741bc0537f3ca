// SPDX-License-Identifier: GPL-2.0

//! The model never panics on guest input: ~100k pseudo-random accesses of random sizes, offsets and
//! values at configuration space, BAR0 and BAR2, then the identity must be intact.

use erdma_model::pci::{self, ConfigSpace};
use erdma_model::regs;
use erdma_model::testing::{RecordingIrqs, VecMemory};
use erdma_model::{Device, DeviceConfig, Io, Protocol};

/// xorshift64* (deterministic, no external crate).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Offsets biased towards the interesting places, with the occasional wild one.
fn offset(rng: &mut Rng, size: u64) -> u64 {
    match rng.below(16) {
        0..=7 => rng.below(size.min(0x400)),
        8..=11 => rng.below(size),
        12 => size.saturating_sub(rng.below(16)),
        13 => u64::MAX - rng.below(16),
        14 => rng.next(),
        _ => regs::CMDQ_SQ_DB & (size - 1) | rng.below(8),
    }
}

fn len(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0..=7 => [1, 2, 4, 8][rng.below(4) as usize],
        8 => rng.below(16) as usize,
        _ => rng.below(300) as usize,
    }
}

fn read32(dev: &mut Device, off: u64) -> u32 {
    let mut b = [0u8; 4];
    dev.bar0_read(off, &mut b);
    u32::from_le_bytes(b)
}

#[test]
fn random_accesses_never_panic_and_keep_identity() {
    let config = DeviceConfig {
        mac: [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee],
        protocol: Protocol::Iwarp,
        version: 0x77,
        revision: 0x05,
        grp_num: 4,
    };
    let mut dev = Device::new(config.clone());
    let mut mem = VecMemory::new(0x10_0000, 0x10_0000);
    let mut irq = RecordingIrqs::all_connected();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut buf = vec![0u8; 512];

    for i in 0..100_000u32 {
        let n = len(&mut rng);
        for b in &mut buf[..n] {
            *b = rng.next() as u8;
        }
        // Mostly valid-looking values for DEV_CTRL so that RESET/INIT really happen.
        if rng.below(50) == 0 {
            let v = 1 + rng.below(3) as u32;
            let mut io = Io::new(&mut mem, &mut irq);
            dev.bar0_write(regs::DEV_CTRL, &v.to_le_bytes(), &mut io);
        }
        let write = rng.below(2) == 0;
        match rng.below(8) {
            0 => {
                let off = offset(&mut rng, pci::CONFIG_SPACE_SIZE as u64);
                if write {
                    dev.pci_config_write(off, &buf[..n]);
                } else {
                    dev.pci_config_read(off, &mut buf[..n]);
                }
            }
            1 => {
                let off = offset(&mut rng, regs::BAR2_SIZE);
                if write {
                    dev.bar2_write(off, &buf[..n]);
                } else {
                    dev.bar2_read(off, &mut buf[..n]);
                }
            }
            _ => {
                let off = offset(&mut rng, regs::BAR0_SIZE);
                if write {
                    let mut io = Io::new(&mut mem, &mut irq);
                    dev.bar0_write(off, &buf[..n], &mut io);
                } else {
                    dev.bar0_read(off, &mut buf[..n]);
                }
            }
        }
        if i % 10_000 == 0 {
            dev.reset();
        }
    }

    // Identity is read-only whatever was written.
    let fresh = ConfigSpace::new(config.revision);
    let mut ids = [0u8; 0x10];
    dev.pci_config_read(0, &mut ids);
    assert_eq!(ids[..4], fresh.bytes()[..4], "vendor/device");
    assert_eq!(ids[8..12], fresh.bytes()[8..12], "revision/class");
    let mut sub = [0u8; 4];
    dev.pci_config_read(0x2c, &mut sub);
    assert_eq!(sub, [0xed, 0x1d, 0x7f, 0x10]);
    let mut cap = [0u8; 12];
    dev.pci_config_read(0x40, &mut cap);
    assert_eq!(cap[0], 0x11);
    assert_eq!(cap[4..], fresh.bytes()[0x44..0x4c]);
    assert_eq!(read32(&mut dev, regs::VERSION), 0x77);
    assert_eq!(read32(&mut dev, regs::DEV_PROTO), 0);
    assert_eq!(read32(&mut dev, regs::NETDEV_MAC_L), 0xbbcc_ddee);
    assert_eq!(read32(&mut dev, regs::NETDEV_MAC_H), 0x02aa);
    assert_eq!(read32(&mut dev, regs::GRP_NUM), 4);
    assert_eq!(dev.device_config(), &config);
    // Nothing in the model raises interrupts or DMAs yet.
    assert!(irq.raised.is_empty());
    assert!(mem.bytes().iter().all(|&b| b == 0));
}
