/* SPDX-License-Identifier: MIT */
/*
 * What one queue pair pins: the bytes of its queues and CQs the kernel
 * counts against RLIMIT_MEMLOCK (ib_umem_get, one count per page it
 * pins), worked out for any depths from the sizing code of the provider
 * (rdma-core) and of its kernel driver, which decides what is pinned: the
 * kernel pins the length it computes itself, at the address the library
 * allocated, page-aligned. Doorbell records and pages (one per context,
 * shared) are left out. rig(7) M1; rig_nic_qp_pinned(3).
 *
 * The stacks differ only on bnxt_re:
 *
 * - power-of-two depths: the kernel rounds every queue and CQ up to a
 *   power of two, unless the library asked it not to at context creation
 *   (BNXT_RE_COMP_MASK_REQ_UCNTX_POW2_SUPPORT). rdma-core asks from v50
 *   (commit a0bea24fd487, providers/bnxt_re/main.c,
 *   bnxt_re_alloc_context); Linux grants it from 6.8 (commit
 *   48f996d4adf1, drivers/infiniband/hw/bnxt_re/ib_verbs.c,
 *   bnxt_re_alloc_ucontext and bnxt_re_init_depth; also taken into
 *   6.6-stable). Either side older: rounded.
 * - CQ doubling: rdma-core from v51 (commit bac8bc7da928, "Doorbell
 *   moderation in poll_cq", providers/bnxt_re/verbs.c,
 *   bnxt_re_create_cq) asks the kernel for a CQ of twice the CQEs the
 *   application asked for (its deferred doorbell), whenever twice is
 *   under the device's max_cqe.
 * - a host MSN table (GenP7 chips, Linux >= 6.8): the kernel rounds the
 *   send queue's PSN-search entries up to a power of two
 *   (bnxt_re_init_user_qp).
 *
 * The run-time choice (rig__qp_pinned): the kernel's release, from
 * uname(2), tells whether it can grant unrounded depths (>= 6.8); what
 * rdma-core the process loaded is not known (libibverbs says nothing of
 * its providers' versions), so the figure is the largest over every
 * rdma-core that kernel may run with: the safe bound for RLIMIT_MEMLOCK.
 * A distribution kernel older than 6.8 that took 48f996d4adf1 pins less
 * than the bound, never more.
 */
#include <stdio.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "internal.h"

static uint64_t pow2_up(uint64_t n)
{
	uint64_t p = 1;

	while (p < n)
		p <<= 1;
	return p;
}

static uint64_t align_up(uint64_t n, uint64_t to)
{
	return (n + to - 1) / to * to;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

/* ------------------------------------------------------------- mlx5 */

/*
 * The sizes below are rdma-core's structures (providers/mlx5/mlx5dv.h):
 * a send WQE is built of 64-byte basic blocks (MLX5_SEND_WQE_BB), a data
 * segment (struct mlx5_wqe_data_seg) is 16 bytes, an inline segment's
 * header (struct mlx5_wqe_inl_data_seg) 4, a CQE 64 unless MLX5_CQE_SIZE
 * says 128 (get_cqe_size).
 */
#define MLX5_WQE_BB 64
#define MLX5_DATA_SEG 16
#define MLX5_INLINE_SEG 4
#define MLX5_CQE 64
/*
 * An RC queue pair's send overhead (_sq_overhead, providers/mlx5/verbs.c,
 * rdma-core v44 to v64 alike): the largest operation the queue pair may
 * post. rig makes it with send_ops_flags SEND, RDMA_WRITE and RDMA_READ
 * (qp.c, create_qp): a control segment 16 + a remote-address segment 16
 * = 32 bytes, so one 64-byte block a WQE with one gather entry. (Without
 * send_ops_flags, as an rdma-core before v24 would make it, every RC
 * operation: a memory-window bind or local invalidate, control 16 + UMR
 * control 48 + mkey context 64 + max(KLM 16, 64) = 192, a WQE of 256,
 * and the send queue pins four times the bytes.)
 */
#define MLX5_RC_OVERHEAD 32

/* mlx5_calc_send_wqe (providers/mlx5/verbs.c): the overhead and the
 * gather list, or the overhead and the inline data, aligned to a block. */
static uint64_t mlx5_send_wqe(const struct rig__qp_depths *d)
{
	uint64_t size = MLX5_RC_OVERHEAD + (uint64_t)d->send_sge * MLX5_DATA_SEG;
	uint64_t inl = 0;

	if (d->inline_data)
		inl = MLX5_RC_OVERHEAD + align_up(MLX5_INLINE_SEG + d->inline_data, 16);
	return align_up(max_u64(size, inl), MLX5_WQE_BB);
}

/* mlx5_calc_sq_size (providers/mlx5/verbs.c): max_send_wr WQEs, the
 * queue's bytes rounded up to a power of two. */
static uint64_t mlx5_sq_bytes(const struct rig__qp_depths *d)
{
	if (!d->send_wr)
		return 0;
	return pow2_up((uint64_t)d->send_wr * mlx5_send_wqe(d));
}

/* mlx5_calc_rq_size and mlx5_calc_rcv_wqe (providers/mlx5/verbs.c): a
 * receive WQE is its scatter list rounded up to a power of two (16 bytes
 * for one entry; no signature unless MLX5_QP_SIGNATURE is set), the
 * queue max_recv_wr rounded up to a power of two of them, one send
 * block at least. */
static uint64_t mlx5_rq_bytes(const struct rig__qp_depths *d)
{
	uint64_t sge = d->recv_sge ? d->recv_sge : 1;

	if (!d->recv_wr)
		return 0;
	return max_u64(pow2_up(d->recv_wr) * pow2_up(sge * MLX5_DATA_SEG), MLX5_WQE_BB);
}

/* create_cq (providers/mlx5/verbs.c): align_queue_size(cqe + 1), a power
 * of two, CQEs of 64 bytes; the kernel (drivers/infiniband/hw/mlx5/cq.c,
 * create_cq_user) pins as many, roundup_pow_of_two(cqe + 1) of the
 * cqe - 1 the library passes it. */
static uint64_t mlx5_cq_bytes(uint32_t cqe, uint32_t page)
{
	if (!cqe)
		return 0;
	return align_up(pow2_up((uint64_t)cqe + 1) * MLX5_CQE, page);
}

/* The send and receive queues share one buffer (mlx5_calc_wq_size,
 * mlx5_alloc_qp_buf), which the kernel pins whole
 * (drivers/infiniband/hw/mlx5/qp.c, set_user_buf_size: the library's
 * WQE counts and strides). */
static uint64_t mlx5_pinned(const struct rig__qp_depths *d, uint32_t page)
{
	return align_up(mlx5_sq_bytes(d) + mlx5_rq_bytes(d), page) +
	       mlx5_cq_bytes(d->send_cqe, page) + mlx5_cq_bytes(d->recv_cqe, page);
}

/* ---------------------------------------------------------- bnxt_re */

/*
 * The kernel's structures (drivers/infiniband/hw/bnxt_re/qplib_fp.h,
 * roce_hsi.h): a send WQE's header (struct sq_send_hdr) is 32 bytes, a
 * gather entry (struct sq_sge) 16, a PSN-search entry 16 on GenP5 and
 * GenP7 (struct sq_psn_search_ext; 8 on the older GenP4, struct
 * sq_psn_search), a CQE 32 (struct cq_base, the cqe_sz
 * bnxt_re_alloc_ucontext gives the library). In static WQE mode every
 * WQE has room for the device's max_qp_sges, 6, entries
 * (bnxt_re_setup_swqe_size, bnxt_re_setup_rwqe_size): 128 bytes, send
 * and receive alike. (Variable WQE mode, Linux and rdma-core >= 54 on
 * chips that offer it, sizes the send queue in 16-byte slots and pins
 * less; the static figure bounds it.) The send
 * queue holds 128 + 1 requests more than asked
 * (BNXT_QPLIB_RESERVED_QP_WRS, bnxt_re_init_sq_attr), the receive queue
 * 1 (bnxt_re_init_rq_attr).
 */
#define BNXT_HDR 32
#define BNXT_SGE 16
#define BNXT_STATIC_SGES 6
#define BNXT_PSN 16
#define BNXT_CQE 32
#define BNXT_RESERVED_WRS 128

/* bnxt_re_init_depth (kernel and library): rounded up to a power of two
 * unless both sides agreed not to. */
static uint64_t bnxt_depth(uint64_t n, const struct rig__pin_stack *s)
{
	return s->pow2 ? pow2_up(n) : n;
}

/* bnxt_re_get_wqe_size, bnxt_re_setup_swqe_size (kernel, ib_verbs.c):
 * the header and the gather list or the inline data (aligned to 32),
 * no less than the static 128 bytes. */
static uint64_t bnxt_send_wqe(const struct rig__qp_depths *d)
{
	uint64_t wqe = BNXT_HDR + BNXT_STATIC_SGES * BNXT_SGE;

	if (d->inline_data)
		wqe = max_u64(wqe, align_up(BNXT_HDR + align_up(d->inline_data, BNXT_HDR),
					    BNXT_HDR));
	return wqe;
}

/*
 * bnxt_re_init_user_qp (kernel, drivers/infiniband/hw/bnxt_re/ib_verbs.c,
 * Linux 6.1 to 6.12 alike in static WQE mode): the send queue's umem is
 * sq.max_wqe WQEs and as many PSN-search entries (rounded up to a power
 * of two with a host MSN table), page-aligned; the receive queue's
 * rq.max_wqe WQEs of 128 bytes, page-aligned. rdma-core's own sizing
 * (bnxt_re_get_sqmem_size, bnxt_re_get_rqmem_size) allocates at least as
 * much, page-aligned at the slab's start.
 */
static uint64_t bnxt_sq_bytes(const struct rig__qp_depths *d, const struct rig__pin_stack *s)
{
	uint64_t wqes = bnxt_depth((uint64_t)d->send_wr + BNXT_RESERVED_WRS + 1, s);
	uint64_t psns = s->msn ? pow2_up(wqes) : wqes;

	return align_up(wqes * bnxt_send_wqe(d) + psns * BNXT_PSN, s->page);
}

static uint64_t bnxt_rq_bytes(const struct rig__qp_depths *d, const struct rig__pin_stack *s)
{
	uint64_t wqes = bnxt_depth((uint64_t)d->recv_wr + 1, s);

	return align_up(wqes * (BNXT_HDR + BNXT_STATIC_SGES * BNXT_SGE), s->page);
}

/*
 * A CQ: the library (bnxt_re_create_cq, rdma-core >= 51) asks for twice
 * the CQEs; the kernel (bnxt_re_create_cq, ib_verbs.c) makes
 * bnxt_re_init_depth(cqe + 1) entries of 32 bytes and pins them.
 */
static uint64_t bnxt_cq_bytes(uint32_t cqe, const struct rig__pin_stack *s)
{
	uint64_t n = s->cq_double ? 2 * (uint64_t)cqe : cqe;

	if (!cqe)
		return 0;
	return align_up(bnxt_depth(n + 1, s) * BNXT_CQE, s->page);
}

static uint64_t bnxt_pinned(const struct rig__qp_depths *d, const struct rig__pin_stack *s)
{
	return bnxt_sq_bytes(d, s) + bnxt_rq_bytes(d, s) +
	       bnxt_cq_bytes(d->send_cqe, s) + bnxt_cq_bytes(d->recv_cqe, s);
}

/* ------------------------------------------------------------ choice */

int64_t rig__pinned(const struct rig__qp_depths *d, const struct rig__pin_stack *s)
{
	switch (s->provider) {
	case RIG__PIN_MLX5:
		return (int64_t)mlx5_pinned(d, s->page);
	case RIG__PIN_BNXT_RE:
		return (int64_t)bnxt_pinned(d, s);
	}
	return 0;
}

/* Whether a kernel of @release (uname -r) grants bnxt_re unrounded
 * depths: 6.8 or later. Unreadable: no, the larger figure. */
static bool kernel_unrounded(const char *release)
{
	unsigned major, minor;

	if (!release || sscanf(release, "%u.%u", &major, &minor) != 2)
		return false;
	return major > 6 || (major == 6 && minor >= 8);
}

int64_t rig__pinned_bound(enum rig__pin_provider provider, const struct rig__qp_depths *d,
			  const char *release, uint32_t page)
{
	/* rdma-core < 50: rounded, no doubling, on any kernel. */
	struct rig__pin_stack s = { .provider = provider, .pow2 = true, .page = page };
	int64_t most = rig__pinned(d, &s);
	int64_t n;

	if (provider != RIG__PIN_BNXT_RE)
		return most;
	if (!kernel_unrounded(release)) {
		/* rdma-core >= 51 on a kernel that rounds. */
		s.cq_double = true;
		n = rig__pinned(d, &s);
		return n > most ? n : most;
	}
	/* rdma-core 50 and >= 51 on a kernel that does not round, with
	 * and without a host MSN table. */
	s.pow2 = false;
	for (int dbl = 0; dbl < 2; dbl++) {
		for (int msn = 0; msn < 2; msn++) {
			s.cq_double = dbl;
			s.msn = msn;
			n = rig__pinned(d, &s);
			if (n > most)
				most = n;
		}
	}
	return most;
}

int64_t rig__qp_pinned(uint32_t vendor_id, uint32_t send_wr, uint32_t recv_wr,
		       uint32_t send_cqe, uint32_t recv_cqe)
{
	const struct rig__qp_depths d = {
		.send_wr = send_wr, .recv_wr = recv_wr,
		.send_cqe = send_cqe, .recv_cqe = recv_cqe,
		.send_sge = 1, .recv_sge = 1, .inline_data = 0,
	};
	struct utsname u;
	const char *release = uname(&u) ? NULL : u.release;
	long page = sysconf(_SC_PAGESIZE);
	int64_t mlx5, bnxt;

	if (page <= 0)
		page = 4096;
	switch (vendor_id) {
	case RIG_RXE_VENDOR_ID:
		return 0;	/* Soft-RoCE maps queues the kernel allocated */
	case RIG_MLX5_VENDOR_ID:
		return rig__pinned_bound(RIG__PIN_MLX5, &d, release, (uint32_t)page);
	case RIG_BNXT_RE_VENDOR_ID:
		return rig__pinned_bound(RIG__PIN_BNXT_RE, &d, release, (uint32_t)page);
	default:
		/* Other hardware: the larger of the two known. */
		mlx5 = rig__pinned_bound(RIG__PIN_MLX5, &d, release, (uint32_t)page);
		bnxt = rig__pinned_bound(RIG__PIN_BNXT_RE, &d, release, (uint32_t)page);
		return mlx5 > bnxt ? mlx5 : bnxt;
	}
}
