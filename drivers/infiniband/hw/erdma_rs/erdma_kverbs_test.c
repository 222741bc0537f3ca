// SPDX-License-Identifier: GPL-2.0
/*
 * Kernel-consumer test of eRDMA devices (erdma_rs or the upstream erdma):
 * RC queue pairs between the first two RoCEv2 eRDMA devices, every opcode a
 * kernel user can post, with the bytes and the completions checked, and the
 * remote access errors (wrong rkey, wrong PD, an address outside the region,
 * missing rights, invalidated keys) seen on both sides: an error
 * completion at the requester, an error state and a fatal event at the
 * responder. Then draining (work posted after the move to ERROR completes
 * as flushed, bounded in time, not ib_drain_qp's unbounded wait), a QP going
 * back to RESET with completions still in its CQ, and UD: address handles
 * (created and destroyed where sleeping is allowed and under a spinlock),
 * datagrams with the 40-byte network header the RDMA core parses, Q_Keys,
 * and address handles of another PD or another device.
 *
 * Loading the module runs the test and prints one line per check,
 * "erdma_kverbs_test: ok N - ..." or "not ok N - ...", then a summary line;
 * the module stays loaded (and idle) until removed. This is a test module:
 * nothing but the selftests loads it.
 *
 * Posting to a QP in ERROR where sleeping is not allowed (from its CQ's
 * completion handler, in softirq, and under a spinlock with interrupts off)
 * completes every request as flushed; erdma needs a REFLUSH command for
 * that, which a post path must not wait for. The debug kernel's atomic-sleep
 * checks and lockdep watch; the longest post is printed. With
 * atomic_post_only=1 only this test runs, on the first eRDMA device of
 * either protocol (iWARP adapters have no connection-less RC set-up). With
 * max_post_us=N a post that takes longer fails the test: the selftest sets it
 * while the model holds REFLUSH completions back, so that a driver that waits
 * for the command in its post path cannot pass.
 *
 * Loaded with sweep_device=NAME it tests nothing: each write of an object's
 * name to its parameter "sweep" (/sys/module/erdma_kverbs_test/parameters/
 * sweep) creates and destroys one kernel consumer's object of that kind on
 * device NAME, in the writer's thread, and the write fails with the error
 * the creation met (the fail-nth sweeps of failnth.py fail allocations one
 * at a time under the driver): dma_mr (a PD with the unsafe global rkey and
 * a DMA region of the driver's), cq, qp, qp_rts (RoCEv2: to RTS towards
 * itself), frmr (fast-registration regions of 4 and of 512 pages) and ah
 * (RoCEv2: where sleeping is allowed and where it is not).
 *
 * With bench_seconds=N it measures instead (make bench): bench_qps RC QP
 * pairs between the first two RoCEv2 devices of any driver, each requester
 * QP with a CQ of its own on completion vector i (modulo the device's
 * vectors), polled by the RDMA core from the CQ's interrupt (IB_POLL_SOFTIRQ);
 * every completion re-posts its 64-byte RDMA Write, for N seconds. It prints
 * "bench: cq_completions R per_s" with R the completions per second.
 */

#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/delay.h>
#include <linux/netdevice.h>
#include <linux/ktime.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <net/ipv6.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_verbs.h>

#define BUF_SIZE 8192
#define POLL_MS 5000

static unsigned int bench_seconds;
module_param(bench_seconds, uint, 0444);
MODULE_PARM_DESC(bench_seconds, "measure kernel CQ completions for this long instead of testing");
static unsigned int bench_qps = 4;
module_param(bench_qps, uint, 0444);
MODULE_PARM_DESC(bench_qps, "QP pairs of the measurement, each with its own CQ and vector");

static unsigned int max_post_us;
module_param(max_post_us, uint, 0444);
MODULE_PARM_DESC(max_post_us, "fail if a post to a QP in ERROR takes longer (0: no bound)");
static bool atomic_post_only;
module_param(atomic_post_only, bool, 0444);
MODULE_PARM_DESC(atomic_post_only, "only post to a QP in ERROR from atomic context, on one device of either protocol");
static char sweep_device[IB_DEVICE_NAME_MAX];
module_param_string(sweep_device, sweep_device, sizeof(sweep_device), 0444);
MODULE_PARM_DESC(sweep_device, "test nothing: the device of the sweep parameter's objects");

#define BENCH_MAX_QPS 32
#define BENCH_WINDOW 8
#define BENCH_BYTES 64

static struct ib_device *devs[2];
static int ndevs;
static int checks, failures;

static void check(bool ok, const char *what, ...)
{
	struct va_format vaf;
	va_list args;

	va_start(args, what);
	vaf.fmt = what;
	vaf.va = &args;
	checks++;
	if (!ok)
		failures++;
	pr_info("%s %d - %pV\n", ok ? "ok" : "not ok", checks, &vaf);
	va_end(args);
}

struct side {
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_pd *pd2;	/* another PD, for PD mismatches */
	struct ib_cq *cq;
	struct ib_qp *qp;
	u8 *buf;
	u64 dma;
	int gid_index;
	union ib_gid gid;
	atomic_t fatal;
	bool polled_by_core;
};

static struct side sides[2];

static void qp_event(struct ib_event *ev, void *ctx)
{
	struct side *s = ctx;

	if (ev->event == IB_EVENT_QP_FATAL || ev->event == IB_EVENT_QP_ACCESS_ERR)
		atomic_inc(&s->fatal);
}

/* The RoCEv2 GID of the device's IPv4 address. */
static int find_gid(struct side *s)
{
	const struct ib_gid_attr *attr;
	int i;

	for (i = 0; i < s->dev->port_data[1].immutable.gid_tbl_len; i++) {
		attr = rdma_get_gid_attr(s->dev, 1, i);
		if (IS_ERR(attr))
			continue;
		if (attr->gid_type == IB_GID_TYPE_ROCE_UDP_ENCAP &&
		    ipv6_addr_v4mapped((struct in6_addr *)attr->gid.raw)) {
			s->gid_index = i;
			s->gid = attr->gid;
			rdma_put_gid_attr(attr);
			return 0;
		}
		rdma_put_gid_attr(attr);
	}
	return -ENOENT;
}

/*
 * A side's CQ: polled by the test itself, or (vector >= 0, the benchmark)
 * polled by the core from that completion vector's interrupt.
 */
static int side_init(struct side *s, struct ib_device *dev, int vector)
{
	struct ib_cq_init_attr cq_attr = { .cqe = 64 };

	s->dev = dev;
	if (find_gid(s))
		return -ENOENT;
	s->pd = ib_alloc_pd(dev, IB_PD_UNSAFE_GLOBAL_RKEY);
	if (IS_ERR(s->pd))
		return PTR_ERR(s->pd);
	s->pd2 = ib_alloc_pd(dev, IB_PD_UNSAFE_GLOBAL_RKEY);
	if (IS_ERR(s->pd2))
		return PTR_ERR(s->pd2);
	if (vector >= 0) {
		s->polled_by_core = true;
		s->cq = ib_alloc_cq(dev, s, 64, vector % dev->num_comp_vectors, IB_POLL_SOFTIRQ);
	} else {
		s->cq = ib_create_cq(dev, NULL, NULL, NULL, &cq_attr);
	}
	if (IS_ERR(s->cq))
		return PTR_ERR(s->cq);
	s->buf = kzalloc(BUF_SIZE, GFP_KERNEL);
	if (!s->buf)
		return -ENOMEM;
	s->dma = ib_dma_map_single(dev, s->buf, BUF_SIZE, DMA_BIDIRECTIONAL);
	return ib_dma_mapping_error(dev, s->dma) ? -ENOMEM : 0;
}

static void side_fini(struct side *s)
{
	if (s->qp && !IS_ERR(s->qp))
		ib_destroy_qp(s->qp);
	if (s->buf && s->dma)
		ib_dma_unmap_single(s->dev, s->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	kfree(s->buf);
	if (s->cq && !IS_ERR(s->cq)) {
		if (s->polled_by_core)
			ib_free_cq(s->cq);
		else
			ib_destroy_cq(s->cq);
	}
	if (s->pd2 && !IS_ERR(s->pd2))
		ib_dealloc_pd(s->pd2);
	if (s->pd && !IS_ERR(s->pd))
		ib_dealloc_pd(s->pd);
}

static int qp_create(struct side *s);
static int qp_connect(struct side *s, struct side *peer);

/* The benchmark: one requester per QP pair, re-posting from its completions. */
struct bench_qp {
	struct side side[2];
	struct ib_cqe cqe;
	struct ib_sge sge;
	struct ib_rdma_wr wr;
	atomic_t inflight;
};

static struct bench_qp *bqs;
static atomic64_t bench_done, bench_errors;
static bool bench_stop;

static void bench_post(struct bench_qp *bq)
{
	atomic_inc(&bq->inflight);
	if (ib_post_send(bq->side[0].qp, &bq->wr.wr, NULL)) {
		atomic_dec(&bq->inflight);
		atomic64_inc(&bench_errors);
	}
}

static void bench_complete(struct ib_cq *cq, struct ib_wc *wc)
{
	struct bench_qp *bq = container_of(wc->wr_cqe, struct bench_qp, cqe);

	atomic_dec(&bq->inflight);
	if (wc->status != IB_WC_SUCCESS) {
		atomic64_inc(&bench_errors);
		return;
	}
	atomic64_inc(&bench_done);
	if (!READ_ONCE(bench_stop))
		bench_post(bq);
}

static int bench_setup(struct bench_qp *bq, int i)
{
	struct side *a = &bq->side[0], *b = &bq->side[1];
	int ret;

	ret = side_init(a, devs[0], i) ?: side_init(b, devs[1], i);
	if (ret)
		return ret;
	ret = qp_create(a) ?: qp_create(b);
	if (ret)
		return ret;
	ret = qp_connect(a, b) ?: qp_connect(b, a);
	if (ret)
		return ret;
	bq->cqe.done = bench_complete;
	bq->sge = (struct ib_sge){ .addr = a->dma, .length = BENCH_BYTES,
				   .lkey = a->pd->local_dma_lkey };
	bq->wr = (struct ib_rdma_wr){
		.wr = { .wr_cqe = &bq->cqe, .sg_list = &bq->sge, .num_sge = 1,
			.opcode = IB_WR_RDMA_WRITE, .send_flags = IB_SEND_SIGNALED },
		.remote_addr = b->dma,
		.rkey = b->pd->unsafe_global_rkey,
	};
	return 0;
}

static bool bench_drained(unsigned int n)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		if (atomic_read(&bqs[i].inflight))
			return false;
	return true;
}

static void bench(void)
{
	unsigned int n = clamp(bench_qps, 1U, (unsigned int)BENCH_MAX_QPS), i, k;
	u64 done, ms;
	ktime_t t0;
	int ret = 0, waited;

	bqs = kcalloc(n, sizeof(*bqs), GFP_KERNEL);
	if (!bqs) {
		pr_info("bench: FAILED: no memory\n");
		return;
	}
	for (i = 0; i < n && !ret; i++)
		ret = bench_setup(&bqs[i], i);
	if (ret) {
		pr_info("bench: FAILED: setting up QP pair %u: %d\n", i - 1, ret);
		goto out;
	}
	t0 = ktime_get();
	for (i = 0; i < n; i++)
		for (k = 0; k < BENCH_WINDOW; k++)
			bench_post(&bqs[i]);
	msleep(bench_seconds * 1000);
	WRITE_ONCE(bench_stop, true);
	done = atomic64_read(&bench_done);
	ms = ktime_ms_delta(ktime_get(), t0);
	for (waited = 0; waited < POLL_MS && !bench_drained(n); waited++)
		msleep(1);
	if (!bench_drained(n) || atomic64_read(&bench_errors)) {
		pr_info("bench: FAILED: %lld errors, %s\n", atomic64_read(&bench_errors),
			bench_drained(n) ? "all completed" : "completions missing after 5 s");
		goto out;
	}
	pr_info("bench: %u QPs on %s, %u completion vectors: %llu completions in %llu ms\n",
		n, dev_name(&devs[0]->dev), devs[0]->num_comp_vectors, done, ms);
	pr_info("bench: cq_completions %llu per_s\n", ms ? div64_u64(done * 1000, ms) : 0);
out:
	for (i = 0; i < n; i++) {
		side_fini(&bqs[i].side[0]);
		side_fini(&bqs[i].side[1]);
	}
	kfree(bqs);
}

static int qp_create(struct side *s)
{
	struct ib_qp_init_attr attr = {
		.event_handler = qp_event,
		.qp_context = s,
		.send_cq = s->cq,
		.recv_cq = s->cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 6,
			 .max_recv_sge = 1, .max_inline_data = 96 },
		.sq_sig_type = IB_SIGNAL_ALL_WR,
		.qp_type = IB_QPT_RC,
		.port_num = 1,
	};

	if (s->qp)
		ib_destroy_qp(s->qp);
	atomic_set(&s->fatal, 0);
	s->qp = ib_create_qp(s->pd, &attr);
	if (IS_ERR(s->qp)) {
		int err = PTR_ERR(s->qp);

		s->qp = NULL;
		return err;
	}
	return 0;
}

/* Takes QP a of side s to RTS towards the QP of side peer. */
static int qp_connect(struct side *s, struct side *peer)
{
	struct ib_qp_attr attr = {};
	int ret;

	attr.qp_state = IB_QPS_INIT;
	attr.pkey_index = 0;
	attr.port_num = 1;
	attr.qp_access_flags = IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_WRITE |
			       IB_ACCESS_REMOTE_ATOMIC;
	ret = ib_modify_qp(s->qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX |
			   IB_QP_PORT | IB_QP_ACCESS_FLAGS);
	if (ret)
		return ret;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IB_QPS_RTR;
	attr.path_mtu = IB_MTU_1024;
	attr.dest_qp_num = peer->qp->qp_num;
	attr.rq_psn = 100;
	attr.max_dest_rd_atomic = 16;
	attr.min_rnr_timer = 12;
	attr.ah_attr.type = rdma_ah_find_type(s->dev, 1);
	rdma_ah_set_port_num(&attr.ah_attr, 1);
	rdma_ah_set_grh(&attr.ah_attr, &peer->gid, 0, s->gid_index, 64, 0);
	ret = ib_modify_qp(s->qp, &attr, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU |
			   IB_QP_DEST_QPN | IB_QP_RQ_PSN |
			   IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IB_QPS_RTS;
	attr.timeout = 14;
	attr.retry_cnt = 7;
	attr.rnr_retry = 7;
	attr.sq_psn = 100;
	attr.max_rd_atomic = 16;
	return ib_modify_qp(s->qp, &attr, IB_QP_STATE | IB_QP_TIMEOUT |
			    IB_QP_RETRY_CNT | IB_QP_RNR_RETRY | IB_QP_SQ_PSN |
			    IB_QP_MAX_QP_RD_ATOMIC);
}

/* A fresh connected pair. */
static int pair(void)
{
	int ret;

	ret = qp_create(&sides[0]) ?: qp_create(&sides[1]);
	if (ret)
		return ret;
	return qp_connect(&sides[0], &sides[1]) ?: qp_connect(&sides[1], &sides[0]);
}

static bool poll_one(struct side *s, struct ib_wc *wc)
{
	int waited;

	for (waited = 0; waited < POLL_MS; waited++) {
		if (ib_poll_cq(s->cq, 1, wc) == 1)
			return true;
		msleep(1);
	}
	memset(wc, 0, sizeof(*wc));
	wc->status = -1;
	return false;
}

static int post_recv(struct side *s, u32 offset, u32 len, u64 wr_id)
{
	struct ib_sge sge = { .addr = s->dma + offset, .length = len,
			      .lkey = s->pd->local_dma_lkey };
	struct ib_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };

	return ib_post_recv(s->qp, &wr, NULL);
}

static void fill(struct side *s, u32 offset, u32 len, u8 seed)
{
	u32 i;

	for (i = 0; i < len; i++)
		s->buf[offset + i] = seed + i * 7;
}

static bool same(struct side *a, u32 aoff, struct side *b, u32 boff, u32 len)
{
	return !memcmp(a->buf + aoff, b->buf + boff, len);
}

static bool wc_is(struct ib_wc *wc, enum ib_wc_status status, enum ib_wc_opcode op)
{
	return wc->status == status && (status != IB_WC_SUCCESS || wc->opcode == op);
}

static void test_send(int nsge, bool inline_data, bool imm, const char *what)
{
	struct side *a = &sides[0], *b = &sides[1];
	struct ib_sge sge[6];
	struct ib_send_wr wr = {};
	struct ib_wc wca, wcb;
	u32 len = 0;
	int i;

	memset(b->buf, 0, BUF_SIZE);
	for (i = 0; i < nsge; i++) {
		fill(a, i * 256, 100 + i, 0x20 + i);
		sge[i].addr = inline_data ? (u64)(uintptr_t)(a->buf + i * 256) : a->dma + i * 256;
		sge[i].length = 100 + i;
		sge[i].lkey = a->pd->local_dma_lkey;
		len += sge[i].length;
	}
	if (inline_data)
		len = sge[0].length = 90;
	wr.wr_id = 7;
	wr.sg_list = sge;
	wr.num_sge = inline_data ? 1 : nsge;
	wr.opcode = imm ? IB_WR_SEND_WITH_IMM : IB_WR_SEND;
	wr.send_flags = IB_SEND_SIGNALED | (inline_data ? IB_SEND_INLINE : 0);
	wr.ex.imm_data = cpu_to_be32(0x11223344);
	ib_dma_sync_single_for_device(a->dev, a->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	if (post_recv(b, 0, BUF_SIZE / 2, 9) || ib_post_send(a->qp, &wr, NULL)) {
		check(false, "%s: posting failed", what);
		return;
	}
	poll_one(a, &wca);
	poll_one(b, &wcb);
	ib_dma_sync_single_for_cpu(b->dev, b->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	{
		bool data = true;
		u32 off = 0;

		for (i = 0; i < (inline_data ? 1 : nsge); i++) {
			data &= same(a, i * 256, b, off, sge[i].length);
			off += sge[i].length;
		}
		check(wc_is(&wca, IB_WC_SUCCESS, IB_WC_SEND) && wca.wr_id == 7 &&
		      wc_is(&wcb, IB_WC_SUCCESS, IB_WC_RECV) && wcb.wr_id == 9 &&
		      wcb.byte_len == len && data &&
		      (!imm || ((wcb.wc_flags & IB_WC_WITH_IMM) &&
				wcb.ex.imm_data == cpu_to_be32(0x11223344))),
		      "%s: %u bytes arrive, completions %d/%d", what, len,
		      wca.status, wcb.status);
	}
}

static void test_write(bool imm)
{
	struct side *a = &sides[0], *b = &sides[1];
	struct ib_sge sge = { .addr = a->dma + 512, .length = 1000,
			      .lkey = a->pd->local_dma_lkey };
	struct ib_rdma_wr wr = {
		.wr = { .wr_id = 11, .sg_list = &sge, .num_sge = 1,
			.opcode = imm ? IB_WR_RDMA_WRITE_WITH_IMM : IB_WR_RDMA_WRITE,
			.send_flags = IB_SEND_SIGNALED,
			.ex.imm_data = cpu_to_be32(0xa5a5) },
		.remote_addr = b->dma + 4096,
		.rkey = b->pd->unsafe_global_rkey,
	};
	struct ib_wc wca, wcb = {};

	memset(b->buf, 0, BUF_SIZE);
	fill(a, 512, 1000, 0x55);
	if ((imm && post_recv(b, 0, 64, 12)) || ib_post_send(a->qp, &wr.wr, NULL)) {
		check(false, "RDMA Write%s: posting failed", imm ? " with immediate" : "");
		return;
	}
	poll_one(a, &wca);
	if (imm)
		poll_one(b, &wcb);
	ib_dma_sync_single_for_cpu(b->dev, b->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	check(wc_is(&wca, IB_WC_SUCCESS, IB_WC_RDMA_WRITE) && same(a, 512, b, 4096, 1000) &&
	      (!imm || (wc_is(&wcb, IB_WC_SUCCESS, IB_WC_RECV_RDMA_WITH_IMM) &&
			(wcb.wc_flags & IB_WC_WITH_IMM) &&
			wcb.ex.imm_data == cpu_to_be32(0xa5a5))),
	      "RDMA Write%s: 1000 bytes land, completions %d/%d",
	      imm ? " with immediate" : "", wca.status, wcb.status);
}

static void test_read(void)
{
	struct side *a = &sides[0], *b = &sides[1];
	struct ib_sge sge = { .addr = a->dma + 2048, .length = 1500,
			      .lkey = a->pd->local_dma_lkey };
	struct ib_rdma_wr wr = {
		.wr = { .wr_id = 13, .sg_list = &sge, .num_sge = 1,
			.opcode = IB_WR_RDMA_READ, .send_flags = IB_SEND_SIGNALED },
		.remote_addr = b->dma + 100,
		.rkey = b->pd->unsafe_global_rkey,
	};
	struct ib_wc wca;

	memset(a->buf, 0, BUF_SIZE);
	fill(b, 100, 1500, 0x77);
	ib_dma_sync_single_for_device(b->dev, b->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	if (ib_post_send(a->qp, &wr.wr, NULL)) {
		check(false, "RDMA Read: posting failed");
		return;
	}
	poll_one(a, &wca);
	ib_dma_sync_single_for_cpu(a->dev, a->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	check(wc_is(&wca, IB_WC_SUCCESS, IB_WC_RDMA_READ) && wca.byte_len == 1500 &&
	      same(a, 2048, b, 100, 1500),
	      "RDMA Read: 1500 bytes come back, completion %d", wca.status);
}

static struct ib_mr *dma_mr(struct side *s, struct ib_pd *pd, int access);

/* Atomics need a region with remote atomic rights (the PD's global rkey has none). */
static void test_atomic(bool cas)
{
	struct side *a = &sides[0], *b = &sides[1];
	u64 *target = (u64 *)(b->buf + 64), *result = (u64 *)(a->buf + 128);
	struct ib_sge sge = { .addr = a->dma + 128, .length = 8,
			      .lkey = a->pd->local_dma_lkey };
	struct ib_atomic_wr wr = {
		.wr = { .wr_id = 15, .sg_list = &sge, .num_sge = 1,
			.opcode = cas ? IB_WR_ATOMIC_CMP_AND_SWP : IB_WR_ATOMIC_FETCH_AND_ADD,
			.send_flags = IB_SEND_SIGNALED },
		.remote_addr = b->dma + 64,
		.compare_add = cas ? 1000 : 3,
		.swap = 42,
	};
	struct ib_wc wca;
	struct ib_mr *mr;

	mr = dma_mr(b, b->pd, IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_ATOMIC);
	if (IS_ERR(mr)) {
		check(false, "atomic: no region (%ld)", PTR_ERR(mr));
		return;
	}
	wr.rkey = mr->rkey;
	*target = 1000;
	*result = 0;
	ib_dma_sync_single_for_device(b->dev, b->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	if (ib_post_send(a->qp, &wr.wr, NULL)) {
		check(false, "atomic: posting failed");
		return;
	}
	poll_one(a, &wca);
	ib_dma_sync_single_for_cpu(a->dev, a->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	ib_dma_sync_single_for_cpu(b->dev, b->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	check(wc_is(&wca, IB_WC_SUCCESS, cas ? IB_WC_COMP_SWAP : IB_WC_FETCH_ADD) &&
	      *result == 1000 && *target == (cas ? 42 : 1003),
	      "%s: returns %llu, leaves %llu, completion %d",
	      cas ? "compare and swap 1000 -> 42" : "fetch and add 3 to 1000",
	      *result, *target, wca.status);
	ib_dereg_mr(mr);
}

/*
 * A write with a bad key, address or rights: an error completion at the
 * requester, and the responder's QP in the error state with a fatal event.
 */
static void test_remote_error(const char *what, u64 remote_addr, u32 rkey)
{
	struct side *a = &sides[0], *b = &sides[1];
	struct ib_sge sge = { .addr = a->dma, .length = 64,
			      .lkey = a->pd->local_dma_lkey };
	struct ib_rdma_wr wr = {
		.wr = { .wr_id = 21, .sg_list = &sge, .num_sge = 1,
			.opcode = IB_WR_RDMA_WRITE, .send_flags = IB_SEND_SIGNALED },
		.remote_addr = remote_addr,
		.rkey = rkey,
	};
	struct ib_qp_init_attr init;
	struct ib_qp_attr attr = {};
	struct ib_wc wca;
	int waited;

	if (pair() || ib_post_send(a->qp, &wr.wr, NULL)) {
		check(false, "%s: set-up failed", what);
		return;
	}
	poll_one(a, &wca);
	for (waited = 0; waited < POLL_MS && !atomic_read(&b->fatal); waited++)
		msleep(1);
	ib_query_qp(b->qp, &attr, IB_QP_STATE, &init);
	check(wca.status == IB_WC_REM_ACCESS_ERR && attr.qp_state == IB_QPS_ERR &&
	      atomic_read(&b->fatal) > 0,
	      "%s: requester status %d, responder state %d, %d fatal event(s)",
	      what, wca.status, attr.qp_state, atomic_read(&b->fatal));
}

/* A DMA region of the responder with only the rights given, through the driver. */
static struct ib_mr *dma_mr(struct side *s, struct ib_pd *pd, int access)
{
	struct ib_mr *mr = s->dev->ops.get_dma_mr(pd, access);

	if (IS_ERR(mr))
		return mr;
	mr->device = s->dev;
	mr->pd = pd;
	mr->type = IB_MR_TYPE_DMA;
	mr->uobject = NULL;
	atomic_inc(&pd->usecnt);
	return mr;
}

/*
 * A fast-registration region over the page at @off of side s's buffer,
 * registered with a fresh key and @access by a work request on s's own QP.
 */
static struct ib_mr *frmr(struct side *s, u32 off, int access)
{
	static u8 key;
	struct ib_mr *mr = ib_alloc_mr(s->pd, IB_MR_TYPE_MEM_REG, 4);
	struct scatterlist sg;
	struct ib_reg_wr reg = {};
	struct ib_wc wc;

	if (IS_ERR(mr))
		return mr;
	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = s->dma + off;
	sg_dma_len(&sg) = PAGE_SIZE;
	if (ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE) != 1)
		goto err;
	ib_update_fast_reg_key(mr, ++key);
	reg.wr.wr_id = 41;
	reg.wr.opcode = IB_WR_REG_MR;
	reg.wr.send_flags = IB_SEND_SIGNALED;
	reg.mr = mr;
	reg.key = mr->rkey;
	reg.access = access;
	if (ib_post_send(s->qp, &reg.wr, NULL) || !poll_one(s, &wc) ||
	    !wc_is(&wc, IB_WC_SUCCESS, IB_WC_REG_MR))
		goto err;
	return mr;
err:
	ib_dereg_mr(mr);
	return ERR_PTR(-EIO);
}

/*
 * Fast registration and the three ways to invalidate: send with invalidate,
 * local invalidate, and RDMA Read with invalidate of the local sink.
 */
static void test_fast_reg(void)
{
	struct side *a = &sides[0], *b = &sides[1];
	struct ib_sge sge = { .addr = a->dma, .length = 256, .lkey = a->pd->local_dma_lkey };
	struct ib_rdma_wr w = { .wr = { .wr_id = 42, .sg_list = &sge, .num_sge = 1,
					.opcode = IB_WR_RDMA_WRITE,
					.send_flags = IB_SEND_SIGNALED } };
	struct ib_send_wr send = { .wr_id = 43, .sg_list = &sge, .num_sge = 1,
				   .opcode = IB_WR_SEND_WITH_INV,
				   .send_flags = IB_SEND_SIGNALED };
	struct ib_send_wr inv = { .wr_id = 44, .opcode = IB_WR_LOCAL_INV,
				  .send_flags = IB_SEND_SIGNALED };
	struct ib_mr *mr = NULL, *mr2 = NULL, *sink = NULL;
	struct ib_wc wca, wcb;
	u32 rkey;

	if (pair()) {
		check(false, "fast registration: set-up failed");
		return;
	}
	mr = frmr(b, 4096, IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE);
	check(!IS_ERR(mr), "fast-register a page (%ld)", IS_ERR(mr) ? PTR_ERR(mr) : 0);
	if (IS_ERR(mr))
		return;

	/* Write through the region's key and address. */
	memset(b->buf, 0, BUF_SIZE);
	fill(a, 0, 256, 0x3c);
	w.remote_addr = mr->iova + 64;
	w.rkey = mr->rkey;
	ib_post_send(a->qp, &w.wr, NULL);
	poll_one(a, &wca);
	ib_dma_sync_single_for_cpu(b->dev, b->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	check(wc_is(&wca, IB_WC_SUCCESS, IB_WC_RDMA_WRITE) && same(a, 0, b, 4096 + 64, 256),
	      "RDMA Write through a fast-registered key lands in its page, completion %d",
	      wca.status);

	/* Send with invalidate: the receiver is told, and the key is dead. */
	rkey = mr->rkey;
	send.ex.invalidate_rkey = rkey;
	post_recv(b, 0, 512, 45);
	ib_post_send(a->qp, &send, NULL);
	poll_one(a, &wca);
	poll_one(b, &wcb);
	check(wc_is(&wca, IB_WC_SUCCESS, IB_WC_SEND) && wc_is(&wcb, IB_WC_SUCCESS, IB_WC_RECV) &&
	      (wcb.wc_flags & IB_WC_WITH_INVALIDATE) && wcb.ex.invalidate_rkey == rkey,
	      "send with invalidate: the receiver is told key %#x, completions %d/%d",
	      rkey, wca.status, wcb.status);
	test_remote_error("a write with the key a send invalidated", mr->iova, rkey);

	/* Local invalidate of another region. */
	if (pair())
		goto out;
	mr2 = frmr(b, 0, IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE);
	if (IS_ERR(mr2)) {
		check(false, "local invalidate: no region (%ld)", PTR_ERR(mr2));
		goto out;
	}
	inv.ex.invalidate_rkey = mr2->rkey;
	ib_post_send(b->qp, &inv, NULL);
	poll_one(b, &wcb);
	check(wc_is(&wcb, IB_WC_SUCCESS, IB_WC_LOCAL_INV), "local invalidate: completion %d",
	      wcb.status);
	test_remote_error("a write with a locally invalidated key", mr2->iova, mr2->rkey);

	/* RDMA Read with invalidate: the sink region of the reader goes. */
	if (pair())
		goto out;
	sink = frmr(a, 4096, IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE);
	if (IS_ERR(sink)) {
		check(false, "read with invalidate: no region (%ld)", PTR_ERR(sink));
		goto out;
	}
	{
		struct ib_sge s2 = { .addr = sink->iova, .length = 512, .lkey = sink->lkey };
		struct ib_rdma_wr r = {
			.wr = { .wr_id = 46, .sg_list = &s2, .num_sge = 1,
				.opcode = IB_WR_RDMA_READ_WITH_INV,
				.send_flags = IB_SEND_SIGNALED,
				.ex.invalidate_rkey = sink->lkey },
			.remote_addr = b->dma + 300,
			.rkey = b->pd->unsafe_global_rkey,
		};

		memset(a->buf, 0, BUF_SIZE);
		fill(b, 300, 512, 0x61);
		ib_dma_sync_single_for_device(b->dev, b->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
		ib_post_send(a->qp, &r.wr, NULL);
		poll_one(a, &wca);
		ib_dma_sync_single_for_cpu(a->dev, a->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
		check(wc_is(&wca, IB_WC_SUCCESS, IB_WC_RDMA_READ) && same(a, 4096, b, 300, 512),
		      "RDMA Read with invalidate fills the sink region, completion %d",
		      wca.status);
	}
out:
	if (!IS_ERR_OR_NULL(sink))
		ib_dereg_mr(sink);
	if (!IS_ERR_OR_NULL(mr2))
		ib_dereg_mr(mr2);
	if (!IS_ERR_OR_NULL(mr))
		ib_dereg_mr(mr);
}

/*
 * Draining: a QP moved to ERROR completes what it holds as flushed, and work
 * posted afterwards too (erdma needs REFLUSH for that), within the poll bound.
 */
static void test_drain(void)
{
	struct side *a = &sides[0];
	struct ib_sge sge = { .addr = a->dma, .length = 64,
			      .lkey = a->pd->local_dma_lkey };
	struct ib_send_wr swr = { .wr_id = 31, .sg_list = &sge, .num_sge = 1,
				  .opcode = IB_WR_SEND, .send_flags = IB_SEND_SIGNALED };
	struct ib_qp_attr attr = { .qp_state = IB_QPS_ERR };
	struct ib_wc wc[3];
	int i;

	if (pair() || post_recv(a, 0, 64, 30) || ib_modify_qp(a->qp, &attr, IB_QP_STATE)) {
		check(false, "drain: set-up failed");
		return;
	}
	if (post_recv(a, 0, 64, 32) || ib_post_send(a->qp, &swr, NULL)) {
		check(false, "drain: posting in ERROR failed");
		return;
	}
	for (i = 0; i < 3; i++)
		poll_one(a, &wc[i]);
	check(wc[0].status == IB_WC_WR_FLUSH_ERR && wc[1].status == IB_WC_WR_FLUSH_ERR &&
	      wc[2].status == IB_WC_WR_FLUSH_ERR &&
	      wc[0].wr_id + wc[1].wr_id + wc[2].wr_id == 30 + 31 + 32,
	      "drain: a receive posted before ERROR, and a send and a receive posted after, complete flushed (%d/%d/%d, wr_ids %llu %llu %llu)",
	      wc[0].status, wc[1].status, wc[2].status, wc[0].wr_id, wc[1].wr_id, wc[2].wr_id);
}

/*
 * Posting in ERROR where sleeping is not allowed. The QP's CQ is polled by
 * the core in softirq; its handler posts the next send from there. Before
 * that, sends and receives are posted under a spinlock with interrupts off.
 * All of them must complete flushed.
 */
#define ATOMIC_LOCKED 8		/* half sends, half receives, under the lock */
#define ATOMIC_CHAINED 8	/* sends posted by the completion handler */

static struct atomic_post {
	struct ib_cqe cqe;
	struct ib_qp *qp;
	struct ib_sge sge;
	atomic_t flushed, other, chained, post_errors;
	atomic64_t max_ns;
	struct completion done;
} ap;

static DEFINE_SPINLOCK(atomic_post_lock);

static void atomic_post_time(u64 start)
{
	u64 ns = ktime_get_ns() - start, old = atomic64_read(&ap.max_ns);

	while (ns > old && !atomic64_try_cmpxchg(&ap.max_ns, &old, ns))
		;
}

static int atomic_post_send(void)
{
	struct ib_send_wr wr = { .wr_cqe = &ap.cqe, .sg_list = &ap.sge, .num_sge = 1,
				 .opcode = IB_WR_SEND, .send_flags = IB_SEND_SIGNALED };
	u64 start = ktime_get_ns();
	int ret = ib_post_send(ap.qp, &wr, NULL);

	atomic_post_time(start);
	if (ret)
		atomic_inc(&ap.post_errors);
	return ret;
}

static int atomic_post_recv(void)
{
	struct ib_recv_wr wr = { .wr_cqe = &ap.cqe, .sg_list = &ap.sge, .num_sge = 1 };
	u64 start = ktime_get_ns();
	int ret = ib_post_recv(ap.qp, &wr, NULL);

	atomic_post_time(start);
	if (ret)
		atomic_inc(&ap.post_errors);
	return ret;
}

/* Softirq: counts the completion, posts the next send of the chain. */
static void atomic_post_done(struct ib_cq *cq, struct ib_wc *wc)
{
	int seen;

	if (wc->status == IB_WC_WR_FLUSH_ERR)
		seen = atomic_inc_return(&ap.flushed);
	else
		seen = atomic_inc_return(&ap.other) + atomic_read(&ap.flushed);
	if (atomic_inc_return(&ap.chained) <= ATOMIC_CHAINED && atomic_post_send())
		atomic_set(&ap.chained, ATOMIC_CHAINED);
	if (seen >= ATOMIC_LOCKED + ATOMIC_CHAINED)
		complete(&ap.done);
}

static void test_post_atomic(struct ib_device *dev, struct ib_pd *pd, u64 dma)
{
	struct ib_qp_init_attr init = {
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.sq_sig_type = IB_SIGNAL_ALL_WR,
		.qp_type = IB_QPT_RC,
		.port_num = 1,
	};
	struct ib_qp_attr attr = {};
	unsigned long flags;
	struct ib_cq *cq;
	int ret, i;
	bool done;

	memset(&ap, 0, sizeof(ap));
	init_completion(&ap.done);
	ap.cqe.done = atomic_post_done;
	ap.sge = (struct ib_sge){ .addr = dma, .length = 64, .lkey = pd->local_dma_lkey };
	cq = ib_alloc_cq(dev, NULL, 64, 0, IB_POLL_SOFTIRQ);
	if (IS_ERR(cq)) {
		check(false, "post in ERROR from atomic context: ib_alloc_cq failed (%ld)", PTR_ERR(cq));
		return;
	}
	init.send_cq = cq;
	init.recv_cq = cq;
	ap.qp = ib_create_qp(pd, &init);
	if (IS_ERR(ap.qp)) {
		check(false, "post in ERROR from atomic context: ib_create_qp failed (%ld)",
		      PTR_ERR(ap.qp));
		ib_free_cq(cq);
		return;
	}
	ret = 0;
	if (rdma_protocol_roce(dev, 1)) {
		attr.qp_state = IB_QPS_INIT;
		attr.port_num = 1;
		attr.qp_access_flags = IB_ACCESS_REMOTE_WRITE;
		ret = ib_modify_qp(ap.qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |
				   IB_QP_ACCESS_FLAGS);
	}
	attr.qp_state = IB_QPS_ERR;
	ret = ret ?: ib_modify_qp(ap.qp, &attr, IB_QP_STATE);
	if (ret) {
		check(false, "post in ERROR from atomic context: moving QP %u to ERROR failed (%d)",
		      ap.qp->qp_num, ret);
		goto out;
	}
	/* The chain starts with the first completion. */
	spin_lock_irqsave(&atomic_post_lock, flags);
	for (i = 0; i < ATOMIC_LOCKED / 2; i++) {
		atomic_post_send();
		atomic_post_recv();
	}
	spin_unlock_irqrestore(&atomic_post_lock, flags);
	done = wait_for_completion_timeout(&ap.done, msecs_to_jiffies(POLL_MS));
	check(done && atomic_read(&ap.flushed) == ATOMIC_LOCKED + ATOMIC_CHAINED &&
	      !atomic_read(&ap.other) && !atomic_read(&ap.post_errors) &&
	      (!max_post_us || atomic64_read(&ap.max_ns) <= max_post_us * 1000ULL),
	      "post in ERROR from atomic context (%s, QP %u): %d posted under a spinlock and %d from the CQ's completion handler (softirq) complete flushed (flushed %d, other %d, failed posts %d, within %d ms); longest post %llu ns (bound %u us, 0: none)",
	      rdma_protocol_iwarp(dev, 1) ? "iWARP" : "RoCEv2", ap.qp->qp_num, ATOMIC_LOCKED,
	      ATOMIC_CHAINED, atomic_read(&ap.flushed), atomic_read(&ap.other),
	      atomic_read(&ap.post_errors), POLL_MS, atomic64_read(&ap.max_ns), max_post_us);
out:
	ib_destroy_qp(ap.qp);
	ib_free_cq(cq);
}

/*
 * A QP going back to RESET with completions in its CQ: they are gone, and
 * after reconnecting, the next receive completes as itself.
 */
static void test_reset_forgets(void)
{
	struct side *a = &sides[0], *b = &sides[1];
	struct ib_sge sge = { .addr = a->dma, .length = 32,
			      .lkey = a->pd->local_dma_lkey };
	struct ib_send_wr swr = { .wr_id = 41, .sg_list = &sge, .num_sge = 1,
				  .opcode = IB_WR_SEND, .send_flags = IB_SEND_SIGNALED };
	struct ib_qp_attr attr = { .qp_state = IB_QPS_RESET };
	struct ib_wc wc;
	int i, ret;

	if (pair() || post_recv(b, 0, 64, 40) || post_recv(b, 64, 64, 40) ||
	    ib_post_send(a->qp, &swr, NULL) || ib_post_send(a->qp, &swr, NULL)) {
		check(false, "RESET: set-up failed");
		return;
	}
	for (i = 0; i < 2; i++)
		poll_one(a, &wc);
	msleep(20);
	/* b's two receive completions wait in its CQ, unpolled. */
	ret = ib_modify_qp(b->qp, &attr, IB_QP_STATE) ?: qp_connect(b, a);
	if (ret || post_recv(b, 0, 64, 42) || ib_post_send(a->qp, &swr, NULL)) {
		check(false, "RESET: reconnecting failed (%d)", ret);
		return;
	}
	poll_one(a, &wc);
	poll_one(b, &wc);
	check(wc_is(&wc, IB_WC_SUCCESS, IB_WC_RECV) && wc.wr_id == 42 &&
	      ib_poll_cq(b->cq, 1, &wc) == 0,
	      "RESET drops the QP's completions: the next receive completes as itself (wr_id %llu, status %d)",
	      wc.wr_id, wc.status);
}

/* UD: a datagram QP per side and address handles. */
struct ud_side {
	struct ib_qp *qp;
	struct ib_ah *ah;	/* towards the other side */
};

static struct ud_side uds[2];

#define UD_QKEY 0x11223344

static int ud_create(struct side *s, struct ud_side *u, u32 qkey)
{
	struct ib_qp_init_attr init = {
		.send_cq = s->cq, .recv_cq = s->cq,
		.cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2,
			 .max_recv_sge = 1, .max_inline_data = 64 },
		.sq_sig_type = IB_SIGNAL_ALL_WR,
		.qp_type = IB_QPT_UD,
		.port_num = 1,
	};
	struct ib_qp_attr attr = { .qp_state = IB_QPS_INIT, .pkey_index = 0,
				   .port_num = 1, .qkey = qkey };
	int ret;

	u->qp = ib_create_qp(s->pd, &init);
	if (IS_ERR(u->qp)) {
		ret = PTR_ERR(u->qp);
		u->qp = NULL;
		return ret;
	}
	ret = ib_modify_qp(u->qp, &attr, IB_QP_STATE | IB_QP_PKEY_INDEX | IB_QP_PORT |
			   IB_QP_QKEY);
	if (ret)
		return ret;
	attr.qp_state = IB_QPS_RTR;
	ret = ib_modify_qp(u->qp, &attr, IB_QP_STATE);
	if (ret)
		return ret;
	attr.qp_state = IB_QPS_RTS;
	attr.sq_psn = 0;
	return ib_modify_qp(u->qp, &attr, IB_QP_STATE | IB_QP_SQ_PSN);
}

/* The address of side peer, as seen from side s. */
static void ud_address(struct side *s, struct side *peer, struct rdma_ah_attr *ah)
{
	struct net_device *ndev = ib_device_get_netdev(peer->dev, 1);

	memset(ah, 0, sizeof(*ah));
	ah->type = rdma_ah_find_type(s->dev, 1);
	rdma_ah_set_port_num(ah, 1);
	rdma_ah_set_sl(ah, 3);
	rdma_ah_set_grh(ah, &peer->gid, 0, s->gid_index, 64, 0);
	if (ndev) {
		memcpy(ah->roce.dmac, ndev->dev_addr, ETH_ALEN);
		dev_put(ndev);
	}
}

static DEFINE_SPINLOCK(ud_lock);

/*
 * One datagram from a to b through a's address handle ah: posted with
 * qkey, into a buffer of buf_len bytes; returns whether b received it (into
 * *wcb) and a's completion in *wca.
 */
static bool ud_send(struct ib_ah *ah, u32 qkey, u32 len, bool imm, struct ib_wc *wca,
		    struct ib_wc *wcb, int *post_ret)
{
	struct side *a = &sides[0], *b = &sides[1];
	struct ib_sge sge = { .addr = a->dma, .length = len, .lkey = a->pd->local_dma_lkey };
	struct ib_ud_wr wr = {
		.wr = { .wr_id = 51, .sg_list = &sge, .num_sge = 1,
			.opcode = imm ? IB_WR_SEND_WITH_IMM : IB_WR_SEND,
			.send_flags = IB_SEND_SIGNALED, .ex.imm_data = cpu_to_be32(0x5566) },
		.ah = ah,
		.remote_qpn = uds[1].qp->qp_num,
		.remote_qkey = qkey,
	};
	struct ib_sge rsge = { .addr = b->dma, .length = 40 + 2048,
			       .lkey = b->pd->local_dma_lkey };
	struct ib_recv_wr rwr = { .wr_id = 52, .sg_list = &rsge, .num_sge = 1 };
	struct ib_qp_init_attr qinit;
	struct ib_qp_attr qattr;
	int waited;

	memset(wca, 0, sizeof(*wca));
	memset(wcb, 0, sizeof(*wcb));
	wca->status = wcb->status = -1;
	memset(b->buf, 0, BUF_SIZE);
	ib_dma_sync_single_for_device(b->dev, b->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	fill(a, 0, len, 0x31);
	ib_dma_sync_single_for_device(a->dev, a->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	*post_ret = ib_post_recv(uds[1].qp, &rwr, NULL);
	if (*post_ret)
		return false;
	/*
	 * Doorbells are posted writes, and posted writes to two devices are
	 * not ordered with each other: a's datagram could reach b before b
	 * took the receive, and be dropped (UD has no RNR; seen once in a make
	 * check). Querying b's QP is a command to b (QUERY_QP on RoCEv2, with
	 * either driver), which b takes after the doorbell before it.
	 */
	*post_ret = ib_query_qp(uds[1].qp, &qattr, IB_QP_STATE, &qinit);
	if (*post_ret)
		return false;
	*post_ret = ib_post_send(uds[0].qp, &wr.wr, NULL);
	if (*post_ret)
		return false;
	poll_one(a, wca);
	/* A datagram that is dropped never completes: wait a bounded while. */
	for (waited = 0; waited < 300; waited++) {
		if (ib_poll_cq(b->cq, 1, wcb) == 1) {
			ib_dma_sync_single_for_cpu(b->dev, b->dma, BUF_SIZE, DMA_BIDIRECTIONAL);
			return true;
		}
		msleep(1);
	}
	return false;
}

/* b's receive buffer after a datagram: the network header, then the payload. */
static void ud_check_delivery(struct ib_wc *wca, struct ib_wc *wcb, u32 len, bool imm,
			      const char *what)
{
	struct side *a = &sides[0], *b = &sides[1];
	struct rdma_ah_attr from;
	int ret, version;

	version = ib_get_rdma_header_version((union rdma_network_hdr *)b->buf);
	ret = ib_init_ah_attr_from_wc(b->dev, 1, wcb, (struct ib_grh *)b->buf, &from);
	check(wc_is(wca, IB_WC_SUCCESS, IB_WC_SEND) &&
	      wc_is(wcb, IB_WC_SUCCESS, IB_WC_RECV) && wcb->byte_len == 40 + len &&
	      (wcb->wc_flags & IB_WC_GRH) && (wcb->wc_flags & IB_WC_WITH_NETWORK_HDR_TYPE) &&
	      wcb->network_hdr_type == RDMA_NETWORK_IPV4 && version == 4 &&
	      wcb->src_qp == uds[0].qp->qp_num && wcb->sl == 3 &&
	      same(a, 0, b, 40, len) && !ret &&
	      !memcmp(rdma_ah_read_grh(&from)->dgid.raw, a->gid.raw, 16) &&
	      (!imm || ((wcb->wc_flags & IB_WC_WITH_IMM) &&
			wcb->ex.imm_data == cpu_to_be32(0x5566))),
	      "%s: %u bytes after the 40-byte header (IPv%d), byte_len %u, flags %#x, source QP %u/%u, SL %u, address from the header %d, completions %d/%d",
	      what, len, version, wcb->byte_len, wcb->wc_flags, wcb->src_qp,
	      uds[0].qp->qp_num, wcb->sl, ret, wca->status, wcb->status);
	if (!ret)
		rdma_destroy_ah_attr(&from);
}

static void test_ud(void)
{
	struct side *a = &sides[0], *b = &sides[1];
	struct rdma_ah_attr addr, got;
	struct ib_ah *ah_atomic, *other_pd, *foreign;
	struct ib_wc wca, wcb;
	unsigned long flags;
	int ret, post_ret;
	bool got_it;

	ret = ud_create(a, &uds[0], UD_QKEY) ?: ud_create(b, &uds[1], UD_QKEY);
	check(!ret, "UD QPs %u and %u to RTS (%d)", uds[0].qp ? uds[0].qp->qp_num : 0,
	      uds[1].qp ? uds[1].qp->qp_num : 0, ret);
	if (ret)
		return;
	ud_address(a, b, &addr);
	uds[0].ah = rdma_create_ah(a->pd, &addr, RDMA_CREATE_AH_SLEEPABLE);
	check(!IS_ERR(uds[0].ah), "an address handle, where sleeping is allowed (%ld)",
	      PTR_ERR_OR_ZERO(uds[0].ah));
	if (IS_ERR(uds[0].ah)) {
		uds[0].ah = NULL;
		return;
	}
	ret = rdma_query_ah(uds[0].ah, &got);
	check(!ret && !memcmp(rdma_ah_read_grh(&got)->dgid.raw, b->gid.raw, 16) &&
	      rdma_ah_read_grh(&got)->sgid_index == a->gid_index && rdma_ah_get_sl(&got) == 3,
	      "the address handle's query gives its address back (%d)", ret);

	got_it = ud_send(uds[0].ah, UD_QKEY, 256, false, &wca, &wcb, &post_ret);
	if (!got_it)
		check(false, "UD send: nothing received (post %d, completions %d/%d)",
		      post_ret, wca.status, wcb.status);
	else
		ud_check_delivery(&wca, &wcb, 256, false, "UD send");
	got_it = ud_send(uds[0].ah, UD_QKEY, 1024, true, &wca, &wcb, &post_ret);
	if (!got_it)
		check(false, "UD send with immediate: nothing received (post %d)", post_ret);
	else
		ud_check_delivery(&wca, &wcb, 1024, true, "UD send with immediate");

	got_it = ud_send(uds[0].ah, UD_QKEY + 1, 64, false, &wca, &wcb, &post_ret);
	check(!post_ret && !got_it && wc_is(&wca, IB_WC_SUCCESS, IB_WC_SEND),
	      "a datagram with another Q_Key is dropped, the sender completes (%d)", wca.status);
	/*
	 * The receive posted for it stays posted (all are alike). A
	 * "controlled" Q_Key (bit 31) sends the QP's own: equal to b's here.
	 */
	got_it = ud_send(uds[0].ah, 0x80000000, 64, false, &wca, &wcb, &post_ret);
	check(got_it && wc_is(&wcb, IB_WC_SUCCESS, IB_WC_RECV),
	      "a controlled Q_Key sends the QP's own Q_Key (%d/%d)", wca.status, wcb.status);

	/* Created and destroyed where sleeping is not allowed (rdma_cm does that). */
	spin_lock_irqsave(&ud_lock, flags);
	ah_atomic = rdma_create_ah(a->pd, &addr, 0);
	spin_unlock_irqrestore(&ud_lock, flags);
	check(!IS_ERR(ah_atomic), "an address handle created under a spinlock (%ld)",
	      PTR_ERR_OR_ZERO(ah_atomic));
	if (!IS_ERR(ah_atomic)) {
		got_it = ud_send(ah_atomic, UD_QKEY, 128, false, &wca, &wcb, &post_ret);
		check(got_it && wc_is(&wcb, IB_WC_SUCCESS, IB_WC_RECV) && wcb.byte_len == 168,
		      "a datagram through it arrives (%d/%d)", wca.status, wcb.status);
		spin_lock_irqsave(&ud_lock, flags);
		rdma_destroy_ah(ah_atomic, 0);
		spin_unlock_irqrestore(&ud_lock, flags);
	}

	/*
	 * Address handles the QP may not use: of another PD, of another
	 * device. Posting fails, or the datagram completes in error; it never
	 * arrives.
	 */
	other_pd = rdma_create_ah(a->pd2, &addr, RDMA_CREATE_AH_SLEEPABLE);
	if (!IS_ERR(other_pd)) {
		got_it = ud_send(other_pd, UD_QKEY, 64, false, &wca, &wcb, &post_ret);
		check(!got_it && (post_ret || wca.status != IB_WC_SUCCESS),
		      "an address handle of another PD: post %d, completion %d, not delivered",
		      post_ret, wca.status);
		rdma_destroy_ah(other_pd, RDMA_DESTROY_AH_SLEEPABLE);
	} else {
		check(false, "an address handle in the second PD (%ld)", PTR_ERR(other_pd));
	}
	/*
	 * a's own address handle goes first: the upstream C driver does not
	 * check whose handle it is given and posts its number, which must name
	 * nothing on a's adapter then.
	 */
	rdma_destroy_ah(uds[0].ah, RDMA_DESTROY_AH_SLEEPABLE);
	uds[0].ah = NULL;
	ud_address(b, a, &addr);
	foreign = rdma_create_ah(b->pd, &addr, RDMA_CREATE_AH_SLEEPABLE);
	if (!IS_ERR(foreign)) {
		ib_destroy_qp(uds[0].qp);
		uds[0].qp = NULL;
		ret = ud_create(a, &uds[0], UD_QKEY);
		got_it = !ret && ud_send(foreign, UD_QKEY, 64, false, &wca, &wcb, &post_ret);
		check(!ret && !got_it && (post_ret || wca.status != IB_WC_SUCCESS),
		      "an address handle of another device: post %d, completion %d, not delivered",
		      post_ret, wca.status);
		rdma_destroy_ah(foreign, RDMA_DESTROY_AH_SLEEPABLE);
	} else {
		check(false, "an address handle on the second device (%ld)", PTR_ERR(foreign));
	}
}

static void ud_fini(void)
{
	int i;

	for (i = 0; i < 2; i++) {
		if (uds[i].ah)
			rdma_destroy_ah(uds[i].ah, RDMA_DESTROY_AH_SLEEPABLE);
		if (uds[i].qp)
			ib_destroy_qp(uds[i].qp);
		uds[i].ah = NULL;
		uds[i].qp = NULL;
	}
}

static void run(void)
{
	struct side *b = &sides[1];
	struct ib_mr *ro, *other_pd;
	int ret;

	ret = pair();
	check(!ret, "connect RC QPs %u and %u (%d)", sides[0].qp ? sides[0].qp->qp_num : 0,
	      sides[1].qp ? sides[1].qp->qp_num : 0, ret);
	if (ret)
		return;
	test_send(1, false, false, "send");
	test_send(6, false, false, "send with 6 SGEs");
	test_send(1, true, false, "inline send");
	test_send(1, false, true, "send with immediate");
	test_write(false);
	test_write(true);
	test_read();
	test_atomic(false);
	test_atomic(true);

	test_remote_error("a write with a wrong rkey", b->dma, 0x00ffff00);
	other_pd = dma_mr(b, b->pd2, IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE);
	if (!IS_ERR(other_pd)) {
		test_remote_error("a write with the rkey of another PD", b->dma, other_pd->rkey);
		ib_dereg_mr(other_pd);
	}
	ro = dma_mr(b, b->pd, IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_READ);
	if (!IS_ERR(ro)) {
		test_remote_error("a write to a region without remote write", b->dma, ro->rkey);
		ib_dereg_mr(ro);
	}
	test_remote_error("a write outside the region's memory", 1ULL << 60,
			  b->pd->unsafe_global_rkey);
	test_fast_reg();
	test_drain();
	test_post_atomic(sides[0].dev, sides[0].pd, sides[0].dma);
	test_reset_forgets();
	test_ud();
	ud_fini();
}

/* atomic_post_only=1: the first eRDMA device, RoCEv2 or iWARP. */
static void run_atomic_post_only(void)
{
	struct side *a = &sides[0];
	int ret;

	if (!ndevs) {
		check(false, "an eRDMA device");
		return;
	}
	a->dev = devs[0];
	a->pd = ib_alloc_pd(a->dev, 0);
	ret = IS_ERR(a->pd) ? PTR_ERR(a->pd) : 0;
	if (!ret) {
		a->buf = kzalloc(BUF_SIZE, GFP_KERNEL);
		ret = a->buf ? 0 : -ENOMEM;
	}
	if (!ret) {
		a->dma = ib_dma_map_single(a->dev, a->buf, BUF_SIZE, DMA_BIDIRECTIONAL);
		ret = ib_dma_mapping_error(a->dev, a->dma) ? -ENOMEM : 0;
		if (ret)
			a->dma = 0;
	}
	check(!ret, "a PD and a buffer on %s (%d)", dev_name(&a->dev->dev), ret);
	if (!ret)
		test_post_atomic(a->dev, a->pd, a->dma);
	side_fini(a);
}

/* Fast-registration regions of 4 and of 512 pages (a page list of its own). */
static int sweep_frmr(struct side *s)
{
	static const u32 pages[] = { 4, 512 };
	struct ib_mr *mr;
	int i;

	for (i = 0; i < ARRAY_SIZE(pages); i++) {
		mr = ib_alloc_mr(s->pd, IB_MR_TYPE_MEM_REG, pages[i]);
		if (IS_ERR(mr))
			return PTR_ERR(mr);
		ib_dereg_mr(mr);
	}
	return 0;
}

/* Address handles of the device's own address, sleeping and not. */
static int sweep_ah(struct side *s)
{
	struct rdma_ah_attr addr;
	unsigned long flags;
	struct ib_ah *ah;

	ud_address(s, s, &addr);
	ah = rdma_create_ah(s->pd, &addr, RDMA_CREATE_AH_SLEEPABLE);
	if (IS_ERR(ah))
		return PTR_ERR(ah);
	rdma_destroy_ah(ah, RDMA_DESTROY_AH_SLEEPABLE);
	spin_lock_irqsave(&ud_lock, flags);
	ah = rdma_create_ah(s->pd, &addr, 0);
	if (!IS_ERR(ah))
		rdma_destroy_ah(ah, 0);
	spin_unlock_irqrestore(&ud_lock, flags);
	return PTR_ERR_OR_ZERO(ah);
}

/*
 * One kernel consumer's object (sweep=WHAT) created on the device and
 * destroyed, with what it needs (a PD, a CQ); the error of the first step
 * that failed.
 */
static int sweep_one(struct ib_device *dev, const char *what)
{
	struct ib_cq_init_attr cq_attr = { .cqe = 64 };
	bool roce = rdma_protocol_roce(dev, 1);
	struct side *s = &sides[0];
	struct ib_mr *mr;
	int ret;

	memset(s, 0, sizeof(*s));
	s->dev = dev;
	if ((!strcmp(what, "ah") || !strcmp(what, "qp_rts")) && (!roce || find_gid(s)))
		return -EOPNOTSUPP;
	s->pd = ib_alloc_pd(dev, strcmp(what, "dma_mr") ? 0 : IB_PD_UNSAFE_GLOBAL_RKEY);
	if (IS_ERR(s->pd)) {
		ret = PTR_ERR(s->pd);
		s->pd = NULL;
		return ret;
	}
	if (!strcmp(what, "dma_mr")) {
		mr = dma_mr(s, s->pd, IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_READ);
		ret = PTR_ERR_OR_ZERO(mr);
		if (!ret)
			ib_dereg_mr(mr);
	} else if (!strcmp(what, "frmr")) {
		ret = sweep_frmr(s);
	} else if (!strcmp(what, "ah")) {
		ret = sweep_ah(s);
	} else if (!strcmp(what, "cq") || !strcmp(what, "qp") || !strcmp(what, "qp_rts")) {
		s->cq = ib_create_cq(dev, NULL, NULL, NULL, &cq_attr);
		ret = PTR_ERR_OR_ZERO(s->cq);
		if (ret)
			s->cq = NULL;
		else if (strcmp(what, "cq"))
			ret = qp_create(s);
		if (!ret && !strcmp(what, "qp_rts"))
			ret = qp_connect(s, s);
	} else {
		ret = -EINVAL;
	}
	side_fini(s);
	return ret;
}

static int sweep_set(const char *val, const struct kernel_param *kp)
{
	char what[16];

	if (!sweep_device[0] || !ndevs)
		return -ENODEV;
	strscpy(what, val, sizeof(what));
	return sweep_one(devs[0], strim(what));
}

static const struct kernel_param_ops sweep_ops = {
	.set = sweep_set,
};
module_param_cb(sweep, &sweep_ops, NULL, 0200);
MODULE_PARM_DESC(sweep, "with sweep_device: create and destroy one object (dma_mr cq qp qp_rts frmr ah)");

static int add_one(struct ib_device *dev)
{
	/* The benchmark compares drivers, rdma_rxe among them. */
	if (sweep_device[0]) {
		if (!strcmp(dev_name(&dev->dev), sweep_device) && !ndevs)
			devs[ndevs++] = dev;
		return 0;
	}
	if ((bench_seconds || dev->ops.driver_id == RDMA_DRIVER_ERDMA) && ndevs < 2 &&
	    (atomic_post_only || rdma_protocol_roce(dev, 1)))
		devs[ndevs++] = dev;
	return 0;
}

static void remove_one(struct ib_device *dev, void *data)
{
	if (sweep_device[0] && ndevs && devs[0] == dev)
		ndevs = 0;
}

static struct ib_client client = {
	.name = "erdma_kverbs_test",
	.add = add_one,
	.remove = remove_one,
};

static int __init kverbs_test_init(void)
{
	int ret, i;

	ret = ib_register_client(&client);
	if (ret)
		return ret;
	if (sweep_device[0]) {
		if (!ndevs) {
			ib_unregister_client(&client);
			return -ENODEV;
		}
		return 0;
	}
	if (atomic_post_only) {
		run_atomic_post_only();
		pr_info("summary: %d checks, %d failed\n", checks, failures);
		return 0;
	}
	if (ndevs < 2) {
		pr_info("not ok 1 - two RoCEv2 eRDMA devices (found %d)\n", ndevs);
		pr_info("summary: 1 checks, 1 failed\n");
		return 0;
	}
	if (bench_seconds) {
		bench();
		return 0;
	}
	for (i = 0; i < 2; i++) {
		ret = side_init(&sides[i], devs[i], -1);
		if (ret)
			break;
	}
	check(!ret, "PDs, CQs and buffers on %s and %s (%d)", dev_name(&devs[0]->dev),
	      dev_name(&devs[1]->dev), ret);
	if (!ret)
		run();
	for (i = 0; i < 2; i++)
		side_fini(&sides[i]);
	pr_info("summary: %d checks, %d failed\n", checks, failures);
	return 0;
}

static void __exit kverbs_test_exit(void)
{
	ib_unregister_client(&client);
}

module_init(kverbs_test_init);
module_exit(kverbs_test_exit);
MODULE_DESCRIPTION("Kernel-consumer test of eRDMA devices");
MODULE_LICENSE("GPL");
