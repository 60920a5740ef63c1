/* SPDX-License-Identifier: MIT */
/*
 * One port, every loop (rig_loops_listen, rig(7) CONNECTIONS BY ADDRESS):
 * a server listens once, on one address and port, and its connections
 * are served by four loops, a thread each. Each request goes to the loop
 * with the fewest connections, a connection stays on the loop that
 * accepted it, every piece of its news comes out of that loop only, no
 * loop needs another's thread, and the listener closes while its loops
 * turn.
 *
 * The server has $RIG_TEST_PEER_DEV and its four loops' threads; the
 * clients dial it from a loop of $RIG_TEST_DEV in the test's thread, so
 * every packet crosses the veth (tests/rxe-vm --two-hosts). Each client
 * sends a message, the server echoes it from the loop that got it, and
 * the client checks the bytes.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "t_device.h"

#define LOOPS 4
#define MSG 64
#define SLOTS 512		/* connections the server holds at once */
#define CLIENTS 220		/* client numbers used in one test */
#define BATCH 64
/* Dials under way at once from the clients' loop (see test_early). */
#define WINDOW 16
#define RETRY_MS 100
#define DIAL_US 20000000
/* Clients of a run that checks the split: under ASan half (the same
 * paths; the plain pass has the 200). */
#define RUN (T_ASAN ? 100 : 200)
/* A round's bound: 200 connections take ~10-25 s in the guest. */
#define ROUND_MS 120000

static const uint64_t LISTEN_COOKIE = 0x0e9e00000000000full;
static const uint64_t DIAL_BASE = 0xd1a1000000000000ull;

static void need_two_hosts(void)
{
	if (!t_peer_dev() || !t_other_ip())
		cr_skip_test("one port, every loop: across two hosts (tests/rxe-vm --two-hosts)");
}

/* Round @round of client @i's message. */
static void msg_fill(uint8_t *m, int i, int round)
{
	int k;

	for (k = 0; k < MSG; k++)
		m[k] = (uint8_t)(i * 131 + round * 17 + k * 7 + 1);
}

/* ---- the server: four loops on one port ------------------------------- */

struct srv;

struct sloop {
	struct srv *s;
	int idx;
	struct rig_loop *loop;
	pthread_t thread;
	bool gated;		/* turns only once the gate opens */
	bool closed_early;	/* the test closed its loop at the gate */
	int accepted, echoed, gone, closed;	/* atomics */
	int echoed_after;	/* echoes in passes begun after the close */
};

struct srv {
	struct rig_nic *nic;
	struct sloop lp[LOOPS];
	struct rig_listener *l;
	uint16_t port;
	int stop;		/* eventfd */
	struct t_buf buf;	/* slot i: receive at 2i * MSG, send at (2i + 1) * MSG */
	pthread_mutex_t lock;	/* the slots */
	struct t_gate gate;	/* loops 1-3 turn once it opens, if gated */
	struct {
		struct rig_qp *qp;
		int loop;	/* the loop that accepted it */
	} slot[SLOTS];
	int closed_flag;	/* atomic: rig_listener_close returned */
	struct t_fail fail;	/* the first of any loop's */
};

#define srv_fail(s, ...) t_fail_say(&(s)->fail, __VA_ARGS__)

/* @qp's slot, if loop @me accepted it; fails the test if another did. */
static int srv_slot(struct sloop *lp, const struct rig_qp *qp, const char *what)
{
	struct srv *s = lp->s;
	int i, owner = -1;

	pthread_mutex_lock(&s->lock);
	for (i = 0; i < SLOTS && s->slot[i].qp != qp; i++)
		;
	if (i < SLOTS)
		owner = s->slot[i].loop;
	pthread_mutex_unlock(&s->lock);
	if (i == SLOTS) {
		srv_fail(s, "loop %d: %s news of a queue pair no loop accepted", lp->idx, what);
		return -1;
	}
	if (owner != lp->idx) {
		srv_fail(s, "loop %d: %s news of a queue pair loop %d accepted", lp->idx, what,
			 owner);
		return -1;
	}
	return i;
}

static void srv_accepted(struct sloop *lp, const struct rig_ready *r, bool after_close)
{
	struct srv *s = lp->s;
	int i, ret;

	if (after_close) {
		srv_fail(s, "loop %d: ACCEPTED in a pass begun after rig_listener_close", lp->idx);
		return;
	}
	if (r->cookie != LISTEN_COOKIE || r->result || !r->qp) {
		srv_fail(s, "loop %d: ACCEPTED with cookie %#llx, result %d", lp->idx,
			 (unsigned long long)r->cookie, r->result);
		return;
	}
	pthread_mutex_lock(&s->lock);
	for (i = 0; i < SLOTS && s->slot[i].qp; i++)
		;
	if (i < SLOTS) {
		s->slot[i].qp = r->qp;
		s->slot[i].loop = lp->idx;
	}
	pthread_mutex_unlock(&s->lock);
	if (i == SLOTS) {
		srv_fail(s, "more than %d connections at once", SLOTS);
		return;
	}
	__atomic_add_fetch(&lp->accepted, 1, __ATOMIC_RELAXED);
	ret = rig_qp_receive(r->qp, s->buf.r, (size_t)2 * i * MSG, MSG);
	if (ret)
		srv_fail(s, "rig_qp_receive: %d %s", ret, rig_errmsg());
}

/* Echoes what came; completions that fail are the client leaving, and
 * GONE says so. */
static void srv_ring(struct sloop *lp, struct rig_qp *qp, enum rig_side side,
		     bool after_close)
{
	struct srv *s = lp->s;
	struct rig_completion c;
	int i = srv_slot(lp, qp, "RING"), ret;

	if (i < 0)
		return;
	while ((ret = rig_qp_poll(qp, side, &c)) == 1) {
		if (c.error || side == RIG_SEND)
			continue;
		memcpy(s->buf.mem + (size_t)(2 * i + 1) * MSG, s->buf.mem + (size_t)2 * i * MSG,
		       MSG);
		if ((ret = rig_qp_receive(qp, s->buf.r, (size_t)2 * i * MSG, MSG)) ||
		    (ret = rig_qp_send(qp, s->buf.r, (size_t)(2 * i + 1) * MSG, c.bytes))) {
			srv_fail(s, "loop %d: echo: %d %s", lp->idx, ret, rig_errmsg());
			return;
		}
		__atomic_add_fetch(&lp->echoed, 1, __ATOMIC_RELAXED);
		if (after_close)
			__atomic_add_fetch(&lp->echoed_after, 1, __ATOMIC_RELAXED);
	}
	if (ret < 0)
		srv_fail(s, "rig_qp_poll: %d %s", ret, rig_errmsg());
}

static void srv_news(struct sloop *lp, const struct rig_ready *r, bool after_close)
{
	struct srv *s = lp->s;
	int i, ret;

	switch (r->news) {
	case RIG_NEWS_ACCEPTED:
		srv_accepted(lp, r, after_close);
		return;
	case RIG_NEWS_RING:
		srv_ring(lp, r->qp, r->side, after_close);
		return;
	case RIG_NEWS_GONE:
		if (srv_slot(lp, r->qp, "GONE") < 0)
			return;
		if (r->result >= 0)
			srv_fail(s, "loop %d: GONE with result %d", lp->idx, r->result);
		ret = rig_qp_close(r->qp, 0);
		if (ret)
			srv_fail(s, "rig_qp_close: %d %s", ret, rig_errmsg());
		__atomic_add_fetch(&lp->gone, 1, __ATOMIC_RELAXED);
		return;
	case RIG_NEWS_CLOSED:
		i = srv_slot(lp, r->qp, "CLOSED");
		if (i < 0)
			return;
		if (r->result)
			srv_fail(s, "loop %d: CLOSED with %d", lp->idx, r->result);
		pthread_mutex_lock(&s->lock);
		s->slot[i].qp = NULL;
		pthread_mutex_unlock(&s->lock);
		__atomic_add_fetch(&lp->closed, 1, __ATOMIC_RELAXED);
		return;
	default:
		srv_fail(s, "loop %d: news %d (result %d) on a loop that only listens", lp->idx,
			 r->news, r->result);
	}
}

static void *srv_main(void *arg)
{
	struct sloop *lp = arg;
	struct srv *s = lp->s;
	struct pollfd pfd[2] = { { rig_loop_fd(lp->loop), POLLIN, 0 }, { s->stop, POLLIN, 0 } };
	struct rig_ready ready[BATCH];
	bool after;
	int n, i;

	if (lp->gated) {
		/* Not a single turn until the gate opens. */
		t_gate_wait(&s->gate);
		if (lp->closed_early)
			return NULL;
	}
	while (!(pfd[1].revents & POLLIN)) {
		if (poll(pfd, 2, -1) < 0 || !(pfd[0].revents & POLLIN))
			continue;
		do {
			after = __atomic_load_n(&s->closed_flag, __ATOMIC_ACQUIRE);
			n = rig_loop_handle(lp->loop, ready, BATCH);
			if (n < 0) {
				srv_fail(s, "rig_loop_handle: %d %s", n, rig_errmsg());
				return NULL;
			}
			for (i = 0; i < n; i++)
				srv_news(lp, &ready[i], after);
		} while (poll(pfd, 1, 0) == 1);
	}
	return NULL;
}

/* Four loops, each watched by a thread of its own (loops 1-3 held at a
 * gate if @gated), listening on one port. */
static void srv_start(struct srv *s, uint16_t port, bool gated)
{
	struct rig_loop *loops[LOOPS];
	int i, ret;

	memset(s, 0, sizeof(*s));
	s->port = port;
	s->nic = t_nic_open(t_peer_dev());
	pthread_mutex_init(&s->lock, NULL);
	t_gate_init(&s->gate, !gated);
	for (i = 0; i < LOOPS; i++) {
		s->lp[i] = (struct sloop){ .s = s, .idx = i, .gated = gated && i > 0 };
		ret = rig_loop_open(s->nic, &s->lp[i].loop);
		cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
		ret = rig_loop_watch(s->lp[i].loop);
		cr_assert_eq(ret, 0, "rig_loop_watch: %d %s", ret, rig_errmsg());
		loops[i] = s->lp[i].loop;
	}
	ret = rig_loops_listen(loops, LOOPS, t_other_ip(), port, LISTEN_COOKIE, &s->l);
	cr_assert_eq(ret, 0, "rig_loops_listen(%s:%u): %d %s", t_other_ip(), port, ret,
		     rig_errmsg());
	t_buf(&s->buf, s->nic, (size_t)2 * SLOTS * MSG, 0);
	s->stop = eventfd(0, EFD_CLOEXEC);
	cr_assert_geq(s->stop, 0);
	for (i = 0; i < LOOPS; i++)
		cr_assert_eq(pthread_create(&s->lp[i].thread, NULL, srv_main, &s->lp[i]), 0);
}

static int srv_sum(struct srv *s, size_t field)
{
	int i, n = 0;

	for (i = 0; i < LOOPS; i++)
		n += __atomic_load_n((int *)((char *)&s->lp[i] + field), __ATOMIC_RELAXED);
	return n;
}

#define SRV_SUM(s, f) srv_sum((s), offsetof(struct sloop, f))

/* Until the server closed @n queue pairs in all. */
static void srv_wait_closed(struct srv *s, int n, double end)
{
	while (SRV_SUM(s, closed) < n) {
		cr_assert(!__atomic_load_n(&s->fail.failed, __ATOMIC_ACQUIRE), "the server: %s",
			  s->fail.err);
		cr_assert_lt(t_now_ms(), end, "the server closed %d of %d connections",
			     SRV_SUM(s, closed), n);
		usleep(10000);	/* polling a count; the verdict is the bound */
	}
}

static void srv_end(struct srv *s)
{
	int i, ret;

	t_gate_open(&s->gate);
	cr_assert_eq(eventfd_write(s->stop, 1), 0);
	for (i = 0; i < LOOPS; i++)
		cr_assert_eq(pthread_join(s->lp[i].thread, NULL), 0);
	cr_assert(!s->fail.failed, "the server: %s", s->fail.err);
	if (s->l) {
		ret = rig_listener_close(s->l);
		cr_assert_eq(ret, 0, "rig_listener_close: %d %s", ret, rig_errmsg());
	}
	for (i = 0; i < LOOPS; i++) {
		if (s->lp[i].closed_early)
			continue;
		ret = rig_loop_close(s->lp[i].loop);
		cr_assert_eq(ret, 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	}
	close(s->stop);
	cr_assert_eq(rig_nic_close(s->nic), 0, "%s", rig_errmsg());
}

/* ---- the clients ------------------------------------------------------- */

enum { C_IDLE, C_DIALING, C_TALKING, C_DONE, C_LEFT };

struct cli {
	struct rig_nic *nic;
	struct rig_loop *loop;
	struct t_buf buf;	/* client i: receive at 2i * MSG, send at (2i + 1) * MSG */
	struct {
		struct rig_qp *qp;
		int state;
		int round, rounds;
		double retry_at;
		int result;	/* a dial's outcome */
	} c[CLIENTS];
	uint16_t port;
	int refused;
};

static void cli_open(struct cli *h, uint16_t port)
{
	int ret;

	memset(h, 0, sizeof(*h));
	h->port = port;
	h->nic = t_nic_open(t_dev());
	ret = rig_loop_open(h->nic, &h->loop);
	cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	ret = rig_loop_watch(h->loop);
	cr_assert_eq(ret, 0, "rig_loop_watch: %d %s", ret, rig_errmsg());
	t_buf(&h->buf, h->nic, (size_t)2 * CLIENTS * MSG, 0);
}

static void cli_close(struct cli *h)
{
	int ret = rig_loop_close(h->loop);

	cr_assert_eq(ret, 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	cr_assert_eq(rig_nic_close(h->nic), 0, "%s", rig_errmsg());
}

static void cli_dial(struct cli *h, int i)
{
	int ret = rig_loop_dial(h->loop, t_other_ip(), h->port, DIAL_US, DIAL_BASE + (uint64_t)i);

	cr_assert_eq(ret, 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
	h->c[i].state = C_DIALING;
	h->c[i].retry_at = 0;
}

/* Client @i's next message: a receive for the echo, then the send. */
static void cli_send(struct cli *h, int i)
{
	int ret;

	msg_fill(h->buf.mem + (size_t)(2 * i + 1) * MSG, i, h->c[i].round);
	ret = rig_qp_receive(h->c[i].qp, h->buf.r, (size_t)2 * i * MSG, MSG);
	cr_assert_eq(ret, 0, "rig_qp_receive: %d %s", ret, rig_errmsg());
	ret = rig_qp_send(h->c[i].qp, h->buf.r, (size_t)(2 * i + 1) * MSG, MSG);
	cr_assert_eq(ret, 0, "rig_qp_send: %d %s", ret, rig_errmsg());
}

static int cli_find(struct cli *h, const struct rig_qp *qp)
{
	int i;

	for (i = 0; i < CLIENTS; i++)
		if (h->c[i].qp == qp && h->c[i].state >= C_TALKING && h->c[i].state < C_LEFT)
			return i;
	return -1;
}

/* A dial ended; @late ones (dialed as the listener closes) may fail. */
static void cli_dialed(struct cli *h, const struct rig_ready *r, bool late)
{
	int i = (int)(r->cookie - DIAL_BASE);

	cr_assert(r->cookie >= DIAL_BASE && i >= 0 && i < CLIENTS &&
		  h->c[i].state == C_DIALING && !h->c[i].retry_at,
		  "DIALED with cookie %#llx: not one of ours, or twice",
		  (unsigned long long)r->cookie);
	h->c[i].result = r->result;
	if (r->result == -ECONNREFUSED && !late) {
		h->c[i].retry_at = t_now_ms() + RETRY_MS;
		h->refused++;
		return;
	}
	if (late && r->result) {
		h->c[i].state = C_LEFT;
		return;
	}
	cr_assert_eq(r->result, 0, "dial %d: %d (%s)", i, r->result, rig_errmsg());
	h->c[i].qp = r->qp;
	h->c[i].state = C_TALKING;
	if (late) {
		h->c[i].state = C_DONE;	/* it only connects */
		return;
	}
	cli_send(h, i);
}

static void cli_ring(struct cli *h, struct rig_qp *qp, enum rig_side side)
{
	uint8_t want[MSG];
	struct rig_completion c;
	int i = cli_find(h, qp), ret;

	if (i < 0)
		return;
	while ((ret = rig_qp_poll(qp, side, &c)) == 1) {
		cr_assert_eq(c.error, 0, "client %d, %s: %d (%s)", i,
			     side == RIG_SEND ? "send" : "receive", c.error, c.why);
		if (side == RIG_SEND)
			continue;
		msg_fill(want, i, h->c[i].round);
		cr_assert_eq(c.bytes, MSG, "client %d: an echo of %u bytes", i, c.bytes);
		cr_assert_arr_eq(h->buf.mem + (size_t)2 * i * MSG, want, MSG,
				 "client %d: the echo of round %d is not its bytes", i,
				 h->c[i].round);
		if (++h->c[i].round < h->c[i].rounds)
			cli_send(h, i);
		else
			h->c[i].state = C_DONE;
	}
	cr_assert_geq(ret, 0, "rig_qp_poll: %d %s", ret, rig_errmsg());
}

/* One turn of the clients' loop, waiting up to 20 ms. */
static void cli_turn(struct cli *h, bool late)
{
	struct pollfd pfd = { rig_loop_fd(h->loop), POLLIN, 0 };
	struct rig_ready ready[BATCH];
	int n, k, i;

	if (poll(&pfd, 1, 20) <= 0)
		return;
	do {
		n = rig_loop_handle(h->loop, ready, BATCH);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		for (k = 0; k < n; k++) {
			switch (ready[k].news) {
			case RIG_NEWS_DIALED:
				i = (int)(ready[k].cookie - DIAL_BASE);
				cli_dialed(h, &ready[k], late && h->c[i].rounds == 0);
				break;
			case RIG_NEWS_RING:
				cli_ring(h, ready[k].qp, ready[k].side);
				break;
			case RIG_NEWS_GONE:
				i = cli_find(h, ready[k].qp);
				/* Only a late dial's connection may be dropped:
				 * its handshake ended with the listener. */
				cr_assert(i >= 0 && h->c[i].rounds == 0,
					  "client %d: GONE, result %d", i, ready[k].result);
				break;
			default:
				cr_assert_fail("client: news %d, result %d", ready[k].news,
					       ready[k].result);
			}
		}
	} while (poll(&pfd, 1, 0) == 1);
}

/* Clients [@first, @first + @count) dial, WINDOW at a time (those not
 * dialing yet), and each has @rounds messages echoed; the server's
 * failures end the test. */
static void cli_run(struct cli *h, struct srv *s, int first, int count, int rounds)
{
	double end = t_now_ms() + ROUND_MS;
	int i, going, left;

	for (i = first; i < first + count; i++)
		h->c[i].rounds = rounds;
	for (;;) {
		cr_assert(!__atomic_load_n(&s->fail.failed, __ATOMIC_ACQUIRE), "the server: %s",
			  s->fail.err);
		going = left = 0;
		for (i = first; i < first + count; i++) {
			going += h->c[i].state == C_DIALING || h->c[i].state == C_TALKING;
			left += h->c[i].state != C_DONE;
		}
		if (!left)
			return;
		cr_assert_lt(t_now_ms(), end, "%d of %d connections not echoed in %d ms", left,
			     count, ROUND_MS);
		for (i = first; i < first + count && going < WINDOW; i++)
			if (h->c[i].state == C_IDLE) {
				cli_dial(h, i);
				going++;
			}
		for (i = first; i < first + count; i++)
			if (h->c[i].retry_at && t_now_ms() >= h->c[i].retry_at)
				cli_dial(h, i);
		cli_turn(h, false);
	}
}

/* Clients [@first, @first + @count) leave: the server hears GONE. */
static void cli_leave(struct cli *h, int first, int count)
{
	int i, ret;

	for (i = first; i < first + count; i++) {
		if (h->c[i].state != C_DONE)
			continue;
		ret = rig_qp_destroy(h->c[i].qp);
		cr_assert_eq(ret, 0, "rig_qp_destroy: %d %s", ret, rig_errmsg());
		h->c[i].state = C_LEFT;
	}
}

/* Each loop's share of @total, from @before, within +-10%. */
static void assert_spread(struct srv *s, const int *before, int total)
{
	int i, got, lo = total / LOOPS - total / LOOPS / 10, hi = total / LOOPS + total / LOOPS / 10;
	char shares[64] = "";

	for (i = 0; i < LOOPS; i++) {
		got = __atomic_load_n(&s->lp[i].accepted, __ATOMIC_RELAXED) - before[i];
		snprintf(shares + strlen(shares), sizeof(shares) - strlen(shares), " %d", got);
	}
	for (i = 0; i < LOOPS; i++) {
		got = __atomic_load_n(&s->lp[i].accepted, __ATOMIC_RELAXED) - before[i];
		cr_assert(got >= lo && got <= hi,
			  "loop %d accepted %d of %d connections, not %d-%d (shares:%s)", i, got,
			  total, lo, hi, shares);
	}
	cr_log_info("%d connections over %d loops:%s", total, LOOPS, shares);
}

TestSuite(oneport, .timeout = 300);

/*
 * 200 clients dial one port served by four loops: each gets its bytes
 * back, each loop accepts 45-55 of them (the fewest-connections pick),
 * and every piece of news of a connection (ACCEPTED, RING, GONE, CLOSED)
 * comes out of the loop that accepted it (srv_slot), each echo from it.
 */
Test(oneport, four_loops_share_one_port_and_keep_their_connections)
{
	int before[LOOPS] = { 0 }, i;
	struct srv s;
	struct cli h;

	need_two_hosts();
	srv_start(&s, 18901, false);
	cli_open(&h, 18901);
	cli_run(&h, &s, 0, RUN, 1);
	assert_spread(&s, before, RUN);
	for (i = 0; i < LOOPS; i++)
		cr_assert_eq(s.lp[i].echoed, s.lp[i].accepted,
			     "loop %d echoed %d messages for its %d connections", i,
			     s.lp[i].echoed, s.lp[i].accepted);
	cli_leave(&h, 0, RUN);
	srv_wait_closed(&s, RUN, t_now_ms() + ROUND_MS);
	for (i = 0; i < LOOPS; i++)
		cr_assert_eq(s.lp[i].gone, s.lp[i].accepted, "loop %d: %d GONE for %d accepted",
			     i, s.lp[i].gone, s.lp[i].accepted);
	srv_end(&s);
	cli_close(&h);
}

/*
 * No loop needs another: three of the four loops never turn at first
 * (their threads wait at a gate), and 20 dials all come up, within their
 * bound, on the one that turns: a request handed to a loop that does not
 * take it is taken back. Once the three turn, the next 200 spread over
 * all four.
 */
Test(oneport, a_loop_that_does_not_turn_strands_no_request)
{
	int before[LOOPS], i;
	double t0;
	struct srv s;
	struct cli h;

	need_two_hosts();
	srv_start(&s, 18902, true);
	cli_open(&h, 18902);
	t0 = t_now_ms();
	cli_run(&h, &s, 0, 20, 1);
	cr_assert_eq(h.refused, 0, "%d dials refused", h.refused);
	cr_assert_eq(s.lp[0].accepted, 20, "the turning loop accepted %d of 20",
		     s.lp[0].accepted);
	for (i = 1; i < LOOPS; i++)
		cr_assert_eq(s.lp[i].accepted, 0, "gated loop %d accepted %d", i,
			     s.lp[i].accepted);
	cr_log_info("20 connections through one turning loop of four in %.0f ms",
		    t_now_ms() - t0);
	cli_leave(&h, 0, 20);
	srv_wait_closed(&s, 20, t_now_ms() + ROUND_MS);
	t_gate_open(&s.gate);
	for (i = 0; i < LOOPS; i++)
		before[i] = s.lp[i].accepted;
	cli_run(&h, &s, 20, RUN, 1);
	assert_spread(&s, before, RUN);
	cli_leave(&h, 20, RUN);
	srv_wait_closed(&s, 20 + RUN, t_now_ms() + ROUND_MS);
	srv_end(&s);
	cli_close(&h);
}

/*
 * Bad input is -EINVAL, and nothing listens after it: the port is free
 * for the next listener.
 */
Test(oneport, bad_input_is_einval_and_leaves_the_port_free)
{
	struct rig_nic *nic, *other;
	struct rig_loop *a, *b, *c, *loops[3];
	struct rig_listener *l = NULL;
	int ret;

	need_two_hosts();
	nic = t_nic_open(t_peer_dev());
	other = t_nic_open(t_dev());
	cr_assert_eq(rig_loop_open(nic, &a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_open(nic, &b), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_open(other, &c), 0, "%s", rig_errmsg());

	loops[0] = a;
	loops[1] = b;
	cr_assert_eq(rig_loops_listen(loops, 0, t_other_ip(), 18903, 1, &l), -EINVAL);
	cr_assert_eq(rig_loops_listen(loops, -1, t_other_ip(), 18903, 1, &l), -EINVAL);
	cr_assert_eq(rig_loops_listen(NULL, 2, t_other_ip(), 18903, 1, &l), -EINVAL);
	cr_assert_eq(rig_loops_listen(loops, 2, t_other_ip(), 18903, 1, NULL), -EINVAL);
	loops[1] = NULL;
	cr_assert_eq(rig_loops_listen(loops, 2, t_other_ip(), 18903, 1, &l), -EINVAL);
	loops[1] = a;
	cr_assert_eq(rig_loops_listen(loops, 2, t_other_ip(), 18903, 1, &l), -EINVAL);
	loops[1] = b;
	loops[2] = a;
	cr_assert_eq(rig_loops_listen(loops, 3, t_other_ip(), 18903, 1, &l), -EINVAL);
	loops[2] = c;
	cr_assert_eq(rig_loops_listen(loops, 3, t_other_ip(), 18903, 1, &l), -EINVAL);
	cr_assert_null(l, "a refused call set the listener");

	/* Nothing listens: the port is free, for one loop and for two. */
	ret = rig_loop_listen(a, t_other_ip(), 18903, 1, &l);
	cr_assert_eq(ret, 0, "rig_loop_listen after the refusals: %d %s", ret, rig_errmsg());
	/* ... and taken: a second listener on it is refused. */
	ret = rig_loops_listen(loops, 2, t_other_ip(), 18903, 1, &(struct rig_listener *){ 0 });
	cr_assert_eq(ret, -EADDRINUSE, "a second listener on the port: %d %s", ret, rig_errmsg());
	cr_assert_eq(rig_listener_close(l), 0);
	ret = rig_loops_listen(loops, 2, t_other_ip(), 18903, 1, &l);
	cr_assert_eq(ret, 0, "rig_loops_listen after the close: %d %s", ret, rig_errmsg());
	cr_assert_eq(rig_listener_close(l), 0);

	cr_assert_eq(rig_loop_close(a), 0);
	cr_assert_eq(rig_loop_close(b), 0);
	cr_assert_eq(rig_loop_close(c), 0);
	cr_assert_eq(rig_nic_close(other), 0);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/*
 * The shared listener closes, from the test's thread, while its four
 * loops turn and 40 connections echo, and 8 dials are under way: no pass
 * begun after the close hands out ACCEPTED, each loop keeps echoing on
 * its connections, a new dial is refused, and (under ASan) nothing
 * leaks.
 */
Test(oneport, closing_while_loops_turn_keeps_their_connections)
{
	int echoed[LOOPS], i, k, busy;
	double end;
	struct srv s;
	struct cli h;

	need_two_hosts();
	srv_start(&s, 18904, false);
	cli_open(&h, 18904);
	cli_run(&h, &s, 0, 40, 1);
	/* Traffic: each of the 40 echoes on and on; 8 late dials. */
	for (i = 0; i < 40; i++) {
		h.c[i].state = C_TALKING;
		h.c[i].round = 0;
		h.c[i].rounds = 1000000;
		cli_send(&h, i);
	}
	for (i = 40; i < 48; i++) {
		h.c[i].rounds = 0;
		cli_dial(&h, i);
	}
	for (k = 0; k < 5; k++)
		cli_turn(&h, true);
	cr_assert_eq(rig_listener_close(s.l), 0, "rig_listener_close: %s", rig_errmsg());
	s.l = NULL;
	__atomic_store_n(&s.closed_flag, 1, __ATOMIC_RELEASE);
	for (i = 0; i < LOOPS; i++)
		echoed[i] = __atomic_load_n(&s.lp[i].echoed_after, __ATOMIC_RELAXED);
	/* Every loop echoes 20 more on the connections it holds, and the
	 * late dials end. */
	end = t_now_ms() + ROUND_MS;
	do {
		cr_assert(!__atomic_load_n(&s.fail.failed, __ATOMIC_ACQUIRE), "the server: %s",
			  s.fail.err);
		cr_assert_lt(t_now_ms(), end, "the loops stopped echoing after the close");
		cli_turn(&h, true);
		busy = 0;
		for (i = 40; i < 48; i++)
			busy += h.c[i].state == C_DIALING;
		for (i = 0; i < LOOPS; i++)
			busy += s.lp[i].accepted && s.lp[i].echoed_after - echoed[i] < 20;
	} while (busy);
	/* The port listens no more. */
	h.c[48].rounds = 0;
	cli_dial(&h, 48);
	while (h.c[48].state == C_DIALING) {
		cr_assert_lt(t_now_ms(), end, "a dial after the close never ended");
		cli_turn(&h, true);
	}
	cr_assert_eq(h.c[48].result, -ECONNREFUSED, "a dial after the close: %d",
		     h.c[48].result);
	/* The 40 stop where they are and leave; so do the late ones. */
	for (i = 0; i < 40; i++)
		h.c[i].state = C_DONE;
	cli_leave(&h, 0, 48);
	srv_wait_closed(&s, SRV_SUM(&s, accepted), end);
	for (i = 0; i < LOOPS; i++)
		cr_log_info("loop %d: %d connections, %d echoes after the close", i,
			    s.lp[i].accepted, s.lp[i].echoed_after);
	srv_end(&s);
	cli_close(&h);
}

/*
 * A member loop that closes leaves the listener, and the others serve
 * on: loops 1-3 do not turn at first, loop 3 is closed while 16 dials
 * are under way (requests handed to it go to the others), and all 20
 * come up on loop 0; then loops 1 and 2 turn, and the next 90 spread
 * over loops 0-2, none on loop 3.
 */
Test(oneport, a_member_loop_that_closes_leaves_the_listener)
{
	int before[LOOPS], i, k, got, ret;
	struct srv s;
	struct cli h;

	need_two_hosts();
	srv_start(&s, 18905, true);
	cli_open(&h, 18905);
	for (i = 0; i < 16; i++) {
		h.c[i].rounds = 1;
		cli_dial(&h, i);
	}
	for (k = 0; k < 5; k++)
		cli_turn(&h, false);
	/* Its thread waits at the gate and never touches it again. */
	s.lp[3].closed_early = true;
	ret = rig_loop_close(s.lp[3].loop);
	cr_assert_eq(ret, 0, "rig_loop_close of a member: %d %s", ret, rig_errmsg());
	cli_run(&h, &s, 0, 20, 1);
	/* Handed to the closed loop or not, no request was refused. */
	cr_assert_eq(h.refused, 0, "%d dials refused", h.refused);
	cr_assert_eq(s.lp[0].accepted, 20, "the turning loop accepted %d of 20",
		     s.lp[0].accepted);
	cli_leave(&h, 0, 20);
	srv_wait_closed(&s, 20, t_now_ms() + ROUND_MS);
	t_gate_open(&s.gate);
	for (i = 0; i < LOOPS; i++)
		before[i] = s.lp[i].accepted;
	cli_run(&h, &s, 20, 90, 1);
	cr_assert_eq(s.lp[3].accepted, 0, "the closed loop accepted %d", s.lp[3].accepted);
	for (i = 0; i < 3; i++) {
		got = s.lp[i].accepted - before[i];
		cr_assert(got >= 27 && got <= 33, "loop %d accepted %d of 90, not 27-33", i, got);
	}
	cli_leave(&h, 20, 90);
	srv_wait_closed(&s, 110, t_now_ms() + ROUND_MS);
	srv_end(&s);
	cli_close(&h);
}
