# SPDX-License-Identifier: GPL-2.0
"""The attributes that bring an RC queue pair to RTS by ibv_modify_qp alone,
the RoCE way (the peer's GID, QPN and PSN known out of band), as the tests'
scripts build them (keys_probe.py, failnth.py, nccl_like.py). pyverbs is
imported when they are built, so a script that imports this module loads
without it."""


def rc_rts_attr(port, dest_qpn, dgid, sgid_index, path_mtu=None, sq_psn=0, rq_psn=0,
                retries=7, timeout=14, access=None):
    """A QPAttr for INIT -> RTR -> RTS (QP.to_rts) towards QP dest_qpn at GID
    dgid, from the local GID at sgid_index: one outstanding read or atomic
    each way, `retries` for both the transport and RNR retries, the IB
    `timeout` exponent, the access flags `access` if given, path MTU 1024
    unless given."""
    import pyverbs.enums as e
    from pyverbs.addr import AHAttr, GlobalRoute
    from pyverbs.qp import QPAttr

    attr = QPAttr(port_num=port)
    attr.path_mtu = e.IBV_MTU_1024 if path_mtu is None else path_mtu
    attr.dest_qp_num = dest_qpn
    attr.sq_psn = sq_psn
    attr.rq_psn = rq_psn
    attr.max_dest_rd_atomic = 1
    attr.max_rd_atomic = 1
    attr.min_rnr_timer = 12
    attr.timeout = timeout
    attr.retry_cnt = retries
    attr.rnr_retry = retries
    if access is not None:
        attr.qp_access_flags = access
    attr.ah_attr = AHAttr(port_num=port, is_global=1, gr=GlobalRoute(dgid=dgid, sgid_index=sgid_index))
    return attr
