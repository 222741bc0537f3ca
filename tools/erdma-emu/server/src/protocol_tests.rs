// SPDX-License-Identifier: GPL-2.0

//! Protocol tests without QEMU: the `vfio_user` crate's own client drives the server over real
//! UNIX sockets, with a memfd standing in for guest RAM and eventfds for QEMU's irqfds.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use erdma_model::regs::{self, *};
use erdma_model::{pci, DeviceConfig, GuestMemory, Protocol};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_BAR1_REGION_INDEX,
    VFIO_PCI_BAR2_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_INTX_IRQ_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_ROM_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::Client;

use crate::cli::DeviceSpec;
use crate::control;
use crate::guest_mem::tests::memfd;
use crate::irqs::tests::{eventfd, take_count};
use crate::runner;
use crate::state::lock;

const CONFIG: u32 = VFIO_PCI_CONFIG_REGION_INDEX;
const BAR0: u32 = VFIO_PCI_BAR0_REGION_INDEX;

/// A scratch directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("erdma-emu-{}-{tag}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spec(name: &str, socket: &Path, config: DeviceConfig) -> DeviceSpec {
    DeviceSpec {
        name: name.into(),
        socket: socket.into(),
        config,
    }
}

fn r32(c: &mut Client, region: u32, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(region, off, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn w32(c: &mut Client, region: u32, off: u64, v: u32) {
    c.region_write(region, off, &v.to_le_bytes()).unwrap();
}

fn w64(c: &mut Client, off: u64, v: u64) {
    c.region_write(BAR0, off, &v.to_le_bytes()).unwrap();
}

/// Programs the admin queues and writes INIT, as the driver does.
fn init(c: &mut Client) -> u32 {
    for (off, v) in [
        (AEQ_ADDR_H, 0),
        (AEQ_ADDR_L, 0x10_0000),
        (AEQ_DEPTH, 4096),
        (CMDQ_SQ_ADDR_H, 0),
        (CMDQ_SQ_ADDR_L, 0x11_0000),
        (CMDQ_DEPTH, 512),
        (CMDQ_CQ_ADDR_H, 0),
        (CMDQ_CQ_ADDR_L, 0x12_0000),
        (CMDQ_EQ_ADDR_H, 0),
        (CMDQ_EQ_ADDR_L, 0x13_0000),
        (CMDQ_EQ_DEPTH, 128),
    ] {
        w32(c, BAR0, off, v);
    }
    for (i, q) in AdminQueue::ALL.into_iter().enumerate() {
        w64(c, q.dbrec_reg(), 0x14_0000 + 8 * i as u64);
    }
    w32(c, BAR0, DEV_CTRL, DEV_CTRL_INIT);
    r32(c, BAR0, DEV_STATUS)
}

fn check_identity(c: &mut Client, config: &DeviceConfig) {
    // Regions and interrupts as advertised.
    let region = |c: &Client, i| c.region(i).map(|r| (r.size, r.flags)).unwrap();
    let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    assert_eq!(region(c, CONFIG), (256, rw));
    assert_eq!(region(c, BAR0), (BAR0_SIZE, rw));
    assert_eq!(region(c, BAR0).1 & VFIO_REGION_INFO_FLAG_MMAP, 0);
    assert_eq!(region(c, VFIO_PCI_BAR2_REGION_INDEX), (BAR2_SIZE, rw));
    assert_eq!(region(c, VFIO_PCI_BAR1_REGION_INDEX), (0, 0));
    assert_eq!(region(c, VFIO_PCI_ROM_REGION_INDEX), (0, 0));
    let msix = c.get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX).unwrap();
    assert_eq!((msix.count, msix.flags), (32, VFIO_IRQ_INFO_EVENTFD));
    assert_eq!(c.get_irq_info(VFIO_PCI_INTX_IRQ_INDEX).unwrap().count, 0);

    // Config space.
    assert_eq!(r32(c, CONFIG, 0x00), 0x107f_1ded);
    assert_eq!(
        r32(c, CONFIG, 0x08),
        0x0280_0000 | u32::from(config.revision)
    );
    assert_eq!(r32(c, CONFIG, 0x2c), 0x107f_1ded);
    assert_eq!(
        r32(c, CONFIG, 0x40) & 0x07ff_00ff,
        0x001f_0011,
        "MSI-X, 32 vectors"
    );

    // BAR0 identity registers.
    let m = config.mac.map(u32::from);
    assert_eq!(r32(c, BAR0, VERSION), config.version);
    assert_eq!(r32(c, BAR0, DEV_PROTO), config.protocol.value());
    assert_eq!(
        r32(c, BAR0, NETDEV_MAC_L),
        m[2] << 24 | m[3] << 16 | m[4] << 8 | m[5]
    );
    assert_eq!(r32(c, BAR0, NETDEV_MAC_H), m[0] << 8 | m[1]);
    assert_eq!(r32(c, BAR0, DEV_STATUS), 0);
}

#[test]
fn two_devices_served_from_one_process() {
    let dir = TempDir::new("two");
    let configs = [
        DeviceConfig {
            mac: [0x52, 0x54, 0x00, 0x12, 0x34, 0x56],
            protocol: Protocol::RoceV2,
            ..Default::default()
        },
        DeviceConfig {
            mac: [0x02, 0xab, 0xcd, 0xef, 0x01, 0x23],
            protocol: Protocol::Iwarp,
            version: 0x42,
            revision: 3,
            ..Default::default()
        },
    ];
    let sockets = [dir.path("dev0.sock"), dir.path("dev1.sock")];
    let specs = [
        spec("dev0", &sockets[0], configs[0].clone()),
        spec("dev1", &sockets[1], configs[1].clone()),
    ];
    let listening = runner::bind(&specs, None).unwrap();
    assert_eq!(listening.len(), 2);
    assert!(sockets.iter().all(|s| s.exists()));
    let running = listening.start().unwrap();
    let states = [running.state(0).unwrap(), running.state(1).unwrap()];
    let state = |i: usize| &states[i];

    // Both clients connected at the same time.
    let mut c0 = Client::new(&sockets[0]).unwrap();
    let mut c1 = Client::new(&sockets[1]).unwrap();
    check_identity(&mut c0, &configs[0]);
    check_identity(&mut c1, &configs[1]);

    // Enable memory decoding and bus mastering on dev0 only.
    c0.region_write(CONFIG, 0x04, &0x0006u16.to_le_bytes())
        .unwrap();
    assert_eq!(r32(&mut c0, CONFIG, 0x04) & 0xffff, 0x0006);
    assert_eq!(r32(&mut c1, CONFIG, 0x04) & 0xffff, 0);

    // INIT handshake on dev0; dev1 is unaffected.
    assert_eq!(init(&mut c0), DEV_STATUS_INIT_DONE);
    assert_eq!(r32(&mut c1, BAR0, DEV_STATUS), 0);
    assert_eq!(r32(&mut c1, BAR0, CMDQ_DEPTH), 0);
    let admin = *lock(state(0)).device.admin_queues().unwrap();
    assert_eq!(admin.cmdq_sq.addr, 0x11_0000);
    assert_eq!(admin.aeq.dbrec, 0x14_0018);

    // A 64-bit doorbell arrives as one 8-byte write.
    w64(&mut c0, CMDQ_SQ_DB, 0x0000_0001_0000_0004);
    w64(&mut c0, eq_db(5), 0x8000_0007);
    {
        let st = lock(state(0));
        assert_eq!(
            st.device.last_doorbell(Doorbell::CmdqSq),
            Some(0x1_0000_0004)
        );
        assert_eq!(st.device.last_doorbell(Doorbell::Eq(5)), Some(0x8000_0007));
    }
    assert_eq!(lock(state(1)).device.last_doorbell(Doorbell::CmdqSq), None);

    // DEV_CTRL.RESET brings dev0's function back to power-on (plus RESET_DONE).
    w32(&mut c0, BAR0, DEV_CTRL, DEV_CTRL_RESET);
    assert_eq!(r32(&mut c0, BAR0, DEV_STATUS), DEV_STATUS_RESET_DONE);
    assert_eq!(r32(&mut c0, BAR0, CMDQ_SQ_ADDR_L), 0);
    assert_eq!(r32(&mut c0, BAR0, AEQ_DEPTH), 0);
    assert_eq!(r32(&mut c0, BAR0, VERSION), configs[0].version);
    assert_eq!(
        r32(&mut c0, CONFIG, 0x04) & 0xffff,
        0x0006,
        "config space untouched"
    );

    // DMA_MAP of a memfd: the device reaches the client's memory.
    let ram = memfd(0x20_0000);
    let iova = 0x1_0000_0000;
    c0.dma_map(0, iova, 0x20_0000, ram.as_raw_fd()).unwrap();
    {
        let mut st = lock(state(0));
        assert_eq!(st.mem.len(), 1);
        st.mem.write(iova + 0x1000, b"erdma").unwrap();
        assert!(
            st.mem.write(iova + 0x20_0000, b"x").is_err(),
            "beyond the mapping"
        );
    }
    let mut b = [0u8; 5];
    ram.read_exact_at(&mut b, 0x1000).unwrap();
    assert_eq!(&b, b"erdma");
    assert!(lock(state(1)).mem.is_empty(), "dev1 has no mappings");

    // SET_IRQS the way QEMU sends it: a run with fds, a run without, a run with.
    let (e0, e2) = (eventfd(), eventfd());
    let trigger_fd = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    let msix = VFIO_PCI_MSIX_IRQ_INDEX;
    c0.set_irqs(msix, trigger_fd, 0, 1, &[e0.as_raw_fd()])
        .unwrap();
    c0.set_irqs(msix, trigger_fd, 1, 1, &[]).unwrap();
    c0.set_irqs(msix, trigger_fd, 2, 1, &[e2.as_raw_fd()])
        .unwrap();
    {
        use erdma_model::IrqSink;
        let mut st = lock(state(0));
        assert_eq!(st.irqs.connected(), 2);
        assert!(st.irqs.raise(2));
        assert!(!st.irqs.raise(1));
    }
    assert_eq!(take_count(&e2), 1);
    // Loopback trigger over the socket.
    let trigger_none = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
    c0.set_irqs(msix, trigger_none, 0, 1, &[]).unwrap();
    assert_eq!(take_count(&e0), 1);
    assert_eq!(lock(state(1)).irqs.connected(), 0, "dev1 has no vectors");

    // DMA_UNMAP.
    c0.dma_unmap(iova, 0x20_0000).unwrap();
    assert!(lock(state(0)).mem.is_empty());
    c0.dma_map(0, iova, 0x20_0000, ram.as_raw_fd()).unwrap();

    // Disconnect dev0 with state everywhere, reconnect: a power-on device.
    assert_eq!(init(&mut c0), DEV_STATUS_RESET_DONE | DEV_STATUS_INIT_DONE);
    c0.shutdown().unwrap();
    drop(c0);
    let mut c0 = Client::new(&sockets[0]).unwrap();
    check_identity(&mut c0, &configs[0]);
    assert_eq!(
        r32(&mut c0, CONFIG, 0x04) & 0xffff,
        0,
        "config space at power-on"
    );
    assert_eq!(r32(&mut c0, BAR0, CMDQ_DEPTH), 0);
    {
        let st = lock(state(0));
        assert!(st.mem.is_empty(), "mappings of the old client are gone");
        assert_eq!(
            st.irqs.connected(),
            0,
            "eventfds of the old client are gone"
        );
        assert_eq!(st.device.admin_queues(), None);
    }
    assert_eq!(init(&mut c0), DEV_STATUS_INIT_DONE);

    // dev1 kept working throughout; its client can reset it with DEVICE_RESET.
    assert_eq!(init(&mut c1), DEV_STATUS_INIT_DONE);
    c1.region_write(CONFIG, 0x04, &0x0002u16.to_le_bytes())
        .unwrap();
    c1.reset().unwrap();
    assert_eq!(r32(&mut c1, BAR0, DEV_STATUS), 0);
    assert_eq!(r32(&mut c1, CONFIG, 0x04) & 0xffff, 0);
    assert_eq!(
        r32(&mut c0, BAR0, DEV_STATUS),
        DEV_STATUS_INIT_DONE,
        "dev0 untouched"
    );

    // Odd accesses over the socket are answered, not fatal.
    let mut big = vec![0xa5u8; 64];
    c1.region_read(BAR0, BAR0_SIZE - 8, &mut big).unwrap();
    assert!(big.iter().all(|&b| b == 0));
    c1.region_read(CONFIG, 250, &mut big).unwrap();
    c1.region_write(BAR0, regs::SQDB_SHARED_PAGE, &[0x5a; 128])
        .unwrap();
    c1.region_write(VFIO_PCI_ROM_REGION_INDEX, 0, &[1, 2, 3, 4])
        .unwrap();
    assert_eq!(r32(&mut c1, BAR0, VERSION), configs[1].version);
    let mut cfg = [0u8; pci::CONFIG_SPACE_SIZE];
    c1.region_read(CONFIG, 0, &mut cfg).unwrap();
    assert_eq!(cfg[0x34], 0x40);

    running.remove_sockets();
    assert!(sockets.iter().all(|s| !s.exists()));
}

#[test]
fn bind_clears_stale_sockets_and_refuses_live_ones() {
    let dir = TempDir::new("bind");
    let stale = dir.path("stale.sock");
    drop(UnixListener::bind(&stale).unwrap()); // the file stays, nobody listens
    let live = dir.path("live.sock");
    let _listener = UnixListener::bind(&live).unwrap();
    let file = dir.path("file");
    File::create(&file).unwrap();
    let config = DeviceConfig::default();

    let l = runner::bind(&[spec("dev0", &stale, config.clone())], None).unwrap();
    assert!(stale.exists());
    drop(l);
    assert!(
        !stale.exists(),
        "dropping an unstarted server removes its socket"
    );

    for bad in [&live, &file] {
        let ok = dir.path("ok.sock");
        let specs = [
            spec("dev0", &ok, config.clone()),
            spec("dev1", bad, config.clone()),
        ];
        let err = runner::bind(&specs, None).err().unwrap();
        assert!(err.starts_with("dev1: socket "), "{err}");
        assert!(!ok.exists(), "sockets bound before the failure are removed");
        assert!(bad.exists(), "the offending path is left alone");
    }
    let missing_dir = dir.path("no/such/dir.sock");
    assert!(runner::bind(&[spec("dev0", &missing_dir, config)], None).is_err());
}

// ------------------------------------------------------------------------------------------------
// The command queue over vfio-user, the control socket
// ------------------------------------------------------------------------------------------------

mod cmdq {
    use std::io::{BufRead, BufReader, Write};
    use std::os::unix::net::UnixStream;
    use std::time::{Duration, Instant};

    use erdma_model::cmdq::{Command, Cqe, Header, CQE_SIZE};
    use erdma_model::regs::test_page;

    use super::*;

    /// Guest RAM: a memfd mapped at this IOVA.
    const IOVA: u64 = 0x1_0000_0000;
    const RAM: u64 = 0x10_0000;
    const SQ: u64 = IOVA;
    const CQ: u64 = IOVA + 0x4000;
    const EQ: u64 = IOVA + 0x8000;
    const AEQ: u64 = IOVA + 0x1_0000;
    const DBREC: u64 = IOVA + 0x2_0000;

    /// A connected client with guest RAM, like QEMU with a driver that has just probed.
    struct Vm {
        c: Client,
        ram: File,
        pi: u16,
        cq_ci: u32,
    }

    impl Vm {
        fn connect(socket: &Path) -> Self {
            let mut c = Client::new(socket).unwrap();
            let ram = memfd(RAM);
            c.dma_map(0, IOVA, RAM, ram.as_raw_fd()).unwrap();
            c.region_write(CONFIG, 0x04, &0x0006u16.to_le_bytes())
                .unwrap();
            Vm {
                c,
                ram,
                pi: 0,
                cq_ci: 0,
            }
        }

        /// Programs the rings in guest RAM and writes INIT; returns DEV_STATUS.
        fn init(&mut self) -> u32 {
            for (off, v) in [
                (AEQ_ADDR_H, (AEQ >> 32) as u32),
                (AEQ_ADDR_L, AEQ as u32),
                (AEQ_DEPTH, 4096),
                (CMDQ_SQ_ADDR_H, (SQ >> 32) as u32),
                (CMDQ_SQ_ADDR_L, SQ as u32),
                (CMDQ_DEPTH, 512),
                (CMDQ_CQ_ADDR_H, (CQ >> 32) as u32),
                (CMDQ_CQ_ADDR_L, CQ as u32),
                (CMDQ_EQ_ADDR_H, (EQ >> 32) as u32),
                (CMDQ_EQ_ADDR_L, EQ as u32),
                (CMDQ_EQ_DEPTH, 128),
            ] {
                w32(&mut self.c, BAR0, off, v);
            }
            for (i, q) in AdminQueue::ALL.into_iter().enumerate() {
                w64(&mut self.c, q.dbrec_reg(), DBREC + 8 * i as u64);
            }
            w32(&mut self.c, BAR0, DEV_CTRL, DEV_CTRL_INIT);
            r32(&mut self.c, BAR0, DEV_STATUS)
        }

        /// Writes a header-only 4-WQEBB command and rings the doorbell; returns its start index.
        fn submit(&mut self, cmd: Command) -> u16 {
            let start = self.pi;
            self.pi = start.wrapping_add(4);
            let h = Header {
                wqebb_index: self.pi,
                code: cmd.code(),
                cookie: 7,
                wqebbs: 4,
            };
            let off = u64::from(start & 511) * 32;
            self.ram
                .write_all_at(&h.encode().to_le_bytes(), SQ - IOVA + off)
                .unwrap();
            w64(&mut self.c, CMDQ_SQ_DB, self.pi.into());
            start
        }

        /// The CQE at the consumer index, if valid; advances.
        fn poll_cqe(&mut self) -> Option<Cqe> {
            let mut b = [0u8; CQE_SIZE];
            let off = CQ - IOVA + u64::from(self.cq_ci & 511) * CQE_SIZE as u64;
            self.ram.read_exact_at(&mut b, off).unwrap();
            let cqe = Cqe::decode(&b);
            if cqe.owner == (self.cq_ci & 512 != 0) {
                return None;
            }
            self.cq_ci += 1;
            Some(cqe)
        }

        fn eqe_owner(&self, i: u64) -> bool {
            let mut b = [0u8; 4];
            self.ram.read_exact_at(&mut b, EQ - IOVA + 16 * i).unwrap();
            u32::from_le_bytes(b) >> 31 != 0
        }

        fn arm_cq(&mut self) {
            w64(&mut self.c, CMDQ_CQ_DB, 1 << 31 | u64::from(self.cq_ci));
        }
    }

    fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(v) = f() {
                return v;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// A line-oriented control-socket client.
    struct Control {
        w: UnixStream,
        r: BufReader<UnixStream>,
    }

    impl Control {
        fn connect(path: &Path) -> Self {
            let w = UnixStream::connect(path).unwrap();
            let r = BufReader::new(w.try_clone().unwrap());
            Control { w, r }
        }

        fn ask(&mut self, line: &str) -> String {
            writeln!(self.w, "{line}").unwrap();
            let mut reply = String::new();
            self.r.read_line(&mut reply).unwrap();
            assert!(reply.ends_with('\n'), "{reply:?}");
            reply.trim_end().to_string()
        }
    }

    #[test]
    fn query_device_and_interrupts_over_vfio_user() {
        let dir = TempDir::new("cmdq");
        let sock = dir.path("dev0.sock");
        let ctl = dir.path("control.sock");
        let config = DeviceConfig {
            test_page: true,
            ..Default::default()
        };
        let specs = [spec("dev0", &sock, config.clone())];
        let running = runner::bind(&specs, Some(&ctl)).unwrap().start().unwrap();
        assert_eq!(running.sockets(), [sock.clone(), ctl.clone()]);
        let mut vm = Vm::connect(&sock);
        assert_eq!(vm.init(), DEV_STATUS_INIT_DONE);

        // Polling mode: QUERY_DEVICE completes with the configured capabilities, no interrupt.
        let start = vm.submit(Command::QueryDevice);
        let cqe = vm.poll_cqe().expect("QUERY_DEVICE completed");
        assert_eq!((cqe.status, cqe.start, cqe.owner), (0, start.into(), true));
        assert_eq!((cqe.resp0, cqe.resp1), config.caps.query_device());

        // Armed before the guest has enabled MSI-X: the interrupt is kept pending and arrives
        // with the eventfd.
        vm.arm_cq();
        vm.submit(Command::QueryFwInfo);
        assert_eq!(
            vm.poll_cqe().unwrap().resp0,
            u64::from(config.caps.fw_version)
        );
        assert!(vm.eqe_owner(0), "EQE written");
        let state = running.state(0).unwrap();
        assert_eq!(lock(&state).irqs.pending(), 1, "vector 0 pending");
        let e0 = eventfd();
        let trigger_fd = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        vm.c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, trigger_fd, 0, 1, &[e0.as_raw_fd()])
            .unwrap();
        assert_eq!(take_count(&e0), 1, "pending interrupt delivered");

        // The driver's interrupt path: re-arm CQ and EQ; the next command interrupts at once.
        vm.arm_cq();
        w64(&mut vm.c, eq_db(0), 1 << 31 | 1);
        assert_eq!(take_count(&e0), 0);
        vm.submit(Command::QueryDevice);
        assert_eq!(take_count(&e0), 1);
        assert!(vm.eqe_owner(1));
        assert_eq!(vm.poll_cqe().unwrap().status, 0);

        // The control socket: queries, a delayed completion run by the timer thread.
        let mut ctl_client = Control::connect(&ctl);
        assert_eq!(ctl_client.ask("dev0 query cmds"), "ok cmds=3");
        assert_eq!(ctl_client.ask("dev0 query init_done"), "ok init_done=1");
        assert_eq!(ctl_client.ask("dev0 delay any ms=30"), "ok");
        vm.arm_cq();
        w64(&mut vm.c, eq_db(0), 1 << 31 | 2);
        let start = vm.submit(Command::QueryFwInfo);
        assert_eq!(vm.poll_cqe(), None, "not yet");
        let cqe = wait_for("the delayed completion", || vm.poll_cqe());
        assert_eq!((cqe.status, cqe.start), (0, start.into()));
        wait_for("its interrupt", || (take_count(&e0) == 1).then_some(()));
        assert!(vm.eqe_owner(2));

        // Fault injection through the control socket.
        assert_eq!(
            ctl_client.ask("dev0 fail RDMA.QUERY_DEVICE status=0x42"),
            "ok"
        );
        vm.submit(Command::QueryDevice);
        assert_eq!(vm.poll_cqe().unwrap().status, 0x42);
        assert_eq!(
            ctl_client.ask("dev0 query rules"),
            "ok rules=0",
            "the rule was used up"
        );

        // The test page over vfio-user.
        let base = TEST_PAGE_BASE;
        assert_eq!(r32(&mut vm.c, BAR0, base), test_page::MAGIC_VALUE);
        vm.c.region_write(BAR0, base + test_page::MAILBOX, b"query mtu\0")
            .unwrap();
        w32(&mut vm.c, BAR0, base + test_page::EXECUTE, 1);
        assert_eq!(r32(&mut vm.c, BAR0, base + test_page::STATUS), 0);
        let mut reply = [0u8; 9];
        vm.c.region_read(BAR0, base + test_page::REPLY, &mut reply)
            .unwrap();
        assert_eq!(&reply, b"ok mtu=0\0");

        // A disconnect returns the device and its control state to power-on.
        ctl_client.ask("dev0 fail any status=1 count=forever");
        vm.c.shutdown().unwrap();
        drop(vm);
        wait_for("the disconnect", || {
            let st = lock(&state);
            (st.device.admin_queues().is_none() && st.device.fault_rules().is_empty()).then_some(())
        });
        assert_eq!(ctl_client.ask("dev0 query init_done"), "ok init_done=0");
        running.remove_sockets();
        assert!(!ctl.exists() && !sock.exists());
    }

    #[test]
    fn control_socket_requests_and_errors() {
        let dir = TempDir::new("control");
        let socks = [dir.path("dev0.sock"), dir.path("dev1.sock")];
        let ctl = dir.path("control.sock");
        // A stale control socket from a killed run is replaced.
        drop(std::os::unix::net::UnixListener::bind(&ctl).unwrap());
        let specs = [
            spec("dev0", &socks[0], DeviceConfig::default()),
            spec("dev1", &socks[1], DeviceConfig::default()),
        ];
        let running = runner::bind(&specs, Some(&ctl)).unwrap().start().unwrap();
        let mut a = Control::connect(&ctl);
        let mut b = Control::connect(&ctl);
        assert_eq!(a.ask("dev0 stats tx_reqs=5 rx_bytes=0x10"), "ok");
        assert_eq!(
            b.ask("dev0 query stats"),
            "ok tx_reqs=5 tx_packets=0 tx_bytes=0 tx_disable_drop=0 tx_bps_limit_drop=0 \
             tx_pps_limit_drop=0 rx_packets=0 rx_bytes=16 rx_disable_drop=0 \
             rx_bps_limit_drop=0 rx_pps_limit_drop=0"
        );
        assert_eq!(
            b.ask("dev1 query stats").split(' ').nth(1),
            Some("tx_reqs=0")
        );
        assert_eq!(a.ask("  dev1   query   eqs  "), "ok eqs=");
        assert_eq!(a.ask("dev1 refuse-init"), "ok");
        assert!(a
            .ask("dev2 query all")
            .starts_with("error: unknown device \"dev2\""));
        assert!(a.ask("").starts_with("error: empty request"));
        assert!(a.ask("dev0").starts_with("error: empty command"));
        assert!(a
            .ask("dev0 frobnicate")
            .starts_with("error: unknown command"));
        assert!(a
            .ask("dev0 ceq eqn=1 cqn=1")
            .starts_with("error: ceq: device not initialized"));
        assert!(a
            .ask("dev0 fail any")
            .starts_with("error: fail: status= is required"));
        // The refused INIT seen through vfio-user.
        let mut c1 = Client::new(&socks[1]).unwrap();
        assert_eq!(init(&mut c1), 0);
        assert_eq!(a.ask("dev1 clear"), "ok");
        assert_eq!(init(&mut c1), DEV_STATUS_INIT_DONE);
        // An over-long request gets an error; the connection goes on.
        let long = format!("dev0 query {}", "x".repeat(10 * control::MAX_LINE));
        assert!(b.ask(&long).starts_with("error: request longer than"));
        assert_eq!(b.ask("dev0 query dbs"), "ok dbs=0");
        assert_eq!(
            b.ask("\u{ff}"),
            "error: unknown device \"\u{ff}\" (expected dev0, dev1)"
        );
        // Direct execution, as the socket does it.
        let targets = [control::Target {
            name: "dev0".into(),
            state: running.state(0).unwrap(),
            timer: running.timer(0).unwrap(),
        }];
        assert_eq!(control::execute("dev0 query dbs", &targets), "ok dbs=0");
        running.remove_sockets();
        assert!(!ctl.exists());
    }
}
