// SPDX-License-Identifier: GPL-2.0

//! TCP sockets owned by the kernel, over IPv4.
//!
//! C headers: [`include/linux/net.h`](srctree/include/linux/net.h),
//! [`include/net/sock.h`](srctree/include/net/sock.h),
//! [`include/linux/tcp.h`](srctree/include/linux/tcp.h).
//!
//! A [`TcpSocket`] is a `struct socket` made by `sock_create_kern` in the initial network
//! namespace, owned by its holder: dropping it stops watching it and releases it (a connected
//! socket then closes its connection). No operation blocks: [`TcpSocket::connect`] and
//! [`TcpSocket::accept`] report whether they are done, [`TcpSocket::send`] and
//! [`TcpSocket::recv`] move what fits and what has arrived.
//!
//! # Events
//!
//! [`TcpSocket::watch`] hands the socket's events (its TCP state changed; data, or a connection
//! to accept, arrived) to a [`SocketEvents`] implementation, which the socket holds a reference
//! on until [`TcpSocket::unwatch`] or drop. Events are reported in softirq context with the
//! socket's callback lock held: an implementation must not sleep and must not use the socket;
//! it typically queues work that does. When `unwatch` returns, no event is being reported and
//! none will be, so the reference it drops is the socket's last use of the target.
//!
//! Connections a watched listener accepts do not inherit its target: they start unwatched,
//! with the kernel's own callbacks.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     net::tcp::{
//!         SocketAddrV4,
//!         SocketEvents,
//!         TcpSocket, //
//!     },
//!     prelude::*,
//!     sync::Arc, //
//! };
//!
//! // Starts connecting to `peer`; `target` hears when the connection is made or fails.
//! fn start_connect<T: SocketEvents>(peer: SocketAddrV4, target: Arc<T>) -> Result<TcpSocket> {
//!     let mut sock = TcpSocket::new()?;
//!     sock.set_nodelay();
//!     // Watched before it connects, so that no state change goes unreported.
//!     sock.watch(target)?;
//!     if sock.connect(peer)? {
//!         pr_info!("connected to {peer}\n");
//!     }
//!     Ok(sock)
//! }
//! ```

use super::{
    namespace::Net,
    sock::OwnedSocket, //
};
use crate::{
    bindings,
    error::to_result,
    prelude::*,
    sync::Arc, //
};

pub use super::sock::{
    SocketAddrV4,
    SocketEvent,
    SocketEvents, //
};

/// The state of a TCP connection (`TCP_ESTABLISHED` ...).
///
/// # Examples
///
/// ```
/// use kernel::net::tcp::{
///     TcpSocket,
///     TcpState, //
/// };
///
/// // Whether data may still arrive on a connection.
/// fn may_receive(sock: &TcpSocket) -> bool {
///     matches!(
///         sock.state(),
///         TcpState::Established | TcpState::FinWait1 | TcpState::FinWait2
///     )
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpState {
    /// Connected.
    Established,
    /// A connection is being made.
    SynSent,
    /// A connection request arrived (a not yet accepted connection).
    SynRecv,
    /// This end closed its sending direction.
    FinWait1,
    /// This end closed and the peer acknowledged.
    FinWait2,
    /// Both ends closed; waiting for old segments.
    TimeWait,
    /// Not connected (never connected, refused, reset or closed).
    Close,
    /// The peer closed its sending direction.
    CloseWait,
    /// The peer closed, then this end.
    LastAck,
    /// Listening.
    Listen,
    /// Both ends closed at once.
    Closing,
    /// Another state of the networking core's.
    Other(u8),
}

impl TcpState {
    fn from_raw(raw: u8) -> Self {
        match u32::from(raw) {
            bindings::TCP_ESTABLISHED => Self::Established,
            bindings::TCP_SYN_SENT => Self::SynSent,
            bindings::TCP_SYN_RECV => Self::SynRecv,
            bindings::TCP_FIN_WAIT1 => Self::FinWait1,
            bindings::TCP_FIN_WAIT2 => Self::FinWait2,
            bindings::TCP_TIME_WAIT => Self::TimeWait,
            bindings::TCP_CLOSE => Self::Close,
            bindings::TCP_CLOSE_WAIT => Self::CloseWait,
            bindings::TCP_LAST_ACK => Self::LastAck,
            bindings::TCP_LISTEN => Self::Listen,
            bindings::TCP_CLOSING => Self::Closing,
            _ => Self::Other(raw),
        }
    }
}

/// The next sequence numbers of a connection's two directions.
///
/// # Examples
///
/// ```
/// use kernel::net::tcp::TcpSeq;
///
/// // The bytes this end sent since it sent `start`, modulo 2^32 as sequence numbers are.
/// fn sent_since(seq: TcpSeq, start: u32) -> u32 {
///     seq.snd_nxt.wrapping_sub(start)
/// }
///
/// let seq = TcpSeq {
///     snd_nxt: 5,
///     rcv_nxt: 1000,
/// };
/// assert_eq!(sent_since(seq, u32::MAX - 4), 10);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSeq {
    /// The next sequence number this end sends (`SND.NXT`).
    pub snd_nxt: u32,
    /// The next sequence number this end expects (`RCV.NXT`).
    pub rcv_nxt: u32,
}

/// A TCP socket of the kernel's, IPv4 (see the [module documentation](self)).
///
/// # Examples
///
/// ```
/// use kernel::{
///     net::tcp::{
///         SocketAddrV4,
///         TcpSocket, //
///     },
///     prelude::*, //
/// };
///
/// // A listener on `port` of every local address.
/// fn listen_on(port: u16) -> Result<TcpSocket> {
///     let sock = TcpSocket::new()?;
///     sock.set_reuse_addr();
///     sock.bind(SocketAddrV4::new([0, 0, 0, 0], port))?;
///     sock.listen(16)?;
///     Ok(sock)
/// }
///
/// // Accepts the connections that are waiting and echoes what each has sent so far.
/// fn echo_waiting(listener: &TcpSocket) -> Result {
///     while let Some(conn) = listener.accept()? {
///         let mut buf = [0u8; 64];
///         match conn.recv(&mut buf) {
///             Ok(n) => {
///                 conn.send(&buf[..n])?;
///             }
///             Err(e) if e == EAGAIN => {}
///             Err(e) => return Err(e),
///         }
///     }
///     Ok(())
/// }
/// ```
///
pub struct TcpSocket {
    sock: OwnedSocket,
}

impl TcpSocket {
    /// Makes a TCP socket in the initial network namespace.
    pub fn new() -> Result<Self> {
        Self::new_in(Net::initial())
    }

    /// Makes a TCP socket in network namespace `net`, which it must not outlive (it holds no
    /// reference on it: a [`PernetOps::exit`](crate::net::namespace::PernetOps::exit) of the
    /// namespace releases it).
    pub fn new_in(net: &Net) -> Result<Self> {
        Ok(Self {
            sock: OwnedSocket::new_in(net, bindings::sock_type_SOCK_STREAM, bindings::IPPROTO_TCP)?,
        })
    }

    /// Lets the socket bind an address another socket has used (`SO_REUSEADDR`).
    pub fn set_reuse_addr(&self) {
        self.sock.set_reuse_addr();
    }

    /// Sends small segments at once (`TCP_NODELAY`).
    pub fn set_nodelay(&self) {
        // SAFETY: `sk` is live.
        unsafe { bindings::tcp_sock_set_nodelay(self.sock.sk()) };
    }

    /// Sends and receives only through the network device numbered `ifindex`.
    pub fn bind_to_device(&self, ifindex: i32) -> Result {
        self.sock.bind_to_device(ifindex)
    }

    /// Binds the socket to a local address (port 0: any free port).
    pub fn bind(&self, addr: SocketAddrV4) -> Result {
        self.sock.bind(addr)
    }

    /// Starts connecting to `addr`. Returns `true` if connected already; otherwise the state
    /// changes (see [`SocketEvent::StateChange`]) when the connection is made or fails.
    pub fn connect(&self, addr: SocketAddrV4) -> Result<bool> {
        let mut sin = addr.to_raw();
        // SAFETY: The socket is live; `sin` is a valid address of the given length.
        let ret = unsafe {
            bindings::kernel_connect(
                self.sock.as_ptr(),
                (&raw mut sin).cast(),
                // CAST: 16 bytes.
                size_of::<bindings::sockaddr_in>() as i32,
                // CAST: a flag of the open flags.
                bindings::O_NONBLOCK as i32,
            )
        };
        match to_result(ret) {
            Ok(()) => Ok(true),
            Err(e) if e == EINPROGRESS => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Listens for connections, queueing up to `backlog` not yet accepted ones.
    pub fn listen(&self, backlog: i32) -> Result {
        // SAFETY: The socket is live.
        to_result(unsafe { bindings::kernel_listen(self.sock.as_ptr(), backlog) })
    }

    /// Accepts a connection of a listening socket, if one is waiting.
    pub fn accept(&self) -> Result<Option<TcpSocket>> {
        let mut new = core::ptr::null_mut();
        // SAFETY: The socket is live; `new` is a valid place for the result.
        let ret = unsafe {
            bindings::kernel_accept(
                self.sock.as_ptr(),
                &mut new,
                // CAST: a flag of the open flags.
                bindings::O_NONBLOCK as i32,
            )
        };
        match to_result(ret) {
            Ok(()) => {}
            Err(e) if e == EAGAIN => return Ok(None),
            Err(e) => return Err(e),
        }
        // SAFETY: An accepted socket, owned by nothing else. Its `sk_user_data` is not the
        // listener's (a hook is never copied to accepted connections); its callbacks are
        // restored below.
        let sock = unsafe { OwnedSocket::from_accepted(new) }?;
        let child = Self { sock };
        child.sock.restore_inherited(&self.sock);
        Ok(Some(child))
    }

    /// Sends what fits of `buf` into the socket's send buffer now; returns how much.
    pub fn send(&self, buf: &[u8]) -> Result<usize> {
        self.sock.send(buf, None)
    }

    /// Receives into `buf` what has arrived, at most `buf.len()` bytes. Returns how many bytes
    /// it received, 0 at the end of the stream, or `EAGAIN` if none are there yet.
    pub fn recv(&self, buf: &mut [u8]) -> Result<usize> {
        Ok(self.sock.recv(buf, None)?.0)
    }

    /// The local address.
    pub fn local_addr(&self) -> Result<SocketAddrV4> {
        self.sock.local_addr()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> Result<SocketAddrV4> {
        self.sock.peer_addr()
    }

    /// The connection's state.
    pub fn state(&self) -> TcpState {
        // SAFETY: `sk` is live.
        let raw = unsafe { bindings::sk_state(self.sock.sk()) };
        // CAST: TCP states are below 256.
        TcpState::from_raw(raw as u8)
    }

    /// Takes the socket's pending error (`ECONNREFUSED`, `ETIMEDOUT`, `ECONNRESET` ...), if any.
    pub fn take_error(&self) -> Option<Error> {
        self.sock.take_error()
    }

    /// The next sequence numbers of both directions, read under the socket's lock: what an
    /// adapter that takes the connection over continues with.
    pub fn seq(&self) -> TcpSeq {
        let sk = self.sock.sk();
        let (mut snd_nxt, mut rcv_nxt) = (0, 0);
        // SAFETY: `sk` is a live TCP socket; its lock keeps the numbers still while read.
        unsafe {
            bindings::lock_sock(sk);
            bindings::tcp_next_seq(sk, &mut snd_nxt, &mut rcv_nxt);
            bindings::release_sock(sk);
        }
        TcpSeq { snd_nxt, rcv_nxt }
    }

    /// Reports the socket's events to `target` from now on (see the
    /// [module documentation](self)); a target watched before is released first.
    pub fn watch<T: SocketEvents>(&mut self, target: Arc<T>) -> Result {
        self.sock.watch(target)
    }

    /// Stops reporting the socket's events; when this returns, no report is running.
    pub fn unwatch(&mut self) {
        self.sock.unwatch();
    }
}
