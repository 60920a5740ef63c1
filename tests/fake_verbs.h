/* SPDX-License-Identifier: MIT */
#ifndef FAKE_VERBS_H
#define FAKE_VERBS_H
/*
 * A connected queue pair with no device behind it, to replay the failure
 * model of lib/ring.c on the host.
 *
 * ibv_poll_cq, ibv_post_send and ibv_post_recv are inline functions of
 * <infiniband/verbs.h> that call through the ops table of the CQ's or QP's
 * context. The fake gives its CQs and its QP a context of its own whose
 * ops are below, so the library's real code (the inline hot path of
 * rig/qp.h and the slow paths of lib/ring.c) runs unchanged against CQEs a
 * test scripts and posts it records. Nothing else of libibverbs is
 * reachable through the fake: its other calls use the provider's private
 * ops and would crash.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#include "internal.h"

/* One request the fake NIC took, as the library posted it. */
struct fake_req {
	uint64_t wr_id;
	enum ibv_wc_opcode kind;	/* the CQE it calls for: SEND, RDMA_READ or RECV */
	uint32_t length;
	uint64_t addr;
	uint32_t lkey;
	bool done;		/* bnxt_re: its CQE polled, or flushed in software */
	bool flushed;		/* bnxt_re: flushed in software */
};

/* What the fake NIC does with the next post of a ring. */
enum fake_outcome {
	FAKE_ACCEPT,		/* queues the whole chain, returns 0 */
	FAKE_REFUSE,		/* queues the requests before the one at @at,
				 * points *bad_wr at it, returns @ret */
	FAKE_DOORBELL,		/* Soft-RoCE when its doorbell write() fails:
				 * queues the whole chain, leaves *bad_wr
				 * NULL, returns @ret */
};

/*
 * Whose provider (and kernel) the fake NIC plays, where they differ in
 * what a queue pair's failure looks like to the library. The tests write
 * what the NIC does (fake_complete: a success, an error, a flush; an
 * async event; fake_terminal); the profile decides what of it reaches the
 * library, when, and what posts do once the NIC has failed the queue pair.
 * Each follows the source named; nothing else of the provider is played.
 *
 * FAKE_PLAIN: every CQE written is polled as written; posts are taken.
 *
 * FAKE_RXE: Soft-RoCE (Linux 6.1, rdma-core 44). Its error and flush
 * completions are CQEs the kernel writes (drivers/infiniband/sw/rxe,
 * rxe_comp.c and rxe_resp.c, with a completion event), so they are polled
 * as written. With the queue pair's first error (or flush) it goes to ERR
 * and the kernel flushes every request it holds, on each queue's CQ
 * (rxe_qp.c, rxe_qp_error runs the responder and the completer), so
 * nothing is left for a later fake_complete(). A send posted once the
 * queue pair failed is flushed by the kernel: the provider's post rings
 * its doorbell with a write() (providers/rxe/rxe.c, rxe_post_send,
 * post_send_db), which runs the requester, and the completer flushes what
 * the failed queue pair holds.
 * A receive posted then is queued in memory the kernel shares, without a
 * system call (rxe_post_recv), and nothing ever runs the responder for
 * it again: it never completes (rig(7) SOFT-ROCE).
 *
 * FAKE_MLX5: the hardware writes the error CQE, then at once a flush CQE
 * for every request of both queues on the queue's own CQ (the fake, as
 * for rxe, at the first error or flush), each polled as written
 * (providers/mlx5/cq.c, mlx5_parse_cqe: MLX5_CQE_REQ_ERR and
 * MLX5_CQE_RESP_ERR, mlx5_handle_error_cqe, the WR_FLUSH_ERR syndrome). Its
 * posts never look at the queue pair's state (providers/mlx5/qp.c,
 * _mlx5_post_send, mlx5_post_recv): a request posted to a failed queue
 * pair is taken, and the hardware flushes it.
 *
 * FAKE_BNXT_RE_44, FAKE_BNXT_RE_50: bnxt_re's provider (providers/bnxt_re/
 * verbs.c) of rdma-core 44 (Debian 12) and of 50 on. Its flushes are made
 * in software inside ibv_poll_cq, with no completion event: a queue linked
 * onto its CQ's flush list has every request it still holds flushed, after
 * the hardware CQEs of that poll (bnxt_re_poll_cq, bnxt_re_poll_flush_lists,
 * bnxt_re_poll_flush_wcs). What links a queue:
 *   - an error CQE of the send queue (bnxt_re_poll_err_scqe: a flush the
 *     hardware writes for a send comes this way too), which also moves the
 *     provider's queue pair to ERR;
 *   - an error CQE of the receive queue (bnxt_re_poll_err_rcqe), which
 *     leaves the state alone; a receive flush the hardware writes
 *     (BNXT_RE_RSP_ST_HW_FLUSH) is skipped, with nothing linked;
 *   - a terminal CQE, which links both queues, moves the queue pair to ERR
 *     and gives the caller nothing (bnxt_re_poll_term_cqe). The fake's
 *     hardware writes one, on the receive CQ, before the first receive
 *     flush of the queue pair: its way of ending a receive queue (the
 *     kernel's bnxt_qplib_cq_process_terminal: a terminal CQE flushes
 *     every receive posted);
 *   - from rdma-core 50 on, a queue-pair async event as the library reads
 *     it, inside ibv_get_async_event (bnxt_re_async_event,
 *     bnxt_re_qp_move_flush_err: both queues, and ERR).
 * A CQE the hardware writes for a request the provider has flushed
 * already is dropped: the provider holds nothing it could name.
 * rdma-core 44's posts refuse every request once its queue pair is ERR:
 * bnxt_re_post_send unless RTS or SQD, bnxt_re_post_recv in RESET or ERR,
 * each pointing *bad at the first request and returning EINVAL. rdma-core
 * 47 dropped those checks (2494b5be6, "bnxt_re/lib: Remove the unwanted
 * checks from data path"): from 50 on a post is taken, and flushed if its
 * queue is linked.
 *
 * _K67: with the kernel's bnxt_re of Linux 6.7 on, which raises an async
 * event for every error of a queue pair (drivers/infiniband/hw/bnxt_re/
 * main.c, bnxt_re_handle_qp_async_event, from b02fd3f79ec3 "RDMA/bnxt_re:
 * Report async events and errors"): QP_FATAL unless the error's reason
 * says otherwise; a requester's exhausted retries (REQ_TIMEOUT_RETRY_LIMIT,
 * REQ_RNR_TIMEOUT_RETRY_LIMIT) QP_ACCESS_ERR; a message longer than the
 * receive (RES_EXCEEDS_WQE) QP_REQ_ERR. Before 6.7 it raises none for a
 * queue pair without an SRQ. The fake raises it, once, as the NIC writes
 * the queue pair's first error or flush, and the library reads it at once
 * (fake_event). Nothing else the kernel does differs for a user queue
 * pair: the CQs are the provider's to poll, terminal CQEs included.
 */
enum fake_profile {
	FAKE_PLAIN,
	FAKE_RXE,
	FAKE_MLX5,
	FAKE_BNXT_RE_44,
	FAKE_BNXT_RE_44_K67,
	FAKE_BNXT_RE_50,
	FAKE_BNXT_RE_50_K67,
	FAKE_PROFILES
};

extern const char *const fake_profile_name[FAKE_PROFILES];

struct fake;
struct fake_cq {
	struct ibv_cq cq;		/* what the library holds */
	struct fake *fake;
	struct ibv_wc *wc;		/* scripted CQEs; [first, last) not polled */
	size_t first, last, cap;
	int fail;			/* < 0: the next poll returns it */
	size_t held;			/* CQEs from here on land ... */
	int hold;			/* ... after this many more polls */
	unsigned long polls;		/* ibv_poll_cq calls on it so far */
	size_t given;			/* CQEs its polls gave the library */
};

struct fake_ring {
	struct fake_cq cq;
	struct fake_req *req;		/* every request the NIC took, in order */
	size_t nreq, cap;
	size_t next;			/* first request fake_complete() has not written */
	enum fake_outcome outcome;	/* of the next post, then FAKE_ACCEPT again */
	int at, ret;
	size_t first_held;		/* bnxt_re: the first request not done */
	bool linked;			/* bnxt_re: on its CQ's flush list */
};

struct fake {
	struct rig__qp q;		/* the library's queue pair */
	struct rig_qp *qp;		/* &q.pub, what tests pass the library */
	struct rig_nic nic;
	union {
		struct rig_region r;	/* registered-looking memory of nic */
		struct rig__region reg;	/* its private half: the far lkey */
	};
	struct ibv_context ctx;
	struct ibv_qp ibqp;
	struct fake_ring ring[2];	/* indexed by enum rig_side */
	enum fake_profile profile;
	bool nic_failed;		/* the NIC wrote an error, a flush or a terminal CQE */
	bool terminal;			/* bnxt_re: the NIC wrote its terminal CQE */
	bool evented;			/* _K67: the kernel raised its event */
	uint32_t depth;			/* fake_depth's, or 0 for the full depth */
};

#define FAKE_REGION_LEN 65536
/* The keys of the fake region: its near and its far registration's. */
#define FAKE_LKEY 0x1234
#define FAKE_FAR_LKEY 0x4321

/* A connected, healthy queue pair that serves reads (local), with empty
 * rings; fake_free() gives back all of it. */
struct fake *fake_new(void);
void fake_free(struct fake *f);

/* Makes @f what fake_new() returns again, keeping its memory; the slots
 * keep their stale contents, as a long-lived queue pair's do. */
void fake_reset(struct fake *f);

/* Makes the NIC's queues under both rings @depth deep (rig(7) Q4), as
 * rig_nic_set_depth does for the queue pairs a NIC makes: entries beyond
 * it wait in the ring. The fake fails a test whose library gives a
 * queue more requests whose CQEs it has not read than @depth, while the
 * queue pair is healthy. fake_reset() sets the full depth. */
void fake_depth(struct fake *f, uint32_t depth);

/* Makes the queue pair one of the far protection domain (rig(7) M4), as
 * a connection by address facing another host is, or a near one again
 * (fake_reset's): it serves no reads, and its posts should carry the
 * region's far lkey. */
void fake_far(struct fake *f, bool far);

/* The outcome of the next post of @side (see enum fake_outcome). */
void fake_refuse(struct fake *f, enum rig_side side, int at, int ret);
void fake_doorbell_fails(struct fake *f, enum rig_side side, int ret);

/* The next ibv_poll_cq of @side's CQ returns @ret (< 0) and takes nothing. */
void fake_cq_fails(struct fake *f, enum rig_side side, int ret);

/*
 * CQEs written to @side's CQ from now on land only after the library has
 * polled that CQ @polls more times: they land while it reads the CQs, as a
 * NIC's may.
 */
void fake_hold(struct fake *f, enum rig_side side, int polls);

/* Plays @profile's provider from now on; fake_reset() sets FAKE_PLAIN. */
void fake_profile(struct fake *f, enum fake_profile profile);

/* Writes to @side's CQ a terminal CQE: the poll that reads it moves the
 * queue pair to ERR (f->ibqp.state) and gives the library nothing, as
 * bnxt_re_poll_term_cqe does, and links both queues for flushing under a
 * bnxt_re profile. An error CQE moves it to ERR too. */
void fake_terminal(struct fake *f, enum rig_side side);

/* Writes a CQE of any content to @side's CQ, as the hardware does: under
 * a bnxt_re profile a receive flush is skipped by the poll, and one for a
 * request flushed already is dropped. Returns 1 if the library may see
 * it, else 0. */
int fake_cqe(struct fake *f, enum rig_side side, uint64_t wr_id,
	     enum ibv_wc_status status, enum ibv_wc_opcode opcode,
	     uint32_t byte_len, unsigned int wc_flags);

/*
 * Has the NIC complete the next @n requests of @side it took, in the order
 * it took them, all with @status: it writes their CQEs, and the profile
 * does the rest (a terminal CQE, an async event). A success has the
 * request's kind and, for a receive, a message as long as the receive.
 * Returns how many of them the provider can still complete as written:
 * under a bnxt_re profile, one it flushed already it completed as flushed;
 * under rxe and mlx5, once the queue pair failed, none: the NIC flushed
 * them all then.
 */
int fake_complete(struct fake *f, enum rig_side side, int n,
		  enum ibv_wc_status status);

/* Completes the next receive the NIC took with a message of @byte_len;
 * returns as fake_complete() does. */
int fake_message(struct fake *f, uint32_t byte_len);

/* How many CQEs of @side's CQ the library has not polled yet. */
size_t fake_unpolled(const struct fake *f, enum rig_side side);

/* What rig_nic_events does for an async event of @f's queue pair: records
 * it for the owner's next poll. Under FAKE_BNXT_RE_50 the provider reads
 * it first, and links both queues for flushing. */
void fake_event(struct fake *f, int error, const char *why);

#endif
