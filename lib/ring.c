/* SPDX-License-Identifier: MIT */
/*
 * The slow halves of the inline hot path: refused posts, posts to a failed
 * queue pair, and every completion that is not a plain success. The bottom
 * layer: it calls no other file of the library (README, "How it is built").
 *
 * The failure model (rig(7) F1-F6). A queue pair keeps one failure record,
 * the first failure's error and reason. rxe and real NICs report one
 * failure as an error completion on one ring and bare flushes everywhere
 * else, and some entries (a receive posted after the QP went to ERR, or
 * anything due after a device failure) never complete at all. So:
 *   - a flush reports the recorded failure, not "flushed" (F3);
 *   - a flush seen before any reason, or an empty ring with entries due
 *     while the NIC owes the other ring CQEs, makes the library reap the
 *     other ring too: the failing entry may sit there (the application
 *     may take the rings in any order). A quiet ring whose other ring
 *     owes nothing costs one CQ read a poll;
 *   - once the failure is known and the ring's CQ is empty, the library
 *     completes the ring's due entries itself, in order (F6), and drops any
 *     CQE that comes later for them;
 *   - an async queue-pair event is applied only once both CQs were read:
 *     an error CQE of the same failure found there wins (F3);
 *   - after a completion of an unknown kind, an async event or a device
 *     failure, the NIC is no longer trusted: both CQs are reaped once more,
 *     then every later CQE is dropped (F2);
 *   - a provider that refuses a post rig checked, as invalid, has failed
 *     the queue pair on its own (bnxt_re before rdma-core 47): the post
 *     is accepted as on any failed queue pair (F5), and the failure is
 *     the refusal until a reason turns up (post_refused_failed).
 * None of this makes a system call or a control request (T3).
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "probes.h"

struct wc_error {
	int error;
	const char *why;
};

static const struct wc_error wc_errors[] = {
	[IBV_WC_LOC_LEN_ERR] = { EMSGSIZE, "the message was longer than the receive" },
	[IBV_WC_LOC_QP_OP_ERR] = { EIO, "local queue pair operation error: a message longer than the receive, or the local link is gone" },
	[IBV_WC_LOC_EEC_OP_ERR] = { EIO, "local EE context operation error" },
	[IBV_WC_LOC_PROT_ERR] = { EFAULT, "local protection error: the region is not registered" },
	[IBV_WC_WR_FLUSH_ERR] = { ECANCELED, "the NIC flushed the queue pair without saying why" },
	[IBV_WC_MW_BIND_ERR] = { EIO, "memory window bind error" },
	[IBV_WC_BAD_RESP_ERR] = { EPROTO, "bad response from the peer" },
	[IBV_WC_LOC_ACCESS_ERR] = { EACCES, "local access error" },
	[IBV_WC_REM_INV_REQ_ERR] = { EREMOTEIO, "the peer refused the request as invalid: it grants no such access" },
	[IBV_WC_REM_ACCESS_ERR] = { EACCES, "the peer refused access to its memory" },
	[IBV_WC_REM_OP_ERR] = { EREMOTEIO, "the peer could not take the message: its receive was shorter than the message" },
	[IBV_WC_RETRY_EXC_ERR] = { ETIMEDOUT, "the peer did not acknowledge: transport retries exhausted" },
	[IBV_WC_RNR_RETRY_EXC_ERR] = { ETIMEDOUT, "the peer posted no receive: RNR retries exhausted" },
	[IBV_WC_LOC_RDD_VIOL_ERR] = { EIO, "local RDD violation" },
	[IBV_WC_REM_INV_RD_REQ_ERR] = { EREMOTEIO, "the peer refused the read request" },
	[IBV_WC_REM_ABORT_ERR] = { ECONNABORTED, "the peer aborted the operation" },
	[IBV_WC_INV_EECN_ERR] = { EIO, "invalid EE context number" },
	[IBV_WC_INV_EEC_STATE_ERR] = { EIO, "invalid EE context state" },
	[IBV_WC_FATAL_ERR] = { EIO, "fatal NIC error" },
	[IBV_WC_RESP_TIMEOUT_ERR] = { ETIMEDOUT, "the response timed out" },
	[IBV_WC_GENERAL_ERR] = { EIO, "general NIC error" },
};

static const char *const unknown_kind =
	"a completion of a kind this ring does not take (immediate data or an RDMA write from the peer)";

static struct wc_error wc_error(enum ibv_wc_status status)
{
	if ((size_t)status < sizeof(wc_errors) / sizeof(wc_errors[0]) &&
	    wc_errors[status].why)
		return wc_errors[status];
	return (struct wc_error){ EIO, "unknown completion status" };
}

/* For the qp_failed probe: where the failure came from. */
static const char *const cause_probe_names[] = {
	[RIG__CAUSE_NONE] = "none",
	[RIG__CAUSE_ENTRY] = "entry",
	[RIG__CAUSE_FLUSH] = "flush",
	[RIG__CAUSE_REFUSED] = "refused",
	[RIG__CAUSE_KIND] = "kind",
	[RIG__CAUSE_EVENT] = "event",
	[RIG__CAUSE_DEVICE] = "device",
};

/* For the log: where the failure came from (enum rig__cause). */
static const char *const cause_names[] = {
	[RIG__CAUSE_NONE] = "",
	[RIG__CAUSE_ENTRY] = "; an error completion",
	[RIG__CAUSE_FLUSH] = "; a flush, no reason seen",
	[RIG__CAUSE_REFUSED] = "; a refused post, no reason seen",
	[RIG__CAUSE_KIND] = "; a completion of an unknown kind",
	[RIG__CAUSE_EVENT] = "; an async event",
	[RIG__CAUSE_DEVICE] = "; the device",
};

static int failed(const struct rig__qp *qp)
{
	return qp->cause != RIG__CAUSE_NONE;
}

/* A failure whose reason has not been seen: a flush, a refused post. */
static bool bare(enum rig__cause cause)
{
	return cause == RIG__CAUSE_FLUSH || cause == RIG__CAUSE_REFUSED;
}

/*
 * Rings deeper than the NIC's queues (rig(7) Q4). Entry s of a ring is
 * due while tail <= s < head; the NIC holds [tail + ahead, fed), and
 * [fed, head) wait in the ring, their requests in waiting[], until
 * completions free the NIC's room. A NIC slot is counted free once its
 * CQE is read (what providers do: mlx5 and bnxt_re move their queue's
 * tail in their poll; rxe frees it earlier, when it completes the
 * request), so fed - tail - ahead never passes the depth, and the CQs,
 * of the depth (and the probe's one), never overflow.
 *
 * The inline post goes out of line once depth entries are due; the
 * slow post posts to the NIC while it has room and nothing waits before
 * it, else keeps the entry and sets RIG__BACKLOG, which sends every
 * post and poll of the queue pair to the slow paths until nothing
 * waits on either ring: the inline code is unchanged within the depth.
 * The owner alone sets and clears the bit; while it is set, the slow
 * paths and the loop's thread (rig__qp_feed, at a hand-out) take
 * feed_lock, a lock that a queue pair at the full depth never takes.
 */
static bool backlog(const struct rig__qp *qp)
{
	return __atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE) & RIG__BACKLOG;
}

/* The next entry to go to the NIC. */
static uint32_t fed(const struct rig__qp *qp, int side)
{
	return backlog(qp) ? qp->fed[side] : qp->pub.ring[side].head;
}

/* Entries the NIC holds whose CQEs the library has not read. */
static uint32_t at_nic(const struct rig__qp *qp, int side)
{
	const struct rig__ring *ring = &qp->pub.ring[side];

	return fed(qp, side) - ring->tail - ring->ahead;
}

bool rig__qp_waiting(const struct rig__qp *qp, int side)
{
	return backlog(qp) && qp->fed[side] != qp->pub.ring[side].head;
}

static void feed_lock(struct rig__qp *qp)
{
	if (qp->shallow)
		pthread_mutex_lock(&qp->feed_lock);
}

static void feed_unlock(struct rig__qp *qp)
{
	if (qp->shallow)
		pthread_mutex_unlock(&qp->feed_lock);
}

/* Records a failure; true if it is the queue pair's first. */
static bool record(struct rig__qp *qp, enum rig__cause cause, int error,
		   const char *why, int wc_status)
{
	bool first = !failed(qp);
	char peer[112];

	/* The first failure wins, except that a bare flush (or a refused
	 * post: see post_refused_failed) is only a failure whose reason
	 * has not been seen yet, and a reason CQE may land after the flush
	 * was taken: the real reason replaces it (F3). bnxt_re gives flushes before their reason often: its
	 * provider (rdma-core 50 on, providers/bnxt_re/verbs.c) links the
	 * queue pair onto its CQs' software flush lists inside
	 * ibv_get_async_event (bnxt_re_async_event) and when it reads an
	 * error CQE, and makes up the flush CQEs inside ibv_poll_cq
	 * (bnxt_re_poll_cq, bnxt_re_poll_flush_lists), with no completion
	 * event; a poll between the read of the async event and rig's
	 * record of it takes them. */
	if (failed(qp) && (!bare(qp->cause) || bare(cause)))
		return false;
	/* The peer named too, so that an operator can match the line with
	 * the peer's own log and `rdma res show qp` on both hosts. */
	peer[0] = 0;
	if (qp->peer_known)
		snprintf(peer, sizeof(peer), " (to %s, its queue pair 0x%06x)",
			 qp->peer, qp->peer_qpn);
	rig__log(RIG_LOG_WARN, "%s: queue pair 0x%06x%s failed%s: %s (%s)%s",
		 qp->nic->name, qp->pub.ibqp->qp_num, peer,
		 !failed(qp) ? "" : qp->cause == RIG__CAUSE_FLUSH ?
		 ", the reason of its flush found" :
		 ", the reason of its refused post found",
		 strerror(error), why, cause_names[cause]);
	qp->cause = cause;
	qp->error = -error;
	qp->why = why;
	qp->wc_status = wc_status;
	__atomic_or_fetch(&qp->pub.broken, RIG__FAILED, __ATOMIC_RELAXED);
	RIG_PROBE(qp_failed, qp->pub.ibqp->qp_num, qp->error, cause_probe_names[cause],
		  wc_status, why);
	return first;
}

/*
 * A failure found by the rings (a CQE, a flush, a CQ that cannot be read,
 * a refused doorbell) is news for both rings, as an event is: the other
 * ring may never raise a completion event for it (bnxt_re flushes in
 * software, inside ibv_poll_cq, and an error on the send side lists the
 * receive queue for flushing only at a later poll: providers/bnxt_re/
 * verbs.c, bnxt_re_poll_err_scqe), and a loop waiting for that ring's
 * news, or a thread waiting on it, would sleep past the failure. The
 * layer above tells them through a hook: this file calls none by name.
 * That may write an eventfd, never a control request (T3).
 */
void rig__qp_failed(struct rig__qp *qp, enum rig__cause cause, int error,
		    const char *why, int wc_status)
{
	if (record(qp, cause, error, why, wc_status) && qp->rings_failed)
		qp->rings_failed(qp);
}

RIG_EXPORT int rig_qp_stats(const struct rig_qp *pub, enum rig_side side,
			    struct rig_qp_stats *s)
{
	const struct rig__ring *ring;
	const struct rig__qp *qp;
	struct rig_qp_stats all;

	if (!pub || !s || (unsigned)side > RIG_RECEIVE || s->size < 8)
		return rig__fail(EINVAL, "rig_qp_stats: %s",
				 !pub || !s ? "NULL argument" :
				 (unsigned)side > RIG_RECEIVE ? "no such side" :
				 "size is not set to sizeof(struct rig_qp_stats)");
	qp = container_of(pub, const struct rig__qp, pub);
	ring = &pub->ring[side];
	all = (struct rig_qp_stats){
		.size = sizeof(all),
		.posted = ring->head,
		.taken = ring->tail,
		.due = ring->head - ring->tail,
		.full = qp->full[side],
		.slept = qp->slept[side],
		.completed = qp->completed[side],
		.async_events = __atomic_load_n(&qp->async_events, __ATOMIC_RELAXED),
	};
	rig__give_sized(s, s->size, &all, sizeof(all));
	return 0;
}

RIG_EXPORT int rig_qp_failure(const struct rig_qp *pub, int *wc_status)
{
	const struct rig__qp *qp;

	if (!pub)
		return rig__fail(EINVAL, "rig_qp_failure: NULL queue pair");
	qp = container_of(pub, const struct rig__qp, pub);
	if (wc_status)
		*wc_status = failed(qp) ? qp->wc_status : -1;
	return qp->error;
}

/*
 * The CQE of a liveness probe (rig(7) LIVENESS), whoever reads the send
 * CQ: the loop's pass, or a poll that finds it before an entry's. It is
 * no entry's, so it completes nothing and is never handed out: a success
 * is dropped; an error fails the queue pair as an entry's error does
 * (F3: -ETIMEDOUT for exhausted retries); a flush says the queue pair
 * failed for a reason found elsewhere, as an entry's flush does.
 */
static void probe_done(struct rig__qp *qp, const struct ibv_wc *wc)
{
	struct wc_error e;

	qp->probe_out = false;
	if (wc->status == IBV_WC_SUCCESS || (qp->distrust & (1 << RIG_SEND)))
		return;
	if (wc->status == IBV_WC_WR_FLUSH_ERR) {
		qp->flushed = true;
		return;
	}
	e = wc_error(wc->status);
	if (!failed(qp) || bare(qp->cause))
		qp->probe_failed = true;
	rig__qp_failed(qp, RIG__CAUSE_ENTRY, e.error, e.why, wc->status);
}

/* Files one CQE of @side into the slot of the entry it completes. */
static void reap_one(struct rig__qp *qp, enum rig_side side,
		     const struct ibv_wc *wc)
{
	struct rig__ring *ring = &qp->pub.ring[side];
	uint32_t seq = ring->tail + ring->ahead;
	struct rig__slot *slot;
	struct wc_error e;

	if (side == RIG_SEND && wc->wr_id == RIG__PROBE_WR_ID) {
		probe_done(qp, wc);
		return;
	}
	/* A CQE for an entry the library has completed itself is late. */
	if ((qp->distrust & (1 << side)) || seq == fed(qp, side) ||
	    (uint32_t)wc->wr_id != seq)
		return;
	slot = &ring->slot[seq & RIG__MASK];
	ring->ahead++;
	if (wc->status == IBV_WC_SUCCESS && rig__wc_kind_ok(side, wc)) {
		slot->failed = 0;
		if (side == RIG_RECEIVE)
			slot->len = wc->byte_len;
		return;
	}
	slot->failed = 1;
	if (wc->status == IBV_WC_SUCCESS) {
		rig__qp_failed(qp, RIG__CAUSE_KIND, EPROTO, unknown_kind, -1);
		qp->distrust |= 1 << side;
	} else if (wc->status == IBV_WC_WR_FLUSH_ERR) {
		qp->flushed = true;
	} else {
		e = wc_error(wc->status);
		rig__qp_failed(qp, RIG__CAUSE_ENTRY, e.error, e.why, wc->status);
	}
}

/* Takes every CQE of @side's CQ, without blocking. */
static void reap(struct rig__qp *qp, enum rig_side side)
{
	struct ibv_wc wc[16];
	int i, n;

	do {
		n = ibv_poll_cq(qp->pub.ring[side].cq, 16, wc);
		for (i = 0; i < n; i++)
			reap_one(qp, side, &wc[i]);
	} while (n == 16);
	if (n < 0)
		rig__qp_failed(qp, RIG__CAUSE_DEVICE, EIO,
			       "the NIC's completion queue could not be read", -1);
}

/*
 * A liveness probe is a zero-length RDMA WRITE on the queue pair itself:
 * no SGE, remote address 0, rkey 0 (rig-wire(7) LIVENESS). The peer's
 * NIC acknowledges it with no receive of the peer's taken, nothing
 * written and no completion on the peer's side. The responder checks the
 * queue pair's access flags for any write (Linux drivers/infiniband/sw/
 * rxe/rxe_resp.c, check_op_valid: an RDMA WRITE packet needs
 * IB_ACCESS_REMOTE_WRITE on the QP), so the queue pairs of connections
 * by address grant it (qp.c), and a peer that speaks "rig2" must too.
 * No region of rig grants remote write, so a write with bytes still
 * fails at the region (M4). Unanswered, it is retried as any send is,
 * and ends in -ETIMEDOUT (M3). The send queue has one request more than
 * the ring, for it (qp.c): the ring's room stays RIG_RING_ENTRIES (Q1).
 *
 * What it rests on: that the responder checks no rkey for a write of
 * length 0. The IBTA says so (volume 1, compliance statement 9-88: a
 * zero-length RDMA operation need not carry a valid address or rkey),
 * and rxe follows it in its source (rxe_resp.c, check_rkey: a RETH of
 * length 0 goes to execute without a key lookup); the device tests prove
 * it on rxe. On bnxt_re and mlx5 the check is the NIC's firmware, which
 * no provider source shows, and rig has not been run there: a NIC that
 * checked the rkey would NAK every probe (remote access error) and fail
 * each probed queue pair at its first idle interval. This is not what
 * UCX does, though it too keeps rc connections alive with writes: its
 * uct_rc_verbs_ep_post_flush writes one byte to a buffer its peer
 * advertises, "because some adapters do not support 0-size RDMA_WRITE".
 * Doing the same would take a wire form that carries a sink region's
 * address and rkey, and a region of rig's that grants remote write to
 * it; until then the probe stays as it is, and an application on such a
 * NIC turns the probes off (rig_loop_liveness(loop, 0)).
 *
 * Only an idle send ring is probed: entries due there probe the peer
 * already, and their retries end the same way. The loop's thread reads
 * the probe's CQE here while the ring stays idle; once the owner posts,
 * its polls find the CQE first (the inline poll takes a write's
 * completion to the slow path, which drops it), so no poll of an
 * application ever returns one.
 */
int rig__qp_probe(struct rig__qp *qp)
{
	struct rig__ring *ring = &qp->pub.ring[RIG_SEND];
	struct ibv_send_wr wr, *bad = NULL;
	uint32_t broken;

	if (ring->head == ring->tail && qp->probe_out)
		reap(qp, RIG_SEND);
	if (qp->probe_failed) {
		qp->probe_failed = false;
		return qp->error;
	}
	if (ring->head != ring->tail)
		return 0;
	broken = __atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE);
	if (qp->probe_out || broken || qp->state != RIG__CONNECTED)
		return 0;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = RIG__PROBE_WR_ID;
	wr.opcode = IBV_WR_RDMA_WRITE;	/* no sge: zero bytes; signalled (sq_sig_all) */
	if (ibv_post_send(qp->pub.ibqp, &wr, &bad))
		return 0;	/* the next pass tries again */
	qp->probe_out = true;
	qp->probes++;
	return 0;
}

/*
 * Applies what rig_nic_events recorded for @qp in another thread, once.
 *
 * An async queue-pair event (QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR) may
 * report an error that the rings report too, and the CQE says more: on
 * recent kernels bnxt_re raises one for every error of a queue pair
 * (drivers/infiniband/hw/bnxt_re/main.c, bnxt_re_handle_qp_async_event:
 * a dead peer's REQ_TIMEOUT_RETRY_LIMIT becomes QP_ACCESS_ERR, an
 * overlong message's RES_EXCEEDS_WQE QP_REQ_ERR). So the CQEs come
 * first: both CQs are read before the event is recorded, and an error
 * CQE among them is the failure (F3). That bounds how late the CQE may
 * land: by the owner's first poll after the event was read. Waiting
 * longer gains nothing on bnxt_re, whose provider flushes every request
 * still queued at that very poll (providers/bnxt_re/verbs.c: its flush
 * lists are set in bnxt_re_async_event, inside ibv_get_async_event), and
 * would hold up the F6 completions everywhere else.
 *
 * The peer leaving (ECONNRESET) and the device (ENODEV) report no error
 * of the rings: they win over any CQE not yet polled.
 */
static void take_event(struct rig__qp *qp, enum rig_side side)
{
	uint32_t broken = __atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE);
	int error;

	if (!(broken & RIG__EVENT) || qp->event_taken)
		return;
	qp->event_taken = true;
	error = qp->event_error;
	if (error != ENODEV && error != ECONNRESET) {
		reap(qp, side);
		reap(qp, !side);
	}
	/* events.c told both rings' consumers when it recorded it. */
	record(qp, error == ENODEV ? RIG__CAUSE_DEVICE : RIG__CAUSE_EVENT,
	       error, qp->event_why, -1);
}

/* Whether the NIC holds entries of @ring whose CQEs the library has not
 * read: only then may its CQ tell of a failure. */
static bool owed(const struct rig__qp *qp, int side)
{
	return at_nic(qp, side) != 0;
}

/*
 * The slow poll of @side, after the caller took @n CQEs (@wc, n <= 1) of
 * its CQ; @drained: the caller found the CQ empty just now, so reading it
 * again would find nothing. An empty poll of a healthy queue pair (the
 * inline poll's n == 0, a spinning thread's every poll) then reads no CQ
 * at all, unless a failure can be on the other ring's.
 */
static int poll_slow(struct rig_qp *pub, enum rig_side side,
		     const struct ibv_wc *wc, int n, bool drained,
		     struct rig_completion *c)
{
	struct rig__ring *ring;
	struct rig__slot *slot;
	struct rig__qp *qp;
	uint32_t seq;

	qp = rig__qp(pub);
	ring = &pub->ring[side];
	if (n == 1)
		reap_one(qp, side, wc);
	else if (n < 0)
		rig__qp_failed(qp, RIG__CAUSE_DEVICE, EIO,
			       "the NIC's completion queue could not be read", -1);
	take_event(qp, side);
	if (ring->tail == ring->head)
		return 0;

	if (!ring->ahead && !drained)
		reap(qp, side);
	/* An empty ring may be one the NIC will never complete, and a flush
	 * (taken here or by the inline poll) has its reason on the other
	 * ring, if anywhere: but only a ring the NIC owes CQEs can show it. */
	if (!failed(qp) && ((!ring->ahead && owed(qp, !side)) || qp->flushed))
		reap(qp, !side);
	/* The NIC writes the failing entry's completion before it flushes,
	 * but maybe after this ring's CQ was read: read both once more. */
	if (!failed(qp) && qp->flushed) {
		reap(qp, side);
		reap(qp, !side);
		if (!failed(qp))
			rig__qp_failed(qp, RIG__CAUSE_FLUSH, ECANCELED,
				       wc_error(IBV_WC_WR_FLUSH_ERR).why,
				       IBV_WC_WR_FLUSH_ERR);
	}
	if (qp->cause >= RIG__CAUSE_KIND && qp->distrust != 3) {
		/* What the NIC completed before it was distrusted still counts. */
		reap(qp, RIG_SEND);
		reap(qp, RIG_RECEIVE);
		qp->distrust = 3;
	}
	if (!ring->ahead) {
		if (!failed(qp))
			return 0;
		/* The NIC may never complete these (F6): do it here. */
		for (seq = ring->tail; seq != ring->head; seq++)
			ring->slot[seq & RIG__MASK].failed = 1;
		ring->ahead = ring->head - ring->tail;
		qp->completed[side] += ring->ahead;
		/* Those waiting in the ring never go to the NIC (F5). */
		if (backlog(qp))
			qp->fed[side] = ring->head;
	}

	slot = &ring->slot[ring->tail & RIG__MASK];
	ring->tail++;
	ring->ahead--;
	if (slot->failed) {
		c->bytes = 0;
		c->error = qp->error;
		c->why = qp->why;
	} else {
		c->bytes = slot->len;
		c->error = 0;
		c->why = NULL;
	}
	return 1;
}

/* Defined with the posts, below. */
static void feed(struct rig__qp *qp);
static void settle(struct rig__qp *qp);

/* The slow poll of a queue pair whose rings are deeper than the NIC's
 * queues: the same, under feed_lock, after moving waiting entries of
 * both rings to the NIC (rig(7) Q4). */
static int poll_shallow(struct rig_qp *pub, enum rig_side side,
			const struct ibv_wc *wc, int n, struct rig_completion *c)
{
	struct rig__qp *qp = rig__qp(pub);
	int ret;

	pthread_mutex_lock(&qp->feed_lock);
	/* The CQE the inline poll took goes first: feeding may read the CQ. */
	if (n == 1) {
		reap_one(qp, side, wc);
		n = 0;
		wc = NULL;
	}
	feed(qp);
	ret = poll_slow(pub, side, wc, n, wc && n == 0, c);
	settle(qp);
	pthread_mutex_unlock(&qp->feed_lock);
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
		return poll_slow(pub, side, wc, n, wc && n == 0, c);
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
	pthread_mutex_lock(&qp->feed_lock);
	ret = post_slow(pub, op, src, src_at, dst, dst_at, n);
	settle(qp);
	pthread_mutex_unlock(&qp->feed_lock);
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
	reap(qp, RIG_SEND);
	reap(qp, RIG_RECEIVE);
	rig__qp_failed(qp, RIG__CAUSE_REFUSED, ECANCELED, refused_failed, -1);
	return true;
}

RIG_EXPORT __cold int rig__qp_post_refused(struct rig_qp *pub, enum rig__op op,
					   const void *wr, const void *bad, int ret)
{
	enum rig_side side = op == RIG__OP_RECEIVE ? RIG_RECEIVE : RIG_SEND;
	struct rig__qp *qp = rig__qp(pub);

	feed_lock(qp);
	if (!chain_taken(qp, wr, 1, 1, bad, ret) && !post_refused_failed(qp, ret)) {
		feed_unlock(qp);
		return rig__fail_verbs(ret, qp->nic,
				       side == RIG_RECEIVE ? "ibv_post_recv" : "ibv_post_send");
	}
	/* Accepted: its completion carries the failure (F5). */
	pub->ring[side].head++;
	feed_unlock(qp);
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
 * fewer than @k when it refused the rest for a reason that fails nothing.
 */
static int post_chain(struct rig__qp *qp, enum rig_side side, int k)
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
	if (taken < k && post_refused_failed(qp, ret))
		taken = k;
	return taken;
}

/* Nothing may go to the NIC: rig knows the queue pair failed, a flush
 * (whose reason may not be known yet) said so, or it is closing (F2,
 * F5, D3). */
static bool sealed(const struct rig__qp *qp)
{
	return failed(qp) || qp->flushed ||
	       (__atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE) &
		(RIG__FAILED | RIG__EVENT | RIG__CLOSED));
}

/* Moves the entries waiting in ring @side to the NIC, oldest first, as
 * far as its depth allows; feed_lock held. */
static void feed_ring(struct rig__qp *qp, enum rig_side side)
{
	struct rig__ring *ring = &qp->pub.ring[side];
	uint32_t room, left;
	int k, taken;

	while (qp->fed[side] != ring->head && !sealed(qp)) {
		room = ring->depth - at_nic(qp, side);
		if (!room) {
			/* Completions free the NIC's slots once read. */
			reap(qp, side);
			if (sealed(qp))
				break;
			room = ring->depth - at_nic(qp, side);
			if (!room)
				break;
		}
		left = ring->head - qp->fed[side];
		k = (int)(room < left ? room : left);
		if (k > RIG_BATCH_MAX)
			k = RIG_BATCH_MAX;
		taken = post_chain(qp, side, k);
		qp->fed[side] += taken;
		if (taken < k)
			break;	/* the provider refused for now: the next feed tries again */
	}
}

/* Moves the waiting entries of both rings; feed_lock held. */
static void feed(struct rig__qp *qp)
{
	if (!backlog(qp))
		return;
	feed_ring(qp, RIG_SEND);
	feed_ring(qp, RIG_RECEIVE);
}

/* The owner, at the end of a slow path: once nothing waits on either
 * ring, the inline code may post and poll again (feed_lock held). */
static void settle(struct rig__qp *qp)
{
	if (backlog(qp) && qp->fed[RIG_SEND] == qp->pub.ring[RIG_SEND].head &&
	    qp->fed[RIG_RECEIVE] == qp->pub.ring[RIG_RECEIVE].head)
		__atomic_and_fetch(&qp->pub.broken, ~(uint32_t)RIG__BACKLOG, __ATOMIC_RELEASE);
}

void rig__qp_feed(struct rig__qp *qp)
{
	if (!qp->shallow || !backlog(qp))
		return;
	pthread_mutex_lock(&qp->feed_lock);
	feed(qp);
	pthread_mutex_unlock(&qp->feed_lock);
}

/* Makes room for @count entries of @side to wait, from head on; sets
 * RIG__BACKLOG with fed at head on both rings if nothing waited yet. */
static int wait_room(struct rig__qp *qp, enum rig_side side)
{
	if (!qp->waiting[side]) {
		qp->waiting[side] = calloc(RIG__SLOTS, sizeof(*qp->waiting[side]));
		if (!qp->waiting[side])
			return rig__fail(ENOMEM, "no memory for the entries waiting beyond the NIC's depth");
	}
	if (!backlog(qp)) {
		qp->fed[RIG_SEND] = qp->pub.ring[RIG_SEND].head;
		qp->fed[RIG_RECEIVE] = qp->pub.ring[RIG_RECEIVE].head;
		__atomic_or_fetch(&qp->pub.broken, RIG__BACKLOG, __ATOMIC_RELEASE);
	}
	return 0;
}

/* Whether an entry of @side posted now must wait: entries wait before
 * it, or the NIC holds its depth (its CQ read first: reading frees). */
static bool must_wait(struct rig__qp *qp, enum rig_side side, uint32_t count)
{
	const struct rig__ring *ring = &qp->pub.ring[side];

	if (rig__qp_waiting(qp, side))
		return true;
	if (at_nic(qp, side) + count <= ring->depth)
		return false;
	reap(qp, side);
	return at_nic(qp, side) + count > ring->depth;
}

/*
 * A post of a queue pair whose rings are deeper than the NIC's queues,
 * once post_slow checked it and found the queue pair healthy. The posts
 * of either ring move the entries waiting first (rig(7) Q4).
 */
static int post_shallow(struct rig__qp *qp, enum rig__op op,
			const struct rig_region *src, size_t src_at,
			const struct rig_region *dst, size_t dst_at, size_t n)
{
	enum rig_side side = op == RIG__OP_RECEIVE ? RIG_RECEIVE : RIG_SEND;
	struct rig__ring *ring = &qp->pub.ring[side];
	uint32_t seq = ring->head;
	struct rig__waiting w = {
		.addr = (uintptr_t)(dst->addr + dst_at),
		.lkey = dst->lkey,
		.op = op,
	};
	int ret;

	if (op == RIG__OP_READ) {
		w.remote = (uintptr_t)(src->addr + src_at);
		w.rkey = src->rkey;
	}
	ring->slot[seq & RIG__MASK].len = (uint32_t)n;
	ring->slot[seq & RIG__MASK].cookie = 0;
	feed(qp);
	if (!sealed(qp) && must_wait(qp, side, 1)) {
		if ((ret = wait_room(qp, side)))
			return ret;
		qp->waiting[side][seq & RIG__MASK] = w;
		ring->head++;
		feed(qp);
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
	if (backlog(qp))
		qp->fed[side]++;
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
		sge[i].lkey = posts[i].region->lkey;
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
	int taken = ret ? chain_taken(rig__qp(pub), wr, size, count, bad, ret)
			: count;

	if (taken < count && post_refused_failed(rig__qp(pub), ret))
		taken = count;

	pub->ring[side].head += taken;
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
			qp->waiting[side][(ring->head + i) & RIG__MASK] = (struct rig__waiting){
				.addr = (uintptr_t)(posts[i].region->addr + posts[i].at),
				.lkey = posts[i].region->lkey,
				.op = side == RIG_RECEIVE ? RIG__OP_RECEIVE : RIG__OP_SEND,
			};
	}
	ring->head += count;
	feed(qp);
	return count;
}

static int send_batch(struct rig_qp *pub, const struct rig_post *posts, int count);
static int receive_batch(struct rig_qp *pub, const struct rig_post *posts, int count);
static int poll_batch(struct rig_qp *pub, enum rig_side side,
		      struct rig_completion *c, uint64_t *cookies, int max);

/* The batch calls of a queue pair whose rings are deeper than the NIC's
 * queues run under feed_lock, after moving the entries waiting. */
#define SHALLOW_CALL(pub, call)						\
	do {								\
		struct rig__qp *qp_;					\
		int ret_;						\
									\
		if (!(pub) || likely(!rig__qp(pub)->shallow))		\
			return call;					\
		qp_ = rig__qp(pub);					\
		pthread_mutex_lock(&qp_->feed_lock);			\
		if (!(rig__qp_broken(pub) & RIG__CLOSED))		\
			feed(qp_);					\
		ret_ = call;						\
		settle(qp_);						\
		pthread_mutex_unlock(&qp_->feed_lock);			\
		return ret_;						\
	} while (0)

RIG_EXPORT int rig_qp_send_batch(struct rig_qp *pub, const struct rig_post *posts,
				 int count)
{
	SHALLOW_CALL(pub, send_batch(pub, posts, count));
}

RIG_EXPORT int rig_qp_receive_batch(struct rig_qp *pub, const struct rig_post *posts,
				    int count)
{
	SHALLOW_CALL(pub, receive_batch(pub, posts, count));
}

RIG_EXPORT int rig_qp_poll_batch(struct rig_qp *pub, enum rig_side side,
		      struct rig_completion *c, uint64_t *cookies, int max)
{
	SHALLOW_CALL(pub, poll_batch(pub, side, c, cookies, max));
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
	/* The common case: healthy, nothing stashed: one ibv_poll_cq. */
	if (!rig__qp_broken(pub) && !ring->ahead && ring->tail != ring->head && max) {
		want = max < RIG_BATCH_MAX ? max : RIG_BATCH_MAX;
		n = ibv_poll_cq(ring->cq, want, wc);
		drained = n >= 0 && n < want;
		for (i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS || !rig__wc_kind_ok(side, &wc[i]))
				break;
			c[taken].bytes = side == RIG_RECEIVE ? wc[i].byte_len
						: ring->slot[ring->tail & RIG__MASK].len;
			c[taken].error = 0;
			c[taken].why = NULL;
			if (cookies)
				cookies[taken] = ring->slot[ring->tail & RIG__MASK].cookie;
			ring->tail++;
			taken++;
		}
		/* The rest go through the slow path, in order. */
		for (; i < n; i++)
			reap_one(rig__qp(pub), side, &wc[i]);
	}
	while (taken < max) {
		uint64_t cookie = ring->slot[ring->tail & RIG__MASK].cookie;

		/* A CQ that could not be read fails the queue pair there. */
		ret = poll_slow(pub, side, NULL, n < 0 ? n : 0, drained, &c[taken]);
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
