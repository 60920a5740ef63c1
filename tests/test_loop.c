/* SPDX-License-Identifier: MIT */
/*
 * Queue-pair completions in the application's own io_uring, beside a
 * timer: rig_uring_watch / rig_uring_handle (include/rig/loop.h); in epoll:
 * rig_loop_watch / rig_loop_handle.
 */
#include <criterion/criterion.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "t_device.h"

#define TAG_RIG 0x5249470000000000ull
#define TAG_TIMER 7
#define TAG_CANCEL 8

static struct __kernel_timespec tick = { 0, 20 * 1000000 };

/* A 20 ms timer in the same ring, queued again at each tick. */
static void queue_tick(struct io_uring *ring)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	cr_assert_not_null(sqe);
	io_uring_prep_timeout(sqe, &tick, 0, 0);
	io_uring_sqe_set_data64(sqe, TAG_TIMER);
}

struct counts {
	int send, receive, errors;
};

/* Runs the loop until @want completions were taken or @ms pass. Returns
 * the completions taken; counts them per queue pair in @per (by index). */
static int run_loop(struct io_uring *ring, struct rig_nic *nic,
		    struct rig_qp **qps, int nqps, struct counts *per, int want,
		    int ms, int *ticks)
{
	struct rig_ready ready[64];
	struct rig_completion c;
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts = { 0, 100 * 1000000 };
	double end = t_now_ms() + ms;
	int taken = 0, i, n, k;

	while (taken < want && t_now_ms() < end) {
		if (io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL) < 0)
			continue;
		if (cqe->user_data == TAG_TIMER) {
			(*ticks)++;
			queue_tick(ring);
		} else {
			cr_assert_eq(cqe->user_data, TAG_RIG);
			for (const struct io_uring_cqe *h = cqe;
			     (n = rig_uring_handle(ring, rig_nic_loop(nic), h, ready, 64)) > 0; h = NULL) {
				for (i = 0; i < n; i++) {
					/* The CQ context names the queue pair: find
					 * its index for the count. */
					for (k = 0; k < nqps && qps[k] != ready[i].qp; k++)
						;
					cr_assert_lt(k, nqps, "an unknown queue pair is ready");
					while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1) {
						taken++;
						per[k].errors += c.error != 0;
						if (ready[i].side == RIG_SEND)
							per[k].send++;
						else
							per[k].receive++;
					}
				}
				if (n < 64)
					break;
			}
			cr_assert_geq(n, 0, "rig_uring_handle: %s", rig_errmsg());
		}
		io_uring_cqe_seen(ring, cqe);
	}
	return taken;
}

/* Each of 512 queue pairs in one loop gets its completions (1024 in the
 * long form: making and destroying them is most of the test's time); a
 * timer in the same io_uring keeps ticking. */
Test(loop, each_of_512_queue_pairs_gets_its_completions, .timeout = 300)
{
	const int NQP = t_long() ? 1024 : 512;
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp **qps = calloc(NQP, sizeof(*qps));
	struct counts *per = calloc(NQP, sizeof(*per));
	struct io_uring ring;
	struct t_buf buf;
	int i, ticks = 0, taken;

	cr_assert_eq(io_uring_queue_init(256, &ring, 0), 0);
	t_buf(&buf, nic, NQP * 64, 1);
	for (i = 0; i < NQP; i++)
		qps[i] = t_qp(nic);
	for (i = 0; i < NQP; i += 2)
		t_connect(qps[i], qps[i + 1]);

	cr_assert_eq(rig_uring_watch(&ring, rig_nic_loop(nic), TAG_RIG), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_uring_watch(&ring, rig_nic_loop(nic), TAG_RIG), -EALREADY);
	queue_tick(&ring);
	io_uring_submit(&ring);

	for (i = 0; i < NQP; i++)
		cr_assert_eq(rig_qp_receive(qps[i], buf.r, i * 64, 64), 0);
	for (i = 0; i < NQP; i++)
		cr_assert_eq(rig_qp_send(qps[i], buf.r, (i ^ 1) * 64, 32), 0);

	taken = run_loop(&ring, nic, qps, NQP, per, 2 * NQP, 120000, &ticks);
	cr_assert_eq(taken, 2 * NQP);
	cr_log_info("%d ticks of the timer meanwhile", ticks);
	for (i = 0; i < NQP; i++) {
		cr_assert_eq(per[i].send, 1, "queue pair %d: %d sends", i, per[i].send);
		cr_assert_eq(per[i].receive, 1, "queue pair %d: %d receives", i, per[i].receive);
		cr_assert_eq(per[i].errors, 0, "queue pair %d failed", i);
	}
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
	free(per);
	free(qps);
}

/* Ready rings are handed out in batches of the caller's size; none is
 * lost or listed twice between calls. */
Test(loop, small_batches_lose_nothing)
{
	enum { NQP = 40 };
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *qps[NQP];
	struct counts per[NQP] = { 0 };
	struct io_uring ring;
	struct t_buf buf;
	int i, ticks = 0;

	cr_assert_eq(io_uring_queue_init(8, &ring, 0), 0);
	t_buf(&buf, nic, NQP * 64, 1);
	for (i = 0; i < NQP; i++)
		qps[i] = t_qp(nic);
	for (i = 0; i < NQP; i += 2)
		t_connect(qps[i], qps[i + 1]);
	cr_assert_eq(rig_uring_watch(&ring, rig_nic_loop(nic), TAG_RIG), 0);
	io_uring_submit(&ring);
	for (i = 0; i < NQP; i++)
		cr_assert_eq(rig_qp_receive(qps[i], buf.r, i * 64, 64), 0);
	for (i = 0; i < NQP; i++)
		cr_assert_eq(rig_qp_send(qps[i], buf.r, (i ^ 1) * 64, 8), 0);
	cr_assert_eq(run_loop(&ring, nic, qps, NQP, per, 2 * NQP, 30000, &ticks), 2 * NQP);
	for (i = 0; i < NQP; i++)
		cr_assert(per[i].send == 1 && per[i].receive == 1, "queue pair %d", i);
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* The same without io_uring: rig_loop_watch(), rig_loop_fd() in an epoll
 * loop, and rig_loop_handle() for its readiness. */
Test(loop, nic_fd_in_epoll)
{
	enum { NQP = 8 };
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *qps[NQP];
	struct rig_ready ready[4];
	struct rig_completion c;
	struct epoll_event ev = { .events = EPOLLIN }, out;
	struct io_uring ring;
	struct t_buf buf;
	int i, k, n, ep, taken = 0;
	double end;

	t_buf(&buf, nic, NQP * 64, 1);
	for (i = 0; i < NQP; i++)
		qps[i] = t_qp(nic);
	for (i = 0; i < NQP; i += 2)
		t_connect(qps[i], qps[i + 1]);
	cr_assert_eq(rig_loop_watch(NULL), -EINVAL);
	cr_assert_eq(rig_loop_watch(rig_nic_loop(nic)), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_watch(rig_nic_loop(nic)), -EALREADY);
	/* Watched is watched, whichever way: no poll is queued. */
	cr_assert_eq(io_uring_queue_init(4, &ring, 0), 0);
	cr_assert_eq(rig_uring_watch(&ring, rig_nic_loop(nic), TAG_RIG), -EALREADY);
	cr_assert_eq(io_uring_sq_ready(&ring), 0);
	io_uring_queue_exit(&ring);
	ep = epoll_create1(0);
	cr_assert_eq(epoll_ctl(ep, EPOLL_CTL_ADD, rig_loop_fd(rig_nic_loop(nic)), &ev), 0);
	cr_assert_eq(rig_loop_handle(rig_nic_loop(nic), ready, 0), -EINVAL);
	for (i = 0; i < NQP; i++)
		cr_assert_eq(rig_qp_receive(qps[i], buf.r, i * 64, 64), 0);
	for (i = 0; i < NQP; i++)
		cr_assert_eq(rig_qp_send(qps[i], buf.r, (i ^ 1) * 64, 16), 0);
	for (end = t_now_ms() + 10000; taken < 2 * NQP;) {
		cr_assert_lt(t_now_ms(), end, "%d of %d completions", taken, 2 * NQP);
		if (epoll_wait(ep, &out, 1, 100) != 1)
			continue;
		/* Four at a time: the rest wait for the next call. */
		while ((n = rig_loop_handle(rig_nic_loop(nic), ready, 4)) > 0)
			for (k = 0; k < n; k++)
				while (rig_qp_poll(ready[k].qp, ready[k].side, &c) == 1) {
					cr_assert_eq(c.error, 0, "%s", c.why);
					taken++;
				}
		cr_assert_geq(n, 0, "%s", rig_errmsg());
	}
	cr_assert_eq(taken, 2 * NQP);
	close(ep);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* Polls what @n pieces of news list dry; returns the completions. */
static int drain_news(const struct rig_ready *ready, int n)
{
	struct rig_completion c;
	int k, taken = 0;

	for (k = 0; k < n; k++) {
		cr_assert_eq(ready[k].news, RIG_NEWS_RING);
		while (rig_qp_poll(ready[k].qp, ready[k].side, &c) == 1) {
			cr_assert_eq(c.error, 0, "%s", c.why);
			taken++;
		}
	}
	return taken;
}

/* One message from @a to @b; then the io_uring loop runs until both its
 * completions are taken, at most 10 s. */
static void one_message_uring(struct io_uring *ring, struct rig_loop *loop,
			      struct rig_qp *a, struct rig_qp *b,
			      const struct t_buf *buf)
{
	struct __kernel_timespec ts = { 0, 100 * 1000000 };
	struct rig_ready ready[4];
	struct io_uring_cqe *cqe;
	double end = t_now_ms() + 10000;
	int n, taken = 0;

	cr_assert_eq(rig_qp_receive(b, buf->r, 0, 64), 0);
	cr_assert_eq(rig_qp_send(a, buf->r, 64, 16), 0);
	while (taken < 2) {
		cr_assert_lt(t_now_ms(), end, "%d of 2 completions", taken);
		if (io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL) < 0)
			continue;
		cr_assert_eq(cqe->user_data, TAG_RIG);
		n = rig_uring_handle(ring, loop, cqe, ready, 4);
		cr_assert_geq(n, 0, "rig_uring_handle: %d %s", n, rig_errmsg());
		taken += drain_news(ready, n);
		io_uring_cqe_seen(ring, cqe);
	}
}

/*
 * Cancels the loop's poll (io_uring_prep_poll_remove, or
 * io_uring_prep_cancel64 if @by_cancel) and hands its last CQE to
 * rig_uring_handle: -ECANCELED, and nothing queued again.
 */
static void cancel_watch(struct io_uring *ring, struct rig_loop *loop,
			 bool by_cancel)
{
	struct __kernel_timespec ts = { 1, 0 };
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	struct io_uring_cqe *cqe;
	struct rig_ready ready[4];
	bool cancelled = false, ended = false;
	int ret;

	cr_assert_not_null(sqe);
	if (by_cancel)
		io_uring_prep_cancel64(sqe, TAG_RIG, 0);
	else
		io_uring_prep_poll_remove(sqe, TAG_RIG);
	io_uring_sqe_set_data64(sqe, TAG_CANCEL);
	cr_assert_eq(io_uring_submit(ring), 1);
	while (!cancelled || !ended) {
		ret = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
		cr_assert_eq(ret, 0, "cancelling the poll: %s", strerror(-ret));
		if (cqe->user_data == TAG_CANCEL) {
			cr_assert_eq(cqe->res, 0, "the cancel: %s", strerror(-cqe->res));
			cancelled = true;
		} else if (!(cqe->flags & IORING_CQE_F_MORE)) {
			/* The poll's last CQE. */
			cr_assert_eq(cqe->user_data, TAG_RIG);
			cr_assert_eq(cqe->res, -ECANCELED);
			cr_assert_eq(io_uring_sq_ready(ring), 0);
			ret = rig_uring_handle(ring, loop, cqe, ready, 4);
			cr_assert_eq(ret, -ECANCELED, "rig_uring_handle: %d", ret);
			cr_assert(strstr(rig_errmsg(), "cancelled"), "%s", rig_errmsg());
			cr_assert_eq(io_uring_sq_ready(ring), 0,
				     "rig_uring_handle queued the poll again");
			ended = true;
		}
		/* else a wakeup of the poll before it was cancelled */
		io_uring_cqe_seen(ring, cqe);
	}
	/* Nothing was submitted since, so nothing more comes. */
	ts = (struct __kernel_timespec){ 0, 100 * 1000000 };
	cr_assert_eq(io_uring_wait_cqe_timeout(ring, &cqe, &ts), -ETIME);
}

/*
 * An application stops watching a loop by cancelling its poll: the CQE
 * that ends it is an error, rig_uring_handle returns it and queues
 * nothing, and the loop may be watched again, in io_uring or epoll, and
 * hands out a ring's news after a send.
 */
Test(loop, cancelled_poll_ends_the_watch)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_loop *loop = rig_nic_loop(nic);
	struct rig_qp *a = t_qp(nic), *b = t_qp(nic);
	struct pollfd pfd = { .fd = rig_loop_fd(loop), .events = POLLIN };
	struct rig_ready ready[4];
	struct io_uring ring;
	struct t_buf buf;
	int n, taken = 0;
	double end;

	t_buf(&buf, nic, 128, 1);
	t_connect(a, b);
	cr_assert_eq(io_uring_queue_init(8, &ring, 0), 0);
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG_RIG), 0, "%s", rig_errmsg());
	cr_assert_eq(io_uring_submit(&ring), 1);
	one_message_uring(&ring, loop, a, b, &buf);

	cancel_watch(&ring, loop, false);
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG_RIG), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG_RIG), -EALREADY);
	cr_assert_eq(io_uring_submit(&ring), 1);
	one_message_uring(&ring, loop, a, b, &buf);

	/* And once more, the other way of cancelling; then epoll's way. */
	cancel_watch(&ring, loop, true);
	cr_assert_eq(rig_loop_watch(loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_watch(loop), -EALREADY);
	cr_assert_eq(rig_qp_receive(b, buf.r, 0, 64), 0);
	cr_assert_eq(rig_qp_send(a, buf.r, 64, 16), 0);
	for (end = t_now_ms() + 10000; taken < 2;) {
		cr_assert_lt(t_now_ms(), end, "%d of 2 completions", taken);
		if (poll(&pfd, 1, 100) != 1)
			continue;
		n = rig_loop_handle(loop, ready, 4);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		taken += drain_news(ready, n);
	}
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/*
 * A watch refused for want of an SQE leaves the loop unwatched; a CQE of
 * the poll with any error ends the watch, queueing nothing, and says so.
 */
Test(loop, refused_and_failed_watches_leave_the_loop_unwatched)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_loop *loop = rig_nic_loop(nic);
	struct io_uring_cqe failed = { .user_data = TAG_RIG, .res = -EBADF };
	struct io_uring_sqe *sqe;
	struct rig_ready ready[4];
	struct io_uring ring;

	cr_assert_eq(io_uring_queue_init(1, &ring, 0), 0);
	sqe = io_uring_get_sqe(&ring);
	cr_assert_not_null(sqe);
	io_uring_prep_nop(sqe);
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG_RIG), -EBUSY);
	cr_assert_eq(io_uring_sq_ready(&ring), 1, "only the nop is queued");
	cr_assert_eq(io_uring_submit(&ring), 1);

	cr_assert_eq(rig_uring_watch(&ring, loop, TAG_RIG), 0,
		     "a refused watch left the loop watched: %s", rig_errmsg());
	cr_assert_eq(io_uring_sq_ready(&ring), 1, "the poll is queued");
	cr_assert_eq(rig_uring_handle(&ring, loop, &failed, ready, 4), -EBADF);
	cr_assert(strstr(rig_errmsg(), "ended"), "%s", rig_errmsg());
	cr_assert_eq(io_uring_sq_ready(&ring), 1, "rig_uring_handle queued the poll again");
	cr_assert_eq(rig_loop_watch(loop), 0, "a failed poll left the loop watched: %s",
		     rig_errmsg());
	cr_assert_eq(rig_loop_watch(loop), -EALREADY);
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* ---- a queue pair made while its loop starts being watched ----------- */

static struct {
	struct io_uring ring;
	struct rig_loop *loop;
	void (*add)(struct rig__consumer *self, struct rig__qp *qp);
	sem_t go;
	int ret;		/* rig_uring_watch's */
	bool nic_lock_taken;	/* before the make went on */
} watch;

static void *watch_main(void *unused)
{
	(void)unused;
	sem_wait(&watch.go);
	watch.ret = rig_uring_watch(&watch.ring, watch.loop, TAG_RIG);
	return NULL;
}

/*
 * The loop's add hook, wrapped: once the loop has been told of the new
 * queue pair (its lock held), the watch starts on another thread, and the
 * make goes on only once the NIC's lock is taken. rig_uring_watch takes
 * it first, then waits for the loop's lock: taken by the watch, it walks
 * the NIC's queue pairs before the make can go on; taken by this thread
 * (the make's own), it waits for the make to end.
 */
static void add_then_watch(struct rig__consumer *self, struct rig__qp *qp)
{
	pthread_mutex_t *nic_lock = &watch.loop->nic->lock;
	double end = t_now_ms() + 10000;

	watch.add(self, qp);
	self->add = watch.add;
	sem_post(&watch.go);
	for (; t_now_ms() < end; sched_yield()) {
		if (pthread_mutex_trylock(nic_lock)) {
			watch.nic_lock_taken = true;
			return;
		}
		pthread_mutex_unlock(nic_lock);
	}
}

/*
 * rig_uring_watch arms the rings of every queue pair the loop has and will
 * have, including one another thread (such as the loop's helper, for a
 * connection) is making meanwhile: here the watch starts the moment the
 * loop has been told of the new queue pair (add_then_watch). Its rings
 * must have news once their completions come.
 */
Test(loop, a_queue_pair_made_as_the_watch_starts_is_armed, .timeout = 120)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_ready ready[4];
	struct rig_completion c;
	struct rig_qp *q, *peer;
	struct pollfd pfd;
	struct t_buf buf;
	bool news[2] = { false, false };
	pthread_t t;
	double end;
	int i, n;

	cr_assert_eq(rig_loop_open(nic, &watch.loop), 0, "%s", rig_errmsg());
	cr_assert_eq(io_uring_queue_init(4, &watch.ring, 0), 0);
	cr_assert_eq(sem_init(&watch.go, 0, 0), 0);
	cr_assert_eq(pthread_create(&t, NULL, watch_main, NULL), 0);
	watch.add = watch.loop->watcher->add;
	watch.loop->watcher->add = add_then_watch;
	cr_assert_eq(rig_qp_make_in(watch.loop, &q), 0, "%s", rig_errmsg());
	pthread_join(t, NULL);
	cr_assert_eq(watch.ret, 0, "rig_uring_watch: %s", rig_errmsg());
	cr_assert(watch.nic_lock_taken, "in 10 s nobody took the NIC's lock");

	/* Its peer is in the NIC's own loop, which nobody watches. */
	peer = t_qp(nic);
	t_connect(q, peer);
	t_buf(&buf, nic, 256, 1);
	cr_assert_eq(rig_qp_receive(q, buf.r, 0, 64), 0);
	cr_assert_eq(rig_qp_receive(peer, buf.r, 64, 64), 0);
	cr_assert_eq(rig_qp_send(q, buf.r, 128, 16), 0);
	cr_assert_eq(rig_qp_send(peer, buf.r, 192, 16), 0);
	pfd = (struct pollfd){ rig_loop_fd(watch.loop), POLLIN, 0 };
	for (end = t_now_ms() + 10000; !news[RIG_SEND] || !news[RIG_RECEIVE];) {
		cr_assert_lt(t_now_ms(), end, "no news of the %s ring in 10 s: never armed",
			     news[RIG_SEND] ? "receive" : "send");
		if (poll(&pfd, 1, 100) != 1)
			continue;
		n = rig_loop_handle(watch.loop, ready, 4);
		cr_assert_geq(n, 0, "%s", rig_errmsg());
		for (i = 0; i < n; i++) {
			cr_assert_eq(ready[i].news, RIG_NEWS_RING);
			cr_assert_eq(ready[i].qp, q);
			news[ready[i].side] = true;
			cr_assert_eq(rig_qp_poll(q, ready[i].side, &c), 1);
			cr_assert_eq(c.error, 0, "%s", c.why);
		}
	}
	io_uring_queue_exit(&watch.ring);
	sem_destroy(&watch.go);
	cr_assert_eq(rig_loop_close(watch.loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}
