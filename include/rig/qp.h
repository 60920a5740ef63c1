/* SPDX-License-Identifier: MIT */
#ifndef RIG_QP_H
#define RIG_QP_H
/*
 * Reliable-connected queue pairs. Making, connecting and destroying are
 * library calls; the hot path (room, send, read, receive, poll) is inline
 * code over libibverbs' own inlines, so a post or a poll costs what raw verbs
 * cost plus a few compares. Every rare case (a caller's mistake, a full
 * ring, a ring beyond its NIC's depth, a failed queue pair, an error
 * completion) goes to one out-of-line function, rig__qp_post_slow() or
 * rig__qp_poll_slow().
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#include <rig/endpoint.h>
#include <rig/region.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RIG_RING_ENTRIES 4095
#define RIG_MESSAGE_MAX (1ull << 31)

enum rig_side { RIG_SEND = 0, RIG_RECEIVE = 1 };

struct rig_completion {
	uint32_t bytes;		/* when error == 0: the bytes the entry moved */
	int error;		/* 0: completed; < 0: failed, a negative errno */
	const char *why;	/* NULL when error == 0; else a readable reason */
};

struct rig_nic;

/*
 * Each ring keeps its own CQ, so its completions come in the order of its
 * entries (rig(7) Q2), and 4096 slots indexed by sequence number & mask
 * (a % 4095 costs two dozen instructions a post). Entry s is due while
 * tail <= s < head; entries [tail, tail + ahead) already have their result
 * in their slot, taken from the CQ early (to find a failure reported on
 * the other ring) or filled in by the library (rig(7) F6). The NIC's queue
 * under the ring holds depth entries (RIG_RING_ENTRIES unless the NIC was
 * set shallower, rig_nic_set_depth): a post with depth entries due goes
 * to the slow path, which posts it to the NIC if the NIC has room, or
 * keeps it in the ring, in order, until completions free some (rig(7) Q4).
 */
#define RIG__SLOTS 4096u
#define RIG__MASK (RIG__SLOTS - 1)

struct rig__slot {
	uint32_t len;		/* posted length; a receive's message length once reaped */
	uint32_t failed;	/* once reaped: the entry did not complete */
	uint64_t cookie;	/* the caller's, from a batch post; else 0 */
};

struct rig__ring {
	struct ibv_cq *cq;
	struct rig__slot *slot;
	uint32_t head;		/* sequence number of the next post */
	uint32_t tail;		/* oldest entry whose completion is not taken */
	uint32_t ahead;		/* reaped, not taken, from tail on */
	uint32_t depth;		/* the NIC's queue under the ring (rig(7) Q4):
				 * a post with this many due goes out of line */
};

/*
 * The library allocates every queue pair; applications hold pointers only.
 * The fields below are read by the inline functions of this header.
 */
struct rig_qp {
	/* read by inline code: ABI-frozen */
	struct ibv_qp *ibqp;
	const struct rig_nic *nic;
	uint32_t broken;	/* 0: connected, healthy; else take the slow
				 * path (but RIG__WAITING of the other ring) */
	uint32_t local;		/* the peer is a QP of this NIC handle: reads (M4) */
	uint32_t msg_max;	/* min(2^31, the device's max_msg_sz) (Q3) */
	/* Where, in bytes from the start of a region's handle, the local
	 * key of this queue pair's protection domain lies (rig(7) M4): the
	 * region's lkey, or for a queue pair facing another host, that of
	 * the region's registration granting no remote access, which the
	 * library keeps past the public fields. */
	uint32_t lkey_at;
	struct rig__ring ring[2];	/* indexed by enum rig_side */
	/* While entries wait in ring side (RIG__WAITING(side)) and nothing
	 * else is wrong, its inline poll goes on taking completions until
	 * tail reaches refill_at[side], where the NIC's queue has room for
	 * the next move; that poll goes out of line and makes it (rig(7)
	 * Q4). Written by the library under the queue pair's lock, read here
	 * atomically. Added after rig 0.4, past the end of its block:
	 * applications never allocate a struct rig_qp (rig(7) ABI). */
	uint32_t refill_at[2];
};

/**
 * rig_qp_make - make an unconnected queue pair whose sends start at a
 * random 24-bit PSN (rig(7) M1)
 *
 * Returns 0 and sets *out, or -errno with rig_errmsg() naming the verbs call
 * the NIC refused; a failed make gives back all it took.
 */
int rig_qp_make(struct rig_nic *nic, struct rig_qp **out);

/** rig_qp_endpoint - what a peer needs to connect to @qp (rig(7) M2) */
void rig_qp_endpoint(const struct rig_qp *qp, struct rig_endpoint *out);

/**
 * rig_qp_connect - connect @qp to @peer, ready to send (rig(7) M3-M5)
 *
 * RESET->INIT->RTR->RTS: local ACK timeout 14 (67 ms), 7 transport retries
 * (6 on Soft-RoCE, whose 7 means forever), infinite RNR retry. A peer that
 * is a queue pair of the same NIC handle (@qp itself included) may read
 * this process's regions through @qp; any other peer, even one in another
 * process on the same device and GID, gets no access at all.
 *
 * Returns 0; -EINVAL if @qp is connected or @peer's qp or psn is over 24
 * bits; -EOPNOTSUPP if the peer is not of this NIC handle and the NIC
 * granted @qp remote access rig did not ask for (bnxt_re before Linux
 * 6.13; rig(7) M4: connect such peers by address); or the -errno of the
 * refused step. Called again after a refusal, it starts over from RESET.
 */
int rig_qp_connect(struct rig_qp *qp, const struct rig_endpoint *peer);

/**
 * rig_qp_destroy - destroy @qp and free its rings (rig(7) D1, D2)
 *
 * Once it returns 0 the NIC runs none of @qp's entries and writes no memory
 * for it. On a NIC refusal it returns -errno; the handle counts as destroyed
 * and rig_nic_close() frees what it holds.
 */
int rig_qp_destroy(struct rig_qp *qp);

/**
 * rig_qp_failure - the failure @qp keeps, once poll or wait has seen it
 * @wc_status: if not NULL, set to the verbs completion status behind it
 *             (enum ibv_wc_status), or -1 when it came from elsewhere (an
 *             async event, a completion of an unknown kind, the device)
 *
 * Returns the failure's error (what its completions carry), or 0 while
 * @qp has not failed.
 */
int rig_qp_failure(const struct rig_qp *qp, int *wc_status);

/*
 * Who a queue pair is connected to, in the words an operator matches with
 * the peer's own log and with `rdma res show qp`. @size works as in
 * struct rig_qp_stats.
 */
struct rig_qp_peer {
	uint32_t size;		/* in: the structure's size; out: bytes filled */
	uint32_t qp;		/* this queue pair's number */
	uint32_t peer_qp;	/* the peer's queue pair number */
	uint8_t gid[16];	/* the peer's GID */
	/* "198.18.0.2:7471" ("[fd00::2]:7471") for a connection made by
	 * address (rdma_cm's peer address and port); else the GID, as
	 * inet_ntop(3) writes it ("::ffff:198.18.0.2", "fe80::1") */
	char addr[64];
};

/**
 * rig_qp_peer - who @qp is connected to (rig(7) THE FAILURE MODEL)
 *
 * Returns 0 and fills @p; -EINVAL for a NULL argument, @p->size below 8,
 * or a queue pair that was never connected (@p untouched). Any thread may
 * call it while @qp lives: what it reads is set once, by the connect.
 */
int rig_qp_peer(const struct rig_qp *qp, struct rig_qp_peer *p);

/**
 * rig_qp_set_cookie - the application's own value for @qp
 *
 * The loop hands it back in @cookie of each piece of news of @qp
 * (RIG_NEWS_RING, RIG_NEWS_GONE), as libuv's handles carry their data, so
 * that a server finds a connection's state without a table of its own. A
 * connection's starts as its dial's or its listener's cookie, set before
 * the news that hands it out; any other queue pair's at 0. Returns 0, or
 * -EINVAL when @qp is NULL; rig_qp_cookie() returns it (0 for NULL).
 */
int rig_qp_set_cookie(struct rig_qp *qp, uint64_t cookie);
uint64_t rig_qp_cookie(const struct rig_qp *qp);

/* One entry of a batch post. */
struct rig_post {
	const struct rig_region *region;
	size_t at;
	size_t n;
	uint64_t cookie;	/* given back with the entry's completion */
};

/* Entries of one batch post, at most. */
#define RIG_BATCH_MAX 64

/**
 * rig_qp_send_batch - post @count sends (1..RIG_BATCH_MAX) with one
 * doorbell, one system call on Soft-RoCE
 *
 * Every entry is checked first, as rig_qp_send() checks one: a bad entry
 * posts none (-EINVAL), and so does a ring without room for all (-ENOSPC).
 * Returns @count; if the NIC refuses part of the chain, the number it took
 * (the rest were not posted), or -errno if it took none. A refusal that
 * says the queue pair failed accepts the whole batch (rig(7) F5).
 */
int rig_qp_send_batch(struct rig_qp *qp, const struct rig_post *posts, int count);

/** rig_qp_receive_batch - rig_qp_send_batch() for receives */
int rig_qp_receive_batch(struct rig_qp *qp, const struct rig_post *posts, int count);

/**
 * rig_qp_poll_batch - take up to @max completions of @side, in ring order
 * @cookies: if not NULL, cookies[i] gets the cookie of c[i]'s entry (0 for
 *           entries posted one at a time)
 *
 * Returns how many it took (0..@max), or -EINVAL. Like rig_qp_poll(), it
 * makes no system call but to tell of a failure it finds.
 */
/**
 * rig_qp_tag - give the entry just posted on @side a cookie
 *
 * Right after a post of @side that returned 0 (rig_qp_send, rig_qp_read,
 * rig_qp_receive), on the thread that posted: the entry gets @cookie, which
 * rig_qp_poll_batch() gives back with its completion, as a batch post's.
 * Out of line: a single post costs nothing more when it is not called.
 * Returns 0, or -EINVAL for a NULL @qp, a bad side or a ring with no entry
 * due.
 */
int rig_qp_tag(struct rig_qp *qp, enum rig_side side, uint64_t cookie);

int rig_qp_poll_batch(struct rig_qp *qp, enum rig_side side,
		      struct rig_completion *c, uint64_t *cookies, int max);

/*
 * What rig_qp_stats() reports of one ring. @size works as in struct
 * rig_nic_info: set it to sizeof(struct rig_qp_stats) and the structure
 * can grow at its end.
 */
struct rig_qp_stats {
	uint32_t size;		/* in: the structure's size; out: bytes filled */
	uint32_t posted;	/* entries posted on the ring, modulo 2^32 */
	uint32_t taken;		/* completions taken, modulo 2^32 */
	uint32_t due;		/* posted - taken: entries due now */
	uint64_t full;		/* posts refused with -ENOSPC: the ring was full */
	uint64_t slept;		/* rig_qp_wait calls that slept */
	uint64_t completed;	/* entries the library completed itself (rig(7) F6) */
	uint64_t async_events;	/* async events that named the queue pair or
				 * its device (both rings report the same) */
	/* Rings deeper than the NIC's queues (rig(7) Q4); 0 at the full depth: */
	uint64_t waited;	/* entries that waited in the ring for NIC room */
	uint64_t ran_dry;	/* times the library found the NIC's queue empty
				 * while entries waited in the ring: on the
				 * receive ring, each a stretch in which a
				 * send of the peer meets an RNR NAK (Q4, M3) */
};

/**
 * rig_qp_stats - the counters of @qp's ring @side
 *
 * posted and taken are the ring's own sequence numbers, which the hot path
 * keeps anyway; the other counters are kept on the slow paths only, so
 * they cost a post or a poll nothing. Call it from the queue pair's owner
 * (rig(7) C3). Returns 0, or -EINVAL for a NULL @qp or @s, a bad side or
 * @s->size below 8 (@s untouched).
 */
int rig_qp_stats(const struct rig_qp *qp, enum rig_side side,
		 struct rig_qp_stats *s);

/*
 * Out-of-line halves of the inline functions. Not for applications, but
 * ABI all the same: the inline code compiled into applications calls them
 * by name and reads the marked block of struct rig_qp and struct
 * rig_region. They live in a version node of their own (RIG_INLINE_0.1 in
 * lib/librig.map). Changing a signature below, or the layout of a frozen
 * block, means a new symbol in a new version node, or a new soname.
 */
enum rig__op { RIG__OP_SEND, RIG__OP_READ, RIG__OP_RECEIVE };
int rig__qp_post_slow(struct rig_qp *qp, enum rig__op op,
		      const struct rig_region *src, size_t src_at,
		      const struct rig_region *dst, size_t dst_at, size_t n);
/* @wr: the request posted; @bad: what the provider set, NULL before */
int rig__qp_post_refused(struct rig_qp *qp, enum rig__op op, const void *wr,
			 const void *bad, int ret);
int rig__qp_poll_slow(struct rig_qp *qp, enum rig_side side,
		      const struct ibv_wc *wc, int n, struct rig_completion *c);

/* The hot path must really be inline: a call and its frame cost more
 * than the checks themselves (GCC at -O2 kept rig_qp_poll out of line).
 * lib/ffi.c defines RIG_INLINE first, to compile these same bodies once
 * more as exported functions, for FFI users (RIG_FFI_0.2). */
#ifndef RIG_INLINE
#if defined(__GNUC__)
#define RIG_INLINE static inline __attribute__((always_inline))
#else
#define RIG_INLINE static inline
#endif
#endif

#if defined(__GNUC__)
#define RIG__UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define RIG__UNLIKELY(x) (x)
#endif

/* A word of the frozen block that another thread's library code may
 * write: read whole, with no ordering (the slow path orders). */
RIG_INLINE uint32_t rig__load(const uint32_t *word)
{
#if defined(__GNUC__)
	return __atomic_load_n(word, __ATOMIC_RELAXED);
#else
	return *(volatile const uint32_t *)word;
#endif
}

/* The slow paths of another thread (rig_nic_events) may set qp->broken. */
RIG_INLINE uint32_t rig__qp_broken(const struct rig_qp *qp)
{
	return rig__load(&qp->broken);
}

/*
 * The bit of qp->broken that says entries wait in ring @side beyond the
 * NIC's depth (rig(7) Q4). It sends that ring's posts out of line, and
 * its polls once they have taken enough for a move (rig__qp_poll_out),
 * and only that ring's: the other ring's go on inline, and its poll
 * goes out of line, to move them, whenever it finds its CQ empty while
 * entries are due here. Every other bit of broken concerns both rings.
 * (rig 0.4's inline code took every bit for both rings, and every poll
 * out of line: slower with entries waiting, and as right.)
 */
#define RIG__WAITING(side) (1u << (5 + (unsigned)(side)))

/* What sends the posts and polls of ring @side out of line. */
RIG_INLINE uint32_t rig__qp_broken_for(const struct rig_qp *qp,
				       enum rig_side side)
{
	return rig__qp_broken(qp) & ~RIG__WAITING(side == RIG_SEND ? RIG_RECEIVE
								   : RIG_SEND);
}

/*
 * The completions of ring @q reaped ahead. Read atomically: while entries
 * wait beyond the depth, the loop's thread may reap the ring's CQ under
 * the queue pair's lock (rig(7) Q4) as the owner's inline poll reads this
 * on its way out of line.
 */
RIG_INLINE uint32_t rig__ring_ahead(const struct rig__ring *q)
{
	return rig__load(&q->ahead);
}

/*
 * Whether the poll of ring @side goes out of line, once its broken word
 * or its ring's ahead said it might: yes, unless entries merely wait in
 * the ring (RIG__WAITING(side) alone, nothing reaped ahead) and tail has
 * not reached refill_at (compared as the distance of two sequence
 * numbers, so that it holds across their wrap). It reads broken again:
 * keeping the first read for it costs the hot path a register.
 */
RIG_INLINE int rig__qp_poll_out(const struct rig_qp *qp, enum rig_side side)
{
	const struct rig__ring *q = &qp->ring[side];

	return (int32_t)(q->tail - rig__load(&qp->refill_at[side])) >= 0 ||
	       rig__qp_broken_for(qp, side) != RIG__WAITING(side) || rig__ring_ahead(q);
}

/* Nonzero unless [at, at + n) lies in live region @r of @qp's NIC and n is
 * a valid message length; written so that no sum can overflow. */
RIG_INLINE int rig__qp_bad_span(const struct rig_qp *qp,
				const struct rig_region *r, size_t at, size_t n)
{
	return !r || r->nic != qp->nic || at > r->len || n > r->len - at ||
	       n > qp->msg_max;
}

/* The local key of live region @r for @qp's posts (rig(7) M4). */
RIG_INLINE uint32_t rig__qp_lkey(const struct rig_qp *qp, const struct rig_region *r)
{
	return *(const uint32_t *)(const void *)((const char *)r + qp->lkey_at);
}

RIG_INLINE uint32_t rig__ring_used(const struct rig__ring *q)
{
	return q->head - q->tail;
}

/**
 * rig_qp_room - how many more entries the ring of @side takes (rig(7) Q1)
 *
 * A slot frees when poll or wait takes its completion, not when the NIC
 * completes it. Returns 0..RIG_RING_ENTRIES, or -EINVAL for a bad side.
 */
RIG_INLINE int rig_qp_room(const struct rig_qp *qp, enum rig_side side)
{
	if (RIG__UNLIKELY((unsigned)side > RIG_RECEIVE))
		return -EINVAL;
	return RIG_RING_ENTRIES - (int)rig__ring_used(&qp->ring[side]);
}

/**
 * rig_qp_send - post the send of @n bytes at @at of @r to the peer (rig(7) P1)
 *
 * Returns 0; -EINVAL if @qp is not connected, @r is not a live region of
 * @qp's NIC, the bytes do not lie in @r or @n is over the message limit;
 * -ENOSPC if the send ring is full. On error nothing is posted. An entry
 * beyond the NIC's depth waits in the ring (rig(7) Q4).
 */
RIG_INLINE int rig_qp_send(struct rig_qp *qp, const struct rig_region *r,
			   size_t at, size_t n)
{
	struct rig__ring *q = &qp->ring[RIG_SEND];
	struct ibv_send_wr *bad = NULL;
	int ret;

	if (RIG__UNLIKELY(rig__qp_bad_span(qp, r, at, n) |
			  (rig__ring_used(q) >= q->depth) |
			  (rig__qp_broken_for(qp, RIG_SEND) != 0)))
		return rig__qp_post_slow(qp, RIG__OP_SEND, NULL, 0, r, at, n);

	struct ibv_sge sge = { (uintptr_t)(r->addr + at), (uint32_t)n,
			       rig__qp_lkey(qp, r) };
	struct ibv_send_wr wr;

	/* What providers read of a plain send; zeroing all 128 bytes of the
	 * request costs more than the rest of the post. */
	wr.wr_id = q->head;
	wr.next = NULL;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = 0;
	wr.imm_data = 0;
	q->slot[q->head & RIG__MASK].len = (uint32_t)n;
	q->slot[q->head & RIG__MASK].cookie = 0;
	ret = ibv_post_send(qp->ibqp, &wr, &bad);
	if (RIG__UNLIKELY(ret))
		return rig__qp_post_refused(qp, RIG__OP_SEND, &wr, bad, ret);
	q->head++;
	return 0;
}

/**
 * rig_qp_read - post, on the send ring, the read of @n bytes at @src_at of
 * @src into @dst_at of @dst; the peer serves it (rig(7) P3)
 *
 * Returns as rig_qp_send() does, for both regions, and -EINVAL if the peer
 * is not a queue pair of @qp's NIC.
 */
RIG_INLINE int rig_qp_read(struct rig_qp *qp, const struct rig_region *src,
			   size_t src_at, const struct rig_region *dst,
			   size_t dst_at, size_t n)
{
	struct rig__ring *q = &qp->ring[RIG_SEND];
	struct ibv_send_wr *bad = NULL;
	int ret;

	if (RIG__UNLIKELY(rig__qp_bad_span(qp, src, src_at, n) |
			  rig__qp_bad_span(qp, dst, dst_at, n) | !qp->local |
			  (rig__ring_used(q) >= q->depth) |
			  (rig__qp_broken_for(qp, RIG_SEND) != 0)))
		return rig__qp_post_slow(qp, RIG__OP_READ, src, src_at, dst,
					 dst_at, n);

	struct ibv_sge sge = { (uintptr_t)(dst->addr + dst_at), (uint32_t)n,
			       rig__qp_lkey(qp, dst) };
	struct ibv_send_wr wr;

	wr.wr_id = q->head;
	wr.next = NULL;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = 0;
	wr.imm_data = 0;
	wr.wr.rdma.remote_addr = (uintptr_t)(src->addr + src_at);
	wr.wr.rdma.rkey = src->rkey;
	q->slot[q->head & RIG__MASK].len = (uint32_t)n;
	q->slot[q->head & RIG__MASK].cookie = 0;
	ret = ibv_post_send(qp->ibqp, &wr, &bad);
	if (RIG__UNLIKELY(ret))
		return rig__qp_post_refused(qp, RIG__OP_READ, &wr, bad, ret);
	q->head++;
	return 0;
}

/**
 * rig_qp_receive - post a receive of up to @n bytes at @at of @r, filled by
 * the peer's next send (rig(7) P4)
 *
 * Returns as rig_qp_send() does, for the receive ring. A send longer than
 * @n fails this queue pair and the peer's.
 */
RIG_INLINE int rig_qp_receive(struct rig_qp *qp, const struct rig_region *r,
			      size_t at, size_t n)
{
	struct rig__ring *q = &qp->ring[RIG_RECEIVE];
	struct ibv_recv_wr *bad = NULL;
	int ret;

	if (RIG__UNLIKELY(rig__qp_bad_span(qp, r, at, n) |
			  (rig__ring_used(q) >= q->depth) |
			  (rig__qp_broken_for(qp, RIG_RECEIVE) != 0)))
		return rig__qp_post_slow(qp, RIG__OP_RECEIVE, NULL, 0, r, at, n);

	struct ibv_sge sge = { (uintptr_t)(r->addr + at), (uint32_t)n,
			       rig__qp_lkey(qp, r) };
	struct ibv_recv_wr wr;

	wr.wr_id = q->head;
	wr.next = NULL;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	q->slot[q->head & RIG__MASK].len = (uint32_t)n;
	q->slot[q->head & RIG__MASK].cookie = 0;
	ret = ibv_post_recv(qp->ibqp, &wr, &bad);
	if (RIG__UNLIKELY(ret))
		return rig__qp_post_refused(qp, RIG__OP_RECEIVE, &wr, bad, ret);
	q->head++;
	return 0;
}

/* The kinds of completion each ring takes (rig(7) F1): the send ring sends
 * and reads, the receive ring plain sends, never immediate data. */
RIG_INLINE int rig__wc_kind_ok(enum rig_side side, const struct ibv_wc *wc)
{
	if (side == RIG_RECEIVE)
		return wc->opcode == IBV_WC_RECV &&
		       !(wc->wc_flags & IBV_WC_WITH_IMM);
	return wc->opcode == IBV_WC_SEND || wc->opcode == IBV_WC_RDMA_READ;
}

/**
 * rig_qp_poll - take the completion of the oldest due entry of a ring
 * (rig(7) T1, T3)
 *
 * Returns 1 and fills @c when that entry has completed; 0 when it has not or
 * no entry is due; -EINVAL for a bad side or a NULL @c. Sends the NIC no
 * request on any path, and makes no system call but when it is the first
 * to find the queue pair failed: it then tells the queue pair's loop and a
 * thread waiting on its other ring (an eventfd write each).
 */
RIG_INLINE int rig_qp_poll(struct rig_qp *qp, enum rig_side side,
			   struct rig_completion *c)
{
	struct rig__ring *q;
	struct ibv_wc wc;
	int n;

	if (RIG__UNLIKELY((unsigned)side > RIG_RECEIVE || !c))
		return rig__qp_poll_slow(qp, side, NULL, 0, c);
	q = &qp->ring[side];
	if (RIG__UNLIKELY(rig__qp_broken_for(qp, side) | rig__ring_ahead(q)) &&
	    rig__qp_poll_out(qp, side))
		return rig__qp_poll_slow(qp, side, NULL, 0, c);
	if (q->tail == q->head)
		return 0;
	n = ibv_poll_cq(q->cq, 1, &wc);
	if (RIG__UNLIKELY(n != 1 || wc.status != IBV_WC_SUCCESS ||
			  !rig__wc_kind_ok(side, &wc))) {
		/* Nothing came, and the other ring has nothing due: no CQ
		 * can hold a failure of this healthy queue pair, so the slow
		 * path would find nothing either (a spinning thread's poll). */
		if (n == 0 && qp->ring[!side].head == qp->ring[!side].tail)
			return 0;
		return rig__qp_poll_slow(qp, side, &wc, n, c);
	}
	/* verbs gives a receive's length only; a send's or read's is ours */
	c->bytes = side == RIG_RECEIVE ? wc.byte_len
				       : q->slot[q->tail & RIG__MASK].len;
	c->error = 0;
	c->why = NULL;
	q->tail++;
	return 1;
}

#undef RIG__UNLIKELY

#ifdef __cplusplus
}
#endif
#endif
