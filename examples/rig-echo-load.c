/* SPDX-License-Identifier: MIT */
/*
 * rig-echo-load: the load generator of rig-echo. It dials CONNS
 * connections, then each connection ping-pongs MSGS messages of SIZE
 * bytes, and every reply is checked byte for byte against what was sent.
 *
 *	rig-echo-load -d DEV -a ADDR -p PORT -c CONNS -s SIZE
 *		      -n MSGS [-t THREADS] [-i MS] [-w MS] [-q DEPTH] [-L MS] [-g] [-k] [-l]
 *
 * Every connection dials PORT (rig-echo listens there once, for all its
 * threads) and connection i is served by thread i % THREADS, which has a
 * loop of its own (rig_loop_open()) and an io_uring of its own: it starts
 * each dial with rig_loop_dial() and learns its outcome as
 * RIG_NEWS_DIALED. A dial
 * the server refused (its listener had as many handshakes under way and
 * requests waiting as it takes) is tried again after a pause that doubles, as TCP tries a
 * dropped SYN again, for 30 s from the first; so is a connection the
 * server let go before its first reply. The connection speaks first, the
 * moment its dial's news comes: a loop's listener has its queue pair
 * before it answers, so rig-echo's receives are posted before we can
 * send (rig(7) CONNECTIONS BY ADDRESS). A server whose host vanishes
 * (its link cut, its power lost) is the library's to find: each thread's
 * loop probes its idle connections (rig(7) L1; -L sets the interval) and
 * fails them with -ETIMEDOUT and RIG_NEWS_GONE, even one that only waits
 * for a reply. A server that hung is not: its NIC still acknowledges
 * every message and every probe, whatever the process does. So a timer
 * of our own, one per thread in its ring, ends a connection with no
 * reply within MS milliseconds of its first message (-w; 30 s by
 * default), with no new dial: a server that hung would not answer one.
 * The connection keeps one message in flight:
 * it posts the receive of the reply, fills message seq with a pattern
 * drawn from the connection's identity (pid, i) and seq, sends it, and
 * once the reply and the send's completion are both in, checks the reply
 * and starts the next message (with -i, MS milliseconds later: an
 * io_uring timeout). A message never leaves before the reply of the one
 * before, so the server never needs more than one receive posted for us.
 *
 * With -g it prints "ready: ..." once every connection is up and sends
 * nothing before a SIGUSR1 (a signalfd in thread 0's ring, which wakes
 * the other threads through an eventfd): a test can connect many
 * processes first and load the server after.
 *
 * It prints "streaming: ..." once every connection has had a reply, then
 * at the end perftest's latency columns (ib_send_lat's: half the round
 * trip, over every message of every connection) and the worst whole
 * round trip, with the wall-clock time its reply came, and exits 0 only
 * if every connection got every reply, each the same bytes as its
 * message. With -k the connections never stop (and keep no latency
 * samples): for tests that kill the process mid-stream. SIGINT or
 * SIGTERM stops it early: each connection ends once the reply of the
 * message it has in flight is in, and the process ends as if that had
 * been its last message (a connection not yet up fails). With -l it
 * prints every round trip as it ends, "[seconds.micros] round trip US
 * us, stall ST us, with a server thread's waits WT,... us ...", so that a
 * test can see what a connection met at any moment, not only its worst.
 *
 * The stall meter (-l). On a shared host the machine itself stops our
 * threads: a virtual CPU the host does not run, or more threads ready
 * to run in the guest than it has CPUs, holds a round trip up however
 * quick the server is. That is measured, not guessed, two ways.
 * - One meter thread per CPU, pinned to it, an ordinary thread like the
 *   others, asks to wake every millisecond. A wake-up more than
 *   EL_STALL_NS late is a stall: that CPU did not run a thread that was
 *   ready, from the asked-for wake-up until the late one.
 * - Those meters miss the guest's own crowding: the scheduler runs a
 *   thread that wakes from sleep ahead of one that has been computing,
 *   so a meter wakes on time while a busy thread waits. When 180
 *   clients die at once, their kernel teardown and the server's helper
 *   threads share two CPUs with its loop threads (measured: a loop
 *   thread's pass of news took 138 ms, 4 ms of it on a CPU and 134 ms
 *   ready to run and not run). So the threads that carry a round trip
 *   are measured too, by what the kernel counts for each
 *   (/proc/TID/schedstat: the time it spent ready on a run queue): our
 *   loop threads (with -g all of them, else those running when the
 *   load starts), and with -W the server's, when it runs on this
 *   machine. A wait longer than EL_STALL_NS is a stall too.
 * ST is how long, within the round trip, a CPU was stalled or one of our
 * threads waited (the union, clipped to the trip); each WT the same with
 * one server thread's waits too, in -W's order (ST alone without -W):
 * which of them served the connection is the server's to say. What the
 * server's thread spent on a CPU, or asleep in a call, counts in full.
 *
 * Build:
 *	cc -O2 -pthread -o rig-echo-load rig-echo-load.c \
 *		$(pkg-config --cflags --libs rig liburing)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include <liburing.h>
#include <rig/rig.h>

#define EL_THREADS_MAX 64
#define EL_READY 64
#define EL_URING_ENTRIES 64
#define EL_DIAL_US 30000000	/* a busy emulated guest connects slowly */
#define EL_REDIAL_MS 20		/* the first pause after a refused dial */
#define EL_REDIAL_MAX_MS 1000	/* doubling up to this */
#define EL_REPLY_MS 30000	/* -w's default */
#define EL_TICK_MAX_MS 1000	/* the reply timer's period, at most */
#define EL_METER_NS 1000000ull	/* -l: each meter's period */
#define EL_STALL_NS 2000000ull	/* a gap longer than this is a stall */
#define EL_STALLS 4096		/* the stalls a meter keeps, the newest */
#define EL_METERS_MAX 64

/* user_data of the SQEs: the kind, and for EL_NEXT and EL_REDIAL the
 * connection's index in its thread */
enum { EL_RIG = 1, EL_NEXT, EL_SIGNAL, EL_GO, EL_REDIAL, EL_TICK, EL_STOP };
#define EL_DATA(kind, k) ((uint64_t)(k) << 8 | (kind))

struct el_opts {
	const char *dev;
	const char *addr;
	unsigned int port;
	unsigned int conns;
	size_t size;
	unsigned long long msgs;
	unsigned int threads;
	unsigned int interval_ms;
	unsigned int reply_ms;		/* -w */
	unsigned int live_ms;		/* -L: the liveness interval */
	unsigned int depth;		/* -q: the NIC's queues; 0: RIG_QP_DEPTH or full */
	bool forever;
	bool gate;
	bool log_trips;			/* -l */
	const char *watch;		/* -W: the server's thread ids */
};

struct el_conn {
	unsigned int idx;
	uint64_t id;			/* (pid, idx): what the pattern is drawn from */
	struct rig_qp *qp;
	struct rig_region *region;
	uint8_t *buf;			/* [0, size): the message; then the reply */
	uint32_t seq;			/* the message in flight */
	unsigned long long done;	/* replies checked */
	bool served;			/* the server's first reply came */
	bool reply_due, send_due;
	bool ended;
	uint32_t reply_bytes;
	uint64_t t_sent, t_reply;	/* ns */
	uint64_t dial_end;		/* ns: no dial starts after this */
	uint64_t reply_end;		/* ns: the first reply is late after this;
					 * 0 until the first message left */
	unsigned int refused;		/* dials refused so far */
	struct __kernel_timespec pause;	/* before the next dial */
};

/* [from, to) in CLOCK_MONOTONIC ns */
struct el_span {
	uint64_t from, to;
};

/* -l: one CPU's stall meter, or a thread's (fd >= 0): its waits for a CPU */
struct el_meter {
	int cpu;
	int fd;				/* the thread's schedstat, else -1 */
	bool server;			/* -W's: its waits count for it alone */
	unsigned long long waited;	/* the thread's waits so far, ns */
	pthread_t tid;
	bool started;
	pthread_mutex_t lock;		/* of what follows */
	uint64_t last;			/* its last wake-up */
	unsigned long long n;		/* stalls so far: the last EL_STALLS kept */
	struct el_span stall[EL_STALLS];
};

struct el_load;

struct el_thread {
	struct el_load *l;
	unsigned int idx;
	pthread_t tid;
	atomic_int ktid;		/* its id in the kernel: -l watches it */
	struct rig_loop *loop;
	struct io_uring ring;
	bool ring_up;
	struct __kernel_timespec interval;
	struct __kernel_timespec tick;	/* the reply timer's period */
	bool ticking;			/* its timeout is in the ring */
	bool go;			/* -g: SIGUSR1 came */
	bool stopping;			/* SIGINT or SIGTERM came */
	struct signalfd_siginfo siginfo;	/* this thread's read of the signalfd */
	struct el_conn **conn;		/* the thread's connections */
	unsigned int nconns, ended;
	uint8_t *want;			/* scratch: the expected reply */
	uint64_t *lat;			/* half round trips, ns */
	struct el_span *spans;		/* -l: el_stalled's scratch */
	unsigned int seed;		/* of the redials' jitter */
	size_t nlat;
	unsigned long long trips;	/* round trips, -k's too */
	uint64_t worst_ns;		/* the longest whole round trip */
	struct timespec worst_at;	/* when its reply came (wall clock) */
	unsigned int worst_conn, worst_seq;
	int status;
};

struct el_load {
	struct el_opts o;
	struct rig_nic *nic;
	atomic_uint up;			/* connections dialed and not dropped */
	atomic_bool ready;		/* "ready: ..." was printed */
	atomic_uint streaming;		/* connections that had a reply */
	atomic_uint failed;
	atomic_uint refused;		/* dials tried again */
	atomic_uint dropped;		/* of them, after the server let go */
	int signal_fd;			/* SIGINT, SIGTERM; -g: SIGUSR1 */
	int go_fd, stop_fd;		/* eventfds every thread polls */
	struct el_thread th[EL_THREADS_MAX];
	struct el_meter *meter;		/* -l: one per CPU */
	unsigned int nmeters;
	atomic_bool metering;		/* they started */
};

static int el_fail(const char *call, int ret)
{
	fprintf(stderr, "%s: %s (%s)\n", call, strerror(-ret), rig_errmsg());
	return 1;
}

static uint64_t el_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64: each message's bytes from (connection, seq) */
static uint64_t el_mix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void el_pattern(uint8_t *p, size_t n, uint64_t id, uint32_t seq)
{
	uint64_t x = id * 0x2545f4914f6cdd1dull ^ seq, v;
	size_t i;

	for (i = 0; i < n; i += sizeof(v)) {
		v = el_mix(&x);
		memcpy(p + i, &v, n - i < sizeof(v) ? n - i : sizeof(v));
	}
}

/* A free SQE, flushing the queue to the kernel if it is full. */
static struct io_uring_sqe *el_sqe(struct el_thread *t, uint64_t data)
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
	io_uring_sqe_set_data64(sqe, data);
	return sqe;
}

/* The connection of a piece of news: the dial's cookie is the
 * connection's index, and its queue pair keeps it as its own cookie, so
 * every piece of news of the queue pair carries it too. NULL if unknown. */
static struct el_conn *el_of(struct el_thread *t, uint64_t cookie)
{
	struct el_load *l = t->l;

	if (cookie >= l->o.conns || cookie % l->o.threads != t->idx)
		return NULL;
	return t->conn[cookie / l->o.threads];
}

/* Ends @c: for good when it failed (the exit status says so). */
static void el_end(struct el_thread *t, struct el_conn *c, bool failed)
{
	if (c->ended)
		return;
	c->ended = true;
	if (failed)
		atomic_fetch_add(&t->l->failed, 1);
	t->ended++;
}

/* Ends @c for good, saying why: "[time] connection I message S: why" on
 * stderr, the wall-clock time to compare with the server's lines. */
static void __attribute__((format(printf, 3, 4)))
el_conn_fail(struct el_thread *t, struct el_conn *c, const char *fmt, ...)
{
	char why[256];
	struct timespec ts;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	clock_gettime(CLOCK_REALTIME, &ts);
	fprintf(stderr, "[%lld.%06ld] connection %u message %u: %s\n",
		(long long)ts.tv_sec, ts.tv_nsec / 1000, c->idx, c->seq, why);
	el_end(t, c, true);
}

static void el_tick_arm(struct el_thread *t);

/* Posts the reply's receive, then message c->seq. */
static int el_send_next(struct el_thread *t, struct el_conn *c)
{
	size_t size = t->l->o.size;
	int ret;

	if (!c->reply_end) {
		c->reply_end = el_now_ns() + t->l->o.reply_ms * 1000000ull;
		el_tick_arm(t);
	}
	ret = rig_qp_receive(c->qp, c->region, size, size);
	if (ret)
		return ret;
	el_pattern(c->buf, size, c->id, c->seq);
	c->t_sent = el_now_ns();
	ret = rig_qp_send(c->qp, c->region, 0, size);
	if (ret)
		return ret;
	c->reply_due = c->send_due = true;
	return 0;
}

/* Queues the reply timer's next tick, unless it is queued. */
static void el_tick_arm(struct el_thread *t)
{
	if (t->ticking)
		return;
	t->ticking = true;
	io_uring_prep_timeout(el_sqe(t, EL_TICK), &t->tick, 0, 0);
}

/* Starts @c's dial; its outcome comes as news (el_on_dialed). */
static void el_dial(struct el_thread *t, struct el_conn *c)
{
	struct el_load *l = t->l;
	uint64_t now = el_now_ns();
	int64_t us = now < c->dial_end ? (int64_t)(c->dial_end - now) / 1000 : 0;
	int ret;

	ret = rig_loop_dial(t->loop, l->o.addr, (uint16_t)l->o.port, us, c->idx);
	if (ret)
		el_conn_fail(t, c, "rig_loop_dial: %s (%s)", strerror(-ret),
			     rig_errmsg());
}

/*
 * A refused dial: the server's listener had as many handshakes under way
 * as it takes (RIG_CM_HANDSHAKES) and as many requests waiting for a
 * turn (RIG_CM_WAITING), or this one waited RIG_CM_HALF_OPEN_MS for
 * one. Like a TCP client whose SYN was dropped, try again after a pause
 * that doubles, with some jitter, until the dial's bound.
 */
static bool el_redial(struct el_thread *t, struct el_conn *c)
{
	uint64_t ms = EL_REDIAL_MS << (c->refused < 6 ? c->refused : 6);

	if (ms > EL_REDIAL_MAX_MS)
		ms = EL_REDIAL_MAX_MS;
	ms += (uint64_t)rand_r(&t->seed) % (ms / 2 + 1);
	if (el_now_ns() + ms * 1000000 >= c->dial_end)
		return false;
	c->refused++;
	atomic_fetch_add(&t->l->refused, 1);
	c->pause.tv_sec = (long long)(ms / 1000);
	c->pause.tv_nsec = (long long)(ms % 1000) * 1000000;
	io_uring_prep_timeout(el_sqe(t, EL_DATA(EL_REDIAL,
						c->idx / t->l->o.threads)),
			      &c->pause, 0, 0);
	return true;
}

static void el_on_dialed(struct el_thread *t, const struct rig_ready *r)
{
	struct el_load *l = t->l;
	struct el_conn *c;
	int ret;

	if (!(c = el_of(t, r->cookie))) {
		fprintf(stderr, "a dial's outcome with an unknown cookie %llu\n",
			(unsigned long long)r->cookie);
		return;
	}
	if (r->result == -ECONNREFUSED && el_redial(t, c))
		return;
	if (r->result) {
		/* the loop's thread made the steps: its last message may say
		 * which one failed */
		el_conn_fail(t, c, "dial %s port %u: %s (last rig error: %s)",
			     l->o.addr, l->o.port,
			     strerror(-r->result), rig_errmsg());
		return;
	}
	c->qp = r->qp;
	ret = rig_region_register(l->nic, c->buf, 2 * l->o.size, &c->region);
	if (ret) {
		el_conn_fail(t, c, "rig_region_register: %s (%s)",
			     strerror(-ret), rig_errmsg());
		return;
	}
	if (c->ended)
		return;		/* stopped while it dialed: teardown destroys it */
	if (atomic_fetch_add(&l->up, 1) + 1 == l->o.conns && !atomic_exchange(&l->ready, true))
		printf("ready: all %u connections up, %u dials tried again "
		       "(%u of them dropped before the first reply)\n", l->o.conns,
		       atomic_load(&l->refused), atomic_load(&l->dropped));
	if (l->o.gate && !t->go)
		return;		/* el_on_go starts it */
	/* The server's receive is posted already: speak at once. */
	ret = el_send_next(t, c);
	if (ret)
		el_conn_fail(t, c, "post: %s", strerror(-ret));
}

/*
 * The reply timer ticks: ends each connection whose first reply is late,
 * and ticks again while a connection still waits for one. A connection
 * waits at most a period more than -w says.
 */
static void el_on_tick(struct el_thread *t, int res)
{
	uint64_t now = el_now_ns();
	struct el_conn *c;
	unsigned int k;

	t->ticking = false;
	if (res != -ETIME) {
		fprintf(stderr, "the reply timer: %s\n", strerror(-res));
		exit(1);
	}
	for (k = 0; k < t->nconns; k++) {
		c = t->conn[k];
		if (c->ended || c->served || !c->qp || !c->reply_end)
			continue;
		if (now >= c->reply_end)
			el_conn_fail(t, c, "no reply from the server in %u ms",
				     t->l->o.reply_ms);
		else
			el_tick_arm(t);
	}
}

/* Ends @c, saying where its reply first differs from its message. */
static void el_mismatch(struct el_thread *t, struct el_conn *c, uint32_t bytes)
{
	const uint8_t *got = c->buf + t->l->o.size;
	size_t k, n = bytes < t->l->o.size ? bytes : t->l->o.size;

	for (k = 0; k < n && got[k] == t->want[k]; k++)
		;
	el_conn_fail(t, c, "a reply of %u bytes for %zu, first difference at "
		     "byte %zu (want 0x%02x, got 0x%02x)", bytes, t->l->o.size,
		     k, k < t->l->o.size ? t->want[k] : 0,
		     k < bytes ? got[k] : 0);
}

/* ---- the stall meter (-l) --------------------------------------------- */

/* A thread's waits for a CPU so far, in ns (/proc's schedstat: the time
 * it spent ready on a run queue); -1 if unreadable (it ended). */
static int el_read_waited(int fd, unsigned long long *waited)
{
	unsigned long long ran;
	char buf[128];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return -1;
	buf[n] = 0;
	return sscanf(buf, "%llu %llu", &ran, waited) == 2 ? 0 : -1;
}

static unsigned long long el_waited(int fd)
{
	unsigned long long w = 0;

	el_read_waited(fd, &w);
	return w;
}

/* A thread's meter: each wait for a CPU longer than a stall is a span
 * that ends at the reading that saw it. The kernel adds a wait once the
 * thread runs, so the span is where it was, within a period. */
static void *el_watch_main(void *arg)
{
	struct el_meter *m = arg;
	struct timespec ts = { 0, EL_METER_NS };
	unsigned long long w;
	uint64_t now;

	for (;;) {
		nanosleep(&ts, NULL);
		w = el_waited(m->fd);
		now = el_now_ns();
		pthread_mutex_lock(&m->lock);
		if (w > m->waited + EL_STALL_NS)
			m->stall[m->n++ % EL_STALLS] = (struct el_span){
				now - (w - m->waited), now };
		if (w > m->waited)
			m->waited = w;
		pthread_mutex_unlock(&m->lock);
	}
	return NULL;
}

static void *el_meter_main(void *arg)
{
	struct el_meter *m = arg;
	struct timespec ts;
	cpu_set_t set;
	uint64_t now, last;

	if (m->fd >= 0)
		return el_watch_main(arg);
	/* best-effort: unpinned, it measures whichever CPU it is on */
	CPU_ZERO(&set);
	CPU_SET(m->cpu, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	last = el_now_ns();
	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (;;) {
		ts.tv_nsec += EL_METER_NS;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		now = el_now_ns();
		pthread_mutex_lock(&m->lock);
		if (now - last > EL_STALL_NS)
			m->stall[m->n++ % EL_STALLS] = (struct el_span){
				last + EL_METER_NS, now };
		m->last = now;
		pthread_mutex_unlock(&m->lock);
		/* a late wake-up starts the next period from now */
		if (now - last > EL_STALL_NS)
			clock_gettime(CLOCK_MONOTONIC, &ts);
		last = now;
	}
	return NULL;
}

static struct el_meter *el_meter_add(struct el_load *l, int cpu, int fd, bool server)
{
	struct el_meter *m;

	if (l->nmeters == EL_METERS_MAX) {
		fprintf(stderr, "more than %d stall meters\n", EL_METERS_MAX);
		exit(1);
	}
	m = &l->meter[l->nmeters++];
	m->cpu = cpu;
	m->fd = fd;
	m->server = server;
	pthread_mutex_init(&m->lock, NULL);
	if (fd >= 0)
		m->waited = el_waited(fd);
	return m;
}

/* A meter for thread @tid's waits for a CPU (/proc/@tid/schedstat). */
static int el_watch(struct el_load *l, long tid, bool server)
{
	unsigned long long w;
	char path[64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%ld/schedstat", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || el_read_waited(fd, &w)) {
		fprintf(stderr, "no waits to read in %s: %s\n", path,
			fd < 0 ? strerror(errno) : "not a schedstat line");
		if (fd >= 0)
			close(fd);
		return 1;
	}
	el_meter_add(l, -1, fd, server);
	return 0;
}

/* -W's threads: the server's, one meter each. */
static int el_watch_server(struct el_load *l)
{
	const char *p = l->o.watch;
	char *end;
	long tid;

	while (p && *p) {
		errno = 0;
		tid = strtol(p, &end, 10);
		if (errno || end == p || tid <= 0 || (*end && *end != ',')) {
			fprintf(stderr, "-W: not a list of thread ids: %s\n", l->o.watch);
			return 1;
		}
		if (el_watch(l, tid, true))
			return 1;
		p = *end ? end + 1 : end;
	}
	return 0;
}

/* One meter per CPU we may run on, and one per thread -W names; they
 * start with the load. */
static int el_meters_init(struct el_load *l)
{
	cpu_set_t set;
	int cpu;

	if (sched_getaffinity(0, sizeof(set), &set)) {
		fprintf(stderr, "sched_getaffinity: %s\n", strerror(errno));
		return 1;
	}
	l->meter = calloc(EL_METERS_MAX, sizeof(*l->meter));
	if (!l->meter) {
		fprintf(stderr, "no memory for the stall meters\n");
		return 1;
	}
	for (cpu = 0; cpu < CPU_SETSIZE && l->nmeters < EL_METERS_MAX; cpu++)
		if (CPU_ISSET(cpu, &set))
			el_meter_add(l, cpu, -1, false);
	return el_watch_server(l);
}

/*
 * Starts the meters, once: when the first message may leave, that is at
 * once or, with -g, at the go. Not while the connections come up, which
 * in an emulated guest takes long enough without 1000 wake-ups a second
 * on each CPU.
 */
static void el_meters_start(struct el_load *l)
{
	unsigned int i;
	int ret;

	if (!l->o.log_trips || atomic_exchange(&l->metering, true))
		return;
	/* our own loop threads, those running by now (with -g, all) */
	for (i = 0; i < l->o.threads; i++)
		if (atomic_load(&l->th[i].ktid) &&
		    el_watch(l, atomic_load(&l->th[i].ktid), false))
			exit(1);
	for (i = 0; i < l->nmeters; i++) {
		l->meter[i].last = el_now_ns();
		ret = pthread_create(&l->meter[i].tid, NULL, el_meter_main, &l->meter[i]);
		if (ret) {
			fprintf(stderr, "pthread_create: %s\n", strerror(ret));
			exit(1);
		}
		l->meter[i].started = true;
	}
}

static void el_meters_stop(struct el_load *l)
{
	unsigned int i;

	for (i = 0; i < l->nmeters; i++) {
		if (l->meter[i].started) {
			pthread_cancel(l->meter[i].tid);
			pthread_join(l->meter[i].tid, NULL);
		}
		if (l->meter[i].fd >= 0)
			close(l->meter[i].fd);
		pthread_mutex_destroy(&l->meter[i].lock);
	}
	free(l->meter);
}

static int el_span_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct el_span *)a)->from;
	uint64_t y = ((const struct el_span *)b)->from;

	return x < y ? -1 : x > y;
}

/* How long within [from, to) at least one CPU was stalled or one of our
 * threads waited for a CPU, or @server waited (NULL: no server thread), in
 * ns: those meters' spans (and a stall under way at @to, a wait the
 * kernel counted since their last reading), clipped, merged. */
static uint64_t el_stalled(struct el_thread *t, uint64_t from, uint64_t to,
			   struct el_meter *server)
{
	struct el_load *l = t->l;
	struct el_span *v = t->spans, s;
	unsigned long long k;
	uint64_t sum = 0, end = 0;
	unsigned int i;
	size_t n = 0, j;

	for (i = 0; i < l->nmeters && atomic_load(&l->metering); i++) {
		struct el_meter *m = &l->meter[i];
		unsigned long long w;

		if (m->server && m != server)
			continue;
		w = m->fd >= 0 ? el_waited(m->fd) : 0;
		pthread_mutex_lock(&m->lock);
		if (m->fd < 0 && to > m->last + EL_STALL_NS)
			v[n++] = (struct el_span){ m->last + EL_METER_NS, to };
		if (m->fd >= 0 && w > m->waited + EL_STALL_NS)
			v[n++] = (struct el_span){ to - (w - m->waited), to };
		for (k = m->n; k > 0 && m->n - k < EL_STALLS; k--) {
			s = m->stall[(k - 1) % EL_STALLS];
			if (s.to <= from)
				break;		/* and so is every older one */
			if (s.from < to)
				v[n++] = s;
		}
		pthread_mutex_unlock(&m->lock);
	}
	qsort(v, n, sizeof(*v), el_span_cmp);
	for (j = 0; j < n; j++) {
		s = v[j];
		if (s.from < from)
			s.from = from;
		if (s.to > to)
			s.to = to;
		if (s.from < end)
			s.from = end;		/* that part is counted */
		if (s.to > s.from) {
			sum += s.to - s.from;
			end = s.to;
		}
	}
	return sum;
}

/* Counts a round trip that matched: its sample, the worst, -l's line. */
static void el_trip(struct el_thread *t, struct el_conn *c)
{
	uint64_t ns = c->t_reply - c->t_sent, stall;
	char waits[EL_METERS_MAX * 12];
	struct timespec now;
	unsigned int i;
	size_t len;

	if (!t->l->o.forever)
		t->lat[t->nlat++] = ns / 2;
	t->trips++;
	if (ns <= t->worst_ns && !t->l->o.log_trips)
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	if (ns > t->worst_ns) {
		t->worst_ns = ns;
		t->worst_at = now;
		t->worst_conn = c->idx;
		t->worst_seq = c->seq;
	}
	if (t->l->o.log_trips) {
		if (!t->spans)
			t->spans = malloc(((size_t)t->l->nmeters * (EL_STALLS + 1) + 1) *
					  sizeof(*t->spans));
		if (!t->spans) {
			fprintf(stderr, "no memory for the stall meters' spans\n");
			exit(1);
		}
		stall = el_stalled(t, c->t_sent, c->t_reply, NULL);
		/* which server thread served it is the server's to say */
		len = 0;
		for (i = 0; i < t->l->nmeters; i++)
			if (t->l->meter[i].server)
				len += (size_t)snprintf(waits + len, sizeof(waits) - len, "%s%llu",
					len ? "," : "", (unsigned long long)el_stalled(t,
					c->t_sent, c->t_reply, &t->l->meter[i]) / 1000);
		if (!len)
			snprintf(waits, sizeof(waits), "%llu", (unsigned long long)(stall / 1000));
		printf("[%lld.%06ld] round trip %llu us, stall %llu us, with a server thread's "
		       "waits %s us, connection %u message %u\n", (long long)now.tv_sec,
		       now.tv_nsec / 1000, (unsigned long long)(ns / 1000),
		       (unsigned long long)(stall / 1000), waits, c->idx, c->seq);
	}
}

/* The reply and the send's completion are both in: check, go on. */
static void el_round_trip(struct el_thread *t, struct el_conn *c)
{
	struct el_load *l = t->l;
	unsigned int k;
	int ret;

	el_pattern(t->want, l->o.size, c->id, c->seq);
	if (c->reply_bytes != l->o.size ||
	    memcmp(c->buf + l->o.size, t->want, l->o.size)) {
		el_mismatch(t, c, c->reply_bytes);
		return;
	}
	el_trip(t, c);
	c->served = true;
	if (c->done++ == 0 &&
	    atomic_fetch_add(&l->streaming, 1) + 1 == l->o.conns)
		printf("streaming: all %u connections had a reply\n", l->o.conns);
	if ((!l->o.forever && c->done == l->o.msgs) || t->stopping) {
		el_end(t, c, false);
		return;
	}
	c->seq++;
	if (l->o.interval_ms) {
		/* the next message once the interval is over: el_on_next */
		k = c->idx / l->o.threads;
		io_uring_prep_timeout(el_sqe(t, EL_DATA(EL_NEXT, k)),
				      &t->interval, 0, 0);
		return;
	}
	ret = el_send_next(t, c);
	if (ret)
		el_conn_fail(t, c, "post: %s", strerror(-ret));
}

/* A connection's interval is over: its next message. */
static void el_on_next(struct el_thread *t, uint64_t k, int res)
{
	struct el_conn *c;
	int ret;

	if (k >= t->nconns) {
		fprintf(stderr, "a timeout for no connection (%llu)\n",
			(unsigned long long)k);
		return;
	}
	c = t->conn[k];
	if (c->ended)
		return;
	if (res != -ETIME) {
		el_conn_fail(t, c, "the pause's timeout: %s", strerror(-res));
		return;
	}
	ret = el_send_next(t, c);
	if (ret)
		el_conn_fail(t, c, "post: %s", strerror(-ret));
}

/* Takes every completion a ring of @c has now. The send's completion may
 * come after the reply (its acknowledgement travels apart), so the reply
 * waits for it: the message's buffer is only reused once the send is done. */
static void el_poll(struct el_thread *t, struct el_conn *c, enum rig_side side)
{
	struct rig_completion cp;
	int ret;

	while ((ret = rig_qp_poll(c->qp, side, &cp)) == 1) {
		if (c->ended)
			continue;
		/* the server dropped the handshake before it served us:
		 * GONE comes too, and el_on_dropped dials again */
		if (cp.error == -ECONNRESET && !c->served)
			continue;
		if (cp.error) {
			el_conn_fail(t, c, "%s failed: %s (%d)",
				     side == RIG_SEND ? "send" : "receive",
				     cp.why, cp.error);
			continue;
		}
		if (side == RIG_SEND) {
			c->send_due = false;
		} else {
			c->t_reply = el_now_ns();
			c->reply_bytes = cp.bytes;
			c->reply_due = false;
		}
		if (!c->send_due && !c->reply_due)
			el_round_trip(t, c);
	}
	if (ret < 0 && !c->ended)
		el_conn_fail(t, c, "rig_qp_poll: %s", strerror(-ret));
}

/*
 * The server let @c go before its first reply: a busy server drops a
 * handshake whose last message came later than its bound
 * (RIG_CM_HALF_OPEN_MS), and our side is up by then. It never served
 * us: as a refused dial, dial it again, from the same message.
 */
static void el_on_dropped(struct el_thread *t, struct el_conn *c, int result)
{
	int ret;

	ret = rig_qp_destroy(c->qp);
	c->qp = NULL;
	c->reply_end = 0;
	atomic_fetch_sub(&t->l->up, 1);
	if (ret) {
		el_conn_fail(t, c, "rig_qp_destroy: %s", strerror(-ret));
		return;
	}
	ret = rig_region_deregister(c->region);
	c->region = NULL;
	if (ret)
		el_conn_fail(t, c, "rig_region_deregister: %s", strerror(-ret));
	else if (el_redial(t, c))
		atomic_fetch_add(&t->l->dropped, 1);
	else
		el_conn_fail(t, c, "the server left before its first reply: %s (%d)",
			     strerror(-result), result);
}

static void el_on_news(struct el_thread *t, const struct rig_ready *r)
{
	struct el_conn *c;

	if (r->news == RIG_NEWS_DIALED) {
		el_on_dialed(t, r);
		return;
	}
	c = el_of(t, r->cookie);
	if (!c || c->qp != r->qp) {
		fprintf(stderr, "news %d for an unknown queue pair\n", r->news);
		return;
	}
	if (r->news == RIG_NEWS_GONE && !c->served && !c->ended) {
		el_on_dropped(t, c, r->result);
		return;
	}
	if (r->news == RIG_NEWS_GONE) {
		if (!c->ended)
			el_conn_fail(t, c, "the server left: %s (%d)",
				     strerror(-r->result), r->result);
		/* take what the rings report; nothing more is posted */
		el_poll(t, c, RIG_RECEIVE);
		el_poll(t, c, RIG_SEND);
		return;
	}
	if (r->news == RIG_NEWS_RING)
		el_poll(t, c, r->side);
}

static void el_read_signal(struct el_thread *t)
{
	io_uring_prep_read(el_sqe(t, EL_SIGNAL), t->l->signal_fd, &t->siginfo,
			   sizeof(t->siginfo), 0);
}

/*
 * A signal came (this thread's read took it; every running thread has
 * one queued): SIGUSR1 is -g's go, SIGINT and SIGTERM the stop. Either
 * reaches every thread through an eventfd that stays readable.
 */
static void el_on_signal(struct el_thread *t, int res)
{
	uint64_t one = 1;
	int fd;

	if (res != sizeof(t->siginfo)) {
		fprintf(stderr, "read from the signalfd: %s\n",
			strerror(res < 0 ? -res : EIO));
		exit(1);
	}
	if (t->siginfo.ssi_signo == SIGUSR1)
		el_meters_start(t->l);	/* before any thread's go */
	fd = t->siginfo.ssi_signo == SIGUSR1 ? t->l->go_fd : t->l->stop_fd;
	if (write(fd, &one, sizeof(one)) != sizeof(one)) {
		fprintf(stderr, "write to an eventfd: %s\n", strerror(errno));
		exit(1);
	}
	el_read_signal(t);
}

/* SIGINT or SIGTERM: each connection ends once its reply in flight is in
 * (el_round_trip), or now if it waits out a pause; one not yet speaking
 * fails. */
static void el_on_stop(struct el_thread *t)
{
	struct el_conn *c;
	unsigned int k;

	t->stopping = true;
	for (k = 0; k < t->nconns; k++) {
		c = t->conn[k];
		if (c->ended)
			continue;
		if (!c->qp || !c->reply_end)
			el_conn_fail(t, c, "stopped before its first message");
		else if (!c->reply_due && !c->send_due)
			el_end(t, c, false);
	}
}

/* The go: the connections up so far send their first message. */
static void el_on_go(struct el_thread *t)
{
	struct el_conn *c;
	unsigned int k;
	int ret;

	t->go = true;
	for (k = 0; k < t->nconns; k++) {
		c = t->conn[k];
		if (c->ended || !c->qp || c->reply_end)
			continue;
		ret = el_send_next(t, c);
		if (ret)
			el_conn_fail(t, c, "post: %s", strerror(-ret));
	}
}

static int el_on_rig(struct el_thread *t, const struct io_uring_cqe *cqe)
{
	struct rig_ready ready[EL_READY];
	int i, n;

	do {
		n = rig_uring_handle(&t->ring, t->loop, cqe, ready, EL_READY);
		/* The poll ended with no SQE free to queue it again: submit
		 * ours, and watch again (rig_uring_watch(3)). */
		if (n == -EBUSY) {
			io_uring_submit(&t->ring);
			n = rig_uring_watch(&t->ring, t->loop, EL_RIG);
			return n ? el_fail("rig_uring_watch", n) : 0;
		}
		if (n < 0)
			return el_fail("rig_uring_handle", n);
		for (i = 0; i < n; i++)
			el_on_news(t, &ready[i]);
		cqe = NULL;	/* more than EL_READY: ask for the rest */
	} while (n == EL_READY);
	return 0;
}

/* Until every connection of the thread ended. */
static int el_loop(struct el_thread *t)
{
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	int ret = 0;

	/* thread 0 waits for the go, or a stop, even with nothing to do */
	while (t->ended < t->nconns ||
	       (t->idx == 0 && t->l->o.gate && !t->go && !t->stopping)) {
		ret = io_uring_submit_and_wait(&t->ring, 1);
		if (ret < 0 && ret != -EINTR) {
			fprintf(stderr, "io_uring_submit_and_wait: %s\n",
				strerror(-ret));
			return 1;
		}
		ret = 0;
		seen = 0;
		io_uring_for_each_cqe(&t->ring, head, cqe) {
			uint64_t data = io_uring_cqe_get_data64(cqe);

			seen++;
			if ((data & 0xff) == EL_NEXT) {
				el_on_next(t, data >> 8, cqe->res);
				continue;
			}
			if (data == EL_SIGNAL) {
				el_on_signal(t, cqe->res);
				continue;
			}
			if (data == EL_GO) {
				el_on_go(t);
				continue;
			}
			if (data == EL_STOP) {
				el_on_stop(t);
				continue;
			}
			if (data == EL_TICK) {
				el_on_tick(t, cqe->res);
				continue;
			}
			if ((data & 0xff) == EL_REDIAL) {
				if ((data >> 8) < t->nconns &&
				    !t->conn[data >> 8]->ended)
					el_dial(t, t->conn[data >> 8]);
				continue;
			}
			if (data != EL_RIG) {
				fprintf(stderr, "a CQE of unknown kind\n");
				ret = 1;
				break;
			}
			ret = el_on_rig(t, cqe);
			if (ret)
				break;
		}
		io_uring_cq_advance(&t->ring, seen);
		if (ret)
			return ret;
	}
	return 0;
}

/* The thread's connections: every THREADS-th from its index. */
static int el_thread_setup(struct el_thread *t)
{
	struct el_load *l = t->l;
	struct el_conn *c;
	unsigned int i, k;
	int ret;

	t->seed = (unsigned int)getpid() * 31 + t->idx;
	for (i = t->idx; i < l->o.conns; i += l->o.threads)
		t->nconns++;
	t->conn = calloc(t->nconns ? t->nconns : 1, sizeof(*t->conn));
	t->want = malloc(l->o.size);
	if (!l->o.forever)
		t->lat = malloc((t->nconns ? t->nconns : 1) * l->o.msgs *
				sizeof(*t->lat));
	if (!t->conn || !t->want || (!l->o.forever && !t->lat)) {
		fprintf(stderr, "no memory for %u connections\n", t->nconns);
		return 1;
	}
	t->interval.tv_sec = l->o.interval_ms / 1000;
	t->interval.tv_nsec = (long long)(l->o.interval_ms % 1000) * 1000000;
	/* a tenth of -w, from 1 ms to EL_TICK_MAX_MS */
	k = l->o.reply_ms / 10;
	k = k < 1 ? 1 : k > EL_TICK_MAX_MS ? EL_TICK_MAX_MS : k;
	t->tick.tv_sec = k / 1000;
	t->tick.tv_nsec = (long long)(k % 1000) * 1000000;
	ret = io_uring_queue_init(EL_URING_ENTRIES, &t->ring, 0);
	if (ret) {
		fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-ret));
		return 1;
	}
	t->ring_up = true;
	ret = rig_loop_open(l->nic, &t->loop);
	if (ret)
		return el_fail("rig_loop_open", ret);
	ret = rig_loop_liveness(t->loop, l->o.live_ms);
	if (ret)
		return el_fail("rig_loop_liveness", ret);
	ret = rig_uring_watch(&t->ring, t->loop, EL_RIG);
	if (ret)
		return el_fail("rig_uring_watch", ret);
	if (l->o.gate)
		io_uring_prep_poll_add(el_sqe(t, EL_GO), l->go_fd, POLLIN);
	io_uring_prep_poll_add(el_sqe(t, EL_STOP), l->stop_fd, POLLIN);
	el_read_signal(t);
	for (k = 0; k < t->nconns; k++) {
		c = calloc(1, sizeof(*c));
		if (!c || !(c->buf = malloc(2 * l->o.size))) {
			free(c);
			fprintf(stderr, "no memory for a connection\n");
			return 1;
		}
		t->conn[k] = c;
		c->idx = k * l->o.threads + t->idx;
		c->id = (uint64_t)getpid() << 32 | c->idx;
	}
	for (k = 0; k < t->nconns; k++) {
		c = t->conn[k];
		c->dial_end = el_now_ns() + EL_DIAL_US * 1000ull;
		el_dial(t, c);
	}
	return 0;
}

static int el_thread_teardown(struct el_thread *t)
{
	struct el_conn *c;
	unsigned int k;
	int ret, status = 0;

	if (t->ring_up)
		io_uring_queue_exit(&t->ring);
	for (k = 0; t->conn && k < t->nconns; k++) {
		c = t->conn[k];
		if (!c)
			continue;
		if (c->qp && (ret = rig_qp_destroy(c->qp)))
			status = el_fail("rig_qp_destroy", ret);
		if (c->region && (ret = rig_region_deregister(c->region)))
			status = el_fail("rig_region_deregister", ret);
		free(c->buf);
		free(c);
	}
	free(t->conn);
	free(t->want);
	free(t->spans);
	if (t->loop && (ret = rig_loop_close(t->loop)))
		status = el_fail("rig_loop_close", ret);
	return status;
}

static void *el_thread_main(void *arg)
{
	struct el_thread *t = arg;

	atomic_store(&t->ktid, gettid());
	t->status = el_thread_setup(t);
	if (!t->status)
		t->status = el_loop(t);
	if (el_thread_teardown(t))
		t->status = 1;
	return NULL;
}

/* ---- latency ----------------------------------------------------------- */

static int el_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The nearest-rank percentile @permille of @n sorted values, in usec. */
static double el_percentile(const uint64_t *v, size_t n, unsigned int permille)
{
	size_t k = (n * permille + 999) / 1000;

	return v[k ? k - 1 : 0] / 1000.0;
}

/* The square root, by Newton's method: no libm for one call. */
static double el_sqrt(double x)
{
	double r = x > 1 ? x : 1;
	int i;

	if (x <= 0)
		return 0;
	for (i = 0; i < 200 && r * r - x > x * 1e-12; i++)
		r = (r + x / r) / 2;
	return r;
}

/* ib_send_lat's columns, over the half round trips of every thread. */
static void el_print_latency(struct el_load *l)
{
	size_t n = 0, i;
	uint64_t *v;
	double sum = 0, var = 0, avg;
	unsigned int k;

	for (k = 0; k < l->o.threads; k++)
		n += l->th[k].nlat;
	if (!n)
		return;
	v = malloc(n * sizeof(*v));
	if (!v)
		return;
	for (n = 0, k = 0; k < l->o.threads; k++) {
		memcpy(v + n, l->th[k].lat, l->th[k].nlat * sizeof(*v));
		n += l->th[k].nlat;
	}
	qsort(v, n, sizeof(*v), el_cmp_u64);
	for (i = 0; i < n; i++)
		sum += (double)v[i];
	avg = sum / (double)n;
	for (i = 0; i < n; i++)
		var += ((double)v[i] - avg) * ((double)v[i] - avg);
	printf(" %-7s %-11s %-14s %-14s %-16s %-14s %-15s %-22s %s\n",
	       "#bytes", "#iterations", "t_min[usec]", "t_max[usec]",
	       "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]",
	       "99% percentile[usec]", "99.9% percentile[usec]");
	printf(" %-7zu %-11zu %-14.2f %-14.2f %-16.2f %-14.2f %-15.2f %-22.2f %.2f\n",
	       l->o.size, n, v[0] / 1000.0, v[n - 1] / 1000.0,
	       el_percentile(v, n, 500), avg / 1000.0,
	       el_sqrt(var / (double)n) / 1000.0, el_percentile(v, n, 990),
	       el_percentile(v, n, 999));
	free(v);
}

static unsigned long long el_trips(struct el_load *l)
{
	unsigned long long n = 0;
	unsigned int k;

	for (k = 0; k < l->o.threads; k++)
		n += l->th[k].trips;
	return n;
}

/* The worst whole round trip over every thread, and when its reply came. */
static void el_print_worst(struct el_load *l)
{
	struct el_thread *w = NULL;
	unsigned int k;

	for (k = 0; k < l->o.threads; k++)
		if (l->th[k].trips && (!w || l->th[k].worst_ns > w->worst_ns))
			w = &l->th[k];
	if (w)
		printf("worst round trip: %.0f us of %llu, connection %u message %u, "
		       "its reply at [%lld.%06ld]\n", w->worst_ns / 1000.0, el_trips(l),
		       w->worst_conn, w->worst_seq, (long long)w->worst_at.tv_sec,
		       w->worst_at.tv_nsec / 1000);
}

/* ---- setup ------------------------------------------------------------- */

static void el_usage(const char *argv0)
{
	fprintf(stderr,
		"Usage: %s -d DEV -a ADDR -p PORT -c CONNS -s SIZE -n MSGS\n"
		"          [-t THREADS] [-i MS] [-w MS] [-q DEPTH] [-L MS] [-g] [-k]\n"
		"          [-l [-W TIDS]]\n"
		"  -d DEV      RDMA device (default: the first RoCE v2 device)\n"
		"  -a ADDR     the server's address\n"
		"  -p PORT     the server's port\n"
		"  -c CONNS    connections (default 1)\n"
		"  -s SIZE     bytes per message (default 64)\n"
		"  -n MSGS     round trips per connection (default 1000)\n"
		"  -t THREADS  threads, each with its loop (default 1)\n"
		"  -i MS       a pause between a reply and the next message (default 0)\n"
		"  -w MS       how long a connection waits for the server's first reply\n"
		"              (default 30000)\n"
		"  -q DEPTH    the NIC's queue depth under each ring, 1 to 4095 (default:\n"
		"              RIG_QP_DEPTH, else 4095); entries beyond it wait in the ring\n"
		"  -L MS       probe idle connections every MS ms, to find a vanished\n"
		"              server host (default 2000, RIG_LIVENESS_MS; 0: never)\n"
		"  -g          once every connection is up, print \"ready: ...\" and\n"
		"              send nothing before a SIGUSR1\n"
		"  -k          never stop (until killed); no latency columns\n"
		"  -l          print each round trip, with the wall-clock time and\n"
		"              how long the machine stalled a CPU or kept one of our\n"
		"              threads waiting for one meanwhile\n"
		"  -W TIDS     with -l, the server's threads (ids, by commas) on this\n"
		"              machine: each one's waits too, in turn\n"
		"SIGINT or SIGTERM ends each connection after its reply in flight.\n",
		argv0);
}

static int el_number(const char *arg, unsigned long long min,
		     unsigned long long max, unsigned long long *v)
{
	char *end;

	errno = 0;
	*v = strtoull(arg, &end, 0);
	return errno || end == arg || *end || arg[0] == '-' || *v < min ||
	       *v > max ? -1 : 0;
}

static int el_parse_opts(int argc, char *argv[], struct el_opts *o)
{
	unsigned long long v;
	int c;

	while ((c = getopt(argc, argv, "d:a:p:c:s:n:t:i:w:q:L:W:gkl")) != -1) {
		if (c == 'd') {
			o->dev = optarg;
			continue;
		}
		if (c == 'a') {
			o->addr = optarg;
			continue;
		}
		if (c == 'k') {
			o->forever = true;
			continue;
		}
		if (c == 'g') {
			o->gate = true;
			continue;
		}
		if (c == 'l') {
			o->log_trips = true;
			continue;
		}
		if (c == 'W') {
			o->watch = optarg;
			continue;
		}
		if (c == '?')
			return -1;
		if (el_number(optarg, c == 'i' || c == 'L' ? 0 : 1, c == 'n' ? 1ull << 32 :
			      c == 's' ? 1u << 24 : c == 'i' || c == 'w' ? 3600000 :
			      c == 'L' ? 24 * 3600 * 1000 : c == 'q' ? RIG_RING_ENTRIES : 65535, &v))
			return -1;
		switch (c) {
		case 'p': o->port = (unsigned int)v; break;
		case 'c': o->conns = (unsigned int)v; break;
		case 's': o->size = (size_t)v; break;
		case 'n': o->msgs = v; break;
		case 'i': o->interval_ms = (unsigned int)v; break;
		case 'w': o->reply_ms = (unsigned int)v; break;
		case 'L': o->live_ms = (unsigned int)v; break;
		case 'q': o->depth = (unsigned int)v; break;
		case 't':
			if (v > EL_THREADS_MAX)
				return -1;
			o->threads = (unsigned int)v;
			break;
		}
	}
	if (optind != argc || !o->addr || !o->port)
		return -1;
	return 0;
}

/* SIGINT, SIGTERM (and with -g SIGUSR1) through a signalfd, blocked
 * before the threads start so that they inherit the mask; the go and the
 * stop through eventfds that every thread polls. */
static int el_signals(struct el_load *l)
{
	sigset_t mask;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	if (l->o.gate)
		sigaddset(&mask, SIGUSR1);
	if (sigprocmask(SIG_BLOCK, &mask, NULL) ||
	    (l->signal_fd = signalfd(-1, &mask, SFD_CLOEXEC)) < 0 ||
	    (l->go_fd = eventfd(0, EFD_CLOEXEC)) < 0 ||
	    (l->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0) {
		fprintf(stderr, "the signals: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

int main(int argc, char *argv[])
{
	struct el_opts o = { .conns = 1, .size = 64, .msgs = 1000,
			     .threads = 1, .reply_ms = EL_REPLY_MS,
			     .live_ms = RIG_LIVENESS_MS };
	struct el_load *l;
	unsigned int i;
	int ret, status = 0;
	bool stopped = false;

	if (el_parse_opts(argc, argv, &o)) {
		el_usage(argv[0]);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	l = calloc(1, sizeof(*l));
	if (!l) {
		fprintf(stderr, "no memory\n");
		return 1;
	}
	l->o = o;
	l->signal_fd = l->go_fd = l->stop_fd = -1;
	if (el_signals(l)) {
		free(l);
		return 1;
	}
	ret = rig_nic_open(o.dev, &l->nic);
	if (ret) {
		free(l);
		return el_fail("rig_nic_open", ret);
	}
	if (o.depth && (ret = rig_nic_set_depth(l->nic, (int)o.depth)))
		return el_fail("rig_nic_set_depth", ret);
	for (i = 0; i < o.threads; i++) {
		l->th[i].l = l;
		l->th[i].idx = i;
	}
	if (o.log_trips && el_meters_init(l))
		exit(1);
	if (!o.gate)
		el_meters_start(l);
	for (i = 1; i < o.threads; i++) {
		ret = pthread_create(&l->th[i].tid, NULL, el_thread_main,
				     &l->th[i]);
		if (ret) {
			fprintf(stderr, "pthread_create: %s\n", strerror(ret));
			exit(1);
		}
	}
	el_thread_main(&l->th[0]);
	for (i = 1; i < o.threads; i++)
		pthread_join(l->th[i].tid, NULL);
	for (i = 0; i < o.threads; i++)
		status |= l->th[i].status;
	if (atomic_load(&l->failed))
		status = 1;
	for (i = 0; i < o.threads; i++)
		stopped |= l->th[i].stopping;
	if (!status) {
		el_print_latency(l);
		el_print_worst(l);
		if (stopped)
			printf("%u connections, stopped after %llu messages of %zu bytes: "
			       "every reply matched\n", o.conns, el_trips(l), o.size);
		else
			printf("%u connections x %llu messages of %zu bytes: every reply "
			       "matched\n", o.conns, o.msgs, o.size);
	} else {
		fprintf(stderr, "%u of %u connections failed\n",
			atomic_load(&l->failed), o.conns);
	}
	for (i = 0; i < o.threads; i++)
		free(l->th[i].lat);
	if (o.log_trips)
		el_meters_stop(l);
	ret = rig_nic_close(l->nic);
	if (ret)
		status = el_fail("rig_nic_close", ret);
	if (l->signal_fd >= 0)
		close(l->signal_fd);
	if (l->go_fd >= 0)
		close(l->go_fd);
	if (l->stop_fd >= 0)
		close(l->stop_fd);
	free(l);
	return status;
}
