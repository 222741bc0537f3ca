// SPDX-License-Identifier: GPL-2.0

//! The `erdma-emu` binary: ready line, serving, clean exit on SIGTERM/SIGINT, usage errors.

use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use vfio_bindings::bindings::vfio::VFIO_PCI_BAR0_REGION_INDEX;
use vfio_user::Client;

const BIN: &str = env!("CARGO_BIN_EXE_erdma-emu");

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("erdma-emu-bin-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Starts the binary and waits for its ready line.
fn start(args: &[String]) -> Child {
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(line) => assert_eq!(line, "erdma-emu: ready, 2 device(s)\n"),
        Err(_) => {
            let _ = child.kill();
            panic!("no ready line within 20 s");
        }
    }
    child
}

fn signal(child: &Child, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: sends a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

fn wait(child: &mut Child) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("did not exit within 10 s of the signal");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr(child: &mut Child) -> String {
    let mut s = String::new();
    child.stderr.take().unwrap().read_to_string(&mut s).unwrap();
    s
}

fn device_args(dir: &std::path::Path) -> (Vec<String>, [PathBuf; 2]) {
    let socks = [dir.join("dev0.sock"), dir.join("dev1.sock")];
    let args = vec![
        "--device".to_string(),
        format!("socket={},mac=52:54:00:12:34:56", socks[0].display()),
        "--device".to_string(),
        format!(
            "socket={},mac=52:54:00:12:34:57,proto=iwarp,version=0x2,revision=5",
            socks[1].display()
        ),
    ];
    (args, socks)
}

#[test]
fn ready_serve_and_sigterm_while_connected() {
    let dir = temp_dir("term");
    let (args, socks) = device_args(&dir);
    let mut child = start(&args);
    assert!(socks.iter().all(|s| s.exists()));

    let mut c = Client::new(&socks[1]).unwrap();
    let mut v = [0u8; 4];
    c.region_read(VFIO_PCI_BAR0_REGION_INDEX, 0x0, &mut v)
        .unwrap();
    assert_eq!(u32::from_le_bytes(v), 2, "VERSION");
    c.region_read(VFIO_PCI_BAR0_REGION_INDEX, 0xc, &mut v)
        .unwrap();
    assert_eq!(u32::from_le_bytes(v), 0, "DEV_PROTO iWARP");

    // The client stays connected while the server is told to stop.
    signal(&child, libc::SIGTERM);
    let status = wait(&mut child);
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert!(socks.iter().all(|s| !s.exists()), "sockets removed");
    let log = stderr(&mut child);
    assert!(log.contains("dev0: ") && log.contains("dev1: "), "{log}");
    assert!(log
        .lines()
        .any(|l| l.starts_with("dev1: ") && l.contains("listening on")));
    assert!(log.contains("SIGTERM"), "{log}");
    drop(c);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigint_while_idle_and_stale_sockets() {
    let dir = temp_dir("int");
    let (args, socks) = device_args(&dir);
    // A stale socket from a killed run does not prevent starting.
    drop(std::os::unix::net::UnixListener::bind(&socks[0]).unwrap());
    let mut child = start(&args);
    signal(&child, libc::SIGINT);
    assert_eq!(wait(&mut child).code(), Some(0));
    assert!(socks.iter().all(|s| !s.exists()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn control_socket_and_start_up_faults() {
    use std::io::Write;
    let dir = temp_dir("ctl");
    let (mut args, socks) = device_args(&dir);
    let ctl = dir.join("control.sock");
    args.extend([
        "--control".to_string(),
        ctl.display().to_string(),
        "--fault".to_string(),
        "dev1:fail any status=3 count=forever".to_string(),
    ]);
    let mut child = start(&args);
    assert!(ctl.exists());
    let stream = std::os::unix::net::UnixStream::connect(&ctl).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut ask = |line: &str| {
        writeln!(&stream, "{line}").unwrap();
        let mut reply = String::new();
        reader.read_line(&mut reply).unwrap();
        reply
    };
    assert_eq!(ask("dev1 query rules"), "ok rules=1\n");
    assert_eq!(ask("dev0 query rules"), "ok rules=0\n");
    assert_eq!(ask("dev0 query init_done"), "ok init_done=0\n");
    assert!(ask("dev9 clear").starts_with("error: unknown device"));
    signal(&child, libc::SIGTERM);
    assert_eq!(wait(&mut child).code(), Some(0));
    assert!(!ctl.exists(), "control socket removed");
    assert!(socks.iter().all(|s| !s.exists()));
    let log = stderr(&mut child);
    assert!(
        log.contains("control: dev1 query rules -> ok rules=1"),
        "{log}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["--device", "socket=/tmp/x.sock"][..],
        &[
            "--device",
            "socket=/tmp/x.sock,mac=52:54:00:12:34:56,proto=ib",
        ][..],
        &["--bogus"][..],
        &[
            "--device",
            "socket=/tmp/x.sock,mac=52:54:00:12:34:56,qp_blocks=0",
        ][..],
        &[
            "--device",
            "socket=/tmp/x.sock,mac=52:54:00:12:34:56",
            "--fault",
            "dev0:fail any",
        ][..],
    ] {
        let out = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("erdma-emu: error: "), "{err}");
        assert!(out.stdout.is_empty());
    }
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("Usage: erdma-emu "));
}

#[test]
fn socket_in_use_exits_1() {
    let dir = temp_dir("busy");
    let sock = dir.join("busy.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let out = Command::new(BIN)
        .args([
            "--device",
            &format!("socket={},mac=52:54:00:12:34:56", sock.display()),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty(), "no ready line");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another process is listening"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
