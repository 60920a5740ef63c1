/* SPDX-License-Identifier: MIT */
/* The fake NIC behind tests/fake_verbs.h. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "fake_verbs.h"

static void *grow(void *a, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return a;
	*cap = need > 2 * *cap ? need : 2 * *cap;
	a = realloc(a, *cap * size);
	cr_assert_not_null(a, "fake: out of memory");
	return a;
}

/* The wr_id of a terminal CQE (fake_terminal): no request has it. */
#define FAKE_TERMINAL UINT64_MAX

const char *const fake_profile_name[FAKE_PROFILES] = {
	[FAKE_PLAIN] = "plain",
	[FAKE_RXE] = "rxe",
	[FAKE_MLX5] = "mlx5",
	[FAKE_BNXT_RE_44] = "bnxt_re, rdma-core 44, Linux < 6.7",
	[FAKE_BNXT_RE_44_K67] = "bnxt_re, rdma-core 44, Linux >= 6.7",
	[FAKE_BNXT_RE_50] = "bnxt_re, rdma-core >= 50, Linux < 6.7",
	[FAKE_BNXT_RE_50_K67] = "bnxt_re, rdma-core >= 50, Linux >= 6.7",
};

static bool bnxt(const struct fake *f)
{
	return f->profile >= FAKE_BNXT_RE_44;
}

static bool rdma_core_50(const struct fake *f)
{
	return f->profile == FAKE_BNXT_RE_50 || f->profile == FAKE_BNXT_RE_50_K67;
}

static bool kernel_67(const struct fake *f)
{
	return f->profile == FAKE_BNXT_RE_44_K67 || f->profile == FAKE_BNXT_RE_50_K67;
}

static enum rig_side side_of(const struct fake_cq *cq)
{
	return cq == &cq->fake->ring[RIG_SEND].cq ? RIG_SEND : RIG_RECEIVE;
}

/* bnxt_re: the request of @ring with @wr_id that the provider still
 * holds, or NULL. Requests complete in order, so the search is short. */
static struct fake_req *held(struct fake_ring *ring, uint64_t wr_id)
{
	size_t i;

	for (i = ring->first_held; i < ring->nreq; i++) {
		if (!ring->req[i].done && ring->req[i].wr_id == wr_id)
			return &ring->req[i];
	}
	return NULL;
}

static void done(struct fake_ring *ring, struct fake_req *req, bool flushed)
{
	req->done = true;
	req->flushed = flushed;
	while (ring->first_held < ring->nreq && ring->req[ring->first_held].done)
		ring->first_held++;
}

/* The latest request of @ring with @wr_id the NIC took, or NULL: a CQE
 * that names none is a test's stray CQE, not the NIC's failure. */
static struct fake_req *took(struct fake_ring *ring, uint64_t wr_id)
{
	size_t i;

	for (i = ring->nreq; i-- > 0;) {
		if (ring->req[i].wr_id == wr_id)
			return &ring->req[i];
	}
	return NULL;
}

/* bnxt_re_poll_term_cqe, bnxt_re_qp_move_flush_err: ERR, both queues. */
static void link_both(struct fake *f)
{
	f->ibqp.state = IBV_QPS_ERR;
	f->ring[RIG_SEND].linked = f->ring[RIG_RECEIVE].linked = true;
}

/* bnxt_re: one hardware CQE of @side, as its poll takes it; true if the
 * caller gets a completion for it. */
static bool bnxt_poll_one(struct fake *f, enum rig_side side, const struct ibv_wc *w)
{
	struct fake_ring *ring = &f->ring[side];
	struct fake_req *req;

	if (w->wr_id == FAKE_TERMINAL) {
		link_both(f);
		return false;
	}
	if (side == RIG_RECEIVE && w->status == IBV_WC_WR_FLUSH_ERR)
		return false;	/* BNXT_RE_RSP_ST_HW_FLUSH: skipped */
	req = held(ring, w->wr_id);
	if (req)
		done(ring, req, false);
	if (w->status == IBV_WC_SUCCESS)
		return true;
	ring->linked = true;
	if (side == RIG_SEND)
		f->ibqp.state = IBV_QPS_ERR;
	return true;
}

/* bnxt_re_poll_flush_wcs: a flush for every request a linked queue holds. */
static int bnxt_flush(struct fake *f, enum rig_side side, int n, struct ibv_wc *wc)
{
	struct fake_ring *ring = &f->ring[side];
	struct fake_req *req;
	int i = 0;

	while (ring->linked && i < n && ring->first_held < ring->nreq) {
		req = &ring->req[ring->first_held];
		wc[i++] = (struct ibv_wc){
			.wr_id = req->wr_id,
			.status = IBV_WC_WR_FLUSH_ERR,
			.opcode = req->kind,
			.qp_num = f->ibqp.qp_num,
		};
		done(ring, req, true);
	}
	return i;
}

static int fake_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
	struct fake_cq *cq = container_of(ibcq, struct fake_cq, cq);
	size_t end = cq->hold ? cq->held : cq->last;
	const struct ibv_wc *w;
	int i;

	cq->polls++;
	if (cq->hold)
		cq->hold--;
	if (cq->fail) {
		i = cq->fail;
		cq->fail = 0;
		return i;
	}
	if (bnxt(cq->fake)) {
		/* bnxt_re_poll_cq: the hardware's CQEs, then the flush lists. */
		for (i = 0; i < n && cq->first < end;) {
			w = &cq->wc[cq->first++];
			if (bnxt_poll_one(cq->fake, side_of(cq), w))
				wc[i++] = *w;
		}
		i += bnxt_flush(cq->fake, side_of(cq), n - i, wc + i);
		cq->given += i;
		return i;
	}
	for (i = 0; i < n && cq->first < end;) {
		w = &cq->wc[cq->first++];
		if (w->status != IBV_WC_SUCCESS)
			cq->fake->ibqp.state = IBV_QPS_ERR;
		if (w->wr_id != FAKE_TERMINAL)
			wc[i++] = *w;
	}
	cq->given += i;
	return i;
}

static void push(struct fake_cq *cq, const struct ibv_wc *wc)
{
	/* Polled CQEs are dead: start over rather than grow forever. */
	if (cq->first == cq->last && !cq->hold)
		cq->first = cq->last = 0;
	cq->wc = grow(cq->wc, &cq->cap, cq->last + 1, sizeof(*cq->wc));
	cq->wc[cq->last++] = *wc;
}

/* Records a request the NIC took; rig posts one entry per request. */
static struct fake_req *take(struct fake_ring *ring, uint64_t wr_id,
			     enum ibv_wc_opcode kind, const struct ibv_sge *sge,
			     int num_sge)
{
	struct fake_req *req;

	cr_assert_eq(num_sge, 1, "fake: a request of %d gather entries", num_sge);
	cr_assert_eq(wr_id >> 32, 0, "fake: wr_id %#llx is no ring sequence number",
		     (unsigned long long)wr_id);
	ring->req = grow(ring->req, &ring->cap, ring->nreq + 1, sizeof(*ring->req));
	req = &ring->req[ring->nreq++];
	req->wr_id = wr_id;
	req->kind = kind;
	req->length = sge->length;
	req->addr = sge->addr;
	req->lkey = sge->lkey;
	req->done = req->flushed = false;
	return req;
}

/*
 * What the NIC does with a request it took once it has failed the queue
 * pair: rxe's kernel flushes a send at once (the post's doorbell runs its
 * requester) and never sees a receive; mlx5's hardware flushes either.
 * The flush is the next CQE of the request's queue, as for any request
 * the failed queue pair holds. bnxt_re's flush lists take it in its poll.
 */
static void taken_after_failure(struct fake *f, enum rig_side side,
				const struct fake_req *req)
{
	struct fake_ring *ring = &f->ring[side];

	if (!f->nic_failed ||
	    !(f->profile == FAKE_MLX5 || (f->profile == FAKE_RXE && side == RIG_SEND)))
		return;
	fake_cqe(f, side, req->wr_id, IBV_WC_WR_FLUSH_ERR, req->kind, 0, 0);
	/* fake_complete() has nothing left to write for it. */
	if (ring->next == (size_t)(req - ring->req))
		ring->next++;
}

/* The outcome served its one post: the next one is accepted. */
/* rig(7) Q4: the library never gives a NIC of depth d more than d
 * requests of a ring whose CQEs it has not read. */
static void check_depth(const struct fake *f, enum rig_side side)
{
	const struct fake_ring *ring = &f->ring[side];

	if (f->depth && !f->nic_failed)
		cr_assert_leq(ring->nreq - ring->cq.given, f->depth,
			      "fake: the %s queue holds %zu requests whose CQEs rig has not "
			      "read, over its depth of %u", side == RIG_SEND ? "send" : "receive",
			      ring->nreq - ring->cq.given, f->depth);
}

static int served(struct fake_ring *ring)
{
	int ret = ring->outcome == FAKE_ACCEPT ? 0 : ring->ret;

	ring->outcome = FAKE_ACCEPT;
	return ret;
}

static int fake_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
			  struct ibv_send_wr **bad)
{
	struct fake *f = container_of(ibqp, struct fake, ibqp);
	struct fake_ring *ring = &f->ring[RIG_SEND];
	enum ibv_wc_opcode kind;
	int i;

	for (i = 0; wr; wr = wr->next, i++) {
		if (bnxt(f) && !rdma_core_50(f) && f->ibqp.state != IBV_QPS_RTS &&
		    f->ibqp.state != IBV_QPS_SQD) {
			*bad = wr;
			return EINVAL;
		}
		if (ring->outcome == FAKE_REFUSE && i == ring->at) {
			*bad = wr;
			return served(ring);
		}
		cr_assert(wr->opcode == IBV_WR_SEND || wr->opcode == IBV_WR_RDMA_READ,
			  "fake: rig posted opcode %d", wr->opcode);
		kind = wr->opcode == IBV_WR_SEND ? IBV_WC_SEND : IBV_WC_RDMA_READ;
		taken_after_failure(f, RIG_SEND, take(ring, wr->wr_id, kind, wr->sg_list,
						      wr->num_sge));
	}
	cr_assert_neq(ring->outcome, FAKE_REFUSE,
		      "fake: no request at index %d to refuse", ring->at);
	if (ring->outcome == FAKE_DOORBELL)
		*bad = NULL;
	check_depth(f, RIG_SEND);
	return served(ring);
}

static int fake_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad)
{
	struct fake *f = container_of(ibqp, struct fake, ibqp);
	struct fake_ring *ring = &f->ring[RIG_RECEIVE];
	int i;

	for (i = 0; wr; wr = wr->next, i++) {
		if (bnxt(f) && !rdma_core_50(f) && (f->ibqp.state == IBV_QPS_RESET ||
						     f->ibqp.state == IBV_QPS_ERR)) {
			*bad = wr;
			return EINVAL;
		}
		if (ring->outcome == FAKE_REFUSE && i == ring->at) {
			*bad = wr;
			return served(ring);
		}
		taken_after_failure(f, RIG_RECEIVE, take(ring, wr->wr_id, IBV_WC_RECV,
							 wr->sg_list, wr->num_sge));
	}
	cr_assert_neq(ring->outcome, FAKE_REFUSE,
		      "fake: no request at index %d to refuse", ring->at);
	if (ring->outcome == FAKE_DOORBELL)
		*bad = NULL;
	check_depth(f, RIG_RECEIVE);
	return served(ring);
}

void fake_depth(struct fake *f, uint32_t depth)
{
	int side;

	for (side = RIG_SEND; side <= RIG_RECEIVE; side++)
		f->q.pub.ring[side].depth = depth;
	f->q.shallow = depth < RIG_RING_ENTRIES;
	f->depth = f->q.shallow ? depth : 0;
}

void fake_far(struct fake *f, bool far)
{
	f->q.far = far;
	f->q.pub.local = !far;
	f->q.pub.lkey_at = rig__lkey_at(far);
}

void fake_reset(struct fake *f)
{
	struct rig__slot *slot[2] = { f->q.pub.ring[RIG_SEND].slot,
				      f->q.pub.ring[RIG_RECEIVE].slot };
	int side;

	rig__list_init(&f->nic.qps);
	rig__list_init(&f->nic.regions);
	free(f->q.waiting[RIG_SEND]);
	free(f->q.waiting[RIG_RECEIVE]);
	memset(&f->q, 0, sizeof(f->q));
	pthread_spin_init(&f->q.feed_lock, PTHREAD_PROCESS_PRIVATE);	/* as qp.c does */
	f->q.nic = &f->nic;
	f->q.state = RIG__CONNECTED;
	rig__list_add(&f->nic.qps, &f->q.link);
	f->q.pub.ibqp = &f->ibqp;
	f->q.pub.nic = &f->nic;
	f->q.pub.local = 1;
	f->q.pub.msg_max = f->nic.msg_max;
	f->q.pub.lkey_at = rig__lkey_at(false);
	f->ibqp.state = IBV_QPS_RTS;
	f->profile = FAKE_PLAIN;
	f->nic_failed = f->terminal = f->evented = false;
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		struct fake_ring *ring = &f->ring[side];

		f->q.pub.ring[side].cq = &ring->cq.cq;
		f->q.pub.ring[side].slot = slot[side];
		ring->cq.first = ring->cq.last = 0;
		ring->cq.given = 0;
		ring->cq.fail = 0;
		ring->cq.hold = 0;
		ring->cq.polls = 0;
		ring->nreq = ring->next = ring->first_held = 0;
		ring->linked = false;
		ring->outcome = FAKE_ACCEPT;
	}
	fake_depth(f, RIG_RING_ENTRIES);
}

struct fake *fake_new(void)
{
	struct fake *f = calloc(1, sizeof(*f));
	int side;

	cr_assert_not_null(f, "fake: out of memory");
	strcpy(f->nic.name, "fake0");
	f->nic.ctx = &f->ctx;
	f->nic.msg_max = 1u << 31;
	pthread_mutex_init(&f->nic.lock, NULL);
	f->ctx.ops.poll_cq = fake_poll_cq;
	f->ctx.ops.post_send = fake_post_send;
	f->ctx.ops.post_recv = fake_post_recv;
	f->ibqp.context = &f->ctx;
	f->ibqp.send_cq = &f->ring[RIG_SEND].cq.cq;
	f->ibqp.recv_cq = &f->ring[RIG_RECEIVE].cq.cq;
	f->ibqp.qp_num = 0x11;
	f->ibqp.state = IBV_QPS_RTS;
	f->ibqp.qp_type = IBV_QPT_RC;
	f->r.nic = &f->nic;
	f->r.addr = calloc(1, FAKE_REGION_LEN);
	f->r.len = FAKE_REGION_LEN;
	f->r.lkey = FAKE_LKEY;
	f->reg.far_lkey = FAKE_FAR_LKEY;
	f->r.rkey = 0x5678;
	cr_assert_not_null(f->r.addr, "fake: out of memory");
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		f->ring[side].cq.cq.context = &f->ctx;
		f->ring[side].cq.fake = f;
		f->ring[side].cq.cq.cqe = RIG_RING_ENTRIES;
		f->q.pub.ring[side].slot = calloc(RIG__SLOTS, sizeof(struct rig__slot));
		cr_assert_not_null(f->q.pub.ring[side].slot, "fake: out of memory");
	}
	fake_reset(f);
	f->qp = &f->q.pub;
	return f;
}

void fake_free(struct fake *f)
{
	int side;

	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		free(f->q.pub.ring[side].slot);
		free(f->q.waiting[side]);
		free(f->ring[side].cq.wc);
		free(f->ring[side].req);
	}
	free(f->r.addr);
	pthread_mutex_destroy(&f->nic.lock);
	free(f);
}

void fake_refuse(struct fake *f, enum rig_side side, int at, int ret)
{
	f->ring[side].outcome = FAKE_REFUSE;
	f->ring[side].at = at;
	f->ring[side].ret = ret;
}

void fake_doorbell_fails(struct fake *f, enum rig_side side, int ret)
{
	f->ring[side].outcome = FAKE_DOORBELL;
	f->ring[side].ret = ret;
}

void fake_profile(struct fake *f, enum fake_profile profile)
{
	f->profile = profile;
}

void fake_terminal(struct fake *f, enum rig_side side)
{
	f->terminal = true;
	fake_cqe(f, side, FAKE_TERMINAL, IBV_WC_GENERAL_ERR, 0, 0, 0);
}

void fake_cq_fails(struct fake *f, enum rig_side side, int ret)
{
	f->ring[side].cq.fail = ret;
}

void fake_hold(struct fake *f, enum rig_side side, int polls)
{
	f->ring[side].cq.held = f->ring[side].cq.last;
	f->ring[side].cq.hold = polls;
}

/* rxe and mlx5 flush in the NIC (the kernel, the hardware). */
static bool nic_flushes(const struct fake *f)
{
	return f->profile == FAKE_RXE || f->profile == FAKE_MLX5;
}

/*
 * rxe and mlx5: the queue pair's first error CQE (or flush) moves it to
 * ERR, and the NIC flushes every request it holds then, after that CQE,
 * each on its own queue's CQ, in order (rxe_qp_error runs the responder
 * and the completer, which flush; mlx5's hardware writes a WR_FLUSH_ERR
 * CQE per WQE). Nothing is left for a later fake_complete() to write.
 */
static void flush_all(struct fake *f, enum rig_side side, const struct fake_req *req)
{
	struct fake_ring *ring = &f->ring[side];
	size_t after = (size_t)(req - ring->req) + 1;
	struct ibv_wc wc = { .status = IBV_WC_WR_FLUSH_ERR, .qp_num = f->ibqp.qp_num };
	int s;

	if (ring->next < after)
		ring->next = after;
	for (s = RIG_SEND; s <= RIG_RECEIVE; s++) {
		ring = &f->ring[s];
		while (ring->next < ring->nreq) {
			req = &ring->req[ring->next++];
			wc.wr_id = req->wr_id;
			wc.opcode = req->kind;
			push(&ring->cq, &wc);
		}
	}
}

/* bnxt_re_handle_qp_async_event of Linux 6.7 on, for the first error of
 * the queue pair, as the library reads it (rig__events_async). */
static void kernel_event(struct fake *f, enum ibv_wc_status status)
{
	f->evented = true;
	switch (status) {
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		fake_event(f, EACCES, "the NIC reported an access violation by the peer (QP_ACCESS_ERR)");
		break;
	case IBV_WC_LOC_LEN_ERR:
		fake_event(f, EPROTO, "the NIC reported an invalid request from the peer (QP_REQ_ERR)");
		break;
	default:
		fake_event(f, EIO, "the NIC reported the queue pair broken (QP_FATAL)");
		break;
	}
}

int fake_cqe(struct fake *f, enum rig_side side, uint64_t wr_id,
	     enum ibv_wc_status status, enum ibv_wc_opcode opcode,
	     uint32_t byte_len, unsigned int wc_flags)
{
	struct ibv_wc wc = {
		.wr_id = wr_id,
		.status = status,
		.opcode = opcode,
		.byte_len = byte_len,
		.qp_num = f->ibqp.qp_num,
		.wc_flags = wc_flags,
	};
	struct fake_req *req = wr_id == FAKE_TERMINAL ? NULL : took(&f->ring[side], wr_id);

	if (bnxt(f) && wr_id != FAKE_TERMINAL) {
		/* What the provider flushed already, it cannot complete. */
		if (req && req->flushed)
			return 0;
		/* The hardware ends a receive queue it flushes with a
		 * terminal CQE (see FAKE_BNXT_RE_44). */
		if (side == RIG_RECEIVE && status == IBV_WC_WR_FLUSH_ERR && !f->terminal)
			fake_terminal(f, side);
	}
	push(&f->ring[side].cq, &wc);
	if (status != IBV_WC_SUCCESS && wr_id != FAKE_TERMINAL && kernel_67(f) &&
	    !f->evented)
		kernel_event(f, status);
	if (status == IBV_WC_SUCCESS || (wr_id != FAKE_TERMINAL && !req))
		return 1;
	if (nic_flushes(f) && !f->nic_failed && req)
		flush_all(f, side, req);
	f->nic_failed = true;
	return 1;
}

static const struct fake_req *next_req(struct fake *f, enum rig_side side)
{
	struct fake_ring *ring = &f->ring[side];

	cr_assert_lt(ring->next, ring->nreq,
		     "fake: the NIC holds no more requests on ring %d to complete",
		     side);
	return &ring->req[ring->next++];
}

int fake_complete(struct fake *f, enum rig_side side, int n,
		  enum ibv_wc_status status)
{
	const struct fake_req *req;
	int written = 0;

	while (n-- > 0) {
		/* rxe and mlx5 flushed what they held at the failure. */
		if (nic_flushes(f) && f->nic_failed)
			break;
		req = next_req(f, side);
		written += fake_cqe(f, side, req->wr_id, status, req->kind,
				    status == IBV_WC_SUCCESS && side == RIG_RECEIVE ?
				    req->length : 0, 0);
	}
	return written;
}

int fake_message(struct fake *f, uint32_t byte_len)
{
	const struct fake_req *req;

	if (nic_flushes(f) && f->nic_failed)
		return 0;
	req = next_req(f, RIG_RECEIVE);
	cr_assert_leq(byte_len, req->length, "fake: a message longer than its receive");
	return fake_cqe(f, RIG_RECEIVE, req->wr_id, IBV_WC_SUCCESS, IBV_WC_RECV,
			byte_len, 0);
}

size_t fake_unpolled(const struct fake *f, enum rig_side side)
{
	return f->ring[side].cq.last - f->ring[side].cq.first;
}

void fake_event(struct fake *f, int error, const char *why)
{
	/* bnxt_re_async_event runs inside ibv_get_async_event, before the
	 * library sees the event; the peer leaving is no verbs event. */
	if (rdma_core_50(f) && error != ECONNRESET && error != ENODEV)
		link_both(f);
	if (__atomic_load_n(&f->q.pub.broken, __ATOMIC_ACQUIRE) & RIG__EVENT)
		return;
	f->q.event_error = error;
	f->q.event_why = why;
	__atomic_or_fetch(&f->q.pub.broken, RIG__EVENT, __ATOMIC_RELEASE);
}
