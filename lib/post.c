/* SPDX-License-Identifier: MIT */
/*
 * The slow posts, and the slow paths' entries: what the inline hot path
 * calls out of line (rig__qp_post_slow, rig__qp_poll_slow,
 * rig__qp_post_refused), the batches, and the rings deeper than the NIC's
 * queues (rig(7) Q4): entries beyond the NIC's depth wait in the ring, in
 * order, and go to the NIC as its completions free room (feed). It stands
 * on the failure model (ring.c), whose record, reaps and slow poll it
 * calls; ring.c calls nothing here.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "probes.h"

/* Who moves waiting entries to the NIC (rig(7) Q4): a post moves them
 * into the room known; a poll (and a wait, through it) reads the CQs
 * for room first; the loop's thread reads them too, and leaves what
 * only the owner may do, a refusal's handling, to the owner. */
enum feeder { BY_POST, BY_POLL, BY_LOOP };

static void feed(struct rig__qp *qp, enum feeder by);
static void settle(struct rig__qp *qp);


/* Takes @wc, a plain success CQE of @side's oldest due entry, into @c,
 * as the inline poll does (rig_qp_poll). */
static void take_success(struct rig__ring *ring, enum rig_side side,
			 const struct ibv_wc *wc, struct rig_completion *c)
{
	c->bytes = side == RIG_RECEIVE ? wc->byte_len : ring->slot[ring->tail & RIG__MASK].len;
	c->error = 0;
	c->why = NULL;
	ring->tail++;
}

/*
 * The poll of a queue pair that is healthy but for its entries waiting
 * (RIG__WAITING bits alone, nothing reaped ahead, no flush seen): one CQ
 * read, as the inline poll's, of up to 16 CQEs rather than one. Every
 * CQE the NIC has written is read, so the feed after it knows all the
 * room there is, and whether the NIC's queue ran dry (rig_qp_stats).
 * The first CQE, a plain success, is taken as the inline poll takes
 * it; the others are filed in their slots. Anything else (an error, a
 * completion of another kind, an empty CQ while the NIC owes the other
 * ring CQEs, which may hold a failure) goes to the slow poll, as the
 * inline poll's would. @idle: set when it read nothing and went nowhere
 * else: the room it knows is what the last move left, so there is
 * nothing to move (a thread spinning on the ring pays one CQ read).
 */
static int poll_backlog(struct rig__qp *qp, enum rig_side side,
			struct rig_completion *c, bool *idle)
{
	struct rig__ring *ring = &qp->pub.ring[side];
	struct ibv_wc wc[16];
	int i, n;

	*idle = false;
	if (ring->tail == ring->head)
		return 0;
	n = ibv_poll_cq(ring->cq, 16, wc);
	if (n >= 0 && n < 16)	/* the feed after need not read it again */
		rig__ring_drained(qp, side);
	if (unlikely(n < 1 || wc[0].status != IBV_WC_SUCCESS ||
		     !rig__wc_kind_ok(side, &wc[0]))) {
		if (n == 0 && !rig__ring_at_nic(qp, !side)) {
			*idle = true;
			return 0;
		}
		for (i = 0; i < n; i++)
			rig__ring_reap_one(qp, side, &wc[i]);
		return rig__ring_poll_slow(&qp->pub, side, NULL, n < 0 ? n : 0,
					   n >= 0 && n < 16, c);
	}
	take_success(ring, side, &wc[0], c);
	for (i = 1; i < n; i++)
		rig__ring_reap_one(qp, side, &wc[i]);
	return 1;
}

/* Whether the NIC's queue under ring @side has room for the next move
 * of the entries waiting there: a poll that took nothing still makes it
 * then, when the inline poll's takes made the room (!loop_moves; else
 * every take came through here and moved what its room allowed). */
static bool move_due(const struct rig__qp *qp, enum rig_side side)
{
	const struct rig__ring *ring = &qp->pub.ring[side];

	return rig__qp_waiting(qp, side) &&
	       rig__ring_at_nic(qp, side) + rig__ring_move(ring, side) <= ring->depth;
}

/* The slow poll of a queue pair whose rings are deeper than the NIC's
 * queues: the same, under feed_lock, then a move of the waiting entries
 * of both rings to the NIC (rig(7) Q4). After the poll, not before: the
 * slot of the entry it took is free, and the CQ it read need not be
 * read again to find room (a spinning poll reads one CQ, as inline). */
static int poll_shallow(struct rig_qp *pub, enum rig_side side,
			const struct ibv_wc *wc, int n, struct rig_completion *c)
{
	struct rig__qp *qp = rig__qp(pub);
	bool idle = false;
	int ret;

	rig__ring_feed_lock(qp);
	if (!wc && !(rig__qp_broken(pub) & ~RIG__WAITING_ANY) && !pub->ring[side].ahead &&
	    !qp->flushed)
		ret = poll_backlog(qp, side, c, &idle);
	else
		ret = rig__ring_poll_slow(pub, side, wc, n, wc && n == 0, c);
	if (!idle || (!qp->loop_moves && move_due(qp, side))) {
		feed(qp, BY_POLL);
		settle(qp);
	}
	rig__ring_feed_unlock(qp);
	return ret;
}

RIG_EXPORT __cold int rig__qp_poll_slow(struct rig_qp *pub, enum rig_side side,
					const struct ibv_wc *wc, int n,
					struct rig_completion *c)
{
	if (!pub || (unsigned)side > RIG_RECEIVE || !c)
		return rig__fail(EINVAL, "rig_qp_poll: %s",
				 (unsigned)side > RIG_RECEIVE ? "no such side"
							      : "NULL argument");
	if (rig__qp_broken(pub) & RIG__CLOSED)
		return rig__fail(EINVAL, "rig_qp_poll: the queue pair is closing (rig_qp_close)");
	if (likely(!rig__qp(pub)->shallow))
		/* The inline poll passes the CQE it read; with n == 0 it
		 * just found the CQ empty. */
		return rig__ring_poll_slow(pub, side, wc, n, wc && n == 0, c);
	return poll_shallow(pub, side, wc, n, c);
}

static int check_span(const struct rig__qp *qp, const struct rig_region *r,
		      size_t at, size_t n, const char *what)
{
	if (!r)
		return rig__fail(EINVAL, "%s region is NULL", what);
	if (!r->nic)
		return rig__fail(EINVAL, "%s region is deregistered", what);
	if (r->nic != qp->pub.nic)
		return rig__fail(EINVAL, "%s region belongs to another NIC", what);
	if (at > r->len || n > r->len - at)
		return rig__fail(EINVAL, "%s range [%zu, +%zu) is not inside the region's %zu bytes",
				 what, at, n, r->len);
	if (n > qp->pub.msg_max)
		return rig__fail(EINVAL, "a message of %zu bytes is over %s's limit of %u",
				 n, qp->nic->name, qp->pub.msg_max);
	return 0;
}

static int post_shallow(struct rig__qp *qp, enum rig__op op,
			const struct rig_region *src, size_t src_at,
			const struct rig_region *dst, size_t dst_at, size_t n);

static int post_slow(struct rig_qp *pub, enum rig__op op,
		     const struct rig_region *src, size_t src_at,
		     const struct rig_region *dst, size_t dst_at, size_t n);

/* What the NIC will need of a post of @op that waits (struct
 * rig__waiting): its bytes, with the key of @qp's domain (M4), and a
 * read's source. */
static struct rig__waiting waiting_request(const struct rig__qp *qp, enum rig__op op,
					   const struct rig_region *src, size_t src_at,
					   const struct rig_region *dst, size_t dst_at)
{
	struct rig__waiting w = {
		.addr = (uintptr_t)(dst->addr + dst_at),
		.lkey = rig__qp_lkey(&qp->pub, dst),
		.op = op,
	};

	if (op == RIG__OP_READ) {
		w.remote = (uintptr_t)(src->addr + src_at);
		w.rkey = src->rkey;
	}
	return w;
}

/*
 * A post behind entries already waiting in its ring (rig(7) Q4), on a
 * queue pair healthy but for them, with the post's checks passed: it
 * waits too, after them, and takes no lock. No other thread posts
 * (C3); the loop's thread may be moving the older entries meanwhile,
 * under the lock: it reads head with acquire, so it sees this entry
 * whole or not at all, and one it does not see goes at the next move
 * (the owner's next poll or wait of the ring, or the loop's hand-out
 * of the completion of what it just moved). Posting it to the NIC now
 * could not be: an entry waits before it, and every slow call moves
 * what the room it knows allows before it ends. Returns false for any
 * other post (the locked path decides).
 */
static bool append_waiting(struct rig__qp *qp, enum rig__op op,
			   const struct rig_region *src, size_t src_at,
			   const struct rig_region *dst, size_t dst_at, size_t n)
{
	enum rig_side side = op == RIG__OP_RECEIVE ? RIG_RECEIVE : RIG_SEND;
	struct rig__ring *ring = &qp->pub.ring[side];
	uint32_t broken = __atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE);
	uint32_t seq = ring->head;

	if ((broken & ~RIG__WAITING_ANY) || !(broken & RIG__WAITING(side)) ||
	    __atomic_load_n(&qp->fed[side], __ATOMIC_RELAXED) == seq ||
	    rig__ring_used(ring) >= RIG_RING_ENTRIES ||
	    rig__qp_bad_span(&qp->pub, dst, dst_at, n) ||
	    (op == RIG__OP_READ &&
	     (!qp->pub.local || rig__qp_bad_span(&qp->pub, src, src_at, n))))
		return false;
	qp->waiting[side][seq & RIG__MASK] = waiting_request(qp, op, src, src_at, dst, dst_at);
	ring->slot[seq & RIG__MASK].len = (uint32_t)n;
	ring->slot[seq & RIG__MASK].cookie = 0;
	qp->waited[side]++;
	__atomic_store_n(&ring->head, seq + 1, __ATOMIC_RELEASE);
	return true;
}

RIG_EXPORT __cold int rig__qp_post_slow(struct rig_qp *pub, enum rig__op op,
					const struct rig_region *src, size_t src_at,
					const struct rig_region *dst, size_t dst_at,
					size_t n)
{
	struct rig__qp *qp;
	int ret;

	if (!pub)
		return rig__fail(EINVAL, "NULL queue pair");
	qp = rig__qp(pub);
	if (likely(!qp->shallow))
		return post_slow(pub, op, src, src_at, dst, dst_at, n);
	if (append_waiting(qp, op, src, src_at, dst, dst_at, n))
		return 0;
	rig__ring_feed_lock(qp);
	ret = post_slow(pub, op, src, src_at, dst, dst_at, n);
	settle(qp);
	rig__ring_feed_unlock(qp);
	return ret;
}

static int post_slow(struct rig_qp *pub, enum rig__op op,
		     const struct rig_region *src, size_t src_at,
		     const struct rig_region *dst, size_t dst_at, size_t n)
{
	enum rig_side side = op == RIG__OP_RECEIVE ? RIG_RECEIVE : RIG_SEND;
	struct rig__qp *qp = rig__qp(pub);
	struct rig__ring *ring = &pub->ring[side];
	int ret;

	if (rig__qp_broken(pub) & RIG__CLOSED)
		return rig__fail(EINVAL, "the queue pair is closing (rig_qp_close)");
	if (qp->state != RIG__CONNECTED)
		return rig__fail(EINVAL, "the queue pair is not connected");
	if (op == RIG__OP_READ) {
		if (!pub->local)
			return rig__fail(EINVAL, "reads are only for a peer on the same NIC");
		ret = check_span(qp, src, src_at, n, "the source");
		if (ret)
			return ret;
	}
	ret = check_span(qp, dst, dst_at, n,
			 op == RIG__OP_READ ? "the destination" : "the");
	if (ret)
		return ret;
	if (rig__ring_used(ring) >= RIG_RING_ENTRIES) {
		qp->full[side]++;
		return rig__fail(ENOSPC, "the %s ring is full",
				 side == RIG_SEND ? "send" : "receive");
	}
	if (__atomic_load_n(&pub->broken, __ATOMIC_ACQUIRE) & (RIG__FAILED | RIG__EVENT)) {
		/* F5: accepted, completed by poll with the failure's error;
		 * nothing reaches the NIC. */
		ring->slot[ring->head & RIG__MASK].len = (uint32_t)n;
		ring->slot[ring->head & RIG__MASK].cookie = 0;
		ring->head++;
		return 0;
	}
	/* Beyond the NIC's depth, or a queue pair with entries waiting. */
	if (qp->shallow)
		return post_shallow(qp, op, src, src_at, dst, dst_at, n);
	/* Nothing was wrong after all (another thread's event came and went
	 * between the checks): post for real. */
	switch (op) {
	case RIG__OP_SEND:
		return rig_qp_send(pub, dst, dst_at, n);
	case RIG__OP_READ:
		return rig_qp_read(pub, src, src_at, dst, dst_at, n);
	default:
		return rig_qp_receive(pub, dst, dst_at, n);
	}
}

static const char *const doorbell_failed =
	"the NIC queued the request but refused its doorbell";

/*
 * A chain of @count requests the provider answered with @ret and @bad.
 * Providers point @bad at the first request they refused; those before
 * it are queued. Soft-RoCE queues the whole chain, then rings its
 * doorbell with a write() that can fail: it returns the error with @bad
 * still NULL (as rig initialises it). Then every request is in the NIC's
 * queue, may or may not run, and may never complete: the entries count
 * as posted, the queue pair fails, and the library completes them (F6).
 * Returns how many the NIC took.
 */
static int chain_taken(struct rig__qp *qp, const void *first, size_t size,
		       int count, const void *bad, int ret)
{
	uintptr_t at = (uintptr_t)bad - (uintptr_t)first;

	if (bad && (uintptr_t)bad >= (uintptr_t)first && at < count * size)
		return (int)(at / size);
	rig__qp_failed(qp, RIG__CAUSE_DEVICE, ret, doorbell_failed, -1);
	return count;
}

static const char *const refused_failed =
	"the NIC refused a post as invalid: its queue pair had failed, for a reason not seen yet";

/*
 * A request rig checked itself (the queue pair connected, its regions
 * live, its bytes inside them, the ring with room, one gather entry, an
 * opcode rig uses) that the provider refused with EINVAL: the provider
 * has moved the queue pair to the error state on its own and refuses
 * posts there. bnxt_re does so up to rdma-core 46 (providers/bnxt_re/
 * verbs.c: bnxt_re_post_send refuses unless the queue pair is RTS or SQD,
 * bnxt_re_post_recv refuses in ERR, each with *bad and EINVAL), and its
 * poll moves the queue pair to ERR when it reads an error CQE of the
 * send queue (bnxt_re_poll_err_scqe) or a terminal CQE, which it gives
 * the caller no completion for (bnxt_re_poll_term_cqe). That same poll
 * flushes what the queue pair holds on the CQ (bnxt_re_poll_flush_lists),
 * so the library mostly knows first: no order the replay's bnxt_re
 * profiles play gets a refusal in before it (tests/fake_verbs.h). But the
 * provider's state is its own: a refusal of a post rig checked says the
 * queue pair has failed (F1), and the post is accepted (F5). The CQs are
 * read first, as for a flush: an error CQE there is the failure; else the
 * failure is the refusal, with no reason yet, and a reason that turns up
 * later replaces it (F3). Any other errno (a provider's full queue:
 * ENOMEM) refuses this post only.
 * Returns true when the queue pair has failed.
 */
static bool post_refused_failed(struct rig__qp *qp, int ret)
{
	if (ret != EINVAL || qp->state != RIG__CONNECTED)
		return false;
	rig__ring_reap(qp, RIG_SEND);
	rig__ring_reap(qp, RIG_RECEIVE);
	rig__qp_failed(qp, RIG__CAUSE_REFUSED, ECANCELED, refused_failed, -1);
	return true;
}

RIG_EXPORT __cold int rig__qp_post_refused(struct rig_qp *pub, enum rig__op op,
					   const void *wr, const void *bad, int ret)
{
	enum rig_side side = op == RIG__OP_RECEIVE ? RIG_RECEIVE : RIG_SEND;
	struct rig__qp *qp = rig__qp(pub);

	rig__ring_feed_lock(qp);
	if (!chain_taken(qp, wr, 1, 1, bad, ret) && !post_refused_failed(qp, ret)) {
		rig__ring_feed_unlock(qp);
		return rig__fail_verbs(ret, qp->nic,
				       side == RIG_RECEIVE ? "ibv_post_recv" : "ibv_post_send");
	}
	/* Accepted: its completion carries the failure (F5). */
	pub->ring[side].head++;
	rig__ring_feed_unlock(qp);
	return 0;
}

/*
 * Posts one request to the NIC now: @w, entry @seq of @side. Returns 0
 * when the NIC took it or it counts as posted (a refused doorbell, a
 * refusal that says the queue pair failed: F5), else the provider's
 * errno (the entry was not taken).
 */
static int post_one(struct rig__qp *qp, enum rig_side side, uint32_t seq,
		    const struct rig__waiting *w, uint32_t len)
{
	struct ibv_sge sge = { w->addr, len, w->lkey };
	int ret;

	if (side == RIG_RECEIVE) {
		struct ibv_recv_wr wr = { .wr_id = seq, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;

		ret = ibv_post_recv(qp->pub.ibqp, &wr, &bad);
		if (ret && !chain_taken(qp, &wr, sizeof(wr), 1, bad, ret) &&
		    !post_refused_failed(qp, ret))
			return ret;
	} else {
		struct ibv_send_wr wr, *bad = NULL;

		memset(&wr, 0, sizeof(wr));
		wr.wr_id = seq;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = w->op == RIG__OP_READ ? IBV_WR_RDMA_READ : IBV_WR_SEND;
		wr.wr.rdma.remote_addr = w->remote;
		wr.wr.rdma.rkey = w->rkey;
		ret = ibv_post_send(qp->pub.ibqp, &wr, &bad);
		if (ret && !chain_taken(qp, &wr, sizeof(wr), 1, bad, ret) &&
		    !post_refused_failed(qp, ret))
			return ret;
	}
	return 0;
}

/*
 * Posts up to @k waiting entries of @side from fed on, as one chain (one
 * doorbell). Returns how many the NIC took (or count as posted, F5);
 * fewer than @k when it refused the rest for a reason that fails nothing,
 * or, on the loop's thread (@by), for any reason: whether a refusal
 * failed the queue pair is for the owner to find (post_refused_failed
 * reads both CQs, and the owner may be polling the other ring inline).
 */
static int post_chain(struct rig__qp *qp, enum rig_side side, int k,
		      enum feeder by)
{
	struct rig__ring *ring = &qp->pub.ring[side];
	struct ibv_sge sge[RIG_BATCH_MAX];
	uint32_t seq = qp->fed[side];
	int i, ret, taken;

	for (i = 0; i < k; i++) {
		const struct rig__waiting *w = &qp->waiting[side][(seq + i) & RIG__MASK];

		sge[i].addr = w->addr;
		sge[i].length = ring->slot[(seq + i) & RIG__MASK].len;
		sge[i].lkey = w->lkey;
	}
	if (side == RIG_RECEIVE) {
		struct ibv_recv_wr wr[RIG_BATCH_MAX], *bad = NULL;

		for (i = 0; i < k; i++) {
			wr[i].wr_id = seq + i;
			wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
			wr[i].sg_list = &sge[i];
			wr[i].num_sge = 1;
		}
		ret = ibv_post_recv(qp->pub.ibqp, wr, &bad);
		taken = ret ? chain_taken(qp, wr, sizeof(wr[0]), k, bad, ret) : k;
	} else {
		struct ibv_send_wr wr[RIG_BATCH_MAX], *bad = NULL;

		memset(wr, 0, k * sizeof(wr[0]));
		for (i = 0; i < k; i++) {
			const struct rig__waiting *w = &qp->waiting[side][(seq + i) & RIG__MASK];

			wr[i].wr_id = seq + i;
			wr[i].next = i + 1 < k ? &wr[i + 1] : NULL;
			wr[i].sg_list = &sge[i];
			wr[i].num_sge = 1;
			wr[i].opcode = w->op == RIG__OP_READ ? IBV_WR_RDMA_READ : IBV_WR_SEND;
			wr[i].wr.rdma.remote_addr = w->remote;
			wr[i].wr.rdma.rkey = w->rkey;
		}
		ret = ibv_post_send(qp->pub.ibqp, wr, &bad);
		taken = ret ? chain_taken(qp, wr, sizeof(wr[0]), k, bad, ret) : k;
	}
	if (taken < k && by != BY_LOOP && post_refused_failed(qp, ret))
		taken = k;
	return taken;
}

/* Nothing may go to the NIC: rig knows the queue pair failed, a flush
 * (whose reason may not be known yet) said so, or it is closing (F2,
 * F5, D3). */
static bool sealed(const struct rig__qp *qp)
{
	return rig__ring_failed(qp) || qp->flushed ||
	       (__atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE) &
		(RIG__FAILED | RIG__EVENT | RIG__CLOSED));
}

/* Reads the CQ of @side, whose completions free the NIC's slots once
 * read, unless this slow call found it empty already (qp->drained):
 * the steps of one call read a CQ once. Returns whether it read. */
static bool reap_once(struct rig__qp *qp, enum rig_side side)
{
	if (__atomic_load_n(&qp->drained, __ATOMIC_RELAXED) & (1u << side))
		return false;
	rig__ring_reap(qp, side);
	return true;
}

/* Moves the entries waiting in ring @side to the NIC, oldest first, as
 * far as its depth allows; feed_lock held. When the NIC's queue is
 * full, the CQ is read for room unless @by is a post (which reads a CQ
 * only to decide whether an entry must wait at all: must_wait).
 * @count_dry: a NIC queue found empty counts as run dry (rig_qp_stats),
 * unless the entries waiting are a batch just posted. */
static void feed_ring(struct rig__qp *qp, enum rig_side side, enum feeder by,
		      bool count_dry)
{
	struct rig__ring *ring = &qp->pub.ring[side];
	uint32_t room, left;
	int k, taken;
	bool dry;

	for (;;) {
		/* The owner appends behind waiting entries without the
		 * lock (append_waiting): head is read with acquire, fed
		 * written whole. */
		left = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE) - qp->fed[side];
		if (!left)
			return;
		room = ring->depth - rig__ring_at_nic(qp, side);
		if (!room) {
			if (by == BY_POST || sealed(qp) || !reap_once(qp, side))
				return;
			room = ring->depth - rig__ring_at_nic(qp, side);
			if (!room)
				return;
		}
		/* Receives go in chains of a quarter of the depth (up to
		 * RIG_BATCH_MAX / 4): one post of several receives costs
		 * little more than one, and the NIC keeps three quarters
		 * of its receives meanwhile (rig(7) Q4). Sends go at once:
		 * each is a message the peer waits for. Checked before
		 * anything else: most receives taken move nothing. */
		if (room < left && room < rig__ring_move(ring, side))
			return;
		if (sealed(qp))
			return;
		k = (int)(room < left ? room : left);
		if (k > RIG_BATCH_MAX)
			k = RIG_BATCH_MAX;
		/* Every entry the NIC was given has its CQE read: the NIC
		 * holds none of this ring's, while entries wait in it. On
		 * the receive ring a send that arrived since the NIC took
		 * its last receive met an RNR NAK (rig(7) Q4, M3). Counted
		 * once a refill ends it; the CQE is written after the
		 * entry left the NIC, so the count holds on any provider. */
		dry = count_dry && room == ring->depth;
		taken = post_chain(qp, side, k, by);
		if (dry && taken)
			__atomic_add_fetch(&qp->ran_dry[side], 1, __ATOMIC_RELAXED);
		rig__ring_gave(qp, side, (uint32_t)taken);
		/* The provider refused for now (the next feed tries again),
		 * or a refusal failed the queue pair. */
		if (taken < k)
			return;
	}
}

/* Moves the waiting entries of both rings; feed_lock held. */
static void feed(struct rig__qp *qp, enum feeder by)
{
	if (rig__qp_waiting(qp, RIG_SEND))
		feed_ring(qp, RIG_SEND, by, true);
	if (rig__qp_waiting(qp, RIG_RECEIVE))
		feed_ring(qp, RIG_RECEIVE, by, true);
}

/*
 * The owner, at the end of a slow path (feed_lock held): once nothing
 * waits in a ring, the inline code may post and poll it again. And
 * whether the owner is still alone with its CQs: until the queue pair's
 * loop lists news, no other thread reads them, and the inline poll takes
 * a waiting ring's completions up to refill_at. Once the loop lists (for
 * good), its thread moves entries too, reading the CQs (loop_moves): from
 * this call on every poll of a waiting ring takes feed_lock, and the
 * loop's thread, which left the queue pair alone till now, moves its
 * entries from its next hand-out on.
 */
static void settle(struct rig__qp *qp)
{
	uint32_t broken = __atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE);
	int side;

	if (unlikely(!qp->loop_moves) && qp->loop &&
	    __atomic_load_n(&qp->loop->listing, __ATOMIC_ACQUIRE)) {
		qp->loop_moves = true;
		for (side = RIG_SEND; side <= RIG_RECEIVE; side++)
			if (broken & RIG__WAITING(side))
				rig__ring_refill(qp, side);
	}
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++)
		if ((broken & RIG__WAITING(side)) && qp->fed[side] == qp->pub.ring[side].head)
			__atomic_and_fetch(&qp->pub.broken, ~RIG__WAITING(side),
					   __ATOMIC_RELEASE);
}

void rig__qp_feed(struct rig__qp *qp)
{
	if (!qp->shallow || !(rig__qp_broken(&qp->pub) & RIG__WAITING_ANY))
		return;
	rig__ring_feed_lock(qp);
	/* Till then the owner may be taking completions inline (settle). */
	if (qp->loop_moves)
		feed(qp, BY_LOOP);
	rig__ring_feed_unlock(qp);
}

/* Makes room for entries of @side to wait, from head on; sets the
 * ring's RIG__WAITING bit, with fed at head, if nothing waited yet. */
static int wait_room(struct rig__qp *qp, enum rig_side side)
{
	if (!qp->waiting[side]) {
		qp->waiting[side] = calloc(RIG__SLOTS, sizeof(*qp->waiting[side]));
		if (!qp->waiting[side])
			return rig__fail(ENOMEM, "no memory for the entries waiting beyond the NIC's depth");
	}
	if (!rig__ring_backlog(qp, side))
		rig__ring_begin_waiting(qp, side);
	return 0;
}

/* Whether an entry of @side posted now must wait: entries wait before
 * it, or the NIC holds its depth (its CQ read first: reading frees). */
static bool must_wait(struct rig__qp *qp, enum rig_side side, uint32_t count)
{
	const struct rig__ring *ring = &qp->pub.ring[side];

	if (rig__qp_waiting(qp, side))
		return true;
	if (rig__ring_at_nic(qp, side) + count <= ring->depth)
		return false;
	reap_once(qp, side);
	return rig__ring_at_nic(qp, side) + count > ring->depth;
}

/*
 * A post of a queue pair whose rings are deeper than the NIC's queues,
 * once post_slow checked it and found the queue pair healthy: to the NIC
 * if it has room and nothing waits before the entry, else to the ring's
 * waiting entries; then the waiting entries of both rings move into the
 * room known, oldest first (rig(7) Q4).
 */
static int post_shallow(struct rig__qp *qp, enum rig__op op,
			const struct rig_region *src, size_t src_at,
			const struct rig_region *dst, size_t dst_at, size_t n)
{
	enum rig_side side = op == RIG__OP_RECEIVE ? RIG_RECEIVE : RIG_SEND;
	struct rig__ring *ring = &qp->pub.ring[side];
	uint32_t seq = ring->head;
	struct rig__waiting w = waiting_request(qp, op, src, src_at, dst, dst_at);
	int ret;

	ring->slot[seq & RIG__MASK].len = (uint32_t)n;
	ring->slot[seq & RIG__MASK].cookie = 0;
	if (!sealed(qp) && must_wait(qp, side, 1)) {
		if ((ret = wait_room(qp, side)))
			return ret;
		qp->waiting[side][seq & RIG__MASK] = w;
		qp->waited[side]++;
		ring->head++;
		feed(qp, BY_POST);
		return 0;
	}
	/* The queue pair failed meanwhile (found by reading its CQs): F5. */
	if (sealed(qp)) {
		ring->head++;
		return 0;
	}
	ret = post_one(qp, side, seq, &w, (uint32_t)n);
	if (ret)
		return rig__fail_verbs(ret, qp->nic,
				       side == RIG_RECEIVE ? "ibv_post_recv" : "ibv_post_send");
	ring->head++;
	rig__ring_gave(qp, side, 1);	/* the bit set, nothing waiting */
	feed(qp, BY_POST);
	return 0;
}

/* Checks a whole batch before any of it is posted. */
static int check_batch(struct rig__qp *qp, enum rig_side side,
		       const struct rig_post *posts, int count)
{
	struct rig__ring *ring = &qp->pub.ring[side];
	int i, ret;

	if (!posts || count < 1 || count > RIG_BATCH_MAX)
		return rig__fail(EINVAL, "a batch has 1 to %d entries, not %d",
				 RIG_BATCH_MAX, count);
	if (qp->state != RIG__CONNECTED)
		return rig__fail(EINVAL, "the queue pair is not connected");
	for (i = 0; i < count; i++) {
		ret = check_span(qp, posts[i].region, posts[i].at, posts[i].n, "the");
		if (ret)
			return rig__fail(-ret, "batch entry %d: %s", i, rig_errmsg());
	}
	if (rig__ring_used(ring) + (uint32_t)count > RIG_RING_ENTRIES) {
		qp->full[side]++;
		return rig__fail(ENOSPC, "the %s ring has room for %d, not %d",
				 side == RIG_SEND ? "send" : "receive",
				 RIG_RING_ENTRIES - (int)rig__ring_used(ring), count);
	}
	return 0;
}

/*
 * The half of a batch post that sends and receives share: checks the
 * batch, files each entry's length and cookie, and gathers its bytes.
 * Returns 0 to post the chain; @count when the queue pair has failed
 * (F5: accepted, never sent); or -errno.
 */
static int batch_prepare(struct rig_qp *pub, enum rig_side side,
			 const struct rig_post *posts, int count,
			 struct ibv_sge *sge)
{
	struct rig__ring *ring;
	int i, ret;

	if (!pub)
		return rig__fail(EINVAL, "NULL queue pair");
	if (rig__qp_broken(pub) & RIG__CLOSED)
		return rig__fail(EINVAL, "the queue pair is closing (rig_qp_close)");
	ring = &pub->ring[side];
	ret = check_batch(rig__qp(pub), side, posts, count);
	if (ret)
		return ret;
	for (i = 0; i < count; i++) {
		struct rig__slot *slot = &ring->slot[(ring->head + i) & RIG__MASK];

		slot->len = (uint32_t)posts[i].n;
		slot->cookie = posts[i].cookie;
		sge[i].addr = (uintptr_t)(posts[i].region->addr + posts[i].at);
		sge[i].length = (uint32_t)posts[i].n;
		sge[i].lkey = rig__qp_lkey(pub, posts[i].region);
	}
	if (__atomic_load_n(&pub->broken, __ATOMIC_ACQUIRE) & (RIG__FAILED | RIG__EVENT)) {
		ring->head += count;
		return count;
	}
	return 0;
}

/* After ibv_post_*: the NIC took the chain @wr of @count requests of
 * @size bytes, or the part of it before @bad when it refused (@ret);
 * when the refusal says the queue pair failed, the rest are accepted
 * too (F5). */
static int batch_posted(struct rig_qp *pub, enum rig_side side, const void *wr,
			size_t size, int count, const void *bad, int ret)
{
	struct rig__qp *qp = rig__qp(pub);
	int taken = ret ? chain_taken(qp, wr, size, count, bad, ret) : count;

	if (taken < count && post_refused_failed(qp, ret))
		taken = count;

	pub->ring[side].head += taken;
	/* The ring's bit may still be set, none waiting (rig(7) Q4):
	 * these went to the NIC, so the next to feed follows them. */
	if (qp->shallow)
		rig__ring_gave(qp, side, (uint32_t)taken);
	if (taken)
		return taken;
	return rig__fail_verbs(ret, rig__qp(pub)->nic,
			       side == RIG_SEND ? "ibv_post_send" : "ibv_post_recv");
}

/*
 * A checked batch of a queue pair whose rings are deeper than the NIC's
 * queues: accepted whole when the queue pair failed (F5); kept waiting,
 * and what the NIC has room for posted, when it does not fit (rig(7)
 * Q4). Returns @count then, or 0 to post the chain now.
 */
static int batch_shallow(struct rig_qp *pub, enum rig_side side,
			 const struct rig_post *posts, int count)
{
	struct rig__qp *qp = rig__qp(pub);
	struct rig__ring *ring = &pub->ring[side];
	int i, ret;

	if (!sealed(qp) && !must_wait(qp, side, (uint32_t)count))
		return 0;
	if (!sealed(qp)) {
		if ((ret = wait_room(qp, side)))
			return ret;
		for (i = 0; i < count; i++)
			qp->waiting[side][(ring->head + i) & RIG__MASK] =
				waiting_request(qp, side == RIG_RECEIVE ? RIG__OP_RECEIVE
									: RIG__OP_SEND,
						NULL, 0, posts[i].region, posts[i].at);
		qp->waited[side] += (uint32_t)count;
	}
	ring->head += count;
	/* A batch over the depth may find the NIC's queue empty: the
	 * application gave it nothing more, the library held nothing
	 * back, so it is not counted as run dry. (The other ring is moved
	 * after the call: SHALLOW_CALL.) */
	if (rig__ring_backlog(qp, side))
		feed_ring(qp, side, BY_POST, false);
	return count;
}

static int send_batch(struct rig_qp *pub, const struct rig_post *posts, int count);
static int receive_batch(struct rig_qp *pub, const struct rig_post *posts, int count);
static int poll_batch(struct rig_qp *pub, enum rig_side side,
		      struct rig_completion *c, uint64_t *cookies, int max);

/* The batch calls of a queue pair whose rings are deeper than the NIC's
 * queues run under feed_lock, and then move the entries waiting: a
 * batch that cannot go to the NIC at once waits behind the entries
 * waiting before it (batch_shallow). */
#define SHALLOW_CALL(pub, by, call)					\
	do {								\
		struct rig__qp *qp_;					\
		int ret_;						\
									\
		if (!(pub) || likely(!rig__qp(pub)->shallow))		\
			return call;					\
		qp_ = rig__qp(pub);					\
		rig__ring_feed_lock(qp_);				\
		ret_ = call;						\
		if (!(rig__qp_broken(pub) & RIG__CLOSED))		\
			feed(qp_, by);					\
		settle(qp_);						\
		rig__ring_feed_unlock(qp_);				\
		return ret_;						\
	} while (0)

RIG_EXPORT int rig_qp_send_batch(struct rig_qp *pub, const struct rig_post *posts,
				 int count)
{
	SHALLOW_CALL(pub, BY_POST, send_batch(pub, posts, count));
}

RIG_EXPORT int rig_qp_receive_batch(struct rig_qp *pub, const struct rig_post *posts,
				    int count)
{
	SHALLOW_CALL(pub, BY_POST, receive_batch(pub, posts, count));
}

RIG_EXPORT int rig_qp_poll_batch(struct rig_qp *pub, enum rig_side side,
		      struct rig_completion *c, uint64_t *cookies, int max)
{
	SHALLOW_CALL(pub, BY_POLL, poll_batch(pub, side, c, cookies, max));
}

static int send_batch(struct rig_qp *pub, const struct rig_post *posts, int count)
{
	struct ibv_send_wr wr[RIG_BATCH_MAX], *bad = NULL;
	struct ibv_sge sge[RIG_BATCH_MAX];
	int i, ret;

	ret = batch_prepare(pub, RIG_SEND, posts, count, sge);
	if (ret)
		return ret;
	if (rig__qp(pub)->shallow && (ret = batch_shallow(pub, RIG_SEND, posts, count)))
		return ret;
	memset(wr, 0, count * sizeof(wr[0]));
	for (i = 0; i < count; i++) {
		wr[i].wr_id = pub->ring[RIG_SEND].head + i;
		wr[i].next = i + 1 < count ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
		wr[i].opcode = IBV_WR_SEND;
	}
	ret = ibv_post_send(pub->ibqp, wr, &bad);
	return batch_posted(pub, RIG_SEND, wr, sizeof(wr[0]), count, bad, ret);
}

static int receive_batch(struct rig_qp *pub, const struct rig_post *posts, int count)
{
	struct ibv_recv_wr wr[RIG_BATCH_MAX], *bad = NULL;
	struct ibv_sge sge[RIG_BATCH_MAX];
	int i, ret;

	ret = batch_prepare(pub, RIG_RECEIVE, posts, count, sge);
	if (ret)
		return ret;
	if (rig__qp(pub)->shallow && (ret = batch_shallow(pub, RIG_RECEIVE, posts, count)))
		return ret;
	for (i = 0; i < count; i++) {
		wr[i].wr_id = pub->ring[RIG_RECEIVE].head + i;
		wr[i].next = i + 1 < count ? &wr[i + 1] : NULL;
		wr[i].sg_list = &sge[i];
		wr[i].num_sge = 1;
	}
	ret = ibv_post_recv(pub->ibqp, wr, &bad);
	return batch_posted(pub, RIG_RECEIVE, wr, sizeof(wr[0]), count, bad, ret);
}

static int poll_batch(struct rig_qp *pub, enum rig_side side,
		      struct rig_completion *c, uint64_t *cookies, int max)
{
	struct ibv_wc wc[RIG_BATCH_MAX];
	struct rig__ring *ring;
	int n = 0, i, taken = 0, ret, want;
	bool drained = false;

	if (!pub || !c || (unsigned)side > RIG_RECEIVE || max < 0)
		return rig__fail(EINVAL, "rig_qp_poll_batch: bad argument");
	if (rig__qp_broken(pub) & RIG__CLOSED)
		return rig__fail(EINVAL, "rig_qp_poll_batch: the queue pair is closing (rig_qp_close)");
	ring = &pub->ring[side];
	/* The common case: healthy (entries may wait beyond the NIC's
	 * depth: the caller moves them after), nothing stashed: one
	 * ibv_poll_cq. */
	if (!(rig__qp_broken(pub) & ~RIG__WAITING_ANY) && !ring->ahead &&
	    ring->tail != ring->head && max) {
		want = max < RIG_BATCH_MAX ? max : RIG_BATCH_MAX;
		n = ibv_poll_cq(ring->cq, want, wc);
		drained = n >= 0 && n < want;
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || !rig__wc_kind_ok(side, &wc[i]))
				break;
			if (cookies)
				cookies[taken] = ring->slot[ring->tail & RIG__MASK].cookie;
			take_success(ring, side, &wc[i], &c[taken]);
			taken++;
		}
		/* The rest go through the slow path, in order. */
		for (; i < n; i++)
			rig__ring_reap_one(rig__qp(pub), side, &wc[i]);
	}
	while (taken < max) {
		uint64_t cookie = ring->slot[ring->tail & RIG__MASK].cookie;

		/* A CQ that could not be read fails the queue pair there. */
		ret = rig__ring_poll_slow(pub, side, NULL, n < 0 ? n : 0, drained, &c[taken]);
		n = 0;
		drained = false;
		if (ret <= 0)
			break;
		if (cookies)
			cookies[taken] = cookie;
		taken++;
	}
	return taken;
}
