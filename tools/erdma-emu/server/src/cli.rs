// SPDX-License-Identifier: GPL-2.0

//! Command-line parsing (hand-written; the grammar is small).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use erdma_model::{DeviceConfig, Protocol};

/// Usage text printed by `--help`.
pub const USAGE: &str = "\
Usage: erdma-emu [--log-level LEVEL] --device socket=PATH,mac=MAC[,proto=roce|iwarp][,version=N][,revision=N] [--device ...]

Serves models of Alibaba's Elastic RDMA Adapter (eRDMA, PCI 1ded:107f) to QEMU over vfio-user,
one UNIX socket per device (QEMU: -device vfio-user-pci). Devices are named dev0, dev1, ... in
command-line order.

Options:
  --device SPEC       add a device; SPEC is a comma-separated list of key=value:
                        socket=PATH   vfio-user socket to listen on (required)
                        mac=MAC       permanent MAC address, e.g. 52:54:00:12:34:56 (required);
                                      the guest needs a NIC with the same MAC
                        proto=P       roce (default) or iwarp: the DEV_PROTO register
                        version=N     VERSION register (default 1; 0 models a non-functional
                                      function that drivers must refuse)
                        revision=N    PCI revision ID, reported as hw_ver (default 1)
                      N is decimal or 0x-prefixed hexadecimal.
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
            other => return Err(CliError(format!("unknown argument {other:?}"))),
        }
    }
    if devices.is_empty() {
        return Err(CliError("at least one --device is required".into()));
    }
    let mut sockets = HashSet::new();
    for d in &devices {
        if !sockets.insert(&d.socket) {
            return Err(CliError(format!(
                "socket {} is used by more than one device",
                d.socket.display()
            )));
        }
    }
    Ok(Command::Run { log_level, devices })
}

/// Parses `socket=PATH,mac=MAC[,proto=P][,version=N][,revision=N]`.
fn parse_device(name: &str, spec: &str) -> Result<DeviceSpec, String> {
    let mut socket = None;
    let mut mac = None;
    let mut config = DeviceConfig::default();
    let mut seen = HashSet::new();
    for item in spec.split(',') {
        let (key, value) = item
            .split_once('=')
            .ok_or_else(|| format!("{item:?} is not key=value"))?;
        if value.is_empty() {
            return Err(format!("{key}= needs a value"));
        }
        if !seen.insert(key) {
            return Err(format!("{key}= given twice"));
        }
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
            _ => {
                return Err(format!(
                    "unknown key {key:?} (expected socket, mac, proto, version, revision)"
                ))
            }
        }
    }
    config.mac = mac.ok_or("mac= is required")?;
    Ok(DeviceSpec {
        name: name.to_string(),
        socket: socket.ok_or("socket= is required")?,
        config,
    })
}

/// Parses a decimal or `0x`-prefixed hexadecimal number.
pub fn parse_number(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse::<u64>(),
    };
    r.map_err(|_| format!("{s:?} is not a number (decimal or 0x-hex)"))
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
        let Command::Run { log_level, devices } = c else {
            panic!("not run")
        };
        assert_eq!(log_level.as_deref(), Some("debug"));
        assert_eq!(devices[0].config, DeviceConfig::default());
        assert_eq!(devices[1].name, "dev1");
        assert_eq!(devices[1].config.version, 0);
        assert_eq!(devices[1].config.protocol, Protocol::RoceV2);
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
