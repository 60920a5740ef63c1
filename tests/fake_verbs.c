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
	for (i = 0; i < n && cq->first < end;) {
		w = &cq->wc[cq->first++];
		if (w->status != IBV_WC_SUCCESS)
			cq->fake->ibqp.state = IBV_QPS_ERR;
		if (w->wr_id != FAKE_TERMINAL)
			wc[i++] = *w;
	}
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
static void take(struct fake_ring *ring, uint64_t wr_id, enum ibv_wc_opcode kind,
		 const struct ibv_sge *sge, int num_sge)
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
}

/* The outcome served its one post: the next one is accepted. */
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
		if (f->profile == FAKE_BNXT_RE_44 && f->ibqp.state != IBV_QPS_RTS &&
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
		take(ring, wr->wr_id, kind, wr->sg_list, wr->num_sge);
	}
	cr_assert_neq(ring->outcome, FAKE_REFUSE,
		      "fake: no request at index %d to refuse", ring->at);
	if (ring->outcome == FAKE_DOORBELL)
		*bad = NULL;
	return served(ring);
}

static int fake_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad)
{
	struct fake *f = container_of(ibqp, struct fake, ibqp);
	struct fake_ring *ring = &f->ring[RIG_RECEIVE];
	int i;

	for (i = 0; wr; wr = wr->next, i++) {
		if (f->profile == FAKE_BNXT_RE_44 && (f->ibqp.state == IBV_QPS_RESET ||
						      f->ibqp.state == IBV_QPS_ERR)) {
			*bad = wr;
			return EINVAL;
		}
		if (ring->outcome == FAKE_REFUSE && i == ring->at) {
			*bad = wr;
			return served(ring);
		}
		take(ring, wr->wr_id, IBV_WC_RECV, wr->sg_list, wr->num_sge);
	}
	cr_assert_neq(ring->outcome, FAKE_REFUSE,
		      "fake: no request at index %d to refuse", ring->at);
	if (ring->outcome == FAKE_DOORBELL)
		*bad = NULL;
	return served(ring);
}

void fake_reset(struct fake *f)
{
	struct rig__slot *slot[2] = { f->q.pub.ring[RIG_SEND].slot,
				      f->q.pub.ring[RIG_RECEIVE].slot };
	int side;

	rig__list_init(&f->nic.qps);
	rig__list_init(&f->nic.regions);
	memset(&f->q, 0, sizeof(f->q));
	f->q.nic = &f->nic;
	f->q.state = RIG__CONNECTED;
	rig__list_add(&f->nic.qps, &f->q.link);
	f->q.pub.ibqp = &f->ibqp;
	f->q.pub.nic = &f->nic;
	f->q.pub.local = 1;
	f->q.pub.msg_max = f->nic.msg_max;
	f->ibqp.state = IBV_QPS_RTS;
	f->profile = FAKE_PLAIN;
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		struct fake_ring *ring = &f->ring[side];

		f->q.pub.ring[side].cq = &ring->cq.cq;
		f->q.pub.ring[side].slot = slot[side];
		ring->cq.first = ring->cq.last = 0;
		ring->cq.fail = 0;
		ring->cq.hold = 0;
		ring->cq.polls = 0;
		ring->nreq = ring->next = 0;
		ring->outcome = FAKE_ACCEPT;
	}
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
	f->r.lkey = 0x1234;
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

void fake_cqe(struct fake *f, enum rig_side side, uint64_t wr_id,
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

	push(&f->ring[side].cq, &wc);
}

static const struct fake_req *next_req(struct fake *f, enum rig_side side)
{
	struct fake_ring *ring = &f->ring[side];

	cr_assert_lt(ring->next, ring->nreq,
		     "fake: the NIC holds no more requests on ring %d to complete",
		     side);
	return &ring->req[ring->next++];
}

void fake_complete(struct fake *f, enum rig_side side, int n,
		   enum ibv_wc_status status)
{
	const struct fake_req *req;

	while (n-- > 0) {
		req = next_req(f, side);
		fake_cqe(f, side, req->wr_id, status, req->kind,
			 status == IBV_WC_SUCCESS && side == RIG_RECEIVE ? req->length : 0,
			 0);
	}
}

void fake_message(struct fake *f, uint32_t byte_len)
{
	const struct fake_req *req = next_req(f, RIG_RECEIVE);

	cr_assert_leq(byte_len, req->length, "fake: a message longer than its receive");
	fake_cqe(f, RIG_RECEIVE, req->wr_id, IBV_WC_SUCCESS, IBV_WC_RECV,
		 byte_len, 0);
}

size_t fake_unpolled(const struct fake *f, enum rig_side side)
{
	return f->ring[side].cq.last - f->ring[side].cq.first;
}

void fake_event(struct fake *f, int error, const char *why)
{
	if (__atomic_load_n(&f->q.pub.broken, __ATOMIC_ACQUIRE) & RIG__EVENT)
		return;
	f->q.event_error = error;
	f->q.event_why = why;
	__atomic_or_fetch(&f->q.pub.broken, RIG__EVENT, __ATOMIC_RELEASE);
}
