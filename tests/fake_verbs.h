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
 * Whose provider the fake NIC plays, where they differ.
 * FAKE_BNXT_RE_44: bnxt_re of rdma-core 44 (Debian 12), whose poll moves
 * the queue pair to ERR when it reads an error CQE or a terminal CQE
 * (providers/bnxt_re/verbs.c: bnxt_re_poll_err_scqe, bnxt_re_poll_err_rcqe,
 * bnxt_re_poll_term_cqe, which gives the caller no completion), and whose
 * posts then refuse every request: bnxt_re_post_send unless the queue
 * pair is RTS or SQD, bnxt_re_post_recv in RESET or ERR, each pointing
 * *bad at the first request and returning EINVAL. rdma-core 47 dropped
 * those checks (2494b5be6, "bnxt_re/lib: Remove the unwanted checks from
 * data path").
 */
enum fake_profile { FAKE_PLAIN, FAKE_BNXT_RE_44 };

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
};

struct fake_ring {
	struct fake_cq cq;
	struct fake_req *req;		/* every request the NIC took, in order */
	size_t nreq, cap;
	size_t next;			/* first request fake_complete() has not written */
	enum fake_outcome outcome;	/* of the next post, then FAKE_ACCEPT again */
	int at, ret;
};

struct fake {
	struct rig__qp q;		/* the library's queue pair */
	struct rig_qp *qp;		/* &q.pub, what tests pass the library */
	struct rig_nic nic;
	struct rig_region r;		/* registered-looking memory of nic */
	struct ibv_context ctx;
	struct ibv_qp ibqp;
	struct fake_ring ring[2];	/* indexed by enum rig_side */
	enum fake_profile profile;
};

#define FAKE_REGION_LEN 65536

/* A connected, healthy queue pair that serves reads (local), with empty
 * rings; fake_free() gives back all of it. */
struct fake *fake_new(void);
void fake_free(struct fake *f);

/* Makes @f what fake_new() returns again, keeping its memory; the slots
 * keep their stale contents, as a long-lived queue pair's do. */
void fake_reset(struct fake *f);

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
 * bnxt_re_poll_term_cqe does. An error CQE moves it to ERR too. */
void fake_terminal(struct fake *f, enum rig_side side);

/* Writes a CQE of any content to @side's CQ. */
void fake_cqe(struct fake *f, enum rig_side side, uint64_t wr_id,
	      enum ibv_wc_status status, enum ibv_wc_opcode opcode,
	      uint32_t byte_len, unsigned int wc_flags);

/*
 * Writes the CQEs of the next @n requests of @side the NIC took, in the
 * order it took them, all with @status. A success has the request's kind
 * and, for a receive, a message as long as the receive.
 */
void fake_complete(struct fake *f, enum rig_side side, int n,
		   enum ibv_wc_status status);

/* Completes the next receive the NIC took with a message of @byte_len. */
void fake_message(struct fake *f, uint32_t byte_len);

/* How many CQEs of @side's CQ the library has not polled yet. */
size_t fake_unpolled(const struct fake *f, enum rig_side side);

/* What rig_nic_events does for an async event of @f's queue pair: records
 * it for the owner's next poll. */
void fake_event(struct fake *f, int error, const char *why);

#endif
