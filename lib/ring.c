/* SPDX-License-Identifier: MIT */
/*
 * The failure model under the slow halves of the inline hot path (post.c
 * calls in here): every completion that is not a plain success, the
 * failure record, the reaps, the slow poll, the liveness probe's CQE. It
 * calls no file of the library but errmsg.c (README, "How it is built").
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
 * it, else keeps the entry and sets the ring's RIG__WAITING bit, which
 * sends that ring's posts and polls to the slow paths until nothing
 * waits in it: the inline code is unchanged within the depth, and the
 * other ring's stays inline (its poll goes out of line, and moves
 * them, when it finds its own CQ empty). The owner alone sets and
 * clears the bits; while one is set, the slow paths and the loop's
 * thread (rig__qp_feed, at a hand-out) take feed_lock, a lock that a
 * queue pair at the full depth never takes (internal.h). The loop's thread touches
 * only rings whose bit is set, whose posts and polls the owner makes
 * under that lock: never the ring the owner may be using inline.
 * (The counts' helpers, rig__ring_at_nic and its kin, are inline in
 * internal.h: the slow paths of a ring with entries waiting run on
 * every post and poll.)
 */

/* Records a failure; true if it is the queue pair's first. */
static bool record(struct rig__qp *qp, enum rig__cause cause, int error,
		   const char *why, int wc_status)
{
	bool first = !rig__ring_failed(qp);
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
	if (rig__ring_failed(qp) && (!bare(qp->cause) || bare(cause)))
		return false;
	/* The peer named too, so that an operator can match the line with
	 * the peer's own log and `rdma res show qp` on both hosts. */
	peer[0] = 0;
	if (qp->peer_known)
		snprintf(peer, sizeof(peer), " (to %s, its queue pair 0x%06x)",
			 qp->peer, qp->peer_qpn);
	rig__log(RIG_LOG_WARN, "%s: queue pair 0x%06x%s failed%s: %s (%s)%s",
		 qp->nic->name, qp->pub.ibqp->qp_num, peer,
		 !rig__ring_failed(qp) ? "" : qp->cause == RIG__CAUSE_FLUSH ?
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
		.waited = qp->waited[side],
		.ran_dry = __atomic_load_n(&qp->ran_dry[side], __ATOMIC_RELAXED),
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
		*wc_status = rig__ring_failed(qp) ? qp->wc_status : -1;
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
	if (!rig__ring_failed(qp) || bare(qp->cause))
		qp->probe_failed = true;
	rig__qp_failed(qp, RIG__CAUSE_ENTRY, e.error, e.why, wc->status);
}

/* Files one CQE of @side into the slot of the entry it completes. */
void rig__ring_reap_one(struct rig__qp *qp, enum rig_side side,
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
	if ((qp->distrust & (1 << side)) || seq == rig__ring_fed(qp, side) ||
	    (uint32_t)wc->wr_id != seq)
		return;
	slot = &ring->slot[seq & RIG__MASK];
	rig__ring_set_ahead(ring, ring->ahead + 1);
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
void rig__ring_reap(struct rig__qp *qp, enum rig_side side)
{
	struct ibv_wc wc[16];
	int i, n;

	do {
		n = ibv_poll_cq(qp->pub.ring[side].cq, 16, wc);
		for (i = 0; i < n; i++)
			rig__ring_reap_one(qp, side, &wc[i]);
	} while (n == 16);
	if (n < 0)
		rig__qp_failed(qp, RIG__CAUSE_DEVICE, EIO,
			       "the NIC's completion queue could not be read", -1);
	else if (qp->shallow)
		rig__ring_drained(qp, side);
}

/*
 * A liveness probe is an RDMA WRITE on the queue pair itself
 * (rig-wire(7) LIVENESS), acknowledged by the peer's NIC with no receive
 * of the peer's taken and no completion on the peer's side. To a peer
 * that gave its sink ("rig3") it writes one byte, from our own sink (its
 * lkey: no inline data needed), to the sink's address with the sink's
 * rkey; to a peer that gave none ("rig2", rig 0.3 or a peer written
 * before "rig3") it is rig 0.3's probe, zero bytes with no SGE, address
 * 0 and rkey 0. Either way the responder checks that the queue pair
 * grants remote write (Linux drivers/infiniband/sw/rxe/rxe_resp.c,
 * check_op_valid), so the queue pairs of connections by address grant
 * it (qp.c); only the sink, of all rig's memory, grants it to a region
 * (M4). Unanswered, a probe is retried as any send is, and ends in
 * -ETIMEDOUT (M3). The send queue has one request more than the ring,
 * for it (qp.c): the ring's room stays RIG_RING_ENTRIES (Q1).
 *
 * Why one byte to the sink, not zero bytes with the sink's key. The
 * IBTA lets the responder skip the R_Key check of a zero-length write
 * (volume 1, compliance statement 9-88), and rxe does skip it (rxe_resp.c,
 * check_rkey: a RETH of length 0 goes to execute with no key looked up),
 * so on rxe a zero-length write takes any key, and a key the peer never
 * registered passes unseen. On bnxt_re and mlx5 that check is the NIC's
 * firmware, which no provider source shows: whether a zero-length write
 * with rkey 0 is taken there rests on the firmware following 9-88, and
 * rig has not been run there. rdma-core tests a zero-size write only
 * with a valid key (tests/test_qpex.py, test_qp_ex_rc_rdma_write_zero_size:
 * one SGE of length 0, the server MR's rkey and address). A write of one
 * byte into a region that grants remote write is the request every RDMA
 * application makes, whose key a NIC must check to place the byte (rxe:
 * check_rkey looks it up and checks the range). It is also what UCX's rc
 * transport posts as its flush: uct_rc_verbs_ep_post_flush (src/uct/ib/
 * rc/verbs/rc_verbs_ep.c) writes one byte to a buffer its peer
 * advertised, "Send small RDMA_WRITE as a flush operation (some adapters
 * do not support 0-size RDMA_WRITE or inline sends)". So a wrong key
 * fails the probe with a remote access error on every device, rxe
 * included (tests/test_live.c), where rig 0.3's passed unseen on rxe.
 * A "rig2" peer keeps the zero-length probe it opted into: rig 0.3's
 * own, taken by rxe, and the only one such a peer can take, having
 * advertised no memory.
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
	struct ibv_sge sge;
	uint32_t broken;

	if (ring->head == ring->tail && qp->probe_out)
		rig__ring_reap(qp, RIG_SEND);
	if (qp->probe_failed) {
		qp->probe_failed = false;
		return qp->error;
	}
	if (ring->head != ring->tail)
		return 0;
	/* Receives waiting beyond the NIC's depth (rig(7) Q4) leave the
	 * send ring idle, and a server that keeps more receives posted than
	 * the depth holds such rings for good: they are probed too. */
	broken = __atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE) &
		 ~RIG__WAITING(RIG_RECEIVE);
	if (qp->probe_out || broken || qp->state != RIG__CONNECTED)
		return 0;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = RIG__PROBE_WR_ID;
	wr.opcode = IBV_WR_RDMA_WRITE;	/* signalled (sq_sig_all) */
	if (qp->probe_sink) {
		sge.addr = (uintptr_t)qp->nic->sink;
		sge.length = 1;
		sge.lkey = rig__sink_mr(qp)->lkey;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.wr.rdma.remote_addr = qp->probe_addr;
		wr.wr.rdma.rkey = qp->probe_rkey;
	}	/* else no sge: zero bytes, address 0, rkey 0 */
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
		rig__ring_reap(qp, side);
		rig__ring_reap(qp, !side);
	}
	/* events.c told both rings' consumers when it recorded it. */
	record(qp, error == ENODEV ? RIG__CAUSE_DEVICE : RIG__CAUSE_EVENT,
	       error, qp->event_why, -1);
}

/* Whether the NIC holds entries of @ring whose CQEs the library has not
 * read: only then may its CQ tell of a failure. */
static bool owed(const struct rig__qp *qp, int side)
{
	return rig__ring_at_nic(qp, side) != 0;
}

/*
 * The slow poll of @side, after the caller took @n CQEs (@wc, n <= 1) of
 * its CQ; @drained: the caller found the CQ empty just now, so reading it
 * again would find nothing. An empty poll of a healthy queue pair (the
 * inline poll's n == 0, a spinning thread's every poll) then reads no CQ
 * at all, unless a failure can be on the other ring's.
 */
int rig__ring_poll_slow(struct rig_qp *pub, enum rig_side side,
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
		rig__ring_reap_one(qp, side, wc);
	else if (n < 0)
		rig__qp_failed(qp, RIG__CAUSE_DEVICE, EIO,
			       "the NIC's completion queue could not be read", -1);
	take_event(qp, side);
	if (ring->tail == ring->head)
		return 0;

	if (!ring->ahead && !drained)
		rig__ring_reap(qp, side);
	/* An empty ring may be one the NIC will never complete, and a flush
	 * (taken here or by the inline poll) has its reason on the other
	 * ring, if anywhere: but only a ring the NIC owes CQEs can show it. */
	if (!rig__ring_failed(qp) && ((!ring->ahead && owed(qp, !side)) || qp->flushed))
		rig__ring_reap(qp, !side);
	/* The NIC writes the failing entry's completion before it flushes,
	 * but maybe after this ring's CQ was read: read both once more. */
	if (!rig__ring_failed(qp) && qp->flushed) {
		rig__ring_reap(qp, side);
		rig__ring_reap(qp, !side);
		if (!rig__ring_failed(qp))
			rig__qp_failed(qp, RIG__CAUSE_FLUSH, ECANCELED,
				       wc_error(IBV_WC_WR_FLUSH_ERR).why,
				       IBV_WC_WR_FLUSH_ERR);
	}
	if (qp->cause >= RIG__CAUSE_KIND && qp->distrust != 3) {
		/* What the NIC completed before it was distrusted still counts. */
		rig__ring_reap(qp, RIG_SEND);
		rig__ring_reap(qp, RIG_RECEIVE);
		qp->distrust = 3;
	}
	if (!ring->ahead) {
		if (!rig__ring_failed(qp))
			return 0;
		/* The NIC may never complete these (F6): do it here. */
		for (seq = ring->tail; seq != ring->head; seq++)
			ring->slot[seq & RIG__MASK].failed = 1;
		rig__ring_set_ahead(ring, ring->head - ring->tail);
		qp->completed[side] += ring->ahead;
		/* Those waiting in the ring never go to the NIC (F5). */
		rig__ring_gave(qp, side, ring->head - rig__ring_fed(qp, side));
	}

	slot = &ring->slot[ring->tail & RIG__MASK];
	ring->tail++;
	rig__ring_set_ahead(ring, ring->ahead - 1);
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
