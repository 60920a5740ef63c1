/* SPDX-License-Identifier: MIT */
/*
 * Waiting for completions (rig(7) T2) on the queue pair's loop's channel.
 *
 * The sequence that loses no wakeup: poll, arm the CQ, poll again, then
 * sleep on the channel fd. The channel is shared by every queue pair of
 * the loop, and queue pairs may wait in different threads (C3), so a
 * thread may read the event that another thread's ring was armed for.
 * Each sleeping thread is therefore a consumer of the demultiplexer
 * (events.c) for its ring: whoever reads an event for the ring wakes the
 * sleeper through its eventfd.
 *
 * Each thread sleeps in an io_uring of its own, on the channel fd, its
 * eventfd, the NIC's async fd (async events fail queue pairs, F1, F6) and
 * the loop's rdma_cm channel (a peer that leaves fails its queue pair).
 */
#include <liburing.h>
#include <rdma/rdma_cma.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"

/* How long a wait polls before it sleeps: long enough to catch a reply
 * that is on its way, short enough not to burn a core. */
#define RIG_WAIT_SPIN_NS 50000

/* Each thread that sleeps gets its own io_uring and eventfd, on first
 * use, and gives them back when it exits. */
struct waiter {
	struct rig__consumer hooks;	/* for the ring it sleeps on */
	struct io_uring ring;
	int efd;
	bool ready;
	bool broken;	/* an io_uring call failed: start afresh */
};

static __thread struct waiter waiter;
static pthread_key_t waiter_key;
static pthread_once_t waiter_once = PTHREAD_ONCE_INIT;
static int waiter_key_error;

static void waiter_exit(void *unused)
{
	(void)unused;
	if (!waiter.ready)
		return;
	io_uring_queue_exit(&waiter.ring);
	close(waiter.efd);
	waiter.ready = false;
	waiter.broken = false;
}

static void waiter_key_init(void)
{
	waiter_key_error = pthread_key_create(&waiter_key, waiter_exit);
}

/* Another thread read an event for the ring this waiter sleeps on. */
static void on_ring(struct rig__consumer *self, struct rig__qp *qp, int side)
{
	struct waiter *w = container_of(self, struct waiter, hooks);

	(void)qp;
	(void)side;
	if (w != &waiter)
		eventfd_write(w->efd, 1);
}

static int waiter_init(void)
{
	int ret;

	if (waiter.ready)
		return 0;
	pthread_once(&waiter_once, waiter_key_init);
	if (waiter_key_error)
		return rig__fail(waiter_key_error, "rig_qp_wait: pthread_key_create: %s",
				 strerror(waiter_key_error));
	ret = io_uring_queue_init(8, &waiter.ring, 0);
	if (ret)
		return rig__fail(-ret, "rig_qp_wait: io_uring_queue_init: %s",
				 strerror(-ret));
	waiter.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (waiter.efd < 0) {
		ret = errno;
		io_uring_queue_exit(&waiter.ring);
		return rig__fail(ret, "rig_qp_wait: eventfd: %s", strerror(ret));
	}
	/* Any non-NULL value makes the destructor run at thread exit. */
	ret = pthread_setspecific(waiter_key, &waiter);
	if (ret) {
		close(waiter.efd);
		io_uring_queue_exit(&waiter.ring);
		return rig__fail(ret, "rig_qp_wait: pthread_setspecific: %s",
				 strerror(ret));
	}
	waiter.hooks.ring = on_ring;
	waiter.ready = true;
	return 0;
}

/* After a failed io_uring call the ring may hold polls nobody reaps:
 * the thread's next sleep starts with a new one. */
static int waiter_fail(int err, const char *step)
{
	waiter.broken = true;
	return rig__fail(err, "rig_qp_wait: io_uring %s: %s", step, strerror(err));
}

/* What woke a sleep. */
enum { WOKE_CHANNEL = 1 << 0, WOKE_EFD = 1 << 1, WOKE_ASYNC = 1 << 2,
       WOKE_CM = 1 << 3 };

/* Sleeps until the channel, this thread's eventfd, the async fd or the
 * rdma_cm channel is readable, or @ns pass; returns which woke it
 * (WOKE_*), or -errno. The polls are one-shot; those that did not fire
 * are removed before return, so the ring is empty for the next sleep. */
static int sleep_on(struct rig_loop *loop, int64_t ns)
{
	struct rdma_event_channel *cm = __atomic_load_n(&loop->cm, __ATOMIC_ACQUIRE);
	const int fds[4] = { loop->channel->fd, waiter.efd, loop->nic->ctx->async_fd,
			     cm ? cm->fd : -1 };
	const int nfds = cm ? 4 : 3, all = (1 << nfds) - 1;
	struct __kernel_timespec ts = { ns / 1000000000, ns % 1000000000 };
	struct io_uring *ring = &waiter.ring;
	struct io_uring_cqe *cqe;
	int i, ret, woke = 0, done = 0, removes = 0;

	for (i = 0; i < nfds; i++) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

		if (!sqe)
			return waiter_fail(EBUSY, "get_sqe");
		io_uring_prep_poll_add(sqe, fds[i], POLLIN);
		io_uring_sqe_set_data64(sqe, 1u << i);
	}
	ret = io_uring_submit_and_wait_timeout(ring, &cqe, 1, &ts, NULL);
	if (ret < 0 && ret != -ETIME && ret != -EINTR)
		return waiter_fail(-ret, "wait");
	for (;;) {
		/* Poll CQEs carry their WOKE_ bit; removes carry 0. */
		while (!io_uring_peek_cqe(ring, &cqe)) {
			uint64_t bit = io_uring_cqe_get_data64(cqe);

			if (bit) {
				done |= bit;
				if (cqe->res > 0)
					woke |= bit;
			} else {
				removes--;
			}
			io_uring_cqe_seen(ring, cqe);
		}
		if (done == all && removes <= 0)
			return woke;
		if (!removes) {
			for (i = 0; i < nfds; i++) {
				struct io_uring_sqe *sqe;

				if (done & (1 << i))
					continue;
				sqe = io_uring_get_sqe(ring);
				if (!sqe)
					return waiter_fail(EBUSY, "get_sqe");
				io_uring_prep_poll_remove(sqe, 1u << i);
				io_uring_sqe_set_data64(sqe, 0);
				removes++;
			}
		}
		ret = io_uring_submit_and_wait(ring, 1);
		if (ret < 0 && ret != -EINTR)
			return waiter_fail(-ret, "reap");
	}
}

RIG_EXPORT int rig_qp_wait(struct rig_qp *pub, enum rig_side side, int64_t us,
			   struct rig_completion *c)
{
	struct rig__ring *ring;
	struct rig__qp *qp;
	int64_t deadline, spin_end, left;
	bool slept = false;
	eventfd_t drained;
	int ret, woke;

	if (!pub || !c || (unsigned)side > RIG_RECEIVE || us < 0)
		return rig__fail(EINVAL, "rig_qp_wait: %s",
				 us < 0 ? "negative time" : "bad argument");
	ring = &pub->ring[side];
	if (ring->tail == ring->head)
		return rig__fail(EINVAL, "rig_qp_wait: no entry of the %s ring is due",
				 side == RIG_SEND ? "send" : "receive");
	ret = rig_qp_poll(pub, side, c);
	if (ret)
		return ret;

	qp = rig__qp(pub);
	deadline = us > INT64_MAX / 2000 ? INT64_MAX / 2 : rig__now_ns() + us * 1000;
	spin_end = rig__now_ns() + RIG_WAIT_SPIN_NS;
	if (spin_end > deadline)
		spin_end = deadline;
	while (rig__now_ns() < spin_end)
		if ((ret = rig_qp_poll(pub, side, c)))
			return ret;
	if (rig__now_ns() >= deadline)
		return 0;

	ret = waiter_init();
	if (ret)
		return ret;
	rig__events_set_sleeper(qp, side, &waiter.hooks);
	for (;;) {
		/* Arm, then poll: a completion that came before the arming is
		 * found by the poll, one after it raises an event. */
		ret = ibv_req_notify_cq(ring->cq, 0);
		if (ret) {
			ret = rig__fail_verbs(ret, qp->nic, "ibv_req_notify_cq");
			break;
		}
		ret = rig_qp_poll(pub, side, c);
		left = deadline - rig__now_ns();
		if (ret || left <= 0)
			break;
		if (!slept) {
			slept = true;
			qp->slept[side]++;	/* rig_qp_stats: waits that slept */
		}
		woke = ret = sleep_on(qp->loop, left);
		if (ret < 0)
			break;
		/* An async event or a peer that left fails queue pairs; the
		 * poll then reports it. */
		if ((woke & WOKE_ASYNC) && (ret = rig__events_async(qp->nic)) < 0)
			break;
		if (woke & WOKE_CM)
			rig__events_take_cm(qp->loop);
		if (woke & WOKE_CHANNEL)
			rig__events_take(qp->loop);
		if (woke & WOKE_EFD)
			eventfd_read(waiter.efd, &drained);
		/* Poll before arming again: the completion is most likely
		 * there, and then the CQ stays unarmed. */
		ret = rig_qp_poll(pub, side, c);
		if (ret || deadline - rig__now_ns() <= 0)
			break;
	}
	rig__events_set_sleeper(qp, side, NULL);
	/* Only now that no ring names its eventfd may the thread's waiter
	 * go (the fd number could be reused). */
	if (waiter.broken)
		waiter_exit(NULL);
	return ret;
}
