// SPDX-License-Identifier: GPL-2.0

//! The control socket (`--control PATH`): a UNIX stream socket on which a test harness sends
//! request lines `devN <command>` and gets one reply line for each, `ok ...` or `error: ...`
//! (the command language is [`erdma_model::control`]). Several clients may connect at once; each
//! connection is served by its own thread. A request longer than [`MAX_LINE`] bytes is discarded
//! with an error reply.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;
use std::thread;

use erdma_model::{control, Io};

use crate::sockets::clear_stale_socket;
use crate::state::{lock, SharedState};
use crate::timer::Timer;

/// Longest request line accepted (bytes, without the newline).
pub const MAX_LINE: usize = 4096;

/// A device the control socket can address.
#[derive(Clone)]
pub struct Target {
    /// `dev0`, `dev1`, ...
    pub name: String,
    /// Its state.
    pub state: SharedState,
    /// Its timer thread.
    pub timer: Arc<Timer>,
}

/// Binds the control socket at `path` (a stale socket file is removed first).
pub fn bind(path: &Path) -> Result<UnixListener, String> {
    clear_stale_socket(path)?;
    UnixListener::bind(path).map_err(|e| e.to_string())
}

/// Accepts connections forever, one thread per connection.
pub fn serve(listener: UnixListener, targets: Arc<Vec<Target>>) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let targets = targets.clone();
                let spawned = thread::Builder::new()
                    .name("control".into())
                    .spawn(move || {
                        if let Err(e) = handle(stream, &targets) {
                            log::debug!("control connection ended: {e}");
                        }
                    });
                if let Err(e) = spawned {
                    log::error!("control socket: cannot start a thread: {e}");
                }
            }
            Err(e) => {
                log::error!("control socket: accept failed: {e}");
                thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// Serves one connection: a reply line for every request line.
fn handle(stream: UnixStream, targets: &[Target]) -> io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    loop {
        let mut buf = Vec::new();
        let n = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(());
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
            if buf.last() == Some(&b'\r') {
                buf.pop();
            }
        } else if buf.len() > MAX_LINE {
            skip_line(&mut reader)?;
            writeln!(writer, "error: request longer than {MAX_LINE} bytes")?;
            continue;
        }
        let reply = match std::str::from_utf8(&buf) {
            Ok(line) => execute(line, targets),
            Err(_) => "error: request is not UTF-8".to_string(),
        };
        writeln!(writer, "{reply}")?;
    }
}

/// Discards input up to and including the next newline (or to the end of the stream).
fn skip_line(reader: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                reader.consume(n);
            }
        }
    }
}

/// Runs one request line `devN <command>` and returns the reply line (without newline).
pub fn execute(line: &str, targets: &[Target]) -> String {
    let line = line.trim();
    let (dev, command) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    if dev.is_empty() {
        return "error: empty request (expected \"devN <command>\")".into();
    }
    let Some(target) = targets.iter().find(|t| t.name == dev) else {
        let names: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
        return format!(
            "error: unknown device {dev:?} (expected {})",
            names.join(", ")
        );
    };
    let result = {
        let st = &mut *lock(&target.state);
        let mut io = Io::new(&mut st.mem, &mut st.irqs);
        let result = st.device.control(command, &mut io);
        if st.device.take_exit_request() {
            crate::signals::die_soon();
        }
        result
    };
    target.timer.kick();
    let reply = control::format_reply(&result);
    log::info!("control: {dev} {} -> {reply}", command.trim());
    reply
}
