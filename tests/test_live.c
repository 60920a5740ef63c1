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
 * (default 200, 50 under ASan, so that the suite fits CI's time; make
 * check-long runs 1000). Both ends live in this guest, so 1000 connections are 2000
 * queue pairs: give the guest room (RIG_RXE_VM_MEM=10240; Soft-RoCE backs
 * each queue pair with about 3.8 MiB of kernel memory, rig(7) LIVENESS).
 * RIG_TEST_LIVE_OFF=1 turns the probes off: the cut test then fails.
 * RIG_TEST_LIVE_DELAY_MS sets the jitter test's mean delay (default 25:
 * 0 to 50 ms); past the transport's retry budget (about 470 ms on
 * Soft-RoCE) that test fails, as it must. Each test prints its figures on
 * stderr.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/times.h>
#include <unistd.h>

#include "internal.h"
#include "t_device.h"

/* Under ASan each queue pair costs the emulated guest about three times
 * as much: the ASan tree runs the same paths with fewer connections. */
#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#endif
#endif
#ifndef T_ASAN
#define T_ASAN 0
#endif

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
	/* While connecting, a handshake that failed after its news (the
	 * listener's ACCEPTED comes before its answer, the dialer's DIALED
	 * before its last message) ends in RIG_NEWS_GONE: its queue pair is
	 * destroyed and dropped, and the dialer dials again. */
	bool connecting;
	int dropped;
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
	/* room for handshakes that fail after their news, until dropped */
	e->qp = calloc(2 * max, sizeof(*e->qp));
	e->gone = calloc(2 * max, sizeof(*e->gone));
	e->gone_at = calloc(2 * max, sizeof(*e->gone_at));
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

static bool has(const struct end *e, const struct rig_qp *qp)
{
	int i;

	for (i = 0; i < e->n; i++)
		if (e->qp[i] == qp)
			return true;
	return false;
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
				cr_assert_lt(e->n, 2 * e->max, "%s: too many connections", e->name);
				e->gone[e->n] = 1;
				e->qp[e->n++] = r[i].qp;
				post_receives(e, r[i].qp, NRECV);
				break;
			case RIG_NEWS_RING:
				/* of a queue pair dropped earlier in this batch? */
				if (e->connecting && !has(e, r[i].qp))
					break;
				e->ring_news++;
				take_all(e, r[i].qp, r[i].side);
				break;
			case RIG_NEWS_GONE:
				k = index_of(e, r[i].qp);
				if (e->connecting) {
					cr_assert_eq(rig_qp_destroy(r[i].qp), 0, "%s: %s",
						     e->name, rig_errmsg());
					e->qp[k] = e->qp[--e->n];
					e->dropped++;
					if (e->to && e->redials < 100 + e->max) {
						e->redials++;
						cr_assert_eq(rig_loop_dial(e->loop, e->to, e->port,
									   LONG_MS * 1000ll,
									   r[i].cookie), 0);
					}
					break;
				}
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

/* @n connections from a (rxe0, dialing) to b (rxe1, listening), dialed
 * in one burst: the loop keeps the dials beyond the few it runs at once
 * queued (rig(7) CONNECTIONS BY ADDRESS). */
static void connect_ends(struct end *a, struct end *b, int n, uint16_t port)
{
	const char *bip = getenv("RIG_TEST_PEER_IP");
	double t0 = t_now_ms(), bound = LONG_MS + 200.0 * n;	/* ~20 ms a queue pair */
	int i, ret;

	a->to = bip;
	a->port = port;
	a->connecting = b->connecting = true;
	ret = rig_loop_listen(b->loop, bip, port, 1, &b->l);
	cr_assert_eq(ret, 0, "rig_loop_listen: %d %s", ret, rig_errmsg());
	for (i = 0; i < n; i++) {
		ret = rig_loop_dial(a->loop, bip, port, LONG_MS * 1000ll, (uint64_t)i + 1);
		cr_assert_eq(ret, 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
	}
	cr_assert(pump(a, b, t0 + bound, all_up), "%d and %d of %d connections up in %.0f ms "
		  "(%d and %d gone)", a->n, b->n, n, bound, a->ngone, b->ngone);
	/* The listener's side of a handshake ends after its news, once the
	 * dialer's last message came: one that a loaded guest delays past
	 * RIG_CM_HALF_OPEN_MS fails then. Settle: a half-open bound with no
	 * handshake dropped, every connection up. */
	for (;;) {
		int dropped = a->dropped + b->dropped;

		pump(a, b, t_now_ms() + RIG_CM_HALF_OPEN_MS + 500, NULL);
		cr_assert(pump(a, b, t0 + bound, all_up), "%d and %d of %d connections up "
			  "in %.0f ms", a->n, b->n, n, bound);
		if (a->dropped + b->dropped == dropped)
			break;
	}
	a->connecting = b->connecting = false;
	/* what the dropped handshakes' rings reported is theirs */
	a->taken = a->failed_taken = a->other_taken = 0;
	b->taken = b->failed_taken = b->other_taken = 0;
	fprintf(stderr, "test_live: %d connections up in %.0f ms (%d dials made again; "
		"%d and %d handshakes failed after their news)\n", n, t_now_ms() - t0,
		a->redials, a->dropped, b->dropped);
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

/* Packets @netdev sent so far (the veth's own count: every frame). */
static long long veth_tx(const char *netdev)
{
	char path[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/net/%s/statistics/tx_packets", netdev);
	f = fopen(path, "r");
	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	cr_assert_eq(fscanf(f, "%lld", &v), 1);
	fclose(f);
	return v;
}

/* CPU time of the calling thread, in ms: the one thread that runs both
 * loops (the probes' posts on Soft-RoCE are its system time). */
static double cpu_ms(void)
{
	struct rusage ru;

	getrusage(RUSAGE_THREAD, &ru);
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

/* ---- L1: what a probe writes, and that the peer's NIC checks its key ----- */

/* A spy in the NIC context's post_send (ibv_post_send calls through it):
 * it copies each liveness probe (wr_id UINT64_MAX, lib/internal.h) as
 * posted, and with spy_corrupt set posts it with its rkey changed. */
static int (*spy_real)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static struct ibv_send_wr spy_wr;
static struct ibv_sge spy_sge;
static int spy_probes;
static bool spy_corrupt;

static int spy_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct ibv_send_wr w;

	if (wr->wr_id != RIG__PROBE_WR_ID)
		return spy_real(qp, wr, bad);
	spy_wr = *wr;
	if (wr->num_sge)
		spy_sge = wr->sg_list[0];
	spy_probes++;
	w = *wr;
	if (spy_corrupt)
		w.wr.rdma.rkey ^= 0x5a;	/* the sink's MR, a key it never had */
	return spy_real(qp, &w, bad);
}

static void spy_on(struct rig_nic *nic, bool corrupt)
{
	spy_probes = 0;
	spy_corrupt = corrupt;
	spy_real = nic->ctx->ops.post_send;
	nic->ctx->ops.post_send = spy_post_send;
}

static void spy_off(struct rig_nic *nic)
{
	nic->ctx->ops.post_send = spy_real;
}

static bool spied_three(struct end *a, struct end *b)
{
	(void)a;
	(void)b;
	return spy_probes >= 3;
}

static bool a_gone(struct end *a, struct end *b)
{
	(void)b;
	return a->ngone == a->n;
}

/*
 * L1: a probe to a peer of rig 0.4 ("rig3") is an RDMA WRITE of one
 * byte, from the dialer's sink (its lkey), to the peer's sink: the
 * rkey and address the peer's NIC registered and sent. Three probes go
 * out and come back acknowledged: no failure, no news, nothing in a
 * ring.
 */
Test(live, L1_a_probe_writes_one_byte_into_the_peer_sink)
{
	struct end a, b;

	require_two_hosts();
	end_open(&a, "a", t_dev(), 1, 100);
	end_open(&b, "b", t_peer_dev(), 1, 100);
	connect_ends(&a, &b, 1, PORT + 10);
	spy_on(a.nic, false);
	pump(&a, &b, t_now_ms() + LONG_MS, spied_three);
	spy_off(a.nic);
	cr_assert_geq(spy_probes, 3, "%d probes in %d ms", spy_probes, LONG_MS);
	cr_assert_eq(spy_wr.opcode, IBV_WR_RDMA_WRITE, "opcode %d", spy_wr.opcode);
	cr_assert_eq(spy_wr.num_sge, 1, "%d SGEs", spy_wr.num_sge);
	cr_assert_eq(spy_sge.length, 1, "%u bytes", spy_sge.length);
	cr_assert_eq(spy_sge.addr, (uintptr_t)a.nic->sink, "from %#llx, not the sink",
		     (unsigned long long)spy_sge.addr);
	/* Across hosts both queue pairs are far (M4): the sink's keys are
	 * those of its registration in the far domain. */
	cr_assert_eq(spy_sge.lkey, a.nic->far_sink_mr->lkey);
	cr_assert_eq(spy_wr.wr.rdma.rkey, b.nic->far_sink_mr->rkey,
		     "rkey %#x, the peer's sink's is %#x", spy_wr.wr.rdma.rkey,
		     b.nic->far_sink_mr->rkey);
	cr_assert_eq(spy_wr.wr.rdma.remote_addr, (uintptr_t)b.nic->sink,
		     "to %#llx, the peer's sink is at %p",
		     (unsigned long long)spy_wr.wr.rdma.remote_addr, b.nic->sink);
	pump(&a, &b, t_now_ms() + 300, NULL);	/* the last probe's CQE */
	cr_assert_eq(rig_qp_failure(a.qp[0], NULL), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_failure(b.qp[0], NULL), 0, "%s", rig_errmsg());
	cr_assert_eq(a.ngone + b.ngone + a.taken + b.taken + a.ring_news + b.ring_news, 0);
	end_close(&a);
	end_close(&b);
}

/*
 * L1: the peer's NIC checks the probe's rkey. The dialer's probes go
 * out with their rkey changed (the spy): the first one fails the
 * connection with a remote access error, -EACCES (IBV_WC_REM_ACCESS_ERR),
 * and RIG_NEWS_GONE. rig 0.3's probe, zero bytes with rkey 0, never
 * failed so on Soft-RoCE whatever its key: a zero-length write skips the
 * key (rxe_resp.c, check_rkey; the IBTA, compliance statement 9-88).
 */
Test(live, L1_a_probe_with_a_wrong_rkey_fails_with_a_remote_access_error)
{
	struct end a, b;
	int st;

	require_two_hosts();
	end_open(&a, "a", t_dev(), 1, 100);
	end_open(&b, "b", t_peer_dev(), 1, 0);
	connect_ends(&a, &b, 1, PORT + 11);
	spy_on(a.nic, true);
	pump(&a, &b, t_now_ms() + LONG_MS, a_gone);
	spy_off(a.nic);
	cr_assert_geq(spy_probes, 1);
	cr_assert_eq(a.gone[0], -EACCES, "RIG_NEWS_GONE %d (1: none) after %d probes",
		     a.gone[0], spy_probes);
	cr_assert_eq(rig_qp_failure(a.qp[0], &st), -EACCES);
	cr_assert_eq(st, IBV_WC_REM_ACCESS_ERR, "wc status %d", st);
	fprintf(stderr, "test_live: a probe with a wrong rkey: -EACCES (%s) after %d probes\n",
		ibv_wc_status_str(st), spy_probes);
	end_close(&a);
	end_close(&b);
}

/* The wire cut, as test_remote cuts it: every packet either end sends is
 * lost, ARP included, and both neighbour caches forget the other's MAC.
 * Each end's own link stays up. t_wire_mend() (and the suite's fini)
 * mends it. */
static void wire_cut(void)
{
	t_sh("tc qdisc add dev %s root netem loss 100%%", t_netdev());
	t_sh("tc qdisc add dev %s root netem loss 100%%", t_peer_netdev());
	t_sh("ip neigh flush dev %s", t_netdev());
	t_sh("ip neigh flush dev %s", t_peer_netdev());
}

/*
 * L1: the wire is cut under idle connections that only receive (no
 * entry on any send ring, on either end: nothing but the probes could
 * ever tell): each end fails every one of them with -ETIMEDOUT (F3: its
 * receives complete with it, in order) within two intervals and the
 * transport's retries, and its loop hands out RIG_NEWS_GONE with
 * -ETIMEDOUT for each, once: all 2n queue pairs. Before the cut, four
 * intervals pass with no news at all. The probes start once every
 * connection is up (rig_loop_liveness on a running loop), at 500 ms, so
 * that the whole test stays within a minute in the emulated guest.
 * Prints its figures: the probe packets per second on the veth and the
 * CPU of the thread that runs both loops while idle, and the time each
 * end took to notice the cut (the slowest connection's).
 */
Test(live, L1_F3_cut_wire_fails_every_idle_receive_only_connection)
{
	enum { INTERVAL = 500 };
	int n = conns_wanted(T_ASAN ? 50 : 200);
	struct end a, b;
	long long pa, pb;
	double t0, worst_a = 0, worst_b = 0, cpu, bound, idle;
	int i, st;

	require_two_hosts();
	end_open(&a, "a", t_dev(), n, 0);
	end_open(&b, "b", t_peer_dev(), n, 0);
	connect_ends(&a, &b, n, PORT + 1);
	if (!getenv("RIG_TEST_LIVE_OFF") || *getenv("RIG_TEST_LIVE_OFF") != '1') {
		cr_assert_eq(rig_loop_liveness(a.loop, INTERVAL), 0);
		cr_assert_eq(rig_loop_liveness(b.loop, INTERVAL), 0);
	}
	/* Idle and live: the figures of the passes, and no false alarm. */
	pump(&a, &b, t_now_ms() + INTERVAL, NULL);	/* the first pass */
	pa = veth_tx(t_netdev());
	pb = veth_tx(t_peer_netdev());
	cpu = cpu_ms();
	t0 = t_now_ms();
	pump(&a, &b, t0 + 4 * INTERVAL, NULL);
	idle = t_now_ms() - t0;
	fprintf(stderr, "test_live: %d idle connections each way, interval %d ms: "
		"%.0f packets/s on %s, %.0f on %s; the loops' thread %.1f ms of CPU per "
		"second (both ends)\n", n, INTERVAL,
		(veth_tx(t_netdev()) - pa) * 1000.0 / idle, t_netdev(),
		(veth_tx(t_peer_netdev()) - pb) * 1000.0 / idle, t_peer_netdev(),
		(cpu_ms() - cpu) * 1000.0 / idle);
	cr_assert_eq(a.ngone + b.ngone + a.taken + b.taken, 0, "news before the cut");

	wire_cut();
	t0 = t_now_ms();
	bound = 2 * INTERVAL + RETRY_MAX_MS;
	pump(&a, &b, t0 + LONG_MS, all_gone);
	for (i = 0; i < n; i++) {
		cr_assert_eq(a.gone[i], -ETIMEDOUT, "a %d: RIG_NEWS_GONE %d (1: none)", i,
			     a.gone[i]);
		cr_assert_eq(b.gone[i], -ETIMEDOUT, "b %d: RIG_NEWS_GONE %d (1: none)", i,
			     b.gone[i]);
		cr_assert_eq(rig_qp_failure(a.qp[i], &st), -ETIMEDOUT);
		cr_assert_eq(st, IBV_WC_RETRY_EXC_ERR, "wc status %d", st);
		cr_assert_eq(rig_qp_failure(b.qp[i], &st), -ETIMEDOUT);
		cr_assert_eq(st, IBV_WC_RETRY_EXC_ERR, "wc status %d", st);
		if (a.gone_at[i] - t0 > worst_a)
			worst_a = a.gone_at[i] - t0;
		if (b.gone_at[i] - t0 > worst_b)
			worst_b = b.gone_at[i] - t0;
	}
	cr_assert_eq(a.failed_taken, n * NRECV, "a: %d receives failed with -ETIMEDOUT, "
		     "%d otherwise", a.failed_taken, a.other_taken);
	cr_assert_eq(b.failed_taken, n * NRECV, "b: %d receives failed with -ETIMEDOUT, "
		     "%d otherwise", b.failed_taken, b.other_taken);
	fprintf(stderr, "test_live: the wire cut under %d idle receive-only connections "
		"each way: the slowest RIG_NEWS_GONE after %.0f ms on a, %.0f ms on b "
		"(interval %d ms; bound %.0f ms + %.0f stalled)\n", n, worst_a, worst_b,
		INTERVAL, bound, t_stall_max_ms());
	cr_assert_leq(worst_a > worst_b ? worst_a : worst_b, bound + t_stall_max_ms(),
		      "the last connection failed %.0f ms after the cut",
		      worst_a > worst_b ? worst_a : worst_b);
	t_wire_mend();
	end_close(&a);
	end_close(&b);
}

/* Busy loops, one per CPU of the guest, that load the host while they
 * run: threads that spin until told to stop. */
static volatile bool busy_on;

static void *busy_loop(void *arg)
{
	struct sched_param sp = { 0 };
	volatile unsigned long spin = 0;

	(void)arg;
	/* SCHED_IDLE: they take every cycle nobody else wants. At equal
	 * priority they would starve ksoftirqd, where Soft-RoCE's transport
	 * (its acknowledgements, its retries) runs under a packet load: an
	 * artefact of a NIC in software (hardware answers and retries in
	 * the NIC, whatever the host's CPUs do). */
	pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp);
	while (__atomic_load_n(&busy_on, __ATOMIC_RELAXED))
		spin++;
	return NULL;
}

static int busy_start(pthread_t *t, int max)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	int i, n = cpus < 1 ? 1 : cpus > max ? max : (int)cpus;

	busy_on = true;
	for (i = 0; i < n; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, busy_loop, NULL), 0);
	return n;
}

static void busy_stop(pthread_t *t, int n)
{
	int i;

	busy_on = false;
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
}

/*
 * L1, no false alarm: 200 connections (50 under ASan) made in one burst; then, with the
 * wire delaying every packet by 0 to 50 ms (netem, both ends) and the
 * guest's CPUs held by busy loops, a quarter of the connections carry
 * bursts of messages both ways while the rest stay idle (probed), over
 * 8 intervals of 250 ms: no connection fails, none is declared gone,
 * every message arrives, and the idle ones were probed (each end sends
 * at least a packet per idle connection per two intervals). A probe
 * fails only when the transport's retries run out (M3: 7 x 67 ms on
 * Soft-RoCE): with RIG_TEST_LIVE_DELAY_MS past that budget the test
 * fails, as it must (the interval sets how soon a probe goes, never how
 * long its answer may take).
 */
Test(live, L1_no_false_alarm_under_jitter_and_load)
{
	enum { N = T_ASAN ? 50 : 200, INTERVAL = 250, ROUNDS = 8, BURST = 2, BUSY = 8 };
	const char *d = getenv("RIG_TEST_LIVE_DELAY_MS");
	int delay = d && atoi(d) > 0 ? atoi(d) : 25;
	struct end a, b;
	pthread_t busy[BUSY];
	long long pa, pb;
	double t0;
	int i, j, r, ret, nbusy, sent = 0;

	require_two_hosts();
	end_open(&a, "a", t_dev(), N, INTERVAL);
	end_open(&b, "b", t_peer_dev(), N, INTERVAL);
	connect_ends(&a, &b, N, PORT + 2);
	t_sh("tc qdisc add dev %s root netem delay %dms %dms", t_netdev(), delay,
	     delay < 25 ? delay : 25);
	t_sh("tc qdisc add dev %s root netem delay %dms %dms", t_peer_netdev(), delay,
	     delay < 25 ? delay : 25);
	nbusy = busy_start(busy, BUSY);
	pa = sent_pkts(t_dev());
	pb = sent_pkts(t_peer_dev());
	t0 = t_now_ms();
	for (r = 0; r < ROUNDS; r++) {
		/* a burst on a quarter of the connections (a different
		 * quarter each round), the others idle and probed */
		for (i = r % 4; i < N; i += 4)
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
	pa = sent_pkts(t_dev()) - pa;
	pb = sent_pkts(t_peer_dev()) - pb;
	busy_stop(busy, nbusy);
	t_wire_mend();
	fprintf(stderr, "test_live: %d connections, %d messages each way under %d+-%d ms "
		"delay and %d busy loops for %.0f ms: %d gone; rxe0 sent %lld packets, rxe1 "
		"%lld (stalled %.0f ms)\n", N, sent, delay, delay < 25 ? delay : 25, nbusy,
		t_now_ms() - t0, a.ngone + b.ngone, pa, pb, t_stall_max_ms());
	for (i = 0; i < N; i++) {
		int st, err = rig_qp_failure(a.qp[i], &st);

		if (!err)
			err = rig_qp_failure(b.qp[i], &st);
		if (err)
			fprintf(stderr, "test_live: connection %d failed: %d (wc status %d)\n",
				i, err, st);
	}
	cr_assert_eq(a.ngone + b.ngone, 0, "%d connections declared gone", a.ngone + b.ngone);
	cr_assert_eq(a.other_taken + b.other_taken + a.failed_taken + b.failed_taken, 0,
		     "failed completions: %d with -ETIMEDOUT, %d otherwise (stalled %.0f ms)",
		     a.failed_taken + b.failed_taken, a.other_taken + b.other_taken,
		     t_stall_max_ms());
	cr_assert_eq(a.ok_bytes, sent, "a received %d of %d", a.ok_bytes, sent);
	cr_assert_eq(b.ok_bytes, sent, "b received %d of %d", b.ok_bytes, sent);
	for (i = 0; i < N; i++)
		cr_assert_eq(rig_qp_failure(a.qp[i], NULL) | rig_qp_failure(b.qp[i], NULL), 0);
	/* Beyond the messages and their acknowledgements (two packets a
	 * message at most), the idle three quarters were probed, each at
	 * least once per two intervals (a busy guest runs passes late). */
	cr_assert_geq(pa, 2ll * sent + (N * 3 / 4) * (ROUNDS / 2), "rxe0 sent %lld packets "
		      "for %d messages", pa, sent);
	cr_assert_geq(pb, 2ll * sent + (N * 3 / 4) * (ROUNDS / 2), "rxe1 sent %lld packets "
		      "for %d messages", pb, sent);
	end_close(&a);
	end_close(&b);
}
