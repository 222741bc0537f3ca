// SPDX-License-Identifier: GPL-2.0

//! Queue pairs (`struct ib_qp`) and their attributes.
//!
//! # Examples
//!
//! ```
//! use kernel::rdma::{
//!     qp::modify_is_ok,
//!     QpAttrBit,
//!     QpAttrMask,
//!     QpState,
//!     QpType, //
//! };
//!
//! // Moving an RC queue pair from reset to init takes its port, partition key and access rights.
//! let mask: QpAttrMask =
//!     QpAttrBit::State | QpAttrBit::PkeyIndex | QpAttrBit::Port | QpAttrBit::AccessFlags;
//! assert!(modify_is_ok(QpState::Reset, QpState::Init, QpType::Rc, mask));
//!
//! // It cannot go from reset to ready to send in one step.
//! assert!(!modify_is_ok(QpState::Reset, QpState::Rts, QpType::Rc, QpAttrBit::State.into()));
//! ```

use super::{
    ah::AhAttr,
    c_enum,
    cq::{Cq, Pd},
    mr::AccessFlags,
    object::{
        kind,
        Events,
        Object, //
    },
    ucontext::UContext,
    Driver,
};
use crate::bindings;
use core::marker::PhantomData;

/// A queue pair of a device of `T`.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     self,
///     Qp, //
/// };
///
/// // The driver's part of a queue pair: the depth of its send queue.
/// struct MyQp {
///     sq_depth: u32,
/// }
///
/// fn log_qp<T: rdma::Driver<Qp = MyQp>>(qp: &Qp<T>) {
///     pr_debug!("QP {}: {} send WRs\n", qp.qp_num(), qp.data().sq_depth);
/// }
/// ```
pub type Qp<T> = Object<kind::Qp, <T as Driver>::Qp>;

/// Reports queue-pair events: see [`Events::event`].
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     qp::QpEvent,
///     QpEvents, //
/// };
///
/// // Called by the driver's interrupt handler when the device reports that a peer accessed memory
/// // it has no rights on.
/// fn remote_access_error(qp: &QpEvents) {
///     qp.event(QpEvent::AccessError);
/// }
/// ```
pub type QpEvents = Events<kind::Qp>;

pub use super::object::QpEvent;

impl<D> Object<kind::Qp, D> {
    /// The queue pair's number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: The header is valid while the object lives; the number is set at creation.
        unsafe { (*self.as_raw()).qp_num }
    }
}

c_enum! {
    /// The transport service of a queue pair.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::{
    ///     prelude::*,
    ///     rdma::{
    ///         self,
    ///         QpInitAttr,
    ///         QpType, //
    ///     },
    /// };
    ///
    /// // A device that makes RC and UD queue pairs only.
    /// fn check_type<T: rdma::Driver>(attr: &QpInitAttr<'_, T>) -> Result<QpType> {
    ///     match attr.qp_type() {
    ///         Some(qp_type @ (QpType::Rc | QpType::Ud)) => Ok(qp_type),
    ///         _ => Err(EOPNOTSUPP),
    ///     }
    /// }
    ///
    /// assert_eq!(QpType::from_raw(QpType::Ud.to_raw()), Some(QpType::Ud));
    /// ```
    pub enum QpType {
        /// Subnet management (QP0).
        Smi = bindings::ib_qp_type_IB_QPT_SMI,
        /// General services (QP1).
        Gsi = bindings::ib_qp_type_IB_QPT_GSI,
        /// Reliable connected.
        Rc = bindings::ib_qp_type_IB_QPT_RC,
        /// Unreliable connected.
        Uc = bindings::ib_qp_type_IB_QPT_UC,
        /// Unreliable datagram.
        Ud = bindings::ib_qp_type_IB_QPT_UD,
    }
}

c_enum! {
    /// The state of a queue pair.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     QpAttr,
    ///     QpAttrBit,
    ///     QpAttrMask,
    ///     QpState, //
    /// };
    ///
    /// // The state a modification moves a queue pair to, if it names one.
    /// fn target_state(attr: &QpAttr<'_>, mask: QpAttrMask) -> Option<QpState> {
    ///     if mask.contains(QpAttrBit::State) {
    ///         attr.state()
    ///     } else {
    ///         None
    ///     }
    /// }
    ///
    /// assert_eq!(QpState::from_raw(QpState::Rts.to_raw()), Some(QpState::Rts));
    /// ```
    pub enum QpState {
        /// Reset.
        Reset = bindings::ib_qp_state_IB_QPS_RESET,
        /// Initialised.
        Init = bindings::ib_qp_state_IB_QPS_INIT,
        /// Ready to receive.
        Rtr = bindings::ib_qp_state_IB_QPS_RTR,
        /// Ready to send.
        Rts = bindings::ib_qp_state_IB_QPS_RTS,
        /// Send queue drain.
        Sqd = bindings::ib_qp_state_IB_QPS_SQD,
        /// Send queue error.
        Sqe = bindings::ib_qp_state_IB_QPS_SQE,
        /// Error.
        Err = bindings::ib_qp_state_IB_QPS_ERR,
    }
}

crate::impl_flags!(
    /// Creation flags of a queue pair (`enum ib_qp_create_flags`): the ones a kernel consumer
    /// may ask of an RC or UD queue pair are named; others are kept, see
    /// [`QpCreateFlags::unnamed`].
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     QpCreateFlag,
    ///     QpCreateFlags, //
    /// };
    ///
    /// let flags: QpCreateFlags = QpCreateFlag::BlockMulticastLoopback.into();
    /// assert!(flags.contains(QpCreateFlag::BlockMulticastLoopback));
    /// assert!(!flags.contains(QpCreateFlag::ScatterFcs));
    /// assert_eq!(flags.unnamed(), 0);
    /// assert!(QpCreateFlags::empty().is_empty());
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct QpCreateFlags(u32);

    /// One creation flag.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::{
    ///     prelude::*,
    ///     rdma::{
    ///         self,
    ///         QpCreateFlag,
    ///         QpInitAttr, //
    ///     },
    /// };
    ///
    /// // A device whose only creation flag, named or not, keeps multicast from looping back.
    /// fn check_create_flags<T: rdma::Driver>(attr: &QpInitAttr<'_, T>) -> Result {
    ///     let flags = attr.create_flags();
    ///     if flags.unnamed() != 0 || flags.contains_any(!QpCreateFlag::BlockMulticastLoopback) {
    ///         return Err(EOPNOTSUPP);
    ///     }
    ///     Ok(())
    /// }
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    // CAST: the C enum is signed (a negative sentinel ends it); the flags are bits of the
    // `u32` field `create_flags`.
    pub enum QpCreateFlag {
        /// Multicast sent by the QP does not loop back to it.
        BlockMulticastLoopback =
            bindings::ib_qp_create_flags_IB_QP_CREATE_BLOCK_MULTICAST_LOOPBACK as u32,
        /// The integrity handover of signature offload.
        IntegrityEn = bindings::ib_qp_create_flags_IB_QP_CREATE_INTEGRITY_EN as u32,
        /// Received packets keep their FCS.
        ScatterFcs = bindings::ib_qp_create_flags_IB_QP_CREATE_SCATTER_FCS as u32,
        /// Received packets have their customer VLAN tag stripped.
        CvlanStripping = bindings::ib_qp_create_flags_IB_QP_CREATE_CVLAN_STRIPPING as u32,
        /// Received data that ends inside a cache line is padded to its end.
        PciWriteEndPadding = bindings::ib_qp_create_flags_IB_QP_CREATE_PCI_WRITE_END_PADDING as u32,
    }
);

open_flags!(QpCreateFlags, u32);

crate::impl_flags!(
    /// Which attributes a modification sets (`enum ib_qp_attr_mask`); bits this abstraction
    /// does not name are kept.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{
    ///     QpAttrBit,
    ///     QpAttrMask, //
    /// };
    ///
    /// let mask: QpAttrMask = QpAttrBit::State | QpAttrBit::DestQpn | QpAttrBit::RqPsn;
    /// assert!(mask.contains(QpAttrBit::DestQpn));
    /// assert!(!mask.contains_any(QpAttrBit::SqPsn | QpAttrBit::Timeout));
    /// ```
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct QpAttrMask(u32);

    /// One attribute a modification may set.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::{
    ///     prelude::*,
    ///     rdma::{
    ///         QpAttr,
    ///         QpAttrBit,
    ///         QpAttrMask, //
    ///     },
    /// };
    ///
    /// // The peer's queue pair number and first PSN, which a move to RTR must set.
    /// fn rtr_params(attr: &QpAttr<'_>, mask: QpAttrMask) -> Result<(u32, u32)> {
    ///     if !mask.contains_all(QpAttrBit::DestQpn | QpAttrBit::RqPsn) {
    ///         return Err(EINVAL);
    ///     }
    ///     Ok((attr.dest_qp_num(), attr.rq_psn()))
    /// }
    /// ```
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum QpAttrBit {
        /// The state.
        State = bindings::ib_qp_attr_mask_IB_QP_STATE,
        /// The current state the caller believes the queue pair is in.
        CurState = bindings::ib_qp_attr_mask_IB_QP_CUR_STATE,
        /// Access flags for incoming RDMA operations.
        AccessFlags = bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS,
        /// The P_Key index.
        PkeyIndex = bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX,
        /// The port.
        Port = bindings::ib_qp_attr_mask_IB_QP_PORT,
        /// The Q_Key.
        Qkey = bindings::ib_qp_attr_mask_IB_QP_QKEY,
        /// The address vector of the peer.
        Av = bindings::ib_qp_attr_mask_IB_QP_AV,
        /// The path MTU.
        PathMtu = bindings::ib_qp_attr_mask_IB_QP_PATH_MTU,
        /// The receive queue's first PSN.
        RqPsn = bindings::ib_qp_attr_mask_IB_QP_RQ_PSN,
        /// The send queue's first PSN.
        SqPsn = bindings::ib_qp_attr_mask_IB_QP_SQ_PSN,
        /// The peer's queue pair number.
        DestQpn = bindings::ib_qp_attr_mask_IB_QP_DEST_QPN,
        /// The local ACK timeout.
        Timeout = bindings::ib_qp_attr_mask_IB_QP_TIMEOUT,
    }
);

impl QpAttrMask {
    /// The mask of the C value `raw`, unnamed bits included.
    pub(crate) const fn from_raw(raw: u32) -> Self {
        Self(raw)
    }
}

/// Whether the transition from `cur` to `next` with the attributes `mask` is one the verbs
/// specification allows for a queue pair of type `qp_type` (RoCE ports).
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         qp::modify_is_ok,
///         QpAttr,
///         QpAttrMask,
///         QpState,
///         QpType, //
///     },
/// };
///
/// // Checks a modification of an RC queue pair in state `cur` (`DeviceOps::modify_qp`).
/// fn check_modify(cur: QpState, attr: &QpAttr<'_>, mask: QpAttrMask) -> Result<QpState> {
///     let next = attr.state().unwrap_or(cur);
///     if !modify_is_ok(cur, next, QpType::Rc, mask) {
///         return Err(EINVAL);
///     }
///     Ok(next)
/// }
/// ```
pub fn modify_is_ok(cur: QpState, next: QpState, qp_type: QpType, mask: QpAttrMask) -> bool {
    // SAFETY: A pure function of its arguments.
    unsafe { bindings::ib_modify_qp_is_ok(cur.to_raw(), next.to_raw(), qp_type.to_raw(), mask.0) }
}

/// The UDP source port RoCEv2 uses for the flow of a queue pair: from the flow label, or
/// derived from both queue pair numbers when it is 0.
///
/// # Examples
///
/// ```
/// use kernel::rdma::qp::udp_sport;
///
/// // Without a flow label, the port comes from both queue pair numbers; it is always one of
/// // the ports RoCEv2 reserves for source ports (from 0xc000).
/// assert!(udp_sport(0, 17, 42) >= 0xc000);
/// assert_eq!(udp_sport(1, 17, 42), 0xc001);
/// ```
pub fn udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    // SAFETY: A pure function of its arguments.
    unsafe { bindings::rdma_get_udp_sport(flow_label, lqpn, rqpn) }
}

/// The UDP source port RoCEv2 uses for a flow label (not 0).
///
/// # Examples
///
/// ```
/// use kernel::rdma::qp::flow_label_udp_sport;
///
/// assert_eq!(flow_label_udp_sport(1), 0xc001);
/// ```
pub fn flow_label_udp_sport(flow_label: u32) -> u16 {
    // SAFETY: A pure function of its argument.
    unsafe { bindings::rdma_flow_label_to_udp_sport(flow_label) }
}

/// The sizes of a queue pair's queues (`struct ib_qp_cap`).
///
/// # Examples
///
/// ```
/// use kernel::rdma::QpCap;
///
/// // The sizes a device grants: the work queues rounded up to powers of two.
/// fn granted(asked: QpCap) -> QpCap {
///     QpCap {
///         max_send_wr: asked.max_send_wr.next_power_of_two(),
///         max_recv_wr: asked.max_recv_wr.next_power_of_two(),
///         ..asked
///     }
/// }
///
/// let asked = QpCap {
///     max_send_wr: 100,
///     max_recv_wr: 64,
///     max_send_sge: 2,
///     max_recv_sge: 1,
///     ..Default::default()
/// };
/// let cap = granted(asked);
/// assert_eq!((cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge), (128, 64, 2));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct QpCap {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send work request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive work request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send work request.
    pub max_inline_data: u32,
}

impl QpCap {
    fn from_raw(c: &bindings::ib_qp_cap) -> Self {
        Self {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        }
    }

    fn to_raw(self) -> bindings::ib_qp_cap {
        bindings::ib_qp_cap {
            max_send_wr: self.max_send_wr,
            max_recv_wr: self.max_recv_wr,
            max_send_sge: self.max_send_sge,
            max_recv_sge: self.max_recv_sge,
            max_inline_data: self.max_inline_data,
            max_rdma_ctxs: 0,
        }
    }
}

/// What the creator of a queue pair asks for.
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         self,
///         QpCap,
///         QpInitAttr,
///         QpType, //
///     },
/// };
///
/// // Checks what a creator asks of an RC queue pair.
/// fn check_init_attr<T: rdma::Driver>(attr: &QpInitAttr<'_, T>, max: QpCap) -> Result<QpCap> {
///     if attr.qp_type() != Some(QpType::Rc) || attr.has_srq() || !attr.create_flags().is_empty() {
///         return Err(EOPNOTSUPP);
///     }
///     if attr.send_cq().is_none() || attr.recv_cq().is_none() {
///         return Err(EINVAL);
///     }
///     let cap = attr.cap();
///     if cap.max_send_wr > max.max_send_wr || cap.max_send_sge > max.max_send_sge {
///         return Err(EINVAL);
///     }
///     Ok(cap)
/// }
/// ```
pub struct QpInitAttr<'a, T: Driver> {
    raw: &'a bindings::ib_qp_init_attr,
    _p: PhantomData<T>,
}

impl<'a, T: Driver> QpInitAttr<'a, T> {
    /// The transport service, `None` for one this abstraction does not name.
    pub fn qp_type(&self) -> Option<QpType> {
        QpType::from_raw(self.raw.qp_type)
    }

    /// The queue sizes.
    pub fn cap(&self) -> QpCap {
        QpCap::from_raw(&self.raw.cap)
    }

    /// Whether every send work request completes with a completion entry.
    pub fn sq_sig_all(&self) -> bool {
        self.raw.sq_sig_type == bindings::ib_sig_type_IB_SIGNAL_ALL_WR
    }

    /// Whether the receive side is a shared receive queue.
    pub fn has_srq(&self) -> bool {
        !self.raw.srq.is_null()
    }

    /// Creation flags.
    pub fn create_flags(&self) -> QpCreateFlags {
        QpCreateFlags::from_raw(self.raw.create_flags)
    }

    /// The completion queue of the send queue.
    pub fn send_cq(&self) -> Option<&'a Cq<T>> {
        // SAFETY: The core passes CQs of this device, live during the call and beyond (the QP
        // holds a reference on them).
        unsafe { self.raw.send_cq.as_mut().map(|cq| Cq::<T>::from_raw(cq)) }
    }

    /// The completion queue of the receive queue.
    pub fn recv_cq(&self) -> Option<&'a Cq<T>> {
        // SAFETY: As in `send_cq`.
        unsafe { self.raw.recv_cq.as_mut().map(|cq| Cq::<T>::from_raw(cq)) }
    }
}

/// What a driver has while creating a queue pair.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     self,
///     QpEvents,
///     QpSetup, //
/// };
///
/// // The driver's part of a queue pair: the handle its interrupt handler reports events through.
/// struct MyQp {
///     events: QpEvents,
/// }
///
/// // Numbers the new queue pair `qpn` and keeps its event handle.
/// fn setup_qp<T: rdma::Driver>(setup: &QpSetup<'_, T>, qpn: u32) -> MyQp {
///     setup.set_qp_num(qpn);
///     MyQp {
///         events: setup.events(),
///     }
/// }
/// ```
pub struct QpSetup<'a, T: Driver> {
    pub(crate) qp: *mut bindings::ib_qp,
    pub(crate) events: &'a QpEvents,
    pub(crate) ucontext: Option<&'a UContext<T>>,
}

impl<T: Driver> QpSetup<'_, T> {
    /// The protection domain of the new queue pair.
    pub fn pd(&self) -> &Pd<T> {
        // SAFETY: The core set the PD of this device before calling create, and holds a
        // reference on it for the QP's life.
        unsafe { Pd::<T>::from_raw((*self.qp).pd) }
    }

    /// A handle to report events of the new queue pair; it stays usable (and does nothing)
    /// after the queue pair is destroyed.
    pub fn events(&self) -> QpEvents {
        self.events.clone()
    }

    /// The driver's part of the calling user context, for a user queue pair.
    pub fn ucontext(&self) -> Option<&T::UContext> {
        self.ucontext.map(|c| c.data())
    }

    /// Sets the number of the new queue pair.
    pub fn set_qp_num(&self, qpn: u32) {
        // SAFETY: The core is creating the QP and reads the number only after creation.
        unsafe { (*self.qp).qp_num = qpn };
    }
}

/// The attributes of a queue-pair modification (`struct ib_qp_attr`); only those in the
/// accompanying [`QpAttrMask`] are meaningful.
///
/// # Examples
///
/// ```
/// use kernel::rdma::{
///     QpAttr,
///     QpAttrBit,
///     QpAttrMask, //
/// };
///
/// // The PSNs a modification sets, each only if the mask names it.
/// fn psns(attr: &QpAttr<'_>, mask: QpAttrMask) -> (Option<u32>, Option<u32>) {
///     (
///         mask.contains(QpAttrBit::SqPsn).then(|| attr.sq_psn()),
///         mask.contains(QpAttrBit::RqPsn).then(|| attr.rq_psn()),
///     )
/// }
/// ```
pub struct QpAttr<'a>(&'a bindings::ib_qp_attr);

impl QpAttr<'_> {
    /// The target state, `None` if unknown.
    pub fn state(&self) -> Option<QpState> {
        QpState::from_raw(self.0.qp_state)
    }

    /// The state the caller believes the queue pair is in.
    pub fn cur_state(&self) -> Option<QpState> {
        QpState::from_raw(self.0.cur_qp_state)
    }

    /// The Q_Key.
    pub fn qkey(&self) -> u32 {
        self.0.qkey
    }

    /// The receive queue's first PSN.
    pub fn rq_psn(&self) -> u32 {
        self.0.rq_psn
    }

    /// The send queue's first PSN.
    pub fn sq_psn(&self) -> u32 {
        self.0.sq_psn
    }

    /// The peer's queue pair number.
    pub fn dest_qp_num(&self) -> u32 {
        self.0.dest_qp_num
    }

    /// The P_Key index.
    pub fn pkey_index(&self) -> u16 {
        self.0.pkey_index
    }

    /// The local ACK timeout (4.096 µs times 2 to this power; 0: infinite).
    pub fn timeout(&self) -> u8 {
        self.0.timeout
    }

    /// The peer's address.
    pub fn ah_attr(&self) -> AhAttr<'_> {
        AhAttr(&self.0.ah_attr)
    }
}

/// The attributes a query reports (`struct ib_qp_attr` and `struct ib_qp_init_attr`).
///
/// # Examples
///
/// ```
/// use kernel::{
///     prelude::*,
///     rdma::{
///         attr::Mtu,
///         AccessFlag,
///         QpAttrOut,
///         QpCap,
///         QpState, //
///     },
/// };
///
/// // Reports a connected queue pair (`DeviceOps::query_qp`).
/// fn query_qp(out: &mut QpAttrOut<'_>, dest_qpn: u32, cap: QpCap) -> Result {
///     out.set_state(QpState::Rts, false)
///         .set_dest_qp_num(dest_qpn)
///         .set_path_mtu(Mtu::Mtu1024)
///         .set_port(1)
///         .set_access_flags(AccessFlag::LocalWrite | AccessFlag::RemoteRead)
///         .set_rd_atomic(8, 8)
///         .set_cap(cap)
///         .set_sq_sig_all(false);
///     Ok(())
/// }
/// ```
pub struct QpAttrOut<'a> {
    attr: &'a mut bindings::ib_qp_attr,
    init: &'a mut bindings::ib_qp_init_attr,
}

impl QpAttrOut<'_> {
    /// The current state; `sq_draining` tells whether the send queue is still draining.
    pub fn set_state(&mut self, state: QpState, sq_draining: bool) -> &mut Self {
        self.attr.qp_state = state.to_raw();
        self.attr.cur_qp_state = state.to_raw();
        self.attr.sq_draining = sq_draining.into();
        self
    }

    /// The PSNs.
    pub fn set_psns(&mut self, sq_psn: u32, rq_psn: u32) -> &mut Self {
        self.attr.sq_psn = sq_psn;
        self.attr.rq_psn = rq_psn;
        self
    }

    /// The peer's queue pair number.
    pub fn set_dest_qp_num(&mut self, qpn: u32) -> &mut Self {
        self.attr.dest_qp_num = qpn;
        self
    }

    /// The Q_Key.
    pub fn set_qkey(&mut self, qkey: u32) -> &mut Self {
        self.attr.qkey = qkey;
        self
    }

    /// The local ACK timeout.
    pub fn set_timeout(&mut self, timeout: u8) -> &mut Self {
        self.attr.timeout = timeout;
        self
    }

    /// The path MTU (`enum ib_mtu`).
    pub fn set_path_mtu(&mut self, mtu: super::attr::Mtu) -> &mut Self {
        self.attr.path_mtu = mtu.to_raw();
        self
    }

    /// The port.
    pub fn set_port(&mut self, port: u32) -> &mut Self {
        self.attr.port_num = port;
        self
    }

    /// Access flags for incoming RDMA operations.
    pub fn set_access_flags(&mut self, flags: AccessFlags) -> &mut Self {
        // CAST: the rights are a set of small bits.
        self.attr.qp_access_flags = u32::from(flags) as i32;
        self
    }

    /// Outstanding RDMA Reads and atomics, initiated and served.
    pub fn set_rd_atomic(&mut self, initiator: u8, target: u8) -> &mut Self {
        self.attr.max_rd_atomic = initiator;
        self.attr.max_dest_rd_atomic = target;
        self
    }

    /// The queue sizes, reported in both structures.
    pub fn set_cap(&mut self, cap: QpCap) -> &mut Self {
        self.attr.cap = cap.to_raw();
        self.init.cap = cap.to_raw();
        self
    }

    /// Whether every send work request completes with a completion entry.
    pub fn set_sq_sig_all(&mut self, all: bool) -> &mut Self {
        self.init.sq_sig_type = if all {
            bindings::ib_sig_type_IB_SIGNAL_ALL_WR
        } else {
            bindings::ib_sig_type_IB_SIGNAL_REQ_WR
        };
        self
    }
}

/// Builds the typed views of the core's queue-pair structures.
pub(crate) mod raw {
    use super::*;

    /// # Safety
    ///
    /// `attr` must be valid for `'a`.
    pub(crate) unsafe fn init_attr<'a, T: Driver>(
        attr: *const bindings::ib_qp_init_attr,
    ) -> QpInitAttr<'a, T> {
        QpInitAttr {
            // SAFETY: Guaranteed by the caller.
            raw: unsafe { &*attr },
            _p: PhantomData,
        }
    }

    /// # Safety
    ///
    /// `attr` must be valid for `'a`.
    pub(crate) unsafe fn attr<'a>(attr: *const bindings::ib_qp_attr) -> QpAttr<'a> {
        // SAFETY: Guaranteed by the caller.
        QpAttr(unsafe { &*attr })
    }

    /// # Safety
    ///
    /// Both must be valid for writes for `'a`.
    pub(crate) unsafe fn attr_out<'a>(
        attr: *mut bindings::ib_qp_attr,
        init: *mut bindings::ib_qp_init_attr,
    ) -> QpAttrOut<'a> {
        // SAFETY: Guaranteed by the caller.
        unsafe {
            QpAttrOut {
                attr: &mut *attr,
                init: &mut *init,
            }
        }
    }
}
