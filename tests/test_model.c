/* SPDX-License-Identifier: MIT */
/*
 * A randomised model test on the device (rig(7) Q1-Q3, P1-P4, T1, T2, F1, F3,
 * F5, F6, D1). Sixteen queue pairs, eight connected pairs (in the two-host
 * topology four of them across rxe0 <-> rxe1), take a seeded random mix of
 * posts (single and batched sends, receives, reads between queue pairs of
 * one NIC, sizes from 0 to the device's message limit), polls, batch polls
 * and bounded waits on either ring in any order, and injected faults:
 *   - a send longer than the peer's receive: both queue pairs fail (P4),
 *     the receiver with -EIO, the sender with -EREMOTEIO;
 *   - a destroyed peer: the survivor's next send fails with -ETIMEDOUT
 *     after its retries (D1);
 *   - two hosts only, once in one seed of CUT_EVERY (a cut costs seconds):
 *     a cut wire (netem loss 100% on both veth ends), and both ends of
 *     every pair across it send: each fails with -ETIMEDOUT;
 *   - an async event QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR for one queue
 *     pair (F1): it fails with -EIO, -EPROTO or -EACCES, its peer not at
 *     all; and DEVICE_FATAL for a NIC (F6): every queue pair of that NIC
 *     fails with -ENODEV, those of the other NIC not at all.
 * Soft-RoCE raises no such event, so they are injected as test_event.c
 * does: a pipe stands in for the NIC's async fd while rig_nic_events reads
 * the real event record written into it, which libibverbs parses. Each
 * event comes at a step of its own, from (seed, step). The real queue pair
 * stays RTS, so the NIC still runs what was posted before the event: an
 * entry whose completion rig finds in its queue keeps its own result, the
 * rest fail with the event's error (F3, F6), and posts after it reach no
 * NIC (F5). A queue-pair event that the kernel never counted would make
 * ibv_destroy_qp wait for ever (test_event.c runs its events in a child
 * for that reason); here the test takes back the count that rig's
 * ibv_ack_async_event added, so the pair is destroyed like any other.
 *
 * After every step the test checks what rig did against a model of the
 * rules: room is 4095 minus the entries posted and not taken (Q1); each
 * completion is the one of the ring's oldest entry (Q2), a success only for
 * an entry that may succeed (a receive a send was matched to, an entry of a
 * healthy queue pair, an entry before the failure in its ring), with the
 * exact length, and the bytes it moved are checked (a sequence number and a
 * checksum in every message of 8 bytes or more, and the whole pattern); an
 * error only on a queue pair a fault hit, always the error that fault must
 * give, with the same reason on every completion of both rings (F3), also
 * for entries posted after the failure (F5) and receives the NIC never
 * completes (F6). Sends are only ever posted against a receive the peer
 * has posted already: on Soft-RoCE an RNR wait fails the send after about
 * 470 ms, which would be a failure the model did not ask for.
 *
 * Liveness is checked without timing windows tighter than the rules: a pair
 * a fault hit is finished with waits of 10 s per entry, and healthy pairs
 * are settled (every receive given a send, every entry taken, each within
 * 10 s) every SETTLE steps and at the end of each seed.
 *
 * Each step draws its random numbers from (seed, step) alone, so
 * RIG_TEST_SEED=<seed> replays a seed's operations; which of them can run
 * (a free slot, a receive to match) still depends on what the NIC had
 * completed when the step polled. Every assertion names the seed and the
 * step. RIG_TEST_LONG=1 runs new seeds (getrandom) for 10 minutes, printing
 * each one.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
#include <rdma/ib_user_verbs.h>

#include "t_device.h"

#define NQP 16
#define NPAIR (NQP / 2)
#define SLOTS 4			/* entries in flight per ring and queue pair */
#define SLOT_SZ 65536u
#define BIG_MAX (8u << 20)	/* the message limit on rxe; less elsewhere */
#define CAP 16			/* model ring; more than SLOTS + batches */
#define WAIT_US 10000000	/* liveness bound of a wait: 10 s */
#define STEPS 900		/* per seed */
#define SETTLE 250		/* settle the healthy pairs every SETTLE steps */
#define DOOM_STEPS 40		/* a pair a fault hit is finished this later */
#define LONG_S 600
#define CUT_EVERY 5		/* seeds; see run_seed */

static const uint64_t fixed_seeds[] = { 1, 2, 3, 4, 5 };

/* ---- what a failure message needs -------------------------------------- */

static unsigned long long seed;
static unsigned long step;

#define CHK(cond, fmt, ...)                                                    \
	cr_assert(cond, "seed %llu step %lu: " fmt " (RIG_TEST_SEED=%llu replays it)", \
		  seed, step, ##__VA_ARGS__, seed)

/* ---- randomness: a function of (seed, step) ---------------------------- */

static uint64_t rs;

static uint64_t rnd(void)
{
	uint64_t z = (rs += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t below(uint32_t n)
{
	return n ? (uint32_t)(rnd() % n) : 0;
}

/* 0 and @max often, small sizes often, anything up to @max sometimes. */
static uint32_t pick_size(uint32_t max)
{
	switch (below(8)) {
	case 0: return 0;
	case 1: return max;
	case 2: case 3: return below((max < 16 ? max : 16) + 1);
	case 4: case 5: return below((max < 1100 ? max : 1100) + 1);
	default: return below(max + 1);
	}
}

/* ---- message contents -------------------------------------------------- */

static uint32_t msg_key(int from, uint32_t seq)
{
	uint32_t x = (uint32_t)from * 0x9e3779b1u ^ seq * 0x85ebca6bu ^ 0x5bd1e995u;

	return x ^ (x >> 15);
}

static uint8_t pat(uint32_t key, size_t i)
{
	return (uint8_t)(key + i * 131 + (i >> 8) * 7 + (i >> 16));
}

/* A message of n >= 8 bytes: its sequence number, the FNV-1a checksum of
 * the rest, then the pattern of (sender, seq); shorter: the pattern. */
static void msg_fill(uint8_t *m, uint32_t n, int from, uint32_t seq)
{
	uint32_t key = msg_key(from, seq), h = 2166136261u;
	uint32_t i;

	for (i = n >= 8 ? 8 : 0; i < n; i++) {
		m[i] = pat(key, i);
		h = (h ^ m[i]) * 16777619u;
	}
	if (n >= 8) {
		memcpy(m, &seq, 4);
		memcpy(m + 4, &h, 4);
	}
}

/* Returns -1 if the message is whole, else the first bad offset. */
static long msg_check(const uint8_t *m, uint32_t n, int from, uint32_t seq)
{
	uint32_t key = msg_key(from, seq), h = 2166136261u, got;
	uint32_t i;

	for (i = n >= 8 ? 8 : 0; i < n; i++) {
		if (m[i] != pat(key, i))
			return i;
		h = (h ^ m[i]) * 16777619u;
	}
	if (n >= 8) {
		memcpy(&got, m, 4);
		if (got != seq)
			return 0;
		memcpy(&got, m + 4, 4);
		if (got != h)
			return 4;
	}
	return -1;
}

#define READ_KEY 0xa5a5c3c3u

/* ---- the NICs and their one region each -------------------------------- */

/*
 * Layout of each NIC's region: the big send area, the big receive area,
 * the read source (a fixed pattern, never written), then SLOTS send slots
 * and SLOTS receive slots for each of the NQP queue pairs.
 */
struct nicbuf {
	struct rig_nic *nic;
	uint8_t *mem;
	size_t len;
	struct rig_region *r;
	int async_fd;		/* its context's */
};

static struct nicbuf nb[2];
static int nnic;
static uint32_t big;		/* the message limit used: min(msg_max, 8 MiB) */
static int big_busy;		/* entries that use the big areas */
static int cut;			/* the wire is cut */

static size_t off_big_send(void) { return 0; }
static size_t off_big_recv(void) { return BIG_MAX; }
static size_t off_read_src(void) { return 2 * (size_t)BIG_MAX; }
static size_t off_slot(int g, int side, int s)
{
	return 2 * (size_t)BIG_MAX + SLOT_SZ +
	       (((size_t)g * 2 + side) * SLOTS + s) * SLOT_SZ;
}

/* ---- the model --------------------------------------------------------- */

enum kind { K_SEND, K_READ, K_RECV };
#define UNMATCHED UINT32_MAX

struct ent {
	enum kind kind;
	int slot;		/* -1: the big area */
	size_t off;		/* where its bytes are in its NIC's region */
	uint32_t n;		/* posted length (a receive's room) */
	uint32_t want;		/* bytes on success; UNMATCHED: no message */
	int from;		/* a matched receive's sender */
	uint32_t seq;		/* its message's number; a read's offset */
	int must_fail;
	uint64_t cookie;
};

struct mring {
	struct ent e[CAP];
	uint32_t head, tail;
	uint32_t matched;	/* receive ring: the oldest unmatched entry */
	unsigned slots;		/* bit s: slot s is in use */
	int saw_error;
};

struct mqp {
	struct rig_qp *qp;	/* NULL once destroyed */
	int g, peer, ni;
	struct mring r[2];
	int err;		/* the error its fault must give, or 0 */
	int known;		/* an error completion was taken */
	int fault_sent;		/* its send ring holds an entry that must fail */
	int evented;		/* rig knows of an async event that failed it */
	const char *why;
	uint32_t tx_seq;
};

static struct mqp m[NQP];

/* What a seed did, printed after it: proof that the mix is what it says. */
static struct {
	unsigned long send, recv, read, big, batch, taken_ok, taken_err;
	unsigned long too_long, destroyed, cuts, qp_events, nic_events;
} st;
static int doom_step[NPAIR];	/* 0: healthy; else the step of its fault */

static const char *side_name(int side)
{
	return side == RIG_SEND ? "send" : "receive";
}

static uint32_t used(const struct mring *r)
{
	return r->head - r->tail;
}

static int free_slot(const struct mring *r)
{
	int s;

	for (s = 0; s < SLOTS; s++)
		if (!(r->slots & (1u << s)))
			return s;
	return -1;
}

static struct ent *push(struct mqp *q, int side)
{
	struct mring *r = &q->r[side];
	struct ent *e = &r->e[r->head % CAP];

	CHK(used(r) < CAP, "model ring of qp %d full", q->g);
	memset(e, 0, sizeof(*e));
	e->want = UNMATCHED;
	/* F5: posted once the failure is known, or behind an entry of
	 * the same ring that must fail (Q2). */
	e->must_fail = q->known || q->evented || (side == RIG_SEND && q->fault_sent);
	r->head++;
	return e;
}

static void release(struct mqp *q, int side, struct ent *e)
{
	if (e->slot >= 0)
		q->r[side].slots &= ~(1u << e->slot);
	else
		big_busy--;
}

static void check_room(const struct mqp *q)
{
	int side;

	if (!q->qp)
		return;
	for (side = 0; side < 2; side++) {
		int room = rig_qp_room(q->qp, side);

		CHK(room == RIG_RING_ENTRIES - (int)used(&q->r[side]),
		    "qp %d %s ring: room %d, the model says %d (Q1)", q->g,
		    side_name(side), room, RIG_RING_ENTRIES - (int)used(&q->r[side]));
	}
}

/* Checks @c against the oldest entry of @q's ring @side and takes it. */
static void take(struct mqp *q, int side, const struct rig_completion *c,
		 int has_cookie, uint64_t cookie)
{
	struct mring *r = &q->r[side];
	struct ent *e = &r->e[r->tail % CAP];
	const struct nicbuf *b = &nb[q->ni];
	long bad;

	CHK(used(r) > 0, "qp %d %s ring gave a completion with no entry due",
	    q->g, side_name(side));
	if (has_cookie)
		CHK(cookie == e->cookie, "qp %d %s entry %u: cookie %llu, posted %llu",
		    q->g, side_name(side), r->tail, (unsigned long long)cookie,
		    (unsigned long long)e->cookie);
	if (c->error == 0) {
		CHK(!e->must_fail && !r->saw_error && e->want != UNMATCHED,
		    "qp %d %s entry %u (kind %d, %u bytes) succeeded, but it %s (F3, F5)",
		    q->g, side_name(side), r->tail, e->kind, e->n,
		    e->want == UNMATCHED ? "had no message to take" :
		    r->saw_error ? "follows a failed entry of its ring" :
		    "was posted behind the failure");
		CHK(c->why == NULL, "qp %d %s entry %u: error 0 with why \"%s\"",
		    q->g, side_name(side), r->tail, c->why);
		CHK(c->bytes == e->want, "qp %d %s entry %u (kind %d): %u bytes, want %u (T1)",
		    q->g, side_name(side), r->tail, e->kind, c->bytes, e->want);
		if (e->kind == K_RECV) {
			bad = msg_check(b->mem + e->off, e->want, e->from, e->seq);
			CHK(bad < 0, "qp %d receive entry %u: message %u of qp %d (%u bytes) "
			    "wrong at byte %ld (P1)", q->g, r->tail, e->seq, e->from,
			    e->want, bad);
		} else if (e->kind == K_READ) {
			const uint8_t *d = b->mem + e->off;
			uint32_t i;

			for (i = 0; i < e->n; i++)
				CHK(d[i] == pat(READ_KEY, e->seq + i),
				    "qp %d read entry %u (%u bytes at %u): byte %u wrong (P3)",
				    q->g, r->tail, e->n, e->seq, i);
		}
	} else {
		CHK(q->err != 0, "qp %d %s entry %u (kind %d, %u bytes) failed %d (%s) "
		    "though no fault touched its pair", q->g, side_name(side), r->tail,
		    e->kind, e->n, c->error, c->why ? c->why : "NULL");
		CHK(c->error == q->err, "qp %d %s entry %u failed %d (%s), want %d (F3)",
		    q->g, side_name(side), r->tail, c->error, c->why ? c->why : "NULL",
		    q->err);
		CHK(c->why != NULL, "qp %d %s entry %u: error %d with a NULL why",
		    q->g, side_name(side), r->tail, c->error);
		if (!q->why)
			q->why = c->why;
		CHK(c->why == q->why, "qp %d %s entry %u: why \"%s\", earlier \"%s\" (F3)",
		    q->g, side_name(side), r->tail, c->why, q->why);
		r->saw_error = 1;
		q->known = 1;
	}
	if (c->error)
		st.taken_err++;
	else
		st.taken_ok++;
	release(q, side, e);
	r->tail++;
	if (side == RIG_RECEIVE && r->matched < r->tail)
		r->matched = r->tail;
}

/* ---- posts ------------------------------------------------------------- */

static void post_receive(struct mqp *q, int bigone)
{
	struct ent *e;
	int s = bigone ? -1 : free_slot(&q->r[RIG_RECEIVE]), ret;

	e = push(q, RIG_RECEIVE);
	e->kind = K_RECV;
	e->slot = s;
	if (s >= 0) {
		q->r[RIG_RECEIVE].slots |= 1u << s;
		e->off = off_slot(q->g, RIG_RECEIVE, s);
		e->n = pick_size(SLOT_SZ);
		/* a stale message must not pass for the new one */
		memset(nb[q->ni].mem + e->off, 0xee, e->n < 64 ? e->n : 64);
	} else {
		big_busy++;
		e->off = off_big_recv();
		e->n = big;
	}
	st.recv++;
	ret = rig_qp_receive(q->qp, nb[q->ni].r, e->off, e->n);
	CHK(ret == 0, "qp %d: rig_qp_receive(%u bytes): %d %s (P4, F5)", q->g, e->n,
	    ret, rig_errmsg());
}

/* Fills in a send of @n bytes on @q for the peer's oldest unmatched
 * receive (if it has one and @q's pair is healthy), and the receive's
 * expectation. Returns the entry, not yet posted. */
static struct ent *prepare_send(struct mqp *q, uint32_t n, int bigone)
{
	struct mqp *p = &m[q->peer];
	struct mring *pr = &p->r[RIG_RECEIVE];
	struct ent *e, *re = NULL;
	int s = bigone ? -1 : free_slot(&q->r[RIG_SEND]);

	e = push(q, RIG_SEND);
	e->kind = K_SEND;
	e->slot = s;
	e->n = n;
	e->want = n;
	e->from = q->g;
	e->seq = q->tx_seq++;
	if (s >= 0) {
		q->r[RIG_SEND].slots |= 1u << s;
		e->off = off_slot(q->g, RIG_SEND, s);
	} else {
		big_busy++;
		e->off = off_big_send();
	}
	msg_fill(nb[q->ni].mem + e->off, n, q->g, e->seq);
	if (p->qp && pr->matched < pr->head && !e->must_fail) {
		re = &pr->e[pr->matched % CAP];
		if (n <= re->n) {
			re->want = n;
			re->from = q->g;
			re->seq = e->seq;
		}
		pr->matched++;
	}
	return e;
}

static void post_send(struct mqp *q, uint32_t n, int bigone)
{
	struct ent *e = prepare_send(q, n, bigone);
	int ret = rig_qp_send(q->qp, nb[q->ni].r, e->off, e->n);

	st.send++;
	st.big += bigone && n == big;
	CHK(ret == 0, "qp %d: rig_qp_send(%u bytes): %d %s (P1, F5)", q->g, e->n, ret,
	    rig_errmsg());
}

/* The oldest unmatched receive of @q's peer, or NULL. */
static struct ent *peer_receive(struct mqp *q)
{
	struct mring *pr = &m[q->peer].r[RIG_RECEIVE];

	return pr->matched < pr->head ? &pr->e[pr->matched % CAP] : NULL;
}

static void op_send(struct mqp *q)
{
	struct ent *re = peer_receive(q);

	if (!re || re->slot < 0 || free_slot(&q->r[RIG_SEND]) < 0 ||
	    used(&q->r[RIG_SEND]) >= SLOTS - 1)
		return;
	post_send(q, pick_size(re->n), 0);
}

static void op_send_batch(struct mqp *q)
{
	struct rig_post posts[SLOTS];
	struct mring *pr = &m[q->peer].r[RIG_RECEIVE];
	uint32_t k = 1 + below(3), i;
	int ret;

	if (pr->head - pr->matched < k || used(&q->r[RIG_SEND]) + k > SLOTS - 1)
		return;
	for (i = 0; i < k; i++)
		if (pr->e[(pr->matched + i) % CAP].slot < 0)
			return;
	for (i = 0; i < k; i++) {
		struct ent *re = &pr->e[pr->matched % CAP];
		struct ent *e = prepare_send(q, pick_size(re->n), 0);

		e->cookie = rnd() | 1;
		posts[i] = (struct rig_post){ nb[q->ni].r, e->off, e->n, e->cookie };
	}
	st.send += k;
	st.batch++;
	ret = rig_qp_send_batch(q->qp, posts, (int)k);
	CHK(ret == (int)k, "qp %d: rig_qp_send_batch(%u): %d %s", q->g, k, ret,
	    rig_errmsg());
}

static void op_receive_batch(struct mqp *q)
{
	struct rig_post posts[SLOTS];
	struct mring *r = &q->r[RIG_RECEIVE];
	uint32_t k = 1 + below(3), i;
	int ret;

	if (used(r) + k > SLOTS)
		return;
	for (i = 0; i < k; i++) {
		struct ent *e = push(q, RIG_RECEIVE);

		e->kind = K_RECV;
		e->slot = free_slot(r);
		r->slots |= 1u << e->slot;
		e->off = off_slot(q->g, RIG_RECEIVE, e->slot);
		e->n = pick_size(SLOT_SZ);
		e->cookie = rnd() | 1;
		memset(nb[q->ni].mem + e->off, 0xee, e->n < 64 ? e->n : 64);
		posts[i] = (struct rig_post){ nb[q->ni].r, e->off, e->n, e->cookie };
	}
	st.recv += k;
	st.batch++;
	ret = rig_qp_receive_batch(q->qp, posts, (int)k);
	CHK(ret == (int)k, "qp %d: rig_qp_receive_batch(%u): %d %s", q->g, k, ret,
	    rig_errmsg());
}

/* A read of the peer's read source (the peer is a queue pair of this NIC,
 * so it serves it: M4, P3) into a send slot. */
static void op_read(struct mqp *q)
{
	struct mring *r = &q->r[RIG_SEND];
	struct ent *e;
	uint32_t at;
	int ret;

	if (used(r) >= SLOTS - 1)
		return;
	e = push(q, RIG_SEND);
	e->kind = K_READ;
	e->slot = free_slot(r);
	r->slots |= 1u << e->slot;
	e->off = off_slot(q->g, RIG_SEND, e->slot);
	e->n = pick_size(SLOT_SZ);
	at = below(SLOT_SZ - e->n + 1);
	e->seq = at;
	e->want = e->n;
	memset(nb[q->ni].mem + e->off, 0xee, e->n);
	st.read++;
	ret = rig_qp_read(q->qp, nb[q->ni].r, off_read_src() + at, nb[q->ni].r,
			  e->off, e->n);
	CHK(ret == 0, "qp %d: rig_qp_read(%u bytes): %d %s (P3)", q->g, e->n, ret,
	    rig_errmsg());
}

/* Q3: one byte over the limit is refused and changes nothing. */
static void op_over_limit(struct mqp *q)
{
	uint32_t limit = q->qp->msg_max;
	int ret = rig_qp_send(q->qp, nb[q->ni].r, 0, (size_t)limit + 1);

	CHK(ret == -EINVAL, "qp %d: a send of %u + 1 bytes gave %d, want -EINVAL (Q3)",
	    q->g, limit, ret);
}

/* ---- taking ------------------------------------------------------------ */

static void op_take(struct mqp *q, int side)
{
	struct rig_completion c[SLOTS];
	uint64_t cookies[SLOTS];
	uint32_t due = used(&q->r[side]);
	int ret, i, max;

	switch (below(3)) {
	case 0:
		ret = rig_qp_poll(q->qp, side, c);
		CHK(ret == 0 || (ret == 1 && due > 0),
		    "qp %d %s ring: rig_qp_poll %d with %u due (T1)", q->g,
		    side_name(side), ret, due);
		if (ret == 1)
			take(q, side, c, 0, 0);
		break;
	case 1:
		max = 1 + (int)below(SLOTS);
		ret = rig_qp_poll_batch(q->qp, side, c, cookies, max);
		CHK(ret >= 0 && ret <= max && (uint32_t)ret <= due,
		    "qp %d %s ring: rig_qp_poll_batch(max %d) %d with %u due", q->g,
		    side_name(side), max, ret, due);
		for (i = 0; i < ret; i++)
			take(q, side, &c[i], 1, cookies[i]);
		break;
	default:
		ret = rig_qp_wait(q->qp, side, below(2000), c);
		if (!due) {
			CHK(ret == -EINVAL, "qp %d %s ring: rig_qp_wait with nothing due "
			    "gave %d, want -EINVAL (T2)", q->g, side_name(side), ret);
			break;
		}
		CHK(ret == 0 || ret == 1, "qp %d %s ring: rig_qp_wait %d %s (T2)",
		    q->g, side_name(side), ret, rig_errmsg());
		if (ret == 1)
			take(q, side, c, 0, 0);
	}
}

/* Takes every due entry of @q, each within WAIT_US. */
static void drain(struct mqp *q, int side)
{
	struct rig_completion c;
	int ret;

	while (used(&q->r[side])) {
		ret = rig_qp_wait(q->qp, side, WAIT_US, &c);
		CHK(ret == 1, "qp %d %s entry %u (kind %d, %u bytes) did not complete "
		    "in %d s: %d", q->g, side_name(side), q->r[side].tail,
		    q->r[side].e[q->r[side].tail % CAP].kind,
		    q->r[side].e[q->r[side].tail % CAP].n, WAIT_US / 1000000, ret);
		take(q, side, &c, 0, 0);
		check_room(q);
	}
}

/* ---- pairs ------------------------------------------------------------- */

static int cross(int pair)
{
	return nnic == 2 && pair >= NPAIR / 2;
}

static void pair_make(int pair)
{
	int a = 2 * pair, b = a + 1;

	memset(&m[a], 0, sizeof(m[a]));
	memset(&m[b], 0, sizeof(m[b]));
	m[a].g = a;
	m[a].peer = b;
	m[b].g = b;
	m[b].peer = a;
	m[b].ni = cross(pair);
	m[a].qp = t_qp(nb[0].nic);
	m[b].qp = t_qp(nb[m[b].ni].nic);
	t_connect(m[a].qp, m[b].qp);
	doom_step[pair] = 0;
}

static void qp_drop(struct mqp *q)
{
	int side;
	int ret;

	for (side = 0; side < 2; side++)
		for (; used(&q->r[side]); q->r[side].tail++)
			release(q, side, &q->r[side].e[q->r[side].tail % CAP]);
	ret = rig_qp_destroy(q->qp);
	CHK(ret == 0, "qp %d: rig_qp_destroy: %d %s (D1)", q->g, ret, rig_errmsg());
	q->qp = NULL;
}

/*
 * A healthy pair: every receive gets a send, then every entry of both
 * queue pairs must complete, successfully, each within WAIT_US.
 */
static void settle(int pair)
{
	int i;

	for (i = 0; i < 2; i++)
		drain(&m[2 * pair + i], RIG_SEND);
	for (i = 0; i < 2; i++) {
		struct mqp *q = &m[2 * pair + i];
		struct ent *re;

		while ((re = peer_receive(q)))
			post_send(q, pick_size(re->n), re->slot < 0);
	}
	for (i = 0; i < 2; i++) {
		drain(&m[2 * pair + i], RIG_SEND);
		drain(&m[2 * pair + i], RIG_RECEIVE);
	}
}

/*
 * A pair a fault hit: every due entry completes within WAIT_US (F3, F6);
 * the failure kept is the fault's; posts after it are accepted and fail
 * with it, a receive too, which Soft-RoCE itself never completes (F5, F6).
 * Then the pair is destroyed and made again.
 */
static void finish_drain(int pair)
{
	int i, side;

	/* The end an event spared first: its receives hold what the NIC
	 * still sends for the failed end, whose send slots must not be
	 * written again before that arrived. */
	for (i = 0; i < 2; i++) {
		struct mqp *q = &m[2 * pair + i];
		struct mring *r = &q->r[RIG_RECEIVE];
		struct rig_completion c;
		int ret;

		if (!q->qp || q->err)
			continue;
		drain(q, RIG_SEND);
		/* Its unmatched receives get no send: left to the destroy. */
		while (r->tail < r->matched) {
			ret = rig_qp_wait(q->qp, RIG_RECEIVE, WAIT_US, &c);
			CHK(ret == 1, "qp %d receive entry %u did not complete in %d s: %d",
			    q->g, r->tail, WAIT_US / 1000000, ret);
			take(q, RIG_RECEIVE, &c, 0, 0);
		}
		ret = rig_qp_failure(q->qp, NULL);
		CHK(ret == 0, "qp %d: rig_qp_failure %d, but the event was its peer's",
		    q->g, ret);
	}
	/* Both failed ends are drained before either posts again: a send
	 * slot written anew may still be on its way to the peer. */
	for (i = 0; i < 2; i++) {
		struct mqp *q = &m[2 * pair + i];

		if (q->qp && q->err)
			for (side = 0; side < 2; side++)
				drain(q, side);
	}
	for (i = 0; i < 2; i++) {
		struct mqp *q = &m[2 * pair + i];
		int err;

		if (!q->qp || !q->err)
			continue;
		/* After an event every due entry may have had its own result
		 * in the queue; the posts below then show the failure. */
		err = rig_qp_failure(q->qp, NULL);
		CHK((q->evented && !q->known) || err == q->err, "qp %d: rig_qp_failure "
		    "%d, the fault's error %d, %s error completion taken", q->g, err,
		    q->err, q->known ? "an" : "no");
		post_receive(q, 0);
		post_send(q, pick_size(SLOT_SZ), 0);
		check_room(q);
		for (side = 0; side < 2; side++)
			drain(q, side);
		err = rig_qp_failure(q->qp, NULL);
		CHK(q->known && err == q->err, "qp %d: rig_qp_failure %d, the fault's "
		    "error %d, %s error completion taken", q->g, err, q->err,
		    q->known ? "an" : "no");
	}
}

static void remake(int pair)
{
	int i;

	for (i = 0; i < 2; i++)
		if (m[2 * pair + i].qp)
			qp_drop(&m[2 * pair + i]);
	pair_make(pair);
}

static void finish(int pair)
{
	finish_drain(pair);
	remake(pair);
}

/* ---- faults ------------------------------------------------------------ */

/* P4: a send one byte longer than the peer's receive fails both. */
static void fault_too_long(int pair)
{
	struct mqp *x = &m[2 * pair + below(2)], *y = &m[x->peer];
	struct ent *re = peer_receive(x), *e;
	int ret;

	if (!re) {
		if (used(&y->r[RIG_RECEIVE]) >= SLOTS)
			return;
		post_receive(y, 0);
		re = peer_receive(x);
	}
	if (re->slot < 0 || re->n >= SLOT_SZ)
		return;
	x->err = -EREMOTEIO;
	y->err = -EIO;
	doom_step[pair] = (int)step;
	e = prepare_send(x, re->n + 1, 0);
	e->must_fail = 1;
	x->fault_sent = 1;
	/* the receive it meets fails, and so all behind it */
	re->want = UNMATCHED;
	st.too_long++;
	ret = rig_qp_send(x->qp, nb[x->ni].r, e->off, e->n);
	CHK(ret == 0, "qp %d: the too-long send: %d %s", x->g, ret, rig_errmsg());
}

/* Fails @q's pair with -ETIMEDOUT: its send to a peer that cannot answer
 * fails after the retries. */
static void fault_send(struct mqp *q)
{
	struct ent *e;
	int ret;

	q->err = -ETIMEDOUT;
	e = push(q, RIG_SEND);
	e->kind = K_SEND;
	e->slot = free_slot(&q->r[RIG_SEND]);
	q->r[RIG_SEND].slots |= 1u << e->slot;
	e->off = off_slot(q->g, RIG_SEND, e->slot);
	e->n = pick_size(SLOT_SZ);
	e->want = e->n;
	e->seq = q->tx_seq++;
	e->must_fail = 1;
	q->fault_sent = 1;
	msg_fill(nb[q->ni].mem + e->off, e->n, q->g, e->seq);
	ret = rig_qp_send(q->qp, nb[q->ni].r, e->off, e->n);
	CHK(ret == 0, "qp %d: the send to a peer that cannot answer: %d %s", q->g,
	    ret, rig_errmsg());
}

/* D1: the peer is destroyed; the survivor's next send fails. */
static void fault_destroy(int pair)
{
	struct mqp *x = &m[2 * pair + below(2)], *y = &m[x->peer];

	st.destroyed++;
	qp_drop(y);
	doom_step[pair] = (int)step;
	fault_send(x);
}

static void wire_restore(void)
{
	t_wire_mend();
	cut = 0;
}

/*
 * The wire between the hosts is cut: every packet lost (netem loss 100% on
 * both veth ends). The neighbour caches are not flushed, unlike test_remote
 * (which must keep a connect from resolving the peer): a send then waits for
 * an ARP that never comes, each retry for seconds. Both ends of
 * every healthy pair across it send, and so fail with -ETIMEDOUT. Their
 * entries are taken while it is cut; it is restored before they are made
 * again.
 */
static void fault_cut(void)
{
	int pair;

	cut = 1;
	st.cuts++;
	t_sh("tc qdisc add dev %s root netem loss 100%%", t_netdev());
	t_sh("tc qdisc add dev %s root netem loss 100%%", t_peer_netdev());
	for (pair = 0; pair < NPAIR; pair++) {
		if (!cross(pair) || doom_step[pair])
			continue;
		doom_step[pair] = (int)step;
		fault_send(&m[2 * pair]);
		fault_send(&m[2 * pair + 1]);
	}
	for (pair = 0; pair < NPAIR; pair++)
		if (cross(pair) && doom_step[pair] == (int)step)
			finish_drain(pair);
	/* new queue pairs connect over a whole wire */
	wire_restore();
	for (pair = 0; pair < NPAIR; pair++)
		if (cross(pair) && doom_step[pair] == (int)step)
			remake(pair);
}

/* ---- async events (F1, F6) --------------------------------------------- */

/*
 * A pipe holding one event record stands in for the NIC's async fd while
 * rig_nic_events reads it (its read end non-blocking, as rig made the real
 * one); then the real one is put back, for the kernel refuses to make a
 * completion queue or queue pair for a context whose async fd is a pipe.
 */
static void inject(struct nicbuf *b, uint64_t element, enum ibv_event_type type)
{
	struct ib_uverbs_async_event_desc d = { element, type, 0 };
	int real = dup(b->async_fd), p[2], ret;

	CHK(real >= 0 && pipe(p) == 0 && fcntl(p[0], F_SETFL, O_NONBLOCK) == 0 &&
	    dup2(p[0], b->async_fd) == b->async_fd, "the pipe for event %d: %m", type);
	CHK(write(p[1], &d, sizeof(d)) == sizeof(d), "injecting event %d: %m", type);
	ret = rig_nic_events(b->nic);
	CHK(dup2(real, b->async_fd) == b->async_fd, "the real async fd back: %m");
	close(real);
	close(p[0]);
	close(p[1]);
	CHK(ret == 1, "rig_nic_events after injecting event %d: %d %s", type, ret,
	    rig_errmsg());
}

/* ibv_ack_async_event counted the event on the queue pair; the kernel
 * never did, and ibv_destroy_qp waits until the two counts agree. */
static void uncount(struct ibv_qp *ibqp)
{
	pthread_mutex_lock(&ibqp->mutex);
	ibqp->events_completed--;
	pthread_mutex_unlock(&ibqp->mutex);
}

static void evented(struct mqp *q, int err, int pair)
{
	q->err = err;
	q->evented = 1;
	doom_step[pair] = (int)step;
}

/* F1: QP_FATAL, QP_REQ_ERR or QP_ACCESS_ERR for one end of @pair. */
static void fault_qp_event(int pair)
{
	static const struct {
		enum ibv_event_type type;
		int err;
	} ev[] = {
		{ IBV_EVENT_QP_FATAL, -EIO },
		{ IBV_EVENT_QP_REQ_ERR, -EPROTO },
		{ IBV_EVENT_QP_ACCESS_ERR, -EACCES },
	};
	struct mqp *x = &m[2 * pair + below(2)];
	int k = (int)below(3);

	st.qp_events++;
	inject(&nb[x->ni], (uintptr_t)x->qp->ibqp, ev[k].type);
	uncount(x->qp->ibqp);
	evented(x, ev[k].err, pair);
}

/* F6: DEVICE_FATAL fails every queue pair of one NIC; pairs a fault hit
 * before are finished first, so that each failure has one cause. */
static void fault_nic_event(void)
{
	int ni = (int)below((uint32_t)nnic), pair, i;

	for (pair = 0; pair < NPAIR; pair++)
		if (doom_step[pair])
			finish(pair);
	st.nic_events++;
	inject(&nb[ni], 0, IBV_EVENT_DEVICE_FATAL);
	for (pair = 0; pair < NPAIR; pair++)
		for (i = 0; i < 2; i++)
			if (m[2 * pair + i].ni == ni)
				evented(&m[2 * pair + i], -ENODEV, pair);
}

/* ---- one step ---------------------------------------------------------- */

static void one_step(void)
{
	int pair = (int)below(NPAIR), i = 2 * pair + (int)below(2);
	struct mqp *q = &m[i];
	int healthy = !doom_step[pair], op = (int)below(1000);

	if (!q->qp)
		q = &m[q->peer];
	if (op < 250) {
		if (used(&q->r[RIG_RECEIVE]) < SLOTS)
			post_receive(q, 0);
	} else if (op < 450) {
		if (healthy)
			op_send(q);
	} else if (op < 500) {
		if (healthy)
			op_send_batch(q);
	} else if (op < 540) {
		op_receive_batch(q);
	} else if (op < 600) {
		if (healthy && !cross(pair))
			op_read(q);
	} else if (op < 940) {
		op_take(q, (int)below(2));
	} else if (op < 950) {
		op_over_limit(q);
	} else if (op < 958) {
		/* one message of the limit's size, now and then */
		if (healthy && !big_busy && used(&m[q->peer].r[RIG_RECEIVE]) < SLOTS &&
		    used(&q->r[RIG_SEND]) < SLOTS - 1 && !peer_receive(q)) {
			post_receive(&m[q->peer], 1);
			post_send(q, below(4) ? big : pick_size(big), 1);
		}
	} else if (op < 967) {
		if (healthy)
			fault_too_long(pair);
	} else if (op < 973) {
		if (healthy)
			fault_destroy(pair);
	} else if (op < 977) {
		if (healthy)
			fault_qp_event(pair);
	} else if (op < 978) {
		fault_nic_event();
	} else {
		if (healthy)
			settle(pair);
	}
	for (pair = 0; pair < NPAIR; pair++)
		if (doom_step[pair] && step - doom_step[pair] >= DOOM_STEPS)
			finish(pair);
	for (i = 0; i < NQP; i++)
		check_room(&m[i]);
}

static void run_seed(unsigned long long s, unsigned long steps)
{
	unsigned long cut_step;
	int pair;

	double t0 = t_now_ms();

	seed = s;
	step = 0;
	big_busy = 0;
	memset(&st, 0, sizeof(st));
	/* A cut costs seconds (retries, ARP, connects), so one seed in
	 * CUT_EVERY cuts the wire, once, at a step of its own. */
	rs = seed;
	cut_step = nnic == 2 && seed % CUT_EVERY == 1 ? 1 + below(steps) : 0;
	for (pair = 0; pair < NPAIR; pair++)
		pair_make(pair);
	for (step = 1; step <= steps; step++) {
		rs = seed * 0xd1342543de82ef95ull + step;
		if (step == cut_step)
			fault_cut();
		else
			one_step();
		if (step % SETTLE != 0 && step != steps)
			continue;
		for (pair = 0; pair < NPAIR; pair++) {
			if (doom_step[pair])
				finish(pair);
			else
				settle(pair);
		}
	}
	for (pair = 0; pair < NPAIR; pair++) {
		qp_drop(&m[2 * pair]);
		qp_drop(&m[2 * pair + 1]);
	}
	CHK(big_busy == 0, "the model lost track of the big areas (%d)", big_busy);
	fprintf(stderr, "test_model: seed %llu: %lu steps in %.1f s: %lu sends "
		"(%lu of %u bytes), %lu receives, %lu reads, %lu batches; %lu "
		"completions ok, %lu failed; faults: %lu too long, %lu destroyed, "
		"%lu cuts, %lu queue-pair events, %lu DEVICE_FATAL\n", seed,
		step - 1, (t_now_ms() - t0) / 1000, st.send, st.big, big, st.recv,
		st.read, st.batch, st.taken_ok, st.taken_err, st.too_long,
		st.destroyed, st.cuts, st.qp_events, st.nic_events);
}

/* ---- fixture ----------------------------------------------------------- */

static void nic_setup(int i, const char *name)
{
	struct nicbuf *b = &nb[i];
	struct rig_qp *probe;
	size_t k;
	int ret;

	b->nic = t_nic_open(name);
	b->len = off_slot(NQP, 0, 0);
	b->mem = malloc(b->len);
	cr_assert_not_null(b->mem);
	for (k = 0; k < SLOT_SZ; k++)
		b->mem[off_read_src() + k] = pat(READ_KEY, k);
	ret = rig_region_register(b->nic, b->mem, b->len, &b->r);
	cr_assert_eq(ret, 0, "rig_region_register(%zu bytes): %d %s", b->len, ret,
		     rig_errmsg());
	probe = t_qp(b->nic);
	b->async_fd = probe->ibqp->context->async_fd;
	cr_assert_eq(rig_qp_destroy(probe), 0);
}

static void setup(void)
{
	struct rig_qp *probe;

	nnic = t_peer_dev() ? 2 : 1;
	nic_setup(0, t_dev());
	if (nnic == 2)
		nic_setup(1, t_peer_dev());
	probe = t_qp(nb[0].nic);
	big = probe->msg_max < BIG_MAX ? probe->msg_max : BIG_MAX;
	cr_assert_eq(rig_qp_destroy(probe), 0);
}

static void teardown(void)
{
	int i;

	if (cut)
		wire_restore();
	for (i = 0; i < nnic; i++) {
		rig_nic_close(nb[i].nic);
		free(nb[i].mem);
	}
}

TestSuite(model, .init = setup, .fini = teardown);

/* The regions are given back before the test's body ends, so that a leak
 * check at its end (the ASan build's) sees every verbs object rig keeps in
 * its own mappings accounted for. */
static void regions_release(void)
{
	int i, ret;

	for (i = 0; i < nnic; i++) {
		ret = rig_region_deregister(nb[i].r);
		cr_assert_eq(ret, 0, "rig_region_deregister: %d %s", ret, rig_errmsg());
	}
}

Test(model, Q1_Q2_Q3_P1_P3_P4_T1_T2_F1_F3_F5_F6_D1_random_operations)
{
	const char *env = getenv("RIG_TEST_SEED");
	unsigned long steps = STEPS;
	double end;
	size_t i;

	if (getenv("RIG_TEST_STEPS"))
		steps = strtoul(getenv("RIG_TEST_STEPS"), NULL, 0);
	if (env) {
		fprintf(stderr, "test_model: seed %s, %lu steps\n", env, steps);
		run_seed(strtoull(env, NULL, 0), steps);
		regions_release();
		return;
	}
	if (!t_long()) {
		for (i = 0; i < sizeof(fixed_seeds) / sizeof(fixed_seeds[0]); i++)
			run_seed(fixed_seeds[i], steps);
		regions_release();
		return;
	}
	end = t_now_ms() + LONG_S * 1000.0;
	while (t_now_ms() < end) {
		unsigned long long s;

		cr_assert_eq(getrandom(&s, sizeof(s), 0), (ssize_t)sizeof(s));
		fprintf(stderr, "test_model: seed %llu\n", s);
		run_seed(s, steps);
	}
	regions_release();
}
