/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/*
 * Loops, one per thread (include/rig/loop.h).
 *
 * Four threads share one NIC. Each opens a loop of its own on it, makes
 * its 64 queue pairs in that loop and watches it in an io_uring of its
 * own; each pair ping-pongs WINDOW round trips at a time, 500 in all (250
 * across two hosts; $RIG_TEST_MESSAGES sets it), so every ring stays busy
 * and each event lists more rings than one rig_uring_handle call of
 * READY_MAX hands out: 256,000 completions in all.
 * Checked (C3: different queue pairs from different threads freely):
 * - a loop hands out only rings of its own queue pairs, and a thread
 *   sees only its own messages: each names its thread, pair and number
 *   and carries a checksum;
 * - nothing is missed: every message arrives, in order, the counts are
 *   exact, and a thread that hears of nothing for QUIET_MS while it has
 *   entries due names every ring that holds a completion nobody announced;
 * - no loop needs another: thread 0 stops handling a quarter of the way,
 *   until the other threads have finished all their traffic (they wait
 *   for its pause half-way, so at least half of theirs runs while it does
 *   not handle); then it finishes its own, and its first calls find all
 *   its rings at once.
 *
 * Topologies: one host, 32 loopback pairs per thread on $RIG_TEST_DEV;
 * two hosts, the 64 queue pairs of each thread on $RIG_TEST_DEV connected
 * to 64 on $RIG_TEST_PEER_DEV, made in a second loop of the same thread
 * on that NIC (each thread watches its two loops in its one io_uring).
 *
 * Beside it: rig_qp_wait on a queue pair of a loop nobody watches, and of
 * a loop that another thread handles meanwhile; rig_loop_close freeing
 * its queue pairs; and the refusals.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "t_device.h"

#define NTHREADS 4
#define NQP 64			/* queue pairs per thread on the shared NIC */
#define MAXENDS (2 * NQP)	/* two hosts: and their peers */
#define WINDOW 4		/* round trips in flight per pair */
#define SLOT 256		/* bytes of a message buffer; the longest message */
#define READY_MAX 8		/* rings per rig_uring_handle call */
/* Per thread (500 per pair on one host, 250 on two), unless
 * $RIG_TEST_MESSAGES (then per pair). Under ASan a quarter: a memory error
 * shows on a path's first pass, and the plain pass carries the volume. */
#define ROUND_TRIPS (T_ASAN ? 4000 : 16000)
#define WAIT_MS 100		/* a thread's longest sleep */
#define QUIET_MS 10000		/* no news for this long with entries due: stuck */
#define JOIN_MS 300000		/* a thread's whole run, at most */
#define TAG 0x5249470000000000ull	/* | thread << 8 | loop */
#define MAGIC 0x4c676952u	/* "RigL" */
#define HASH 512		/* queue pair -> end, per thread */

/* Four loops of busy queue pairs would exceed the load the test bed
 * carries with another test beside them: run
 * the tests one at a time (an explicit --jobs still wins). */
__attribute__((constructor)) static void run_serially(void)
{
	setenv("CRITERION_JOBS", "1", 1);
}

/* The head of each message; the payload follows. */
struct msg {
	uint32_t magic;
	uint16_t thread;
	uint16_t pong;		/* 0: a ping, 1: its answer */
	uint32_t pair;
	uint32_t seq;
	uint32_t len;		/* the message's bytes, this head included */
	uint32_t sum;		/* FNV-1a of the payload */
};
#define HDR ((uint32_t)sizeof(struct msg))

/* One queue pair of a thread. */
struct end {
	struct rig_qp *qp;
	int loop;		/* index into worker.loops */
	int pair;
	int peer;		/* index of the other end */
	bool pinger;
	size_t at;		/* its WINDOW send slots, then WINDOW receive slots */
	uint32_t sent, sends_taken;
	uint32_t recvs_posted, recvs_taken;
	double listed_at[2];	/* when its ring was handed out last */
};

struct worker {
	int id;
	int nloops;
	struct rig_loop *loops[2];	/* on nics[0], nics[1] */
	struct t_buf buf[2];		/* each loop's ends' slots */
	int nends, npairs;
	struct end ends[MAXENDS];
	struct rig_qp *hkey[HASH];	/* open addressing: qp -> */
	int hval[HASH];			/* the index of its end */
	uint32_t trips;			/* round trips per pair */
	pthread_barrier_t *ready;	/* every thread has its queue pairs */
	pthread_t tid;
	struct io_uring ring;
	/* the thread's own */
	uint64_t taken, expected;
	double traffic_at, last_progress, paused_for;
	bool paused;			/* thread 0: it paused; the others: it
					 * has, as they waited half-way */
	unsigned long calls, full_calls, listings, empty, full_after_pause;
	int due_at_pause;		/* rings with entries due when it paused */
	uint64_t others_at_pause[NTHREADS];	/* their progress then */
	/* atomic: read by other threads */
	uint64_t progress;		/* completions taken */
	int done, failed;
	char err[2048];
};

struct run {
	struct rig_nic *nics[2];
	int nnics;
	struct worker w[NTHREADS];
	int stop;			/* atomic: a thread failed */
	int zero_paused;		/* atomic: thread 0 paused */
};

static struct run run;

/* ---- numbers ---------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t msg_key(int thread, int pair, uint32_t seq, int pong)
{
	return mix64((uint64_t)thread << 56 | (uint64_t)pong << 48 |
		     (uint64_t)pair << 32 | seq);
}

static uint32_t msg_len(uint64_t key)
{
	return HDR + (uint32_t)(key % (SLOT - HDR + 1));
}

static void fill(uint64_t key, uint8_t *p, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++) {
		if (!(i & 7))
			key = mix64(key);
		p[i] = (uint8_t)(key >> (8 * (i & 7)));
	}
}

static uint32_t fnv1a(const uint8_t *p, uint32_t n)
{
	uint32_t h = 2166136261u;

	while (n--)
		h = (h ^ *p++) * 16777619u;
	return h;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
	const char *s = getenv(name);
	char *end;
	uint64_t v;

	if (!s || !*s)
		return dflt;
	errno = 0;
	v = strtoull(s, &end, 0);
	cr_assert(!errno && !*end, "%s=%s is not a number", name, s);
	return v;
}

static const char *side_name(int side)
{
	return side == RIG_SEND ? "send" : "receive";
}

/* ---- a worker's failure ------------------------------------------------ */

/* Criterion's asserts belong to the test's thread: a worker writes why it
 * failed, stops, and the test asserts on it after the join. */
__attribute__((format(printf, 2, 3)))
static void wfail(struct worker *w, const char *fmt, ...)
{
	va_list ap;

	if (__atomic_load_n(&w->failed, __ATOMIC_RELAXED))
		return;
	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
	__atomic_store_n(&w->failed, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&run.stop, 1, __ATOMIC_RELEASE);
}

#define WCHECK(w, cond, ...)                    \
	do {                                    \
		if (!(cond)) {                  \
			wfail(w, __VA_ARGS__);  \
			return -1;              \
		}                               \
	} while (0)

static bool stopping(const struct worker *w)
{
	return __atomic_load_n(&w->failed, __ATOMIC_RELAXED) ||
	       __atomic_load_n(&run.stop, __ATOMIC_ACQUIRE);
}

/* ---- queue pair -> end ------------------------------------------------ */

static unsigned hash_of(const struct rig_qp *qp)
{
	return (unsigned)(mix64((uintptr_t)qp) % HASH);
}

static void index_end(struct worker *w, int e)
{
	unsigned h = hash_of(w->ends[e].qp);

	while (w->hkey[h])
		h = (h + 1) % HASH;
	w->hkey[h] = w->ends[e].qp;
	w->hval[h] = e;
}

/* The index of @qp among @w's ends, or -1. Other threads read the table
 * too, on a failure: each thread writes its own before the barrier that
 * starts the traffic. */
static int find_end(const struct worker *w, const struct rig_qp *qp)
{
	unsigned h = hash_of(qp);

	for (; w->hkey[h]; h = (h + 1) % HASH)
		if (w->hkey[h] == qp)
			return w->hval[h];
	return -1;
}

/* ---- setting up ------------------------------------------------------- */

static size_t end_bytes(void)
{
	return 2 * WINDOW * SLOT;
}

/* The test's thread: the thread's loops and buffers. */
static void setup_worker(struct worker *w, int id, uint32_t trips,
			 pthread_barrier_t *ready)
{
	int k, ret;

	w->id = id;
	w->trips = trips;
	w->ready = ready;
	w->nloops = run.nnics;
	for (k = 0; k < w->nloops; k++) {
		ret = rig_loop_open(run.nics[k], &w->loops[k]);
		cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
		t_buf(&w->buf[k], run.nics[k], NQP * end_bytes(), (unsigned)(id * 2 + k));
	}
	w->nends = NQP * w->nloops;
	w->npairs = w->nends / 2;
	/* A ping and a pong per round trip, each a send and a receive. */
	w->expected = 4ull * w->npairs * trips;
}

/*
 * The worker's thread: its queue pairs, each made in its loop (the four
 * threads make theirs at once). One host: ends 0..63 in the thread's
 * loop, pair j = ends 2j and 2j+1. Two hosts: ends 0..63 on the shared
 * NIC, 64..127 on the peer NIC, pair j = ends j and 64 + j, the pinger on
 * alternate sides.
 */
static int make_queue_pairs(struct worker *w)
{
	struct rig_endpoint ea, eb;
	int e, ret;

	for (e = 0; e < w->nends; e++) {
		struct end *p = &w->ends[e];

		p->loop = e / NQP;
		p->at = (size_t)(e % NQP) * end_bytes();
		if (w->nloops == 1) {
			p->pair = e / 2;
			p->peer = e ^ 1;
			p->pinger = !(e & 1);
		} else {
			p->pair = e % NQP;
			p->peer = (e + NQP) % w->nends;
			p->pinger = (p->pair & 1) == p->loop;
		}
		ret = rig_qp_make_in(w->loops[p->loop], &p->qp);
		WCHECK(w, ret == 0, "thread %d: rig_qp_make_in: %d %s", w->id, ret,
		       rig_errmsg());
		index_end(w, e);
	}
	for (e = 0; e < w->nends; e++) {
		struct end *p = &w->ends[e], *q = &w->ends[p->peer];

		if (!p->pinger)
			continue;
		rig_qp_endpoint(p->qp, &ea);
		rig_qp_endpoint(q->qp, &eb);
		ret = rig_qp_connect(p->qp, &eb);
		if (!ret)
			ret = rig_qp_connect(q->qp, &ea);
		WCHECK(w, ret == 0, "thread %d pair %d: rig_qp_connect: %d %s", w->id,
		       p->pair, ret, rig_errmsg());
	}
	return 0;
}

/* ---- traffic (the worker's thread) ------------------------------------- */

static uint8_t *slot_of(struct worker *w, struct end *p, int receive, uint32_t seq)
{
	return w->buf[p->loop].mem + p->at +
	       (size_t)(receive * WINDOW + seq % WINDOW) * SLOT;
}

static int post_receive(struct worker *w, struct end *p)
{
	uint32_t s = p->recvs_posted;
	uint8_t *m = slot_of(w, p, 1, s);
	int ret;

	/* A stale message in the slot must not pass for the next. */
	memset(m, 0xff, HDR);
	ret = rig_qp_receive(p->qp, w->buf[p->loop].r,
			     (size_t)(m - w->buf[p->loop].mem), SLOT);
	WCHECK(w, ret == 0, "thread %d pair %d: rig_qp_receive: %d %s", w->id,
	       p->pair, ret, rig_errmsg());
	p->recvs_posted++;
	return 0;
}

/* Sends the next message of @p: ping or pong number p->sent. */
static int post_send(struct worker *w, struct end *p)
{
	uint32_t s = p->sent;
	uint8_t *m = slot_of(w, p, 0, s);
	uint64_t key = msg_key(w->id, p->pair, s, !p->pinger);
	struct msg h = { MAGIC, (uint16_t)w->id, !p->pinger, (uint32_t)p->pair, s,
			 msg_len(key), 0 };
	int ret;

	fill(key, m + HDR, h.len - HDR);
	h.sum = fnv1a(m + HDR, h.len - HDR);
	memcpy(m, &h, HDR);
	ret = rig_qp_send(p->qp, w->buf[p->loop].r, (size_t)(m - w->buf[p->loop].mem),
			  h.len);
	WCHECK(w, ret == 0, "thread %d pair %d: rig_qp_send: %d %s", w->id, p->pair,
	       ret, rig_errmsg());
	p->sent++;
	return 0;
}

/* Receives for the whole window first, then the pinger's first pings:
 * no send ever waits for its receive (on rxe that fails the pair). */
static int start_traffic(struct worker *w)
{
	uint32_t k, first = w->trips < WINDOW ? w->trips : WINDOW;
	int e;

	for (e = 0; e < w->nends; e++)
		for (k = 0; k < first; k++)
			if (post_receive(w, &w->ends[e]))
				return -1;
	for (e = 0; e < w->nends; e++)
		for (k = 0; k < first && w->ends[e].pinger; k++)
			if (post_send(w, &w->ends[e]))
				return -1;
	return 0;
}

static int take_send(struct worker *w, struct end *p, const struct rig_completion *c)
{
	uint32_t s = p->sends_taken;
	uint32_t len = msg_len(msg_key(w->id, p->pair, s, !p->pinger));

	WCHECK(w, s != p->sent, "thread %d pair %d: a send completion with no send due",
	       w->id, p->pair);
	WCHECK(w, c->error == 0, "thread %d pair %d: send %u failed: %d %s", w->id,
	       p->pair, s, c->error, c->why);
	WCHECK(w, c->bytes == len, "thread %d pair %d: send %u completed %u bytes of %u",
	       w->id, p->pair, s, c->bytes, len);
	p->sends_taken++;
	return 0;
}

/*
 * Receive number r of @p is message r of its peer: ping r at the ponger,
 * pong r at the pinger, whose thread, pair, length and bytes it checks.
 * Then the window moves: a receive for message r + WINDOW first, then
 * the answer (pong r), or the next ping (r + WINDOW).
 */
static int take_receive(struct worker *w, struct end *p, const struct rig_completion *c)
{
	uint32_t r = p->recvs_taken;
	int pong = p->pinger;
	uint64_t key = msg_key(w->id, p->pair, r, pong);
	uint32_t len = msg_len(key);
	const uint8_t *m = slot_of(w, p, 1, r);
	uint8_t want[SLOT];
	struct msg h;

	WCHECK(w, r != p->recvs_posted, "thread %d pair %d: a receive completion with no receive due",
	       w->id, p->pair);
	WCHECK(w, c->error == 0, "thread %d pair %d: receive %u failed: %d %s", w->id,
	       p->pair, r, c->error, c->why);
	memcpy(&h, m, HDR);
	WCHECK(w, h.magic == MAGIC && h.thread == w->id && h.pair == (uint32_t)p->pair &&
		  h.pong == pong && h.seq == r,
	       "thread %d pair %d: receive %u holds magic %#x, thread %u, pair %u, %s %u: not %s %u of this pair",
	       w->id, p->pair, r, h.magic, h.thread, h.pair, h.pong ? "pong" : "ping",
	       h.seq, pong ? "pong" : "ping", r);
	WCHECK(w, c->bytes == len && h.len == len,
	       "thread %d pair %d: %s %u: %u bytes received, head says %u, sent %u",
	       w->id, p->pair, pong ? "pong" : "ping", r, c->bytes, h.len, len);
	fill(key, want, len - HDR);
	WCHECK(w, !memcmp(m + HDR, want, len - HDR) && h.sum == fnv1a(want, len - HDR),
	       "thread %d pair %d: %s %u: payload differs from what was sent", w->id,
	       p->pair, pong ? "pong" : "ping", r);
	p->recvs_taken++;
	if (p->recvs_posted < w->trips && post_receive(w, p))
		return -1;
	if (!p->pinger)
		return post_send(w, p);
	if (p->sent < w->trips)
		return post_send(w, p);
	return 0;
}

static int take(struct worker *w, struct end *p, int side, const struct rig_completion *c)
{
	w->taken++;
	w->last_progress = t_now_ms();
	return side == RIG_SEND ? take_send(w, p, c) : take_receive(w, p, c);
}

/* Names who a queue pair handed out by the wrong loop belongs to. */
static void foreign(struct worker *w, int k, const struct rig_ready *rd)
{
	int t, e;

	for (t = 0; t < NTHREADS; t++) {
		e = find_end(&run.w[t], rd->qp);
		if (e >= 0 && t != w->id) {
			wfail(w, "thread %d's loop %d handed out the %s ring of thread %d's queue pair %d (pair %d)",
			      w->id, k, side_name(rd->side), t, e, run.w[t].ends[e].pair);
			return;
		}
		if (e >= 0) {
			wfail(w, "thread %d's loop %d handed out the %s ring of queue pair %d of its loop %d",
			      w->id, k, side_name(rd->side), e, run.w[t].ends[e].loop);
			return;
		}
	}
	wfail(w, "thread %d's loop %d handed out a queue pair %p of nobody's (news %d)",
	      w->id, k, (void *)rd->qp, rd->news);
}

/* The rings handed out: each of this loop, polled dry. */
static int drain(struct worker *w, int k, const struct rig_ready *ready, int n)
{
	struct rig_completion c;
	int i, e, ret;

	for (i = 0; i < n; i++) {
		const struct rig_ready *rd = &ready[i];
		struct end *p;

		WCHECK(w, rd->news == RIG_NEWS_RING,
		       "thread %d's loop %d handed out news %d (result %d): no connection is made here",
		       w->id, k, rd->news, rd->result);
		WCHECK(w, rd->side == RIG_SEND || rd->side == RIG_RECEIVE,
		       "thread %d: side %d handed out", w->id, rd->side);
		e = find_end(w, rd->qp);
		if (e < 0 || w->ends[e].loop != k) {
			foreign(w, k, rd);
			return -1;
		}
		p = &w->ends[e];
		p->listed_at[rd->side] = t_now_ms();
		w->listings++;
		while ((ret = rig_qp_poll(p->qp, rd->side, &c)) == 1)
			if (take(w, p, rd->side, &c))
				return -1;
		WCHECK(w, ret == 0, "thread %d pair %d: rig_qp_poll: %d %s", w->id, p->pair,
		       ret, rig_errmsg());
	}
	return 0;
}

static uint32_t due(const struct end *p, int side)
{
	return side == RIG_SEND ? p->sent - p->sends_taken
				: p->recvs_posted - p->recvs_taken;
}

/*
 * No completion for QUIET_MS while entries are due: a lost wakeup, or a
 * stuck device. Probes every ring with entries due and names them: those
 * that hold a completion nobody announced, and those that hold none.
 */
static void stuck(struct worker *w, double now)
{
	char lost[1024] = "", none[512] = "";
	size_t nl = 0, nn = 0;
	struct rig_completion c;
	int e, side, ret, nlost = 0, nnone = 0;

	for (e = 0; e < w->nends; e++)
		for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
			struct end *p = &w->ends[e];

			if (!due(p, side))
				continue;
			ret = rig_qp_poll(p->qp, side, &c);
			if (ret == 1) {
				nlost++;
				if (nl < sizeof(lost) - 100)
					nl += (size_t)snprintf(lost + nl, sizeof(lost) - nl,
						" pair %d end %d %s ring (%u due, listed last %.0f ms ago);",
						p->pair, e, side_name(side), due(p, side),
						now - p->listed_at[side]);
			} else {
				nnone++;
				if (nn < sizeof(none) - 60)
					nn += (size_t)snprintf(none + nn, sizeof(none) - nn,
						" pair %d end %d %s (%d);", p->pair, e,
						side_name(side), ret);
			}
		}
	wfail(w, "thread %d: no completion handed out for %d ms with %llu of %llu taken; "
		 "%d ring(s) hold a completion no news announced:%s %d ring(s) with entries due hold none:%s",
	      w->id, QUIET_MS, (unsigned long long)w->taken, (unsigned long long)w->expected,
	      nlost, lost, nnone, none);
}

static int rings_due(const struct worker *w)
{
	int e, side, n = 0;

	for (e = 0; e < w->nends; e++)
		for (side = RIG_SEND; side <= RIG_RECEIVE; side++)
			n += due(&w->ends[e], side) != 0;
	return n;
}

/*
 * Thread 0, a quarter of the way: it stops handling its loops until every
 * other thread has finished all its traffic. Were a loop to need
 * another's (read its events, hand out its rings), those threads would
 * stall; each names its stuck rings after QUIET_MS, and this thread fails
 * when none of them moved for as long.
 */
static int pause_for_the_others(struct worker *w)
{
	double start = t_now_ms(), moved = start, now;
	uint64_t seen[NTHREADS] = { 0 };
	int t, left;

	w->due_at_pause = rings_due(w);
	for (t = 1; t < NTHREADS; t++)
		w->others_at_pause[t] = __atomic_load_n(&run.w[t].progress, __ATOMIC_RELAXED);
	__atomic_store_n(&run.zero_paused, 1, __ATOMIC_RELEASE);
	for (;;) {
		left = 0;
		now = t_now_ms();
		for (t = 1; t < NTHREADS; t++) {
			struct worker *o = &run.w[t];
			uint64_t pr = __atomic_load_n(&o->progress, __ATOMIC_RELAXED);

			if (__atomic_load_n(&o->done, __ATOMIC_ACQUIRE))
				continue;
			left++;
			if (pr != seen[t]) {
				seen[t] = pr;
				moved = now;
			}
		}
		if (!left || stopping(w))
			break;
		WCHECK(w, now - moved < QUIET_MS,
		       "while thread 0 did not handle its loop, %d other thread(s) made no progress for %d ms",
		       left, QUIET_MS);
		usleep(10000);
	}
	w->paused_for = t_now_ms() - start;
	w->last_progress = t_now_ms();
	return 0;
}

/*
 * The other threads, half-way: they go on only once thread 0 has paused,
 * so that the second half of their traffic runs while it does not handle
 * its loops, however the threads were scheduled. Thread 0 pauses a
 * quarter of the way; should it make no progress for QUIET_MS first, it
 * names its own stuck rings.
 */
static int wait_for_thread_0(struct worker *w)
{
	struct worker *z = &run.w[0];
	uint64_t seen = 0, pr;
	double moved = t_now_ms(), now;

	while (!__atomic_load_n(&run.zero_paused, __ATOMIC_ACQUIRE) && !stopping(w)) {
		now = t_now_ms();
		pr = __atomic_load_n(&z->progress, __ATOMIC_RELAXED);
		if (pr != seen) {
			seen = pr;
			moved = now;
		}
		WCHECK(w, now - moved < 2 * QUIET_MS,
		       "thread %d: thread 0 made no progress towards its pause for %d ms",
		       w->id, 2 * QUIET_MS);
		usleep(1000);
	}
	w->last_progress = t_now_ms();
	return 0;
}

/* Between two rig_uring_handle calls: publish the progress, and pause
 * or wait there (see above). */
static int between_calls(struct worker *w)
{
	__atomic_store_n(&w->progress, w->taken, __ATOMIC_RELAXED);
	if (w->paused)
		return 0;
	if (w->id == 0 && 4 * w->taken >= w->expected) {
		w->paused = true;
		return pause_for_the_others(w);
	}
	if (w->id != 0 && 2 * w->taken >= w->expected) {
		w->paused = true;
		return wait_for_thread_0(w);
	}
	return 0;
}

/*
 * One CQE of loop @k's poll: rig_uring_handle until it hands out fewer
 * than READY_MAX, the first call with the CQE, the rest with NULL. What
 * the polls post completes meanwhile, so a busy thread may run much of
 * its traffic in one such chain: thread 0's pause comes between calls.
 */
static int handle(struct worker *w, int k, const struct io_uring_cqe *cqe)
{
	struct rig_ready ready[READY_MAX];
	int n;

	do {
		if (between_calls(w))
			return -1;
		n = rig_uring_handle(&w->ring, w->loops[k], cqe, ready, READY_MAX);
		WCHECK(w, n >= 0 && n <= READY_MAX, "thread %d: rig_uring_handle: %d %s",
		       w->id, n, rig_errmsg());
		w->calls++;
		if (!n)
			w->empty++;
		if (n == READY_MAX) {
			w->full_calls++;
			w->full_after_pause += w->paused && !w->id;
		}
		if (drain(w, k, ready, n))
			return -1;
		cqe = NULL;
	} while (n == READY_MAX);
	return 0;
}

static int worker_loop(struct worker *w)
{
	struct __kernel_timespec ts = { 0, WAIT_MS * 1000000ll };
	struct io_uring_cqe *cqe;
	unsigned head, seen;
	int k, ret;

	ret = io_uring_queue_init(64, &w->ring, 0);
	WCHECK(w, ret == 0, "thread %d: io_uring_queue_init: %d", w->id, ret);
	for (k = 0; k < w->nloops; k++) {
		ret = rig_uring_watch(&w->ring, w->loops[k], TAG | (uint64_t)w->id << 8 | k);
		WCHECK(w, ret == 0, "thread %d: rig_uring_watch: %d %s", w->id, ret,
		       rig_errmsg());
	}
	if (start_traffic(w))
		return -1;
	w->last_progress = t_now_ms();
	while (w->taken < w->expected && !stopping(w)) {
		ret = io_uring_submit_and_wait_timeout(&w->ring, &cqe, 1, &ts, NULL);
		WCHECK(w, ret >= 0 || ret == -ETIME || ret == -EINTR,
		       "thread %d: io_uring_submit_and_wait_timeout: %d", w->id, ret);
		seen = 0;
		io_uring_for_each_cqe(&w->ring, head, cqe) {
			uint64_t tag = cqe->user_data;

			seen++;
			k = (int)(tag & 0xff);
			WCHECK(w, (tag & ~0xffffull) == TAG && (int)(tag >> 8 & 0xff) == w->id &&
				  k < w->nloops,
			       "thread %d: a CQE tagged %#llx in its ring", w->id,
			       (unsigned long long)tag);
			if (handle(w, k, cqe))
				return -1;
		}
		io_uring_cq_advance(&w->ring, seen);
		__atomic_store_n(&w->progress, w->taken, __ATOMIC_RELAXED);
		if (w->taken < w->expected && t_now_ms() - w->last_progress >= QUIET_MS) {
			stuck(w, t_now_ms());
			return -1;
		}
	}
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	int ret;

	/* The others' tables are complete once all pass the barrier. */
	ret = make_queue_pairs(w);
	pthread_barrier_wait(w->ready);
	w->traffic_at = t_now_ms();
	if (!ret && !stopping(w))
		worker_loop(w);
	if (w->ring.ring_fd > 0)
		io_uring_queue_exit(&w->ring);
	__atomic_store_n(&w->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* ---- the checks (the test's thread) ------------------------------------ */

static void check_worker(struct worker *w)
{
	int e;

	for (e = 0; e < w->nends; e++) {
		const struct end *p = &w->ends[e];

		cr_assert_eq(p->sent, w->trips, "thread %d end %d sent %u of %u", w->id,
			     e, p->sent, w->trips);
		cr_assert_eq(p->sends_taken, w->trips,
			     "thread %d end %d: %u of its %u sends completed", w->id, e,
			     p->sends_taken, w->trips);
		cr_assert_eq(p->recvs_taken, w->trips, "thread %d end %d received %u of %u",
			     w->id, e, p->recvs_taken, w->trips);
		cr_assert_eq(p->recvs_posted, w->trips);
	}
	cr_assert_eq(w->taken, w->expected, "thread %d: %llu of %llu completions", w->id,
		     (unsigned long long)w->taken, (unsigned long long)w->expected);
}

static void join_all(void)
{
	struct timespec end;
	int t, ret;

	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += JOIN_MS / 1000;
	for (t = 0; t < NTHREADS; t++) {
		ret = pthread_timedjoin_np(run.w[t].tid, NULL, &end);
		cr_assert_eq(ret, 0, "thread %d did not end within %d s", t, JOIN_MS / 1000);
	}
}

/* C3: four threads, a loop each on one NIC, each taking exactly its own
 * completions; thread 0 stops a quarter of the way and the others finish
 * without it. */
Test(loops, C3_four_threads_each_take_only_their_own, .timeout = 600)
{
	uint32_t trips;
	pthread_barrier_t ready;
	double start, elapsed, making;
	int t, k;

	run.nics[run.nnics++] = t_nic_open(t_dev());
	if (t_peer_dev())
		run.nics[run.nnics++] = t_nic_open(t_peer_dev());
	trips = (uint32_t)env_u64("RIG_TEST_MESSAGES", ROUND_TRIPS / (NQP / 2 * run.nnics));
	cr_assert_gt(trips, 0);
	cr_assert_lt(trips, 1u << 24);
	cr_assert_eq(pthread_barrier_init(&ready, NULL, NTHREADS), 0);
	for (t = 0; t < NTHREADS; t++)
		setup_worker(&run.w[t], t, trips, &ready);
	start = t_now_ms();
	for (t = 0; t < NTHREADS; t++)
		cr_assert_eq(pthread_create(&run.w[t].tid, NULL, worker_main, &run.w[t]), 0);
	join_all();
	elapsed = t_now_ms() - run.w[0].traffic_at;
	making = run.w[0].traffic_at - start;
	pthread_barrier_destroy(&ready);
	/* The first failure says why: the other threads stopped there. */
	for (t = 0; t < NTHREADS; t++)
		cr_assert(!run.w[t].failed, "%s", run.w[t].err);
	for (t = 0; t < NTHREADS; t++)
		check_worker(&run.w[t]);

	for (t = 0; t < NTHREADS; t++) {
		struct worker *w = &run.w[t];

		cr_log_info("thread %d: %llu completions, %lu handle calls (%lu filled all %d, %lu empty), %lu rings handed out%s",
			    t, (unsigned long long)w->taken, w->calls, w->full_calls,
			    READY_MAX, w->empty, w->listings, t ? "" : "; paused");
	}
	cr_log_info("%s: %d threads x %d pairs x %u round trips in %.1f s (after %.1f s making and connecting queue pairs); thread 0 paused %.1f s with %d rings busy",
		    run.nnics == 2 ? "two hosts" : "one host", NTHREADS, run.w[0].npairs,
		    trips, elapsed / 1e3, making / 1e3, run.w[0].paused_for / 1e3,
		    run.w[0].due_at_pause);
	/* The others waited half-way for thread 0's pause: at least a
	 * quarter of their traffic (a half, but for one call) ran during it. */
	cr_assert(run.w[0].paused, "thread 0 never paused");
	for (t = 1; t < NTHREADS; t++)
		cr_assert_leq(run.w[0].others_at_pause[t], run.w[t].expected * 3 / 4,
			      "thread %d had taken %llu of its %llu completions when thread 0 paused",
			      t, (unsigned long long)run.w[0].others_at_pause[t],
			      (unsigned long long)run.w[t].expected);
	/* Thread 0's rings with entries due when it paused all completed
	 * while it waited (seconds; an entry takes milliseconds), so its
	 * first call after lists them all: more than READY_MAX. */
	cr_assert_gt(run.w[0].due_at_pause, READY_MAX,
		     "thread 0 paused with only %d rings busy", run.w[0].due_at_pause);
	cr_assert_gt(run.w[0].full_after_pause, 0,
		     "no rig_uring_handle call of thread 0 filled all %d after its pause",
		     READY_MAX);
	for (t = 0; t < NTHREADS; t++)
		for (k = 0; k < run.w[t].nloops; k++)
			cr_assert_eq(rig_loop_close(run.w[t].loops[k]), 0, "rig_loop_close: %s",
				     rig_errmsg());
	for (k = 0; k < run.nnics; k++)
		cr_assert_eq(rig_nic_close(run.nics[k]), 0, "rig_nic_close: %s", rig_errmsg());
}

/* ---- rig_qp_wait in loops ---------------------------------------------- */

struct waiter {
	struct rig_qp *qp;
	pthread_t tid;
	int started;		/* atomic */
	int ret;
	struct rig_completion c;
	double took_ms;
};

/* Waits up to 10 s for one receive completion. */
static void *wait_main(void *arg)
{
	struct waiter *wt = arg;
	double t0 = t_now_ms();

	__atomic_store_n(&wt->started, 1, __ATOMIC_RELEASE);
	wt->ret = rig_qp_wait(wt->qp, RIG_RECEIVE, 10000000, &wt->c);
	wt->took_ms = t_now_ms() - t0;
	return NULL;
}

static void start_waiter(struct waiter *wt, struct rig_qp *qp)
{
	wt->qp = qp;
	cr_assert_eq(pthread_create(&wt->tid, NULL, wait_main, wt), 0);
	while (!__atomic_load_n(&wt->started, __ATOMIC_ACQUIRE))
		usleep(1000);
	/* Far past the 50 us spin: the waiter most likely sleeps by now, so
	 * the send below must wake it. (If not, it finds the completion by
	 * polling: the verdict is the same.) */
	usleep(50000);
}

static void check_waiter(struct waiter *wt, uint32_t bytes)
{
	cr_assert_eq(pthread_join(wt->tid, NULL), 0);
	cr_assert_eq(wt->ret, 1, "rig_qp_wait: %d %s after %.0f ms", wt->ret,
		     wt->ret < 0 ? rig_errmsg() : "(nothing)", wt->took_ms);
	cr_assert_eq(wt->c.error, 0, "the receive failed: %d %s", wt->c.error, wt->c.why);
	cr_assert_eq(wt->c.bytes, bytes);
}

/* A loop nobody watches: rig_qp_wait sleeps on it and wakes for the
 * send; the sender's wait takes its send completion. */
Test(loops, wait_in_a_loop_nobody_watches)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_loop *loop;
	struct rig_qp *a, *b;
	struct rig_completion c;
	struct waiter wt = { 0 };
	struct t_buf buf;

	cr_assert_eq(rig_loop_open(nic, &loop), 0, "rig_loop_open: %s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(loop, &a), 0, "rig_qp_make_in: %s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(loop, &b), 0, "rig_qp_make_in: %s", rig_errmsg());
	t_connect(a, b);
	t_buf(&buf, nic, 4096, 3);
	/* Nothing comes: the bound ends the wait with 0, the entry still due. */
	cr_assert_eq(rig_qp_receive(b, buf.r, 0, 256), 0);
	cr_assert_eq(rig_qp_wait(b, RIG_RECEIVE, 20000, &c), 0);
	start_waiter(&wt, b);
	cr_assert_eq(rig_qp_send(a, buf.r, 1024, 100), 0);
	check_waiter(&wt, 100);
	cr_assert_eq(memcmp(buf.mem, buf.mem + 1024, 100), 0);
	cr_assert_eq(rig_qp_wait(a, RIG_SEND, 10000000, &c), 1, "%s", rig_errmsg());
	cr_assert_eq(c.error, 0);
	cr_assert_eq(c.bytes, 100);
	cr_assert_eq(rig_loop_close(loop), 0, "rig_loop_close: %s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0);
}

/*
 * Runs @loop's poll in @ring until each of @want[0]'s send ring and
 * @want[1]'s receive ring was handed out and gave one completion, or 10 s
 * pass. Rings of @skip belong to a thread that waits on them (C3): they
 * are counted in *@skipped, never polled.
 */
static void loop_until(struct io_uring *ring, struct rig_loop *loop,
		       struct rig_qp *want[2], const struct rig_qp *skip,
		       int *skipped)
{
	struct __kernel_timespec ts = { 0, 10 * 1000000 };
	struct rig_ready ready[READY_MAX];
	struct rig_completion c;
	struct io_uring_cqe *cqe;
	double end = t_now_ms() + 10000;
	int got[2] = { 0, 0 }, i, n, ret, side;

	while ((got[0] < 1 || (want[1] && got[1] < 1)) && t_now_ms() < end) {
		ret = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL);
		cr_assert(ret >= 0 || ret == -ETIME, "io_uring_submit_and_wait_timeout: %d", ret);
		if (ret < 0)
			continue;
		cr_assert_eq(cqe->user_data, TAG);
		const struct io_uring_cqe *h = cqe;

		do {
			n = rig_uring_handle(ring, loop, h, ready, READY_MAX);
			cr_assert_geq(n, 0, "rig_uring_handle: %s", rig_errmsg());
			for (i = 0; i < n; i++) {
				cr_assert_eq(ready[i].news, RIG_NEWS_RING);
				if (ready[i].qp == skip) {
					(*skipped)++;
					continue;
				}
				side = ready[i].side;
				cr_assert(ready[i].qp == want[side], "a ring of another queue pair");
				while ((ret = rig_qp_poll(ready[i].qp, side, &c)) == 1) {
					cr_assert_eq(c.error, 0, "%s", c.why);
					got[side]++;
				}
				cr_assert_eq(ret, 0);
			}
			h = NULL;
		} while (n == READY_MAX);
		io_uring_cqe_seen(ring, cqe);
	}
	cr_assert(got[0] == 1 && got[1] == (want[1] != NULL),
		  "within 10 s the loop handed out %d completion(s) of the send ring, %d of the receive ring",
		  got[0], got[1]);
}

/*
 * A watched loop: this thread handles it (and may read the event meant
 * for the waiter) while another sleeps in rig_qp_wait on a queue pair of
 * it, and wakes for the send. Then the loop itself hands out that queue
 * pair's receive ring as before: the wait left its arming whole.
 */
Test(loops, wait_in_a_watched_loop)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *a, *b, *want[2];
	struct waiter wt = { 0 };
	struct rig_loop *loop;
	struct io_uring ring;
	struct t_buf buf;
	int skipped = 0;

	cr_assert_eq(rig_loop_open(nic, &loop), 0, "rig_loop_open: %s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(loop, &a), 0, "rig_qp_make_in: %s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(loop, &b), 0, "rig_qp_make_in: %s", rig_errmsg());
	t_connect(a, b);
	t_buf(&buf, nic, 4096, 5);
	cr_assert_eq(io_uring_queue_init(8, &ring, 0), 0);
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG), 0, "rig_uring_watch: %s", rig_errmsg());
	cr_assert_eq(io_uring_submit(&ring), 1);

	cr_assert_eq(rig_qp_receive(b, buf.r, 0, 256), 0);
	start_waiter(&wt, b);
	cr_assert_eq(rig_qp_send(a, buf.r, 1024, 77), 0);
	want[0] = a;
	want[1] = NULL;
	loop_until(&ring, loop, want, b, &skipped);
	check_waiter(&wt, 77);
	cr_assert_eq(memcmp(buf.mem, buf.mem + 1024, 77), 0);

	cr_assert_eq(rig_qp_receive(b, buf.r, 0, 256), 0);
	cr_assert_eq(rig_qp_send(a, buf.r, 2048, 99), 0);
	want[1] = b;
	loop_until(&ring, loop, want, NULL, &skipped);
	cr_assert_eq(memcmp(buf.mem, buf.mem + 2048, 99), 0);
	cr_log_info("the loop handed out the waiter's ring %d time(s) while it waited", skipped);
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_loop_close(loop), 0, "rig_loop_close: %s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* ---- closing ----------------------------------------------------------- */

/* This process's objects of @what (qp, cq) on the devices, as the kernel
 * counts them: rdma_cm tools list each with its pid. */
static int rdma_objects(const char *what)
{
	char cmd[128], line[512], pid[32];
	FILE *f;
	int n = 0;

	snprintf(cmd, sizeof(cmd), "rdma resource show %s 2>/dev/null", what);
	snprintf(pid, sizeof(pid), " pid %d ", getpid());
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f)) {
		size_t len = strlen(line);

		/* the pid may end the line */
		if (len && line[len - 1] == '\n')
			line[len - 1] = ' ';
		n += strstr(line, pid) != NULL;
	}
	cr_assert_eq(pclose(f), 0, "'%s' failed", cmd);
	return n;
}

/* D1 for a loop: rig_loop_close destroys every queue pair of the loop,
 * with entries due and messages in flight, and the loop's own fds; the
 * NIC's loop and its queue pair, connected to one of them, live on. */
Test(loops, D1_loop_close_frees_its_queue_pairs)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	int fds0, qps0, cqs0, fds1, i;
	struct rig_qp *qp[16], *survivor;
	struct rig_completion c;
	struct rig_loop *loop;
	struct io_uring ring;
	struct t_buf buf;

	t_buf(&buf, nic, 4096, 9);
	survivor = t_qp(nic);
	cr_assert_eq(io_uring_queue_init(8, &ring, 0), 0);
	fds0 = t_fd_count();
	qps0 = rdma_objects("qp");
	cqs0 = rdma_objects("cq");
	cr_assert_geq(qps0, 1, "rdma resource show qp lists none of this process's");

	cr_assert_eq(rig_loop_open(nic, &loop), 0, "rig_loop_open: %s", rig_errmsg());
	for (i = 0; i < 16; i++)
		cr_assert_eq(rig_qp_make_in(loop, &qp[i]), 0, "rig_qp_make_in: %s",
			     rig_errmsg());
	for (i = 2; i < 16; i += 2)
		t_connect(qp[i], qp[i + 1]);
	t_connect(qp[0], survivor);
	/* Entries due: receives nobody sends to, and sends in flight (each
	 * into a posted receive). */
	for (i = 2; i < 16; i++)
		cr_assert_eq(rig_qp_receive(qp[i], buf.r, 0, 64), 0);
	for (i = 2; i < 16; i += 4)
		cr_assert_eq(rig_qp_send(qp[i], buf.r, 128, 64), 0);
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG), 0, "rig_uring_watch: %s", rig_errmsg());
	cr_assert_eq(io_uring_submit(&ring), 1);
	cr_assert_eq(rdma_objects("qp"), qps0 + 16);
	cr_assert_eq(rdma_objects("cq"), cqs0 + 32);
	fds1 = t_fd_count();
	cr_assert_gt(fds1, fds0, "the loop holds no fd of its own");

	/* The usual order: the event loop ends, then its rig loop closes. */
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_loop_close(loop), 0, "rig_loop_close: %s", rig_errmsg());
	cr_assert_eq(rdma_objects("qp"), qps0, "queue pairs of the closed loop remain");
	cr_assert_eq(rdma_objects("cq"), cqs0, "rings of the closed loop remain");
	cr_assert_eq(t_fd_count(), fds0 - 1, "fds: %d before the loop, %d after its close",
		     fds0 - 1, t_fd_count());

	/* The survivor is whole: its own loop back to itself. */
	cr_assert_eq(rig_qp_destroy(survivor), 0);
	survivor = t_qp(nic);
	t_connect(survivor, survivor);
	cr_assert_eq(rig_qp_receive(survivor, buf.r, 0, 64), 0);
	cr_assert_eq(rig_qp_send(survivor, buf.r, 128, 64), 0);
	cr_assert_eq(rig_qp_wait(survivor, RIG_RECEIVE, 10000000, &c), 1);
	cr_assert_eq(c.bytes, 64);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* ---- refusals ---------------------------------------------------------- */

/* The NIC's own loop goes with the NIC only. */
Test(loops, C2_closing_the_nics_loop_is_einval)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_loop *own = rig_nic_loop(nic);
	struct rig_completion c;
	struct rig_qp *qp;
	struct t_buf buf;

	cr_assert_not_null(own);
	cr_assert_eq(rig_nic_loop(nic), own);
	qp = t_qp(nic);
	cr_assert_eq(rig_loop_close(own), -EINVAL);
	/* and changed nothing: the queue pair of that loop works */
	t_buf(&buf, nic, 4096, 1);
	t_connect(qp, qp);
	cr_assert_eq(rig_qp_receive(qp, buf.r, 0, 64), 0);
	cr_assert_eq(rig_qp_send(qp, buf.r, 128, 64), 0);
	cr_assert_eq(rig_qp_wait(qp, RIG_RECEIVE, 10000000, &c), 1);
	cr_assert_eq(c.bytes, 64);
	cr_assert_geq(rig_loop_fd(own), 0);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/*
 * Each CQ's completion vector, as rig asked for it: ibv_create_cq is
 * interposed (librig calls it through the PLT, as test_destroy's
 * interposers rely on too).
 */
#define MADE_CQ_MAX 64
static struct { const struct ibv_cq *cq; int vector; } made_cq[MADE_CQ_MAX];
static int made_cqs;
static pthread_mutex_t made_cq_lock = PTHREAD_MUTEX_INITIALIZER;

static struct ibv_cq *(*real_create_cq)(struct ibv_context *, int, void *,
					 struct ibv_comp_channel *, int);

/* Before any thread: the threads of C3 make queue pairs at once. */
__attribute__((constructor)) static void find_real_create_cq(void)
{
	real_create_cq = T_NEXT(ibv_create_cq);
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct ibv_cq *cq = real_create_cq(ctx, cqe, cq_context, channel, comp_vector);

	pthread_mutex_lock(&made_cq_lock);
	if (cq && made_cqs < MADE_CQ_MAX)
		made_cq[made_cqs++] = (typeof(made_cq[0])){ cq, comp_vector };
	pthread_mutex_unlock(&made_cq_lock);
	return cq;
}

static int vector_of(const struct ibv_cq *cq)
{
	int i, v = -1;

	pthread_mutex_lock(&made_cq_lock);
	for (i = 0; i < made_cqs; i++)
		if (made_cq[i].cq == cq)
			v = made_cq[i].vector;
	pthread_mutex_unlock(&made_cq_lock);
	return v;
}

/*
 * The NIC's loops take the device's completion vectors in turn, the NIC's
 * own loop the first, and both CQs of a queue pair the vector of its loop:
 * on a NIC with many vectors (mlx5 and bnxt_re have one per CPU or so),
 * each loop's interrupts land on a vector, and a CPU, of their own rather
 * than all on vector 0. Soft-RoCE has one vector per CPU of the guest.
 */
Test(loops, completion_vectors_spread_over_loops)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct rig_loop *loop[8];
	struct ibv_context *ctx = NULL;
	struct rig_qp *qp[8];
	struct rig_nic *nic;
	int i, n, side;

	for (i = 0; list && list[i] && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), t_dev()))
			ctx = ibv_open_device(list[i]);
	cr_assert_not_null(ctx, "cannot open %s", t_dev());
	n = ctx->num_comp_vectors;
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	cr_assert_geq(n, 2, "%s has %d completion vector(s): nothing to spread", t_dev(), n);

	nic = t_nic_open(t_dev());
	pthread_mutex_lock(&made_cq_lock);
	made_cqs = 0;
	pthread_mutex_unlock(&made_cq_lock);
	for (i = 0; i < 8; i++) {
		cr_assert_eq(rig_loop_open(nic, &loop[i]), 0, "rig_loop_open: %s", rig_errmsg());
		cr_assert_eq(rig_qp_make_in(loop[i], &qp[i]), 0, "rig_qp_make_in: %s",
			     rig_errmsg());
		for (side = RIG_SEND; side <= RIG_RECEIVE; side++)
			cr_expect_eq(vector_of(qp[i]->ring[side].cq), (i + 1) % n,
				     "loop %d, %s ring: vector %d, not %d", i,
				     side == RIG_SEND ? "send" : "receive",
				     vector_of(qp[i]->ring[side].cq), (i + 1) % n);
	}
	qp[0] = t_qp(nic);	/* the NIC's own loop */
	cr_expect_eq(vector_of(qp[0]->ring[RIG_SEND].cq), 0);
	cr_expect_eq(vector_of(qp[0]->ring[RIG_RECEIVE].cq), 0);
	for (i = 0; i < 8; i++)
		cr_assert_eq(rig_loop_close(loop[i]), 0);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* C2: a caller's mistake is -EINVAL and changes nothing. */
Test(loops, C2_bad_arguments_are_einval)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_loop *loop = NULL, *out = (struct rig_loop *)&out;
	struct rig_qp *qp = (struct rig_qp *)&qp;
	struct rig_ready ready[4];
	struct io_uring ring;

	cr_assert_eq(rig_loop_open(NULL, &out), -EINVAL);
	cr_assert_eq(out, (struct rig_loop *)&out, "a failed open set *out");
	cr_assert_eq(rig_loop_open(nic, NULL), -EINVAL);
	cr_assert_eq(rig_loop_close(NULL), -EINVAL);
	cr_assert_eq(rig_qp_make_in(NULL, &qp), -EINVAL);
	cr_assert_eq(qp, (struct rig_qp *)&qp, "a failed make set *out");
	cr_assert_eq(rig_loop_fd(NULL), -EINVAL);
	cr_assert_eq(rig_loop_handle(NULL, ready, 4), -EINVAL);

	cr_assert_eq(rig_loop_open(nic, &loop), 0, "rig_loop_open: %s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(loop, NULL), -EINVAL);
	cr_assert_eq(rig_loop_handle(loop, NULL, 4), -EINVAL);
	cr_assert_eq(rig_loop_handle(loop, ready, -1), -EINVAL);
	cr_assert_eq(io_uring_queue_init(8, &ring, 0), 0);
	cr_assert_eq(rig_uring_watch(NULL, loop, TAG), -EINVAL);
	cr_assert_eq(rig_uring_watch(&ring, NULL, TAG), -EINVAL);
	cr_assert_eq(io_uring_sq_ready(&ring), 0, "a refused watch queued an SQE");
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG), 0, "rig_uring_watch: %s",
		     rig_errmsg());
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG), -EALREADY);
	cr_assert_eq(rig_uring_handle(&ring, NULL, NULL, ready, 4), -EINVAL);
	cr_assert_eq(rig_uring_handle(&ring, loop, NULL, NULL, 4), -EINVAL);
	cr_assert_eq(rig_uring_handle(&ring, loop, NULL, ready, -1), -EINVAL);
	/* Nothing happened: the loop has nothing to hand out. */
	cr_assert_eq(rig_loop_handle(loop, ready, 4), 0, "%s", rig_errmsg());
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_loop_close(loop), 0, "rig_loop_close: %s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0);
}
