/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/*
 * What threads share under a connection by address: a queue pair its
 * loop's thread is bringing up while another thread destroys it, and a
 * listener shared by loops (rig_loops_listen) whose members turn, stall
 * or leave while requests wait for a turn.
 *
 * Each test forces its interleaving with a gate rather than hoping for
 * it. This binary interposes (the executable exports them, -rdynamic):
 *   - ibv_create_qp: while armed for the server's device, the first
 *     helper thread to make a queue pair there is held in every make it
 *     starts, until the test lets one go (it fails, freeing its
 *     handshake's turn); other threads pass. So a listener's turns stay
 *     taken for as long as a test needs, and one frees at a known moment;
 *   - rdma_establish: the dialer's last message, which the loop's thread
 *     sends under the loop's cm_lock; held while another thread destroys
 *     the queue pair, until that thread is blocked or done;
 *   - rdma_destroy_id: a shared listener's own id, which its last member
 *     destroys as it leaves; held while the application closes the
 *     listener.
 * The tests read the loop's private half (lib/internal.h) for what no
 * call shows: the liveness list, the connections a member holds, whether
 * a member has turned.
 *
 * Two hosts: the server's loops on $RIG_TEST_PEER_DEV, the clients on
 * $RIG_TEST_DEV (raw rdma_cm requests, or a loop's dial). Run -j1.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dirent.h>
#include <sys/timerfd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "internal.h"
#include "t_device.h"

#define COOKIE 0x5348000000000001ull
/* How long a test waits for what must come at once: a liveness bound
 * only, never a verdict's. */
#define SURE_MS 10000

/* ------------------------------------------------------------ helpers */

/* A thread's scheduler state ('R', 'S', 'D', ...) from /proc. */
static char thread_state(pid_t tid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return '?';
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return '?';
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : '?';
}

/* Another thread of the test, running one call: started, then done. */
struct actor {
	pthread_t thread;
	sem_t go;
	pid_t tid;
	bool started, done;
	int rc;
	int (*call)(struct actor *a);
	void *arg;
};

static void *actor_main(void *arg)
{
	struct actor *a = arg;

	a->tid = gettid();
	while (sem_wait(&a->go))
		;
	__atomic_store_n(&a->started, true, __ATOMIC_RELEASE);
	a->rc = a->call(a);
	__atomic_store_n(&a->done, true, __ATOMIC_RELEASE);
	return NULL;
}

static void actor_start(struct actor *a, int (*call)(struct actor *), void *arg, bool go)
{
	memset(a, 0, sizeof(*a));
	a->call = call;
	a->arg = arg;
	sem_init(&a->go, 0, go);
	cr_assert_eq(pthread_create(&a->thread, NULL, actor_main, a), 0);
}

/* Until @a, let go, is done or asleep inside its call (blocked on a lock
 * the test's interleaving holds), or SURE_MS pass; true unless the bound
 * passed. Any thread. */
static bool actor_blocked_or_done(struct actor *a)
{
	double end = t_now_ms() + SURE_MS;

	while (t_now_ms() < end) {
		if (__atomic_load_n(&a->done, __ATOMIC_ACQUIRE))
			return true;
		if (__atomic_load_n(&a->started, __ATOMIC_ACQUIRE) && thread_state(a->tid) == 'S')
			return true;
		usleep(200);
	}
	return false;
}

static bool readable(int fd)
{
	struct pollfd p = { fd, POLLIN, 0 };

	return poll(&p, 1, 0) == 1;
}


/* The timerfds the process has open, into @out (at most @max). */
static int timerfds(int *out, int max)
{
	DIR *d = opendir("/proc/self/fd");
	char path[300], link[64];
	struct dirent *e;
	int n = 0;
	ssize_t len;

	cr_assert_not_null(d);
	while ((e = readdir(d)) && n < max) {
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, link, sizeof(link) - 1);
		if (len <= 0)
			continue;
		link[len] = 0;
		if (strstr(link, "timerfd"))
			out[n++] = atoi(e->d_name);
	}
	closedir(d);
	return n;
}

/* Milliseconds until timerfd @fd fires; 0 when it has fired (and is
 * unread), -1 when disarmed. */
static double timer_left_ms(int fd)
{
	struct itimerspec its;

	if (readable(fd))
		return 0;
	cr_assert_eq(timerfd_gettime(fd, &its), 0, "timerfd_gettime: %s", strerror(errno));
	if (!its.it_value.tv_sec && !its.it_value.tv_nsec)
		return -1;
	return its.it_value.tv_sec * 1e3 + its.it_value.tv_nsec / 1e6;
}

/* The connections @loop holds, requests handed to it included: what
 * rig_loops_listen picks a member by. */
static unsigned held(struct rig_loop *loop)
{
	return __atomic_load_n(&loop->cm_held, __ATOMIC_RELAXED);
}

/* One pass of @loop on the test's thread; no news may come of it. */
static void turn(struct rig_loop *loop)
{
	struct rig_ready r[8];
	int n = rig_loop_handle(loop, r, 8);

	cr_assert_eq(n, 0, "rig_loop_handle: %d (news %d) %s", n, n > 0 ? r[0].news : 0,
		     n < 0 ? rig_errmsg() : "");
}

/* A pass with nothing to read, as a member makes when it is woken: after
 * it, the member is one that turns (rig_loops_listen passes over a loop
 * only once it is found stalled). */
static void force_turn(struct rig_loop *loop)
{
	uint64_t before = __atomic_load_n(&loop->cm_turns, __ATOMIC_ACQUIRE);

	__atomic_store_n(&loop->cm_owed, true, __ATOMIC_RELEASE);
	turn(loop);
	cr_assert_gt(__atomic_load_n(&loop->cm_turns, __ATOMIC_ACQUIRE), before,
		     "the loop made no pass of the shared listener");
}

/* ------------------------------------------------ gate: ibv_create_qp */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct ibv_context *ctx;	/* armed for this device; NULL: off */
	bool have_thread;
	pthread_t thread;		/* the held helper */
	int entered;			/* its makes begun */
	int fail_tokens;		/* held makes that may leave, failing */
	bool fail_all;			/* every make of it fails at once */
} qgate = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	__typeof__(&ibv_create_qp) real = T_NEXT(ibv_create_qp);
	struct timespec ts;

	pthread_mutex_lock(&qgate.lock);
	if (qgate.ctx && pd->context == qgate.ctx) {
		if (!qgate.have_thread) {
			qgate.have_thread = true;
			qgate.thread = pthread_self();
		}
		if (pthread_equal(qgate.thread, pthread_self())) {
			qgate.entered++;
			pthread_cond_broadcast(&qgate.cond);
			/* The watchdog: a test that failed before opening
			 * the gate lets its helper go after 30 s. */
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 30;
			while (!qgate.fail_tokens && !qgate.fail_all &&
			       pthread_cond_timedwait(&qgate.cond, &qgate.lock, &ts) != ETIMEDOUT)
				;
			if (qgate.fail_tokens)
				qgate.fail_tokens--;
			pthread_mutex_unlock(&qgate.lock);
			errno = ENOMEM;
			return NULL;
		}
	}
	pthread_mutex_unlock(&qgate.lock);
	return real(pd, attr);
}

static void qgate_arm(struct rig_nic *nic)
{
	pthread_mutex_lock(&qgate.lock);
	qgate.ctx = nic->ctx;
	qgate.have_thread = false;
	qgate.entered = 0;
	qgate.fail_tokens = 0;
	qgate.fail_all = false;
	pthread_mutex_unlock(&qgate.lock);
}

/* Until the held helper has begun @n makes, or SURE_MS pass. */
static bool qgate_entered(int n)
{
	struct timespec ts;
	bool ok;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += SURE_MS / 1000;
	pthread_mutex_lock(&qgate.lock);
	while (qgate.entered < n &&
	       pthread_cond_timedwait(&qgate.cond, &qgate.lock, &ts) != ETIMEDOUT)
		;
	ok = qgate.entered >= n;
	pthread_mutex_unlock(&qgate.lock);
	return ok;
}

static int qgate_count(void)
{
	int n;

	pthread_mutex_lock(&qgate.lock);
	n = qgate.entered;
	pthread_mutex_unlock(&qgate.lock);
	return n;
}

/* The held make fails: its handshake ends, and frees its turn. */
static void qgate_fail_one(void)
{
	pthread_mutex_lock(&qgate.lock);
	qgate.fail_tokens++;
	pthread_cond_broadcast(&qgate.cond);
	pthread_mutex_unlock(&qgate.lock);
}

/* Every make of the held helper fails from now on (the test's end: no
 * queue pair is made for the requests that held the turns). */
static void qgate_off(void)
{
	pthread_mutex_lock(&qgate.lock);
	qgate.fail_all = true;
	pthread_cond_broadcast(&qgate.cond);
	pthread_mutex_unlock(&qgate.lock);
}

/* -------------------------------------------------- gate: rdma_establish */

static struct {
	bool armed;
	struct actor *destroyer;	/* let go from inside the held call */
	struct rig__qp *qp;
	bool saw_blocked;		/* the destroyer blocked or done */
	bool owner_cleared;		/* and had cleared the queue pair's owner */
} egate;

int rdma_establish(struct rdma_cm_id *id)
{
	__typeof__(&rdma_establish) real = T_NEXT(rdma_establish);

	if (__atomic_exchange_n(&egate.armed, false, __ATOMIC_ACQ_REL)) {
		sem_post(&egate.destroyer->go);
		egate.saw_blocked = actor_blocked_or_done(egate.destroyer);
		egate.owner_cleared = !__atomic_load_n(&egate.qp->owner, __ATOMIC_ACQUIRE);
	}
	return real(id);
}

/* ------------------------------------------------- gate: rdma_destroy_id */

static struct {
	int fd;			/* hold the destroy of an id of this channel; -1: off */
	sem_t in, open;
} dgate = { .fd = -1 };

int rdma_destroy_id(struct rdma_cm_id *id)
{
	__typeof__(&rdma_destroy_id) real = T_NEXT(rdma_destroy_id);
	int fd = __atomic_load_n(&dgate.fd, __ATOMIC_ACQUIRE);
	struct timespec ts;

	if (fd >= 0 && id && id->channel && id->channel->fd == fd &&
	    __atomic_compare_exchange_n(&dgate.fd, &fd, -1, false, __ATOMIC_ACQ_REL,
					__ATOMIC_ACQUIRE)) {
		sem_post(&dgate.in);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 30;	/* the watchdog */
		while (sem_timedwait(&dgate.open, &ts) && errno == EINTR)
			;
	}
	return real(id);
}

static bool sem_within(sem_t *s, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += ms / 1000;
	while (sem_timedwait(s, &ts))
		if (errno != EINTR)
			return false;
	return true;
}

/* ------------------------------------------------- raw rdma_cm requests */

/* Requests that rig's listener accepts (a real endpoint of ours, rig's
 * private data), from ids that never finish the handshake: each stays a
 * turn of the listener's until the listener ends it. */
struct rid {
	struct rdma_cm_id *id;
	bool sent, replied;
	int end;		/* the event that ended it; -1 while open */
	double t_connect, t_end;
};

struct raw {
	struct rig_nic *nic;
	struct rig_qp *qp;
	struct rig_endpoint e;
	struct rdma_event_channel *ch;
	struct rid *v;
	int n, sent, replied, ended;
	uint32_t qp_top;
};

static void raw_connect(struct raw *r, struct rid *d)
{
	struct rdma_conn_param p;
	struct rig_endpoint e = r->e;
	uint8_t priv[RIG_CM_PRIVATE];

	/* A queue pair number of its own per request, from the top of the
	 * range: the CM rejects a second live request naming one as stale. */
	e.qp = r->qp_top - (uint32_t)(d - r->v);
	rig_cm_pack(&e, priv);
	t_raw_param(&p, priv, RIG_CM_PRIVATE, e.qp);
	d->t_connect = t_now_ms();
	cr_assert_eq(rdma_connect(d->id, &p), 0, "rdma_connect: %s", strerror(errno));
	d->sent = true;
	r->sent++;
}

/* Takes the client's events that are there (none waited for). */
static void raw_pump(struct raw *r)
{
	struct rdma_cm_event *ev;

	while (!rdma_get_cm_event(r->ch, &ev)) {
		struct rid *d = ev->id->context;

		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			cr_assert_eq(rdma_resolve_route(ev->id, 5000), 0,
				     "rdma_resolve_route: %s", strerror(errno));
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			raw_connect(r, d);
			break;
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			d->replied = true;
			d->t_end = t_now_ms();
			r->replied++;
			break;	/* and never rdma_establish */
		default:
			if (d->end < 0) {
				d->end = ev->event;
				d->t_end = t_now_ms();
				r->ended++;
			}
		}
		rdma_ack_cm_event(ev);
	}
	cr_assert_eq(errno, EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
}

static void raw_open(struct raw *r, int n, uint16_t port, uint32_t qp_top)
{
	struct sockaddr_in sin = { 0 };
	int i, ret;

	memset(r, 0, sizeof(*r));
	r->qp_top = qp_top;
	ret = rig_nic_open(t_dev(), &r->nic);
	cr_assert_eq(ret, 0, "rig_nic_open: %d %s", ret, rig_errmsg());
	ret = rig_qp_make(r->nic, &r->qp);
	cr_assert_eq(ret, 0, "rig_qp_make: %d %s", ret, rig_errmsg());
	rig_qp_endpoint(r->qp, &r->e);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	cr_assert_eq(inet_pton(AF_INET, t_other_ip(), &sin.sin_addr), 1);
	r->ch = rdma_create_event_channel();
	cr_assert_not_null(r->ch, "rdma_create_event_channel: %s", strerror(errno));
	cr_assert_eq(fcntl(r->ch->fd, F_SETFL, O_NONBLOCK), 0);
	r->v = calloc(n, sizeof(*r->v));
	cr_assert_not_null(r->v);
	r->n = n;
	for (i = 0; i < n; i++) {
		r->v[i].end = -1;
		cr_assert_eq(rdma_create_id(r->ch, &r->v[i].id, &r->v[i], RDMA_PS_TCP), 0,
			     "rdma_create_id: %s", strerror(errno));
		cr_assert_eq(rdma_resolve_addr(r->v[i].id, NULL, (struct sockaddr *)&sin, 5000),
			     0, "rdma_resolve_addr: %s", strerror(errno));
	}
}

static void raw_close(struct raw *r)
{
	int i;

	for (i = 0; i < r->n; i++)
		rdma_destroy_id(r->v[i].id);
	rdma_destroy_event_channel(r->ch);
	free(r->v);
	rig_qp_destroy(r->qp);
	rig_nic_close(r->nic);
}

/* Queue pair numbers no earlier test of this run named (the server's CM
 * keeps a dropped connection's for a while and rejects them as stale). */
static uint32_t qp_top_of(int test)
{
	return 0xffffff - 4096 * (uint32_t)(test + 8 * (getpid() % 500));
}

/* -------------------------------------------- a shared listener, its turns held */

#define MEMBERS_MAX 3

/*
 * A shared listener over @n loops of the server's NIC, every one of its
 * RIG_CM_HANDSHAKES turns taken by a raw request served by loop 0 (the
 * others are marked stalled, so they are passed over), whose helper is
 * held in the first one's make; and one more request, read by loop 0,
 * waiting for a turn.
 */
struct fill {
	struct rig_nic *sn;
	struct rig_loop *loops[MEMBERS_MAX];
	int n;
	struct rig_listener *l;
	int lfd;		/* the listener's own channel */
	struct raw full, one;
	double t_waited;	/* the last request came to wait */
	int tfd[4], ntfd;	/* the listener's timers */
};

static void fill_setup(struct fill *f, int n, uint16_t port, int test)
{
	int fds[128], before, after, i, j, ret;
	double end, left;

	memset(f, 0, sizeof(*f));
	f->n = n;
	f->sn = t_nic_open(t_peer_dev());
	for (i = 0; i < n; i++) {
		ret = rig_loop_open(f->sn, &f->loops[i]);
		cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	}
	before = timerfds(fds, 64);
	ret = rig_loops_listen(f->loops, n, t_other_ip(), port, COOKIE, &f->l);
	cr_assert_eq(ret, 0, "rig_loops_listen: %d %s", ret, rig_errmsg());
	/* The listener's timer(s): the timerfds it opened. */
	after = timerfds(fds + before, 64 - before);
	for (i = before; i < before + after && f->ntfd < 4; i++) {
		for (j = 0; j < before && fds[j] != fds[i]; j++)
			;
		if (j == before)
			f->tfd[f->ntfd++] = fds[i];
	}
	cr_assert_gt(f->ntfd, 0, "rig_loops_listen opened no timerfd");
	f->lfd = rig_listener_fd(f->l);
	qgate_arm(f->sn);
	force_turn(f->loops[0]);
	/* The other members are found stalled, as steal() finds a member
	 * that left a request in its inbox RIG_CM_STALL_MS: each request goes
	 * to loop 0 until they turn again. */
	for (i = 1; i < n; i++)
		__atomic_store_n(&f->loops[i]->cm_stalled,
				 __atomic_load_n(&f->loops[i]->cm_turns, __ATOMIC_ACQUIRE),
				 __ATOMIC_RELEASE);

	raw_open(&f->full, RIG_CM_HANDSHAKES, port, qp_top_of(test));
	end = t_now_ms() + 3 * SURE_MS;
	for (;;) {
		raw_pump(&f->full);
		if (readable(f->lfd)) {
			turn(f->loops[0]);
			continue;
		}
		if (f->full.sent == RIG_CM_HANDSHAKES &&
		    held(f->loops[0]) == RIG_CM_HANDSHAKES && qgate_count() >= 1)
			break;
		cr_assert_lt(t_now_ms(), end, "the fill: %d requests out, loop 0 holds %u, "
			     "%d ended", f->full.sent, held(f->loops[0]), f->full.ended);
		poll(&(struct pollfd){ f->full.ch->fd, POLLIN, 0 }, 1, 5);
	}
	cr_assert_eq(f->full.ended, 0, "%d of the requests that fill the turns ended",
		     f->full.ended);
	for (i = 1; i < n; i++)
		cr_assert_eq(held(f->loops[i]), 0, "the fill: loop %d holds %u", i,
			     held(f->loops[i]));

	/* The stall bound the fill's hands set on the listener's timer runs
	 * out, and loop 0's pass takes it: the timer is free (disarmed) when
	 * the last request comes to wait, and takes that one's deadline. */
	end = t_now_ms() + SURE_MS;
	for (i = 0; i < f->ntfd; i++) {
		left = timer_left_ms(f->tfd[i]);
		if (left < 0 || left > 2 * RIG_CM_STALL_MS)
			continue;
		cr_assert_lt(t_now_ms(), end, "the listener's timer never fired");
		poll(&(struct pollfd){ f->tfd[i], POLLIN, 0 }, 1, (int)left + 1);
		if (readable(f->tfd[i])) {
			turn(f->loops[0]);
			i = -1;		/* look at them all again */
		}
	}

	/* The request that waits. */
	raw_open(&f->one, 1, port, qp_top_of(test) - RIG_CM_HANDSHAKES);
	end = t_now_ms() + SURE_MS;
	while (!readable(f->lfd)) {
		raw_pump(&f->one);
		cr_assert_lt(t_now_ms(), end, "the last request never reached the listener");
		poll(&(struct pollfd){ f->one.ch->fd, POLLIN, 0 }, 1, 5);
	}
	f->t_waited = t_now_ms();
	while (readable(f->lfd))
		turn(f->loops[0]);
	raw_pump(&f->one);
	cr_assert_eq(f->one.ended, 0, "the last request was rejected (event %d): it did not wait",
		     f->one.v[0].end);
	cr_assert_eq(held(f->loops[0]), RIG_CM_HANDSHAKES,
		     "loop 0 holds %u: the last request took no turn", held(f->loops[0]));
}

static void fill_close(struct fill *f)
{
	int i;

	qgate_off();
	raw_close(&f->one);
	raw_close(&f->full);
	cr_assert_eq(rig_listener_close(f->l), 0, "%s", rig_errmsg());
	for (i = 0; i < f->n; i++)
		cr_assert_eq(rig_loop_close(f->loops[i]), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(f->sn), 0, "%s", rig_errmsg());
	pthread_mutex_lock(&qgate.lock);
	qgate.ctx = NULL;
	pthread_mutex_unlock(&qgate.lock);
}

/* A member's own thread: it sleeps on the loop's fd and makes a pass
 * each time it is readable, as an application's thread does. */
struct turner {
	pthread_t thread;
	struct rig_loop *loop;
	bool stop;
	int accepted, other, failed;	/* news seen; handle calls that failed */
	double t_accepted;
};

static void *turner_main(void *arg)
{
	struct turner *t = arg;
	struct pollfd p = { rig_loop_fd(t->loop), POLLIN, 0 };
	struct rig_ready r[8];
	int n, i;

	while (!__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE)) {
		if (poll(&p, 1, 20) != 1)
			continue;
		n = rig_loop_handle(t->loop, r, 8);
		if (n < 0)
			__atomic_add_fetch(&t->failed, 1, __ATOMIC_RELAXED);
		for (i = 0; i < n; i++) {
			if (r[i].news == RIG_NEWS_ACCEPTED && !r[i].result) {
				if (!t->accepted)
					t->t_accepted = t_now_ms();
				__atomic_add_fetch(&t->accepted, 1, __ATOMIC_RELEASE);
			} else {
				__atomic_add_fetch(&t->other, 1, __ATOMIC_RELAXED);
			}
		}
	}
	return NULL;
}

static void turner_start(struct turner *t, struct rig_loop *loop)
{
	memset(t, 0, sizeof(*t));
	t->loop = loop;
	cr_assert_eq(pthread_create(&t->thread, NULL, turner_main, t), 0);
}

static void turner_stop(struct turner *t)
{
	__atomic_store_n(&t->stop, true, __ATOMIC_RELEASE);
	cr_assert_eq(pthread_join(t->thread, NULL), 0);
	cr_assert_eq(t->failed, 0, "rig_loop_handle failed %d times", t->failed);
}

/* Until the waiting request is answered or ended. */
static void outcome(struct raw *r)
{
	double end = t_now_ms() + SURE_MS;

	while (!r->replied && !r->ended) {
		cr_assert_lt(t_now_ms(), end, "the waiting request: no answer, no end in %d ms",
			     SURE_MS);
		poll(&(struct pollfd){ r->ch->fd, POLLIN, 0 }, 1, 20);
		raw_pump(r);
	}
}

static const char *event_name(int ev)
{
	return ev < 0 ? "none" : rdma_event_str((enum rdma_cm_event_type)ev);
}

TestSuite(shared, .timeout = 120);

/* --------------------------------------------------------------- tests */

/*
 * A turn freed at one member of a shared listener serves a request that
 * waits, whichever member turns next (rig_loops_listen(3): requests wait
 * in any member). The turn frees on loop 0's helper (a make fails),
 * while loop 0's thread is busy elsewhere and makes no pass; loop 1's
 * thread sleeps on its fd, as an application's does. The request must
 * be accepted by loop 1, not rejected at its RIG_CM_HALF_OPEN_MS bound
 * with a turn free all along.
 */
Test(shared, a_turn_freed_in_a_busy_member_serves_the_waiting_in_another)
{
	static struct fill f;	/* static: threads outlive a failed assert */
	static struct turner t;
	double t_freed;

	fill_setup(&f, 2, 18701, 0);
	/* Loop 1 has turned (it is not passed over), and its thread sleeps. */
	force_turn(f.loops[1]);
	turner_start(&t, f.loops[1]);
	qgate_fail_one();
	/* The helper began the next make: the failed one's turn is free. */
	cr_assert(qgate_entered(2), "the held helper never went on");
	t_freed = t_now_ms();
	outcome(&f.one);
	turner_stop(&t);
	cr_assert(f.one.v[0].replied,
		  "the waiting request ended by %s %.0f ms after a turn freed (%.0f ms after it "
		  "came to wait): loop 0, whose thread was busy, freed the turn, and loop 1's "
		  "thread was never woken to serve it", event_name(f.one.v[0].end),
		  f.one.v[0].t_end - t_freed, f.one.v[0].t_end - f.t_waited);
	cr_assert_eq(t.accepted, 1, "loop 1 handed out %d RIG_NEWS_ACCEPTED", t.accepted);
	cr_log_info("the waiting request was answered %.0f ms after a turn freed",
		    f.one.v[0].t_end - t_freed);
	fill_close(&f);
}

/*
 * A request handed to a member whose thread does not turn is taken back
 * after RIG_CM_STALL_MS and served by another (rig_loops_listen(3)),
 * even while a request waits for a turn, whose deadline
 * (RIG_CM_HALF_OPEN_MS after it came) already holds the listener's
 * timer. The waiting request takes a freed turn and goes to an idle
 * member (the fewest connections: loop 1 or 2, not loop 0, which holds
 * the others); the remaining member's thread sleeps on its fd. It must
 * accept the request within the stall bound, plus a second and what the
 * machine stalled a thread meanwhile: far short of the wait's 3 s.
 */
Test(shared, a_request_handed_to_a_stalled_member_moves_on_within_the_stall_bound)
{
	static struct fill f;	/* static: threads outlive a failed assert */
	static struct turner t;
	double t_freed, bound, took;
	int idle, other;

	t_stall_start();
	fill_setup(&f, 3, 18703, 1);
	force_turn(f.loops[1]);
	force_turn(f.loops[2]);
	qgate_fail_one();
	cr_assert(qgate_entered(2), "the held helper never went on");
	t_freed = t_now_ms();
	/* Loop 0 was woken for the freed turn: its pass hands the waiting
	 * request on, unless that was done already. */
	turn(f.loops[0]);
	idle = held(f.loops[1]) == 1 ? 1 : held(f.loops[2]) == 1 ? 2 : 0;
	cr_assert(idle, "the waiting request went to no idle member (held: %u %u %u)",
		  held(f.loops[0]), held(f.loops[1]), held(f.loops[2]));
	other = 3 - idle;
	turner_start(&t, f.loops[other]);
	outcome(&f.one);
	turner_stop(&t);
	cr_assert(f.one.v[0].replied, "the request ended by %s", event_name(f.one.v[0].end));
	cr_assert_eq(t.accepted, 1, "loop %d handed out %d RIG_NEWS_ACCEPTED", other,
		     t.accepted);
	took = t.t_accepted - t_freed;
	bound = RIG_CM_STALL_MS + 1000 + t_stall_max_ms();
	cr_log_info("handed to loop %d, whose thread does not turn; accepted by loop %d %.0f ms later "
		    "(the wait's deadline was %.0f ms later; stall %.0f ms)", idle, other, took,
		    f.t_waited + RIG_CM_HALF_OPEN_MS - t_freed, t_stall_max_ms());
	cr_assert_lt(took, bound,
		     "the request handed to loop %d, whose thread does not turn, was accepted "
		     "by loop %d %.0f ms later, past %.0f ms (RIG_CM_STALL_MS + 1000 + %.0f ms "
		     "the machine stalled a thread): it was taken back at the waiting "
		     "request's deadline (%.0f ms after the turn freed), not at the stall bound",
		     idle, other, took, bound, t_stall_max_ms(),
		     f.t_waited + RIG_CM_HALF_OPEN_MS - t_freed);
	fill_close(&f);
}

/*
 * The last member of a shared listener leaves (its loop closes) with a
 * handshake under way, while the application closes the listener from
 * another thread. The member's leaving destroys the listener's id; the
 * gate holds it there, after the member let go of its reference, while
 * the close runs to its end. The member then ends its handshake, which
 * must not touch the listener the close freed. Under ASan, touching it
 * is a heap-use-after-free (the listener's turn count, in the ended
 * handshake's leave); a plain build may not show it.
 */
static int close_loop(struct actor *a)
{
	return rig_loop_close(a->arg);
}

static int close_listener(struct actor *a)
{
	return rig_listener_close(a->arg);
}

Test(shared, closing_a_shared_listener_as_its_last_member_leaves)
{
	static struct raw r;
	static struct actor closer, app;
	struct rig_loop *m;
	struct rig_listener *l;
	struct rig_nic *sn;
	double end;
	bool news;
	int ret;

	sem_init(&dgate.in, 0, 0);
	sem_init(&dgate.open, 0, 0);
	sn = t_nic_open(t_peer_dev());
	ret = rig_loop_open(sn, &m);
	cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	ret = rig_loops_listen(&m, 1, t_other_ip(), 18705, COOKIE, &l);
	cr_assert_eq(ret, 0, "rig_loops_listen: %d %s", ret, rig_errmsg());

	/* A handshake under way at the member: its queue pair made and its
	 * news posted, never handed out (OWING). */
	raw_open(&r, 1, 18705, qp_top_of(2));
	end = t_now_ms() + SURE_MS;
	for (;;) {
		raw_pump(&r);
		if (readable(rig_listener_fd(l)))
			turn(m);
		pthread_mutex_lock(&m->lock);
		news = m->news.next != &m->news;
		pthread_mutex_unlock(&m->lock);
		if (news)
			break;
		cr_assert_lt(t_now_ms(), end, "no RIG_NEWS_ACCEPTED posted (%d sent)", r.sent);
		poll(&(struct pollfd){ r.ch->fd, POLLIN, 0 }, 1, 5);
	}

	__atomic_store_n(&dgate.fd, rig_listener_fd(l), __ATOMIC_RELEASE);
	actor_start(&closer, close_loop, m, true);
	cr_assert(sem_within(&dgate.in, SURE_MS), "the member never destroyed the listener's id");
	actor_start(&app, close_listener, l, true);
	cr_assert(actor_blocked_or_done(&app), "rig_listener_close neither returned nor blocked");
	sem_post(&dgate.open);
	cr_assert_eq(pthread_join(closer.thread, NULL), 0);
	cr_assert_eq(pthread_join(app.thread, NULL), 0);
	cr_assert_eq(closer.rc, 0, "rig_loop_close: %d", closer.rc);
	cr_assert_eq(app.rc, 0, "rig_listener_close: %d", app.rc);
	raw_close(&r);
	cr_assert_eq(rig_nic_close(sn), 0, "%s", rig_errmsg());
}

/*
 * D1, L1: a loop's dial handed out as RIG_NEWS_DIALED before its last
 * message (it owes the listener its RTU), destroyed from another thread
 * while the loop's thread sends that message. The gate holds the loop's
 * thread in rdma_establish, under the loop's cm_lock, until the
 * destroyer is blocked (or done). Once the destroy returned, nothing of
 * the queue pair may be left in the loop: not on the liveness list,
 * whose next pass would probe freed memory (under ASan, a
 * heap-use-after-free in the pass, which the test runs first).
 */
static int destroy_qp(struct actor *a)
{
	return rig_qp_destroy(a->arg);
}

Test(shared, D1_L1_a_dial_destroyed_as_its_loop_sends_the_RTU_leaves_no_probe)
{
	static struct actor destroyer;
	struct rig_nic *cn, *sn;
	struct rig_loop *cl, *sl;
	struct rig_listener *l;
	struct rig_qp *qp = NULL;
	struct rig_ready rd[8];
	double end;
	bool empty;
	int ret, n, i;

	cn = t_nic_open(t_dev());
	sn = t_nic_open(t_peer_dev());
	cr_assert_eq(rig_loop_open(cn, &cl), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_open(sn, &sl), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_liveness(cl, 20), 0, "%s", rig_errmsg());
	ret = rig_loop_listen(sl, t_other_ip(), 18707, COOKIE, &l);
	cr_assert_eq(ret, 0, "rig_loop_listen: %d %s", ret, rig_errmsg());
	ret = rig_loop_dial(cl, t_other_ip(), 18707, 20000000, COOKIE + 1);
	cr_assert_eq(ret, 0, "rig_loop_dial: %d %s", ret, rig_errmsg());

	end = t_now_ms() + 2 * SURE_MS;
	while (!qp) {
		struct pollfd p[2] = { { rig_loop_fd(cl), POLLIN, 0 },
				       { rig_loop_fd(sl), POLLIN, 0 } };

		cr_assert_lt(t_now_ms(), end, "no RIG_NEWS_DIALED");
		poll(p, 2, 20);
		if (p[1].revents) {
			n = rig_loop_handle(sl, rd, 8);
			cr_assert_geq(n, 0, "%s", rig_errmsg());
		}
		if (!p[0].revents)
			continue;
		n = rig_loop_handle(cl, rd, 8);
		cr_assert_geq(n, 0, "%s", rig_errmsg());
		for (i = 0; i < n; i++) {
			cr_assert_eq(rd[i].news, RIG_NEWS_DIALED, "news %d", rd[i].news);
			cr_assert_eq(rd[i].result, 0, "the dial: %d %s", rd[i].result,
				     rig_errmsg());
			qp = rd[i].qp;
		}
	}
	/* Handed out early: the loop's next pass sends the RTU. */
	cr_assert_not_null(rig__qp(qp)->owner);
	cr_assert(!rig__qp(qp)->live, "the dial is on the liveness list before its RTU");

	actor_start(&destroyer, destroy_qp, qp, false);
	egate.destroyer = &destroyer;
	egate.qp = rig__qp(qp);
	__atomic_store_n(&egate.armed, true, __ATOMIC_RELEASE);
	n = rig_loop_handle(cl, rd, 8);
	cr_assert_geq(n, 0, "%s", rig_errmsg());
	cr_assert(!__atomic_load_n(&egate.armed, __ATOMIC_ACQUIRE), "the pass sent no RTU");
	cr_assert(egate.saw_blocked, "the destroyer neither returned nor blocked in %d ms",
		  SURE_MS);
	cr_assert_eq(pthread_join(destroyer.thread, NULL), 0);
	cr_assert_eq(destroyer.rc, 0, "rig_qp_destroy: %d", destroyer.rc);
	cr_log_info("the destroyer blocked %s the queue pair's owner cleared",
		    egate.owner_cleared ? "with" : "without");

	/* Passes of the liveness probes, where ASan sees what they touch;
	 * without ASan a pass over freed memory may crash instead. */
	if (T_ASAN) {
		end = t_now_ms() + 300;
		while (t_now_ms() < end) {
			struct pollfd p = { rig_loop_fd(cl), POLLIN, 0 };

			if (poll(&p, 1, 10) == 1)
				cr_assert_geq(rig_loop_handle(cl, rd, 8), 0, "%s", rig_errmsg());
		}
	}
	pthread_mutex_lock(&cl->live_lock);
	empty = cl->live.next == &cl->live;
	pthread_mutex_unlock(&cl->live_lock);
	cr_assert(empty, "rig_qp_destroy returned 0, and the queue pair it freed is on its "
		  "loop's liveness list: the loop's thread put it there (the RTU went) while "
		  "the destroyer waited for the loop's lock, after it had found the queue pair "
		  "on no list; the next pass probes freed memory");

	cr_assert_eq(rig_listener_close(l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(sl), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(cl), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(sn), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(cn), 0, "%s", rig_errmsg());
}
