/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/*
 * rig_qp_close (rig(7) D3): a destroy whose kernel work runs on the
 * loop's helper thread, and whose end comes out of the loop as news.
 *
 * This binary interposes ibv_destroy_qp (the executable's definition
 * comes before libibverbs'): a destroy of the queue pair named in
 * gate.hold waits until the test opens the gate, so the helper thread is
 * held inside a destroy for as long as a test needs, with no timing
 * window. It interposes ibv_destroy_cq and rdma_destroy_id the same way
 * (held.what): the other kernel steps of a close, each a command to the
 * NIC's firmware or a message to the peer's CM on bnxt_re and mlx5,
 * which can take milliseconds there; Soft-RoCE does them in software, in
 * microseconds, so only a gate shows what the loop's thread waits for.
 * Every destroy still reaches the real device.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <semaphore.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include <rdma/rdma_cma.h>

#include "t_device.h"

static struct {
	pthread_mutex_t lock;
	struct ibv_qp *hold;	/* its destroy waits for the gate */
	sem_t in, open;		/* the held destroy began; may go on */
	struct ibv_qp *done[8];	/* destroys that reached the device */
	pthread_t by[8];	/* and the threads that made them */
	int ndone;
} gate = { .lock = PTHREAD_MUTEX_INITIALIZER };

int ibv_destroy_qp(struct ibv_qp *qp)
{
	__typeof__(&ibv_destroy_qp) real = T_NEXT(ibv_destroy_qp);
	int ret;

	if (qp == gate.hold) {
		sem_post(&gate.in);
		sem_wait(&gate.open);
	}
	ret = real(qp);
	pthread_mutex_lock(&gate.lock);
	if (gate.ndone < 8) {
		gate.by[gate.ndone] = pthread_self();
		gate.done[gate.ndone++] = qp;
	}
	pthread_mutex_unlock(&gate.lock);
	return ret;
}

/*
 * The other gate: the first ibv_destroy_cq, rdma_destroy_id or
 * rdma_disconnect (held.what) that a thread other than the test's makes
 * once the gate is armed waits until the test opens it, or until the
 * watchdog does, 20 s after it was entered: then the test's thread was
 * stuck (in the loop's lock, say), and the test fails on held.forced
 * rather than hanging. An id's call is held only if the id is the
 * server's (its local port the listener's): the client's loop hangs up
 * on its own helper when the server closes, and may get there first.
 */
enum held_step { HOLD_NONE, HOLD_DESTROY_CQ, HOLD_DESTROY_ID, HOLD_DISCONNECT };

static const char *const held_names[] = {
	[HOLD_DESTROY_CQ] = "ibv_destroy_cq",
	[HOLD_DESTROY_ID] = "rdma_destroy_id",
	[HOLD_DISCONNECT] = "rdma_disconnect",
};

static struct {
	enum held_step what;	/* armed for this step; HOLD_NONE once entered */
	pthread_t test;
	uint16_t port;		/* and for an id with this local port only */
	sem_t in, open;
	sem_t calm;		/* the test is past its checks: no watchdog */
	bool forced;		/* the watchdog opened it */
	pthread_t watchdog;
	struct rdma_cm_id *id;	/* the held call's id */
	bool id_destroyed;	/* rdma_destroy_id(id) was called */
	pthread_t id_destroyer;
} held;

static bool hold_here(enum held_step step, struct rdma_cm_id *id)
{
	enum held_step want = step;

	if (pthread_equal(pthread_self(), held.test) ||
	    (id && rdma_get_src_port(id) != htons(held.port)) ||
	    !__atomic_compare_exchange_n(&held.what, &want, HOLD_NONE, false,
					 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		return false;
	__atomic_store_n(&held.id, id, __ATOMIC_RELEASE);
	sem_post(&held.in);
	sem_wait(&held.open);
	return true;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	__typeof__(&ibv_destroy_cq) real = T_NEXT(ibv_destroy_cq);

	hold_here(HOLD_DESTROY_CQ, NULL);
	return real(cq);
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	__typeof__(&rdma_destroy_id) real = T_NEXT(rdma_destroy_id);

	hold_here(HOLD_DESTROY_ID, id);
	if (id && id == __atomic_load_n(&held.id, __ATOMIC_ACQUIRE)) {
		held.id_destroyer = pthread_self();
		__atomic_store_n(&held.id_destroyed, true, __ATOMIC_RELEASE);
	}
	return real(id);
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	__typeof__(&rdma_disconnect) real = T_NEXT(rdma_disconnect);

	hold_here(HOLD_DISCONNECT, id);
	return real(id);
}

static void *held_watchdog(void *arg)
{
	struct timespec ts;

	(void)arg;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 20;
	while (sem_timedwait(&held.calm, &ts))
		if (errno == ETIMEDOUT) {
			__atomic_store_n(&held.forced, true, __ATOMIC_RELEASE);
			sem_post(&held.open);
			break;
		}
	return NULL;
}

static bool destroyed(struct ibv_qp *qp, pthread_t *by)
{
	bool found = false;
	int i;

	pthread_mutex_lock(&gate.lock);
	for (i = 0; i < gate.ndone && !found; i++) {
		found = gate.done[i] == qp;
		if (found && by)
			*by = gate.by[i];
	}
	pthread_mutex_unlock(&gate.lock);
	return found;
}

static void gate_init(void)
{
	sem_init(&gate.in, 0, 0);
	sem_init(&gate.open, 0, 0);
	gate.hold = NULL;
	gate.ndone = 0;
}

/* Waits up to 10 s for the held destroy to begin. */
static bool gate_entered(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	return !sem_timedwait(&gate.in, &ts);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The loop's news for up to @ms, into @out (at most @max); stops early
 * once @want pieces came. Returns how many. */
static int news(struct rig_loop *loop, struct rig_ready *out, int max, int want, int ms)
{
	double end = now_ms() + ms;
	int n = 0, r;

	while (n < max && n < want && now_ms() < end) {
		r = rig_loop_handle(loop, out + n, max - n);
		cr_assert_geq(r, 0, "rig_loop_handle: %s", rig_errmsg());
		n += r;
		if (!r) {
			struct timespec ts = { 0, 1000000 };

			nanosleep(&ts, NULL);
		}
	}
	return n;
}

struct pair {
	struct rig_nic *nic, *peer_nic;
	struct rig_loop *loop;
	struct rig_qp *a, *b;	/* a: in the loop, closed; b: its peer */
	struct t_buf tx, rx;
};

/* @a in a loop of its own, @b in the peer NIC's own loop (the other host
 * in the two-host topology), connected; the loop watched. */
static void pair_open(struct pair *p)
{
	p->nic = t_nic_open(t_dev());
	p->peer_nic = t_peer_dev() ? t_nic_open(t_peer_dev()) : p->nic;
	cr_assert_eq(rig_loop_open(p->nic, &p->loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_watch(p->loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(p->loop, &p->a), 0, "%s", rig_errmsg());
	p->b = t_qp(p->peer_nic);
	t_connect(p->a, p->b);
	t_buf(&p->rx, p->nic, 4096, 7);
	t_buf(&p->tx, p->peer_nic, 4096, 8);
}

static void pair_close(struct pair *p)
{
	cr_assert_eq(rig_qp_destroy(p->b), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(p->loop), 0, "%s", rig_errmsg());
	if (p->peer_nic != p->nic)
		cr_assert_eq(rig_nic_close(p->peer_nic), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(p->nic), 0, "%s", rig_errmsg());
}

TestSuite(close, .init = gate_init);

/*
 * The call returns while the helper thread is held inside another
 * queue pair's destroy: it waits for no kernel work of its own, nor for
 * the helper. Its destroy runs on the helper, after the held one, and
 * each close comes out of the loop once, with its cookie, in that order.
 */
Test(close, returns_while_the_helper_is_held_busy, .timeout = 120)
{
	struct pair p;
	struct rig_qp *x;
	struct ibv_qp *xi, *ai;
	struct rig_ready r[8];
	pthread_t by;
	int n;

	pair_open(&p);
	cr_assert_eq(rig_qp_make_in(p.loop, &x), 0, "%s", rig_errmsg());
	xi = x->ibqp;
	ai = p.a->ibqp;
	gate.hold = xi;
	cr_assert_eq(rig_qp_close(x, 1), 0, "%s", rig_errmsg());
	cr_assert(gate_entered(), "the helper never began the first destroy");
	/* The helper is inside x's destroy, and stays there. */
	cr_assert_eq(rig_qp_close(p.a, 2), 0, "%s", rig_errmsg());
	cr_assert_not(destroyed(ai, NULL), "the close destroyed the queue pair before it returned");
	cr_assert_not(destroyed(xi, NULL));
	cr_assert_eq(news(p.loop, r, 8, 1, 200), 0, "news came while the helper was held");
	sem_post(&gate.open);
	n = news(p.loop, r, 8, 2, 30000);
	cr_assert_eq(n, 2, "%d pieces of news", n);
	cr_assert_eq(r[0].news, RIG_NEWS_CLOSED);
	cr_assert_eq(r[0].qp, x);
	cr_assert_eq(r[0].cookie, 1);
	cr_assert_eq(r[0].result, 0);
	cr_assert_eq(r[1].news, RIG_NEWS_CLOSED);
	cr_assert_eq(r[1].qp, p.a);
	cr_assert_eq(r[1].cookie, 2);
	cr_assert_eq(r[1].result, 0);
	/* Off the test's thread, which is the loop's here. */
	cr_assert(destroyed(ai, &by));
	cr_assert_not(pthread_equal(by, pthread_self()));
	cr_assert(destroyed(xi, &by));
	cr_assert_not(pthread_equal(by, pthread_self()));
	/* Once each. */
	cr_assert_eq(news(p.loop, r, 8, 1, 300), 0);
	pair_close(&p);
}

/*
 * D1 at the news: a receive posted before the close is never written.
 * The peer sends only after the news: its send finds no queue pair, is
 * never acknowledged, and fails with -ETIMEDOUT once its retries end
 * (M3, D1), and the receive's buffer keeps every byte it had.
 */
Test(close, nic_writes_nothing_after_the_news, .timeout = 120)
{
	struct rig_completion c;
	struct rig_ready r[8];
	uint8_t before[4096];
	struct pair p;
	int n;

	pair_open(&p);
	memcpy(before, p.rx.mem, sizeof(before));
	cr_assert_eq(rig_qp_receive(p.a, p.rx.r, 0, 4096), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_close(p.a, 9), 0, "%s", rig_errmsg());
	n = news(p.loop, r, 8, 1, 30000);
	cr_assert_eq(n, 1);
	cr_assert_eq(r[0].news, RIG_NEWS_CLOSED);
	cr_assert_eq(r[0].qp, p.a);
	cr_assert_eq(r[0].cookie, 9);
	cr_assert_eq(r[0].result, 0);
	cr_assert_eq(rig_qp_send(p.b, p.tx.r, 0, 4096), 0, "%s", rig_errmsg());
	c = t_take(p.b, RIG_SEND, 30000);
	cr_assert_eq(c.error, -ETIMEDOUT, "the peer's send: %d (%s)", c.error,
		     c.why ? c.why : "completed");
	cr_assert_eq(memcmp(p.rx.mem, before, sizeof(before)), 0,
		     "the NIC wrote a closed queue pair's receive buffer");
	cr_assert_eq(news(p.loop, r, 8, 1, 300), 0);
	pair_close(&p);
}

/*
 * Between the close and its news (the helper held inside the destroy):
 * posts and polls of the queue pair are -EINVAL and report none of its
 * due entries (they get no completion, D1), a second close and a
 * destroy are -EINVAL, and the loop hands out no news of its rings, not
 * even of a completion that was listed before the close; after the news
 * only the one CLOSED.
 */
Test(close, entries_due_report_per_D1_and_no_ring_news, .timeout = 120)
{
	struct rig_completion c;
	struct rig_ready r[8];
	struct pair p;
	int n;

	pair_open(&p);
	cr_assert_eq(rig_qp_receive(p.a, p.rx.r, 0, 64), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive(p.a, p.rx.r, 64, 64), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_send(p.b, p.tx.r, 0, 64), 0, "%s", rig_errmsg());
	c = t_take(p.b, RIG_SEND, 10000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	/* The receive completed: its ring's news is listed (or its event
	 * waits on the channel) and the loop has not handed it out. */
	gate.hold = p.a->ibqp;
	cr_assert_eq(rig_qp_close(p.a, 5), 0, "%s", rig_errmsg());
	cr_assert(gate_entered());
	cr_assert_eq(rig_qp_poll(p.a, RIG_RECEIVE, &c), -EINVAL);
	cr_assert_eq(rig_qp_poll(p.a, RIG_SEND, &c), -EINVAL);
	cr_assert_eq(rig_qp_receive(p.a, p.rx.r, 128, 64), -EINVAL);
	cr_assert_eq(rig_qp_send(p.a, p.rx.r, 0, 64), -EINVAL);
	cr_assert_eq(rig_qp_wait(p.a, RIG_RECEIVE, 1000, &c), -EINVAL);
	cr_assert_eq(rig_qp_close(p.a, 6), -EINVAL);
	cr_assert_eq(rig_qp_destroy(p.a), -EINVAL);
	cr_assert_eq(news(p.loop, r, 8, 1, 300), 0, "news of a closing queue pair: %d",
		     r[0].news);
	sem_post(&gate.open);
	n = news(p.loop, r, 8, 8, 2000);
	cr_assert_eq(n, 1, "%d pieces of news", n);
	cr_assert_eq(r[0].news, RIG_NEWS_CLOSED);
	cr_assert_eq(r[0].qp, p.a);
	cr_assert_eq(r[0].cookie, 5);
	cr_assert_eq(r[0].result, 0);
	pair_close(&p);
}

/* Bad input is -EINVAL and changes nothing: NULL, and a queue pair of
 * the NIC's own loop (rig_qp_make), which still exchanges a message. */
Test(close, bad_input_is_EINVAL_and_changes_nothing, .timeout = 60)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *a, *b;
	struct t_buf tx, rx;
	struct rig_ready r[4];

	cr_assert_eq(rig_qp_close(NULL, 0), -EINVAL);
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
	t_buf(&tx, nic, 64, 1);
	t_buf(&rx, nic, 64, 2);
	cr_assert_eq(rig_qp_close(a, 0), -EINVAL);
	cr_assert(strstr(rig_errmsg(), "no loop"), "%s", rig_errmsg());
	t_exchange(a, b, &tx, &rx, 64);
	t_exchange(b, a, &rx, &tx, 64);
	cr_assert_eq(rig_loop_handle(rig_nic_loop(nic), r, 4) >= 0, 1);
	cr_assert_eq(rig_qp_destroy(a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(b), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* A close whose news nobody took: closing the loop ends it, and frees
 * what it kept (the ASan build's leak check). */
Test(close, news_not_taken_goes_with_the_loop, .timeout = 60)
{
	struct pair p;

	pair_open(&p);
	cr_assert_eq(rig_qp_close(p.a, 3), 0, "%s", rig_errmsg());
	pair_close(&p);
}

/*
 * The loop's fd, waited on as <rig/loop.h> shows, with closes among a
 * stream of completions: 48 queue pairs closed at once while the peer
 * sends 64 messages to the loop's connected queue pair, and news taken
 * at most 8 per call, so that more waits than one call hands out and
 * the fd must fire again for the rest. Every close comes out once with
 * its cookie, every message arrives intact and in order, and no wait
 * for the fd lasts 10 s (a lost wakeup would). Once with epoll
 * (rig_loop_watch), once with io_uring's multishot poll
 * (rig_uring_watch), each the way the header's example does it.
 */
enum { CLOSES = 48, MESSAGES = 64, MSG = 64, PER_CALL = 8, TAG = 0x7167 };

struct stream {
	struct pair p;
	struct rig_qp *q[CLOSES];
	bool closed[CLOSES];
	int nclosed, received, sent;
	/* the fd's wait: epoll's or io_uring's */
	int ep;
	struct io_uring ring;
	bool uring;
};

/* Waits for the loop's fd (10 s at most), then hands out up to
 * PER_CALL pieces of news; returns how many. */
static int stream_wait(struct stream *st, struct rig_ready *r)
{
	int n;

	if (st->uring) {
		struct __kernel_timespec ts = { .tv_sec = 10 };
		struct io_uring_cqe *cqe;

		cr_assert_eq(io_uring_wait_cqe_timeout(&st->ring, &cqe, &ts), 0,
			     "no CQE for the loop's fd in 10 s: %d of %d closes, %d of %d "
			     "messages", st->nclosed, CLOSES, st->received, MESSAGES);
		cr_assert_eq(cqe->user_data, TAG);
		n = rig_uring_handle(&st->ring, st->p.loop, cqe, r, PER_CALL);
		io_uring_cqe_seen(&st->ring, cqe);
		io_uring_submit(&st->ring);
	} else {
		struct epoll_event out;

		cr_assert_eq(epoll_wait(st->ep, &out, 1, 10000), 1,
			     "the loop's fd not readable in 10 s: %d of %d closes, %d of %d "
			     "messages", st->nclosed, CLOSES, st->received, MESSAGES);
		cr_assert_eq(out.data.ptr, st->p.loop);
		n = rig_loop_handle(st->p.loop, r, PER_CALL);
	}
	cr_assert_geq(n, 0, "%s", rig_errmsg());
	return n;
}

static void stream_run(bool uring)
{
	static struct stream st;
	struct rig_ready r[PER_CALL];
	struct rig_completion c;
	int i, n;

	memset(&st, 0, sizeof(st));
	st.uring = uring;
	/* pair_open watches the loop with rig_loop_watch: the io_uring run
	 * makes its own pair, watched by rig_uring_watch instead. */
	if (uring) {
		st.p.nic = t_nic_open(t_dev());
		st.p.peer_nic = t_peer_dev() ? t_nic_open(t_peer_dev()) : st.p.nic;
		cr_assert_eq(rig_loop_open(st.p.nic, &st.p.loop), 0, "%s", rig_errmsg());
		cr_assert_eq(io_uring_queue_init(8, &st.ring, 0), 0);
		cr_assert_eq(rig_uring_watch(&st.ring, st.p.loop, TAG), 0, "%s", rig_errmsg());
		cr_assert_eq(io_uring_submit(&st.ring), 1);
		cr_assert_eq(rig_qp_make_in(st.p.loop, &st.p.a), 0, "%s", rig_errmsg());
		st.p.b = t_qp(st.p.peer_nic);
		t_connect(st.p.a, st.p.b);
		t_buf(&st.p.rx, st.p.nic, MESSAGES * MSG, 7);
		t_buf(&st.p.tx, st.p.peer_nic, MESSAGES * MSG, 8);
	} else {
		struct epoll_event ev = { .events = EPOLLIN };

		pair_open(&st.p);
		st.ep = epoll_create1(EPOLL_CLOEXEC);
		cr_assert_geq(st.ep, 0);
		ev.data.ptr = st.p.loop;
		cr_assert_eq(epoll_ctl(st.ep, EPOLL_CTL_ADD, rig_loop_fd(st.p.loop), &ev), 0);
	}
	for (i = 0; i < CLOSES; i++)
		cr_assert_eq(rig_qp_make_in(st.p.loop, &st.q[i]), 0, "%s", rig_errmsg());
	for (i = 0; i < MESSAGES; i++)
		cr_assert_eq(rig_qp_receive(st.p.a, st.p.rx.r, (size_t)i * MSG, MSG), 0,
			     "%s", rig_errmsg());
	memset(st.p.rx.mem, 0, MESSAGES * MSG);

	/* Half the messages, all the closes, the other half. */
	for (; st.sent < MESSAGES / 2; st.sent++)
		cr_assert_eq(rig_qp_send(st.p.b, st.p.tx.r, (size_t)st.sent * MSG, MSG), 0,
			     "%s", rig_errmsg());
	for (i = 0; i < CLOSES; i++)
		cr_assert_eq(rig_qp_close(st.q[i], 100 + (uint64_t)i), 0, "%s", rig_errmsg());
	for (; st.sent < MESSAGES; st.sent++)
		cr_assert_eq(rig_qp_send(st.p.b, st.p.tx.r, (size_t)st.sent * MSG, MSG), 0,
			     "%s", rig_errmsg());

	while (st.nclosed < CLOSES || st.received < MESSAGES) {
		n = stream_wait(&st, r);
		for (i = 0; i < n; i++) {
			if (r[i].news == RIG_NEWS_CLOSED) {
				uint64_t k = r[i].cookie - 100;

				cr_assert_lt(k, CLOSES, "cookie %llu",
					     (unsigned long long)r[i].cookie);
				cr_assert_eq(r[i].qp, st.q[k]);
				cr_assert_eq(r[i].result, 0);
				cr_assert_not(st.closed[k], "close %llu came out twice",
					      (unsigned long long)k);
				st.closed[k] = true;
				st.nclosed++;
				continue;
			}
			cr_assert_eq(r[i].news, RIG_NEWS_RING, "news %d", r[i].news);
			cr_assert_eq(r[i].qp, st.p.a);
			cr_assert_eq(r[i].side, RIG_RECEIVE);
			while (rig_qp_poll(st.p.a, RIG_RECEIVE, &c) == 1) {
				cr_assert_eq(c.error, 0, "%s", c.why);
				cr_assert_eq(c.bytes, MSG);
				st.received++;
			}
		}
	}
	cr_assert_arr_eq(st.p.rx.mem, st.p.tx.mem, MESSAGES * MSG);
	for (i = 0; i < MESSAGES; i++) {
		c = t_take(st.p.b, RIG_SEND, 10000);
		cr_assert_eq(c.error, 0, "%s", c.why);
	}
	if (uring)
		io_uring_queue_exit(&st.ring);
	else
		close(st.ep);
	pair_close(&st.p);
}

Test(close, news_among_a_stream_through_epoll, .timeout = 120)
{
	stream_run(false);
}

Test(close, news_among_a_stream_through_io_uring, .timeout = 120)
{
	stream_run(true);
}

/*
 * Teardown off the loop (rig(7) D3) means off the loop's thread for all
 * of it: the loop hands out news while the helper is held inside each
 * kernel step of a close. A server loop (the peer's NIC across the two
 * hosts) accepted three connections dialed from a client loop; the
 * server closes the first, and its helper is held inside that close's
 * rdma_destroy_id (or ibv_destroy_cq). Meanwhile the client sends on the
 * second connection, and the server's loop must hand out its receive
 * ring's news (a loop that waits for its lock behind the destroy would
 * not), and the client destroys the third, whose departure (an rdma_cm
 * event, taken under the loop's connection lock) must come out of the
 * server's loop as RIG_NEWS_GONE -ECONNRESET. Only then is the gate
 * opened, and the close's RIG_NEWS_CLOSED follows.
 */
enum { HELD_CONNS = 3, HELD_PORT = 18731 };

struct held_run {
	struct rig_nic *cnic, *snic;
	struct rig_loop *cl, *sl;
	struct rig_listener *l;
	struct rig_qp *c[HELD_CONNS], *s[HELD_CONNS];
	int nc, ns;
	struct t_buf tx, rx;
	struct rig_qp *left;	/* whose RIG_NEWS_GONE may come any time */
	int left_news;
};

/* Counts @r if it is h->left's departure: -ECONNRESET, once. */
static bool left_news(struct held_run *h, const struct rig_ready *r, bool server)
{
	if (!server || !h->left || r->qp != h->left || r->news != RIG_NEWS_GONE)
		return false;
	cr_assert_eq(r->result, -ECONNRESET, "%d", r->result);
	cr_assert_eq(++h->left_news, 1, "RIG_NEWS_GONE twice");
	return true;
}

/* Turns both loops, each piece of news to @done, until @done says so or
 * @ms pass. Returns whether @done said so. */
static bool held_turn(struct held_run *h, int ms,
		      bool (*done)(struct held_run *, const struct rig_ready *, bool server))
{
	struct timespec ms1 = { 0, 1000000 };
	double end = now_ms() + ms;
	struct rig_ready r[8];
	int n, i, side;

	while (now_ms() < end) {
		for (side = 0; side < 2; side++) {
			n = rig_loop_handle(side ? h->sl : h->cl, r, 8);
			cr_assert_geq(n, 0, "rig_loop_handle: %s", rig_errmsg());
			for (i = 0; i < n; i++)
				if (done(h, &r[i], side))
					return true;
		}
		nanosleep(&ms1, NULL);
	}
	return false;
}

static bool all_up(struct held_run *h, const struct rig_ready *r, bool server)
{
	if (r->news == RIG_NEWS_ACCEPTED && server) {
		cr_assert_eq(r->result, 0);
		h->s[h->ns++] = r->qp;
	} else if (r->news == RIG_NEWS_DIALED && !server) {
		cr_assert_eq(r->result, 0, "dial %llu: %d", (unsigned long long)r->cookie,
			     r->result);
		h->c[r->cookie] = r->qp;
		h->nc++;
	}
	return h->nc == HELD_CONNS && h->ns == HELD_CONNS;
}

static bool only_rings(struct held_run *h, const struct rig_ready *r, bool server)
{
	(void)h;
	(void)server;
	cr_assert_eq(r->news, RIG_NEWS_RING, "news %d", r->news);
	return false;
}

static struct rig_qp *held_expect_qp;

static bool got_ring(struct held_run *h, const struct rig_ready *r, bool server)
{
	if (!server || left_news(h, r, server) || (h->left && r->qp == h->left))
		return false;	/* the departed one's rings tell of its failure */
	cr_assert_eq(r->news, RIG_NEWS_RING, "server news %d while the helper is held", r->news);
	cr_assert_eq(r->qp, held_expect_qp);
	return r->side == RIG_RECEIVE;
}

static bool got_gone(struct held_run *h, const struct rig_ready *r, bool server)
{
	if (!server || left_news(h, r, server))
		return false;
	if (r->news == RIG_NEWS_RING)
		return false;
	cr_assert_eq(r->news, RIG_NEWS_GONE, "server news %d while the helper is held", r->news);
	cr_assert_eq(r->qp, held_expect_qp);
	cr_assert_eq(r->result, -ECONNRESET, "%d", r->result);
	return true;
}

static bool got_closed(struct held_run *h, const struct rig_ready *r, bool server)
{
	(void)h;
	if (!server || r->news == RIG_NEWS_RING)
		return false;
	cr_assert_eq(r->news, RIG_NEWS_CLOSED, "server news %d", r->news);
	cr_assert_eq(r->qp, held_expect_qp);
	cr_assert_eq(r->cookie, 77);
	cr_assert_eq(r->result, 0);
	return true;
}

/* Three connections up between a client loop and a server loop, and
 * which accepted queue pair is which dial's (a message from each
 * client's in turn tells): h->s[k] is h->c[k]'s peer. */
static void held_open(struct held_run *h, int port)
{
	const char *sip = t_other_ip();
	struct rig_completion c;
	struct rig_qp *t;
	int i, k, ret;

	cr_assert(sip, "no $RIG_TEST_IP: run in the test VM (tests/rxe-vm)");
	held.port = (uint16_t)port;	/* the server's ids: accepted on it */
	h->cnic = t_nic_open(t_dev());
	h->snic = t_peer_dev() ? t_nic_open(t_peer_dev()) : h->cnic;
	cr_assert_eq(rig_loop_open(h->cnic, &h->cl), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_open(h->snic, &h->sl), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_watch(h->cl), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_watch(h->sl), 0, "%s", rig_errmsg());
	ret = rig_loop_listen(h->sl, sip, port, 5, &h->l);
	cr_assert_eq(ret, 0, "rig_loop_listen(%s): %s", sip, rig_errmsg());
	for (i = 0; i < HELD_CONNS; i++)
		cr_assert_eq(rig_loop_dial(h->cl, sip, port, 30000000, (uint64_t)i),
			     0, "%s", rig_errmsg());
	cr_assert(held_turn(h, 60000, all_up), "%d dialed, %d accepted", h->nc, h->ns);
	t_buf(&h->rx, h->snic, 64, 3);
	t_buf(&h->tx, h->cnic, 64, 4);
	for (i = 0; i < HELD_CONNS; i++)
		cr_assert_eq(rig_qp_receive(h->s[i], h->rx.r, 0, 64), 0, "%s", rig_errmsg());
	for (k = 0; k < HELD_CONNS; k++) {
		cr_assert_eq(rig_qp_send(h->c[k], h->tx.r, 0, 64), 0, "%s", rig_errmsg());
		c = t_take(h->c[k], RIG_SEND, 10000);
		cr_assert_eq(c.error, 0, "%s", c.why);
		for (i = k; i < HELD_CONNS; i++)
			if (rig_qp_poll(h->s[i], RIG_RECEIVE, &c) == 1)
				break;
		cr_assert_lt(i, HELD_CONNS, "no accepted queue pair took dial %d's message", k);
		cr_assert_eq(c.error, 0, "%s", c.why);
		t = h->s[k];
		h->s[k] = h->s[i];
		h->s[i] = t;
		cr_assert_eq(rig_qp_receive(h->s[k], h->rx.r, 0, 64), 0, "%s", rig_errmsg());
	}
	held_turn(h, 300, only_rings);	/* the news of those */
}

/* Arms the gate at @step for a thread other than this one, and does @go;
 * returns once such a thread entered it, within 20 s, with its watchdog
 * running. */
static void held_arm(enum held_step step, void (*go)(struct held_run *), struct held_run *h)
{
	struct timespec ms1 = { 0, 1000000 };
	struct rig_ready r[8];
	int n, i, side;
	double end;

	held.test = pthread_self();
	held.forced = false;
	sem_init(&held.in, 0, 0);
	sem_init(&held.open, 0, 0);
	sem_init(&held.calm, 0, 0);
	__atomic_store_n(&held.what, step, __ATOMIC_RELEASE);
	go(h);
	/* The loops turn meanwhile: a step may reach the helper from one. */
	end = now_ms() + 20000;
	while (sem_trywait(&held.in)) {
		cr_assert_lt(now_ms(), end, "no thread but the test's reached %s: "
			     "the helper never did", held_names[step]);
		for (side = 0; side < 2; side++) {
			n = rig_loop_handle(side ? h->sl : h->cl, r, 8);
			cr_assert_geq(n, 0, "rig_loop_handle: %s", rig_errmsg());
			for (i = 0; i < n; i++)
				cr_assert(r[i].news == RIG_NEWS_RING || left_news(h, &r[i], side) ||
					  (!side && r[i].qp == h->c[0]),	/* closed by the server */
					  "news %d before the helper was held", r[i].news);
		}
		nanosleep(&ms1, NULL);
	}
	cr_assert_eq(pthread_create(&held.watchdog, NULL, held_watchdog, NULL), 0);
}

/* While held in @step: a message on the second connection comes out of
 * the server's loop as news, and so does the third's departure. */
static void held_loop_turns(struct held_run *h, enum held_step step)
{
	struct rig_completion c;

	held_expect_qp = h->s[1];
	cr_assert_eq(rig_qp_send(h->c[1], h->tx.r, 0, 64), 0, "%s", rig_errmsg());
	cr_assert(held_turn(h, 30000, got_ring), "no ring news of the second connection");
	cr_assert_not(__atomic_load_n(&held.forced, __ATOMIC_ACQUIRE),
		      "the server's loop handed out its ring news only once the watchdog "
		      "let the helper's %s go: it waited for it", held_names[step]);
	cr_assert_eq(rig_qp_poll(h->s[1], RIG_RECEIVE, &c), 1);
	cr_assert_eq(c.error, 0, "%s", c.why);
	held_expect_qp = h->s[2];
	cr_assert_eq(rig_qp_destroy(h->c[2]), 0, "%s", rig_errmsg());
	cr_assert(held_turn(h, 30000, got_gone), "no RIG_NEWS_GONE of the third connection");
	cr_assert_not(__atomic_load_n(&held.forced, __ATOMIC_ACQUIRE),
		      "the server's loop handed out a departure only once the watchdog "
		      "let the helper's %s go: it waited for it", held_names[step]);
}

static void held_release(void)
{
	sem_post(&held.calm);
	pthread_join(held.watchdog, NULL);
	if (!held.forced)
		sem_post(&held.open);
}

static void held_shut(struct held_run *h)
{
	cr_assert_eq(rig_listener_close(h->l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(h->sl), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(h->cl), 0, "%s", rig_errmsg());
	if (h->snic != h->cnic)
		cr_assert_eq(rig_nic_close(h->snic), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(h->cnic), 0, "%s", rig_errmsg());
}

static void close_first(struct held_run *h)
{
	held_expect_qp = h->s[0];
	cr_assert_eq(rig_qp_close(h->s[0], 77), 0, "%s", rig_errmsg());
}

static void held_close_run(enum held_step step)
{
	struct held_run h = { 0 };

	held_open(&h, HELD_PORT + step);
	/* The server closes the first; its helper enters the step. */
	held_arm(step, close_first, &h);
	held_loop_turns(&h, step);
	/* Open: the close ends, as news. */
	held_release();
	held_expect_qp = h.s[0];
	cr_assert(held_turn(&h, 30000, got_closed), "no RIG_NEWS_CLOSED");

	cr_assert_eq(rig_qp_destroy(h.s[2]), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(h.s[1]), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(h.c[1]), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(h.c[0]), 0, "%s", rig_errmsg());
	held_shut(&h);
}

Test(close, loop_turns_while_the_helper_is_held_in_rdma_destroy_id, .timeout = 180)
{
	held_close_run(HOLD_DESTROY_ID);
}

Test(close, loop_turns_while_the_helper_is_held_in_ibv_destroy_cq, .timeout = 180)
{
	held_close_run(HOLD_DESTROY_CQ);
}

/*
 * A departure takes no kernel call on the loop's thread but the one F2
 * needs (its queue pair to the error state): the answer to the peer's
 * disconnect runs on the helper. The first client destroys its queue
 * pair; the server's loop hands out RIG_NEWS_GONE -ECONNRESET, and its
 * helper is held inside the answer's rdma_disconnect. Meanwhile the
 * server's loop hands out the second connection's ring news and the
 * third's departure, as above. A loop that answered in line would never
 * bring the gate a thread but the test's (the loop turns on it), and the
 * test fails at the arming.
 *
 * Then the server destroys the departed queue pair while its answer is
 * still owed: rig_qp_destroy returns at once, and the id, which the
 * held answer is using, is destroyed only after it, by the helper.
 */
static void leave_first(struct held_run *h)
{
	h->left = h->s[0];
	cr_assert_eq(rig_qp_destroy(h->c[0]), 0, "%s", rig_errmsg());
}

Test(close, departure_hangs_up_on_the_helper_not_the_loop, .timeout = 180)
{
	struct timespec ms1 = { 0, 1000000 };
	struct held_run h = { 0 };
	struct rig_completion c;
	double end;

	held_open(&h, HELD_PORT + HOLD_DISCONNECT);
	held_arm(HOLD_DISCONNECT, leave_first, &h);
	held_loop_turns(&h, HOLD_DISCONNECT);
	held_expect_qp = NULL;
	cr_assert_eq(h.left_news, 1, "the first connection's departure was not news "
		     "before the third's");
	/* Its receive, due, completed with the failure's error (F3). */
	cr_assert_eq(rig_qp_poll(h.s[0], RIG_RECEIVE, &c), 1);
	cr_assert_eq(c.error, -ECONNRESET, "%s", c.why);
	/* Destroyed while its answer is owed: the id stays for the answer. */
	cr_assert_eq(rig_qp_destroy(h.s[0]), 0, "%s", rig_errmsg());
	cr_assert_not(__atomic_load_n(&held.forced, __ATOMIC_ACQUIRE),
		      "rig_qp_destroy returned only once the watchdog let the helper's "
		      "rdma_disconnect go: it waited for it");
	cr_assert_not(__atomic_load_n(&held.id_destroyed, __ATOMIC_ACQUIRE),
		      "the id was destroyed while its rdma_disconnect was under way");
	held_release();
	end = now_ms() + 20000;
	while (!__atomic_load_n(&held.id_destroyed, __ATOMIC_ACQUIRE)) {
		cr_assert_lt(now_ms(), end, "the answered id was never destroyed");
		nanosleep(&ms1, NULL);
	}
	cr_assert_not(pthread_equal(held.id_destroyer, held.test),
		      "the test's thread destroyed the id: the answer did not");

	cr_assert_eq(rig_qp_destroy(h.s[2]), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(h.s[1]), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(h.c[1]), 0, "%s", rig_errmsg());
	held_shut(&h);
}
