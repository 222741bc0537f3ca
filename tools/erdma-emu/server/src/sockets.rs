// SPDX-License-Identifier: GPL-2.0

//! The socket files the server binds (a device's vfio-user socket, the control socket): freeing a
//! path left behind by a killed run before binding, and removing the files at shutdown.

use std::fs;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// Makes `path` free for binding: removes a socket file nobody listens on (left over by a killed
/// process); refuses a live socket or any other kind of file.
pub fn clear_stale_socket(path: &Path) -> Result<(), String> {
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
