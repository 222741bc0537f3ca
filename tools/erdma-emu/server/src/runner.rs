// SPDX-License-Identifier: GPL-2.0

//! Serving several devices from one process: bind every socket first, then one thread per device
//! that serves one client at a time and resets the device when the client goes away.

use std::fs;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use vfio_user::Server;

use crate::backend::{self, lock, Backend, DeviceState, SharedState};
use crate::cli::{format_mac, DeviceSpec};
use crate::logging;

/// Devices whose sockets are bound and listening, not yet served.
pub struct Listening {
    devices: Vec<(DeviceSpec, Server)>,
}

/// Binds the socket of every device. On failure, sockets bound so far are removed again.
pub fn bind(specs: &[DeviceSpec]) -> Result<Listening, String> {
    let mut devices = Vec::with_capacity(specs.len());
    for spec in specs {
        let fail = |e: String| format!("{}: socket {}: {e}", spec.name, spec.socket.display());
        clear_stale_socket(&spec.socket).map_err(fail)?;
        // Dropping a `Server` removes its socket file, so an early return cleans up.
        let server = Server::new(&spec.socket, true, backend::irqs(), backend::regions())
            .map_err(|e| fail(e.to_string()))?;
        devices.push((spec.clone(), server));
    }
    Ok(Listening { devices })
}

/// Makes `path` free for binding: removes a socket file nobody listens on (left over by a killed
/// process); refuses a live socket or any other kind of file.
fn clear_stale_socket(path: &Path) -> Result<(), String> {
    let md = match fs::symlink_metadata(path) {
        Ok(md) => md,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.to_string()),
    };
    if !md.file_type().is_socket() {
        return Err("exists and is not a socket".into());
    }
    match UnixStream::connect(path) {
        Ok(_) => Err("another process is listening on it".into()),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            fs::remove_file(path).map_err(|e| format!("cannot remove stale socket: {e}"))?;
            log::info!("removed stale socket {}", path.display());
            Ok(())
        }
        Err(e) => Err(format!("exists and cannot be probed: {e}")),
    }
}

impl Listening {
    /// Number of devices.
    pub fn len(&self) -> usize {
        self.devices.len()
    }

    /// Whether there are no devices.
    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Starts one server thread per device.
    pub fn start(self) -> io::Result<Running> {
        let mut devices = Vec::with_capacity(self.devices.len());
        for (spec, server) in self.devices {
            let state: SharedState = Arc::new(Mutex::new(DeviceState::new(spec.config.clone())));
            let thread = thread::Builder::new().name(spec.name.clone()).spawn({
                let state = state.clone();
                let spec = spec.clone();
                move || serve(&spec, &server, &state)
            })?;
            devices.push(RunningDevice {
                name: spec.name,
                socket: spec.socket,
                state,
                _thread: thread,
            });
        }
        Ok(Running { devices })
    }
}

/// The server loop of one device: one client at a time, forever.
fn serve(spec: &DeviceSpec, server: &Server, state: &SharedState) {
    logging::set_device_name(&spec.name);
    let c = &spec.config;
    log::info!(
        "listening on {}: MAC {}, {}, VERSION {:#x}, revision {:#x}",
        spec.socket.display(),
        format_mac(&c.mac),
        c.protocol,
        c.version,
        c.revision
    );
    loop {
        let result = server.run(&mut Backend::new(state.clone()));
        lock(state).disconnect();
        match result {
            Ok(()) => log::info!("client disconnected; device reset to power-on"),
            Err(e) => {
                log::error!("connection failed: {e}; device reset to power-on");
                // Do not spin if accepting itself keeps failing.
                thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// A device being served.
pub struct RunningDevice {
    /// `dev0`, `dev1`, ...
    pub name: String,
    /// Its socket.
    pub socket: PathBuf,
    state: SharedState,
    _thread: JoinHandle<()>,
}

/// The devices being served. The server threads run until the process exits.
pub struct Running {
    devices: Vec<RunningDevice>,
}

impl Running {
    /// The devices, in command-line order.
    pub fn devices(&self) -> &[RunningDevice] {
        &self.devices
    }

    /// The socket paths.
    pub fn sockets(&self) -> Vec<PathBuf> {
        self.devices.iter().map(|d| d.socket.clone()).collect()
    }

    /// The state of device `i`.
    pub fn state(&self, i: usize) -> Option<SharedState> {
        self.devices.get(i).map(|d| d.state.clone())
    }

    /// Removes the socket files (at shutdown; the threads keep running until the process exits).
    pub fn remove_sockets(&self) {
        remove_sockets(&self.sockets());
    }
}

/// Removes socket files, logging failures other than "already gone".
pub fn remove_sockets(paths: &[PathBuf]) {
    for p in paths {
        match fs::remove_file(p) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => log::error!("cannot remove {}: {e}", p.display()),
        }
    }
}
