// SPDX-License-Identifier: GPL-2.0

//! Command-line parsing (hand-written; the grammar is small).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fmt;
use std::ops::RangeInclusive;
use std::path::PathBuf;

use erdma_model::caps;
use erdma_model::control::{self, ControlCommand};
use erdma_model::{DeviceConfig, Protocol};

/// Usage text printed by `--help`.
pub const USAGE: &str = "\
Usage: erdma-emu [--log-level LEVEL] [--control PATH] [--fault devN:COMMAND ...]
                 --device socket=PATH,mac=MAC[,KEY=VALUE...] [--device ...]

Serves models of Alibaba's Elastic RDMA Adapter (eRDMA, PCI 1ded:107f) to QEMU over vfio-user,
one UNIX socket per device (QEMU: -device vfio-user-pci). Devices are named dev0, dev1, ... in
command-line order. All devices share one in-process fabric: RoCEv2 RC QPs on any two of them
(or on one) talk to each other by GID and QPN.

Options:
  --device SPEC       add a device; SPEC is a comma-separated list of key=value:
                        socket=PATH      vfio-user socket to listen on (required)
                        mac=MAC          permanent MAC address, e.g. 52:54:00:12:34:56
                                         (required); the guest needs a NIC with the same MAC
                        proto=P          roce (default) or iwarp: the DEV_PROTO register
                        version=N        VERSION register (default 1; 0 models a non-functional
                                         function that drivers must refuse)
                        revision=N       PCI revision ID, reported as hw_ver (default 1)
                      capabilities (QUERY_DEVICE / QUERY_FW_INFO); log2 values:
                        qp_blocks=N      1..4095: max_qp = 1024*N (default 4)
                        max_cqe=L        1..22: CQEs per CQ (default 22)
                        max_mr_size=L    12..63: MR size in bytes (default 40)
                        max_recv_wr=L    1..16: RQ depth (default 13)
                        max_ah=L         0..24: address handles (default 16)
                        max_mw=L         0..24: memory windows (default 0)
                        max_gid=L        0..15: GID table entries (default 4)
                        atomic=on|off    ATOMIC capability (default on)
                        mtt_va=on|off    MTT_VA capability (default on)
                        extend_db=on|off EXTEND_DB capability, ALLOC_DB/FREE_DB (default on)
                        cc=N             0..4: default congestion control (default 0, NewReno)
                        local_dma_lkey=N reserved local DMA lkey (default 0xf0000000)
                        fw_version=N     QUERY_FW_INFO version (default 0x10000)
                      testing:
                        test_page=on|off the control language through BAR0 0x3ff000
                                         (default off)
                        fault=COMMAND    a control command applied at power-on and after each
                                         client disconnect (fail, delay, refuse-init, stats);
                                         may be repeated
                      N is decimal or 0x-prefixed hexadecimal.
  --fault devN:COMMAND  same as fault=COMMAND in dev N's --device (may be repeated)
  --control PATH      serve the control socket at PATH: one request line \"devN COMMAND\", one
                      reply line \"ok ...\" or \"error: ...\" (see README.md); e.g.
                      \"dev0 query qps\", \"dev0 query objects\"
  --log-level LEVEL   off, error, warn, info, debug or trace (default: $RUST_LOG if set,
                      otherwise info). Logs go to stderr, prefixed by the device name.
  -h, --help          print this help and exit
  -V, --version       print the version and exit

Once every socket listens, prints \"erdma-emu: ready, N device(s)\" on stdout. A device is reset to
its power-on state whenever its client disconnects, and then waits for the next client.
SIGTERM or SIGINT removes the sockets and exits with status 0.
";

/// A bad command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliError(pub String);

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CliError {}

/// One `--device`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    /// `dev0`, `dev1`, ... in command-line order.
    pub name: String,
    /// Socket to listen on.
    pub socket: PathBuf,
    /// Model configuration.
    pub config: DeviceConfig,
}

/// What the command line asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Serve the devices.
    Run {
        /// `--log-level`, if given.
        log_level: Option<String>,
        /// The devices, in order.
        devices: Vec<DeviceSpec>,
        /// `--control`, if given.
        control: Option<PathBuf>,
    },
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// Log levels accepted by `--log-level`.
pub const LOG_LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Parses the arguments (without the program name).
pub fn parse<I>(args: I) -> Result<Command, CliError>
where
    I: IntoIterator<Item = OsString>,
{
    let mut args = args.into_iter();
    let mut log_level = None;
    let mut control = None;
    let mut faults: Vec<String> = Vec::new();
    let mut devices = Vec::new();
    while let Some(arg) = args.next() {
        let arg = arg
            .into_string()
            .map_err(|a| CliError(format!("argument {a:?} is not valid UTF-8")))?;
        let (opt, inline) = match arg.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o.to_string(), Some(v.to_string())),
            _ => (arg, None),
        };
        let mut value = |name: &str| -> Result<String, CliError> {
            match inline.clone() {
                Some(v) => Ok(v),
                None => args
                    .next()
                    .ok_or_else(|| CliError(format!("{name} needs a value")))?
                    .into_string()
                    .map_err(|a| CliError(format!("argument {a:?} is not valid UTF-8"))),
            }
        };
        match opt.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "--log-level" => {
                let level = value("--log-level")?.to_ascii_lowercase();
                if !LOG_LEVELS.contains(&level.as_str()) {
                    return Err(CliError(format!(
                        "--log-level: unknown level {level:?} (expected one of {})",
                        LOG_LEVELS.join(", ")
                    )));
                }
                log_level = Some(level);
            }
            "--device" => {
                let name = format!("dev{}", devices.len());
                let spec = parse_device(&name, &value("--device")?)
                    .map_err(|e| CliError(format!("--device ({name}): {e}")))?;
                devices.push(spec);
            }
            "--control" => {
                let path = value("--control")?;
                if path.is_empty() {
                    return Err(CliError("--control needs a path".into()));
                }
                if control.replace(PathBuf::from(path)).is_some() {
                    return Err(CliError("--control given twice".into()));
                }
            }
            "--fault" => faults.push(value("--fault")?),
            other => return Err(CliError(format!("unknown argument {other:?}"))),
        }
    }
    if devices.is_empty() {
        return Err(CliError("at least one --device is required".into()));
    }
    for f in faults {
        let (dev, cmd) = f
            .split_once(':')
            .ok_or_else(|| CliError(format!("--fault {f:?}: expected devN:COMMAND")))?;
        let spec = devices
            .iter_mut()
            .find(|d| d.name == dev)
            .ok_or_else(|| CliError(format!("--fault {f:?}: there is no device {dev:?}")))?;
        let cmd =
            parse_startup_command(cmd).map_err(|e| CliError(format!("--fault {f:?}: {e}")))?;
        spec.config.startup.push(cmd);
    }
    let mut sockets = HashSet::new();
    for path in devices.iter().map(|d| &d.socket).chain(control.as_ref()) {
        if !sockets.insert(path) {
            return Err(CliError(format!(
                "socket {} is given more than once",
                path.display()
            )));
        }
    }
    Ok(Command::Run {
        log_level,
        devices,
        control,
    })
}

/// Parses a control command allowed on the command line.
fn parse_startup_command(s: &str) -> Result<ControlCommand, String> {
    let cmd = control::parse(s)?;
    if !cmd.allowed_at_startup() {
        return Err(format!(
            "{:?} cannot be given at start-up (only fail, delay, refuse-init and stats)",
            s.trim()
        ));
    }
    Ok(cmd)
}

/// Keys of `--device`, for the error message.
const DEVICE_KEYS: &str = "socket, mac, proto, version, revision, qp_blocks, max_cqe, \
    max_mr_size, max_recv_wr, max_ah, max_mw, max_gid, atomic, mtt_va, extend_db, cc, \
    local_dma_lkey, fw_version, test_page, fault";

/// Parses a number and checks it against `range`.
fn ranged(key: &str, value: &str, range: RangeInclusive<u64>) -> Result<u64, String> {
    let n = parse_number(value)?;
    if !range.contains(&n) {
        return Err(format!(
            "{key}={value} is out of range {}..={}",
            range.start(),
            range.end()
        ));
    }
    Ok(n)
}

/// Parses `on` or `off`.
fn on_off(key: &str, value: &str) -> Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "yes" | "true" | "1" => Ok(true),
        "off" | "no" | "false" | "0" => Ok(false),
        _ => Err(format!("{key}={value}: expected on or off")),
    }
}

/// Parses `socket=PATH,mac=MAC[,KEY=VALUE...]`.
fn parse_device(name: &str, spec: &str) -> Result<DeviceSpec, String> {
    let mut socket = None;
    let mut mac = None;
    let mut config = DeviceConfig::default();
    let mut seen = HashSet::new();
    let u32_range = 0..=u64::from(u32::MAX);
    for item in spec.split(',') {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not key=value"))?;
        if value.is_empty() {
            return Err(format!("{key}= needs a value"));
        }
        if key != "fault" && !seen.insert(key) {
            return Err(format!("{key}= given twice"));
        }
        let caps = &mut config.caps;
        match key {
            "socket" => socket = Some(PathBuf::from(value)),
            "mac" => mac = Some(parse_mac(value)?),
            "proto" => config.protocol = value.parse::<Protocol>()?,
            "version" => {
                config.version = u32::try_from(parse_number(value)?)
                    .map_err(|_| format!("version={value} does not fit in 32 bits"))?;
            }
            "revision" => {
                config.revision = u8::try_from(parse_number(value)?)
                    .map_err(|_| format!("revision={value} does not fit in 8 bits"))?;
            }
            // The ranges bound the values, so the narrowing casts below are exact.
            "qp_blocks" => caps.qp_blocks = ranged(key, value, caps::QP_BLOCKS_RANGE)? as u16,
            "max_cqe" => caps.max_cqe_log2 = ranged(key, value, caps::MAX_CQE_RANGE)? as u8,
            "max_mr_size" => {
                caps.max_mr_size_log2 = ranged(key, value, caps::MAX_MR_SIZE_RANGE)? as u8
            }
            "max_recv_wr" => {
                caps.max_recv_wr_log2 = ranged(key, value, caps::MAX_RECV_WR_RANGE)? as u8
            }
            "max_ah" => caps.max_ah_log2 = ranged(key, value, caps::MAX_AH_RANGE)? as u8,
            "max_mw" => caps.max_mw_log2 = ranged(key, value, caps::MAX_MW_RANGE)? as u8,
            "max_gid" => caps.max_gid_log2 = ranged(key, value, caps::MAX_GID_RANGE)? as u8,
            "atomic" => caps.atomic = on_off(key, value)?,
            "mtt_va" => caps.mtt_va = on_off(key, value)?,
            "extend_db" => caps.extend_db = on_off(key, value)?,
            "cc" => caps.cc = ranged(key, value, caps::CC_RANGE)? as u8,
            "local_dma_lkey" => caps.local_dma_lkey = ranged(key, value, u32_range.clone())? as u32,
            "fw_version" => caps.fw_version = ranged(key, value, u32_range.clone())? as u32,
            "test_page" => config.test_page = on_off(key, value)?,
            "fault" => config
                .startup
                .push(parse_startup_command(value).map_err(|e| format!("fault={value}: {e}"))?),
            _ => return Err(format!("unknown key {key:?} (expected {DEVICE_KEYS})")),
        }
    }
    config.caps.check()?;
    config.mac = mac.ok_or("mac= is required")?;
    Ok(DeviceSpec {
        name: name.to_string(),
        socket: socket.ok_or("socket= is required")?,
        config,
    })
}

/// Parses a decimal or `0x`-prefixed hexadecimal number.
pub fn parse_number(s: &str) -> Result<u64, String> {
    control::parse_number(s)
}

/// Parses a unicast MAC address `xx:xx:xx:xx:xx:xx`.
pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let bad = || format!("mac={s} is not a MAC address like 52:54:00:12:34:56");
    let mut mac = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut mac {
        let part = parts.next().ok_or_else(bad)?;
        if part.len() != 2 {
            return Err(bad());
        }
        *b = u8::from_str_radix(part, 16).map_err(|_| bad())?;
    }
    if parts.next().is_some() {
        return Err(bad());
    }
    if mac[0] & 1 != 0 {
        return Err(format!("mac={s} is a multicast address"));
    }
    if mac == [0; 6] {
        return Err(format!("mac={s} is the all-zero address"));
    }
    Ok(mac)
}

/// Formats a MAC address as `xx:xx:xx:xx:xx:xx`.
pub fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Command, CliError> {
        parse(args.iter().map(OsString::from))
    }

    fn devices(args: &[&str]) -> Vec<DeviceSpec> {
        match run(args).unwrap() {
            Command::Run { devices, .. } => devices,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn full_device_spec() {
        let d = devices(&[
            "--device",
            "socket=/tmp/a.sock,mac=02:00:00:aa:bb:cc,proto=iwarp,version=0x10,revision=7",
        ]);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].name, "dev0");
        assert_eq!(d[0].socket, PathBuf::from("/tmp/a.sock"));
        assert_eq!(d[0].config.mac, [2, 0, 0, 0xaa, 0xbb, 0xcc]);
        assert_eq!(d[0].config.protocol, Protocol::Iwarp);
        assert_eq!(d[0].config.version, 16);
        assert_eq!(d[0].config.revision, 7);
        assert_eq!(d[0].config.grp_num, 4);
    }

    #[test]
    fn defaults_and_several_devices() {
        let c = run(&[
            "--log-level",
            "DEBUG",
            "--device=socket=a,mac=52:54:00:12:34:56",
            "--device",
            "mac=52:54:00:12:34:57,socket=b,version=0",
        ])
        .unwrap();
        let Command::Run {
            log_level,
            devices,
            control,
        } = c
        else {
            panic!("not run")
        };
        assert_eq!(control, None);
        assert_eq!(log_level.as_deref(), Some("debug"));
        assert_eq!(devices[0].config, DeviceConfig::default());
        assert_eq!(devices[1].name, "dev1");
        assert_eq!(devices[1].config.version, 0);
        assert_eq!(devices[1].config.protocol, Protocol::RoceV2);
    }

    #[test]
    fn capabilities_and_testing_keys() {
        let d = devices(&[
            "--device",
            "socket=a,mac=02:00:00:00:00:01,qp_blocks=0xfff,max_cqe=10,max_mr_size=63,\
             max_recv_wr=16,max_ah=0,max_mw=24,max_gid=15,atomic=off,mtt_va=no,extend_db=0,\
             cc=4,local_dma_lkey=0x100,fw_version=0xffffffff,test_page=on,\
             fault=fail COMMON.CREATE_EQ status=2,fault=refuse-init",
        ]);
        let c = &d[0].config;
        let want = erdma_model::Caps {
            qp_blocks: 4095,
            max_cqe_log2: 10,
            max_mr_size_log2: 63,
            max_recv_wr_log2: 16,
            max_ah_log2: 0,
            max_mw_log2: 24,
            max_gid_log2: 15,
            atomic: false,
            mtt_va: false,
            extend_db: false,
            cc: 4,
            local_dma_lkey: 0x100,
            fw_version: u32::MAX,
        };
        assert_eq!(c.caps, want);
        assert!(c.test_page);
        assert_eq!(
            c.startup,
            [
                control::parse("fail COMMON.CREATE_EQ status=2").unwrap(),
                ControlCommand::RefuseInit(true)
            ]
        );
        // Defaults.
        let d = devices(&["--device", "socket=a,mac=02:00:00:00:00:01"]);
        assert_eq!(d[0].config.caps, erdma_model::Caps::default());
        assert!(!d[0].config.test_page);
    }

    #[test]
    fn control_and_fault_options() {
        let c = run(&[
            "--fault",
            "dev1:delay any ms=5",
            "--control=/tmp/ctl.sock",
            "--device",
            "socket=a,mac=02:00:00:00:00:01",
            "--device",
            "socket=b,mac=02:00:00:00:00:02,fault=stats tx_reqs=1",
            "--fault",
            "dev1:fail 1.0 status=3 count=forever",
        ])
        .unwrap();
        let Command::Run {
            devices, control, ..
        } = c
        else {
            panic!("not run")
        };
        assert_eq!(control, Some(PathBuf::from("/tmp/ctl.sock")));
        assert!(devices[0].config.startup.is_empty());
        let s = &devices[1].config.startup;
        assert_eq!(s.len(), 3);
        assert!(matches!(s[0], ControlCommand::Stats(_)));
        assert!(matches!(s[1], ControlCommand::Rule(_)));
    }

    #[test]
    fn help_and_version() {
        assert_eq!(run(&["--help"]), Ok(Command::Help));
        assert_eq!(run(&["--device", "x", "-h"]).ok(), None, "bad device first");
        assert_eq!(run(&["-V"]), Ok(Command::Version));
    }

    #[test]
    fn errors() {
        let cases: &[&[&str]] = &[
            &[],
            &[
                "--log-level",
                "loud",
                "--device",
                "socket=a,mac=02:00:00:00:00:01",
            ],
            &["--device"],
            &["--device", "socket=a"],
            &["--device", "mac=02:00:00:00:00:01"],
            &["--device", "socket=a,mac=02:00:00:00:00"],
            &["--device", "socket=a,mac=02:00:00:00:00:01:02"],
            &["--device", "socket=a,mac=02:00:00:00:00:zz"],
            &["--device", "socket=a,mac=01:00:5e:00:00:01"],
            &["--device", "socket=a,mac=00:00:00:00:00:00"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,proto=ib"],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01,version=0x1_0000_0000",
            ],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01,version=4294967296",
            ],
            &["--device", "socket=a,mac=02:00:00:00:00:01,revision=256"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,revision=-1"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,colour=red"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,socket=b"],
            &["--device", "socket=,mac=02:00:00:00:00:01"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,"],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01",
                "--device",
                "socket=a,mac=02:00:00:00:00:02",
            ],
            &["--frobnicate"],
            &["stray"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,qp_blocks=0"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,qp_blocks=4096"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,max_cqe=23"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,max_mr_size=11"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,max_mr_size=64"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,max_recv_wr=0"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,max_ah=25"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,max_mw=x"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,max_gid=16"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,atomic=maybe"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,cc=5"],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01,local_dma_lkey=0x100000000",
            ],
            &["--device", "socket=a,mac=02:00:00:00:00:01,fw_version=-1"],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01,test_page=1,test_page=0",
            ],
            &["--device", "socket=a,mac=02:00:00:00:00:01,fault=bogus"],
            &["--device", "socket=a,mac=02:00:00:00:00:01,fault=query all"],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01,fault=ceq eqn=1 cqn=1",
            ],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01",
                "--fault",
                "dev1:clear",
            ],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01",
                "--fault",
                "dev0:clear",
            ],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01",
                "--fault",
                "dev0",
            ],
            &["--device", "socket=a,mac=02:00:00:00:00:01", "--fault"],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01",
                "--control",
                "a",
            ],
            &["--device", "socket=a,mac=02:00:00:00:00:01", "--control="],
            &[
                "--device",
                "socket=a,mac=02:00:00:00:00:01",
                "--control",
                "b",
                "--control",
                "c",
            ],
        ];
        for args in cases {
            let e = run(args).unwrap_err();
            assert!(!e.0.is_empty(), "{args:?}");
        }
    }

    #[test]
    fn numbers_and_macs() {
        assert_eq!(parse_number("42"), Ok(42));
        assert_eq!(parse_number("0x2A"), Ok(42));
        assert_eq!(parse_number("0X2a"), Ok(42));
        assert!(parse_number("0x").is_err());
        assert!(parse_number("").is_err());
        let mac = parse_mac("52:54:00:AB:cd:ef").unwrap();
        assert_eq!(format_mac(&mac), "52:54:00:ab:cd:ef");
    }
}
