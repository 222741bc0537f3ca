// SPDX-License-Identifier: GPL-2.0

//! Termination signals, handled synchronously: the main thread blocks them before any other
//! thread exists (so every thread inherits the mask) and later waits for one with `sigwait`.

use std::io;
use std::mem::MaybeUninit;

/// SIGINT, SIGTERM and SIGHUP, blocked.
pub struct TerminationSignals {
    set: libc::sigset_t,
}

impl TerminationSignals {
    /// The signals that end the server.
    const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

    /// Blocks the termination signals in the calling thread. Call it before spawning threads.
    pub fn block() -> io::Result<Self> {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: `sigemptyset` initialises the set it is given a valid pointer to.
        if unsafe { libc::sigemptyset(set.as_mut_ptr()) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: initialised by `sigemptyset` above.
        let mut set = unsafe { set.assume_init() };
        for sig in Self::SIGNALS {
            // SAFETY: `set` is an initialised signal set and `sig` a valid signal number.
            if unsafe { libc::sigaddset(&mut set, sig) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: `set` is initialised; a null old-set pointer is allowed.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(TerminationSignals { set })
    }

    /// Waits until one of the signals arrives and returns its number.
    pub fn wait(&self) -> io::Result<libc::c_int> {
        let mut sig: libc::c_int = 0;
        // SAFETY: `self.set` is an initialised signal set and `sig` a valid out-pointer.
        let rc = unsafe { libc::sigwait(&self.set, &mut sig) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(sig)
    }
}

/// The name of a termination signal.
pub fn name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Ends the process at once with SIGKILL, as if killed from outside (the control language's
/// `die`): no destructor runs, every adapter it serves stops answering, and QEMU's vfio-user
/// proxy fails the guests' accesses from then on.
pub fn die() -> ! {
    log::logger().flush();
    // SAFETY: `kill` with this process's own ID and a valid signal has no memory effects.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    // SIGKILL cannot be caught or blocked; should it not arrive, abort.
    std::process::abort()
}

/// [`die`] a moment from now, from a thread of its own: the access that asked for it (a test
/// page's `die`) is answered first. (QEMU 11.1's vfio-user proxy trips an assertion of its own,
/// `error_setv: *errp == NULL`, when the server goes away while it waits for the answer to a
/// region write: that would end the guest, not test it.)
pub fn die_soon() {
    let _ = std::thread::Builder::new().name("die".into()).spawn(|| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        die()
    });
}
