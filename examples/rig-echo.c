/* SPDX-License-Identifier: MIT */
/*
 * rig-echo: an echo server over reliable-connected queue pairs, with one
 * loop per thread. Every message a client sends comes back to it, the same
 * bytes, on the same queue pair.
 *
 *	rig-echo -d DEV -a ADDR -p PORT [-t THREADS] [-s MAXSIZE] [-r RECVS]
 *		 [-q DEPTH] [-L MS] [-v]
 *
 * Depth. A server of many clients gives each queue pair NIC queues of
 * DEPTH entries (rig_nic_set_depth, rig(7) Q4), 63 by default: a client
 * keeps at most RECVS messages in flight, so more would only pin memory
 * (megabytes a queue pair at the full 4095 on a real NIC) for entries
 * that never come. The rings keep their 4095; entries beyond DEPTH wait
 * in them. -q 4095 gives the full depth; RIG_QP_DEPTH in the environment
 * is used when -q is not given.
 *
 * Threads, one port. A queue pair is bound to a loop when it is made
 * (loop.h). Thread i has its own loop (rig_loop_open() on the shared NIC)
 * and its own io_uring, and the server listens once, on PORT, with
 * rig_loops_listen() over all the threads' loops (cm.h): each connection
 * request goes to the loop with the fewest connections, and the queue
 * pair is made in that loop. So a thread serves the connections its loop
 * accepted, start to end, with no lock and no hand-over, and clients need
 * to know one port only. No thread waits on another: any loop that turns
 * takes the pending requests, and one handed to a loop whose thread does
 * not come back to it in time goes to another.
 *
 * Each connection gets a region of its own, RECVS slots of MAXSIZE bytes,
 * mapped with mmap so that it goes back to the kernel when the client
 * leaves (and once no client is left, malloc_trim() gives back what the
 * library's share of them left in the heap). That costs the loop thread
 * a registration at each accept and a deregistration and an unmap at
 * each departure; on bnxt_re and mlx5 the first two are commands to the
 * NIC's firmware that sleep. A server for those NICs would register one
 * region at start and carve its clients' slots from it, keeping its
 * memory for the next clients instead. Every slot holds a posted
 * receive; a message that arrives in a slot is sent back from that slot,
 * and the slot's receive is posted again once that send completes. Each
 * ring completes in the order of its posts, so two FIFOs of slot numbers
 * say which slot each completion is for.
 *
 * Who speaks first: the client. A queue pair reaches the server as
 * RIG_NEWS_ACCEPTED before rig answers the client's request, so the
 * receives posted here are in place before the client can send, however
 * late this thread comes back to its loop (rig(7) CONNECTIONS BY
 * ADDRESS): a client that keeps at most RECVS messages in flight never
 * meets a queue pair without a receive posted. The server never speaks
 * first: what it would send on RIG_NEWS_ACCEPTED would leave before the
 * client has the answer.
 *
 * A client that leaves (its process ends or is killed, it destroys its
 * queue pair) comes out of the loop as RIG_NEWS_GONE: the server takes
 * what its rings still report, prints one line with the news' result and
 * the failure rig_qp_failure() keeps, and closes the queue pair with
 * rig_qp_close(). A client whose host vanishes without a word (its link
 * cut, its power lost) sends no disconnect, and a server that only
 * waits for its next message would never know: the loop's liveness
 * probes fail such a queue pair with -ETIMEDOUT, and it comes out as
 * RIG_NEWS_GONE the same way (rig(7) L1; -L sets their interval, 0 turns
 * them off). They need this thread to be the one that posts and polls
 * its clients' send rings, which it is. A completion that fails without
 * that news (a message longer than MAXSIZE, say) ends the connection the
 * same way.
 *
 * Closing, not destroying. Destroying a queue pair takes the kernel
 * milliseconds (its QP, two CQs, the disconnect and the rdma_cm id), and
 * a thread that destroyed each departed client would stall every other
 * client of its loop for as long: 200 clients killed at once cost seconds.
 * rig_qp_close() returns at once and the loop's helper thread does the
 * destroy; RIG_NEWS_CLOSED, whose cookie names the client, says when it is
 * done. Only then does the NIC write no more into the client's slots
 * (rig(7) D3), so its region and memory are freed at that news, not at
 * the close. A client stays in its thread's map until then, marked
 * closing; the loop hands out no other news of it meanwhile. At shutdown,
 * closing the loop ends the closes under way, and their clients' memory
 * goes after it. The one place that still destroys in line is a client
 * refused as it arrives (no memory for it), which is rare and cheap to
 * keep simple.
 *
 * What that costs a thread is in the stats line: closes= the departed
 * clients closed so far; close_cpu_us= the CPU time the threads spent in
 * those calls (CLOCK_THREAD_CPUTIME_ID: what the close itself costs)
 * and close_us= the wall time (which also counts a thread the machine
 * did not run meanwhile, say while the helper thread destroyed);
 * close_cpu_max_us= and close_max_us= the longest one pass (the clients
 * of one batch of news) held its thread, each way; pass_cpu_max_us= and
 * pass_max_us= the longest one pass of news took since the last stats
 * line, all of it (the library's share, the reports, the closes).
 *
 * Thread 0 also reads a signalfd (SIGINT, SIGTERM: stop; SIGUSR1: print a
 * stats line) and counts a 1 s tick (an io_uring timeout; -v prints the
 * stats line at each). Stopping writes an eventfd every thread polls. Each
 * line on stdout starts with the wall-clock time, [seconds.micros], so
 * that a test can compare it with the time it killed a client. The line
 * that says it listens ends with the threads' ids in the kernel, so that
 * a load generator on the same machine can count their waits for a CPU
 * (rig-echo-load -W).
 *
 * Build:
 *	cc -O2 -pthread -o rig-echo rig-echo.c \
 *		$(pkg-config --cflags --libs rig liburing)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>
#include <rig/rig.h>

#define EC_THREADS_MAX 64
#define EC_RECVS_MAX 1024
#define EC_READY 64		/* news taken per rig_uring_handle() */
#define EC_URING_ENTRIES 64

/* user_data of the SQEs: what completed */
enum ec_kind { EC_RIG = 1, EC_STOP, EC_SIGNAL, EC_TICK };

struct ec_opts {
	const char *dev;
	const char *addr;
	unsigned int port;
	unsigned int threads;
	size_t maxsize;
	unsigned int recvs;
	unsigned long long live_ms;	/* -L: the liveness interval */
	unsigned long long depth;	/* -q: the NIC's queues (rig_nic_set_depth) */
	bool depth_set;
	bool verbose;
};

/* What a server of many clients should give each queue pair's NIC
 * queues: above the receives a client keeps in flight (-r), a sliver of
 * the full 4095 (rig(7) Q4). */
#define EC_DEPTH_DEFAULT 63

/* One client: its queue pair, its region and what is in flight. */
struct ec_conn {
	/* in its thread's list; the loop's news of its queue pair carries
	 * it as the queue pair's cookie (rig_qp_set_cookie) */
	struct ec_conn *next, **prev;
	struct ec_conn *next_doomed;
	struct rig_qp *qp;
	struct rig_region *region;
	uint8_t *buf;
	size_t buf_len;
	uint32_t qpn;
	/* each ring's slot numbers in post order, indexed by free-running
	 * counters (64 bits: they never wrap) modulo recvs */
	uint32_t *recv_fifo, *send_fifo;
	uint64_t recv_head, recv_tail, send_head, send_tail;
	unsigned long long msgs, bytes;
	bool doomed;
	bool closing;			/* rig_qp_close()d, its news not yet in */
	int gone;			/* RIG_NEWS_GONE's result, or 0 */
	int error;			/* the first failed completion's */
	const char *why;
};

struct ec_server;

struct ec_thread {
	struct ec_server *s;
	unsigned int idx;
	pthread_t tid;
	pid_t ktid;			/* its id in the kernel, for the stall meter */
	struct rig_loop *loop;
	struct io_uring ring;
	bool ring_up;
	bool stop;
	int status;
	struct ec_conn *conns;
	struct ec_conn *doomed;
	unsigned long long accepted, gone, msgs, bytes;
};

struct ec_server {
	struct ec_opts o;
	struct rig_nic *nic;
	struct rig_listener *listener;	/* the threads' loops' one listener */
	int stop_fd;			/* eventfd: written once, polled by all */
	int signal_fd;
	struct signalfd_siginfo siginfo;
	struct __kernel_timespec tick;
	unsigned long long ticks;
	atomic_int clients;
	atomic_bool trim_due;		/* clients went since the last trim */
	atomic_bool setup_failed;
	/* the departed clients' closes, in the loop threads (ec_bury) */
	atomic_ullong closes, close_ns, close_max_ns, close_cpu_ns, close_cpu_max_ns;
	/* the longest pass of news, all of it (ec_on_rig) */
	atomic_ullong pass_max_ns, pass_cpu_max_ns;
	pthread_barrier_t ready;
	struct ec_thread th[EC_THREADS_MAX];
};

/* ---- output ------------------------------------------------------------ */

/* One line on stdout, after the wall-clock time: one stdio call, so lines
 * of different threads never mix. */
static void __attribute__((format(printf, 1, 2))) ec_log(const char *fmt, ...)
{
	char line[512];
	struct timespec ts;
	va_list ap;
	int n;

	clock_gettime(CLOCK_REALTIME, &ts);
	n = snprintf(line, sizeof(line), "[%lld.%06ld] ", (long long)ts.tv_sec,
		     ts.tv_nsec / 1000);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	puts(line);
}

/* Reports a failed rig call: what failed, its errno, and rig's words. */
static int ec_fail(const char *call, int ret)
{
	fprintf(stderr, "%s: %s (%s)\n", call, strerror(-ret), rig_errmsg());
	return 1;
}

static int ec_fail_sys(const char *call, int err)
{
	fprintf(stderr, "%s: %s\n", call, strerror(err));
	return 1;
}

/* The fds this process has open. */
static int ec_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1;	/* not the directory's own */
}

/* A "Name: N kB" line of /proc/self/status: VmRSS, RssAnon... */
static long ec_status_kib(const char *name)
{
	FILE *f = fopen("/proc/self/status", "r");
	size_t len = strlen(name);
	char line[256];
	long kib = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, name, len) && line[len] == ':') {
			kib = strtol(line + len + 1, NULL, 10);
			break;
		}
	fclose(f);
	return kib;
}

/*
 * With no client left, gives the heap's free pages back to the kernel:
 * glibc keeps what the clients freed (the library's two 64 KiB slot
 * arrays a queue pair, and smaller things) for later, in pieces, and a
 * heap shrinks only from its top. An idle server is then as small as it
 * started. Thread 0 does it at its tick once clients went, and before
 * every stats line; a client counts until all of it is freed.
 */
static void ec_trim(struct ec_server *s, bool always)
{
	if (!atomic_load(&s->clients) &&
	    (atomic_exchange(&s->trim_due, false) || always))
		malloc_trim(0);
}

/* The resident set; its anonymous part (the heap, the regions, without
 * the program's pages from files, which the kernel may evict at any
 * time); and what malloc has handed out and not taken back. */
static void ec_stats(struct ec_server *s)
{
	struct mallinfo2 mi;

	ec_trim(s, true);
	mi = mallinfo2();
	ec_log("stats: clients=%d fds=%d rss_kib=%ld anon_kib=%ld heap_kib=%zu "
	       "closes=%llu close_cpu_us=%llu close_cpu_max_us=%llu close_us=%llu "
	       "close_max_us=%llu pass_cpu_max_us=%llu pass_max_us=%llu",
	       atomic_load(&s->clients), ec_fd_count(), ec_status_kib("VmRSS"),
	       ec_status_kib("RssAnon"), (mi.uordblks + mi.hblkhd) / 1024,
	       atomic_load(&s->closes), atomic_load(&s->close_cpu_ns) / 1000,
	       atomic_load(&s->close_cpu_max_ns) / 1000,
	       atomic_load(&s->close_ns) / 1000, atomic_load(&s->close_max_ns) / 1000,
	       atomic_exchange(&s->pass_cpu_max_ns, 0) / 1000,
	       atomic_exchange(&s->pass_max_ns, 0) / 1000);
}

/* ---- the io_uring ------------------------------------------------------ */

static struct io_uring_sqe *ec_sqe(struct ec_thread *t, enum ec_kind kind)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&t->ring);

	if (!sqe) {
		io_uring_submit(&t->ring);
		sqe = io_uring_get_sqe(&t->ring);
		if (!sqe) {
			fprintf(stderr, "io_uring_get_sqe: the ring is full\n");
			exit(1);
		}
	}
	io_uring_sqe_set_data64(sqe, kind);
	return sqe;
}

static void ec_queue_signal(struct ec_thread *t)
{
	io_uring_prep_read(ec_sqe(t, EC_SIGNAL), t->s->signal_fd,
			   &t->s->siginfo, sizeof(t->s->siginfo), 0);
}

static void ec_queue_tick(struct ec_thread *t)
{
	io_uring_prep_timeout(ec_sqe(t, EC_TICK), &t->s->tick, 0, 0);
}

/* Stops every thread: the eventfd stays readable, each one's poll fires. */
static void ec_stop_all(struct ec_server *s)
{
	uint64_t one = 1;

	if (write(s->stop_fd, &one, sizeof(one)) != sizeof(one))
		ec_fail_sys("write to the stop eventfd", errno);
}

/* ---- clients ----------------------------------------------------------- */

static void ec_link(struct ec_thread *t, struct ec_conn *c)
{
	c->next = t->conns;
	c->prev = &t->conns;
	if (t->conns)
		t->conns->prev = &c->next;
	t->conns = c;
}

static void ec_unlink(struct ec_conn *c)
{
	*c->prev = c->next;
	if (c->next)
		c->next->prev = c->prev;
}

static size_t ec_slot_at(const struct ec_server *s, uint32_t slot)
{
	return (size_t)slot * s->o.maxsize;
}

static int ec_post_receive(struct ec_server *s, struct ec_conn *c,
			   uint32_t slot)
{
	int ret = rig_qp_receive(c->qp, c->region, ec_slot_at(s, slot),
				 s->o.maxsize);

	if (ret)
		return ret;
	c->recv_fifo[c->recv_head++ % s->o.recvs] = slot;
	return 0;
}

/* Marks @c to go once the news at hand is handled: a later entry of the
 * same list may still name its queue pair. */
static void ec_doom(struct ec_thread *t, struct ec_conn *c, int error,
		    const char *why)
{
	if (error && !c->error) {
		c->error = error;
		c->why = why;
	}
	if (c->doomed)
		return;
	c->doomed = true;
	c->next_doomed = t->doomed;
	t->doomed = c;
}

/* Frees what ec_accept() took; the queue pair was destroyed or never was. */
static void ec_free(struct ec_conn *c)
{
	int ret;

	if (c->region && (ret = rig_region_deregister(c->region)))
		ec_fail("rig_region_deregister", ret);
	if (c->buf)
		munmap(c->buf, c->buf_len);
	free(c->recv_fifo);
	free(c->send_fifo);
	free(c);
}

/* A new client: its region and its receives. */
static void ec_accept(struct ec_thread *t, struct rig_qp *qp)
{
	struct ec_server *s = t->s;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	struct rig_endpoint e;
	struct ec_conn *c;
	uint32_t i;
	int ret;

	c = calloc(1, sizeof(*c));
	if (!c) {
		fprintf(stderr, "no memory for a client\n");
		goto refuse;
	}
	c->qp = qp;
	rig_qp_endpoint(qp, &e);
	c->qpn = e.qp;
	c->recv_fifo = calloc(s->o.recvs, sizeof(*c->recv_fifo));
	c->send_fifo = calloc(s->o.recvs, sizeof(*c->send_fifo));
	c->buf_len = (s->o.recvs * s->o.maxsize + page - 1) / page * page;
	c->buf = mmap(NULL, c->buf_len, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (c->buf == MAP_FAILED)
		c->buf = NULL;
	if (!c->recv_fifo || !c->send_fifo || !c->buf) {
		fprintf(stderr, "qp 0x%06x: no memory for its buffers\n", c->qpn);
		goto refuse;
	}
	ret = rig_region_register(s->nic, c->buf, c->buf_len, &c->region);
	if (ret) {
		ec_fail("rig_region_register", ret);
		goto refuse;
	}
	for (i = 0; i < s->o.recvs; i++) {
		ret = ec_post_receive(s, c, i);
		if (ret) {
			ec_fail("rig_qp_receive", ret);
			goto refuse;
		}
	}
	/* The loop hands @c back with each piece of news of its queue pair. */
	rig_qp_set_cookie(qp, (uintptr_t)c);
	ec_link(t, c);
	t->accepted++;
	atomic_fetch_add(&s->clients, 1);
	if (s->o.verbose)
		ec_log("accepted qp=0x%06x port %u thread %u", c->qpn,
		       s->o.port, t->idx);
	return;

refuse:
	/* this client only: the server goes on */
	ret = rig_qp_destroy(qp);
	if (ret)
		ec_fail("rig_qp_destroy", ret);
	if (c)
		ec_free(c);
}

/* A message came into the oldest receive's slot: send it back from there. */
static void ec_on_receive(struct ec_thread *t, struct ec_conn *c,
			  uint32_t bytes)
{
	struct ec_server *s = t->s;
	uint32_t slot = c->recv_fifo[c->recv_tail++ % s->o.recvs];
	int ret;

	c->msgs++;
	c->bytes += bytes;
	t->msgs++;
	t->bytes += bytes;
	ret = rig_qp_send(c->qp, c->region, ec_slot_at(s, slot), bytes);
	if (ret) {
		ec_doom(t, c, ret, "rig_qp_send refused the echo");
		return;
	}
	c->send_fifo[c->send_head++ % s->o.recvs] = slot;
}

/* The oldest echo went: its slot takes a receive again. */
static void ec_on_send(struct ec_thread *t, struct ec_conn *c)
{
	struct ec_server *s = t->s;
	uint32_t slot = c->send_fifo[c->send_tail++ % s->o.recvs];
	int ret;

	ret = ec_post_receive(s, c, slot);
	if (ret)
		ec_doom(t, c, ret, "rig_qp_receive refused");
}

/* Takes every completion a ring of @c has now. */
static void ec_poll(struct ec_thread *t, struct ec_conn *c, enum rig_side side)
{
	struct rig_completion cp;
	int ret;

	while ((ret = rig_qp_poll(c->qp, side, &cp)) == 1) {
		if (cp.error)
			ec_doom(t, c, cp.error, cp.why);
		else if (c->doomed)
			continue;	/* going: nothing more is posted */
		else if (side == RIG_RECEIVE)
			ec_on_receive(t, c, cp.bytes);
		else
			ec_on_send(t, c);
	}
	if (ret < 0)
		ec_doom(t, c, ret, "rig_qp_poll refused");
}

/* @c's queue pair is destroyed: the NIC writes no more into its memory. */
static void ec_closed(struct ec_thread *t, struct ec_conn *c)
{
	struct ec_server *s = t->s;

	ec_unlink(c);
	ec_free(c);
	t->gone++;
	/* due first: whoever sees no client sees the trim due */
	atomic_store(&s->trim_due, true);
	atomic_fetch_sub(&s->clients, 1);
}

static uint64_t ec_clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void ec_max(atomic_ullong *max, uint64_t ns)
{
	unsigned long long m = atomic_load(max);

	while (ns > m && !atomic_compare_exchange_weak(max, &m, ns))
		;
}

static void ec_add_max(atomic_ullong *sum, atomic_ullong *max, uint64_t ns)
{
	atomic_fetch_add(sum, ns);
	ec_max(max, ns);
}

/* Counts @n closes that held the thread @ns of wall time, @cpu_ns of its
 * CPU time. */
static void ec_count_closes(struct ec_server *s, unsigned int n, uint64_t ns,
			    uint64_t cpu_ns)
{
	atomic_fetch_add(&s->closes, n);
	ec_add_max(&s->close_ns, &s->close_max_ns, ns);
	ec_add_max(&s->close_cpu_ns, &s->close_cpu_max_ns, cpu_ns);
}

/*
 * Reports, then closes, the queue pairs that went during the last news:
 * every line first, so that a client's report waits for no close.
 */
static void ec_bury(struct ec_thread *t)
{
	struct ec_server *s = t->s;
	struct ec_conn *c, *doomed = t->doomed;
	struct rig_qp_peer peer;
	unsigned int n = 0;
	uint64_t t0, cpu0;
	int err, wc, ret;

	if (!doomed)
		return;
	t->doomed = NULL;
	for (c = doomed; c; c = c->next_doomed) {
		/* what its rings still report: the failure and its reason */
		ec_poll(t, c, RIG_RECEIVE);
		ec_poll(t, c, RIG_SEND);
		wc = -1;
		err = rig_qp_failure(c->qp, &wc);
		/* who it was: the line matches the client's own log */
		peer = (struct rig_qp_peer){ .size = sizeof(peer) };
		if (rig_qp_peer(c->qp, &peer))
			snprintf(peer.addr, sizeof(peer.addr), "?");
		ec_log("gone qp=0x%06x peer %s qp=0x%06x port %u thread %u after %llu msgs "
		       "(%llu bytes): %s (%d), failure %d wc %d: %s",
		       c->qpn, peer.addr, peer.peer_qp, s->o.port, t->idx, c->msgs, c->bytes,
		       c->gone ? strerror(-c->gone) : "failed", c->gone ? c->gone
		       : c->error, err, wc, c->why ? c->why : "none");
	}
	t0 = ec_clock_ns(CLOCK_MONOTONIC);
	cpu0 = ec_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	while ((c = doomed)) {
		doomed = c->next_doomed;
		n++;
		/* its memory goes at RIG_NEWS_CLOSED (ec_closed) */
		c->closing = true;
		ret = rig_qp_close(c->qp, (uint64_t)(uintptr_t)c);
		if (ret) {
			ec_fail("rig_qp_close", ret);
			ret = rig_qp_destroy(c->qp);
			if (ret)
				ec_fail("rig_qp_destroy", ret);
			ec_closed(t, c);
		}
	}
	if (n)
		ec_count_closes(s, n, ec_clock_ns(CLOCK_MONOTONIC) - t0,
				ec_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0);
}

static void ec_on_news(struct ec_thread *t, const struct rig_ready *r)
{
	struct ec_conn *c;

	if (r->news == RIG_NEWS_ACCEPTED) {
		ec_accept(t, r->qp);
		return;
	}
	if (r->news == RIG_NEWS_CLOSED) {
		c = (struct ec_conn *)(uintptr_t)r->cookie;
		if (r->result)
			ec_fail("rig_qp_close", r->result);
		ec_closed(t, c);
		return;
	}
	c = (struct ec_conn *)(uintptr_t)r->cookie;
	if (!c || c->qp != r->qp) {
		fprintf(stderr, "news %d for a queue pair the server does not have\n",
			r->news);
		return;
	}
	switch (r->news) {
	case RIG_NEWS_RING:
		ec_poll(t, c, r->side);
		break;
	case RIG_NEWS_GONE:
		c->gone = r->result;
		ec_doom(t, c, 0, NULL);
		break;
	default:
		fprintf(stderr, "unexpected news %d\n", r->news);
		break;
	}
}

static int ec_on_rig(struct ec_thread *t, const struct io_uring_cqe *cqe)
{
	struct rig_ready ready[EC_READY];
	uint64_t t0 = ec_clock_ns(CLOCK_MONOTONIC);
	uint64_t cpu0 = ec_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	int i, n, round;

	/* More than EC_READY: ask for the rest, a few times; news left then
	 * wakes the loop again, after the ring's other CQEs (the tick). */
	for (round = 0; round < 4; round++) {
		n = rig_uring_handle(&t->ring, t->loop, cqe, ready, EC_READY);
		/* The poll ended with no SQE free to queue it again: submit
		 * ours, and watch again (rig_uring_watch(3)). */
		if (n == -EBUSY) {
			io_uring_submit(&t->ring);
			n = rig_uring_watch(&t->ring, t->loop, EC_RIG);
			if (n)
				return ec_fail("rig_uring_watch", n);
			break;
		}
		if (n < 0)
			return ec_fail("rig_uring_handle", n);
		for (i = 0; i < n; i++)
			ec_on_news(t, &ready[i]);
		if (n < EC_READY)
			break;
		cqe = NULL;
	}
	ec_bury(t);
	ec_max(&t->s->pass_max_ns, ec_clock_ns(CLOCK_MONOTONIC) - t0);
	ec_max(&t->s->pass_cpu_max_ns, ec_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0);
	return 0;
}

/* ---- the loop ---------------------------------------------------------- */

static int ec_on_signal(struct ec_thread *t, int res)
{
	struct ec_server *s = t->s;

	if (res != sizeof(s->siginfo))
		return ec_fail_sys("read from the signalfd", res < 0 ? -res : EIO);
	if (s->siginfo.ssi_signo == SIGUSR1) {
		ec_stats(s);
		ec_queue_signal(t);
		return 0;
	}
	ec_log("caught %s", strsignal((int)s->siginfo.ssi_signo));
	ec_stop_all(s);
	return 0;
}

static int ec_dispatch(struct ec_thread *t, const struct io_uring_cqe *cqe)
{
	struct ec_server *s = t->s;

	switch ((enum ec_kind)io_uring_cqe_get_data64(cqe)) {
	case EC_RIG:
		return ec_on_rig(t, cqe);
	case EC_STOP:
		t->stop = true;
		return 0;
	case EC_SIGNAL:
		return ec_on_signal(t, cqe->res);
	case EC_TICK:
		if (cqe->res != -ETIME)
			return ec_fail_sys("timeout", -cqe->res);
		s->ticks++;
		if (s->o.verbose)
			ec_stats(s);
		else
			ec_trim(s, false);
		ec_queue_tick(t);
		return 0;
	}
	fprintf(stderr, "a CQE of unknown kind %#llx\n",
		(unsigned long long)cqe->user_data);
	return 1;
}

static int ec_loop(struct ec_thread *t)
{
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	int ret = 0;

	while (!t->stop) {
		ret = io_uring_submit_and_wait(&t->ring, 1);
		if (ret < 0 && ret != -EINTR)
			return ec_fail_sys("io_uring_submit_and_wait", -ret);
		ret = 0;
		seen = 0;
		io_uring_for_each_cqe(&t->ring, head, cqe) {
			seen++;
			ret = ec_dispatch(t, cqe);
			if (ret)
				break;
		}
		io_uring_cq_advance(&t->ring, seen);
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- threads ----------------------------------------------------------- */

static int ec_thread_setup(struct ec_thread *t)
{
	struct ec_server *s = t->s;
	int ret;

	ret = io_uring_queue_init(EC_URING_ENTRIES, &t->ring, 0);
	if (ret)
		return ec_fail_sys("io_uring_queue_init", -ret);
	t->ring_up = true;
	ret = rig_loop_open(s->nic, &t->loop);
	if (ret)
		return ec_fail("rig_loop_open", ret);
	ret = rig_loop_liveness(t->loop, (int64_t)s->o.live_ms);
	if (ret)
		return ec_fail("rig_loop_liveness", ret);
	ret = rig_uring_watch(&t->ring, t->loop, EC_RIG);
	if (ret)
		return ec_fail("rig_uring_watch", ret);
	io_uring_prep_poll_add(ec_sqe(t, EC_STOP), s->stop_fd, POLLIN);
	if (t->idx == 0) {
		ec_queue_signal(t);
		ec_queue_tick(t);
	}
	return 0;
}

/* Gives back what the thread took, its clients' queue pairs first. */
static int ec_thread_teardown(struct ec_thread *t)
{
	struct ec_conn *c, *closing = NULL;
	int ret, status = 0;

	/* first what is in flight in the ring: the poll on the loop's fd */
	if (t->ring_up)
		io_uring_queue_exit(&t->ring);
	while ((c = t->conns)) {
		ec_unlink(c);
		if (c->closing) {
			/* the NIC may write its memory until the loop has
			 * ended its close */
			c->next = closing;
			closing = c;
			continue;
		}
		ret = rig_qp_destroy(c->qp);
		if (ret)
			status = ec_fail("rig_qp_destroy", ret);
		ec_free(c);
		atomic_fetch_sub(&t->s->clients, 1);
	}
	/* The other threads' loops may still turn: the close is theirs to
	 * finish, each on its next turn; a loop that closes first leaves
	 * the listener. */
	if (t->idx == 0 && t->s->listener && (ret = rig_listener_close(t->s->listener)))
		status = ec_fail("rig_listener_close", ret);
	if (t->loop && (ret = rig_loop_close(t->loop)))
		status = ec_fail("rig_loop_close", ret);
	while ((c = closing)) {
		closing = c->next;
		ec_free(c);
		atomic_fetch_sub(&t->s->clients, 1);
	}
	return status;
}

/* Once every thread's loop is open: one listener for all of them. */
static int ec_listen(struct ec_server *s)
{
	struct rig_loop *loops[EC_THREADS_MAX];
	char tids[EC_THREADS_MAX * 12] = "";
	size_t len = 0;
	unsigned int i;
	int ret;

	for (i = 0; i < s->o.threads; i++)
		loops[i] = s->th[i].loop;
	ret = rig_loops_listen(loops, (int)s->o.threads, s->o.addr, (uint16_t)s->o.port, 0,
			       &s->listener);
	if (ret) {
		fprintf(stderr, "listen on %s port %u: ", s->o.addr, s->o.port);
		return ec_fail("rig_loops_listen", ret);
	}
	for (i = 0; i < s->o.threads; i++)
		len += (size_t)snprintf(tids + len, sizeof(tids) - len, " %d",
					(int)s->th[i].ktid);
	ec_log("listening on %s port %u, %u threads, %u receives of %zu bytes per client; "
	       "the threads' ids:%s", s->o.addr, s->o.port, s->o.threads, s->o.recvs,
	       s->o.maxsize, tids);
	return 0;
}

static void *ec_thread_main(void *arg)
{
	struct ec_thread *t = arg;
	struct ec_server *s = t->s;

	t->ktid = gettid();
	if (ec_thread_setup(t))
		atomic_store(&s->setup_failed, true);
	/* every loop open and watched, or none serves */
	pthread_barrier_wait(&s->ready);
	if (!atomic_load(&s->setup_failed)) {
		if (t->idx == 0)
			t->status = ec_listen(s);
		if (!t->status)
			t->status = ec_loop(t);
		if (t->status)
			ec_stop_all(s);
	} else {
		t->status = 1;
	}
	if (ec_thread_teardown(t))
		t->status = 1;
	return NULL;
}

/* SIGINT, SIGTERM and SIGUSR1 come through a signalfd in thread 0's ring;
 * blocked before the threads start, so that they inherit the mask. */
static int ec_signals(void)
{
	sigset_t mask;
	int fd;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGUSR1);
	if (sigprocmask(SIG_BLOCK, &mask, NULL)) {
		ec_fail_sys("sigprocmask", errno);
		return -1;
	}
	fd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (fd < 0)
		ec_fail_sys("signalfd", errno);
	return fd;
}

static int ec_run(struct ec_server *s)
{
	unsigned long long accepted = 0, gone = 0, msgs = 0, bytes = 0;
	unsigned int i, started;
	int ret, status = 0;

	ret = pthread_barrier_init(&s->ready, NULL, s->o.threads);
	if (ret)
		return ec_fail_sys("pthread_barrier_init", ret);
	for (started = 1; started < s->o.threads; started++) {
		ret = pthread_create(&s->th[started].tid, NULL, ec_thread_main,
				     &s->th[started]);
		if (ret) {
			/* the barrier waits for them all: no way on */
			ec_fail_sys("pthread_create", ret);
			exit(1);
		}
	}
	ec_thread_main(&s->th[0]);
	for (i = 1; i < s->o.threads; i++)
		pthread_join(s->th[i].tid, NULL);
	pthread_barrier_destroy(&s->ready);
	for (i = 0; i < s->o.threads; i++) {
		status |= s->th[i].status;
		accepted += s->th[i].accepted;
		gone += s->th[i].gone;
		msgs += s->th[i].msgs;
		bytes += s->th[i].bytes;
	}
	if (!atomic_load(&s->setup_failed))
		ec_log("totals: %llu clients accepted, %llu gone, %llu msgs "
		       "(%llu bytes) echoed, %llu ticks", accepted, gone, msgs,
		       bytes, s->ticks);
	return status;
}

/* ---- setup ------------------------------------------------------------- */

static void ec_usage(const char *argv0)
{
	fprintf(stderr,
		"Usage: %s -d DEV -a ADDR -p PORT [-t THREADS] [-s MAXSIZE] [-r RECVS]\n"
		"          [-q DEPTH] [-L MS] [-v]\n"
		"  -d DEV      RDMA device (default: the first RoCE v2 device)\n"
		"  -a ADDR     the device's IP address to listen on\n"
		"  -p PORT     the port to listen on, for every thread\n"
		"  -t THREADS  threads, each with its loop (default 1)\n"
		"  -s MAXSIZE  the longest message taken (default 4096)\n"
		"  -r RECVS    receives kept posted per client (default 16)\n"
		"  -q DEPTH    the NIC's queue depth under each ring, 1 to 4095 (default\n"
		"              63, or RIG_QP_DEPTH): entries beyond it wait in the ring\n"
		"  -L MS       probe idle clients every MS ms, to find a vanished\n"
		"              host (default 2000, RIG_LIVENESS_MS; 0: never)\n"
		"  -v          print each client accepted, and stats every second\n"
		"SIGUSR1 prints a stats line; SIGINT and SIGTERM stop it.\n",
		argv0);
}

static int ec_number(const char *arg, unsigned long long min,
		     unsigned long long max, unsigned long long *v)
{
	char *end;

	errno = 0;
	*v = strtoull(arg, &end, 0);
	return errno || end == arg || *end || arg[0] == '-' || *v < min ||
	       *v > max ? -1 : 0;
}

static int ec_parse_opts(int argc, char *argv[], struct ec_opts *o)
{
	unsigned long long v;
	int c;

	while ((c = getopt(argc, argv, "d:a:p:t:s:r:q:L:v")) != -1) {
		switch (c) {
		case 'd':
			o->dev = optarg;
			break;
		case 'a':
			o->addr = optarg;
			break;
		case 'p':
			if (ec_number(optarg, 1, 65535, &v))
				return -1;
			o->port = (unsigned int)v;
			break;
		case 't':
			if (ec_number(optarg, 1, EC_THREADS_MAX, &v))
				return -1;
			o->threads = (unsigned int)v;
			break;
		case 's':
			if (ec_number(optarg, 1, 1u << 24, &v))
				return -1;
			o->maxsize = (size_t)v;
			break;
		case 'r':
			if (ec_number(optarg, 1, EC_RECVS_MAX, &v))
				return -1;
			o->recvs = (unsigned int)v;
			break;
		case 'q':
			if (ec_number(optarg, 1, RIG_RING_ENTRIES, &o->depth))
				return -1;
			o->depth_set = true;
			break;
		case 'L':
			if (ec_number(optarg, 0, 24 * 3600 * 1000, &o->live_ms))
				return -1;
			break;
		case 'v':
			o->verbose = true;
			break;
		default:
			return -1;
		}
	}
	if (optind != argc || !o->addr || !o->port)
		return -1;
	return 0;
}

int main(int argc, char *argv[])
{
	struct ec_opts o = { .threads = 1, .maxsize = 4096, .recvs = 16,
			     .live_ms = RIG_LIVENESS_MS, .depth = EC_DEPTH_DEFAULT };
	struct ec_server *s;
	unsigned int i;
	int ret, status;

	if (ec_parse_opts(argc, argv, &o)) {
		ec_usage(argv[0]);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	/*
	 * One heap for all threads: malloc_trim() (ec_trim) gives back the
	 * free pages of every heap but the free top of a thread's own, which
	 * glibc gives back only as that thread frees.
	 */
	mallopt(M_ARENA_MAX, 1);
	/*
	 * No transparent huge pages: where the kernel makes them for every
	 * anonymous mapping, a thread's stack that grows a few bytes across
	 * a 2 MiB boundary takes 2 MiB at once, and the resident set says
	 * nothing about what the server holds. Best-effort.
	 */
	prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
	s = calloc(1, sizeof(*s));
	if (!s)
		return ec_fail_sys("calloc", ENOMEM);
	s->o = o;
	s->tick.tv_sec = 1;
	s->stop_fd = s->signal_fd = -1;
	for (i = 0; i < o.threads; i++) {
		s->th[i].s = s;
		s->th[i].idx = i;
	}
	status = 1;
	s->signal_fd = ec_signals();
	if (s->signal_fd < 0)
		goto out;
	s->stop_fd = eventfd(0, EFD_CLOEXEC);
	if (s->stop_fd < 0) {
		ec_fail_sys("eventfd", errno);
		goto out;
	}
	ret = rig_nic_open(o.dev, &s->nic);
	if (ret) {
		ec_fail("rig_nic_open", ret);
		goto out;
	}
	/* Before any queue pair is made: -q, else RIG_QP_DEPTH, else 63. */
	if ((o.depth_set || !getenv("RIG_QP_DEPTH")) &&
	    (ret = rig_nic_set_depth(s->nic, (int)o.depth))) {
		ec_fail("rig_nic_set_depth", ret);
		goto out;
	}
	status = ec_run(s);
	ret = rig_nic_close(s->nic);
	if (ret)
		status = ec_fail("rig_nic_close", ret);
out:
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	if (s->signal_fd >= 0)
		close(s->signal_fd);
	free(s);
	return status;
}
