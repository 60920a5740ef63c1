/* SPDX-License-Identifier: MIT */
/*
 * Races and leaks, found by machine: what a long-lived server does a
 * million times (make, connect and destroy queue pairs; open and close
 * NICs; start threads that sleep once in rig_qp_wait) must leave the
 * process's fd count where it was and its resident memory flat, and a
 * queue pair connected to another NIC handle must grant no remote access.
 *
 * The races suite at the end is for ThreadSanitizer (tests/tsan-suite).
 *
 * Counts: 300 make/connect/destroy cycles and 1000 open/close cycles by
 * default (the CI), ten times as many with RIG_TEST_LONG=1; 300 sleeping
 * threads either way.
 *
 * Memory is measured as Rss of /proc/self/smaps_rollup, after a warm-up
 * that lets malloc's arenas, glibc's cache of thread stacks and
 * libibverbs' one-time state reach their size. The slack below is what
 * malloc may keep of its free lists and top chunk, page-granular; a leak
 * of the smallest thing a cycle allocates (a queue pair's 2 x 64 KiB slot
 * rings, an io_uring's rings, a thread's stack) passes it within
 * a few dozen cycles. Under AddressSanitizer the quarantine holds freed
 * memory on purpose, so only the fds are checked there (LeakSanitizer
 * checks the heap).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t_device.h"


/* Resident memory may end this much above where it stood after the
 * warm-up (malloc's trimming threshold is 128 KiB; the rest is page
 * rounding of its arenas and libibverbs' small caches). */
#define RSS_SLACK_KB 1024

static int cycles(int ci)
{
	return t_long() ? ci * 10 : ci;
}

struct mark {
	int fds;
	long rss;
	double ms;
};

static void mark(struct mark *m)
{
	m->fds = t_fd_count();
	m->rss = t_resident_kib();
	m->ms = t_now_ms();
}

/* Fails unless @after is flat against @before; logs what the cycles cost. */
static void assert_flat(const char *what, int n, const struct mark *before,
			const struct mark *after)
{
	cr_log_info("%s: %d cycles in %.0f ms (%.3f ms each); fds %d -> %d, Rss %ld -> %ld KiB",
		    what, n, after->ms - before->ms, (after->ms - before->ms) / n,
		    before->fds, after->fds, before->rss, after->rss);
	cr_assert_eq(after->fds, before->fds, "%s: %d cycles left %d fds open", what, n,
		     after->fds - before->fds);
	if (T_ASAN || T_TSAN)
		return;
	cr_assert_leq(after->rss, before->rss + RSS_SLACK_KB,
		      "%s: %d cycles grew Rss by %ld KiB (slack %d KiB)", what, n,
		      after->rss - before->rss, RSS_SLACK_KB);
}

/* One loopback pair: made, connected to each other, destroyed. */
static void pair_cycle(struct rig_nic *nic)
{
	struct rig_qp *a = t_qp(nic), *b = t_qp(nic);
	int ret;

	t_connect(a, b);
	ret = rig_qp_destroy(a);
	cr_assert_eq(ret, 0, "rig_qp_destroy a: %d %s", ret, rig_errmsg());
	ret = rig_qp_destroy(b);
	cr_assert_eq(ret, 0, "rig_qp_destroy b: %d %s", ret, rig_errmsg());
}

Test(leaks, make_connect_destroy_is_flat, .timeout = 1800)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	int n = cycles(300), i;
	struct mark m0, m1;

	for (i = 0; i < 50; i++)
		pair_cycle(nic);
	mark(&m0);
	for (i = 0; i < n; i++)
		pair_cycle(nic);
	mark(&m1);
	assert_flat("make, connect, destroy x2", n, &m0, &m1);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

Test(leaks, open_close_is_flat, .timeout = 1800)
{
	int n = cycles(1000), i;
	struct mark m0, m1;

	for (i = 0; i < 20; i++)
		cr_assert_eq(rig_nic_close(t_nic_open(t_dev())), 0, "%s", rig_errmsg());
	mark(&m0);
	for (i = 0; i < n; i++) {
		struct rig_nic *nic = t_nic_open(t_dev());
		int ret = rig_nic_close(nic);

		cr_assert_eq(ret, 0, "cycle %d: rig_nic_close: %d %s", i, ret, rig_errmsg());
	}
	mark(&m1);
	assert_flat("open, close", n, &m0, &m1);
}

/*
 * T2: 300 threads, one after another, each sleep once and exit; each
 * sleeper's io_uring and eventfd go with its thread (wait.c's key
 * destructor). The queue pair passes from thread to thread, one at a
 * time (C3). Not scaled by RIG_TEST_LONG: 300 sleeps of 20 ms are
 * already 6 s, and the fds of each thread's io_uring and eventfd are
 * counted exactly.
 */
Test(leaks, exited_sleepers_are_flat, .timeout = 600)
{
	enum { THREADS = 300, WARM = 20 };
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *a = t_qp(nic);
	struct t_buf dst;
	struct mark m0, m1;
	int i;

	t_connect(a, a);
	t_buf(&dst, nic, 4096, 0);
	cr_assert_eq(rig_qp_receive(a, dst.r, 0, 64), 0);
	for (i = 0; i < WARM; i++)
		t_sleep_in_a_thread(a, i);
	mark(&m0);
	for (i = 0; i < THREADS; i++)
		t_sleep_in_a_thread(a, i);
	mark(&m1);
	assert_flat("threads that slept once", THREADS, &m0, &m1);
	cr_assert_eq(rig_qp_room(a, RIG_RECEIVE), RIG_RING_ENTRIES - 1, "the entry is still due");
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

static int access_flags(struct rig_qp *qp)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int ret;

	memset(&attr, 0, sizeof(attr));
	ret = ibv_query_qp(qp->ibqp, &attr, IBV_QP_ACCESS_FLAGS | IBV_QP_STATE, &init);
	cr_assert_eq(ret, 0, "ibv_query_qp: %s", strerror(ret));
	cr_assert_eq(attr.qp_state, IBV_QPS_RTS);
	return attr.qp_access_flags;
}

/*
 * M4: a queue pair connected to a queue pair of another NIC handle - a
 * second rig_nic_open of the same device, or in the two-host topology the
 * other device - grants it nothing: no remote read, write or atomic. The
 * loopback pair of one handle, for contrast, grants exactly remote read,
 * which shows the query reads what connect set.
 */
Test(leaks, M4_other_nic_handle_gets_no_remote_access)
{
	const char *other = t_other_dev();
	struct rig_nic *n1 = t_nic_open(t_dev()), *n2 = t_nic_open(other);
	struct rig_qp *a = t_qp(n1), *b = t_qp(n2), *c = t_qp(n1), *d = t_qp(n1);

	t_connect(a, b);
	cr_assert_eq(a->local, 0);
	cr_assert_eq(b->local, 0);
	cr_assert_eq(access_flags(a), 0, "%s -> %s: access %#x", t_dev(), other,
		     access_flags(a));
	cr_assert_eq(access_flags(b), 0, "%s -> %s: access %#x", other, t_dev(),
		     access_flags(b));
	t_connect(c, d);
	cr_assert_eq(access_flags(c), IBV_ACCESS_REMOTE_READ);
	cr_assert_eq(access_flags(d), IBV_ACCESS_REMOTE_READ);
	cr_assert_eq(rig_nic_close(n2), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(n1), 0, "%s", rig_errmsg());
}

/* ---- races, for ThreadSanitizer (tests/tsan-suite) -------------------- */

struct sleeper {
	struct rig_qp *qp;
	struct rig_region *r;
	int n, got;
	char msg[256];
};

/* Owns @qp (C3): posts a receive, sleeps until it completes, n times. */
static void *sleep_for_each(void *arg)
{
	struct sleeper *s = arg;
	struct rig_completion c;
	int ret;

	for (s->got = 0; s->got < s->n; s->got++) {
		ret = rig_qp_receive(s->qp, s->r, 0, 64);
		if (!ret)
			ret = rig_qp_wait(s->qp, RIG_RECEIVE, 10000000, &c);
		if (ret != 1 || c.error || c.bytes != 64) {
			snprintf(s->msg, sizeof(s->msg), "receive %d: %d, error %d (%s), %u bytes",
				 s->got, ret, ret == 1 ? c.error : 0, rig_errmsg(),
				 ret == 1 ? c.bytes : 0);
			return (void *)1;
		}
	}
	return NULL;
}

struct events_loop {
	struct rig_nic *nic;
	int stop;
	long calls;
	int ret;
};

/* rig_nic_events as an application that only polls calls it: often. */
static void *take_events(void *arg)
{
	struct events_loop *e = arg;

	while (!__atomic_load_n(&e->stop, __ATOMIC_ACQUIRE)) {
		e->ret = rig_nic_events(e->nic);
		if (e->ret < 0)
			return (void *)1;
		e->calls++;
	}
	return NULL;
}

/*
 * C3, T2: one NIC, three threads: this one ping-pongs on the hot path (a
 * to b) and sends to d every tenth round; another sleeps in rig_qp_wait
 * on d; a third calls rig_nic_events all along. Under ThreadSanitizer,
 * any access to shared state without its lock or atomics is a report.
 * 2000 rounds, or $RIG_TEST_RACE_ROUNDS (a multiple of 10; tests/run-all's
 * short TSan run takes fewer).
 */
Test(races, nic_events_beside_the_hot_path_and_a_sleeper, .timeout = 600)
{
	enum { EVERY = 10 };
	const char *env = getenv("RIG_TEST_RACE_ROUNDS");
	const int rounds = env ? atoi(env) : 2000;
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *a = t_qp(nic), *b = t_qp(nic), *c = t_qp(nic), *d = t_qp(nic);
	struct t_buf src, dst, dst_d;
	struct sleeper s;
	struct events_loop e = { nic, 0, 0, 0 };
	struct rig_completion k;
	pthread_t ts, te;
	void *ret;
	int i;

	cr_assert(rounds >= EVERY && rounds % EVERY == 0, "RIG_TEST_RACE_ROUNDS=%s", env);
	t_connect(a, b);
	t_connect(c, d);
	t_buf(&src, nic, 4096, 1);
	t_buf(&dst, nic, 4096, 0);
	t_buf(&dst_d, nic, 4096, 0);
	memset(&s, 0, sizeof(s));
	s.qp = d;
	s.r = dst_d.r;
	s.n = rounds / EVERY;
	cr_assert_eq(pthread_create(&ts, NULL, sleep_for_each, &s), 0);
	cr_assert_eq(pthread_create(&te, NULL, take_events, &e), 0);
	for (i = 0; i < rounds; i++) {
		cr_assert_eq(rig_qp_receive(b, dst.r, 0, 64), 0, "%s", rig_errmsg());
		cr_assert_eq(rig_qp_send(a, src.r, 0, 64), 0, "%s", rig_errmsg());
		k = t_take(a, RIG_SEND, 5000);
		cr_assert_eq(k.error, 0, "round %d send: %s", i, k.why);
		k = t_take(b, RIG_RECEIVE, 5000);
		cr_assert_eq(k.error, 0, "round %d receive: %s", i, k.why);
		cr_assert_eq(k.bytes, 64);
		if (i % EVERY == 0) {
			/* d's receive may come later: RNR retry is infinite. */
			cr_assert_eq(rig_qp_send(c, src.r, 0, 64), 0, "%s", rig_errmsg());
			k = t_take(c, RIG_SEND, 10000);
			cr_assert_eq(k.error, 0, "round %d send to d: %s", i, k.why);
		}
	}
	cr_assert_eq(pthread_join(ts, &ret), 0);
	cr_assert_null(ret, "sleeper: %s", s.msg);
	cr_assert_eq(s.got, rounds / EVERY);
	__atomic_store_n(&e.stop, 1, __ATOMIC_RELEASE);
	cr_assert_eq(pthread_join(te, &ret), 0);
	cr_assert_null(ret, "rig_nic_events returned %d", e.ret);
	cr_assert_geq(e.calls, 1);
	cr_log_info("%d rounds, %d sleeps, %ld rig_nic_events calls", rounds, s.got, e.calls);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}
