// SPDX-License-Identifier: GPL-2.0

//! Serving several devices from one process: bind every socket first, then per device one thread
//! that serves one client at a time (resetting the device when the client goes away) and one
//! timer thread for its delayed work; plus, optionally, the control socket's thread.

use std::io;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use erdma_model::fabric::Fabric;
use vfio_user::Server;

use crate::backend::{self, Backend};
use crate::cli::{format_mac, DeviceSpec};
use crate::control;
use crate::logging;
use crate::sockets::{clear_stale_socket, remove_sockets};
use crate::state::{lock, DeviceState, SharedState};
use crate::timer::{self, Timer};

/// Devices whose sockets are bound and listening, not yet served.
pub struct Listening {
    devices: Vec<(DeviceSpec, Server)>,
    control: Option<(PathBuf, UnixListener)>,
}

/// Binds the socket of every device and the control socket, if any. On failure, sockets bound
/// so far are removed again.
pub fn bind(specs: &[DeviceSpec], control_path: Option<&Path>) -> Result<Listening, String> {
    let mut devices = Vec::with_capacity(specs.len());
    for spec in specs {
        let fail = |e: String| format!("{}: socket {}: {e}", spec.name, spec.socket.display());
        clear_stale_socket(&spec.socket).map_err(fail)?;
        // Dropping a `Server` removes its socket file, so an early return cleans up.
        let server = Server::new(&spec.socket, true, backend::irqs(), backend::regions())
            .map_err(|e| fail(e.to_string()))?;
        devices.push((spec.clone(), server));
    }
    let control = match control_path {
        Some(path) => {
            let listener = control::bind(path)
                .map_err(|e| format!("control socket {}: {e}", path.display()))?;
            Some((path.to_path_buf(), listener))
        }
        None => None,
    };
    Ok(Listening { devices, control })
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

    /// Starts one server thread and one timer thread per device, and the control socket's
    /// thread. Returns once every server thread has logged that it listens (so the ready line
    /// comes after those, however late the host runs the threads).
    pub fn start(self) -> io::Result<Running> {
        let mut devices = Vec::with_capacity(self.devices.len());
        let (listening, listened) = mpsc::channel();
        // One network for every device of the process; a device's timer thread drains its inbox.
        let fabric = Fabric::new();
        for (spec, server) in self.devices {
            let timer = Timer::new();
            let mut st = DeviceState::new(spec.config.clone());
            st.device.attach_fabric(&fabric, timer.clone());
            let state: SharedState = Arc::new(Mutex::new(st));
            let thread = thread::Builder::new().name(spec.name.clone()).spawn({
                let (state, timer, spec) = (state.clone(), timer.clone(), spec.clone());
                let listening = listening.clone();
                move || serve(&spec, &server, &state, &timer, &listening)
            })?;
            thread::Builder::new()
                .name(format!("{}-timer", spec.name))
                .spawn({
                    let (state, timer, name) = (state.clone(), timer.clone(), spec.name.clone());
                    move || {
                        logging::set_device_name(&name);
                        timer::run(&state, &timer)
                    }
                })?;
            devices.push(RunningDevice {
                name: spec.name,
                socket: spec.socket,
                state,
                timer,
                _thread: thread,
            });
        }
        // Every server thread has said it listens (or is gone: its sender went with it).
        drop(listening);
        for _ in &devices {
            if listened.recv().is_err() {
                break;
            }
        }
        let control = match self.control {
            Some((path, listener)) => {
                let targets: Vec<control::Target> = devices
                    .iter()
                    .map(|d| control::Target {
                        name: d.name.clone(),
                        state: d.state.clone(),
                        timer: d.timer.clone(),
                    })
                    .collect();
                let targets = Arc::new(targets);
                thread::Builder::new()
                    .name("control".into())
                    .spawn(move || control::serve(listener, targets))?;
                log::info!("control socket listening on {}", path.display());
                Some(path)
            }
            None => None,
        };
        Ok(Running { devices, control })
    }
}

/// The server loop of one device: one client at a time, forever. Says on `listening` when it
/// has logged that it listens.
fn serve(
    spec: &DeviceSpec,
    server: &Server,
    state: &SharedState,
    timer: &Arc<Timer>,
    listening: &mpsc::Sender<()>,
) {
    logging::set_device_name(&spec.name);
    let c = &spec.config;
    log::info!(
        "listening on {}: MAC {}, {}, VERSION {:#x}, revision {:#x}, {} QPs, test page {}, \
         {} start-up command(s)",
        spec.socket.display(),
        format_mac(&c.mac),
        c.protocol,
        c.version,
        c.revision,
        c.caps.max_qp(),
        if c.test_page { "on" } else { "off" },
        c.startup.len()
    );
    let _ = listening.send(());
    loop {
        let result = server.run(&mut Backend::new(state.clone(), timer.clone()));
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
    timer: Arc<Timer>,
    _thread: JoinHandle<()>,
}

/// The devices being served. The server threads run until the process exits.
pub struct Running {
    devices: Vec<RunningDevice>,
    control: Option<PathBuf>,
}

impl Running {
    /// The devices, in command-line order.
    pub fn devices(&self) -> &[RunningDevice] {
        &self.devices
    }

    /// The socket paths (devices, then the control socket).
    pub fn sockets(&self) -> Vec<PathBuf> {
        self.devices
            .iter()
            .map(|d| d.socket.clone())
            .chain(self.control.clone())
            .collect()
    }

    /// The state of device `i`.
    pub fn state(&self, i: usize) -> Option<SharedState> {
        self.devices.get(i).map(|d| d.state.clone())
    }

    /// The timer of device `i` (kick it after creating delayed work behind the server's back).
    pub fn timer(&self, i: usize) -> Option<Arc<Timer>> {
        self.devices.get(i).map(|d| d.timer.clone())
    }

    /// Removes the socket files (at shutdown; the threads keep running until the process exits).
    pub fn remove_sockets(&self) {
        remove_sockets(&self.sockets());
    }
}
