// SPDX-License-Identifier: GPL-2.0

//! The verbs' state machine of queue pairs, as every queue pair of the driver follows it (those
//! of the adapter and compat mode's software GSI QP).

use kernel::{
    prelude::*,
    rdma::{
        qp as ibqp,
        QpAttr,
        QpAttrBit,
        QpAttrMask,
        QpState,
        QpType, //
    },
};

/// The state a modify moves a queue pair of type `qp_type` to from `known` (or the current
/// state the caller gives), if the verbs allow the transition with these attributes
/// (erdma_rs_hw 7.2: P_Key index 0 only).
pub(crate) fn transition(
    qp_type: QpType,
    known: QpState,
    attr: &QpAttr<'_>,
    mask: QpAttrMask,
) -> Result<QpState> {
    let cur = if mask.contains(QpAttrBit::CurState) {
        attr.cur_state().ok_or(EINVAL)?
    } else {
        known
    };
    let next = if mask.contains(QpAttrBit::State) {
        attr.state().ok_or(EINVAL)?
    } else {
        cur
    };
    if !ibqp::modify_is_ok(cur, next, qp_type, mask)
        || (mask.contains(QpAttrBit::PkeyIndex) && attr.pkey_index() != 0)
    {
        return Err(EINVAL);
    }
    Ok(next)
}
