// SPDX-License-Identifier: GPL-2.0

//! UDP sockets owned by the kernel, over IPv4.
//!
//! C headers: [`include/linux/net.h`](srctree/include/linux/net.h),
//! [`include/net/sock.h`](srctree/include/net/sock.h),
//! [`include/linux/udp.h`](srctree/include/linux/udp.h).
//!
//! A [`UdpSocket`] is a `struct socket` made by `sock_create_kern` in the initial network
//! namespace, owned by its holder: dropping it stops watching it and releases it. No operation
//! blocks: [`UdpSocket::send_to`] queues one datagram or fails (`EAGAIN` when the socket's send
//! buffer is full), [`UdpSocket::recv_from`] takes one datagram that has arrived or fails with
//! `EAGAIN`.
//!
//! # Events
//!
//! [`UdpSocket::watch`] hands the socket's [`SocketEvent::DataReady`] events (a datagram
//! arrived) to a [`SocketEvents`] implementation, as a TCP socket's are (see
//! [`crate::net::tcp`]): reported in softirq context with the socket's callback lock held, so an
//! implementation must not sleep and must not use the socket, and typically queues work that
//! receives. When [`UdpSocket::unwatch`] returns, no event is being reported and none will be.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     net::udp::{
//!         Received,
//!         SocketAddrV4,
//!         UdpSocket, //
//!     },
//!     prelude::*, //
//! };
//!
//! // A socket of every local address, on a port the kernel chose: nothing has arrived yet.
//! let sock = UdpSocket::new()?;
//! sock.bind(SocketAddrV4::new([0, 0, 0, 0], 0))?;
//! let me = sock.local_addr()?;
//! assert!(me.is_unspecified() && me.port() != 0);
//! let mut buf = [0u8; 16];
//! assert_eq!(sock.recv_from(&mut buf).err(), Some(EAGAIN));
//!
//! // A datagram to itself through the loopback device (once it is up), and back.
//! fn to_itself(sock: &UdpSocket, buf: &mut [u8]) -> Result<Received> {
//!     let me = SocketAddrV4::new([127, 0, 0, 1], sock.local_addr()?.port());
//!     sock.send_to(b"hello", me)?;
//!     sock.recv_from(buf)
//! }
//! # Ok::<(), Error>(())
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

/// A datagram [`UdpSocket::recv_from`] took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// How many of its bytes are in the buffer.
    pub len: usize,
    /// Where it came from.
    pub from: SocketAddrV4,
    /// Whether it was longer than the buffer (the rest is dropped).
    pub truncated: bool,
}

/// A datagram [`UdpSocket::recv_datagram`] took, with the headers it arrived with: for
/// protocols over UDP whose integrity checks cover them (RoCEv2's ICRC covers the IPv4 and UDP
/// headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// How many of its bytes are in the buffer.
    pub len: usize,
    /// Whether it was longer than the buffer (the rest is dropped).
    pub truncated: bool,
    /// Where it came from.
    pub from: SocketAddrV4,
    /// The address and port it was sent to.
    pub to: SocketAddrV4,
    /// The first 20 bytes of its IPv4 header, as they arrived (options, if any, are not here:
    /// the header length field says whether there were).
    pub ip_header: [u8; 20],
}

/// A UDP socket of the kernel's, IPv4 (see the [module documentation](self)).
///
/// # Examples
///
/// ```
/// use kernel::{
///     net::udp::{
///         SocketAddrV4,
///         UdpSocket, //
///     },
///     prelude::*, //
/// };
///
/// // Answers every datagram waiting on `sock` with its own bytes.
/// fn echo_waiting(sock: &UdpSocket) -> Result {
///     let mut buf = [0u8; 256];
///     loop {
///         match sock.recv_from(&mut buf) {
///             Ok(got) => {
///                 sock.send_to(&buf[..got.len], got.from)?;
///             }
///             Err(e) if e == EAGAIN => return Ok(()),
///             Err(e) => return Err(e),
///         }
///     }
/// }
///
/// // A socket of every local address's `port`.
/// fn serve(port: u16) -> Result<UdpSocket> {
///     let sock = UdpSocket::new()?;
///     sock.bind(SocketAddrV4::new([0, 0, 0, 0], port))?;
///     Ok(sock)
/// }
/// ```
pub struct UdpSocket {
    sock: OwnedSocket,
}

impl UdpSocket {
    /// Makes a UDP socket in the initial network namespace.
    pub fn new() -> Result<Self> {
        Ok(Self {
            sock: OwnedSocket::new_in(
                Net::initial(),
                bindings::sock_type_SOCK_DGRAM,
                bindings::IPPROTO_UDP,
            )?,
        })
    }

    /// Lets the socket bind an address another socket has bound (`SO_REUSEADDR`).
    pub fn set_reuse_addr(&self) {
        self.sock.set_reuse_addr();
    }

    /// Sends and receives only through the network device numbered `ifindex`.
    pub fn bind_to_device(&self, ifindex: i32) -> Result {
        self.sock.bind_to_device(ifindex)
    }

    /// Binds the socket to a local address (port 0: any free port).
    pub fn bind(&self, addr: SocketAddrV4) -> Result {
        self.sock.bind(addr)
    }

    /// The local address.
    pub fn local_addr(&self) -> Result<SocketAddrV4> {
        self.sock.local_addr()
    }

    /// Sends `buf` as one datagram to `to`; returns its length. `EAGAIN` if the socket's send
    /// buffer has no room now, `EMSGSIZE` if it is longer than a datagram can be.
    pub fn send_to(&self, buf: &[u8], to: SocketAddrV4) -> Result<usize> {
        self.sock.send(buf, Some(to))
    }

    /// Takes one datagram that has arrived, into `buf` (what does not fit is dropped); `EAGAIN`
    /// if none is there.
    pub fn recv_from(&self, buf: &mut [u8]) -> Result<Received> {
        let mut from = bindings::__kernel_sockaddr_storage::default();
        let (len, flags) = self.sock.recv(buf, Some(&mut from))?;
        Ok(Received {
            len,
            from: SocketAddrV4::from_storage(&from)?,
            truncated: flags & bindings::MSG_TRUNC != 0,
        })
    }

    /// Takes one datagram that has arrived, into `buf` (what does not fit is dropped), with its
    /// IPv4 header; `EAGAIN` if none is there, `EBADMSG` for one whose UDP checksum is wrong
    /// (it is dropped, as `recvmsg` drops it).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::{
    ///     net::udp::{
    ///         Datagram,
    ///         UdpSocket, //
    ///     },
    ///     prelude::*, //
    /// };
    ///
    /// // The identification field of the IPv4 header of the next datagram waiting, if any.
    /// fn next_ip_id(sock: &UdpSocket) -> Result<u16> {
    ///     let mut buf = [0u8; 64];
    ///     let got: Datagram = sock.recv_datagram(&mut buf)?;
    ///     Ok(u16::from_be_bytes([got.ip_header[4], got.ip_header[5]]))
    /// }
    /// ```
    pub fn recv_datagram(&self, buf: &mut [u8]) -> Result<Datagram> {
        let sk = self.sock.sk();
        let mut off = 0;
        let mut err = 0;
        // SAFETY: The socket is live; a datagram socket's receive queue is what this takes
        // from, without waiting; `off` and `err` are writable.
        let skb =
            unsafe { bindings::__skb_recv_udp(sk, bindings::MSG_DONTWAIT, &mut off, &mut err) };
        if skb.is_null() {
            to_result(err)?;
            return Err(EAGAIN);
        }
        let mut csum_ok = false;
        let mut ip = [0u8; 20];
        let mut udp = [0u8; 8];
        // SAFETY: `skb` is a datagram of this socket's queue, now ours; the buffers hold the
        // 20 and 8 bytes the helper copies.
        let ulen = unsafe {
            bindings::udp_skb_headers(
                skb,
                &mut csum_ok,
                ip.as_mut_ptr().cast(),
                udp.as_mut_ptr().cast(),
            )
        };
        // CAST: a datagram's length fits in 16 bits.
        let ulen = ulen as usize;
        let len = ulen.min(buf.len());
        let copied = if csum_ok {
            // SAFETY: `skb` is ours; its data starts with the payload, of `ulen >= len` bytes;
            // `buf` holds `len`.
            to_result(unsafe {
                // CAST: at most 65535.
                bindings::skb_copy_bits(skb, 0, buf.as_mut_ptr().cast(), len as i32)
            })
        } else {
            Err(EBADMSG)
        };
        // SAFETY: `skb` is ours and not used after this.
        unsafe { bindings::udp_skb_consume(skb) };
        copied?;
        let port = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]);
        Ok(Datagram {
            len,
            truncated: len < ulen,
            from: SocketAddrV4::new([ip[12], ip[13], ip[14], ip[15]], port(&udp[0..2])),
            to: SocketAddrV4::new([ip[16], ip[17], ip[18], ip[19]], port(&udp[2..4])),
            ip_header: ip,
        })
    }

    /// Sets the Don't Fragment bit of every datagram sent, fragmenting none
    /// (`IP_PMTUDISC_DO`); unconnected, each is then sent with identification 0 (RFC 6864).
    pub fn set_dont_fragment(&self) -> Result {
        // SAFETY: The socket is live.
        to_result(unsafe {
            // CAST: a small constant.
            bindings::ip_sock_set_mtu_discover(self.sock.sk(), bindings::IP_PMTUDISC_DO as i32)
        })
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
