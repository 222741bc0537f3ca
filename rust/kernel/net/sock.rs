// SPDX-License-Identifier: GPL-2.0

//! What the kernel's own TCP and UDP sockets share ([`crate::net::tcp`], [`crate::net::udp`]):
//! IPv4 socket addresses, the events of a watched socket, and the owned `struct socket` with
//! its calls common to both protocols.
//!
//! C headers: [`include/linux/net.h`](srctree/include/linux/net.h),
//! [`include/net/sock.h`](srctree/include/net/sock.h).

use super::namespace::Net;
use crate::{
    bindings,
    error::to_result,
    fmt,
    prelude::*,
    sync::{
        Arc,
        ArcBorrow, //
    },
};
use core::{
    ffi::c_void,
    ptr::NonNull, //
};

/// An IPv4 address and port, of TCP or UDP.
///
/// # Examples
///
/// ```
/// use kernel::{
///     net::tcp::SocketAddrV4,
///     str::CString, //
/// };
///
/// let addr = SocketAddrV4::new([10, 0, 0, 1], 4791);
/// assert_eq!(CString::try_from_fmt(fmt!("{addr}"))?.to_str()?, "10.0.0.1:4791");
/// assert_eq!(SocketAddrV4::from_storage(&addr.to_storage())?, addr);
/// assert!(SocketAddrV4::default().is_unspecified());
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SocketAddrV4 {
    ip: [u8; 4],
    port: u16,
}

impl SocketAddrV4 {
    /// The address `ip`:`port` (`[192, 168, 0, 1]` for 192.168.0.1).
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::net::tcp::SocketAddrV4;
    ///
    /// let a = SocketAddrV4::new([192, 168, 0, 1], 4420);
    /// assert_eq!((a.ip_u32(), a.port()), (0xc0a8_0001, 4420));
    /// assert!(!a.is_unspecified());
    /// ```
    pub const fn new(ip: [u8; 4], port: u16) -> Self {
        Self { ip, port }
    }

    /// The port.
    pub const fn port(&self) -> u16 {
        self.port
    }

    /// The IPv4 address as a number (`0xc0a80001` for 192.168.0.1).
    pub const fn ip_u32(&self) -> u32 {
        u32::from_be_bytes(self.ip)
    }

    /// Whether the address is the wildcard 0.0.0.0.
    pub const fn is_unspecified(&self) -> bool {
        self.ip_u32() == 0
    }

    /// The address a `struct sockaddr_storage` holds; `EAFNOSUPPORT` unless it is an IPv4 one.
    pub fn from_storage(raw: &bindings::__kernel_sockaddr_storage) -> Result<Self> {
        // SAFETY: Both members of the union are plain data; the family is valid in either.
        let family = unsafe { raw.__bindgen_anon_1.__bindgen_anon_1.ss_family };
        if u32::from(family) != bindings::AF_INET {
            return Err(EAFNOSUPPORT);
        }
        // SAFETY: A `sockaddr_storage` is larger than a `sockaddr_in` and at least as aligned;
        // its family says it holds one.
        let sin = unsafe { &*core::ptr::from_ref(raw).cast::<bindings::sockaddr_in>() };
        Ok(Self {
            ip: sin.sin_addr.s_addr.to_ne_bytes(),
            port: u16::from_be(sin.sin_port),
        })
    }

    /// The address as a `struct sockaddr_storage`.
    pub fn to_storage(&self) -> bindings::__kernel_sockaddr_storage {
        let mut raw = bindings::__kernel_sockaddr_storage::default();
        // SAFETY: As in `from_storage`: a `sockaddr_in` fits at the start of the storage.
        let sin = unsafe { &mut *core::ptr::from_mut(&mut raw).cast::<bindings::sockaddr_in>() };
        self.fill(sin);
        raw
    }

    fn fill(&self, sin: &mut bindings::sockaddr_in) {
        // CAST: AF_INET is 2.
        sin.sin_family = bindings::AF_INET as bindings::__kernel_sa_family_t;
        sin.sin_port = self.port.to_be();
        sin.sin_addr.s_addr = u32::from_ne_bytes(self.ip);
    }

    pub(crate) fn to_raw(self) -> bindings::sockaddr_in {
        let mut sin = bindings::sockaddr_in::default();
        self.fill(&mut sin);
        sin
    }
}

impl fmt::Display for SocketAddrV4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.ip;
        write!(f, "{a}.{b}.{c}.{d}:{}", self.port)
    }
}

/// An event of a watched socket.
///
/// # Examples
///
/// ```
/// use kernel::net::tcp::SocketEvent;
///
/// // Whether an event of a listener may mean a connection is there to accept.
/// fn may_accept(event: SocketEvent) -> bool {
///     event == SocketEvent::DataReady
/// }
///
/// assert!(may_accept(SocketEvent::DataReady));
/// assert!(!may_accept(SocketEvent::StateChange));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketEvent {
    /// The TCP state changed: connected, refused, reset, closed by the peer ... (TCP only.)
    StateChange,
    /// Data arrived (a UDP datagram, or bytes of a TCP stream), or (on a TCP listener) a
    /// connection is ready to be accepted.
    DataReady,
}

/// The target of a watched socket's events (see [`tcp`](crate::net::tcp) and
/// [`udp`](crate::net::udp)).
///
/// # Examples
///
/// ```
/// use core::sync::atomic::{
///     AtomicU32,
///     Ordering, //
/// };
/// use kernel::{
///     net::tcp::{
///         SocketEvent,
///         SocketEvents,
///         TcpSocket, //
///     },
///     prelude::*,
///     sync::{
///         Arc,
///         ArcBorrow, //
///     },
/// };
///
/// // Counts the events of a socket; a real target would queue work that handles them.
/// struct Counter {
///     state_changes: AtomicU32,
///     data_ready: AtomicU32,
/// }
///
/// impl SocketEvents for Counter {
///     fn event(this: ArcBorrow<'_, Self>, event: SocketEvent) {
///         let count = match event {
///             SocketEvent::StateChange => &this.state_changes,
///             SocketEvent::DataReady => &this.data_ready,
///         };
///         count.fetch_add(1, Ordering::Relaxed);
///     }
/// }
///
/// fn count_events(sock: &mut TcpSocket) -> Result<Arc<Counter>> {
///     let counter = Arc::new(
///         Counter {
///             state_changes: AtomicU32::new(0),
///             data_ready: AtomicU32::new(0),
///         },
///         GFP_KERNEL,
///     )?;
///     sock.watch(counter.clone())?;
///     Ok(counter)
/// }
/// ```
pub trait SocketEvents: Send + Sync + 'static {
    /// Reports `event` of a watched socket. Called in softirq context with the socket's
    /// callback lock held: must not sleep and must not use the socket.
    fn event(this: ArcBorrow<'_, Self>, event: SocketEvent);
}

type SkCallback = Option<unsafe extern "C" fn(*mut bindings::sock)>;

/// What a watched socket's `sk_user_data` points to: its target, type-erased so that one pair
/// of callbacks serves every target type, and the callbacks it replaced.
struct Hook {
    target: *const c_void,
    event: unsafe fn(*const c_void, SocketEvent),
    release: unsafe fn(*const c_void),
    state_change: SkCallback,
    data_ready: SkCallback,
}

/// Reports `event` to the target `ptr` of type `T`.
///
/// # Safety
///
/// `ptr` must come from `Arc::<T>::into_raw` and its reference must be held during the call.
unsafe fn event_of<T: SocketEvents>(ptr: *const c_void, event: SocketEvent) {
    // SAFETY: The caller guarantees the `Arc` is alive for the call.
    T::event(unsafe { ArcBorrow::from_raw(ptr.cast::<T>()) }, event);
}

/// Drops the reference `ptr` of type `T`.
///
/// # Safety
///
/// `ptr` must come from `Arc::<T>::into_raw`, and this must be its last use.
unsafe fn release_of<T: SocketEvents>(ptr: *const c_void) {
    // SAFETY: The caller passes the reference `into_raw` made, once.
    drop(unsafe { Arc::from_raw(ptr.cast::<T>()) });
}

/// Reports `event` of `sk` to its hook's target, if the socket is watched, then calls the
/// callback the hook replaced.
///
/// # Safety
///
/// `sk` must be a live socket whose `sk_user_data`, if set, was set by [`OwnedSocket::watch`].
unsafe fn report(sk: *mut bindings::sock, event: SocketEvent) {
    // SAFETY: `sk` is live; the callback lock orders this against `watch` and `unwatch`. It is
    // taken with bottom halves off: this runs in softirq under the socket's spinlock, and in
    // process context too (the backlog `release_sock` processes), where lockdep would otherwise
    // see the softirq-safe spinlock ordered before a lock taken with softirqs on.
    unsafe { bindings::read_lock_bh_sk_callback(sk) };
    // SAFETY: The callback lock is held.
    let hook = unsafe { bindings::locked_read_sk_user_data(sk) }.cast::<Hook>();
    let mut orig = None;
    if !hook.is_null() {
        // SAFETY: A hook stays allocated, and its target referenced, until `unwatch` cleared
        // `sk_user_data` under the write lock, which this read lock excludes.
        unsafe {
            ((*hook).event)((*hook).target, event);
            orig = match event {
                SocketEvent::StateChange => (*hook).state_change,
                SocketEvent::DataReady => (*hook).data_ready,
            };
        }
    }
    // SAFETY: Taken above.
    unsafe { bindings::read_unlock_bh_sk_callback(sk) };
    if let Some(orig) = orig {
        // SAFETY: The networking core's own callback for this socket.
        unsafe { orig(sk) };
    }
}

unsafe extern "C" fn state_change(sk: *mut bindings::sock) {
    // SAFETY: The networking core calls this for a live socket; only `watch` installs it.
    unsafe { report(sk, SocketEvent::StateChange) };
}

unsafe extern "C" fn data_ready(sk: *mut bindings::sock) {
    // SAFETY: As in `state_change`.
    unsafe { report(sk, SocketEvent::DataReady) };
}

/// A message header with no name, control data or flags: what `kernel_sendmsg` and
/// `kernel_recvmsg` take for a plain transfer (they set up the data iterator).
fn empty_msghdr() -> bindings::msghdr {
    // SAFETY: `msghdr` is a C struct of integers, pointers and unions of them, for which all
    // zeroes is valid (no name, no control buffer, no flags), as C callers `memset` it.
    unsafe { core::mem::zeroed() }
}

/// A `struct socket` of the kernel's, IPv4, owned: the common part of
/// [`TcpSocket`](crate::net::tcp::TcpSocket) and [`UdpSocket`](crate::net::udp::UdpSocket).
///
/// # Invariants
///
/// `sock` is a socket made by `sock_create_kern` or accepted by `kernel_accept`, owned by this
/// object and released when it drops. Its `sk_user_data`, if set, is a `Hook` installed by
/// [`OwnedSocket::watch`].
pub(crate) struct OwnedSocket {
    sock: NonNull<bindings::socket>,
}

// SAFETY: The socket calls used here take the socket's own locks; it may be used and released
// from any thread in process context.
unsafe impl Send for OwnedSocket {}

// SAFETY: Every method taking `&self` is safe to call concurrently (the networking core locks the
// socket).
unsafe impl Sync for OwnedSocket {}

impl OwnedSocket {
    /// Makes a socket of `ty` (`SOCK_STREAM`, `SOCK_DGRAM`) and `protocol` in network namespace
    /// `net`. A kernel socket holds no reference on its namespace: it must be released before
    /// the namespace goes (a [`super::namespace::PernetOps::exit`] releases those it made).
    pub(crate) fn new_in(net: &Net, ty: u32, protocol: u32) -> Result<Self> {
        let mut sock = core::ptr::null_mut();
        // SAFETY: `net` is a live namespace; `sock` is a valid place for the result.
        to_result(unsafe {
            bindings::sock_create_kern(
                net.as_raw(),
                // CAST: small constants.
                bindings::AF_INET as i32,
                ty as i32,
                protocol as i32,
                &mut sock,
            )
        })?;
        // INVARIANT: A socket just made, owned here.
        Ok(Self {
            sock: NonNull::new(sock).ok_or(ENOMEM)?,
        })
    }

    /// Takes ownership of `sock`, a socket `kernel_accept` made.
    ///
    /// # Safety
    ///
    /// `sock` must be a live socket nothing else owns, with no hook of its own.
    pub(crate) unsafe fn from_accepted(sock: *mut bindings::socket) -> Result<Self> {
        // INVARIANT: The caller hands over a socket it owned.
        Ok(Self {
            sock: NonNull::new(sock).ok_or(ENOMEM)?,
        })
    }

    /// The `struct socket`.
    pub(crate) fn as_ptr(&self) -> *mut bindings::socket {
        self.sock.as_ptr()
    }

    /// The `struct sock`.
    pub(crate) fn sk(&self) -> *mut bindings::sock {
        // SAFETY: An owned socket has its `sk` until released.
        unsafe { (*self.sock.as_ptr()).sk }
    }

    /// `SO_REUSEADDR`.
    pub(crate) fn set_reuse_addr(&self) {
        // SAFETY: `sk` is live.
        unsafe { bindings::sock_set_reuseaddr(self.sk()) };
    }

    /// `SO_BINDTOIFINDEX`.
    pub(crate) fn bind_to_device(&self, ifindex: i32) -> Result {
        // SAFETY: `sk` is live; the call takes the socket lock.
        to_result(unsafe { bindings::sock_bindtoindex(self.sk(), ifindex, true) })
    }

    /// Binds the socket to a local address (port 0: any free port).
    pub(crate) fn bind(&self, addr: SocketAddrV4) -> Result {
        let mut sin = addr.to_raw();
        // SAFETY: The socket is live; `sin` is a valid address of the given length.
        to_result(unsafe {
            bindings::kernel_bind(
                self.sock.as_ptr(),
                (&raw mut sin).cast(),
                // CAST: 16 bytes.
                size_of::<bindings::sockaddr_in>() as i32,
            )
        })
    }

    /// The local address.
    pub(crate) fn local_addr(&self) -> Result<SocketAddrV4> {
        let mut raw = bindings::__kernel_sockaddr_storage::default();
        // SAFETY: The socket is live; the storage is large enough for any address.
        let ret =
            unsafe { bindings::kernel_getsockname(self.sock.as_ptr(), (&raw mut raw).cast()) };
        to_result(ret.min(0))?;
        SocketAddrV4::from_storage(&raw)
    }

    /// The peer's address.
    pub(crate) fn peer_addr(&self) -> Result<SocketAddrV4> {
        let mut raw = bindings::__kernel_sockaddr_storage::default();
        // SAFETY: As in `local_addr`.
        let ret =
            unsafe { bindings::kernel_getpeername(self.sock.as_ptr(), (&raw mut raw).cast()) };
        to_result(ret.min(0))?;
        SocketAddrV4::from_storage(&raw)
    }

    /// Sends what fits of `buf` now, to `to` if given (a datagram socket's destination);
    /// returns how much.
    pub(crate) fn send(&self, buf: &[u8], to: Option<SocketAddrV4>) -> Result<usize> {
        let mut vec = bindings::kvec {
            iov_base: buf.as_ptr().cast_mut().cast(),
            iov_len: buf.len(),
        };
        let mut sin = to.map(SocketAddrV4::to_raw);
        let mut msg = empty_msghdr();
        if let Some(sin) = sin.as_mut() {
            msg.msg_name = core::ptr::from_mut(sin).cast();
            // CAST: 16 bytes.
            msg.msg_namelen = size_of::<bindings::sockaddr_in>() as i32;
        }
        msg.msg_flags = bindings::MSG_DONTWAIT | bindings::MSG_NOSIGNAL;
        // SAFETY: The socket is live; `vec` describes `buf`, which the call only reads, and
        // `msg` names `sin` or nothing; `sin` lives through the call.
        let ret = unsafe {
            bindings::kernel_sendmsg(self.sock.as_ptr(), &mut msg, &mut vec, 1, buf.len())
        };
        to_result(ret.min(0))?;
        // CAST: not negative.
        Ok(ret as usize)
    }

    /// Receives into `buf` what has arrived, at most `buf.len()` bytes, and the sender's address
    /// into `from` if given; returns how many bytes and the message's flags (`MSG_TRUNC` ...).
    /// `EAGAIN` if nothing is there.
    pub(crate) fn recv(
        &self,
        buf: &mut [u8],
        from: Option<&mut bindings::__kernel_sockaddr_storage>,
    ) -> Result<(usize, u32)> {
        let mut vec = bindings::kvec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut msg = empty_msghdr();
        if let Some(from) = from {
            msg.msg_name = core::ptr::from_mut(from).cast();
            // CAST: 128 bytes.
            msg.msg_namelen = size_of::<bindings::__kernel_sockaddr_storage>() as i32;
        }
        // SAFETY: The socket is live; `vec` describes `buf`, which the call writes at most, and
        // `msg` names `from`, large enough for any address, or nothing; `from` outlives the call.
        let ret = unsafe {
            bindings::kernel_recvmsg(
                self.sock.as_ptr(),
                &mut msg,
                &mut vec,
                1,
                buf.len(),
                // CAST: a flag of the message flags.
                bindings::MSG_DONTWAIT as i32,
            )
        };
        to_result(ret.min(0))?;
        // CAST: not negative.
        Ok((ret as usize, msg.msg_flags))
    }

    /// Takes the socket's pending error, if any.
    pub(crate) fn take_error(&self) -> Option<Error> {
        // SAFETY: `sk` is live.
        let err = unsafe { bindings::sock_error(self.sk()) };
        (err < 0).then(|| Error::from_errno(err))
    }

    /// Gives an accepted socket, which copied its `listener`'s callbacks, the callbacks the
    /// listener's hook replaced.
    pub(crate) fn restore_inherited(&self, listener: &OwnedSocket) {
        let (sk, listener) = (self.sk(), listener.sk());
        // SAFETY: Both sockets are live; each callback lock is taken alone, listener first.
        unsafe {
            bindings::read_lock_bh_sk_callback(listener);
            let hook = bindings::locked_read_sk_user_data(listener).cast::<Hook>();
            let saved = if hook.is_null() {
                None
            } else {
                Some(((*hook).state_change, (*hook).data_ready))
            };
            bindings::read_unlock_bh_sk_callback(listener);
            // The connection was cloned from the listener after its hook was installed (a
            // listener is watched before it listens): it has the hook's callbacks, and the
            // ones the hook replaced are its own.
            if let Some((mut sc, mut dr)) = saved {
                bindings::write_lock_bh_sk_callback(sk);
                bindings::sk_swap_callbacks(sk, &mut sc, &mut dr);
                bindings::write_unlock_bh_sk_callback(sk);
            }
        }
    }

    /// Reports the socket's events to `target` from now on; a target watched before is
    /// released first.
    pub(crate) fn watch<T: SocketEvents>(&mut self, target: Arc<T>) -> Result {
        self.unwatch();
        let sk = self.sk();
        let mut hook = KBox::new(
            Hook {
                target: core::ptr::null(),
                event: event_of::<T>,
                release: release_of::<T>,
                state_change: None,
                data_ready: None,
            },
            GFP_KERNEL,
        )?;
        hook.target = target.into_raw().cast();
        // SAFETY: `sk` is live; the write lock excludes `report` on other CPUs.
        unsafe {
            bindings::write_lock_bh_sk_callback(sk);
            hook.state_change = Some(state_change);
            hook.data_ready = Some(data_ready);
            bindings::sk_swap_callbacks(sk, &mut hook.state_change, &mut hook.data_ready);
            bindings::assign_sk_user_data_nocopy(sk, KBox::into_raw(hook).cast());
            bindings::write_unlock_bh_sk_callback(sk);
        }
        Ok(())
    }

    /// Stops reporting the socket's events; when this returns, no report is running.
    pub(crate) fn unwatch(&mut self) {
        let sk = self.sk();
        // SAFETY: `sk` is live; under the write lock no report runs, and none starts after the
        // hook is cleared.
        let hook = unsafe {
            bindings::write_lock_bh_sk_callback(sk);
            let hook = bindings::locked_read_sk_user_data(sk).cast::<Hook>();
            if !hook.is_null() {
                bindings::sk_swap_callbacks(sk, &mut (*hook).state_change, &mut (*hook).data_ready);
                bindings::assign_sk_user_data_nocopy(sk, core::ptr::null_mut());
            }
            bindings::write_unlock_bh_sk_callback(sk);
            hook
        };
        if !hook.is_null() {
            // SAFETY: The hook was made by `KBox::into_raw` in `watch`, and nothing can reach it
            // any more.
            let hook = unsafe { KBox::from_raw(hook) };
            // SAFETY: The hook's reference, released once.
            unsafe { (hook.release)(hook.target) };
        }
    }
}

impl Drop for OwnedSocket {
    fn drop(&mut self) {
        self.unwatch();
        // SAFETY: The socket is owned and no longer used.
        unsafe { bindings::sock_release(self.sock.as_ptr()) };
    }
}
