/* SPDX-License-Identifier: MIT */
/*
 * The demultiplexer: the one place that reads a loop's completion channel,
 * the NIC's async fd and the loop's rdma_cm channel, acks what it reads,
 * and tells each interested consumer that a ring has news. Its consumers
 * sit above it and register hooks (struct rig__consumer): the thread
 * sleeping on a ring in rig_qp_wait (wait.c) and the loop's news list
 * (loop.c); rdma_cm events go to the connection layer (conn.h). Nothing
 * here calls into them by name: the arrows run from them to here
 * (README, "How it is built"; tests/check-layers.sh holds it true).
 *
 * Locks: a loop's lock covers its channel reads, acks, sleepers and news;
 * its cm_lock the rdma_cm reads and the connections' steps. Order: cm_lock,
 * then the NIC's lock, then a loop's lock.
 *
 * Async events (rig(7) F1, F6) may be read by any thread, while each queue
 * pair belongs to its owner's thread (C3), so a failure from outside the
 * rings is only recorded, with RIG__EVENT set; the owner's next poll
 * applies it (ring.c).
 */
#include <fcntl.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#include "internal.h"
#include "probes.h"

/* Completion events acked per ibv_ack_cq_events call. */
#define RIG_ACK_BATCH 64

int rig__set_nonblock(int fd, const char *what)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK))
		return rig__fail(errno, "fcntl(%s, O_NONBLOCK): %s", what,
				 strerror(errno));
	return 0;
}

static int epoll_add(struct rig_loop *loop, int fd, uint32_t source)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u32 = source };

	if (epoll_ctl(loop->epfd, EPOLL_CTL_ADD, fd, &ev))
		return rig__fail(errno, "epoll_ctl: %s", strerror(errno));
	return 0;
}

/* Loops made and closed so far: a loop's id, and a sleeping thread's
 * sign that polls it keeps may name a closed loop's files. */
static uint64_t loops_made, loops_closed;

uint64_t rig__events_closed(void)
{
	return __atomic_load_n(&loops_closed, __ATOMIC_ACQUIRE);
}

int rig__events_open(struct rig_loop *loop)
{
	struct rig_nic *nic = loop->nic;
	int ret;

	loop->id = __atomic_add_fetch(&loops_made, 1, __ATOMIC_RELAXED);

	loop->epfd = loop->timer_fd = loop->ready_efd = -1;
	loop->timer_at = -1;
	loop->channel = ibv_create_comp_channel(nic->ctx);
	if (!loop->channel)
		return rig__fail_verbs(errno ? errno : ENOMEM, nic, "ibv_create_comp_channel");
	ret = rig__set_nonblock(loop->channel->fd, "the completion channel");
	if (ret)
		goto out;
	loop->ready_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	loop->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	loop->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (loop->ready_efd < 0 || loop->timer_fd < 0 || loop->epfd < 0) {
		ret = rig__fail(errno, "rig_loop_open: %s", strerror(errno));
		goto out;
	}
	/* The async fd is the NIC's: every loop watches it, and whoever
	 * reads an event tells the loop of the queue pair it names. */
	if ((ret = epoll_add(loop, loop->channel->fd, RIG__SOURCE_CHANNEL)) ||
	    (ret = epoll_add(loop, nic->ctx->async_fd, RIG__SOURCE_ASYNC)) ||
	    (ret = epoll_add(loop, loop->timer_fd, RIG__SOURCE_TIMER)) ||
	    (ret = epoll_add(loop, loop->ready_efd, RIG__SOURCE_NEWS)))
		goto out;
	return 0;
out:
	rig__events_close(loop);
	return ret;
}

void rig__events_close(struct rig_loop *loop)
{
	__atomic_add_fetch(&loops_closed, 1, __ATOMIC_RELEASE);
	if (loop->epfd >= 0)
		close(loop->epfd);
	if (loop->timer_fd >= 0)
		close(loop->timer_fd);
	if (loop->ready_efd >= 0)
		close(loop->ready_efd);
	if (loop->cm)
		rdma_destroy_event_channel(loop->cm);
	if (loop->channel)
		ibv_destroy_comp_channel(loop->channel);
}

int rig__events_watch_cm_fd(struct rig_loop *loop, int fd)
{
	return epoll_add(loop, fd, RIG__SOURCE_CM);
}

void rig__events_unwatch_fd(struct rig_loop *loop, int fd)
{
	epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, NULL);
}

int rig__events_new_cm_channel(struct rdma_event_channel **out)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	int ret;

	if (!ch)
		return rig__fail(errno ? errno : ENODEV, "rdma_create_event_channel: %s",
				 strerror(errno ? errno : ENODEV));
	/* Every wait on it goes through a poller. */
	ret = rig__set_nonblock(ch->fd, "the rdma_cm event channel");
	if (ret) {
		rdma_destroy_event_channel(ch);
		return ret;
	}
	*out = ch;
	return 0;
}

int rig__events_cm_channel(struct rig_loop *loop,
			   const struct rig__cm_consumer *consumer)
{
	struct rdma_event_channel *ch;
	int ret;

	if (loop->cm)
		return 0;
	ret = rig__events_new_cm_channel(&ch);
	if (ret)
		return ret;
	ret = epoll_add(loop, ch->fd, RIG__SOURCE_CM);
	if (ret) {
		rdma_destroy_event_channel(ch);
		return ret;
	}
	loop->cm_consumer = consumer;
	/* Release: a sleeper that sees the channel sees its consumer. */
	__atomic_store_n(&loop->cm, ch, __ATOMIC_RELEASE);
	return 0;
}

/*
 * One epoll_wait says which of the loop's sources have something, so a
 * loop reads only those: an event costs the same system calls whether or
 * not the loop also has connections, a timer and an async fd.
 */
unsigned rig__events_ready(struct rig_loop *loop)
{
	struct epoll_event ev[8];
	unsigned mask = 0;
	int i, n;

	/* Five fds of its own, and two per listener it shares with other
	 * loops: a full array may have left some out. */
	n = epoll_wait(loop->epfd, ev, 8, 0);
	if (n < 0 || n == 8)	/* read everything, as if all were ready */
		return RIG__SOURCE_CHANNEL | RIG__SOURCE_ASYNC | RIG__SOURCE_CM |
		       RIG__SOURCE_TIMER;
	for (i = 0; i < n; i++)
		mask |= ev[i].data.u32;
	return mask;
}

/* One timer serves conn.c's deadlines and the liveness passes (loop.c):
 * it fires at the earlier; each, when it runs, looks at its own. */
void rig__events_timer_update(struct rig_loop *loop)
{
	int64_t deadline_ns = loop->cm_deadline;
	struct itimerspec its = { 0 };

	/* No pass while nothing is probed: an idle loop stays asleep. */
	if (loop->live_ns && loop->live.next != &loop->live &&
	    (!deadline_ns || loop->live_next < deadline_ns))
		deadline_ns = loop->live_next;
	/* Each step of a handshake sets it again, mostly to what it was. */
	if (deadline_ns == loop->timer_at)
		return;
	loop->timer_at = deadline_ns;
	its.it_value.tv_sec = deadline_ns / 1000000000;
	its.it_value.tv_nsec = deadline_ns % 1000000000;
	timerfd_settime(loop->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

void rig__events_set_timer(struct rig_loop *loop, int64_t deadline_ns)
{
	loop->cm_deadline = deadline_ns;
	rig__events_timer_update(loop);
}

/* Tells @qp's ring @side's consumers; the loop's lock is held. */
static void tell(struct rig__qp *qp, int side)
{
	struct rig_loop *loop = qp->loop;

	if (qp->sleeper[side])
		qp->sleeper[side]->ring(qp->sleeper[side], qp, side);
	loop->watcher->ring(loop->watcher, qp, side);
}

/*
 * Reads one completion event of @loop's channel, acks it (in batches) and
 * tells the ring's consumers; the loop's lock is held. Returns the ring
 * (*qp_out, *side_out), or false once the channel is empty.
 */
static bool take_one(struct rig_loop *loop, struct rig__qp **qp_out, int *side_out)
{
	struct rig__qp *qp;
	struct ibv_cq *cq;
	void *ctx;
	int side;

	for (;;) {
		if (ibv_get_cq_event(loop->channel, &cq, &ctx))
			return false;
		qp = ctx;
		if (!qp->forgotten)
			break;
		/* Its destroyer waits for this ack, holding no lock:
		 * nothing of it may be touched after it. */
		ibv_ack_cq_events(cq, 1);
	}
	side = cq == qp->pub.ring[RIG_RECEIVE].cq;
	/* The event used up the arming (wait.c arms again). */
	__atomic_and_fetch(&qp->armed, ~(1u << side), __ATOMIC_RELEASE);
	if (++qp->unacked[side] >= RIG_ACK_BATCH) {
		ibv_ack_cq_events(cq, qp->unacked[side]);
		qp->unacked[side] = 0;
	}
	tell(qp, side);
	*qp_out = qp;
	*side_out = side;
	return true;
}

void rig__events_take_locked(struct rig_loop *loop)
{
	struct rig__qp *qp;
	int side;

	while (take_one(loop, &qp, &side))
		;
}

void rig__events_take(struct rig_loop *loop)
{
	pthread_mutex_lock(&loop->lock);
	rig__events_take_locked(loop);
	loop->watcher->done(loop->watcher);
	pthread_mutex_unlock(&loop->lock);
}

/*
 * A sleeper woken by the channel reads up to its own ring's event, not
 * until EAGAIN: one read per wakeup where the channel holds only its own
 * event. Events it leaves behind came after its own; their sleepers were
 * woken by them too (each polls the channel), and whoever reads next
 * starts with them, so what the channel holds stays bounded.
 */
bool rig__events_take_until(struct rig_loop *loop, struct rig__qp *qp, int side)
{
	struct rig__qp *q;
	bool found = false;
	int s;

	pthread_mutex_lock(&loop->lock);
	while (take_one(loop, &q, &s))
		if (q == qp && s == side) {
			found = true;
			break;
		}
	loop->watcher->done(loop->watcher);
	pthread_mutex_unlock(&loop->lock);
	return found;
}

/*
 * A connection request costs a queue pair (tens of milliseconds in an
 * emulated guest), and a flood of them must not hold the caller's loop:
 * one call takes events for RIG_CM_BUDGET_NS at most (one at least).
 * Returns true if events remain; the caller makes sure the loop is woken
 * again for them.
 */
#define RIG_CM_BUDGET_NS 5000000

bool rig__events_take_cm(struct rig_loop *loop, unsigned sources)
{
	/* A pass for news owed, or for the timer alone, finds the channel
	 * empty: no read for that (an event that comes later wakes the
	 * loop's fd again). */
	struct rdma_event_channel *ch = (sources & RIG__SOURCE_CM)
		? __atomic_load_n(&loop->cm, __ATOMIC_ACQUIRE) : NULL;
	struct rdma_cm_event *ev;
	int64_t end = rig__now_ns() + RIG_CM_BUDGET_NS;
	uint64_t expired;
	bool more = false, ticked = false;

	/* The steps' failures are their connections' news, not the
	 * caller's: rig_loop_handle succeeds. */
	rig__errmsg_hold();
	pthread_mutex_lock(&loop->cm_lock);
	/* What waits read and kept comes first: it is older. */
	/* One exchange: another thread (rig_loops_listen's) may set it for
	 * work it handed this loop between a load and a store. */
	if (loop->cm_consumer && __atomic_exchange_n(&loop->cm_owed, false, __ATOMIC_ACQ_REL))
		loop->cm_consumer->replay(loop);
	/* The consumer acks each event. */
	while (ch && !rdma_get_cm_event(ch, &ev)) {
		loop->cm_consumer->event(loop, ev);
		if (rig__now_ns() >= end) {
			more = true;
			break;
		}
	}
	if (loop->cm_consumer && loop->cm_consumer->turn(loop, end))
		more = true;
	/* Deadlines once the channel is read dry: a handshake whose
	 * ESTABLISHED waits behind a burst of requests is not late. But a
	 * channel that never runs dry (a flood) must not starve them: after
	 * RIG_CM_HALF_OPEN_MS without a pass, they run anyway. An expired
	 * timer left unread keeps the loop's fd readable. One not expired
	 * is not read: most passes are for rdma_cm events. */
	if ((sources & RIG__SOURCE_TIMER) &&
	    (!more || rig__now_ns() - loop->cm_ticked >= RIG_CM_HALF_OPEN_MS * 1000000ll) &&
	    read(loop->timer_fd, &expired, sizeof(expired)) == sizeof(expired)) {
		loop->timer_at = -1;	/* fired: set it again, if only to the same */
		if (loop->cm_consumer)
			loop->cm_consumer->tick(loop);
		loop->cm_ticked = rig__now_ns();
		ticked = true;
	}
	pthread_mutex_unlock(&loop->cm_lock);
	/* A liveness pass holds no cm_lock while it posts: the helper's
	 * steps and the waits' notes go on meanwhile. */
	if (ticked && loop->live_tick)
		loop->live_tick(loop);
	rig__errmsg_release();
	return more;
}

/*
 * A wait woken by the loop's rdma_cm channel reads it, for a peer that
 * left may be why its ring has news, but takes no step (T3): the
 * connection layer notes each event, and the loop takes them later. The
 * loop's fd stays readable while any are kept.
 */
void rig__events_note_cm(struct rig_loop *loop)
{
	struct rdma_event_channel *ch = __atomic_load_n(&loop->cm, __ATOMIC_ACQUIRE);
	struct rdma_cm_event *ev;
	bool kept = false;

	if (!ch)
		return;
	pthread_mutex_lock(&loop->cm_lock);
	while (!rdma_get_cm_event(ch, &ev)) {
		loop->cm_consumer->note(loop, ev);
		kept = true;
	}
	if (kept)
		__atomic_store_n(&loop->cm_owed, true, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&loop->cm_lock);
	if (kept) {
		pthread_mutex_lock(&loop->lock);
		loop->watcher->done(loop->watcher);
		pthread_mutex_unlock(&loop->lock);
	}
}

void rig__events_fail_qp(struct rig__qp *qp, int error, const char *why)
{
	struct rig_loop *loop = qp->loop;
	uint32_t broken = __atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE);

	if (broken & RIG__EVENT)
		return;		/* the first one counts */
	pthread_mutex_lock(&loop->lock);
	if (!(qp->pub.broken & RIG__EVENT)) {
		qp->event_error = error;
		qp->event_why = why;
		/* Release: the owner reads event_* after it sees the bit. */
		__atomic_or_fetch(&qp->pub.broken, RIG__EVENT, __ATOMIC_RELEASE);
		/* Both rings now have a failure to report. */
		tell(qp, RIG_SEND);
		tell(qp, RIG_RECEIVE);
		loop->watcher->done(loop->watcher);
	}
	pthread_mutex_unlock(&loop->lock);
}

/* ring.c's hook: the owner's poll or post found @qp failed. Both rings'
 * consumers hear of it, as of an async event. */
static void rings_failed(struct rig__qp *qp)
{
	struct rig_loop *loop = qp->loop;

	pthread_mutex_lock(&loop->lock);
	tell(qp, RIG_SEND);
	tell(qp, RIG_RECEIVE);
	loop->watcher->done(loop->watcher);
	pthread_mutex_unlock(&loop->lock);
}

void rig__events_add(struct rig__qp *qp)
{
	struct rig_loop *loop = qp->loop;

	qp->rings_failed = rings_failed;
	pthread_mutex_lock(&loop->lock);
	loop->watcher->add(loop->watcher, qp);
	pthread_mutex_unlock(&loop->lock);
}

/*
 * ibv_destroy_cq waits until every completion event read from the channel
 * for the CQ is acked; the kernel drops those still unread. Everyone
 * reads the channel under the loop's lock: the events read so far are
 * acked here, and once the queue pair is forgotten its reader acks each
 * one as it reads it (take_one). So the destroy runs without the lock:
 * it is a command to the NIC's firmware (bnxt_re, mlx5) that can take
 * milliseconds, and the loop's thread takes the lock for every hand-out.
 */
void rig__events_forget(struct rig__qp *qp, void (*destroy_cqs)(struct rig__qp *))
{
	struct rig_loop *loop = qp->loop;
	int side;

	pthread_mutex_lock(&loop->lock);
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		if (qp->unacked[side])
			ibv_ack_cq_events(qp->pub.ring[side].cq, qp->unacked[side]);
		qp->unacked[side] = 0;
	}
	qp->forgotten = true;
	loop->watcher->forget(loop->watcher, qp);
	loop->watcher->done(loop->watcher);
	pthread_mutex_unlock(&loop->lock);
	destroy_cqs(qp);
}

void rig__events_set_sleeper(struct rig__qp *qp, int side, struct rig__consumer *c)
{
	pthread_mutex_lock(&qp->loop->lock);
	qp->sleeper[side] = c;
	pthread_mutex_unlock(&qp->loop->lock);
}

/* Fails the NIC's queue pair @ibqp, or all of them if NULL, with the
 * NIC's lock held. Trusts only queue pairs the NIC lists. */
static void qp_event_locked(struct rig_nic *nic, struct ibv_qp *ibqp, int error,
			    const char *why)
{
	struct rig__list *l;

	for (l = nic->qps.next; l != &nic->qps; l = l->next) {
		struct rig__qp *qp = container_of(l, struct rig__qp, link);

		if (!ibqp || qp->pub.ibqp == ibqp) {
			__atomic_add_fetch(&qp->async_events, 1, __ATOMIC_RELAXED);
			rig__events_fail_qp(qp, error, why);
		}
	}
}

static void qp_event(struct rig_nic *nic, struct ibv_qp *ibqp, int error,
		     const char *why)
{
	pthread_mutex_lock(&nic->lock);
	qp_event_locked(nic, ibqp, error, why);
	pthread_mutex_unlock(&nic->lock);
}

void rig__events_drop_dead(struct rig_loop *loop)
{
	/* Either may be gone from the set already: nothing to undo. */
	epoll_ctl(loop->epfd, EPOLL_CTL_DEL, loop->nic->ctx->async_fd, NULL);
	epoll_ctl(loop->epfd, EPOLL_CTL_DEL, loop->channel->fd, NULL);
}

/*
 * The kernel disassociates a context when its device is removed or reset
 * (mlx5, bnxt_re; never Soft-RoCE): ib_uverbs_free_hw_resources queues a
 * DEVICE_FATAL and closes the context's event queues, and from then on
 * its async fd and every completion channel poll EPOLLERR
 * (ib_uverbs_event_poll) and read EIO (ib_uverbs_event_read) for ever.
 * The NIC is dead: every queue pair fails as with DEVICE_FATAL (F6), and
 * its fds leave every loop's fd set, which would otherwise stay readable
 * for ever. Nobody reads them again (waits drop their polls, wait.c).
 */
static void nic_dead(struct rig_nic *nic)
{
	struct rig__list *l;
	bool first;

	pthread_mutex_lock(&nic->lock);
	first = !nic->dead;
	if (first) {
		__atomic_store_n(&nic->dead, true, __ATOMIC_RELEASE);
		for (l = nic->loops.next; l != &nic->loops; l = l->next)
			rig__events_drop_dead(container_of(l, struct rig_loop, link));
		qp_event_locked(nic, NULL, ENODEV,
				"the NIC went away (the device was removed or reset)");
	}
	pthread_mutex_unlock(&nic->lock);
	/* The log may call the application: no lock held. */
	if (first)
		rig__log(RIG_LOG_WARN, "%s: the async fd reads EIO: the device went away, "
			 "every queue pair fails", nic->name);
}

/* The element an async event names, for its probe: the queue pair's
 * number, the port's, or 0. */
static uint32_t event_element(const struct ibv_async_event *ev)
{
	switch (ev->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return ev->element.qp ? ev->element.qp->qp_num : 0;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_GID_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
		return (uint32_t)ev->element.port_num;
	default:
		return 0;
	}
}

/* One line per async event: those that fail queue pairs as warnings. */
static void log_event(const struct rig_nic *nic, const struct ibv_async_event *ev)
{
	RIG_PROBE(async_event, nic->name, ibv_event_type_str(ev->event_type),
		  (int)ev->event_type, event_element(ev));
	switch (ev->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
		rig__log(RIG_LOG_WARN, "%s: async event %s on queue pair 0x%06x",
			 nic->name, ibv_event_type_str(ev->event_type),
			 ev->element.qp->qp_num);
		break;
	case IBV_EVENT_DEVICE_FATAL:
		rig__log(RIG_LOG_WARN, "%s: async event %s: every queue pair fails",
			 nic->name, ibv_event_type_str(ev->event_type));
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_GID_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
		rig__log(RIG_LOG_INFO, "%s: async event %s on port %d", nic->name,
			 ibv_event_type_str(ev->event_type), ev->element.port_num);
		break;
	default:
		rig__log(RIG_LOG_INFO, "%s: async event %s", nic->name,
			 ibv_event_type_str(ev->event_type));
		break;
	}
}

int rig__events_async(struct rig_nic *nic)
{
	struct ibv_async_event ev;
	int n = 0;

	if (__atomic_load_n(&nic->dead, __ATOMIC_ACQUIRE))
		return 0;
	while (!ibv_get_async_event(nic->ctx, &ev)) {
		n++;
		log_event(nic, &ev);
		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
			qp_event(nic, ev.element.qp, EIO,
				 "the NIC reported the queue pair broken (QP_FATAL)");
			break;
		case IBV_EVENT_QP_REQ_ERR:
			qp_event(nic, ev.element.qp, EPROTO,
				 "the NIC reported an invalid request from the peer (QP_REQ_ERR)");
			break;
		case IBV_EVENT_QP_ACCESS_ERR:
			qp_event(nic, ev.element.qp, EACCES,
				 "the NIC reported an access violation by the peer (QP_ACCESS_ERR)");
			break;
		case IBV_EVENT_DEVICE_FATAL:
			qp_event(nic, NULL, ENODEV, "the NIC failed (DEVICE_FATAL)");
			break;
		default:
			/* Port and GID changes fail nothing: the device's own
			 * completions say whether a send still gets through. */
			break;
		}
		ibv_ack_async_event(&ev);
	}
	if (errno == EIO) {
		nic_dead(nic);
		return n;
	}
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		return rig__fail(errno, "ibv_get_async_event(%s): %s", nic->name,
				 strerror(errno));
	return n;
}

RIG_EXPORT int rig_nic_events(struct rig_nic *nic)
{
	int n;

	if (!nic)
		return rig__fail(EINVAL, "rig_nic_events: nic is NULL");
	n = rig__events_async(nic);
	/* A program that only polls learns here that a peer of the NIC's
	 * own loop left. */
	if (n >= 0)
		rig__events_take_cm(nic->own, RIG__SOURCE_CM | RIG__SOURCE_TIMER);
	return n;
}
