// SPDX-License-Identifier: GPL-2.0

//! `erdma-emu`: serves eRDMA device models to QEMU over vfio-user. See `--help`.

#![warn(clippy::undocumented_unsafe_blocks)]

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use erdma_emu::cli::{self, format_mac, Command, DeviceSpec};
use erdma_emu::logging;
use erdma_emu::runner::{self, Running};
use erdma_emu::signals::{self, TerminationSignals};
use erdma_emu::sockets::remove_sockets;

/// Exit status for bad arguments.
const EXIT_USAGE: u8 = 2;
/// Exit status for failures while starting (socket in use, ...).
const EXIT_FAILURE: u8 = 1;
/// Exit status after an internal error (a panic in the model or the server).
const EXIT_INTERNAL: i32 = 70;

fn main() -> ExitCode {
    let (log_level, devices, control) = match cli::parse(std::env::args_os().skip(1)) {
        Ok(Command::Run {
            log_level,
            devices,
            control,
        }) => (log_level, devices, control),
        Ok(Command::Help) => {
            print!("{}", cli::USAGE);
            return ExitCode::SUCCESS;
        }
        Ok(Command::Version) => {
            println!("erdma-emu {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("erdma-emu: error: {e}\nTry 'erdma-emu --help' for more information.");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    logging::init(log_level.as_deref());
    match run(&devices, control.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

fn run(devices: &[DeviceSpec], control: Option<&Path>) -> Result<(), String> {
    // Before any thread exists, so that all threads inherit the blocked mask.
    let signals = TerminationSignals::block().map_err(|e| format!("cannot block signals: {e}"))?;
    warn_about_config(devices);
    let listening = runner::bind(devices, control)?;
    let running = listening
        .start()
        .map_err(|e| format!("cannot start device threads: {e}"))?;
    exit_on_panic(&running);

    let mut out = std::io::stdout().lock();
    if let Err(e) =
        writeln!(out, "erdma-emu: ready, {} device(s)", devices.len()).and_then(|()| out.flush())
    {
        log::warn!("cannot print the ready line: {e}");
    }
    drop(out);

    let result = signals.wait();
    running.remove_sockets();
    match result {
        Ok(sig) => {
            log::info!("{}: sockets removed, exiting", signals::name(sig));
            Ok(())
        }
        Err(e) => Err(format!("waiting for signals failed: {e}")),
    }
}

/// Warns about configurations that are legal but probably not what was meant.
fn warn_about_config(devices: &[DeviceSpec]) {
    let mut macs: HashMap<[u8; 6], &str> = HashMap::new();
    for d in devices {
        if d.config.version == 0 {
            log::warn!(
                "{}: VERSION=0 models a non-functional function; drivers must refuse it",
                d.name
            );
        }
        for cmd in &d.config.startup {
            log::info!("{}: start-up command \"{cmd}\"", d.name);
        }
        if let Some(other) = macs.insert(d.config.mac, &d.name) {
            log::warn!(
                "{} and {other} have the same MAC {}",
                d.name,
                format_mac(&d.config.mac)
            );
        }
    }
}

/// A panic is a bug in the model or the server: report it, remove the sockets and exit rather than
/// leave a device thread dead and its VM hanging.
fn exit_on_panic(running: &Running) {
    let sockets = running.sockets();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        log::error!("internal error (panic), exiting with status {EXIT_INTERNAL}");
        remove_sockets(&sockets);
        std::process::exit(EXIT_INTERNAL);
    }));
}
