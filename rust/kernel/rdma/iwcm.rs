// SPDX-License-Identifier: GPL-2.0

//! The iWARP connection manager (`iw_cm`) and the devices that make its connections.
//!
//! C header: [`include/rdma/iw_cm.h`](srctree/include/rdma/iw_cm.h).
//!
//! On an iWARP device, a queue pair gets connected by the driver: the connection manager
//! calls the device's `iw_*` operations ([`DeviceOps::iw_connect`](super::DeviceOps::iw_connect)
//! and the others) with a [`CmId`], and the driver reports what became of the connection as
//! [`CmEvent`]s through a [`CmIdRef`], a counted reference on the identifier that it keeps
//! for as long as it may report events.
//!
//! Each identifier carries one `usize` for its device (the C `provider_data`):
//! [`CmId::token`] and [`CmId::set_token`]. A connection request's [`CmEvent::token`] becomes
//! the token of the identifier the connection manager makes for it, so that the device finds
//! its side of the connection again in [`DeviceOps::iw_accept`](super::DeviceOps::iw_accept) or
//! [`DeviceOps::iw_reject`](super::DeviceOps::iw_reject). Tokens are plain numbers: they own
//! nothing, so a connection manager that drops a request loses nothing.
//!
//! The connection manager takes counted references on queue pairs too
//! ([`DeviceOps::iw_add_ref`](super::DeviceOps::iw_add_ref)); a device must not finish
//! destroying a queue pair while any is held.
//!
//! # Examples
//!
//! ```
//! use kernel::{
//!     prelude::*,
//!     rdma::iwcm::{
//!         CmEvent,
//!         CmEventKind,
//!         CmId,
//!         CmIdRef,
//!         ConnParam, //
//!     },
//! };
//!
//! // What a device keeps of a connection it makes.
//! struct Connecting {
//!     id: CmIdRef,
//!     qpn: u32,
//! }
//!
//! // Starts a connection (`DeviceOps::iw_connect`): keeps a reference on the identifier to report
//! // the outcome through later.
//! fn start_connect(id: &CmId, param: &ConnParam<'_>) -> Result<Connecting> {
//!     let (local, remote) = (id.local_addr()?, id.remote_addr()?);
//!     pr_debug!("QP {} connects from {local} to {remote}\n", param.qpn);
//!     Ok(Connecting {
//!         id: id.get(),
//!         qpn: param.qpn,
//!     })
//! }
//!
//! // Reports the peer's reply: the connection is up.
//! fn connected(conn: &Connecting, id: &CmId, reply: &[u8]) -> Result {
//!     let event = CmEvent {
//!         private_data: reply,
//!         ..CmEvent::new(CmEventKind::ConnectReply, id.local_addr()?, id.remote_addr()?)
//!     };
//!     conn.id.report(&event)
//! }
//! ```

use crate::{
    bindings,
    net::tcp::SocketAddrV4,
    prelude::*,
    types::Opaque, //
};
use core::{
    ffi::c_void,
    ptr::NonNull,
    sync::atomic::{
        AtomicPtr,
        Ordering, //
    }, //
};

/// A connection identifier of the iWARP connection manager (`struct iw_cm_id`), as the
/// device's operations receive it.
///
/// # Examples
///
/// ```
/// use kernel::rdma::iwcm::CmId;
///
/// // The device's connection table is indexed by the identifiers' tokens, 0 meaning none.
/// fn remember(id: &CmId, slot: usize) {
///     id.set_token(slot + 1);
/// }
///
/// fn slot_of(id: &CmId) -> Option<usize> {
///     id.token().checked_sub(1)
/// }
/// ```
///
/// # Invariants
///
/// A `&CmId` refers to an identifier the connection manager keeps alive for the reference's
/// lifetime.
#[repr(transparent)]
pub struct CmId(Opaque<bindings::iw_cm_id>);

impl CmId {
    /// Borrows an identifier the connection manager passed to an operation.
    ///
    /// # Safety
    ///
    /// `ptr` must point to an identifier that stays alive for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::iw_cm_id) -> &'a Self {
        // SAFETY: `CmId` is a transparent wrapper; validity is guaranteed by the caller.
        unsafe { &*ptr.cast() }
    }

    fn as_raw(&self) -> *mut bindings::iw_cm_id {
        self.0.get()
    }

    /// The local address the connection uses or the listener listens on, as the port mapper
    /// mapped it. `EAFNOSUPPORT` for other than IPv4.
    pub fn local_addr(&self) -> Result<SocketAddrV4> {
        // SAFETY: The identifier is alive (type invariant); its addresses are set before the
        // device sees it.
        SocketAddrV4::from_storage(unsafe { &(*self.as_raw()).m_local_addr })
    }

    /// The peer's address, as the port mapper mapped it. `EAFNOSUPPORT` for other than IPv4.
    pub fn remote_addr(&self) -> Result<SocketAddrV4> {
        // SAFETY: As in `local_addr`.
        SocketAddrV4::from_storage(unsafe { &(*self.as_raw()).m_remote_addr })
    }

    /// The device's token slot in the identifier, read and written only atomically.
    fn token_slot(&self) -> &AtomicPtr<c_void> {
        // SAFETY: The identifier is alive for as long as `self` is borrowed, and its
        // `provider_data` is suitably aligned for an atomic pointer. The connection manager
        // never touches the field (it belongs to the device), and this module reads and writes
        // it only through this atomic view, so no access races a non-atomic one.
        unsafe { AtomicPtr::from_ptr(&raw mut (*self.as_raw()).provider_data) }
    }

    /// The device's token on this identifier (0 until set).
    pub fn token(&self) -> usize {
        self.token_slot().load(Ordering::Acquire) as usize
    }

    /// Sets the device's token on this identifier; sound from any thread, as the token is
    /// written atomically.
    pub fn set_token(&self, token: usize) {
        self.token_slot()
            .store(token as *mut c_void, Ordering::Release);
    }

    /// Takes a counted reference on the identifier, through which the device reports events.
    pub fn get(&self) -> CmIdRef {
        let raw = self.as_raw();
        // SAFETY: The identifier is alive; the connection manager sets `add_ref` when it makes
        // an identifier, and it may be called in any context.
        unsafe {
            if let Some(add_ref) = (*raw).add_ref {
                add_ref(raw);
            }
        }
        // INVARIANT: The reference just taken.
        CmIdRef(NonNull::from(self).cast())
    }
}

/// A counted reference on a connection identifier, dropped with `rem_ref`.
///
/// # Examples
///
/// ```
/// use kernel::{
///     net::tcp::SocketAddrV4,
///     rdma::iwcm::{
///         CmEvent,
///         CmEventKind,
///         CmIdRef, //
///     },
/// };
///
/// // The peer closed the connection: report it, then that the connection is gone, and drop the
/// // reference, as `Close` is the identifier's last event.
/// fn peer_closed(id: CmIdRef, local: SocketAddrV4, remote: SocketAddrV4) {
///     let _ = id.report(&CmEvent::new(CmEventKind::Disconnect, local, remote));
///     let _ = id.report(&CmEvent::new(CmEventKind::Close, local, remote));
///     drop(id);
/// }
/// ```
///
/// # Invariants
///
/// Holds one reference (taken with `add_ref`) on the identifier at the pointer.
pub struct CmIdRef(NonNull<bindings::iw_cm_id>);

// SAFETY: The connection manager's reference counting and event handler may be used from any
// thread and context.
unsafe impl Send for CmIdRef {}

// SAFETY: As above; the methods taking `&self` only report events.
unsafe impl Sync for CmIdRef {}

impl CmIdRef {
    /// Reports `event` to the connection manager; may be called in any context. Private data
    /// is limited to 255 bytes (`EINVAL` beyond).
    pub fn report(&self, event: &CmEvent<'_>) -> Result {
        let len = u8::try_from(event.private_data.len()).map_err(|_| EINVAL)?;
        let mut raw = bindings::iw_cm_event {
            event: event.kind as bindings::iw_cm_event_type,
            status: event.status.map_or(0, Error::to_errno),
            local_addr: event.local.to_storage(),
            remote_addr: event.remote.to_storage(),
            private_data: if len == 0 {
                core::ptr::null_mut()
            } else {
                event.private_data.as_ptr().cast_mut().cast()
            },
            provider_data: event.token as *mut c_void,
            private_data_len: len,
            ord: event.ord,
            ird: event.ird,
        };
        let id = self.0.as_ptr();
        // SAFETY: The identifier is alive (type invariant); the connection manager set its
        // handler when it made it. The handler copies the private data, which it only reads.
        let ret = unsafe {
            match (*id).event_handler {
                Some(handler) => handler(id, &mut raw),
                None => -(bindings::ENODEV as i32),
            }
        };
        crate::error::to_result(ret)
    }
}

impl Drop for CmIdRef {
    fn drop(&mut self) {
        let raw = self.0.as_ptr();
        // SAFETY: The reference taken in `CmId::get`, dropped once.
        unsafe {
            if let Some(rem_ref) = (*raw).rem_ref {
                rem_ref(raw);
            }
        }
    }
}

/// What a [`CmEvent`] reports (`enum iw_cm_event_type`).
///
/// # Examples
///
/// ```
/// use kernel::{
///     net::tcp::SocketAddrV4,
///     rdma::iwcm::{
///         CmEvent,
///         CmEventKind, //
///     },
/// };
///
/// let local = SocketAddrV4::new([10, 0, 0, 1], 40000);
/// let remote = SocketAddrV4::new([10, 0, 0, 2], 4791);
/// let event = CmEvent::new(CmEventKind::Established, local, remote);
/// assert_eq!(event.kind, CmEventKind::Established);
/// assert!(event.status.is_none());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum CmEventKind {
    /// A peer asks a listener for a connection.
    ConnectRequest = bindings::iw_cm_event_type_IW_CM_EVENT_CONNECT_REQUEST,
    /// The answer to a connection this side asked for (its status says which).
    ConnectReply = bindings::iw_cm_event_type_IW_CM_EVENT_CONNECT_REPLY,
    /// A connection this side accepted is up.
    Established = bindings::iw_cm_event_type_IW_CM_EVENT_ESTABLISHED,
    /// The peer closed the connection, or it broke.
    Disconnect = bindings::iw_cm_event_type_IW_CM_EVENT_DISCONNECT,
    /// The connection is gone: the last event of an identifier.
    Close = bindings::iw_cm_event_type_IW_CM_EVENT_CLOSE,
}

/// An event of a connection, reported with [`CmIdRef::report`].
///
/// # Examples
///
/// ```
/// use kernel::{
///     net::tcp::SocketAddrV4,
///     prelude::*,
///     rdma::iwcm::{
///         CmEvent,
///         CmEventKind, //
///     },
/// };
///
/// let local = SocketAddrV4::new([10, 0, 0, 1], 40000);
/// let remote = SocketAddrV4::new([10, 0, 0, 2], 4791);
///
/// // The peer rejected the connection, saying why in its private data.
/// let rejected = CmEvent {
///     status: Some(ECONNREFUSED),
///     private_data: b"busy",
///     ..CmEvent::new(CmEventKind::ConnectReply, local, remote)
/// };
/// assert_eq!(rejected.status, Some(ECONNREFUSED));
/// assert_eq!(rejected.private_data.len(), 4);
///
/// // A connection request for a listener, found again later by its token.
/// let request = CmEvent {
///     token: 7,
///     ird: 8,
///     ord: 8,
///     ..CmEvent::new(CmEventKind::ConnectRequest, remote, local)
/// };
/// assert_eq!(request.token, 7);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct CmEvent<'a> {
    /// What happened.
    pub kind: CmEventKind,
    /// Why it failed, if it did.
    pub status: Option<Error>,
    /// The connection's local address.
    pub local: SocketAddrV4,
    /// The peer's address.
    pub remote: SocketAddrV4,
    /// The peer's private data (connection request and reply).
    pub private_data: &'a [u8],
    /// For a connection request: the token of the identifier made for it.
    pub token: usize,
    /// The inbound RDMA Read depth (connection request).
    pub ird: u8,
    /// The outbound RDMA Read depth (connection request).
    pub ord: u8,
}

impl<'a> CmEvent<'a> {
    /// An event of `kind` between `local` and `remote`, without status or data.
    pub fn new(kind: CmEventKind, local: SocketAddrV4, remote: SocketAddrV4) -> Self {
        Self {
            kind,
            status: None,
            local,
            remote,
            private_data: &[],
            token: 0,
            ird: 0,
            ord: 0,
        }
    }
}

/// The parameters of a connection a consumer makes or accepts (`struct iw_cm_conn_param`).
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::iwcm::ConnParam, //
/// };
///
/// // The inbound RDMA Read depth a device of at most `max` grants.
/// fn ird(param: &ConnParam<'_>, max: u32) -> Result<u8> {
///     Ok(u8::try_from(param.ird.min(max))?)
/// }
///
/// let param = ConnParam {
///     private_data: b"hello",
///     ord: 16,
///     ird: 16,
///     qpn: 2,
/// };
/// assert_eq!(ird(&param, 8)?, 8);
/// # Ok::<(), Error>(())
/// ```
pub struct ConnParam<'a> {
    /// The private data to send the peer.
    pub private_data: &'a [u8],
    /// The outbound RDMA Read depth asked for.
    pub ord: u32,
    /// The inbound RDMA Read depth asked for.
    pub ird: u32,
    /// The number of the queue pair to connect.
    pub qpn: u32,
}

impl ConnParam<'_> {
    /// Reads the parameters the connection manager passed.
    ///
    /// # Safety
    ///
    /// `raw` must point to valid parameters whose private data stays valid for `'a`.
    pub(crate) unsafe fn from_raw<'a>(raw: *const bindings::iw_cm_conn_param) -> ConnParam<'a> {
        // SAFETY: Guaranteed by the caller.
        let p = unsafe { &*raw };
        let private_data = if p.private_data.is_null() || p.private_data_len == 0 {
            &[][..]
        } else {
            // SAFETY: The consumer's buffer of `private_data_len` bytes (caller's guarantee).
            unsafe {
                core::slice::from_raw_parts(p.private_data.cast(), usize::from(p.private_data_len))
            }
        };
        ConnParam {
            private_data,
            ord: p.ord,
            ird: p.ird,
            qpn: p.qpn,
        }
    }
}
