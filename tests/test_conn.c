/* SPDX-License-Identifier: MIT */
/*
 * The non-blocking connection path (include/rig/cm.h, include/rig/loop.h):
 * each outcome of rig_loop_dial as news, and a server loop that serves
 * honest clients while hostile ones attack it.
 *
 * The server is a thread that drives rig_loop_listen's loop in an io_uring
 * of its own and echoes one message per connection. Honest clients dial
 * it from a loop of their own in the test's thread. Hostile clients are
 * children, forked before any thread starts, that speak librdmacm
 * directly: they stall the handshake at each step it can stall, die in
 * it, flood the listener or send garbage. On one host everyone uses
 * $RIG_TEST_DEV; on two the server has $RIG_TEST_PEER_DEV and every client
 * $RIG_TEST_DEV, so each request crosses the veth.
 *
 * The server's half-open connections show in no rig call, so the tests
 * count them in the kernel's table of rdma_cm ids (`rdma resource show
 * cm_id`, iproute2): every id bound to the server's address and port but
 * the listener's.
 *
 * The tests time the server loop: run them one at a time (-j1).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "t_device.h"

/*
 * The honest exchange: the client sends a message of its own the moment
 * its dial's news comes, the server echoes it. Each side posts its
 * receive before the other can send to it: the server on
 * RIG_NEWS_ACCEPTED, which comes before the client hears the answer; the
 * client before it sends. So a slow server delays honest clients, and
 * fails none.
 */
#define MSG 32
#define SRV_SLOTS 512		/* connections the server holds at once */
#define SRV_BATCH 8		/* news the server takes per turn of its loop */
#define HONEST 200		/* honest clients of the tick-gap test */
#define FLOOD 1000		/* requests of the flood */
/* An honest dial's bound: under ASan in the emulated guest, a request
 * queued behind a flood of 1000 waits up to ~10 s for the server's turn. */
#define DIAL_US 20000000
/* What a busy two-core machine running an emulated guest may add to a
 * bound before its outcome is seen. */
#define MARGIN_MS 3000
/* The latest the server may drop a half-open connection after its answer:
 * RIG_CM_HALF_OPEN_MS, then the loop's next deadline pass, which comes once
 * the rdma_cm channel is read dry or, under a flood that never lets it
 * run dry, RIG_CM_HALF_OPEN_MS after the pass before at the latest. */
#define DROP_MAX_MS (2 * RIG_CM_HALF_OPEN_MS)
/* Honest dials under way at once from one loop: a loop makes a queue
 * pair per dial (19 ms in the emulated guest, twice that under ASan) and
 * answers replies in turn, so with 200 under way a reply would wait
 * seconds for its turn, past the server's RIG_CM_HALF_OPEN_MS. */
#define CLI_WINDOW 16
/* An honest client whose request the listener shed (-ECONNREFUSED: it
 * has RIG_CM_HANDSHAKES under way) tries again this much later. */
#define RETRY_MS 100
/* The dial bound of the timed-out dial: long enough for its address and
 * route to resolve and its request to go out on a busy two-core machine
 * running the emulated guest (300 ms was not, beside two busy loops: the
 * dial timed out before the request left), and short of rdma_cm's own
 * first retry of an unanswered request, 4.3 s. */
#define SHORT_DIAL_MS 2000
/* Resident memory may end this much above where it stood after the
 * warm-up, once malloc has given back what it keeps free: the server
 * thread's arena keeps pages that a peak of a hundred or more queue pairs
 * left fragmented. Four rounds of 200 honest connections moved Rss by
 * +250, +970, +740 and +480 KiB: a level, not a trend (and LeakSanitizer
 * finds no leak in these tests). */
#define RSS_SLACK_KB 2048
/* The tick of the tick-gap test, and the longest gap allowed. */
#define TICK_MS 1
#define GAP_MAX_MS 50.0
#define GAPS_CAP 200000

/* io_uring user_data */
enum { TAG_LOOP = 1, TAG_MORE, TAG_TICK, TAG_STOP };

static const uint64_t LISTEN_COOKIE = 0x5e5e0000cafe0001ull;

static void queue_sqe_poll(struct io_uring *ring, int fd, uint64_t tag)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	cr_assert_not_null(sqe);
	io_uring_prep_poll_add(sqe, fd, POLLIN);
	io_uring_sqe_set_data64(sqe, tag);
}

/* ---- tick gaps --------------------------------------------------------- */

/*
 * The gaps between a loop's consecutive 1 ms ticks, less the time its
 * thread waited in the guest's run queue meanwhile (its schedstat): on a
 * busy machine the guest runs the clients, the hostile children and the
 * kernel's work beside the loop, and a loop kept from the CPU is not a
 * loop that worked or slept. What is left is the loop's work, its sleeps,
 * and stalls of the whole guest, which the control loop has too. Kept as
 * well: the longest raw gap, what the machine kept a thread from running,
 * for bounds on what that thread sees; and the most CPU the thread used
 * in one gap (schedstat's first field), its own work.
 */
struct gaps {
	double *ms;
	int n;
	double last;
	double wall_max;	/* the longest raw gap; atomic */
	double cpu_max;		/* the most CPU in one gap; atomic */
	int sched_fd;		/* the ticking thread's schedstat; -1: not yet */
	double last_rq;		/* its run-queue wait at the last tick, ms */
	double last_cpu;	/* its CPU time then, ms */
	struct __kernel_timespec ts;
};

static void gaps_init(struct gaps *g)
{
	g->ms = malloc(GAPS_CAP * sizeof(*g->ms));
	cr_assert_not_null(g->ms);
	memset(g->ms, 0, GAPS_CAP * sizeof(*g->ms));	/* resident before the counts */
	g->n = 0;
	g->last = 0;
	g->wall_max = 0;
	g->cpu_max = 0;
	g->sched_fd = -1;
	g->last_rq = 0;
	g->last_cpu = 0;
	g->ts = (struct __kernel_timespec){ 0, TICK_MS * 1000000 };
}

/* The calling thread's CPU time and time in the run queue so far, in ms
 * (0 without schedstat). */
static void sched_ms(struct gaps *g, double *cpu_ms, double *rq_ms)
{
	unsigned long long cpu, rq;
	char b[96];
	ssize_t n;

	*cpu_ms = *rq_ms = 0;
	if (g->sched_fd < 0)
		return;
	n = pread(g->sched_fd, b, sizeof(b) - 1, 0);
	if (n <= 0)
		return;
	b[n] = 0;
	if (sscanf(b, "%llu %llu", &cpu, &rq) == 2) {
		*cpu_ms = cpu / 1e6;
		*rq_ms = rq / 1e6;
	}
}

/* Queues the next tick; false when the ring has no free SQE. */
static bool tick_queue(struct io_uring *ring, struct gaps *g)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe)
		return false;
	io_uring_prep_timeout(sqe, &g->ts, 0, 0);
	io_uring_sqe_set_data64(sqe, TAG_TICK);
	return true;
}

/* Another thread may read the gaps while the loop runs (the tick test's
 * fini, after a failed assertion): n and last are atomic; last is 0 once
 * the loop stopped. */
static void tick_seen(struct gaps *g)
{
	double now = t_now_ms(), rq, cpu, gap;

	if (g->sched_fd < 0) {
		g->sched_fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
		sched_ms(g, &g->last_cpu, &g->last_rq);
	}
	sched_ms(g, &cpu, &rq);
	if (g->last > 0 && g->n < GAPS_CAP) {
		gap = now - g->last;
		if (gap > g->wall_max)
			__atomic_store(&g->wall_max, &gap, __ATOMIC_RELAXED);
		g->ms[g->n] = gap - (rq - g->last_rq);
		__atomic_store_n(&g->n, g->n + 1, __ATOMIC_RELEASE);
		gap = cpu - g->last_cpu;
		if (gap > g->cpu_max)
			__atomic_store(&g->cpu_max, &gap, __ATOMIC_RELAXED);
	}
	g->last_rq = rq;
	g->last_cpu = cpu;
	__atomic_store(&g->last, &now, __ATOMIC_RELAXED);
}

static double gaps_wall_max(struct gaps *g)
{
	double max;

	__atomic_load(&g->wall_max, &max, __ATOMIC_RELAXED);
	return max;
}

static double gaps_cpu_max(struct gaps *g)
{
	double max;

	__atomic_load(&g->cpu_max, &max, __ATOMIC_RELAXED);
	return max;
}

static void tick_stop(struct gaps *g)
{
	double zero = 0;

	__atomic_store(&g->last, &zero, __ATOMIC_RELAXED);
	if (g->sched_fd >= 0)
		close(g->sched_fd);
	g->sched_fd = -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct gap_stats {
	double p50, p99, max;
	int n;
};

/* The distribution so far; a loop still running adds the gap under way. */
static struct gap_stats gaps_stats(struct gaps *g)
{
	int n = __atomic_load_n(&g->n, __ATOMIC_ACQUIRE);
	struct gap_stats s = { 0, 0, 0, 0 };
	double *v, last;

	__atomic_load(&g->last, &last, __ATOMIC_RELAXED);
	v = malloc((n + 1) * sizeof(*v));
	if (!v || !g->ms)
		goto out;
	memcpy(v, g->ms, n * sizeof(*v));
	if (last > 0)
		v[n++] = t_now_ms() - last;
	s.n = n;
	if (!n)
		goto out;
	qsort(v, n, sizeof(*v), cmp_double);
	s.p50 = v[n / 2];
	s.p99 = v[(long)n * 99 / 100];
	s.max = v[n - 1];
out:
	free(v);
	return s;
}

/* ---- the server -------------------------------------------------------- */

/*
 * A thread that drives a loop with a listener: it posts a receive on each
 * connection it accepts, echoes the message that comes, and destroys the
 * connection when the client leaves. It records what the test cannot
 * assert from its thread (Criterion asserts belong to the test's own).
 */
struct srv {
	struct rig_nic *nic;
	struct rig_loop *loop;
	struct rig_listener *l;
	uint16_t port;
	struct io_uring ring;
	int stop;			/* eventfd: the test says stop */
	bool tick;			/* tick every TICK_MS, record the gaps */
	pthread_t thread;
	struct t_buf buf;		/* SRV_SLOTS messages */
	struct rig_qp *qp[SRV_SLOTS];
	bool echoes[SRV_SLOTS];		/* its client's message came */
	/* atomics; dropped: accepted, gone before any message */
	int accepted, echoed, gone, dropped;
	struct t_fail fail;
	struct gaps gaps;
	/* the longest rig_uring_handle() call, and the longest the server
	 * took over one piece of news (of kind news_max_kind) */
	double handle_max_ms, news_max_ms;
	double handle_cpu_max_ms;	/* rig_uring_handle's, in CPU time */
	int news_max_kind;
	double destroy_max_ms;
	/* connections whose client left, to destroy */
	struct rig_qp *dead[SRV_SLOTS];
	int ndead;
	/* hostile handshakes dropped, closed until RIG_NEWS_CLOSED */
	struct rig_qp *closing[SRV_SLOTS];
	int nclosing;
};

#define srv_fail(s, ...) t_fail_say(&(s)->fail, __VA_ARGS__)
#define srv_slot(s, q) t_qp_index((s)->qp, SRV_SLOTS, (q))
#define srv_closing(s, q) (t_qp_index((s)->closing, (s)->nclosing, (q)) >= 0)

static void srv_news(struct srv *s, const struct rig_ready *r)
{
	struct rig_completion c;
	int i, ret;

	switch (r->news) {
	case RIG_NEWS_ACCEPTED:
		if (r->cookie != LISTEN_COOKIE || r->result || !r->qp) {
			srv_fail(s, "ACCEPTED with cookie %#llx (the listener's is %#llx), result %d, qp %p",
				 (unsigned long long)r->cookie, (unsigned long long)LISTEN_COOKIE,
				 r->result, (void *)r->qp);
			return;
		}
		i = srv_slot(s, NULL);
		if (i < 0) {
			srv_fail(s, "more than %d connections at once", SRV_SLOTS);
			return;
		}
		s->qp[i] = r->qp;
		__atomic_add_fetch(&s->accepted, 1, __ATOMIC_RELAXED);
		s->echoes[i] = false;
		ret = rig_qp_receive(r->qp, s->buf.r, (size_t)i * MSG, MSG);
		if (ret)
			srv_fail(s, "rig_qp_receive: %d %s", ret, rig_errmsg());
		return;
	case RIG_NEWS_RING:
		i = srv_slot(s, r->qp);
		if (i < 0) {
			/* a connection whose client left, not destroyed yet:
			 * its rings report the failure */
			for (i = 0; i < s->ndead && s->dead[i] != r->qp; i++)
				;
			/* or one closed since this batch was handed out */
			if (i == s->ndead && !srv_closing(s, r->qp))
				srv_fail(s, "news of a ring of no connection (%p)", (void *)r->qp);
			else if (i == s->ndead)
				return;
			else
				while (rig_qp_poll(r->qp, r->side, &c) == 1)
					;
			return;
		}
		while ((ret = rig_qp_poll(r->qp, r->side, &c)) == 1) {
			if (c.error)
				continue;	/* the client left: GONE follows */
			if (r->side == RIG_SEND)
				continue;
			if (c.bytes != MSG) {
				srv_fail(s, "connection %d: a message of %u bytes", i, c.bytes);
				continue;
			}
			/* counted first: the client may see the echo, and
			 * the test the count, before this thread goes on */
			__atomic_add_fetch(&s->echoed, 1, __ATOMIC_RELAXED);
			s->echoes[i] = true;
			ret = rig_qp_send(r->qp, s->buf.r, (size_t)i * MSG, MSG);
			if (ret)
				srv_fail(s, "rig_qp_send: %d %s", ret, rig_errmsg());
		}
		if (ret < 0)
			srv_fail(s, "rig_qp_poll: %d %s", ret, rig_errmsg());
		return;
	case RIG_NEWS_GONE:
		/* An honest client that left after its echo; or a handshake
		 * handed out before the answer that a hostile dialer never
		 * finished: dropped at the bound, or left (killed). */
		i = srv_slot(s, r->qp);
		if (i < 0 || r->cookie != LISTEN_COOKIE ||
		    (r->result != -ECONNRESET && (s->echoes[i] || r->result != -ETIMEDOUT))) {
			srv_fail(s, "GONE for %s connection, result %d, cookie %#llx",
				 i < 0 ? "no" : "a", r->result, (unsigned long long)r->cookie);
			return;
		}
		s->qp[i] = NULL;
		if (!s->echoes[i]) {
			/* A flood of these must not hold the loop's thread
			 * up: closed off it, by the loop's helper. */
			__atomic_add_fetch(&s->dropped, 1, __ATOMIC_RELAXED);
			ret = rig_qp_close(r->qp, 0);
			if (ret)
				srv_fail(s, "rig_qp_close: %d %s", ret, rig_errmsg());
			else if (s->nclosing < SRV_SLOTS)
				s->closing[s->nclosing++] = r->qp;
			return;
		}
		/* destroyed later, one per turn of the loop (srv_reap) */
		s->dead[s->ndead++] = r->qp;
		return;
	case RIG_NEWS_CLOSED:
		if (r->result)
			srv_fail(s, "RIG_NEWS_CLOSED with %d", r->result);
		for (i = 0; i < s->nclosing && s->closing[i] != r->qp; i++)
			;
		if (i < s->nclosing)
			s->closing[i] = s->closing[--s->nclosing];
		return;
	default:
		srv_fail(s, "news %d (result %d) on a loop that only listens", r->news, r->result);
	}
}

/*
 * Queues a no-op whose CQE says "more to do": the server takes a batch of
 * news and destroys one connection per turn of its loop, and lets its
 * other CQEs (the tick) in between, as a loop with other work would.
 * False without a free SQE.
 */
static bool more_queue(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe)
		return false;
	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, TAG_MORE);
	return true;
}

/* Destroys one connection whose client left. */
static void srv_reap(struct srv *s)
{
	double t0 = t_now_ms();
	int ret = rig_qp_destroy(s->dead[--s->ndead]);

	if (ret)
		srv_fail(s, "rig_qp_destroy: %d %s", ret, rig_errmsg());
	if (t_now_ms() - t0 > s->destroy_max_ms)
		s->destroy_max_ms = t_now_ms() - t0;
	__atomic_add_fetch(&s->gone, 1, __ATOMIC_RELAXED);
}

/* The calling thread's CPU time, in ms. */
static double thread_cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One batch of news: rig's call, then the server's work, each timed. */
static bool srv_batch(struct srv *s, const struct io_uring_cqe *cqe)
{
	struct rig_ready ready[SRV_BATCH];
	double t0 = t_now_ms(), c0 = thread_cpu_ms(), t1, t2;
	int n, i;

	n = rig_uring_handle(&s->ring, s->loop, cqe, ready, SRV_BATCH);
	t1 = t_now_ms();
	if (t1 - t0 > s->handle_max_ms)
		s->handle_max_ms = t1 - t0;
	if (thread_cpu_ms() - c0 > s->handle_cpu_max_ms)
		s->handle_cpu_max_ms = thread_cpu_ms() - c0;
	if (n < 0) {
		srv_fail(s, "rig_uring_handle: %d %s", n, rig_errmsg());
		return false;
	}
	for (i = 0; i < n; i++) {
		srv_news(s, &ready[i]);
		t2 = t_now_ms();
		if (t2 - t1 > s->news_max_ms) {
			s->news_max_ms = t2 - t1;
			s->news_max_kind = ready[i].news;
		}
		t1 = t2;
	}
	return n == SRV_BATCH;
}

static void *srv_main(void *arg)
{
	struct srv *s = arg;
	struct io_uring_cqe *cqe;
	bool stop = false, tick_due = false, more_due = false, more, batched;
	unsigned head, seen;
	int ret;

	if (s->tick) {
		s->gaps.last = t_now_ms();
		tick_due = !tick_queue(&s->ring, &s->gaps);
	}
	while (!stop) {
		ret = io_uring_submit_and_wait(&s->ring, 1);
		if (ret < 0 && ret != -EINTR) {
			srv_fail(s, "io_uring_submit_and_wait: %d", ret);
			break;
		}
		if (tick_due)
			tick_due = !tick_queue(&s->ring, &s->gaps);
		if (more_due)
			more_due = !more_queue(&s->ring);
		seen = 0;
		more = batched = false;
		io_uring_for_each_cqe(&s->ring, head, cqe) {
			seen++;
			switch (cqe->user_data) {
			case TAG_LOOP:
			case TAG_MORE:
				/* One batch per turn; but a CQE that ended the
				 * multishot poll goes to rig to queue it again. */
				if (batched && (cqe->user_data == TAG_MORE ||
						(cqe->flags & IORING_CQE_F_MORE))) {
					more = true;
					break;
				}
				more |= srv_batch(s, cqe->user_data == TAG_LOOP ? cqe : NULL);
				batched = true;
				break;
			case TAG_TICK:
				tick_seen(&s->gaps);
				tick_due = !tick_queue(&s->ring, &s->gaps);
				break;
			case TAG_STOP:
				stop = true;
				break;
			default:
				srv_fail(s, "a CQE of tag %llu", (unsigned long long)cqe->user_data);
			}
		}
		io_uring_cq_advance(&s->ring, seen);
		if (s->ndead)
			srv_reap(s);
		if ((more || s->ndead) && !more_due)
			more_due = !more_queue(&s->ring);
	}
	tick_stop(&s->gaps);
	while (s->ndead)
		srv_reap(s);
	return NULL;
}

/* @shared: its listener is rig_loops_listen's, of its one loop. */
static void srv_start(struct srv *s, uint16_t port, bool tick, bool shared)
{
	int ret;

	memset(s, 0, sizeof(*s));
	s->port = port;
	s->tick = tick;
	if (tick)
		gaps_init(&s->gaps);
	s->nic = t_nic_open(t_other_dev());
	ret = rig_loop_open(s->nic, &s->loop);
	cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	if (shared)
		ret = rig_loops_listen(&s->loop, 1, t_other_ip(), port, LISTEN_COOKIE, &s->l);
	else
		ret = rig_loop_listen(s->loop, t_other_ip(), port, LISTEN_COOKIE, &s->l);
	cr_assert_eq(ret, 0, "listen on %s:%u: %d %s", t_other_ip(), port, ret, rig_errmsg());
	t_buf(&s->buf, s->nic, SRV_SLOTS * MSG, 0);
	cr_assert_eq(io_uring_queue_init(256, &s->ring, 0), 0);
	ret = rig_uring_watch(&s->ring, s->loop, TAG_LOOP);
	cr_assert_eq(ret, 0, "rig_uring_watch: %d %s", ret, rig_errmsg());
	s->stop = eventfd(0, EFD_CLOEXEC);
	cr_assert_geq(s->stop, 0);
	queue_sqe_poll(&s->ring, s->stop, TAG_STOP);
	cr_assert_eq(pthread_create(&s->thread, NULL, srv_main, s), 0);
}

static void srv_check(struct srv *s)
{
	cr_assert(!__atomic_load_n(&s->fail.failed, __ATOMIC_ACQUIRE), "the server: %s",
		  s->fail.err);
}

static void srv_join(struct srv *s)
{
	cr_assert_eq(eventfd_write(s->stop, 1), 0);
	cr_assert_eq(pthread_join(s->thread, NULL), 0);
	srv_check(s);
}

static void srv_close(struct srv *s)
{
	int ret;

	ret = rig_listener_close(s->l);
	cr_assert_eq(ret, 0, "rig_listener_close: %d %s", ret, rig_errmsg());
	ret = rig_loop_close(s->loop);
	cr_assert_eq(ret, 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	io_uring_queue_exit(&s->ring);
	close(s->stop);
	cr_assert_eq(rig_nic_close(s->nic), 0, "%s", rig_errmsg());
}

/* A count the server thread keeps. */
#define SRV_COUNT(s, what) __atomic_load_n(&(s)->what, __ATOMIC_RELAXED)

/*
 * The server's connections on its port, half-open ones included: the
 * kernel's rdma_cm ids bound to the server's address and port, but the
 * listener. Children's ids are bound to other ports (on one host, the
 * same address).
 */
static int server_ids(uint16_t port)
{
	char want[80], line[1024];
	FILE *f;
	int n = 0, st;

	snprintf(want, sizeof(want), " src-addr %s:%u ", t_other_ip(), port);
	f = popen("rdma resource show cm_id 2>&1", "r");
	cr_assert_not_null(f, "popen(rdma): %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (strstr(line, want) && !strstr(line, " state LISTEN "))
			n++;
	st = pclose(f);
	cr_assert_eq(st, 0, "`rdma resource show cm_id` (iproute2) exited %#x", st);
	return n;
}

/* Waits until the server holds no connection on its port; returns when
 * that was seen, and fails past @end (t_now_ms()). One look at the table
 * takes 0.1-0.6 s in the emulated guest. */
static double wait_server_empty(struct srv *s, double end, const char *why)
{
	double t;
	int n;

	for (;;) {
		n = server_ids(s->port);
		t = t_now_ms();
		if (!n)
			return t;
		srv_check(s);
		cr_assert_lt(t, end, "%s: the server still holds %d connections %.0f ms past the bound",
			     why, n, t - end);
		usleep(50000);	/* polling a table; the verdict is the bound */
	}
}

/* ---- the control: a loop that only ticks -------------------------------- */

struct ctl {
	struct io_uring ring;
	int stop;
	pthread_t thread;
	struct gaps gaps;
};

static void *ctl_main(void *arg)
{
	struct ctl *c = arg;
	struct io_uring_cqe *cqe;
	bool stop = false;
	unsigned head, seen;

	c->gaps.last = t_now_ms();
	tick_queue(&c->ring, &c->gaps);
	while (!stop) {
		if (io_uring_submit_and_wait(&c->ring, 1) < 0)
			continue;
		seen = 0;
		io_uring_for_each_cqe(&c->ring, head, cqe) {
			seen++;
			if (cqe->user_data == TAG_TICK) {
				tick_seen(&c->gaps);
				tick_queue(&c->ring, &c->gaps);
			} else {
				stop = true;
			}
		}
		io_uring_cq_advance(&c->ring, seen);
	}
	tick_stop(&c->gaps);
	return NULL;
}

static void ctl_start(struct ctl *c)
{
	gaps_init(&c->gaps);
	cr_assert_eq(io_uring_queue_init(8, &c->ring, 0), 0);
	c->stop = eventfd(0, EFD_CLOEXEC);
	cr_assert_geq(c->stop, 0);
	queue_sqe_poll(&c->ring, c->stop, TAG_STOP);
	cr_assert_eq(pthread_create(&c->thread, NULL, ctl_main, c), 0);
}

static void ctl_join(struct ctl *c)
{
	cr_assert_eq(eventfd_write(c->stop, 1), 0);
	cr_assert_eq(pthread_join(c->thread, NULL), 0);
	io_uring_queue_exit(&c->ring);
	close(c->stop);
}

/* ---- honest clients ---------------------------------------------------- */

enum { C_WAITING, C_DIALING, C_TALKING, C_DONE };

/* A loop of the test's thread that dials the server. */
struct cli {
	struct rig_nic *nic;
	struct rig_loop *loop;
	struct io_uring ring;
	struct t_buf tx;		/* client i's message at i * MSG */
	struct t_buf rx;		/* its echo at (2i + 1) * MSG */
	uint64_t base;			/* the cookie of dial 0 of this round */
	struct {
		struct rig_qp *qp;
		int state;
		int got;	/* messages received */
		double retry_at;	/* shed: dial again then */
		double end;		/* served by then, or the test fails */
	} c[SRV_SLOTS];
	int rounds;
	int refused;		/* dials shed by the listener, all rounds */
};

static void cli_open(struct cli *h)
{
	int ret;

	memset(h, 0, sizeof(*h));
	h->nic = t_nic_open(t_dev());
	ret = rig_loop_open(h->nic, &h->loop);
	cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	cr_assert_eq(io_uring_queue_init(64, &h->ring, 0), 0);
	ret = rig_uring_watch(&h->ring, h->loop, TAG_LOOP);
	cr_assert_eq(ret, 0, "rig_uring_watch: %d %s", ret, rig_errmsg());
	t_buf(&h->tx, h->nic, SRV_SLOTS * MSG, 7);
	t_buf(&h->rx, h->nic, 2 * SRV_SLOTS * MSG, 0);
}

static void cli_close(struct cli *h)
{
	int ret = rig_loop_close(h->loop);

	cr_assert_eq(ret, 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	io_uring_queue_exit(&h->ring);
	cr_assert_eq(rig_nic_close(h->nic), 0, "%s", rig_errmsg());
}

/* Waits up to @ms for the loop's next news; returns how many came. */
static int cli_news(struct cli *h, int ms, struct rig_ready *ready, int max)
{
	struct __kernel_timespec ts = { ms / 1000, (ms % 1000) * 1000000ll };
	struct io_uring_cqe *cqe;
	int ret, n;

	io_uring_submit(&h->ring);
	ret = io_uring_wait_cqe_timeout(&h->ring, &cqe, &ts);
	if (ret == -ETIME)
		return 0;
	cr_assert_eq(ret, 0, "io_uring_wait_cqe_timeout: %d", ret);
	cr_assert_eq(cqe->user_data, TAG_LOOP);
	n = rig_uring_handle(&h->ring, h->loop, cqe, ready, max);
	io_uring_cqe_seen(&h->ring, cqe);
	cr_assert_geq(n, 0, "rig_uring_handle: %d %s", n, rig_errmsg());
	return n;
}

/* Waits for one piece of news, failing after @ms; returns when it came. */
static double cli_one(struct cli *h, int ms, struct rig_ready *r)
{
	double end = t_now_ms() + ms;
	int n;

	do {
		n = cli_news(h, 20, r, 1);
		if (n)
			return t_now_ms();
	} while (t_now_ms() < end);
	cr_assert_fail("no news within %d ms", ms);
	return 0;
}

/* Client @i's dial came back: it posts the echo's receive, then speaks
 * at once (the server's receive is posted). */
static void cli_speak(struct cli *h, int i, struct rig_qp *qp)
{
	int ret;

	ret = rig_qp_receive(qp, h->rx.r, (size_t)(2 * i + 1) * MSG, MSG);
	cr_assert_eq(ret, 0, "rig_qp_receive: %d %s", ret, rig_errmsg());
	ret = rig_qp_send(qp, h->tx.r, (size_t)i * MSG, MSG);
	cr_assert_eq(ret, 0, "rig_qp_send: %d %s", ret, rig_errmsg());
}

static int cli_find(struct cli *h, int n, const struct rig_qp *qp)
{
	int i;

	for (i = 0; i < n; i++)
		if (h->c[i].qp == qp && h->c[i].state == C_TALKING)
			return i;
	return -1;
}

static void cli_dial(struct cli *h, uint16_t port, int i)
{
	int ret = rig_loop_dial(h->loop, t_other_ip(), port, DIAL_US, h->base + i);

	cr_assert_eq(ret, 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
	if (h->c[i].state == C_WAITING)
		h->c[i].end = t_now_ms() + DIAL_US / 1000 + MARGIN_MS;
	h->c[i].state = C_DIALING;
	h->c[i].retry_at = 0;
}

/*
 * @n clients dial the server at once; each, once its dial's news comes
 * back with its cookie, sends its message at once, checks the
 * echo and leaves, CLI_WINDOW under way at a time. With @shed_ok, a client
 * the listener sheds dials again after RETRY_MS, as cm.h tells it to.
 * Fails the test unless each is served within its dial's bound and the
 * margin of its first dial.
 */
static void cli_round(struct cli *h, uint16_t port, int n, bool shed_ok)
{
	struct rig_ready ready[64];
	struct rig_completion c;
	int i, k, got, left = n, going = 0, ret;

	cr_assert_leq(n, SRV_SLOTS);
	h->base = 0xd1a1000000000000ull + (uint64_t)h->rounds++ * 0x100000000ull;
	for (i = 0; i < n; i++) {
		h->c[i].qp = NULL;
		h->c[i].got = 0;
		h->c[i].state = C_WAITING;
	}
	while (left) {
		for (i = 0; i < n; i++)
			cr_assert(h->c[i].state == C_WAITING || h->c[i].state == C_DONE ||
				  t_now_ms() < h->c[i].end,
				  "honest client %d not served %d ms after its first dial (%d of %d left)",
				  i, DIAL_US / 1000 + MARGIN_MS, left, n);
		for (i = 0; i < n && going < CLI_WINDOW; i++)
			if (h->c[i].state == C_WAITING) {
				cli_dial(h, port, i);
				going++;
			}
		for (i = 0; i < n; i++)
			if (h->c[i].retry_at && t_now_ms() >= h->c[i].retry_at)
				cli_dial(h, port, i);
		got = cli_news(h, 20, ready, 64);
		for (k = 0; k < got; k++) {
			struct rig_ready *r = &ready[k];

			switch (r->news) {
			case RIG_NEWS_DIALED:
				i = (int)(r->cookie - h->base);
				cr_assert(r->cookie >= h->base && i >= 0 && i < n &&
					  h->c[i].state == C_DIALING && !h->c[i].retry_at,
					  "DIALED with cookie %#llx: not one of this round's, or twice",
					  (unsigned long long)r->cookie);
				if (shed_ok && r->result == -ECONNREFUSED) {
					h->c[i].retry_at = t_now_ms() + RETRY_MS;
					h->refused++;
					break;
				}
				cr_assert_eq(r->result, 0, "honest dial %d: %d (%s)", i, r->result,
					     rig_errmsg());
				cr_assert_not_null(r->qp);
				h->c[i].qp = r->qp;
				h->c[i].state = C_TALKING;
				cli_speak(h, i, r->qp);
				break;
			case RIG_NEWS_RING:
				i = cli_find(h, n, r->qp);
				if (i < 0)
					break;	/* a client that left already */
				while (h->c[i].state == C_TALKING &&
				       (ret = rig_qp_poll(r->qp, r->side, &c)) == 1) {
					cr_assert_eq(c.error, 0, "honest client %d, %s: %s", i,
						     r->side == RIG_SEND ? "send" : "receive", c.why);
					if (r->side == RIG_SEND)
						continue;
					cr_assert_eq(c.bytes, MSG);
					h->c[i].got++;
					cr_assert_arr_eq(h->rx.mem + (size_t)(2 * i + 1) * MSG,
							 h->tx.mem + (size_t)i * MSG, MSG,
							 "client %d: the echo differs", i);
					ret = rig_qp_destroy(r->qp);
					cr_assert_eq(ret, 0, "rig_qp_destroy: %d %s", ret,
						     rig_errmsg());
					h->c[i].state = C_DONE;
					left--;
					going--;
				}
				break;
			default:
				cr_assert_fail("honest client: news %d, result %d", r->news,
					       r->result);
			}
		}
	}
}

/* ---- a gate on the server's queue pairs ---------------------------------- */

/*
 * Holds the server's helper in ibv_create_qp (the calls on the server's
 * device, t_other_dev(); librig's calls come here first), so that its
 * handshakes stay under way for as long as the test likes: a queue pair
 * being made has no bound (cm.h). Opened, it lets the held call and the
 * next ones go, the first gate.fail of them failing with ENOMEM (a NIC
 * out of queue pairs): those handshakes end at once, and free their
 * turns.
 */
static struct {
	struct t_gate g;	/* its lock guards the rest */
	bool armed;
	int fail;
} gate = { T_GATE_INIT, false, 0 };

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	static struct ibv_qp *(*real)(struct ibv_pd *, struct ibv_qp_init_attr *);
	bool fail = false;

	if (!real)
		real = T_NEXT(ibv_create_qp);
	pthread_mutex_lock(&gate.g.lock);
	if (gate.armed && !strcmp(ibv_get_device_name(pd->context->device), t_other_dev())) {
		t_gate_wait_locked(&gate.g);
		fail = gate.fail > 0;
		if (fail)
			gate.fail--;
	}
	pthread_mutex_unlock(&gate.g.lock);
	if (fail) {
		errno = ENOMEM;
		return NULL;
	}
	return real(pd, attr);
}

static void gate_arm(void)
{
	pthread_mutex_lock(&gate.g.lock);
	gate.armed = true;
	gate.g.open = false;
	gate.fail = 0;
	pthread_mutex_unlock(&gate.g.lock);
}

/* Waits until the server's helper is held, and the kernel has all of
 * the child's RIG_CM_HANDSHAKES requests: the CM takes requests in on
 * both CPUs, in no set order, so a request sent next could overtake one
 * still on its way; once the server's rdma_cm ids are there, their
 * events are in the listener's channel, which the loop reads in order. */
static void gate_wait_held(uint16_t port, int ms)
{
	double end = t_now_ms() + ms;
	int ret = t_gate_held(&gate.g, ms), n;

	cr_assert_eq(ret, 0, "the server's helper made no queue pair in %d ms", ms);
	while ((n = server_ids(port)) < RIG_CM_HANDSHAKES) {
		cr_assert_lt(t_now_ms(), end, "%d of the child's %d requests at the server", n,
			     RIG_CM_HANDSHAKES);
		usleep(50000);	/* polling a table; the verdict is the bound */
	}
}

/* Opens the gate: the next @fail queue pairs of the server fail. */
static void gate_open(int fail)
{
	pthread_mutex_lock(&gate.g.lock);
	gate.fail = fail;	/* read only by a call the gate let through */
	pthread_mutex_unlock(&gate.g.lock);
	t_gate_open(&gate.g);
}

/* Once every failure given is spent, the gate is off. */
static void gate_off(void)
{
	pthread_mutex_lock(&gate.g.lock);
	cr_assert_eq(gate.fail, 0, "%d of the server's queue pairs the gate was to fail "
		     "were never made", gate.fail);
	gate.armed = false;
	pthread_mutex_unlock(&gate.g.lock);
}

/* ---- hostile clients: children that speak librdmacm --------------------- */

enum kmode {
	K_STALL_UNREAD,	/* sends a request, then never reads an event */
	K_STALL_REPLY,	/* reads the reply, never establishes */
	K_KILL_REQUEST,	/* killed once its request is out */
	K_KILL_REPLY,	/* killed once the reply came */
	K_FLOOD,	/* FLOOD requests at once on one channel, all stalled */
	K_GARBAGE,	/* one request of each kind of garbage */
	K_FILL,		/* RIG_CM_HANDSHAKES requests at once, waiting for their end */
};

static const char *const kmode_name[] = {
	"stall after the request", "stall after the reply", "killed after the request",
	"killed after the reply", "flood", "garbage", "the handshakes filled",
};

/* Kinds of garbage private data. The transport pads what is sent with
 * zeros to 56 bytes, so "short" means "then zeros". */
enum {
	G_EMPTY,	/* nothing: 56 zeros */
	G_SHORT,	/* "rig": the tag cut short */
	G_WRONG_TAG,	/* "rig0" and a good endpoint */
	G_QP_TOO_BIG,	/* a queue pair number over 24 bits */
	G_PADDING,	/* a good endpoint, then a nonzero byte */
	G_RANDOM,	/* 56 random bytes */
	G_CUT,		/* the tag and 16 bytes of the endpoint: its GID cut */
	G_KINDS,
};

/* What a child tells the test at its end. */
struct kreport {
	int n, replied, rejected_unanswered;
	int at_once_status;	/* the REJ reason of one rejected at once */
	double drop_min_ms, drop_max_ms;	/* request to REJECTED, when replied */
	double after_reply_max_ms;	/* reply to REJECTED, the longest */
	int after_reply_max_i;		/* of which request */
	double unread_late_ms;	/* the REJ came this late to one reading late */
};

struct kid {
	enum kmode mode;
	pid_t pid;
	int go, from;		/* pipes to and from the child */
	bool killed;
	double t_kill;
	struct kreport rep;
};

struct rid {
	struct rdma_cm_id *id;
	double t_connect, t_reply, t_end;
	int end;		/* the event that ended it; -1 while open */
	int status;
	int kind;		/* of garbage, or -1 */
};

struct raw {
	struct rdma_event_channel *ch;
	struct rid *v;
	int n, sent, replied, ended;
	bool hold;		/* read no event once every request is out */
	uint32_t qp_top;	/* the queue pair numbers its requests name */
	struct rig_endpoint e;	/* a real endpoint of the child's, offered */
};

static void kid_say(int fd, char c)
{
	T_CHILD_CHECK(write(fd, &c, 1) == 1, "write to the test: %s", strerror(errno));
}

static size_t garbage(int kind, const struct rig_endpoint *e, uint8_t out[56])
{
	uint8_t ok[RIG_CM_PRIVATE];
	uint32_t x = 12345;
	int i;

	rig_cm_pack(e, ok);
	memset(out, 0, 56);
	switch (kind) {
	case G_EMPTY:
		return 0;
	case G_SHORT:
		memcpy(out, ok, 3);
		return 3;
	case G_WRONG_TAG:
		memcpy(out, ok, RIG_CM_PRIVATE);
		out[3] = '0';
		return RIG_CM_PRIVATE;
	case G_QP_TOO_BIG:
		memcpy(out, ok, RIG_CM_PRIVATE);
		out[4] = 0x80;		/* the qp's top byte */
		return RIG_CM_PRIVATE;
	case G_PADDING:
		memcpy(out, ok, RIG_CM_PRIVATE);
		out[50] = 1;
		return 56;
	case G_RANDOM:
		for (i = 0; i < 56; i++) {
			x = x * 1103515245 + 12345;
			out[i] = (uint8_t)(x >> 16);
		}
		return 56;
	default:		/* G_CUT */
		memcpy(out, ok, 4 + 16);
		return 4 + 16;
	}
}

static void raw_connect(struct raw *r, struct rid *d)
{
	struct rdma_conn_param p;
	struct rig_endpoint e = r->e;
	uint8_t priv[56];
	size_t len;

	/* Each request names a queue pair of its own (the CM rejects a
	 * second live request from one queue pair of one device as stale),
	 * from the top of the 24-bit range: rxe numbers its queue pairs from
	 * the bottom, and an honest client's request that named a number a
	 * hostile one named would be rejected as stale too. The server
	 * connects to any number. */
	e.qp = r->qp_top - (uint32_t)(d - r->v);
	if (d->kind >= 0) {
		len = garbage(d->kind, &e, priv);
	} else {
		rig_cm_pack(&e, priv);
		len = RIG_CM_PRIVATE;
	}
	t_raw_param(&p, priv, len, e.qp);
	/* Read the clock first: the server may take the request before
	 * rdma_connect() returns. */
	d->t_connect = t_now_ms();
	T_CHILD_CHECK(rdma_connect(d->id, &p) == 0, "rdma_connect: %s", strerror(errno));
	r->sent++;
}

/* Takes the events that are there; with none, waits for one until @end. */
static void raw_pump(struct raw *r, double end)
{
	struct pollfd pfd = { r->ch->fd, POLLIN, 0 };
	struct rdma_cm_event *ev;
	int got = 0;

	for (;;) {
		while (!rdma_get_cm_event(r->ch, &ev)) {
			struct rid *d = ev->id->context;

			got++;
			switch (ev->event) {
			case RDMA_CM_EVENT_ADDR_RESOLVED:
				T_CHILD_CHECK(rdma_resolve_route(ev->id, 5000) == 0,
					      "rdma_resolve_route: %s", strerror(errno));
				break;
			case RDMA_CM_EVENT_ROUTE_RESOLVED:
				raw_connect(r, d);
				break;
			case RDMA_CM_EVENT_CONNECT_RESPONSE:
				d->t_reply = t_now_ms();
				r->replied++;
				break;	/* and never rdma_establish */
			default:
				d->end = ev->event;
				d->status = ev->status;
				d->t_end = t_now_ms();
				r->ended++;
			}
			rdma_ack_cm_event(ev);
			if (r->hold && r->sent == r->n)
				return;
		}
		T_CHILD_CHECK(errno == EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
		if (got || t_now_ms() >= end)
			return;
		poll(&pfd, 1, (int)(end - t_now_ms()) + 1);
	}
}

/* @n ids on one channel, each resolving the server's address. */
static void raw_open(struct raw *r, int n, uint16_t port, bool garbage_kinds)
{
	struct sockaddr_in sin = { 0 };
	struct rig_nic *nic = NULL;
	struct rig_qp *qp = NULL;
	int i, ret;

	/* A real endpoint of this process to offer: the server can connect
	 * its queue pair to it, so only the missing handshake stops it. */
	ret = rig_nic_open(t_dev(), &nic);
	T_CHILD_CHECK(ret == 0, "rig_nic_open: %d %s", ret, rig_errmsg());
	ret = rig_qp_make(nic, &qp);
	T_CHILD_CHECK(ret == 0, "rig_qp_make: %d %s", ret, rig_errmsg());
	rig_qp_endpoint(qp, &r->e);

	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	T_CHILD_CHECK(inet_pton(AF_INET, t_other_ip(), &sin.sin_addr) == 1, "server address");
	r->ch = rdma_create_event_channel();
	T_CHILD_CHECK(r->ch, "rdma_create_event_channel: %s", strerror(errno));
	T_CHILD_CHECK(fcntl(r->ch->fd, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	r->v = calloc(n, sizeof(*r->v));
	T_CHILD_CHECK(r->v, "calloc");
	r->n = n;
	for (i = 0; i < n; i++) {
		r->v[i].end = -1;
		r->v[i].kind = garbage_kinds ? i : -1;
		T_CHILD_CHECK(rdma_create_id(r->ch, &r->v[i].id, &r->v[i], RDMA_PS_TCP) == 0,
			      "rdma_create_id %d: %s", i, strerror(errno));
	}
	for (i = 0; i < n; i++)
		T_CHILD_CHECK(rdma_resolve_addr(r->v[i].id, NULL, (struct sockaddr *)&sin,
						5000) == 0,
			      "rdma_resolve_addr %d: %s", i, strerror(errno));
}

/*
 * The child's work. Each id's request must end REJECTED: the server
 * rejects garbage, and requests beyond RIG_CM_HANDSHAKES, at once; it
 * drops a half-open connection RIG_CM_HALF_OPEN_MS after it replied
 * (its rdma_cm sends REJ when the id goes), which the client sees no
 * sooner than that after its request; and it never lets a stalled one
 * become a connection. How late after the reply each REJ came goes to the
 * test, which holds it to DROP_MAX_MS plus what the machine stalled a
 * loop meanwhile (kid_reap). The child waits for every request's end
 * (CHILD_WAIT_MS, a liveness bound: the child's alarm is 60 s).
 */
#define CHILD_WAIT_MS 40000
static void kid_run(struct kid *k, int idx, uint16_t port, int out)
{
	double bound = DROP_MAX_MS + MARGIN_MS, end, last;
	struct kreport *rep = &k->rep;
	struct raw r = { 0 };
	int n = k->mode == K_FLOOD ? FLOOD : k->mode == K_GARBAGE ? G_KINDS :
		k->mode == K_FILL ? RIG_CM_HANDSHAKES : 1;
	bool said = false;
	int i;

	r.hold = k->mode == K_STALL_UNREAD;
	/* Queue pair numbers no earlier test used: the server's CM keeps a
	 * dropped connection's numbers for a while (time-wait) and rejects a
	 * new request that names them again as stale. */
	r.qp_top = 0xffffff - 4096 * (uint32_t)(idx + 8 * (getpid() % 500));
	raw_open(&r, n, port, k->mode == K_GARBAGE);
	/* every request out */
	end = t_now_ms() + 30000;
	while (r.sent < n && t_now_ms() < end)
		raw_pump(&r, end);
	T_CHILD_CHECK(r.sent == n, "%s: %d of %d requests out in 30 s (%d ended: event %d)",
		      kmode_name[k->mode], r.sent, n, r.ended, r.v[0].end);
	kid_say(out, 's');
	switch (k->mode) {
	case K_KILL_REQUEST:
		for (;;)
			pause();
	case K_STALL_UNREAD: {
		/* Reads nothing until the bound: by then the reply and the
		 * server's REJ should both be waiting. What is queued when
		 * this child wakes is read without waiting (raw_pump with an
		 * end gone by), and is on time however long the busy machine
		 * then keeps the child from the CPU: only a REJ still to come
		 * is late, by how long it took after the wake. That goes to
		 * the test (the machine may have stalled the server), which
		 * holds it to the stall it saw. */
		struct timespec ts;
		double at = r.v[0].t_connect + bound;

		ts.tv_sec = (time_t)(at / 1000);
		ts.tv_nsec = (long)((at - ts.tv_sec * 1000.0) * 1e6);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		r.hold = false;
		at = t_now_ms();
		raw_pump(&r, 0);
		if (!r.ended) {
			end = at + CHILD_WAIT_MS;
			do
				raw_pump(&r, end);
			while (!r.ended && t_now_ms() < end);
			if (r.ended)
				rep->unread_late_ms = r.v[0].t_end - at;
		}
		T_CHILD_CHECK(r.replied == 1 && r.ended == 1 &&
			      r.v[0].end == RDMA_CM_EVENT_REJECTED,
			      "%s: %d replies, ended by event %d (status %d) %.0f ms after "
			      "the request", kmode_name[k->mode], r.replied, r.v[0].end,
			      r.v[0].status, bound + CHILD_WAIT_MS);
		break;
	}
	default:
		for (last = i = 0; i < n; i++)
			if (r.v[i].t_connect > last)
				last = r.v[i].t_connect;
		end = last + CHILD_WAIT_MS;
		while ((k->mode == K_KILL_REPLY ? r.replied : r.ended) < n) {
			T_CHILD_CHECK(t_now_ms() < end,
				      "%s: %d of %d requests still open %d ms after the last went out (%d replied, %d ended)",
				      kmode_name[k->mode], n - r.ended, n, CHILD_WAIT_MS,
				      r.replied, r.ended);
			raw_pump(&r, end);
			if (k->mode == K_STALL_REPLY && r.replied == n && !said) {
				kid_say(out, 'r');
				said = true;
			}
		}
		if (k->mode == K_KILL_REPLY) {
			kid_say(out, 'r');
			for (;;)
				pause();
		}
	}
	rep->n = n;
	rep->replied = r.replied;
	rep->drop_min_ms = 1e9;
	for (i = 0; i < n; i++) {
		struct rid *d = &r.v[i];
		double dt = d->t_end - d->t_connect;

		T_CHILD_CHECK(d->end == RDMA_CM_EVENT_REJECTED,
			      "%s: request %d ended by %s (status %d), not REJECTED",
			      kmode_name[k->mode], i, rdma_event_str(d->end), d->status);
		if (!d->t_reply) {
			rep->rejected_unanswered++;
			rep->at_once_status = d->status;
			continue;
		}
		if (k->mode == K_STALL_UNREAD)
			continue;	/* it read the REJ late, on purpose */
		T_CHILD_CHECK(dt >= RIG_CM_HALF_OPEN_MS,
			      "%s: request %d dropped %.0f ms after it went out, before %d ms",
			      kmode_name[k->mode], i, dt, RIG_CM_HALF_OPEN_MS);
		if (d->t_end - d->t_reply > rep->after_reply_max_ms) {
			rep->after_reply_max_ms = d->t_end - d->t_reply;
			rep->after_reply_max_i = i;
		}
		if (dt < rep->drop_min_ms)
			rep->drop_min_ms = dt;
		if (dt > rep->drop_max_ms)
			rep->drop_max_ms = dt;
	}
	/* Garbage: rejected without a reply (G_CUT may get one, and then
	 * be dropped: its endpoint is well-formed, its GID nobody's). */
	if (k->mode == K_GARBAGE)
		for (i = 0; i < n; i++)
			T_CHILD_CHECK(!r.v[i].t_reply || r.v[i].kind == G_CUT,
				      "garbage of kind %d got a reply", r.v[i].kind);
	kid_say(out, 'e');
	T_CHILD_CHECK(write(out, rep, sizeof(*rep)) == sizeof(*rep), "report");
	for (i = 0; i < n; i++)
		rdma_destroy_id(r.v[i].id);
	rdma_destroy_event_channel(r.ch);
}

/* Forks a child of @mode that waits for kid_launch(). Call before any thread
 * starts: the child then inherits no lock another thread holds. */
static void kid_fork(struct kid *k, int idx, enum kmode mode, uint16_t port)
{
	char c;

	memset(k, 0, sizeof(*k));
	k->mode = mode;
	k->pid = t_fork_piped(&k->go, &k->from, O_CLOEXEC);
	if (k->pid == 0) {
		/* k->from reads the test's words, k->go writes to it */
		alarm(60);	/* a hang ends in SIGALRM */
		T_CHILD_CHECK(read(k->from, &c, 1) == 1, "the test never said go");
		kid_run(k, idx, port, k->go);
		_exit(0);
	}
}

/* Reads the child's next word; fails the test if it died first. */
static char kid_hear(struct kid *k, int ms)
{
	struct pollfd pfd = { k->from, POLLIN, 0 };
	char c = 0;

	cr_assert_eq(poll(&pfd, 1, ms), 1, "%s: nothing from the child in %d ms",
		     kmode_name[k->mode], ms);
	cr_assert_eq(read(k->from, &c, 1), 1, "%s: the child died: %s", kmode_name[k->mode],
		     t_child_msg());
	return c;
}

/*
 * Lets the child loose and waits until it has reached its step: its
 * requests out, and the reply if it waits for one; then kills those
 * meant to die there.
 */
static void kid_launch(struct kid *k)
{
	char c;

	cr_assert_eq(write(k->go, "g", 1), 1);
	c = kid_hear(k, 60000);
	cr_assert_eq(c, 's', "%s: the child said %c", kmode_name[k->mode], c);
	if (k->mode == K_STALL_REPLY || k->mode == K_KILL_REPLY) {
		c = kid_hear(k, 30000);
		cr_assert_eq(c, 'r', "%s: the child said %c", kmode_name[k->mode], c);
	}
	if (k->mode == K_KILL_REQUEST || k->mode == K_KILL_REPLY) {
		cr_assert_eq(kill(k->pid, SIGKILL), 0);
		k->t_kill = t_now_ms();
		k->killed = true;
	}
}

/*
 * Waits for the child's end: its report, or death by SIGKILL if killed.
 * Each REJ came at most DROP_MAX_MS after the reply, plus MARGIN_MS for
 * the REJ's way and the child's turn, plus @stall_ms: the longest the
 * machine kept a loop that does nothing from running, in the same run (0
 * without one).
 */
static void kid_reap(struct kid *k, double stall_ms)
{
	double bound = DROP_MAX_MS + MARGIN_MS + stall_ms;

	int status;
	char c;

	if (!k->killed) {
		do
			c = kid_hear(k, 60000);
		while (c != 'e');
		cr_assert_eq(read(k->from, &k->rep, sizeof(k->rep)), (ssize_t)sizeof(k->rep));
	}
	cr_assert_eq(waitpid(k->pid, &status, 0), k->pid);
	if (k->killed)
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	else
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "%s: the child ended with status %#x: %s", kmode_name[k->mode], status,
			  t_child_msg());
	if (k->killed)
		return;
	cr_assert_leq(k->rep.after_reply_max_ms, bound,
		      "%s: request %d dropped %.0f ms after the reply came, past %.0f ms "
		      "(%d + %d ms, and %.0f ms the control loop was stalled)",
		      kmode_name[k->mode], k->rep.after_reply_max_i, k->rep.after_reply_max_ms,
		      bound, DROP_MAX_MS, MARGIN_MS, stall_ms);
	cr_assert_leq(k->rep.unread_late_ms, stall_ms,
		      "%s: the REJ came %.0f ms after %d ms past the request (%.0f ms the "
		      "control loop was stalled)", kmode_name[k->mode], k->rep.unread_late_ms,
		      DROP_MAX_MS + MARGIN_MS, stall_ms);
	if (k->rep.rejected_unanswered)
		cr_log_info("%s: %d of %d requests rejected unanswered (REJ reason %d)",
			    kmode_name[k->mode], k->rep.rejected_unanswered, k->rep.n,
			    k->rep.at_once_status);
	if (k->rep.drop_max_ms)
		cr_log_info("%s: %d of %d requests answered, then dropped %.0f-%.0f ms after the request",
			    kmode_name[k->mode], k->rep.replied, k->rep.n, k->rep.drop_min_ms,
			    k->rep.drop_max_ms);
}

/* ---- fds and memory ------------------------------------------------------ */

struct mark {
	int fds;
	long rss;
};

static void mark(struct mark *m)
{
	malloc_trim(0);		/* what malloc keeps free is no leak */
	m->fds = t_fd_count();
	m->rss = t_resident_kib();
}

static void assert_flat(const char *what, const struct mark *a, const struct mark *b)
{
	cr_log_info("%s: fds %d -> %d, Rss %ld -> %ld KiB", what, a->fds, b->fds, a->rss, b->rss);
	cr_assert_eq(b->fds, a->fds, "%s: the server ends with %d fds more", what,
		     b->fds - a->fds);
	if (!T_ASAN)	/* ASan's quarantine holds freed memory on purpose */
		cr_assert_leq(b->rss, a->rss + RSS_SLACK_KB,
			      "%s: Rss grew by %ld KiB (slack %d KiB)", what, b->rss - a->rss,
			      RSS_SLACK_KB);
}

/* ---- 1. the outcomes of a dial ------------------------------------------- */

/* Resident memory is compared before and after each attack: without
 * transparent huge pages, so that it moves by pages, not by 2 MiB when
 * the kernel backs a piece of a malloc arena with a huge page. */
static void suite_init(void)
{
	prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
}

TestSuite(conn, .init = suite_init);

/* A dial connects: its news carries its cookie and a queue pair; the
 * listener's news carries the listener's cookie; a message goes each way;
 * and when the client leaves, the server hears GONE (-ECONNRESET). */
Test(conn, dialed_connected_and_accepted_with_their_cookies, .timeout = 120)
{
	const uint16_t port = 18601;
	static struct srv s;	/* static: the server thread outlives a failed assert */
	static struct cli h;
	double t0;

	srv_start(&s, port, false, false);
	cli_open(&h);
	cli_round(&h, port, 3, false);
	cr_assert_eq(SRV_COUNT(&s, accepted), 3);
	cr_assert_eq(SRV_COUNT(&s, echoed), 3);
	t0 = t_now_ms();
	while (SRV_COUNT(&s, gone) < 3) {
		srv_check(&s);
		cr_assert_lt(t_now_ms() - t0, 5000.0, "the server heard of %d of 3 leaving",
			     SRV_COUNT(&s, gone));
		usleep(1000);
	}
	srv_join(&s);
	cli_close(&h);
	srv_close(&s);
}

/* A listener that takes requests and never answers: a raw rdma_cm id
 * that never reads its events. */
static struct rdma_cm_id *mute_listener(struct rdma_event_channel *ch, uint16_t port)
{
	struct sockaddr_in sin = { 0 };
	struct rdma_cm_id *id;

	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	cr_assert_eq(inet_pton(AF_INET, t_other_ip(), &sin.sin_addr), 1);
	cr_assert_eq(rdma_bind_addr(id, (struct sockaddr *)&sin), 0, "%s", strerror(errno));
	cr_assert_eq(rdma_listen(id, 8), 0, "%s", strerror(errno));
	return id;
}

/*
 * Three dials at once from one loop, each failing its own way; each
 * outcome comes back as DIALED news with its own cookie and no queue pair:
 * - nobody listens on the port: -ECONNREFUSED;
 * - an address in a subnet no route leads to: -ENETUNREACH (news too,
 *   though the kernel may know it before rig_loop_dial returns);
 * - a listener that never answers: -ETIMEDOUT at the dial's bound, not
 *   sooner, and before rdma_cm's own timeout (its request waits 4.3 s for
 *   an answer before the first retry).
 */
Test(conn, failed_dials_come_back_as_news_with_their_cookies, .timeout = 60)
{
	static const struct {
		const char *what;
		int result;
	} want[3] = {
		{ "nobody listening", -ECONNREFUSED },
		{ "no route", -ENETUNREACH },
		{ "a listener that never answers", -ETIMEDOUT },
	};
	const uint64_t cookie = 0xabad1dea00000000ull;
	const uint16_t refused = 18602, mute = 18604;
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct rig_ready r;
	static struct cli h;
	double t0, t, dt = 0;
	bool seen[3] = { false };
	int i, k, ret;

	ch = rdma_create_event_channel();
	cr_assert_not_null(ch);
	id = mute_listener(ch, mute);
	cli_open(&h);
	t0 = t_now_ms();
	ret = rig_loop_dial(h.loop, t_other_ip(), refused, DIAL_US, cookie + 0);
	cr_assert_eq(ret, 0, "rig_loop_dial: %d %s", ret, rig_errmsg());
	ret = rig_loop_dial(h.loop, "198.51.100.7", refused, DIAL_US, cookie + 1);
	cr_assert_eq(ret, 0, "rig_loop_dial started no dial: %d (%s); its outcome is news",
		     ret, rig_errmsg());
	ret = rig_loop_dial(h.loop, t_other_ip(), mute, SHORT_DIAL_MS * 1000, cookie + 2);
	cr_assert_eq(ret, 0, "rig_loop_dial: %d %s", ret, rig_errmsg());
	for (k = 0; k < 3; k++) {
		t = cli_one(&h, 10000, &r);
		i = (int)(r.cookie - cookie);
		cr_assert_eq(r.news, RIG_NEWS_DIALED);
		cr_assert(r.cookie >= cookie && i < 3 && !seen[i],
			  "DIALED with cookie %#llx: no dial's, or twice",
			  (unsigned long long)r.cookie);
		seen[i] = true;
		cr_assert_eq(r.result, want[i].result, "%s: %d, not %d", want[i].what, r.result,
			     want[i].result);
		cr_assert_null(r.qp, "%s", want[i].what);
		if (i == 2)
			dt = t - t0;
	}
	cr_log_info("a %d ms dial timed out after %.0f ms", SHORT_DIAL_MS, dt);
	cr_assert_geq(dt, SHORT_DIAL_MS, "timed out after %.0f ms, before its bound", dt);
	cr_assert_lt(dt, SHORT_DIAL_MS + MARGIN_MS, "timed out after %.0f ms", dt);
	/* The request did reach the listener that never answered (a
	 * bounded wait: a request that never left fails here, not by the
	 * suite's timeout). */
	cr_assert_eq(poll(&(struct pollfd){ .fd = ch->fd, .events = POLLIN }, 1,
			  MARGIN_MS), 1, "the mute listener got no request");
	cr_assert_eq(rdma_get_cm_event(ch, &ev), 0);
	cr_assert_eq(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST, "%s", rdma_event_str(ev->event));
	rdma_ack_cm_event(ev);
	cli_close(&h);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

/* C1, C2: a negative bound, INT64_MIN included, is -EINVAL before any
 * arithmetic on it: no dial starts, and no news comes of it. */
Test(conn, C1_C2_dial_with_a_negative_bound_is_EINVAL_no_news)
{
	static struct cli h;
	struct rig_ready r;
	int n;

	cli_open(&h);
	cr_assert_eq(rig_loop_dial(h.loop, t_other_ip(), 18608, INT64_MIN, 1), -EINVAL);
	cr_assert_eq(rig_loop_dial(h.loop, t_other_ip(), 18608, -1, 2), -EINVAL);
	n = rig_loop_handle(h.loop, &r, 1);
	cr_assert_eq(n, 0, "news %d (result %d) of a dial that never started", r.news, r.result);
	cli_close(&h);
}

struct acceptor {
	struct rig_listener *l;
	int ret;
	struct rig_qp *qp;
};

static void *accept_one(void *arg)
{
	struct acceptor *a = arg;

	a->ret = rig_accept(a->l, DIAL_US, &a->qp);
	return NULL;
}

/* The blocking calls drive the same steps: rig_dial against a loop's
 * listener, and rig_loop_dial against rig_listen and rig_accept. */
Test(conn, blocking_dial_and_accept_meet_the_loop, .timeout = 120)
{
	const uint16_t port = 18605, port2 = 18606;
	const uint64_t cookie = 0xabad1dea00000004ull;
	struct acceptor a = { NULL, -1, NULL };
	struct t_buf ctx, crx, stx, srx;
	struct rig_completion c;
	struct rig_qp *qp = NULL;
	struct rig_ready r, r2;
	struct rig_nic *sn;
	static struct srv s;
	static struct cli h;
	pthread_t t;
	int ret;

	/* rig_dial to the loop's listener, which echoes */
	srv_start(&s, port, false, false);
	cli_open(&h);
	ret = rig_dial(h.nic, t_other_ip(), port, DIAL_US, &qp);
	cr_assert_eq(ret, 0, "rig_dial: %d %s", ret, rig_errmsg());
	t_buf(&ctx, h.nic, MSG, 3);
	t_buf(&crx, h.nic, MSG, 0);
	cr_assert_eq(rig_qp_receive(qp, crx.r, 0, MSG), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_send(qp, ctx.r, 0, MSG), 0, "%s", rig_errmsg());
	c = t_take(qp, RIG_RECEIVE, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, MSG);
	cr_assert_arr_eq(crx.mem, ctx.mem, MSG);
	cr_assert_eq(SRV_COUNT(&s, accepted), 1);
	cr_assert_eq(rig_qp_destroy(qp), 0);
	srv_join(&s);
	srv_close(&s);

	/* rig_loop_dial to rig_listen, accepted by rig_accept */
	sn = t_nic_open(t_other_dev());
	ret = rig_listen(sn, t_other_ip(), port2, &a.l);
	cr_assert_eq(ret, 0, "rig_listen: %d %s", ret, rig_errmsg());
	cr_assert_eq(pthread_create(&t, NULL, accept_one, &a), 0);
	ret = rig_loop_dial(h.loop, t_other_ip(), port2, DIAL_US, cookie);
	cr_assert_eq(ret, 0, "rig_loop_dial: %d %s", ret, rig_errmsg());
	cli_one(&h, 15000, &r);
	/* The dial's last handshake message goes at the loop's next turn:
	 * only then is rig_accept's side established. */
	cr_assert_eq(cli_news(&h, 1000, &r2, 1), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(a.ret, 0, "rig_accept: %d", a.ret);
	cr_assert_eq(r.news, RIG_NEWS_DIALED);
	cr_assert_eq(r.cookie, cookie);
	cr_assert_eq(r.result, 0, "%d", r.result);
	cr_assert_not_null(r.qp);
	t_buf(&stx, sn, 4096, 4);
	t_buf(&srx, sn, 4096, 0);
	t_exchange(r.qp, a.qp, &ctx, &srx, MSG);
	t_exchange(a.qp, r.qp, &stx, &crx, MSG);
	cr_assert_eq(rig_qp_destroy(r.qp), 0);
	cr_assert_eq(rig_qp_destroy(a.qp), 0);
	cr_assert_eq(rig_listener_close(a.l), 0);
	cr_assert_eq(rig_nic_close(sn), 0);
	cli_close(&h);
}

/*
 * A dial counts as up once rdma_establish has sent its RTU. Should that
 * RTU be lost, the listener is still in REP_SENT when its half-open bound
 * drops the handshake: destroying its id there makes its CM send a REJ,
 * and the dialer's CM, ESTABLISHED already, still takes it and hands
 * rdma_cm's REJECTED to the dialer. The dialer's queue pair must fail
 * then, as when the peer leaves (F1, F6): else it keeps a peer that is
 * gone, and a receive posted for a greeting waits forever.
 *
 * On a whole wire the RTU always comes, so only a lost RTU shows this.
 * Soft-RoCE needs no fault injected for it: it is real traffic, the RTU
 * dropped by a netem qdisc on the dialer's end of the veth, the REJ what
 * the listener's kernel CM sends of its own. The listener is raw rdma_cm,
 * so that the test chooses when it drops the handshake: once the dial is
 * up. Only the way from the dialer to the listener is cut: the REJ comes
 * back on the other. Two hosts only: on one, packets between queue pairs
 * of one rxe device never reach a netdev.
 */
#define REJ_PORT 18607
/* The REJ crosses the veth in one packet, handled on arrival: the bound
 * only ends a failing run (the fault leaves the dialer waiting forever). */
#define REJ_WAIT_MS 10000
/* How long the listener watches for an RTU that got through the cut
 * (it comes within a millisecond on a whole wire). */
#define RTU_WATCH_MS 200

Test(conn, a_REJ_after_the_dial_was_up_fails_its_queue_pair, .timeout = 60,
     .fini = t_wire_mend)
{
	const uint64_t cookie = 0xabad1dea00000005ull;
	uint8_t priv[RIG_CM_PRIVATE];
	struct rdma_conn_param p;
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *lid, *id = NULL;
	struct rig_endpoint e;
	struct rig_completion c;
	struct rig_qp *lqp, *qp;
	struct rig_ready r;
	struct rig_nic *sn;
	static struct cli h;
	double t0, end, gone_at = 0;
	bool gone = false;
	int n, st, ret;

	if (!t_peer_dev())
		cr_skip_test("the cut of one direction needs the two-host topology");
	t_wire_mend();	/* in case a crashed run (no fini) left it cut */
	/* The listener's endpoint: a queue pair of its host that the dialer
	 * connects to; it never needs to answer. */
	sn = t_nic_open(t_other_dev());
	ret = rig_qp_make(sn, &lqp);
	cr_assert_eq(ret, 0, "rig_qp_make: %d %s", ret, rig_errmsg());
	rig_qp_endpoint(lqp, &e);
	rig_cm_pack(&e, priv);
	ch = rdma_create_event_channel();
	cr_assert_not_null(ch);
	cr_assert_eq(fcntl(ch->fd, F_SETFL, O_NONBLOCK), 0);
	lid = mute_listener(ch, REJ_PORT);
	cli_open(&h);

	/* The dialer's request reaches the listener over a whole wire. */
	ret = rig_loop_dial(h.loop, t_other_ip(), REJ_PORT, DIAL_US, cookie);
	cr_assert_eq(ret, 0, "rig_loop_dial: %d %s", ret, rig_errmsg());
	end = t_now_ms() + 15000;
	while (rdma_get_cm_event(ch, &ev)) {
		cr_assert_eq(errno, EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
		cr_assert_lt(t_now_ms(), end, "the listener heard no request in 15 s");
		n = cli_news(&h, 10, &r, 1);
		cr_assert_eq(n, 0, "news %d (result %d) before the listener heard the request",
			     r.news, r.result);
	}
	cr_assert_eq(ev->event, RDMA_CM_EVENT_CONNECT_REQUEST, "%s", rdma_event_str(ev->event));
	id = ev->id;
	rdma_ack_cm_event(ev);

	/* Cut the way to the listener: the dialer's packets leave by its
	 * netdev. The answer goes out whole; the RTU after it is lost. */
	t_sh("tc qdisc add dev %s root netem loss 100%%", t_netdev());
	t_raw_param(&p, priv, RIG_CM_PRIVATE, e.qp);
	cr_assert_eq(rdma_accept(id, &p), 0, "rdma_accept: %s", strerror(errno));

	/* The dial is up, on the dialer's side. A receive waits for a
	 * greeting that will never come. */
	cli_one(&h, 15000, &r);
	cr_assert_eq(r.news, RIG_NEWS_DIALED, "news %d", r.news);
	cr_assert_eq(r.cookie, cookie);
	cr_assert_eq(r.result, 0, "the dial: %d (%s)", r.result, rig_errmsg());
	cr_assert_not_null(r.qp);
	qp = r.qp;
	ret = rig_qp_receive(qp, h.rx.r, 0, MSG);
	cr_assert_eq(ret, 0, "rig_qp_receive: %d %s", ret, rig_errmsg());
	/* The RTU goes at the loop's next turn, into the cut: then the dial
	 * is up. */
	n = cli_news(&h, 1000, &r, 1);
	cr_assert_eq(n, 0, "news %d (result %d) after the dial", r.news, r.result);

	/* The listener never heard the RTU (else dropping it below would
	 * be a disconnect, which fails the queue pair anyway). */
	end = t_now_ms() + RTU_WATCH_MS;
	do {
		ret = rdma_get_cm_event(ch, &ev);
		if (!ret)
			cr_assert_fail("the listener got %s: the cut let the RTU through",
				       rdma_event_str(ev->event));
		cr_assert_eq(errno, EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
		usleep(10000);
	} while (t_now_ms() < end);

	/* The listener drops the handshake, as rig's does at its bound:
	 * destroying the id in REP_SENT sends a REJ, on the way not cut. */
	rdma_destroy_id(id);
	id = NULL;
	t0 = t_now_ms();
	end = t0 + REJ_WAIT_MS;
	while (!gone && t_now_ms() < end) {
		if (!cli_news(&h, 20, &r, 1))
			continue;
		cr_assert_eq(r.qp, qp, "news %d of another queue pair", r.news);
		if (r.news == RIG_NEWS_RING)
			continue;	/* its receive, failed: polled below */
		cr_assert_eq(r.news, RIG_NEWS_GONE, "news %d, result %d", r.news, r.result);
		cr_assert_eq(r.result, -ECONNRESET, "GONE with %d", r.result);
		cr_assert_eq(r.cookie, cookie);
		gone = true;
		gone_at = t_now_ms();
	}
	cr_assert(gone, "no RIG_NEWS_GONE in %d ms after the listener's REJ: the queue pair "
		  "keeps a peer that is gone", REJ_WAIT_MS);
	cr_log_info("RIG_NEWS_GONE %.1f ms after the listener dropped the handshake",
		    gone_at - t0);
	ret = rig_qp_poll(qp, RIG_RECEIVE, &c);
	cr_assert_eq(ret, 1, "the receive did not complete: %d", ret);
	cr_assert_eq(c.error, -ECONNRESET, "the receive: %d (%s)", c.error, c.why);
	cr_assert(c.why && strstr(c.why, "REJECTED"), "the receive's reason: %s", c.why);
	cr_assert_eq(rig_qp_failure(qp, &st), -ECONNRESET);
	cr_assert_eq(st, -1, "wc status %d: the failure came from rdma_cm, not a completion",
		     st);

	t_wire_mend();
	cr_assert_eq(rig_qp_destroy(qp), 0, "rig_qp_destroy: %s", rig_errmsg());
	cli_close(&h);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ch);
	cr_assert_eq(rig_qp_destroy(lqp), 0, "rig_qp_destroy: %s", rig_errmsg());
	cr_assert_eq(rig_nic_close(sn), 0, "%s", rig_errmsg());
}

/* ---- 2. hostile clients -------------------------------------------------- */

/*
 * The frame of each attack: children forked first, the server started,
 * a warm-up round (librdmacm opens the device for good on first use),
 * then the fds and memory marked. After the attack and the children's
 * end, the server must hold no connection, have kept the honest clients
 * only (the hostile handshakes it handed out came back as RIG_NEWS_GONE),
 * and be back at its fds and memory.
 */
struct attack {
	struct srv s;
	struct cli h;
	struct kid kids[8];	/* kid i names queue pairs below 0xffffff - 4096 i */
	int nkids;
	struct mark before;
	int honest;
	struct gaps *stall;	/* a control loop's, if one runs beside */
	bool shared;		/* the server listens with rig_loops_listen */
};

static void attack_fork(struct attack *a, uint16_t port, const enum kmode *modes, int n)
{
	int i;

	memset(a, 0, sizeof(*a));
	t_child_report();
	for (i = 0; i < n; i++)
		kid_fork(&a->kids[i], i, modes[i], port);
	a->nkids = n;
}

static void attack_ready(struct attack *a, uint16_t port, bool tick)
{
	srv_start(&a->s, port, tick, a->shared);
	cli_open(&a->h);
	cli_round(&a->h, port, 2, false);
	a->honest = 2;
	wait_server_empty(&a->s, t_now_ms() + 10000, "after the warm-up");
	mark(&a->before);
}

/* Lets the children loose one after another, each once the one before
 * reached its step (a half-open connection each, or its flood out). */
static void attack_launch(struct attack *a)
{
	int i;

	for (i = 0; i < a->nkids; i++)
		kid_launch(&a->kids[i]);
}

static void attack_end(struct attack *a, const char *what)
{
	struct mark after;
	double t0, t;
	int i;

	for (i = 0; i < a->nkids; i++)
		kid_reap(&a->kids[i], a->stall ? gaps_wall_max(a->stall) : 0);
	/* The children that lived have seen the REJ of every request they
	 * kept: what is left are honest clients leaving, and what killed
	 * ones left, dropped by RIG_CM_HALF_OPEN_MS after the kill. */
	t0 = t_now_ms();
	t = wait_server_empty(&a->s, t0 + RIG_CM_HALF_OPEN_MS + MARGIN_MS +
					     (a->stall ? gaps_wall_max(a->stall) : 0), what);
	cr_log_info("%s: the server held no connection %.0f ms after the children ended",
		    what, t - t0);
	srv_check(&a->s);
	/* A hostile dialer's handshake that got its answer was handed out
	 * first, and then dropped: RIG_NEWS_GONE before any message. */
	cr_assert_eq(SRV_COUNT(&a->s, accepted) - SRV_COUNT(&a->s, dropped), a->honest,
		     "%s: the server accepted %d connections, %d dropped, %d of them honest",
		     what, SRV_COUNT(&a->s, accepted), SRV_COUNT(&a->s, dropped), a->honest);
	cr_assert_eq(SRV_COUNT(&a->s, echoed), a->honest);
	/* The honest clients have left; the server heard it of each. */
	while (SRV_COUNT(&a->s, gone) < a->honest) {
		srv_check(&a->s);
		cr_assert_lt(t_now_ms() - t0, 10000.0, "%s: %d of %d leavings heard", what,
			     SRV_COUNT(&a->s, gone), a->honest);
		usleep(1000);
	}
	mark(&after);
	assert_flat(what, &a->before, &after);
}

/* The children's pipes close last: the marks count them. */
static void attack_close(struct attack *a, bool joined)
{
	int i;

	if (!joined)
		srv_join(&a->s);
	cli_close(&a->h);
	srv_close(&a->s);
	for (i = 0; i < a->nkids; i++) {
		close(a->kids[i].go);
		close(a->kids[i].from);
	}
}

/* Honest clients during the attack. */
static void attack_honest(struct attack *a, int n)
{
	double t0 = t_now_ms();
	int refused = a->h.refused;

	cli_round(&a->h, a->s.port, n, true);
	a->honest += n;
	cr_log_info("%d honest clients served in %.0f ms during the attack; %d dials shed, tried again",
		    n, t_now_ms() - t0, a->h.refused - refused);
}

/*
 * Clients that leave the handshake half-done at each step they can: one
 * sends its request and then reads nothing; one reads the reply and never
 * establishes; one is killed once its request is out, one once the reply
 * came. The server drops each half-open connection after
 * RIG_CM_HALF_OPEN_MS (the stalled clients see its REJ no sooner than
 * that after their request, and within the margin after the reply), or at
 * once when the killed client's rdma_cm rejects as its process goes; a
 * connection it handed out before its answer comes back as RIG_NEWS_GONE
 * (-ETIMEDOUT, -ECONNRESET), and serves honest clients meanwhile.
 */
Test(conn, half_open_handshakes_are_dropped_within_the_bound, .timeout = 120)
{
	static const enum kmode modes[] = { K_STALL_UNREAD, K_STALL_REPLY, K_KILL_REQUEST,
					    K_KILL_REPLY };
	const uint16_t port = 18610;
	static struct attack a;	/* static: its threads outlive a failed assert */
	double last, t;

	attack_fork(&a, port, modes, 4);
	attack_ready(&a, port, false);
	attack_launch(&a);
	attack_honest(&a, 8);
	/* The last kill came after every other request got its reply. */
	last = a.kids[3].t_kill;
	t = wait_server_empty(&a.s, last + RIG_CM_HALF_OPEN_MS + MARGIN_MS, "half-open");
	cr_log_info("half-open: the server held no connection %.0f ms after the last kill",
		    t - last);
	attack_end(&a, "half-open");
	attack_close(&a, false);
}

/* FLOOD requests at once on one channel, all stalled. */
Test(conn, flood_of_stalled_requests, .timeout = 180)
{
	static const enum kmode modes[] = { K_FLOOD };
	const uint16_t port = 18612;
	static struct attack a;	/* static: its threads outlive a failed assert */
	static struct ctl c;

	attack_fork(&a, port, modes, 1);
	/* The flood's children take the guest's CPU from the server's loop
	 * too: each drop's bound counts what they kept a thread that does
	 * nothing from running. */
	ctl_start(&c);
	a.stall = &c.gaps;
	attack_ready(&a, port, false);
	attack_launch(&a);
	attack_honest(&a, 8);
	attack_end(&a, "flood");
	ctl_join(&c);
	attack_close(&a, false);
}

/*
 * Requests beyond RIG_CM_HANDSHAKES wait for a turn (cm.h), at a loop's
 * listener and at rig_loops_listen's. A child's RIG_CM_HANDSHAKES
 * requests take every turn, and the gate holds the server's helper
 * making the first one's queue pair, so none ends. Then WAITERS honest
 * dials reach the listener: none is rejected; they wait. A thread opens
 * the gate once the kernel's table shows their requests at the server:
 * the child's handshakes fail (their queue pairs refused) and the waiting
 * take their turns, well within the bound, and are served.
 */
#define WAITERS 8

struct opener {
	pthread_t thread;
	uint16_t port;
	int seen;		/* the server's ids when it opened the gate */
};

static void *opener_main(void *arg)
{
	struct opener *o = arg;
	double end = t_now_ms() + RIG_CM_HALF_OPEN_MS;

	do
		o->seen = server_ids(o->port);
	while (o->seen < RIG_CM_HANDSHAKES + WAITERS && t_now_ms() < end);
	gate_open(RIG_CM_HANDSHAKES);
	return NULL;
}

/* The server, its turns all taken by the child's requests and held. */
static void turns_held(struct attack *a, uint16_t port, bool shared)
{
	static const enum kmode modes[] = { K_FILL };

	attack_fork(a, port, modes, 1);
	a->shared = shared;
	attack_ready(a, port, false);
	gate_arm();
	attack_launch(a);
	gate_wait_held(port, 30000);
}

/* The child's handshakes ended as the gate failed them, unanswered. */
static void turns_freed(struct attack *a, const char *what)
{
	attack_end(a, what);
	cr_assert_eq(a->kids[0].rep.rejected_unanswered, RIG_CM_HANDSHAKES,
		     "%d of the child's requests were rejected unanswered",
		     a->kids[0].rep.rejected_unanswered);
	gate_off();
	attack_close(a, false);
}

static void waiters_served(uint16_t port, bool shared)
{
	static struct attack a;	/* static: its threads outlive a failed assert */
	struct opener o = { .port = port };

	turns_held(&a, port, shared);
	cr_assert_eq(pthread_create(&o.thread, NULL, opener_main, &o), 0);
	cli_round(&a.h, port, WAITERS, false);	/* none rejected, all served */
	a.honest += WAITERS;
	cr_assert_eq(pthread_join(o.thread, NULL), 0);
	cr_assert_eq(o.seen, RIG_CM_HANDSHAKES + WAITERS,
		     "the server held %d ids: the honest requests did not wait there", o.seen);
	turns_freed(&a, "waiting");
}

Test(conn, requests_beyond_the_handshakes_wait_for_a_turn, .timeout = 120)
{
	waiters_served(18626, false);
}

Test(conn, requests_beyond_the_handshakes_wait_for_a_turn_in_any_loop, .timeout = 120)
{
	waiters_served(18630, true);
}

/*
 * ... while handshakes come up: with the turns held as above for longer,
 * none does, and an honest dial is rejected (-ECONNREFUSED: it may try
 * again), no sooner than RIG_CM_HALF_OPEN_MS after it went out. Rejected
 * at once, it would not have waited.
 */
static void waiter_turned_away(uint16_t port, bool shared)
{
	const uint64_t cookie = 0x3a17000000000001ull;
	static struct attack a;	/* static: its threads outlive a failed assert */
	struct rig_ready r;
	double t0, t;
	int ret;

	turns_held(&a, port, shared);
	t0 = t_now_ms();
	ret = rig_loop_dial(a.h.loop, t_other_ip(), port, DIAL_US, cookie);
	cr_assert_eq(ret, 0, "rig_loop_dial: %d %s", ret, rig_errmsg());
	t = cli_one(&a.h, DIAL_US / 1000, &r);
	cr_assert_eq(r.news, RIG_NEWS_DIALED);
	cr_assert_eq(r.cookie, cookie);
	cr_assert_eq(r.result, -ECONNREFUSED, "%d %s", r.result, rig_errmsg());
	cr_assert_null(r.qp);
	cr_assert_geq(t - t0, RIG_CM_HALF_OPEN_MS,
		      "rejected %.0f ms after the dial: it waited for no turn", t - t0);
	cr_log_info("a request with no turn free was rejected %.0f ms after its dial", t - t0);
	gate_open(RIG_CM_HANDSHAKES);
	turns_freed(&a, "the bound");
}

Test(conn, a_request_waits_for_a_turn_no_longer_than_the_bound, .timeout = 120)
{
	waiter_turned_away(18628, false);
}

Test(conn, a_request_waits_for_a_turn_in_any_loop_no_longer_than_the_bound, .timeout = 120)
{
	waiter_turned_away(18632, true);
}

/* Garbage in the private data: each request rejected, the loop goes on. */
Test(conn, garbage_private_data_is_rejected, .timeout = 120)
{
	static const enum kmode modes[] = { K_GARBAGE };
	const uint16_t port = 18613;
	static struct attack a;	/* static: its threads outlive a failed assert */

	attack_fork(&a, port, modes, 1);
	attack_ready(&a, port, false);
	attack_launch(&a);
	attack_honest(&a, 8);
	attack_end(&a, "garbage");
	attack_close(&a, false);
}

/* ---- 3. the tick gap ----------------------------------------------------- */

static void log_gaps(const char *what, struct gaps *g)
{
	struct gap_stats st = gaps_stats(g);

	if (!g->ms)
		return;
	cr_log_info("%s: %d gaps between %d ms ticks, less run-queue waits: p50 %.2f ms, "
		    "p99 %.2f ms, max %.2f ms; longest raw gap %.2f ms; most CPU in one "
		    "gap %.2f ms", what, st.n, TICK_MS, st.p50, st.p99, st.max,
		    gaps_wall_max(g), gaps_cpu_max(g));
	fprintf(stderr, "test_conn: %s: %d gaps between %d ms ticks, less run-queue waits: "
		"p50 %.2f ms, p99 %.2f ms, max %.2f ms; longest raw gap %.2f ms; most CPU "
		"in one gap %.2f ms\n", what, st.n, TICK_MS, st.p50, st.p99, st.max,
		gaps_wall_max(g), gaps_cpu_max(g));
}

/* The tick test's loops, at file scope: its fini reads their gaps even
 * after a failed assertion, while they may still run. */
static struct attack tick_a;
static struct ctl tick_c;

static void tick_report(void)
{
	static const char *const kind[] = { "RING", "ACCEPTED", "DIALED", "GONE" };
	struct srv *s = &tick_a.s;

	log_gaps("rig's server loop, under attack", &s->gaps);
	log_gaps("control loop, no rig work, same run", &tick_c.gaps);
	if (!s->gaps.ms)
		return;
	cr_log_info("server loop: longest rig_uring_handle() %.1f ms (%.1f ms of CPU), rig_qp_destroy() %.1f ms; longest own work on one piece of news %.1f ms (%s)",
		    s->handle_max_ms, s->handle_cpu_max_ms, s->destroy_max_ms, s->news_max_ms,
		    kind[s->news_max_kind & 3]);
	fprintf(stderr, "test_conn: server loop: longest rig_uring_handle() %.1f ms (%.1f ms of CPU), rig_qp_destroy() %.1f ms; longest own work on one piece of news %.1f ms (%s)\n",
		s->handle_max_ms, s->handle_cpu_max_ms, s->destroy_max_ms, s->news_max_ms,
		kind[s->news_max_kind & 3]);
}

/*
 * The server loop ticks every millisecond while it accepts HONEST clients
 * and every hostile client above attacks at once. Every honest client is
 * served, and no gap between ticks reaches GAP_MAX_MS beyond the longest
 * gap of a loop beside it that only ticks: the control, what the machine
 * itself costs (a busy host stalls any loop; that is not rig's). On a busy
 * machine rig's part of the loop is judged by its thread's CPU time, the
 * control by its gaps less the time it waited in the guest's run queue
 * (struct gaps): the clients and children in the same guest take CPU from
 * both, and under load the kernel's starved work keeps the server's own
 * rig_qp_destroy() calls asleep for hundreds of ms (logged).
 */
Test(conn, tick_gap_under_attack, .timeout = 240, .fini = tick_report)
{
	static const enum kmode modes[] = { K_GARBAGE, K_STALL_UNREAD, K_STALL_REPLY,
					    K_KILL_REQUEST, K_KILL_REPLY, K_FLOOD };
	const uint16_t port = 18620;
	struct attack *a = &tick_a;
	struct gap_stats rig, ctl;

	attack_fork(a, port, modes, 6);
	ctl_start(&tick_c);	/* before the marks: its fds and gaps stay */
	a->stall = &tick_c.gaps;
	attack_ready(a, port, true);
	attack_launch(a);
	attack_honest(a, HONEST);
	attack_end(a, "every attack, and honest clients");
	srv_join(&a->s);
	ctl_join(&tick_c);
	rig = gaps_stats(&a->s.gaps);
	ctl = gaps_stats(&tick_c.gaps);
	cr_assert_gt(rig.n, 1000, "the server ticked %d times", rig.n);
	/* rig's part of a turn of the loop, rig_uring_handle(), in its
	 * thread's CPU time, which the other threads of the busy guest do
	 * not stretch; what the whole guest stalled a loop that does nothing
	 * (the control, same run; a stall of the emulated guest counts as
	 * CPU time to the thread it stopped) is not rig's. The gaps, with
	 * the server's own work in them (an echo per message, one
	 * rig_qp_destroy per turn), are logged (tick_report). Under ASan,
	 * whose checks multiply rig's CPU time but not the control's, the
	 * attack runs for its memory paths and the bound is three times as
	 * wide. */
	cr_assert_gt(gaps_cpu_max(&a->s.gaps), 0, "no CPU time from schedstat");
	cr_assert_lt(a->s.handle_cpu_max_ms, (T_ASAN ? 3 : 1) * GAP_MAX_MS + ctl.max,
		     "a rig_uring_handle() call used %.1f ms of CPU (%.1f ms in all); the "
		     "server loop's gaps less run-queue waits: max %.1f ms, p99 %.2f ms; "
		     "the control loop's longest gap was %.1f ms (p99 %.2f ms)",
		     a->s.handle_cpu_max_ms, a->s.handle_max_ms, rig.max, rig.p99, ctl.max,
		     ctl.p99);
	attack_close(a, true);
}

/*
 * A storm: STORM dials at once from one loop to one listener, across the
 * two hosts. Each dial's queue pair takes the kernel tens of milliseconds
 * to make, so the last of them waits seconds for its turn; the steps of
 * the handshakes under way (the dialer's RTS, the listener's queue pair)
 * must not wait behind those, or their peers drop them after
 * RIG_CM_HALF_OPEN_MS and none comes up. Every dial must connect (no
 * shedding either: one loop keeps few requests at the listener at once),
 * and each connection's first message comes back echoed. The time is logged,
 * not asserted: the CI host is busy. Under ASan, whose every queue pair
 * costs the emulated guest three times as much, 150 dials: still many
 * times the RIG_CM_DIALS a loop starts at once, so the queued dials'
 * paths run as often.
 */
#define STORM (T_ASAN ? 150 : 500)
#define STORM_DIAL_US 300000000ll	/* a dial's bound: no timing verdict */

Test(conn, storm_of_dials_from_one_loop_all_connect, .timeout = 600)
{
	const uint16_t port = 18622;
	const uint64_t base = 0x5707000000000000ull;
	static struct srv s;	/* static: the server thread outlives a failed assert */
	static struct cli h;
	static struct rig_qp *qp[STORM];
	struct rig_ready ready[64];
	struct rig_completion c;
	int i, k, n, ret, dialed = 0, echoed = 0;
	double t0, t_dialed = 0, t_accepted = 0;

	if (!getenv("RIG_TEST_PEER_DEV"))
		cr_skip_test("a storm across two hosts (tests/rxe-vm --two-hosts)");
	cr_assert_leq(STORM, SRV_SLOTS);
	srv_start(&s, port, false, false);
	cli_open(&h);
	memset(qp, 0, sizeof(qp));
	t0 = t_now_ms();
	for (i = 0; i < STORM; i++) {
		ret = rig_loop_dial(h.loop, t_other_ip(), port, STORM_DIAL_US, base + (uint64_t)i);
		cr_assert_eq(ret, 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
	}
	while (echoed < STORM || SRV_COUNT(&s, accepted) < STORM) {
		srv_check(&s);
		cr_assert_lt(t_now_ms() - t0, STORM_DIAL_US / 1000 + MARGIN_MS,
			     "%d of %d dials up, %d echoed, %d accepted", dialed, STORM, echoed,
			     SRV_COUNT(&s, accepted));
		if (!t_accepted && SRV_COUNT(&s, accepted) == STORM)
			t_accepted = t_now_ms();
		n = cli_news(&h, 20, ready, 64);
		for (k = 0; k < n; k++) {
			struct rig_ready *r = &ready[k];

			if (r->news == RIG_NEWS_RING) {
				while ((ret = rig_qp_poll(r->qp, r->side, &c)) == 1) {
					cr_assert_eq(c.error, 0, "%s: %s",
						     r->side == RIG_SEND ? "send" : "receive", c.why);
					if (r->side == RIG_SEND)
						continue;
					cr_assert_eq(c.bytes, MSG);
					echoed++;
				}
				cr_assert_geq(ret, 0, "rig_qp_poll: %d %s", ret, rig_errmsg());
				continue;
			}
			cr_assert_eq(r->news, RIG_NEWS_DIALED, "news %d, result %d", r->news,
				     r->result);
			i = (int)(r->cookie - base);
			cr_assert(r->cookie >= base && i < STORM && !qp[i],
				  "DIALED with cookie %#llx: not one of the storm's, or twice",
				  (unsigned long long)r->cookie);
			cr_assert_eq(r->result, 0, "dial %d of %d (%d up before it, %.0f ms in): %d (%s)",
				     i, STORM, dialed, t_now_ms() - t0, r->result, rig_errmsg());
			cr_assert_not_null(r->qp);
			qp[i] = r->qp;
			cli_speak(&h, i, r->qp);	/* the client speaks first */
			if (++dialed == STORM)
				t_dialed = t_now_ms();
		}
	}
	if (!t_accepted)
		t_accepted = t_now_ms();
	for (i = 0; i < STORM; i++)
		cr_assert_arr_eq(h.rx.mem + (size_t)(2 * i + 1) * MSG, h.tx.mem + (size_t)i * MSG,
				 MSG, "connection %d: the echo differs", i);
	cr_log_info("storm: %d dials at once, all up in %.0f ms, all accepted in %.0f ms, "
		    "all echoed in %.0f ms", STORM, t_dialed - t0, t_accepted - t0,
		    t_now_ms() - t0);
	srv_join(&s);
	cli_close(&h);
	srv_close(&s);
}

/*
 * A storm from many processes: CROWD processes dial CROWD_EACH each, all
 * at once, across the two hosts. Each loop keeps RIG_CM_DIALS (16) under
 * way, so twice the RIG_CM_HANDSHAKES the listener takes are at it at
 * once: the requests beyond wait for turns, and every dial connects, not
 * one refused. (Refused, each would have to try again, at the cost of a
 * new id, its resolution and a queue pair: what made such storms take
 * several times as long as the same dials one after another.) Each child
 * keeps its connections until all are up, then closes.
 */
#define CROWD 8
#define CROWD_EACH (T_ASAN ? 16 : 40)

static void crowd_child(int go, int out, uint16_t port)
{
	struct rig_ready ready[16];
	struct pollfd pfd;
	struct rig_loop *loop;
	struct rig_nic *nic;
	int i, n, up = 0, ret;
	char c;

	T_CHILD_CHECK(read(go, &c, 1) == 1, "the test never said go");
	ret = rig_nic_open(t_dev(), &nic);
	T_CHILD_CHECK(ret == 0, "rig_nic_open: %d %s", ret, rig_errmsg());
	ret = rig_loop_open(nic, &loop);
	T_CHILD_CHECK(ret == 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	for (i = 0; i < CROWD_EACH; i++) {
		ret = rig_loop_dial(loop, t_other_ip(), port, STORM_DIAL_US, (uint64_t)i);
		T_CHILD_CHECK(ret == 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
	}
	pfd = (struct pollfd){ rig_loop_fd(loop), POLLIN, 0 };
	while (up < CROWD_EACH) {
		T_CHILD_CHECK(poll(&pfd, 1, -1) >= 0 || errno == EINTR, "poll: %s",
			      strerror(errno));
		n = rig_loop_handle(loop, ready, 16);
		T_CHILD_CHECK(n >= 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		for (i = 0; i < n; i++) {
			T_CHILD_CHECK(ready[i].news == RIG_NEWS_DIALED, "news %d, result %d",
				      ready[i].news, ready[i].result);
			T_CHILD_CHECK(ready[i].result == 0, "dial %llu of %d (%d up before it): "
				      "%d (%s)", (unsigned long long)ready[i].cookie, CROWD_EACH,
				      up, ready[i].result, rig_errmsg());
			up++;
		}
	}
	kid_say(out, 'u');
	T_CHILD_CHECK(read(go, &c, 1) == 1, "the test never said end");
	/* The connections go with the loop. */
	ret = rig_loop_close(loop);
	T_CHILD_CHECK(ret == 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	ret = rig_nic_close(nic);
	T_CHILD_CHECK(ret == 0, "rig_nic_close: %d %s", ret, rig_errmsg());
}

Test(conn, storm_of_clients_from_many_processes_all_connect, .timeout = 600)
{
	const uint16_t port = 18634;
	static struct srv s;	/* static: the server thread outlives a failed assert */
	int go[CROWD], from[CROWD], k, status;
	pid_t pid[CROWD];
	double t0;

	if (!getenv("RIG_TEST_PEER_DEV"))
		cr_skip_test("a storm across two hosts (tests/rxe-vm --two-hosts)");
	cr_assert_leq(CROWD * CROWD_EACH, SRV_SLOTS);
	t_child_report();
	for (k = 0; k < CROWD; k++) {	/* before any thread starts */
		pid[k] = t_fork_piped(&go[k], &from[k], O_CLOEXEC);
		if (pid[k] == 0) {
			alarm(STORM_DIAL_US / 1000000);	/* a hang ends in SIGALRM */
			crowd_child(from[k], go[k], port);
			_exit(0);
		}
	}
	srv_start(&s, port, false, false);
	t0 = t_now_ms();
	for (k = 0; k < CROWD; k++)
		cr_assert_eq(write(go[k], "g", 1), 1);
	for (k = 0; k < CROWD; k++) {
		struct pollfd pfd = { from[k], POLLIN, 0 };
		char c = 0;

		cr_assert_eq(poll(&pfd, 1, STORM_DIAL_US / 1000), 1,
			     "client process %d: not all up in %lld s", k, STORM_DIAL_US / 1000000);
		cr_assert_eq(read(from[k], &c, 1), 1, "client process %d died: %s", k,
			     t_child_msg());
		cr_assert_eq(c, 'u');
	}
	cr_log_info("storm: %d clients from %d processes at once, all up in %.0f ms",
		    CROWD * CROWD_EACH, CROWD, t_now_ms() - t0);
	cr_assert_eq(SRV_COUNT(&s, accepted), CROWD * CROWD_EACH);
	for (k = 0; k < CROWD; k++) {
		cr_assert_eq(write(go[k], "x", 1), 1);
		cr_assert_eq(waitpid(pid[k], &status, 0), pid[k]);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "client process %d ended with status %#x: %s", k, status, t_child_msg());
		close(go[k]);
		close(from[k]);
	}
	srv_join(&s);
	srv_close(&s);
}
