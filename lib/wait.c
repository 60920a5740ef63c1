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
 * Its polls are multishot and stay armed from one wait to the next, so a
 * sleep is one io_uring_enter with nothing to submit; a cycle costs the
 * arm, that enter and one read of the channel (rig(7) WAITING).
 *
 * Before it sleeps a wait spins, polling: per ring, for as long as the
 * ring's completions have lately come sooner than a sleep costs.
 */
#include <liburing.h>
#include <rdma/rdma_cma.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"
#include "probes.h"

/*
 * The adaptive spin (RIG_SPIN_ADAPTIVE). A sleep and its wakeup cost about
 * 50 us of CPU in the emulated guest (rig(7) WAITING), so a spin longer
 * than that costs more than the sleep it saves: that is the cap. Each ring
 * keeps the mean time of the waits its spin caught (an EWMA, 1/8 per wait,
 * as glibc's adaptive mutex); a wait that slept says nothing of how soon
 * the completion came, so it teaches nothing. While the mean stays under
 * the cap the ring spins up to the cap; after RIG_SPIN_MISSES spins in a
 * row that caught nothing it sleeps at once, but for probes: its waits
 * that start in the first RIG_SPIN_PROBE_NS of each RIG_SPIN_PERIOD_NS of
 * the monotonic clock spin. The windows are the same for every ring and
 * process: the two ends of a ping-pong that both sleep, each because the
 * other does, would never see a single probe of one end pay, but probing
 * together they find that spinning pays again.
 */
#define RIG_SPIN_CAP_NS 50000
#define RIG_SPIN_MISSES 8
#define RIG_SPIN_PERIOD_NS (1 << 22)	/* 4.2 ms */
#define RIG_SPIN_PROBE_NS (1 << 19)	/* 0.5 ms of it */

/*
 * The waiter's io_uring: COOP_TASKRUN sends no IPI to a thread spinning
 * in user space when a poll fires (its CQE is written at the thread's
 * next kernel entry, here the enter that sleeps); TASKRUN_FLAG tells
 * liburing when such work waits. Kernels before 5.19 refuse them: flags
 * 0 there (the kernel then interrupts the thread to write the CQE).
 */
#ifndef RIG_WAIT_RING_FLAGS
#define RIG_WAIT_RING_FLAGS (IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG)
#endif

/* What a poll watches, and its CQE's user_data: (generation << 8) | bit.
 * A removal's CQE carries 0. */
enum { WOKE_CHANNEL = 1 << 0, WOKE_EFD = 1 << 1, WOKE_ASYNC = 1 << 2,
       WOKE_CM = 1 << 3 };

/* Each thread that sleeps gets its own io_uring and eventfd, on first
 * use, and gives them back when it exits. */
struct waiter {
	struct rig__consumer hooks;	/* for the ring it sleeps on */
	struct io_uring ring;
	int efd;
	bool ready;
	bool broken;	/* an io_uring call failed: start afresh */
	/* The polls kept armed: which (WOKE_ bits), their generation, and
	 * the loop they watch (its id: a loop's address may be reused). */
	unsigned polled;
	uint64_t gen;
	const struct rig_loop *loop;
	uint64_t loop_id, closed;
	/* A channel wakeup whose event is not read yet: the next sleep on
	 * that loop reads up to this ring's event first. */
	const struct rig__qp *owed_qp;
	int owed_side;
	bool owed;
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
	/* Removes the polls with the ring. */
	io_uring_queue_exit(&waiter.ring);
	close(waiter.efd);
	waiter.ready = false;
	waiter.broken = false;
	waiter.polled = 0;
	waiter.loop = NULL;
	waiter.owed = false;
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
	/* 8 entries: the removal of 4 polls and 4 new ones, at most. */
	ret = io_uring_queue_init(8, &waiter.ring, RIG_WAIT_RING_FLAGS);
	if (ret == -EINVAL && RIG_WAIT_RING_FLAGS)
		ret = io_uring_queue_init(8, &waiter.ring, 0);
	if (ret)
		return rig__fail(-ret, "rig_qp_wait: io_uring_queue_init: %s",
				 strerror(-ret));
	/* Saves each enter the fd's lookup (5.18); without it, the same. */
	io_uring_register_ring_fd(&waiter.ring);
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
	waiter.polled = 0;
	waiter.loop = NULL;
	waiter.owed = false;
	waiter.ready = true;
	return 0;
}

/* After a failed io_uring call the ring may hold polls in any state: the
 * thread's next sleep starts with a new one. */
static int waiter_fail(int err, const char *step)
{
	waiter.broken = true;
	return rig__fail(err, "rig_qp_wait: io_uring %s: %s", step, strerror(err));
}

/* What each poll watches, by WOKE_ bit, for rig_errmsg(). */
static const char *const poll_steps[] = {
	"poll of the completion channel", "poll of the eventfd",
	"poll of the async fd", "poll of the rdma_cm channel"
};

/*
 * Takes the CQEs there are, without a system call; returns the WOKE_ bits
 * of the polls that fired, or -errno. A poll whose CQE lacks
 * IORING_CQE_F_MORE has ended. After a full CQ the next sleep adds it
 * again; but one that failed (a kernel that refuses multishot polls says
 * -EINVAL) would fail again at once, each sleep a busy loop until the
 * bound: the wait fails instead, and the thread's next one starts afresh.
 * (A poll rig removed ends with -ECANCELED too, in an older generation.)
 */
static int reap(void)
{
	struct io_uring_cqe *cqes[8];
	unsigned woke = 0, failed = 0, i, n;
	int err = 0;

	while ((n = io_uring_peek_batch_cqe(&waiter.ring, cqes, 8))) {
		for (i = 0; i < n; i++) {
			uint64_t data = io_uring_cqe_get_data64(cqes[i]);
			unsigned bit = data & 0xff;

			if (!data || data >> 8 != waiter.gen)
				continue;	/* a removal, or a poll removed */
			if (cqes[i]->res > 0)
				woke |= bit;
			if (cqes[i]->res < 0 && !err) {
				err = -cqes[i]->res;
				failed = bit;
			}
			if (!(cqes[i]->flags & IORING_CQE_F_MORE))
				waiter.polled &= ~bit;
		}
		io_uring_cq_advance(&waiter.ring, n);
	}
	if (err)
		return waiter_fail(err, poll_steps[__builtin_ctz(failed)]);
	return (int)woke;
}

/*
 * Queues what the next enter submits so that the thread's polls watch
 * @loop's channel and rdma_cm channel, the NIC's async fd and the
 * thread's eventfd: nothing once they do. Polls of another loop, of a
 * loop that may have closed since (their files stay open while polled),
 * or of a dead NIC's fds are removed first, all of them, and their late
 * CQEs ignored.
 */
static int keep_polls(struct rig_loop *loop, struct rdma_event_channel *cm)
{
	struct io_uring *ring = &waiter.ring;
	uint64_t closed = rig__events_closed();
	const int fds[4] = { loop->channel->fd, waiter.efd, loop->nic->ctx->async_fd,
			     cm ? cm->fd : -1 };
	unsigned want = cm ? 0xf : 0x7, bit;
	struct io_uring_sqe *sqe;

	/* A dead NIC's async fd and channel poll EPOLLERR for ever, and
	 * nobody reads them again (events.c): no poll watches them. */
	if (__atomic_load_n(&loop->nic->dead, __ATOMIC_ACQUIRE))
		want &= ~(WOKE_ASYNC | WOKE_CHANNEL);
	if (waiter.polled && (waiter.loop != loop || waiter.loop_id != loop->id ||
			      waiter.closed != closed || (waiter.polled & ~want))) {
		for (bit = 1; bit <= WOKE_CM; bit <<= 1) {
			if (!(waiter.polled & bit))
				continue;
			if (!(sqe = io_uring_get_sqe(ring)))
				return waiter_fail(EBUSY, "get_sqe");
			io_uring_prep_poll_remove(sqe, waiter.gen << 8 | bit);
			io_uring_sqe_set_data64(sqe, 0);
		}
		waiter.polled = 0;
	}
	if (!waiter.polled) {
		waiter.gen++;
		waiter.loop = loop;
		waiter.loop_id = loop->id;
		waiter.closed = closed;
	}
	for (bit = 1; bit <= WOKE_CM; bit <<= 1) {
		if (!(want & bit) || (waiter.polled & bit))
			continue;
		if (!(sqe = io_uring_get_sqe(ring)))
			return waiter_fail(EBUSY, "get_sqe");
		io_uring_prep_poll_multishot(sqe, fds[__builtin_ctz(bit)], POLLIN);
		io_uring_sqe_set_data64(sqe, waiter.gen << 8 | bit);
		waiter.polled |= bit;
	}
	return 0;
}

/* Sleeps until a poll fires or @ns pass: one enter, which also submits
 * whatever keep_polls() queued. Returns the WOKE_ bits, or -errno. */
static int sleep_on(struct rig_loop *loop, struct rdma_event_channel *cm, int64_t ns)
{
	struct __kernel_timespec ts = { ns / 1000000000, ns % 1000000000 };
	struct io_uring_cqe *cqe;
	int ret;

	ret = keep_polls(loop, cm);
	if (ret)
		return ret;
	ret = io_uring_submit_and_wait_timeout(&waiter.ring, &cqe, 1, &ts, NULL);
	if (ret < 0 && ret != -ETIME && ret != -EINTR)
		return waiter_fail(-ret, "wait");
	return reap();
}

/*
 * Whether the ring's CQ is surely still armed from an earlier arming, so
 * that arming it again would only cost a system call. The CQ stays armed
 * until a completion comes after the arming, and nobody has read the
 * event that completion raised (events.c clears the bit). Nor has anyone
 * taken a completion since (by this wait or the application's own
 * polls): one that came after the arming raised an event that may be
 * unread yet. A completion that came and was not taken, the poll after
 * this check finds.
 */
static bool still_armed(const struct rig__qp *qp, int side)
{
	return (__atomic_load_n(&qp->armed, __ATOMIC_ACQUIRE) & (1u << side)) &&
	       qp->armed_tail[side] == qp->pub.ring[side].tail;
}

/*
 * Arms the ring beside the one a wait sleeps on (@side's other), and
 * makes this thread its sleeper (*@other set once it is), so that its
 * completions wake the wait, whose poll then moves that ring's waiting
 * entries to the NIC (rig(7) Q4). 0, or -errno if the arming failed.
 */
static int arm_other(struct rig__qp *qp, int side, bool *other)
{
	uint8_t bit = 1u << !side;
	int ret;

	if (!*other) {
		rig__events_set_sleeper(qp, !side, &waiter.hooks);
		*other = true;
	}
	if (still_armed(qp, !side))
		return 0;
	qp->armed_tail[!side] = qp->pub.ring[!side].tail;
	__atomic_or_fetch(&qp->armed, bit, __ATOMIC_ACQ_REL);
	ret = ibv_req_notify_cq(qp->pub.ring[!side].cq, 0);
	if (ret) {
		__atomic_and_fetch(&qp->armed, ~bit, __ATOMIC_RELEASE);
		return rig__fail_verbs(ret, qp->nic, "ibv_req_notify_cq");
	}
	return 0;
}

static bool spin_stopped(const struct rig__spin *s)
{
	return s->misses >= RIG_SPIN_MISSES || s->mean_ns > RIG_SPIN_CAP_NS;
}

/* How long a wait starting at @now may spin on @s, by the NIC's setting. */
static int64_t spin_budget(const struct rig__spin *s, int64_t setting, int64_t now)
{
	if (setting != RIG_SPIN_ADAPTIVE)
		return setting;
	if (spin_stopped(s) && (now & (RIG_SPIN_PERIOD_NS - 1)) >= RIG_SPIN_PROBE_NS)
		return 0;
	return RIG_SPIN_CAP_NS;
}

/* What the spin learned: it caught the completion after @ns, or (@ns < 0)
 * ran its whole budget in vain. */
static void spin_learn(struct rig__spin *s, int64_t ns)
{
	if (ns >= 0) {
		s->mean_ns += (int32_t)((ns - s->mean_ns) / 8);
		s->misses = 0;
	} else if (s->misses < RIG_SPIN_MISSES) {
		s->misses++;
	}
}

RIG_EXPORT int rig_nic_set_spin(struct rig_nic *nic, int64_t ns)
{
	if (!nic || ns < RIG_SPIN_ADAPTIVE || ns > RIG_SPIN_MAX_NS)
		return rig__fail(EINVAL, "rig_nic_set_spin: %s",
				 nic ? "ns out of range" : "nic is NULL");
	__atomic_store_n(&nic->spin_ns, ns, __ATOMIC_RELAXED);
	return 0;
}

RIG_EXPORT int rig_qp_wait(struct rig_qp *pub, enum rig_side side, int64_t us,
			   struct rig_completion *c)
{
	struct rdma_event_channel *cm;
	struct rig__ring *ring;
	struct rig__spin *spin;
	struct rig__qp *qp;
	struct rig_loop *loop;
	int64_t deadline, start, budget, now, slept_at = 0;
	bool slept = false, other;
	eventfd_t drained;
	uint8_t bit;
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
	loop = qp->loop;
	bit = 1u << side;
	spin = &qp->spin[side];
	start = rig__now_ns();
	deadline = us > INT64_MAX / 2000 ? INT64_MAX / 2 : start + us * 1000;
	budget = spin_budget(spin, __atomic_load_n(&qp->nic->spin_ns, __ATOMIC_RELAXED), start);
	if (budget) {
		int64_t spin_end = start + budget < deadline ? start + budget : deadline;

		do {
			if ((ret = rig_qp_poll(pub, side, c))) {
				if (ret > 0)
					spin_learn(spin, rig__now_ns() - start);
				return ret;
			}
		} while ((now = rig__now_ns()) < spin_end);
		if (now >= deadline)
			return 0;
		spin_learn(spin, -1);
	} else if (start >= deadline) {
		return 0;
	}
	ret = waiter_init();
	if (ret)
		return ret;
	rig__events_set_sleeper(qp, side, &waiter.hooks);
	other = false;
	woke = 0;
	for (;;) {
		/* Before each sleep: what woke the last one, and events owed
		 * since an earlier wait ended without reading its wakeup's. */
		cm = __atomic_load_n(&loop->cm, __ATOMIC_ACQUIRE);
		if ((ret = reap()) < 0)
			break;
		woke |= ret;
		/* An async event or a peer that left fails queue pairs; the
		 * poll then reports it. The loop takes the rdma_cm steps. */
		if ((woke & WOKE_ASYNC) && (ret = rig__events_async(qp->nic)) < 0)
			break;
		if (woke & WOKE_CM)
			rig__events_note_cm(loop);
		if (woke & WOKE_EFD)
			eventfd_read(waiter.efd, &drained);
		if (woke & WOKE_CHANNEL) {
			waiter.owed = true;
			waiter.owed_qp = qp;
			waiter.owed_side = side;
		}
		/* Poll before reading the channel: the completion is most
		 * likely there, and its event can be read at the next sleep. */
		if (woke && (ret = rig_qp_poll(pub, side, c)))
			break;
		woke = 0;
		if (waiter.owed && waiter.loop == loop && waiter.loop_id == loop->id)
			rig__events_take_until(loop, (struct rig__qp *)waiter.owed_qp,
					       waiter.owed_side);
		waiter.owed = false;
		/* Arm, then poll: a completion that came before the arming
		 * is found by the poll, one after it raises an event. */
		if (!still_armed(qp, side)) {
			/* The bit goes on first: the event that clears it may
			 * be read at once, by any thread. */
			qp->armed_tail[side] = ring->tail;
			__atomic_or_fetch(&qp->armed, bit, __ATOMIC_ACQ_REL);
			ret = ibv_req_notify_cq(ring->cq, 0);
			if (ret) {
				__atomic_and_fetch(&qp->armed, ~bit, __ATOMIC_RELEASE);
				ret = rig__fail_verbs(ret, qp->nic, "ibv_req_notify_cq");
				break;
			}
		}
		/* rig(7) Q4: entries waiting on the other ring go to the NIC
		 * as its completions free room, and this wait moves them: it
		 * wakes for the other ring's events too, while they wait. */
		if (rig__qp_waiting(qp, !side) && (ret = arm_other(qp, side, &other)))
			break;
		ret = rig_qp_poll(pub, side, c);
		now = rig__now_ns();
		if (ret || deadline - now <= 0)
			break;
		if (!slept) {
			slept = true;
			slept_at = now;
			qp->slept[side]++;	/* rig_qp_stats: waits that slept */
		}
		woke = ret = sleep_on(loop, cm, deadline - now);
		if (ret < 0)
			break;
		if (!woke && deadline - rig__now_ns() <= 0)
			break;
	}
	rig__events_set_sleeper(qp, side, NULL);
	if (other)
		rig__events_set_sleeper(qp, !side, NULL);
	/* A wait that slept, from its first sleep on, and what it returns. */
	if (RIG_PROBES_ON && slept)
		RIG_PROBE(wait_slept, qp->self.qp, (int)side, rig__now_ns() - slept_at, ret);
	/* Only now that no ring names its eventfd may the thread's waiter
	 * go (the fd number could be reused). */
	if (waiter.broken)
		waiter_exit(NULL);
	return ret;
}
