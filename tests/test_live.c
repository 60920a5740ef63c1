/* SPDX-License-Identifier: MIT */
/*
 * Liveness (rig(7) LIVENESS): a loop probes the idle connections it made
 * by address, so that a peer host that vanishes without a word (its link
 * cut, its power lost) fails every connection to it with -ETIMEDOUT and
 * RIG_NEWS_GONE, even one that only receives, which nothing else would
 * ever tell (no packet of rdma_cm crosses a cut wire, and a queue pair
 * that sends nothing spends no transport retry).
 *
 * Two hosts: one loop on each device (rxe0 on veth0, rxe1 on veth1), in
 * this process, pumped by the test's one thread, which is also the thread
 * that posts and polls every queue pair (rig_loop_liveness(3)). The wire
 * is cut by a netem qdisc that loses every packet on both ends of the
 * veth, as in test_model: each side's own link stays up, so each side
 * learns only from its probes' retries (a link taken down would fail the
 * local side's next send at once, with -EIO: rig(7) SOFT-ROCE).
 *
 * RIG_TEST_LIVE_CONNS sets how many connections the cut test makes
 * (default 100); with RIG_TEST_LIVE_CONNS=1000, give the guest room
 * (RIG_RXE_VM_MEM=6144: Soft-RoCE backs each queue pair with ~1.5 MiB).
 * RIG_TEST_LIVE_OFF=1 turns the probes off: the cut test then fails.
 * Each test prints its figures on stderr.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/times.h>
#include <unistd.h>

#include "t_device.h"

#define PORT 18900
#define NRECV 4			/* receives posted on each queue pair */
#define MSG 64
#define LONG_MS 60000		/* a bound no working run comes near */
/*
 * The transport's retries once the wire is cut: 7 tries 67 ms apart on
 * Soft-RoCE (~470 ms, rig(7) M3), 3 s with room for a busy machine, as in
 * test_vanish's CUT_MAX_MS.
 */
#define RETRY_MAX_MS 3000

__attribute__((constructor)) static void run_serially(void)
{
	setenv("CRITERION_JOBS", "1", 1);
}

static int conns_wanted(int dflt)
{
	const char *s = getenv("RIG_TEST_LIVE_CONNS");

	return s && atoi(s) > 0 ? atoi(s) : dflt;
}

/* ---- one end: a NIC, a loop, its connections --------------------------- */

struct end {
	const char *name;
	struct rig_nic *nic;
	struct rig_loop *loop;
	struct rig_listener *l;
	struct t_buf buf;
	struct rig_qp **qp;
	int n, max;
	int *gone;		/* per queue pair: RIG_NEWS_GONE's result, 1 if none */
	double *gone_at;
	int ngone;
	int taken;		/* completions taken, any ring */
	int failed_taken;	/* of which failed with -ETIMEDOUT */
	int other_taken;	/* of which failed otherwise */
	int ok_bytes;		/* of which succeeded with MSG bytes */
	int ring_news;		/* RIG_NEWS_RING handed out */
	/* a dialer: where it dials, and dials refused and made again */
	const char *to;
	uint16_t port;
	int redials;
};

static void end_open(struct end *e, const char *name, const char *dev, int max,
		     int64_t live_ms)
{
	const char *off = getenv("RIG_TEST_LIVE_OFF");
	int ret;

	/* RIG_TEST_LIVE_OFF=1: the probes off, to see the tests fail
	 * without them. */
	if (off && *off == '1')
		live_ms = 0;

	memset(e, 0, sizeof(*e));
	e->name = name;
	e->max = max;
	e->nic = t_nic_open(dev);
	ret = rig_loop_open(e->nic, &e->loop);
	cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	ret = rig_loop_liveness(e->loop, live_ms);
	cr_assert_eq(ret, 0, "rig_loop_liveness: %d %s", ret, rig_errmsg());
	cr_assert_eq(rig_loop_watch(e->loop), 0);
	e->qp = calloc(max, sizeof(*e->qp));
	e->gone = calloc(max, sizeof(*e->gone));
	e->gone_at = calloc(max, sizeof(*e->gone_at));
	cr_assert(e->qp && e->gone && e->gone_at);
	t_buf(&e->buf, e->nic, 2 * MSG, 7);
}

static void end_close(struct end *e)
{
	if (e->l)
		cr_assert_eq(rig_listener_close(e->l), 0);
	cr_assert_eq(rig_loop_close(e->loop), 0, "rig_loop_close: %s", rig_errmsg());
	cr_assert_eq(rig_nic_close(e->nic), 0, "rig_nic_close: %s", rig_errmsg());
	free(e->qp);
	free(e->gone);
	free(e->gone_at);
}

static int index_of(const struct end *e, const struct rig_qp *qp)
{
	int i;

	for (i = 0; i < e->n; i++)
		if (e->qp[i] == qp)
			return i;
	cr_assert_fail("%s: news of a queue pair it does not have", e->name);
	return -1;
}

static void post_receives(struct end *e, struct rig_qp *qp, int count)
{
	int i, ret;

	for (i = 0; i < count; i++) {
		ret = rig_qp_receive(qp, e->buf.r, MSG, MSG);
		cr_assert_eq(ret, 0, "%s: rig_qp_receive: %d %s", e->name, ret, rig_errmsg());
	}
}

/* Polls @qp's ring @side dry, counting; a receive that succeeded is
 * posted again (the traffic test). */
static void take_all(struct end *e, struct rig_qp *qp, enum rig_side side)
{
	struct rig_completion c;
	int ret;

	while ((ret = rig_qp_poll(qp, side, &c)) == 1) {
		e->taken++;
		if (c.error == -ETIMEDOUT)
			e->failed_taken++;
		else if (c.error)
			e->other_taken++;
		else if (side == RIG_RECEIVE && c.bytes == MSG)
			e->ok_bytes++;
		if (!c.error && side == RIG_RECEIVE)
			post_receives(e, qp, 1);
	}
	cr_assert_eq(ret, 0, "%s: rig_qp_poll: %d %s", e->name, ret, rig_errmsg());
}

/* Hands out and handles what @e's loop has now. */
static void end_handle(struct end *e)
{
	struct rig_ready r[64];
	int i, n, k;

	do {
		n = rig_loop_handle(e->loop, r, 64);
		cr_assert_geq(n, 0, "%s: rig_loop_handle: %d %s", e->name, n, rig_errmsg());
		for (i = 0; i < n; i++) {
			switch (r[i].news) {
			case RIG_NEWS_ACCEPTED:
			case RIG_NEWS_DIALED:
				/* rdma_cm may reject a request whose queue pair
				 * number its table still holds from an earlier
				 * test's connection (a stale connection), and a
				 * listener drops a handshake that a slow guest
				 * could not finish in RIG_CM_HALF_OPEN_MS: the
				 * dialer may try again (rig(7) CONNECTIONS BY
				 * ADDRESS). */
				if (r[i].news == RIG_NEWS_DIALED && r[i].result < 0 &&
				    e->redials < 100 + e->max) {
					e->redials++;
					cr_assert_eq(rig_loop_dial(e->loop, e->to, e->port,
								   LONG_MS * 1000ll,
								   r[i].cookie), 0);
					break;
				}
				cr_assert_eq(r[i].result, 0, "%s: a connection failed: %d",
					     e->name, r[i].result);
				cr_assert_lt(e->n, e->max, "%s: too many connections", e->name);
				e->gone[e->n] = 1;
				e->qp[e->n++] = r[i].qp;
				post_receives(e, r[i].qp, NRECV);
				break;
			case RIG_NEWS_RING:
				e->ring_news++;
				take_all(e, r[i].qp, r[i].side);
				break;
			case RIG_NEWS_GONE:
				k = index_of(e, r[i].qp);
				cr_assert_eq(e->gone[k], 1, "%s: RIG_NEWS_GONE twice", e->name);
				e->gone[k] = r[i].result;
				e->gone_at[k] = t_now_ms();
				e->ngone++;
				break;
			default:
				cr_assert_fail("%s: news %d", e->name, r[i].news);
			}
		}
	} while (n == 64);
}

/* Runs both loops until @done says so or @end (t_now_ms) passes (with
 * @done NULL, until @end); the test's one thread is every queue pair's
 * owner. */
static bool pump(struct end *a, struct end *b, double end,
		 bool (*done)(struct end *, struct end *))
{
	struct pollfd p[2] = { { rig_loop_fd(a->loop), POLLIN, 0 },
			       { rig_loop_fd(b->loop), POLLIN, 0 } };
	double left;

	while (!done || !done(a, b)) {
		left = end - t_now_ms();
		if (left <= 0)
			return !done;
		poll(p, 2, left > 20 ? 20 : (int)left + 1);
		end_handle(a);
		end_handle(b);
	}
	return true;
}

static int want_ok;	/* messages each end must receive: got_all */

static bool got_all(struct end *a, struct end *b)
{
	return a->ok_bytes >= want_ok && b->ok_bytes >= want_ok;
}

static bool all_up(struct end *a, struct end *b)
{
	return a->n == a->max && b->n == b->max;
}

static bool all_gone(struct end *a, struct end *b)
{
	return a->ngone == a->n && b->ngone == b->n &&
	       a->taken == a->n * NRECV && b->taken == b->n * NRECV;
}

/* @n connections from a (rxe0, dialing) to b (rxe1, listening). */
static void connect_ends(struct end *a, struct end *b, int n, uint16_t port)
{
	const char *bip = getenv("RIG_TEST_PEER_IP");
	double t0 = t_now_ms(), bound = LONG_MS + 200.0 * n;	/* ~20 ms a queue pair */
	int i, ret;

	a->to = bip;
	a->port = port;
	ret = rig_loop_listen(b->loop, bip, port, 1, &b->l);
	cr_assert_eq(ret, 0, "rig_loop_listen: %d %s", ret, rig_errmsg());
	/* A listener takes RIG_CM_HANDSHAKES at a time: dial in waves. */
	for (i = 0; i < n; i++) {
		ret = rig_loop_dial(a->loop, bip, port, LONG_MS * 1000ll, (uint64_t)i + 1);
		cr_assert_eq(ret, 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
		if (i % 32 == 31 || i == n - 1)
			while (a->n < i + 1) {
				cr_assert_lt(t_now_ms(), t0 + bound, "%d and %d of %d "
					     "connections up (%d and %d gone)", a->n, b->n, n,
					     a->ngone, b->ngone);
				pump(a, b, t_now_ms() + 20, NULL);
			}
	}
	cr_assert(pump(a, b, t0 + bound, all_up), "%d and %d of %d connections up in %.0f ms "
		  "(%d and %d gone)", a->n, b->n, n, bound, a->ngone, b->ngone);
	cr_assert_eq(a->ngone + b->ngone, 0, "connections gone while connecting");
	fprintf(stderr, "test_live: %d connections up in %.0f ms (%d dials refused and "
		"made again)\n", n, t_now_ms() - t0, a->redials);
}

/* Packets rxe sent on @dev so far. */
static long long sent_pkts(const char *dev)
{
	char path[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/sent_pkts",
		 dev);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(fscanf(f, "%lld", &v), 1);
	fclose(f);
	return v;
}

/* CPU time of this process, in ms. */
static double cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 +
	       ru.ru_stime.tv_sec * 1e3 + ru.ru_stime.tv_usec / 1e3;
}

static void require_two_hosts(void)
{
	if (!t_peer_dev())
		cr_skip_test("liveness across a cut wire needs the two-host topology");
}

TestSuite(live, .timeout = 600, .init = t_stall_start, .fini = t_wire_mend);

/*
 * The probe is invisible. Connections that only receive, both ends live
 * and idle for 10 intervals of 100 ms: no completion in either ring, no
 * news of a ring (a probe's completion event is the loop's own), no
 * failure, each ring's room what the application left
 * (Q1: all 4095 on the send rings; the probes take a send-queue request
 * of their own), while the wire carries the probes: each end sends at
 * least one packet per connection per interval, probe or acknowledgement.
 * Then a send on each: its completion is its own (the probe's, read first
 * by the poll, is dropped), with its bytes, and the peer receives them.
 */
Test(live, probe_shows_in_no_ring)
{
	enum { N = 10, INTERVAL = 100, IDLE = 10 * INTERVAL };
	struct end a, b;
	long long pa, pb;
	double t0;
	int i, ret;

	require_two_hosts();
	end_open(&a, "a", t_dev(), N, INTERVAL);
	end_open(&b, "b", t_peer_dev(), N, INTERVAL);
	connect_ends(&a, &b, N, PORT);
	pa = sent_pkts(t_dev());
	pb = sent_pkts(t_peer_dev());
	t0 = t_now_ms();
	pump(&a, &b, t0 + IDLE, NULL);
	pa = sent_pkts(t_dev()) - pa;
	pb = sent_pkts(t_peer_dev()) - pb;
	fprintf(stderr, "test_live: %d idle connections, %d ms at %d ms: rxe0 sent %lld "
		"packets, rxe1 %lld (%.1f per connection per interval each way)\n", N, IDLE,
		INTERVAL, pa, pb, (pa + pb) / 2.0 / N / (IDLE / INTERVAL));
	cr_assert_eq(a.taken + b.taken, 0, "%d completions taken while idle",
		     a.taken + b.taken);
	cr_assert_eq(a.ring_news + b.ring_news, 0, "%d rings handed out while idle",
		     a.ring_news + b.ring_news);
	cr_assert_eq(a.ngone + b.ngone, 0);
	/* A probe and its acknowledgement per connection and interval, at
	 * least half of what a pass every interval makes (the loop's timer
	 * may run late on a busy machine), from each side. */
	cr_assert_geq(pa, N * (IDLE / INTERVAL) / 2, "rxe0 sent %lld packets", pa);
	cr_assert_geq(pb, N * (IDLE / INTERVAL) / 2, "rxe1 sent %lld packets", pb);
	for (i = 0; i < N; i++) {
		struct rig_qp_stats s = { .size = sizeof(s) };
		struct rig_completion c;

		cr_assert_eq(rig_qp_failure(a.qp[i], NULL), 0);
		cr_assert_eq(rig_qp_failure(b.qp[i], NULL), 0);
		cr_assert_eq(rig_qp_room(a.qp[i], RIG_SEND), RIG_RING_ENTRIES);
		cr_assert_eq(rig_qp_room(b.qp[i], RIG_SEND), RIG_RING_ENTRIES);
		cr_assert_eq(rig_qp_room(a.qp[i], RIG_RECEIVE), RIG_RING_ENTRIES - NRECV);
		cr_assert_eq(rig_qp_poll(a.qp[i], RIG_SEND, &c), 0);
		cr_assert_eq(rig_qp_poll(b.qp[i], RIG_SEND, &c), 0);
		cr_assert_eq(rig_qp_poll(a.qp[i], RIG_RECEIVE, &c), 0);
		cr_assert_eq(rig_qp_poll(b.qp[i], RIG_RECEIVE, &c), 0);
		cr_assert_eq(rig_qp_stats(a.qp[i], RIG_SEND, &s), 0);
		cr_assert_eq(s.posted, 0, "a probe counted as an entry of the ring");
		cr_assert_eq(s.taken, 0);
	}
	/* A send each way on every connection, after the probes. */
	for (i = 0; i < N; i++) {
		ret = rig_qp_send(a.qp[i], a.buf.r, 0, MSG);
		cr_assert_eq(ret, 0, "rig_qp_send: %d %s", ret, rig_errmsg());
		ret = rig_qp_send(b.qp[i], b.buf.r, 0, MSG);
		cr_assert_eq(ret, 0, "rig_qp_send: %d %s", ret, rig_errmsg());
	}
	for (i = 0; i < N; i++) {
		struct rig_completion c = t_take(a.qp[i], RIG_SEND, 5000);

		cr_assert_eq(c.error, 0, "a send after the probes: %d %s", c.error, c.why);
		cr_assert_eq(c.bytes, MSG);
		c = t_take(b.qp[i], RIG_SEND, 5000);
		cr_assert_eq(c.error, 0, "a send after the probes: %d %s", c.error, c.why);
		cr_assert_eq(c.bytes, MSG);
	}
	a.ok_bytes = b.ok_bytes = 0;
	want_ok = N;
	pump(&a, &b, t_now_ms() + 10000, got_all);
	cr_assert_eq(a.ok_bytes, N, "a received %d of %d messages", a.ok_bytes, N);
	cr_assert_eq(b.ok_bytes, N, "b received %d of %d messages", b.ok_bytes, N);
	cr_assert_eq(a.other_taken + b.other_taken + a.failed_taken + b.failed_taken, 0);
	end_close(&a);
	end_close(&b);
}

/*
 * The wire is cut (every packet lost on both ends of the veth) under
 * idle connections that only receive: each end fails every one of them
 * with -ETIMEDOUT (F3: its receives complete with it, in order) within
 * two intervals and the transport's retries, and its loop hands out
 * RIG_NEWS_GONE with -ETIMEDOUT for each, once. Before the cut, two
 * intervals pass with no failure.
 */
Test(live, F3_cut_wire_fails_every_idle_connection)
{
	int n = conns_wanted(100);
	/* 500 ms; the default beyond 200 connections, whose passes take
	 * the emulated guest's loop long enough to delay handshakes */
	const int INTERVAL = n > 200 ? RIG_LIVENESS_MS : 500;
	struct end a, b;
	long long pa;
	double t0, worst = 0, cpu, bound;
	int i, st;

	require_two_hosts();
	end_open(&a, "a", t_dev(), n, INTERVAL);
	end_open(&b, "b", t_peer_dev(), n, INTERVAL);
	connect_ends(&a, &b, n, PORT + 1);
	/* Idle and live: the figures of a pass, and no false alarm. */
	pa = sent_pkts(t_dev());
	cpu = cpu_ms();
	t0 = t_now_ms();
	pump(&a, &b, t0 + 4 * INTERVAL, NULL);
	fprintf(stderr, "test_live: %d idle connections each way at %d ms: %.0f packets/s "
		"from rxe0, this process %.1f%% of a CPU for both ends\n", n, INTERVAL,
		(sent_pkts(t_dev()) - pa) * 1000.0 / (t_now_ms() - t0),
		(cpu_ms() - cpu) * 100.0 / (t_now_ms() - t0));
	cr_assert_eq(a.ngone + b.ngone + a.taken + b.taken, 0, "news before the cut");

	t_sh("tc qdisc add dev %s root netem loss 100%%", t_netdev());
	t_sh("tc qdisc add dev %s root netem loss 100%%", t_peer_netdev());
	t0 = t_now_ms();
	bound = 2 * INTERVAL + RETRY_MAX_MS;
	pump(&a, &b, t0 + LONG_MS, all_gone);
	for (i = 0; i < n; i++) {
		cr_assert_eq(a.gone[i], -ETIMEDOUT, "a %d: RIG_NEWS_GONE %d", i, a.gone[i]);
		cr_assert_eq(b.gone[i], -ETIMEDOUT, "b %d: RIG_NEWS_GONE %d", i, b.gone[i]);
		cr_assert_eq(rig_qp_failure(a.qp[i], &st), -ETIMEDOUT);
		cr_assert_eq(st, IBV_WC_RETRY_EXC_ERR, "wc status %d", st);
		cr_assert_eq(rig_qp_failure(b.qp[i], &st), -ETIMEDOUT);
		if (a.gone_at[i] - t0 > worst)
			worst = a.gone_at[i] - t0;
		if (b.gone_at[i] - t0 > worst)
			worst = b.gone_at[i] - t0;
	}
	cr_assert_eq(a.failed_taken, n * NRECV, "a: %d receives failed with -ETIMEDOUT, "
		     "%d otherwise", a.failed_taken, a.other_taken);
	cr_assert_eq(b.failed_taken, n * NRECV, "b: %d receives failed with -ETIMEDOUT, "
		     "%d otherwise", b.failed_taken, b.other_taken);
	fprintf(stderr, "test_live: the wire cut under %d idle connections each way: the "
		"last RIG_NEWS_GONE after %.0f ms (interval %d ms; bound %.0f ms + %.0f "
		"stalled)\n", n, worst, INTERVAL, bound, t_stall_max_ms());
	cr_assert_leq(worst, bound + t_stall_max_ms(), "the last connection failed %.0f ms "
		      "after the cut", worst);
	t_wire_mend();
	end_close(&a);
	end_close(&b);
}

/*
 * No false alarm: 200 connections carry bursts of messages both ways
 * while the wire delays every packet by 0 to 50 ms (netem, both ends),
 * over 8 intervals of 250 ms: no connection fails, none is declared
 * gone, and every message arrives.
 */
Test(live, no_false_alarm_under_jitter_and_load)
{
	enum { N = 200, INTERVAL = 250, ROUNDS = 8, BURST = 2 };
	struct end a, b;
	double t0;
	int i, j, r, ret, sent = 0;

	require_two_hosts();
	end_open(&a, "a", t_dev(), N, INTERVAL);
	end_open(&b, "b", t_peer_dev(), N, INTERVAL);
	connect_ends(&a, &b, N, PORT + 2);
	t_sh("tc qdisc add dev %s root netem delay 25ms 25ms", t_netdev());
	t_sh("tc qdisc add dev %s root netem delay 25ms 25ms", t_peer_netdev());
	t0 = t_now_ms();
	for (r = 0; r < ROUNDS; r++) {
		/* a burst on half the connections, the other half idle (probed) */
		for (i = r % 2; i < N; i += 2)
			for (j = 0; j < BURST; j++) {
				ret = rig_qp_send(a.qp[i], a.buf.r, 0, MSG);
				cr_assert_eq(ret, 0, "rig_qp_send: %d %s", ret, rig_errmsg());
				ret = rig_qp_send(b.qp[i], b.buf.r, 0, MSG);
				cr_assert_eq(ret, 0, "rig_qp_send: %d %s", ret, rig_errmsg());
				sent++;
			}
		pump(&a, &b, t0 + (r + 1) * INTERVAL, NULL);
	}
	want_ok = sent;
	pump(&a, &b, t_now_ms() + LONG_MS / 4, got_all);
	t_wire_mend();
	fprintf(stderr, "test_live: %d connections, %d messages each way under 0-50 ms "
		"jitter for %.0f ms: %d gone\n", N, sent, t_now_ms() - t0, a.ngone + b.ngone);
	cr_assert_eq(a.ngone + b.ngone, 0, "%d connections declared gone", a.ngone + b.ngone);
	for (i = 0; i < N; i++) {
		int st, err = rig_qp_failure(a.qp[i], &st);

		if (!err)
			err = rig_qp_failure(b.qp[i], &st);
		if (err)
			fprintf(stderr, "test_live: connection %d failed: %d (wc status %d)\n",
				i, err, st);
	}
	cr_assert_eq(a.other_taken + b.other_taken + a.failed_taken + b.failed_taken, 0,
		     "failed completions: %d %d (stalled %.0f ms)", a.failed_taken +
		     b.failed_taken, a.other_taken + b.other_taken, t_stall_max_ms());
	cr_assert_eq(a.ok_bytes, sent, "a received %d of %d", a.ok_bytes, sent);
	cr_assert_eq(b.ok_bytes, sent, "b received %d of %d", b.ok_bytes, sent);
	for (i = 0; i < N; i++)
		cr_assert_eq(rig_qp_failure(a.qp[i], NULL) | rig_qp_failure(b.qp[i], NULL), 0);
	end_close(&a);
	end_close(&b);
}
