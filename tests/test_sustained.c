/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/*
 * Sustained traffic through the loop integration (include/rig/wait.h).
 *
 * One loop watches 64 queue pairs that keep both their rings busy: random
 * batches of sends and receives, up to 16 sends in flight each, 10^5
 * messages in all (a quarter under ASan; $RIG_TEST_MESSAGES). The loop polls
 * only the rings that rig_uring_handle or rig_loop_handle lists. A loop that
 * gives each ring one or two completions never sees what this one does: an
 * event that uses up the arming of a ring that is still listed (a lost
 * wakeup), and a ready list that other threads fill while the loop's fd
 * stays quiet.
 *
 * Topologies: one host, 32 loopback pairs on $RIG_TEST_DEV; two hosts
 * ($RIG_TEST_PEER_DEV set), 16 loopback pairs on the first device and 16
 * pairs across the two, both NICs in this process and in the same loop.
 *
 * The rule checked: no ring may hold a completion for more than 1 s
 * without being listed. A ring with entries due that no handle call listed
 * for 1 s is probed with rig_qp_poll. A probe that finds a completion is
 * not a verdict yet (the CQE may have landed a microsecond ago, its event
 * on the way); the ring fails only if it is still unlisted 1 s after.
 *
 * Three loops, each in the way loop.h documents it: io_uring
 * (rig_uring_watch, a multishot poll, rig_uring_handle); epoll and libuv
 * (rig_loop_watch, rig_loop_fd in the application's epoll set or uv_poll_t,
 * rig_loop_handle), with nothing of io_uring. The epoll and libuv loops
 * have another thread beside them that reads the NIC's channel and async
 * fd, and lists the loop's rings (see struct churn).
 *
 * The random choices (batch sizes, single or batch posts, message lengths)
 * come from a seed that the log shows; $RIG_TEST_SEED replays it: the
 * same messages, the same sequence of choices (which ring meets which
 * choice still depends on the device's timing).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "t_device.h"

#define NQP 64			/* queue pairs in the loop */
#define INFLIGHT 16		/* sends in flight per queue pair, at most */
#define RSLOTS 32		/* receives posted per queue pair, at most */
#define SLOT 256		/* bytes of a message buffer; the longest message */
#define HDR 16			/* struct msg_hdr */
#define BATCH 16		/* entries of a post or a poll, at most */
#define READY_MAX 16		/* io_uring loop: rings per rig_uring_handle call */
#define EPOLL_BATCH 4		/* epoll, libuv loops: rings per rig_loop_handle */
#define DRAIN_CALLS (2 * NQP / READY_MAX + 1)	/* see drain_listed() */
#define DRAIN_TURNS (2 * (NQP + 2) / EPOLL_BATCH + 1)	/* and the churn pair */
/* Sends in all, unless $RIG_TEST_MESSAGES. Under ASan a quarter: a memory
 * error shows on a path's first pass, and the plain pass carries the
 * volume (tests/run-all runs both). */
#define MESSAGES (T_ASAN ? 25000 : 100000)
#define WAIT_MS 100		/* the loop's longest sleep */
#define STALL_MS 1000		/* the rule: listed within 1 s */
#define QUIET_MS 2000		/* the end: no completion for 2 s */
#define CHURN_MIN 50		/* the churn thread's cycles, at least */
#define CHURN_LEN 32		/* its messages */
#define CHURN_WAIT_MS 5000	/* its bound for one completion */
#define STEAL_WAIT_MS 100	/* its sleeps at the end */
#define HANG_MS 30000		/* one churn cycle, at most */
#define TAG_NIC 0x5249470000000000ull	/* user_data of NIC k: TAG_NIC + k */

/* Every device queue pair of both loops, and the churn thread's, would
 * exceed the load the test bed carries: run the tests one at a time,
 * before Criterion reads its job count (an explicit --jobs still wins). */
__attribute__((constructor)) static void run_serially(void)
{
	setenv("CRITERION_JOBS", "1", 1);
}

/* Checks of the hot path: a branch. A cr_assert that holds also calls
 * into Criterion to count itself, 10^6 times a run here. */
#define CHECK(cond, ...)                         \
	do {                                     \
		if (!(cond))                     \
			cr_assert_fail(__VA_ARGS__); \
	} while (0)

/* The head of each message; the payload follows. */
struct msg_hdr {
	uint32_t qp;		/* the sender's index */
	uint32_t seq;		/* its send's number, from 0 */
	uint32_t len;		/* the message's bytes, this head included */
	uint32_t sum;		/* FNV-1a of the payload */
};

/* What the stall check keeps of a ring. */
struct ring_state {
	double listed_at;	/* when a handle call listed it last */
	bool hit;		/* since, a probe found a completion there */
	double hit_at;		/* then */
};

struct peer {
	struct rig_qp *qp;
	int nic;		/* index into run.nics */
	struct t_buf buf;	/* INFLIGHT send slots, then RSLOTS receive slots */
	uint32_t quota;		/* the messages it sends */
	uint32_t sent, sends_taken;
	uint32_t recvs_posted, recvs_taken;
	uint32_t want[2];	/* the next batch's size, per ring */
	uint32_t len[INFLIGHT];	/* of each send in flight, by slot */
	uint64_t send_cookie[INFLIGHT];
	uint64_t recv_cookie[RSLOTS];
	struct ring_state ring[2];
	bool touched;		/* its rings moved: post more */
};

enum loop_kind { LOOP_URING, LOOP_EPOLL, LOOP_UV };

struct churn;

struct run {
	enum loop_kind kind;
	uint64_t seed, rnd;
	struct rig_nic *nics[2];
	int nnics;
	struct peer qp[NQP];	/* qp[i] is connected to qp[i ^ 1] */
	struct io_uring ring;
	int ep;
	/* The libuv loop: a uv_poll_t on each NIC's rig_loop_fd, a timer
	 * that bounds a turn, and the poll callbacks of the turn. */
	uv_loop_t uv;
	uv_poll_t uv_poll[2];
	uv_timer_t uv_timer;
	bool uv_open;
	int uv_fired;
	struct churn *churn;	/* the epoll or libuv loop's other thread */
	uint64_t messages;	/* sends to post in all */
	uint64_t expected;	/* completions: a send's and a receive's each */
	uint64_t posted, taken;
	double start, last_progress, next_check, elapsed;
	unsigned probes, hits, foreign;
	unsigned long calls, full_calls, listings;	/* of the handle calls */
	bool more[2];		/* NIC k's last handle call filled all */
};

/* ---- numbers ---------------------------------------------------------- */

/* splitmix64's finaliser: a message's length and bytes from its key. */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* xorshift64*: the run's choices. */
static uint32_t rnd(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (uint32_t)((*s * 0x2545f4914f6cdd1dull) >> 32);
}

static uint32_t min_u32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static uint64_t msg_key(const struct run *t, int qp, uint32_t seq)
{
	return mix64(t->seed ^ ((uint64_t)qp << 32 | seq));
}

static uint32_t msg_len(const struct run *t, int qp, uint32_t seq)
{
	return HDR + (uint32_t)(msg_key(t, qp, seq) % (SLOT - HDR + 1));
}

static void fill_payload(uint64_t key, uint8_t *p, uint32_t n)
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

/* Cookies of batch posts name the queue pair, the ring and the entry;
 * single posts have none (0). */
static uint64_t cookie_of(int qp, enum rig_side side, uint32_t seq)
{
	return 1ull << 63 | (uint64_t)side << 40 | (uint64_t)qp << 32 | seq;
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

/* ---- setting up ------------------------------------------------------- */

static void seed_run(struct run *t)
{
	uint64_t s;

	if (getrandom(&s, sizeof(s), 0) != sizeof(s))
		s = (uint64_t)time(NULL);
	t->seed = env_u64("RIG_TEST_SEED", s);
	t->rnd = mix64(t->seed) | 1;
	cr_log_info("seed %llu (RIG_TEST_SEED=%llu replays it)",
		    (unsigned long long)t->seed, (unsigned long long)t->seed);
}

/* Two hosts: the upper half of the queue pairs are pairs across the two
 * NICs, the odd one of each on the peer device. */
static int nic_of(const struct run *t, int i)
{
	return t->nnics == 2 && i >= NQP / 2 && (i & 1);
}

static void setup(struct run *t, enum loop_kind kind)
{
	uint64_t m;
	int i;

	t->kind = kind;
	t->ep = -1;
	seed_run(t);
	t->nics[t->nnics++] = t_nic_open(t_dev());
	if (t_peer_dev())
		t->nics[t->nnics++] = t_nic_open(t_peer_dev());
	for (i = 0; i < NQP; i++) {
		struct peer *p = &t->qp[i];

		p->nic = nic_of(t, i);
		p->qp = t_qp(t->nics[p->nic]);
		t_buf(&p->buf, t->nics[p->nic], (INFLIGHT + RSLOTS) * SLOT, i);
		p->want[RIG_SEND] = 1 + rnd(&t->rnd) % BATCH;
		p->want[RIG_RECEIVE] = 1 + rnd(&t->rnd) % BATCH;
	}
	for (i = 0; i < NQP; i += 2)
		t_connect(t->qp[i].qp, t->qp[i + 1].qp);

	m = env_u64("RIG_TEST_MESSAGES", MESSAGES);
	cr_assert_gt(m, 0);
	cr_assert_lt(m, (uint64_t)NQP << 31);
	t->messages = m;
	t->expected = 2 * m;
	for (i = 0; i < NQP; i++)
		t->qp[i].quota = (uint32_t)(m / NQP + ((uint64_t)i < m % NQP));
	if (t->nnics == 2)
		cr_log_info("two hosts: %d loopback pairs on %s, %d pairs %s<->%s",
			    NQP / 4, t_dev(), NQP / 4, t_dev(), t_peer_dev());
	else
		cr_log_info("one host: %d loopback pairs on %s", NQP / 2,
			    t_dev() ? t_dev() : "the first device");
}

static void on_uv_poll(uv_poll_t *h, int status, int events);

static void on_uv_timer(uv_timer_t *h)
{
	(void)h;
}

/* The libuv loop: rig_loop_fd of each NIC's loop in a uv_poll_t. */
static void watch_uv(struct run *t)
{
	int k, fd;

	cr_assert_eq(uv_loop_init(&t->uv), 0);
	t->uv_open = true;
	cr_assert_eq(uv_timer_init(&t->uv, &t->uv_timer), 0);
	for (k = 0; k < t->nnics; k++) {
		fd = rig_loop_fd(rig_nic_loop(t->nics[k]));
		cr_assert_geq(fd, 0);
		cr_assert_eq(uv_poll_init(&t->uv, &t->uv_poll[k], fd), 0);
		t->uv_poll[k].data = t;
		cr_assert_eq(uv_poll_start(&t->uv_poll[k], UV_READABLE, on_uv_poll), 0);
	}
}

/* Each loop its documented way: the io_uring loop, one multishot poll per
 * NIC; the epoll and libuv loops, rig_loop_watch and rig_loop_fd. */
static void watch(struct run *t)
{
	struct epoll_event ev = { .events = EPOLLIN };
	int k;

	if (t->kind == LOOP_URING) {
		cr_assert_eq(io_uring_queue_init(16, &t->ring, 0), 0);
		for (k = 0; k < t->nnics; k++)
			cr_assert_eq(rig_uring_watch(&t->ring, rig_nic_loop(t->nics[k]), TAG_NIC + k), 0,
				     "rig_uring_watch: %s", rig_errmsg());
		cr_assert_eq(io_uring_submit(&t->ring), t->nnics);
		return;
	}
	for (k = 0; k < t->nnics; k++)
		cr_assert_eq(rig_loop_watch(rig_nic_loop(t->nics[k])), 0,
			     "rig_loop_watch: %s", rig_errmsg());
	if (t->kind == LOOP_UV) {
		watch_uv(t);
		return;
	}
	t->ep = epoll_create1(EPOLL_CLOEXEC);
	cr_assert_geq(t->ep, 0);
	for (k = 0; k < t->nnics; k++) {
		ev.data.u32 = (uint32_t)k;
		cr_assert_eq(epoll_ctl(t->ep, EPOLL_CTL_ADD, rig_loop_fd(rig_nic_loop(t->nics[k])), &ev), 0);
	}
}

static void teardown(struct run *t)
{
	int i, k;

	for (i = 0; i < NQP; i++)
		cr_assert_eq(rig_qp_destroy(t->qp[i].qp), 0, "rig_qp_destroy: %s",
			     rig_errmsg());
	if (t->ep >= 0)
		close(t->ep);
	if (t->kind == LOOP_URING)
		io_uring_queue_exit(&t->ring);
	if (t->uv_open) {
		/* Before the NICs close: the polls name their loops' fds. */
		for (k = 0; k < t->nnics; k++)
			uv_close((uv_handle_t *)&t->uv_poll[k], NULL);
		uv_close((uv_handle_t *)&t->uv_timer, NULL);
		cr_assert_eq(uv_run(&t->uv, UV_RUN_DEFAULT), 0);
		cr_assert_eq(uv_loop_close(&t->uv), 0);
	}
	for (k = 0; k < t->nnics; k++)
		cr_assert_eq(rig_nic_close(t->nics[k]), 0, "rig_nic_close: %s",
			     rig_errmsg());
}

/* ---- posting ---------------------------------------------------------- */

/*
 * How many entries to post now: the ring's next random batch size, or
 * what is left if less. A busy ring waits until its whole batch fits, so
 * that batches keep their size; an idle one takes what fits at once.
 */
static uint32_t batch_size(struct run *t, struct peer *p, enum rig_side side,
			   uint32_t fits, uint32_t left, uint32_t due)
{
	uint32_t want = min_u32(p->want[side], left);

	if (!fits || (fits < want && due))
		return 0;
	p->want[side] = 1 + rnd(&t->rnd) % BATCH;
	return min_u32(want, fits);
}

/* A quarter of the posts go one at a time (rig_qp_send, rig_qp_receive),
 * with no cookie; the rest as one batch, one doorbell. */
static bool single_posts(struct run *t)
{
	return rnd(&t->rnd) % 4 == 0;
}

static void post(struct run *t, int i, enum rig_side side,
		 const struct rig_post *posts, uint32_t k, bool single)
{
	const char *what = side == RIG_SEND ? "send" : "receive";
	struct rig_qp *qp = t->qp[i].qp;
	uint32_t j;
	int ret;

	if (!single) {
		ret = side == RIG_SEND ? rig_qp_send_batch(qp, posts, (int)k)
				       : rig_qp_receive_batch(qp, posts, (int)k);
		CHECK(ret == (int)k, "queue pair %d: %s batch of %u: %d %s", i,
		      what, k, ret, rig_errmsg());
		return;
	}
	for (j = 0; j < k; j++) {
		const struct rig_post *e = &posts[j];

		ret = side == RIG_SEND ? rig_qp_send(qp, e->region, e->at, e->n)
				       : rig_qp_receive(qp, e->region, e->at, e->n);
		CHECK(ret == 0, "queue pair %d: single %s: %d %s", i, what, ret,
		      rig_errmsg());
	}
}

/* Receives ahead of the peer's sends, up to RSLOTS, never more than the
 * peer will send: the run ends with no entry due. */
static void feed_receives(struct run *t, int i)
{
	struct peer *p = &t->qp[i];
	struct rig_post posts[BATCH];
	uint32_t due = p->recvs_posted - p->recvs_taken;
	uint32_t left = t->qp[i ^ 1].quota - p->recvs_posted;
	uint32_t k, j;
	bool single;

	k = batch_size(t, p, RIG_RECEIVE, min_u32(RSLOTS - due, left), left, due);
	if (!k)
		return;
	single = single_posts(t);
	for (j = 0; j < k; j++) {
		uint32_t s = p->recvs_posted + j, slot = s % RSLOTS;
		size_t at = (size_t)(INFLIGHT + slot) * SLOT;

		/* A stale message in the slot must not pass for the next. */
		memset(p->buf.mem + at, 0xff, HDR);
		p->recv_cookie[slot] = single ? 0 : cookie_of(i, RIG_RECEIVE, s);
		posts[j] = (struct rig_post){ p->buf.r, at, SLOT,
					      p->recv_cookie[slot] };
	}
	post(t, i, RIG_RECEIVE, posts, k, single);
	p->recvs_posted += k;
}

/* Writes send @seq of queue pair @i at @m: the head, then the payload. */
static uint32_t write_message(const struct run *t, int i, uint32_t seq, uint8_t *m)
{
	uint32_t len = msg_len(t, i, seq);
	struct msg_hdr h = { (uint32_t)i, seq, len, 0 };

	fill_payload(msg_key(t, i, seq), m + HDR, len - HDR);
	h.sum = fnv1a(m + HDR, len - HDR);
	memcpy(m, &h, HDR);
	return len;
}

/* Sends only into receives the peer has posted already: on rxe a send
 * that waits for its receive fails the queue pair after ~470 ms. */
static void feed_sends(struct run *t, int i)
{
	struct peer *p = &t->qp[i];
	struct rig_post posts[BATCH];
	uint32_t due = p->sent - p->sends_taken;
	uint32_t left = p->quota - p->sent;
	uint32_t fits = min_u32(INFLIGHT - due, t->qp[i ^ 1].recvs_posted - p->sent);
	uint32_t k, j;
	bool single;

	k = batch_size(t, p, RIG_SEND, min_u32(fits, left), left, due);
	if (!k)
		return;
	single = single_posts(t);
	for (j = 0; j < k; j++) {
		uint32_t s = p->sent + j, slot = s % INFLIGHT;
		size_t at = (size_t)slot * SLOT;

		p->len[slot] = write_message(t, i, s, p->buf.mem + at);
		p->send_cookie[slot] = single ? 0 : cookie_of(i, RIG_SEND, s);
		posts[j] = (struct rig_post){ p->buf.r, at, p->len[slot],
					      p->send_cookie[slot] };
	}
	post(t, i, RIG_SEND, posts, k, single);
	p->sent += k;
	t->posted += k;
}

/* After a queue pair's completions were taken: post what fits now,
 * receives first so that the peer's sends find them. */
static void feed(struct run *t, int i)
{
	feed_receives(t, i);
	feed_sends(t, i);
	feed_sends(t, i ^ 1);
	t->qp[i].touched = false;
}

/* Feeds the queue pairs whose completions a probe took. */
static void feed_touched(struct run *t)
{
	int i;

	for (i = 0; i < NQP; i++)
		if (t->qp[i].touched)
			feed(t, i);
}

/* ---- taking ----------------------------------------------------------- */

static const char *side_name(enum rig_side side)
{
	return side == RIG_SEND ? "send" : "receive";
}

/* @cookie: NULL when the completion came from rig_qp_poll, which gives
 * none. */
static void take_send(struct run *t, int i, const struct rig_completion *c,
		      const uint64_t *cookie)
{
	struct peer *p = &t->qp[i];
	uint32_t s = p->sends_taken, slot = s % INFLIGHT;

	CHECK(s != p->sent, "queue pair %d: a send completion with no send due", i);
	CHECK(c->error == 0, "queue pair %d: send %u failed: %d %s", i, s,
	      c->error, c->why);
	CHECK(c->bytes == p->len[slot],
	      "queue pair %d: send %u of %u bytes completed with %u", i, s,
	      p->len[slot], c->bytes);
	CHECK(!cookie || *cookie == p->send_cookie[slot],
	      "queue pair %d: send %u: cookie %#llx, posted with %#llx", i, s,
	      (unsigned long long)*cookie, (unsigned long long)p->send_cookie[slot]);
	p->sends_taken++;
}

/* The message from the peer: its next in order, once, intact. */
static void take_receive(struct run *t, int i, const struct rig_completion *c,
			 const uint64_t *cookie)
{
	struct peer *p = &t->qp[i];
	uint32_t s = p->recvs_taken, slot = s % RSLOTS, len, from = (uint32_t)i ^ 1;
	const uint8_t *m = p->buf.mem + (size_t)(INFLIGHT + slot) * SLOT;
	uint8_t sent[SLOT];
	struct msg_hdr h;

	CHECK(s != p->recvs_posted, "queue pair %d: a receive completion with no receive due", i);
	CHECK(c->error == 0, "queue pair %d: receive %u failed: %d %s", i, s,
	      c->error, c->why);
	CHECK(!cookie || *cookie == p->recv_cookie[slot],
	      "queue pair %d: receive %u: cookie %#llx, posted with %#llx", i, s,
	      (unsigned long long)*cookie, (unsigned long long)p->recv_cookie[slot]);
	memcpy(&h, m, HDR);
	CHECK(h.qp == from && h.seq == s,
	      "queue pair %d: receive %u holds message (%u, %u), not (%u, %u): "
	      "lost, repeated or out of order", i, s, h.qp, h.seq, from, s);
	len = msg_len(t, (int)from, s);
	CHECK(c->bytes == len && h.len == len,
	      "queue pair %d: message %u of %u bytes came as %u (its head says %u)",
	      i, s, len, c->bytes, h.len);
	fill_payload(msg_key(t, (int)from, s), sent, len - HDR);
	CHECK(fnv1a(m + HDR, len - HDR) == h.sum && h.sum == fnv1a(sent, len - HDR),
	      "queue pair %d: message %u came damaged", i, s);
	p->recvs_taken++;
}

static void take(struct run *t, int i, enum rig_side side,
		 const struct rig_completion *c, const uint64_t *cookie)
{
	if (side == RIG_SEND)
		take_send(t, i, c, cookie);
	else
		take_receive(t, i, c, cookie);
	t->taken++;
	t->qp[i].touched = true;
}

/* Polls a listed ring dry; returns the completions it took. */
static int drain_ring(struct run *t, int i, enum rig_side side)
{
	struct rig_completion c[BATCH];
	uint64_t cookie[BATCH];
	int n, k, got = 0;

	do {
		n = rig_qp_poll_batch(t->qp[i].qp, side, c, cookie, BATCH);
		CHECK(n >= 0, "rig_qp_poll_batch: %d %s", n, rig_errmsg());
		for (k = 0; k < n; k++)
			take(t, i, side, &c[k], &cookie[k]);
		got += n;
	} while (n == BATCH);
	return got;
}

static int own_index(const struct run *t, const struct rig_qp *qp)
{
	int i;

	for (i = 0; i < NQP; i++)
		if (t->qp[i].qp == qp)
			return i;
	return -1;
}

/*
 * Takes what a handle call listed. In the epoll and libuv loops the churn thread's
 * queue pairs are listed too: they are that thread's own (C3) and may be
 * freed by now, so they are told apart by comparing pointers with the
 * loop's own, which live all along (no freed one can alias them), and
 * never followed.
 */
static void on_ready(struct run *t, const struct rig_ready *ready, int n, int max)
{
	double now = t_now_ms();
	struct ring_state *rs;
	int k, i;

	t->calls++;
	t->full_calls += n == max;
	t->listings += (unsigned long)n;
	for (k = 0; k < n; k++) {
		i = own_index(t, ready[k].qp);
		if (i < 0) {
			CHECK(t->churn, "a queue pair not of this loop was listed");
			t->foreign++;
			continue;
		}
		CHECK(ready[k].side == RIG_SEND || ready[k].side == RIG_RECEIVE,
		      "queue pair %d listed with side %d", i, (int)ready[k].side);
		rs = &t->qp[i].ring[ready[k].side];
		rs->listed_at = now;
		rs->hit = false;	/* listed after all: fine */
		/* Posting at once, as an application answers in its
		 * completion handler, puts new work on the device while
		 * other rings are still listed. */
		if (drain_ring(t, i, ready[k].side)) {
			t->last_progress = now;
			feed(t, i);
		}
	}
}

/* ---- the three loops -------------------------------------------------- */

static void stall_check(struct run *t, bool all);

/* One rig_uring_handle call for NIC @k; true when it filled all READY_MAX
 * (then more may be listed: the loop calls again with cqe NULL). */
static bool handle_once(struct run *t, int k, const struct io_uring_cqe *cqe)
{
	struct rig_ready ready[READY_MAX];
	int n;

	n = rig_uring_handle(&t->ring, rig_nic_loop(t->nics[k]), cqe, ready, READY_MAX);
	CHECK(n >= 0, "rig_uring_handle: %d %s", n, rig_errmsg());
	on_ready(t, ready, n, READY_MAX);
	t->more[k] = n == READY_MAX;
	return t->more[k];
}

/*
 * The loop's handling of NIC @k: again with cqe NULL while a call fills
 * them all. Under sustained load the device lists rings as fast as the
 * loop takes them, and this lasts the whole run: the stall check gets
 * its turns in between.
 */
static void handle_uring(struct run *t, int k, const struct io_uring_cqe *cqe)
{
	while (handle_once(t, k, cqe)) {
		cqe = NULL;
		stall_check(t, false);
	}
}

/* One turn of the io_uring loop: sleep until a NIC's poll fires, at most
 * WAIT_MS, and handle every CQE. */
static void turn_uring(struct run *t)
{
	struct __kernel_timespec ts = { 0, WAIT_MS * 1000000ll };
	struct io_uring_cqe *cqe;
	uint64_t k;
	int ret;

	/* What a drain of the stall check left listed comes first. */
	for (k = 0; k < (uint64_t)t->nnics; k++)
		if (t->more[k])
			handle_uring(t, (int)k, NULL);
	ret = io_uring_submit_and_wait_timeout(&t->ring, &cqe, 1, &ts, NULL);
	CHECK(ret >= 0 || ret == -ETIME || ret == -EINTR, "io_uring wait: %s",
	      strerror(-ret));
	while (!io_uring_peek_cqe(&t->ring, &cqe)) {
		k = cqe->user_data - TAG_NIC;
		CHECK(k < (uint64_t)t->nnics, "a CQE of no NIC: user_data %#llx",
		      (unsigned long long)cqe->user_data);
		handle_uring(t, (int)k, cqe);
		io_uring_cqe_seen(&t->ring, cqe);
	}
}

/*
 * One turn of the epoll loop: one call of EPOLL_BATCH rings per readable
 * NIC fd, fewer than are usually listed. The rest wait for the next turn:
 * the fd is level-triggered and must stay readable while rings are
 * listed, whoever listed them. Returns how many fds were readable.
 */
static int turn_epoll(struct run *t, int ms)
{
	struct rig_ready ready[EPOLL_BATCH];
	struct epoll_event ev[2];
	int n, j, got;

	n = epoll_wait(t->ep, ev, 2, ms);
	CHECK(n >= 0 || errno == EINTR, "epoll_wait: %s", strerror(errno));
	for (j = 0; j < n; j++) {
		got = rig_loop_handle(rig_nic_loop(t->nics[ev[j].data.u32]), ready, EPOLL_BATCH);
		CHECK(got >= 0, "rig_loop_handle: %d %s", got, rig_errmsg());
		on_ready(t, ready, got, EPOLL_BATCH);
	}
	return n > 0 ? n : 0;
}

/* The libuv loop's callback for NIC k's rig_loop_fd: as an epoll turn's,
 * one call of EPOLL_BATCH rings. */
static void on_uv_poll(uv_poll_t *h, int status, int events)
{
	struct run *t = h->data;
	struct rig_ready ready[EPOLL_BATCH];
	int k = (int)(h - t->uv_poll), got;

	CHECK(status == 0, "uv_poll: %s", uv_strerror(status));
	CHECK(events & UV_READABLE, "uv_poll: events %#x", events);
	t->uv_fired++;
	got = rig_loop_handle(rig_nic_loop(t->nics[k]), ready, EPOLL_BATCH);
	CHECK(got >= 0, "rig_loop_handle: %d %s", got, rig_errmsg());
	on_ready(t, ready, got, EPOLL_BATCH);
}

/*
 * One turn of the libuv loop: uv_run until a NIC's fd is readable or @ms
 * pass (a one-shot timer bounds it), once through the readable ones.
 * Returns how many poll callbacks ran.
 */
static int turn_uv(struct run *t, int ms)
{
	t->uv_fired = 0;
	if (!ms) {
		uv_run(&t->uv, UV_RUN_NOWAIT);
		return t->uv_fired;
	}
	/* From now: the loop's clock stands still between runs, and a timer
	 * already due would fire before the poll, which would then block
	 * with no timer left. */
	uv_update_time(&t->uv);
	CHECK(uv_timer_start(&t->uv_timer, on_uv_timer, (uint64_t)ms, 0) == 0,
	      "uv_timer_start");
	uv_run(&t->uv, UV_RUN_ONCE);
	uv_timer_stop(&t->uv_timer);
	return t->uv_fired;
}

/* A turn of the epoll or libuv loop. */
static int turn_fd(struct run *t, int ms)
{
	return t->kind == LOOP_UV ? turn_uv(t, ms) : turn_epoll(t, ms);
}

/*
 * Before a probe: hands out all that the NICs listed, the loop's own way,
 * as far as was listed when it began. The list is handed out oldest
 * first and holds at most both rings of every queue pair (plus the churn
 * thread's), so a bounded number of calls does: io_uring, calls with cqe
 * NULL while they fill all READY_MAX; epoll and libuv, turns while the fds say
 * readable.
 */
static void drain_listed(struct run *t)
{
	int k, calls;

	if (t->kind == LOOP_URING) {
		for (k = 0; k < t->nnics; k++)
			for (calls = 0; calls < DRAIN_CALLS && handle_once(t, k, NULL);
			     calls++)
				;
		return;
	}
	for (calls = 0; calls < DRAIN_TURNS && turn_fd(t, 0); calls++)
		;
}

/* ---- the stall check -------------------------------------------------- */

static uint32_t due(const struct peer *p, enum rig_side side)
{
	return side == RIG_SEND ? p->sent - p->sends_taken
				: p->recvs_posted - p->recvs_taken;
}

static bool hits_pending(const struct run *t)
{
	int i, side;

	for (i = 0; i < NQP; i++)
		for (side = RIG_SEND; side <= RIG_RECEIVE; side++)
			if (t->qp[i].ring[side].hit)
				return true;
	return false;
}

/* Fails, naming them all, if rings whose probe found a completion are
 * still unlisted STALL_MS after it. */
static void verdict(struct run *t, double now)
{
	char msg[1024] = "";
	size_t len = 0;
	int i, side, bad = 0;

	for (i = 0; i < NQP; i++)
		for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
			const struct ring_state *rs = &t->qp[i].ring[side];

			if (!rs->hit || now - rs->hit_at < STALL_MS)
				continue;
			bad++;
			if (len < sizeof(msg) - 128)
				len += (size_t)snprintf(msg + len, sizeof(msg) - len,
					" queue pair %d's %s ring (listed last %.0f ms before the probe, %u entries due);",
					i, side_name(side), rs->hit_at - rs->listed_at,
					due(&t->qp[i], side));
		}
	CHECK(!bad, "lost wakeup: %d ring(s) held a completion that no handle call listed for %d ms after a probe found it:%s",
	      bad, STALL_MS, msg);
}

/* A probe: a completion found here starts the STALL_MS the ring has to
 * be listed in. */
static void probe(struct run *t, int i, enum rig_side side, double now)
{
	struct ring_state *rs = &t->qp[i].ring[side];
	struct rig_completion c;
	int ret;

	t->probes++;
	ret = rig_qp_poll(t->qp[i].qp, side, &c);
	CHECK(ret >= 0, "rig_qp_poll: %d %s", ret, rig_errmsg());
	if (!ret)
		return;
	take(t, i, side, &c, NULL);
	rs->hit = true;
	rs->hit_at = now;
	t->hits++;
}

/*
 * Every WAIT_MS (@all: now, every ring with entries due): hand out what
 * is listed, give the verdict on earlier probes, then probe the rings
 * with entries due that no handle call listed for STALL_MS.
 */
static void stall_check(struct run *t, bool all)
{
	double now = t_now_ms();
	struct ring_state *rs;
	int i, side;

	if (!all && now < t->next_check)
		return;
	drain_listed(t);
	now = t_now_ms();
	t->next_check = now + WAIT_MS;
	verdict(t, now);
	for (i = 0; i < NQP; i++)
		for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
			rs = &t->qp[i].ring[side];
			if (!rs->hit && due(&t->qp[i], side) &&
			    (all || now - rs->listed_at >= STALL_MS))
				probe(t, i, side, now);
		}
}

/* ---- the churn thread ------------------------------------------------- */

/*
 * Beside the epoll or libuv loop, another thread makes queue pairs, connects them
 * in loopback, sends a message or two, destroys them and applies the
 * NIC's async events, over and over. They are its own (C3); it reaches
 * the loop's only through NIC-level calls, yet those read the completion
 * channel and the async fd: its rig_qp_wait, rig_qp_destroy and
 * rig_nic_events list the loop's rings and use up the readiness that
 * would have woken the loop, and the loop reads its completion events,
 * around its destroys too.
 *
 * Its own events wake the loop as well, and mask a loop that hears of
 * rings other threads listed only through its next wakeup. So for the
 * last quarter of the run, once it has done CHURN_MIN cycles, it makes
 * no more events: it sleeps in rig_qp_wait on a receive nobody sends to,
 * and so reads the loop's last events whenever it wins the race for
 * them.
 */
struct churn {
	struct rig_nic *nics[2];	/* its queue pairs are on nics[0] */
	int nnics;
	struct t_buf buf;
	uint64_t rnd;
	pthread_t tid;
	/* atomic, set by the loop: sleep from now on; end */
	int steal, stop;
	/* atomic, set by the thread */
	unsigned cycles;	/* of make, connect, send, destroy, events */
	unsigned beats;		/* cycles and sleeps: it is not stuck */
	int stealing;		/* it sleeps in rig_qp_wait from now on */
	const char *step;	/* where it is, to name a hang */
	int failed;		/* err says why; it stopped there */
	char err[256];
	/* the loop's: when it last saw beats move */
	unsigned seen_beats;
	double seen_at;
};

/* How a cycle takes its completions. */
enum churn_mode {
	CHURN_SLEEP,	/* all, asleep in rig_qp_wait: it reads the channel */
	CHURN_SPIN,	/* the receives, polling; destroy at once, the send
			 * completions and their events on their way */
	CHURN_INFLIGHT,	/* none: destroy with the sends in flight */
	CHURN_MODES
};

static void churn_step(struct churn *ch, const char *step)
{
	__atomic_store_n(&ch->step, step, __ATOMIC_RELAXED);
}

/* Whether the loop set @flag (ch->steal, ch->stop). */
static bool told(int *flag)
{
	return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

__attribute__((format(printf, 2, 3)))
static int churn_fail(struct churn *ch, const char *fmt, ...)
{
	va_list ap;

	if (__atomic_load_n(&ch->failed, __ATOMIC_RELAXED))
		return -1;
	va_start(ap, fmt);
	vsnprintf(ch->err, sizeof(ch->err), fmt, ap);
	va_end(ap);
	__atomic_store_n(&ch->failed, 1, __ATOMIC_RELEASE);
	return -1;
}

static int churn_pair(struct churn *ch, struct rig_qp **a, struct rig_qp **b)
{
	struct rig_endpoint ea, eb;
	int ret;

	churn_step(ch, "rig_qp_make");
	ret = rig_qp_make(ch->nics[0], a);
	if (!ret)
		ret = rig_qp_make(ch->nics[0], b);
	if (ret)
		return churn_fail(ch, "rig_qp_make: %d %s", ret, rig_errmsg());
	churn_step(ch, "rig_qp_connect");
	rig_qp_endpoint(*a, &ea);
	rig_qp_endpoint(*b, &eb);
	ret = rig_qp_connect(*a, &eb);
	if (!ret)
		ret = rig_qp_connect(*b, &ea);
	if (ret)
		return churn_fail(ch, "rig_qp_connect: %d %s", ret, rig_errmsg());
	return 0;
}

/* Destroys what churn_pair made; @ret: the cycle's result so far. */
static int churn_unpair(struct churn *ch, struct rig_qp *a, struct rig_qp *b,
			int ret)
{
	int r;

	churn_step(ch, "rig_qp_destroy");
	if (a && (r = rig_qp_destroy(a)))
		ret = churn_fail(ch, "rig_qp_destroy: %d %s", r, rig_errmsg());
	if (b && (r = rig_qp_destroy(b)))
		ret = churn_fail(ch, "rig_qp_destroy: %d %s", r, rig_errmsg());
	return ret;
}

/* One completion of @side, asleep in rig_qp_wait or spinning on
 * rig_qp_poll, within CHURN_WAIT_MS. */
static int churn_take(struct churn *ch, struct rig_qp *qp, enum rig_side side,
		      bool sleep)
{
	double end = t_now_ms() + CHURN_WAIT_MS;
	struct rig_completion c;
	int ret;

	do
		ret = sleep ? rig_qp_wait(qp, side, CHURN_WAIT_MS * 1000ll, &c)
			    : rig_qp_poll(qp, side, &c);
	while (!ret && t_now_ms() < end);
	if (ret < 0)
		return churn_fail(ch, "%s: %d %s", sleep ? "rig_qp_wait" : "rig_qp_poll",
				  ret, rig_errmsg());
	if (!ret)
		return churn_fail(ch, "no %s completion within %d ms", side_name(side),
				  CHURN_WAIT_MS);
	if (c.error || c.bytes != CHURN_LEN)
		return churn_fail(ch, "%s completion: error %d (%s), %u bytes of %d",
				  side_name(side), c.error, c.why ? c.why : "",
				  c.bytes, CHURN_LEN);
	return 0;
}

/* One or two messages from @a to @b, into receives posted first. */
static int churn_traffic(struct churn *ch, struct rig_qp *a, struct rig_qp *b)
{
	enum churn_mode mode = rnd(&ch->rnd) % CHURN_MODES;
	int j, k = 1 + (int)(rnd(&ch->rnd) % 2), ret = 0;

	churn_step(ch, "posting");
	for (j = 0; j < k && !ret; j++)
		ret = rig_qp_receive(b, ch->buf.r, (size_t)j * 64, 64);
	for (j = 0; j < k && !ret; j++)
		ret = rig_qp_send(a, ch->buf.r, 256 + (size_t)j * 64, CHURN_LEN);
	if (ret)
		return churn_fail(ch, "posting: %d %s", ret, rig_errmsg());
	churn_step(ch, mode == CHURN_SLEEP ? "rig_qp_wait" : "rig_qp_poll");
	for (j = 0; j < k && mode != CHURN_INFLIGHT && !ret; j++) {
		if (mode == CHURN_SLEEP)
			ret = churn_take(ch, a, RIG_SEND, true);
		if (!ret)
			ret = churn_take(ch, b, RIG_RECEIVE, mode == CHURN_SLEEP);
	}
	return ret;
}

static int churn_cycle(struct churn *ch)
{
	struct rig_qp *a = NULL, *b = NULL;
	int ret, r, k;

	ret = churn_pair(ch, &a, &b);
	if (!ret)
		ret = churn_traffic(ch, a, b);
	ret = churn_unpair(ch, a, b, ret);
	churn_step(ch, "rig_nic_events");
	for (k = 0; k < ch->nnics; k++)
		if ((r = rig_nic_events(ch->nics[k])) < 0)
			ret = churn_fail(ch, "rig_nic_events: %d %s", r, rig_errmsg());
	return ret;
}

/* The end of the run: asleep in rig_qp_wait, STEAL_WAIT_MS at a time, on
 * a receive nobody sends to, until the loop says stop. */
static int churn_steal(struct churn *ch)
{
	struct rig_qp *a = NULL, *b = NULL;
	struct rig_completion c;
	int ret;

	ret = churn_pair(ch, &a, &b);
	if (!ret && (ret = rig_qp_receive(b, ch->buf.r, 0, 64)))
		ret = churn_fail(ch, "posting: %d %s", ret, rig_errmsg());
	if (!ret) {
		churn_step(ch, "rig_qp_wait for a receive nobody sends to");
		__atomic_store_n(&ch->stealing, 1, __ATOMIC_RELEASE);
	}
	while (!ret && !told(&ch->stop)) {
		ret = rig_qp_wait(b, RIG_RECEIVE, STEAL_WAIT_MS * 1000ll, &c);
		if (ret)
			ret = churn_fail(ch, "rig_qp_wait for a receive nobody sends to: %d %s",
					 ret, ret < 0 ? rig_errmsg() : "(a completion)");
		__atomic_add_fetch(&ch->beats, 1, __ATOMIC_RELAXED);
	}
	return churn_unpair(ch, a, b, ret);
}

static void *churn_main(void *arg)
{
	struct churn *ch = arg;

	while (!told(&ch->stop) && !told(&ch->steal)) {
		if (churn_cycle(ch))
			return NULL;
		__atomic_add_fetch(&ch->cycles, 1, __ATOMIC_RELAXED);
		__atomic_add_fetch(&ch->beats, 1, __ATOMIC_RELAXED);
	}
	if (!told(&ch->stop))
		churn_steal(ch);
	churn_step(ch, "its end");
	return NULL;
}

static void churn_start(struct run *t, struct churn *ch)
{
	int k;

	for (k = 0; k < t->nnics; k++)
		ch->nics[k] = t->nics[k];
	ch->nnics = t->nnics;
	t_buf(&ch->buf, t->nics[0], 512, 7);
	ch->rnd = mix64(~t->seed) | 1;
	ch->step = "its start";
	ch->seen_at = t_now_ms();
	cr_assert_eq(pthread_create(&ch->tid, NULL, churn_main, ch), 0);
	t->churn = ch;
}

/*
 * The loop's look at the churn thread, every turn: it failed, or it is
 * stuck (a destroy that waits for an event nobody acks); the last
 * quarter of the run has come: sleep.
 */
static void churn_watch(struct run *t, double now)
{
	struct churn *ch = t->churn;
	unsigned beats = __atomic_load_n(&ch->beats, __ATOMIC_RELAXED);

	CHECK(!__atomic_load_n(&ch->failed, __ATOMIC_ACQUIRE), "churn thread: %s",
	      ch->err);
	if (beats != ch->seen_beats) {
		ch->seen_beats = beats;
		ch->seen_at = now;
	}
	CHECK(now - ch->seen_at < HANG_MS, "the churn thread is stuck in %s (%d s)",
	      __atomic_load_n(&ch->step, __ATOMIC_RELAXED), HANG_MS / 1000);
	if (4 * t->posted >= 3 * t->messages &&
	    __atomic_load_n(&ch->cycles, __ATOMIC_RELAXED) >= CHURN_MIN)
		__atomic_store_n(&ch->steal, 1, __ATOMIC_RELEASE);
}

static void churn_stop(struct churn *ch)
{
	struct timespec end;
	int ret;

	__atomic_store_n(&ch->stop, 1, __ATOMIC_RELEASE);
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += HANG_MS / 1000;
	ret = pthread_timedjoin_np(ch->tid, NULL, &end);
	cr_assert_eq(ret, 0, "the churn thread did not end within %d s: stuck in %s",
		     HANG_MS / 1000, __atomic_load_n(&ch->step, __ATOMIC_RELAXED));
	cr_assert(!ch->failed, "churn thread: %s", ch->err);
	cr_assert_geq(ch->cycles, CHURN_MIN);
	cr_assert(ch->stealing);
}

/* ---- the run ---------------------------------------------------------- */

static bool finished(const struct run *t, double now)
{
	if (hits_pending(t))
		return false;
	/* The epoll and libuv loops end with the churn thread asleep in
	 * rig_qp_wait. */
	if (t->churn && !__atomic_load_n(&t->churn->stealing, __ATOMIC_ACQUIRE))
		return false;
	return t->taken == t->expected || now - t->last_progress >= QUIET_MS;
}

/*
 * Feeds all queue pairs, then runs the loop until every completion is
 * taken or none came for QUIET_MS. Then every ring with entries due is
 * probed: what a probe finds there gets STALL_MS to be listed, as during
 * the run.
 */
static void traffic(struct run *t)
{
	double now;
	int i;

	t->start = t->last_progress = t_now_ms();
	for (i = 0; i < NQP; i++) {
		t->qp[i].ring[RIG_SEND].listed_at = t->start;
		t->qp[i].ring[RIG_RECEIVE].listed_at = t->start;
		t->qp[i].touched = true;
	}
	feed_touched(t);
	do {
		do {
			if (t->kind == LOOP_URING)
				turn_uring(t);
			else
				turn_fd(t, WAIT_MS);
			stall_check(t, false);
			feed_touched(t);
			now = t_now_ms();
			if (t->churn)
				churn_watch(t, now);
		} while (!finished(t, now));
		stall_check(t, true);
		feed_touched(t);
	} while (hits_pending(t));
	t->elapsed = (t->taken == t->expected ? t->last_progress : now) - t->start;
}

/* Exact totals: every message sent, completed and received once. */
static void check_totals(const struct run *t)
{
	int i;

	for (i = 0; i < NQP; i++) {
		const struct peer *p = &t->qp[i];
		uint32_t in = t->qp[i ^ 1].quota;

		cr_assert_eq(p->sent, p->quota, "queue pair %d sent %u of %u", i,
			     p->sent, p->quota);
		cr_assert_eq(p->sends_taken, p->quota,
			     "queue pair %d: %u of its %u sends completed", i,
			     p->sends_taken, p->quota);
		cr_assert_eq(p->recvs_taken, in, "queue pair %d received %u of %u", i,
			     p->recvs_taken, in);
		cr_assert_eq(p->recvs_posted, in);
	}
	cr_assert_eq(t->posted, t->messages);
	cr_assert_eq(t->taken, t->expected, "%llu of %llu completions",
		     (unsigned long long)t->taken, (unsigned long long)t->expected);
}

static void report(const struct run *t, const char *loop, int max)
{
	cr_log_info("%s: %llu messages in %.1f s, %.0f messages/s; %u probes, "
		    "%u found a completion, all listed within %d ms",
		    loop, (unsigned long long)t->messages, t->elapsed / 1e3,
		    t->messages / (t->elapsed / 1e3), t->probes, t->hits, STALL_MS);
	cr_log_info("%lu handle calls listed %lu rings; %lu calls filled all %d",
		    t->calls, t->listings, t->full_calls, max);
}

/* io_uring: each CQE of a NIC's poll, rig_uring_handle until it lists
 * fewer than READY_MAX rings. */
Test(loop_sustained, uring_64_queue_pairs_1e5_messages, .timeout = 600)
{
	struct run *t = calloc(1, sizeof(*t));

	cr_assert_not_null(t);
	setup(t, LOOP_URING);
	watch(t);
	traffic(t);
	check_totals(t);
	report(t, "io_uring loop", READY_MAX);
	teardown(t);
	free(t);
}

/* The epoll and libuv loops: the run beside the churn thread. */
static void run_with_churn(enum loop_kind kind, const char *loop)
{
	struct run *t = calloc(1, sizeof(*t));
	struct churn *ch = calloc(1, sizeof(*ch));

	cr_assert(t && ch);
	setup(t, kind);
	watch(t);
	churn_start(t, ch);
	traffic(t);
	churn_stop(ch);
	check_totals(t);
	report(t, loop, EPOLL_BATCH);
	cr_log_info("churn thread: %u cycles, then %u sleeps of %d ms; %u listings of its rings passed over",
		    ch->cycles, ch->beats - ch->cycles, STEAL_WAIT_MS, t->foreign);
	teardown(t);
	free(ch);
	free(t);
}

/* epoll on rig_loop_fd after rig_loop_watch, level-triggered, four rings
 * per rig_loop_handle per wakeup, while the churn thread reads the
 * channel and the async fd: its cycles for three quarters of the run,
 * then its sleeps in rig_qp_wait. No io_uring anywhere. */
Test(loop_sustained, epoll_with_churn_thread, .timeout = 600)
{
	run_with_churn(LOOP_EPOLL, "epoll loop");
}

/* The same in libuv: a uv_poll_t on rig_loop_fd (UV_READABLE) whose
 * callback calls rig_loop_handle for four rings. */
Test(loop_sustained, libuv_with_churn_thread, .timeout = 600)
{
	run_with_churn(LOOP_UV, "libuv loop");
}
