/* SPDX-License-Identifier: MIT */
/*
 * Loops (include/rig/loop.h): news in the application's own io_uring.
 *
 * A consumer of the demultiplexer (events.c): each ring with news, and
 * each connection's news (conn.c posts it), waits in the loop's list
 * until rig_loop_handle hands it out. The list is intrusive (each ring
 * and each connection carries its place in it), so listing never fails
 * and a queue pair that goes unlinks itself in constant time.
 *
 * One fd per loop (an epoll set of its channel, the NIC's async fd, its
 * rdma_cm channel, its timer and an eventfd readable while news waits)
 * carries everything, so the application queues one multishot poll per
 * loop (or puts the fd in its epoll set or libuv loop) and an event costs
 * the same with one queue pair as with thousands: the CQ context names
 * the queue pair. A ring is armed when it is handed out, before the
 * application polls it dry: arm, then drain, loses no wakeup.
 *
 * Watching (rig_loop_watch, rig_uring_watch) turns the listing on: from
 * then on every ring of the loop is armed, listed, or being handed out.
 * It stays on when an io_uring watch ends (its poll cancelled or failed):
 * news listed meanwhile waits for the next watch, which has nothing to
 * arm, and no ring is left unarmed with completions nobody will hear of.
 *
 * A loop's slow control calls (making and destroying the queue pairs of
 * its connections, and rig_qp_close's destroys) run on a helper thread
 * of its own, started by the first one, so that the loop's thread never
 * waits for the kernel to build or tear down a queue pair; each loop has
 * its own, so no loop waits for another's.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include <liburing.h>

#include "internal.h"
#include "probes.h"

/* The loop's consumer half; the loop embeds it. */
struct watcher {
	struct rig__consumer hooks;
	struct rig_loop *loop;
};

static void arm(struct rig__qp *qp, int side)
{
	/* A refusal here leaves the ring unarmed; its next poll still
	 * works, and the failure, if any, shows in its completions. */
	ibv_req_notify_cq(qp->pub.ring[side].cq, 0);
}

static bool listed(const struct rig__news *n)
{
	return n->link.next != &n->link;
}

static void post_locked(struct rig_loop *loop, struct rig__news *n)
{
	if (!listed(n))
		rig__list_add(loop->news.prev, &n->link);
}

/*
 * A listed ring stays unarmed until it is handed out: each event uses up
 * the arming, and arming a ring that is still listed would only raise
 * events for a ring the application is told of anyway.
 */
static void on_ring(struct rig__consumer *c, struct rig__qp *qp, int side)
{
	struct rig_loop *loop = container_of(c, struct watcher, hooks)->loop;

	if (loop->listing && !__atomic_load_n(&qp->closing, __ATOMIC_ACQUIRE))
		post_locked(loop, &qp->news[side]);
}

/*
 * rig_loop_fd is readable while news waits, whoever listed it: another
 * thread's rig_qp_wait, rig_qp_destroy or rig_nic_events may have read
 * the channel or the async fd and used up the readiness that would have
 * woken the loop. The eventfd says so; it is written when the list fills
 * and read when it empties, so a loop that hands out everything it is
 * woken for pays no system call for it.
 */
static void on_done(struct rig__consumer *c)
{
	struct rig_loop *loop = container_of(c, struct watcher, hooks)->loop;
	bool any = loop->news.next != &loop->news ||
		   __atomic_load_n(&loop->cm_owed, __ATOMIC_ACQUIRE);
	eventfd_t v;

	if (any && !loop->ready_signalled) {
		eventfd_write(loop->ready_efd, 1);
		loop->ready_signalled = true;
	} else if (!any && loop->ready_signalled) {
		eventfd_read(loop->ready_efd, &v);
		loop->ready_signalled = false;
	}
}

static void on_add(struct rig__consumer *c, struct rig__qp *qp)
{
	struct rig_loop *loop = container_of(c, struct watcher, hooks)->loop;
	int side;

	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		qp->news[side].what = (struct rig_ready){ &qp->pub, side, RIG_NEWS_RING, 0, 0 };
		rig__list_init(&qp->news[side].link);
		if (loop->listing)
			arm(qp, side);
	}
}

static void on_forget(struct rig__consumer *c, struct rig__qp *qp)
{
	(void)c;
	rig__list_del(&qp->news[RIG_SEND].link);
	rig__list_del(&qp->news[RIG_RECEIVE].link);
}

void rig__loop_post(struct rig_loop *loop, struct rig__news *n)
{
	pthread_mutex_lock(&loop->lock);
	post_locked(loop, n);
	on_done(loop->watcher);
	pthread_mutex_unlock(&loop->lock);
}

/*
 * rig_qp_close: from now on the loop hands out no news of @qp but the
 * close's own: on_ring lists none, rig_loop_handle drops what is listed.
 * No lock: the helper may hold the loop's while it destroys another
 * queue pair's CQs (events_forget), and the close must not wait for it.
 */
void rig__loop_closing(struct rig__qp *qp)
{
	__atomic_store_n(&qp->closing, true, __ATOMIC_RELEASE);
}

bool rig__loop_unpost(struct rig_loop *loop, struct rig__news *n)
{
	bool was;

	pthread_mutex_lock(&loop->lock);
	was = listed(n);
	rig__list_del(&n->link);
	on_done(loop->watcher);
	pthread_mutex_unlock(&loop->lock);
	return was;
}

/*
 * The order the helper takes jobs in: each queue in the order it was
 * filled; a handshake's next step (a queue pair to take to RTS, an
 * accepted request's queue pair) before a job that starts a new one (a
 * dial's queue pair); and teardowns in turn with those while both wait.
 * A handshake under way then waits behind one teardown at most per job
 * of its own queue ahead of it, however many dials or departures were
 * queued before it: its peer drops it after RIG_CM_HALF_OPEN_MS, and a
 * thousand dials' queue pairs take the kernel longer than that to make.
 * A stream of handshakes cannot hold teardowns (and the memory they give
 * back) off for ever either. Quick jobs go first: a flood's thousand
 * rejected requests' ids take the helper a few hundred milliseconds,
 * and the loop queues at most RIG_CM_DROPS of them. job_lock held.
 */
static struct rig__job *next_job(struct rig_loop *loop)
{
	struct rig__list *work = loop->jobs.next != &loop->jobs ? &loop->jobs : &loop->starts;
	bool jobs = work->next != work;
	bool teardowns = loop->teardowns.next != &loop->teardowns;
	struct rig__list *l;

	if (loop->quick.next != &loop->quick) {
		l = loop->quick.next;
		rig__list_del(l);
		return container_of(l, struct rig__job, link);
	}
	if (!jobs && !teardowns)
		return NULL;
	l = teardowns && (!jobs || !loop->took_teardown) ? loop->teardowns.next : work->next;
	loop->took_teardown = l == loop->teardowns.next;
	rig__list_del(l);
	return container_of(l, struct rig__job, link);
}

static void *helper_main(void *arg)
{
	struct rig_loop *loop = arg;
	struct rig__job *job;

	pthread_mutex_lock(&loop->job_lock);
	for (;;) {
		job = next_job(loop);
		if (!job) {
			/* Stops only once every job queued ran. */
			if (loop->helper_stop)
				break;
			pthread_cond_wait(&loop->job_cond, &loop->job_lock);
			continue;
		}
		pthread_mutex_unlock(&loop->job_lock);
		job->work(job);
		pthread_mutex_lock(&loop->job_lock);
	}
	pthread_mutex_unlock(&loop->job_lock);
	return NULL;
}

int rig__loop_defer(struct rig_loop *loop, struct rig__job *job)
{
	sigset_t all, old;
	int ret = 0;

	pthread_mutex_lock(&loop->job_lock);
	if (loop->helper_stop) {
		ret = -ESHUTDOWN;
	} else if (!loop->helper_started) {
		/* Signals are the application's threads' business. */
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		ret = -pthread_create(&loop->helper, NULL, helper_main, loop);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		loop->helper_started = !ret;
	}
	if (!ret) {
		rig__list_add(job->quick ? loop->quick.prev
			      : job->teardown ? loop->teardowns.prev
			      : job->starts ? loop->starts.prev : loop->jobs.prev,
			      &job->link);
		pthread_cond_signal(&loop->job_cond);
	}
	pthread_mutex_unlock(&loop->job_lock);
	return ret;
}

/* Runs what is queued, then ends the helper thread. */
static void helper_stop(struct rig_loop *loop)
{
	bool started;

	pthread_mutex_lock(&loop->job_lock);
	loop->helper_stop = true;
	started = loop->helper_started;
	pthread_cond_signal(&loop->job_cond);
	pthread_mutex_unlock(&loop->job_lock);
	if (started)
		pthread_join(loop->helper, NULL);
}

/*
 * Liveness (rig(7) LIVENESS): every interval, the loop's timer runs a
 * pass over the queue pairs of its connections by address, on the
 * loop's thread (rig_loop_handle, rig_uring_handle; rig_nic_events for
 * the NIC's own loop). A queue pair whose send ring is idle gets a probe
 * (ring.c, rig__qp_probe), and the last one's CQE is read: a host that
 * vanished fails the queue pair with -ETIMEDOUT within two intervals
 * and the transport's retries, even one that only receives, and its
 * connection hands out RIG_NEWS_GONE. A pass costs each idle queue pair
 * one CQ read and one post (one write() on Soft-RoCE): a probe and its
 * acknowledgement on the wire per interval, however many queue pairs
 * share the peer's host. The probes go out under live_lock only, so that
 * the handshakes' steps (cm_lock) do not wait for a pass over thousands
 * of queue pairs; the owners hear of what it found under both (cm_lock
 * first, as everywhere).
 *
 * The interval is cut in LIVE_SLICES passes, and each queue pair is
 * probed in one of them, its slice (given in turn as queue pairs join):
 * each is still probed once an interval, and the probes of thousands of
 * connections go out spread over it, not in one burst. 10,000 probes at
 * once overflowed the guest's network backlog (1000 packets) on
 * Soft-RoCE, and the drops outlasted the retries: healthy connections
 * were declared gone.
 */
#define LIVE_SLICES 8

static void live_tick(struct rig_loop *loop)
{
	int64_t now = rig__now_ns();
	struct rig__list *l;
	bool found = false;
	unsigned slice;

	pthread_mutex_lock(&loop->cm_lock);
	if (!loop->live_ns || now < loop->live_next) {
		pthread_mutex_unlock(&loop->cm_lock);
		return;
	}
	loop->live_next = now + loop->live_ns / LIVE_SLICES;
	slice = loop->live_pass++ % LIVE_SLICES;
	rig__events_timer_update(loop);
	pthread_mutex_unlock(&loop->cm_lock);

	pthread_mutex_lock(&loop->live_lock);
	for (l = loop->live.next; l != &loop->live; l = l->next) {
		struct rig__qp *qp = container_of(l, struct rig__qp, live_link);

		if (qp->live_slice != slice ||
		    __atomic_load_n(&qp->closing, __ATOMIC_ACQUIRE))
			continue;
		qp->lost = -rig__qp_probe(qp);
		found |= qp->lost != 0;
	}
	pthread_mutex_unlock(&loop->live_lock);
	if (!found)
		return;
	pthread_mutex_lock(&loop->cm_lock);
	pthread_mutex_lock(&loop->live_lock);
	for (l = loop->live.next; l != &loop->live; l = l->next) {
		struct rig__qp *qp = container_of(l, struct rig__qp, live_link);

		if (qp->lost && qp->owner && qp->owner->lost)
			qp->owner->lost(qp->owner, qp->lost);
		qp->lost = 0;
	}
	pthread_mutex_unlock(&loop->live_lock);
	pthread_mutex_unlock(&loop->cm_lock);
}

void rig__loop_live_add(struct rig__qp *qp)
{
	struct rig_loop *loop = qp->loop;
	bool first;

	if (qp->live)
		return;
	pthread_mutex_lock(&loop->live_lock);
	first = loop->live.next == &loop->live;
	__atomic_store_n(&qp->live, true, __ATOMIC_RELAXED);
	qp->live_slice = loop->live_joined++ % LIVE_SLICES;
	rig__list_add(loop->live.prev, &qp->live_link);
	pthread_mutex_unlock(&loop->live_lock);
	/* The passes start again with the first queue pair to probe. */
	if (first && loop->live_ns) {
		loop->live_next = rig__now_ns() + loop->live_ns / LIVE_SLICES;
		rig__events_timer_update(loop);
	}
}

void rig__loop_live_del(struct rig__qp *qp)
{
	if (!qp->live)
		return;
	pthread_mutex_lock(&qp->loop->live_lock);
	rig__list_del(&qp->live_link);
	__atomic_store_n(&qp->live, false, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&qp->loop->live_lock);
}

void rig__loop_wake(struct rig_loop *loop)
{
	__atomic_store_n(&loop->cm_owed, true, __ATOMIC_RELEASE);
	pthread_mutex_lock(&loop->lock);
	loop->watcher->done(loop->watcher);
	pthread_mutex_unlock(&loop->lock);
}

/* The longest interval: a day (a bound of weeks tells a server nothing). */
#define RIG_LIVENESS_MAX_MS (24 * 3600 * 1000ll)

RIG_EXPORT __cold int rig_loop_liveness(struct rig_loop *loop, int64_t ms)
{
	if (!loop)
		return rig__fail(EINVAL, "rig_loop_liveness: loop is NULL");
	if (ms < 0 || ms > RIG_LIVENESS_MAX_MS)
		return rig__fail(EINVAL, "rig_loop_liveness: %lld ms is not within 0 (off) and %lld",
				 (long long)ms, RIG_LIVENESS_MAX_MS);
	pthread_mutex_lock(&loop->cm_lock);
	loop->live_ns = ms * 1000000;
	loop->live_next = rig__now_ns() + loop->live_ns / LIVE_SLICES;
	rig__events_timer_update(loop);
	pthread_mutex_unlock(&loop->cm_lock);
	return 0;
}

int rig__loop_open(struct rig_nic *nic, struct rig_loop **out)
{
	struct rig_loop *loop;
	struct watcher *w;
	int ret;

	loop = calloc(1, sizeof(*loop) + sizeof(*w));
	if (!loop)
		return rig__fail(ENOMEM, "rig_loop_open: out of memory");
	w = (struct watcher *)(loop + 1);
	*w = (struct watcher){ { on_ring, on_done, on_add, on_forget }, loop };
	loop->watcher = &w->hooks;
	loop->nic = nic;
	rig__list_init(&loop->news);
	rig__list_init(&loop->listeners);
	rig__list_init(&loop->handshakes);
	rig__list_init(&loop->cm_kept);
	rig__list_init(&loop->jobs);
	rig__list_init(&loop->quick);
	rig__list_init(&loop->starts);
	rig__list_init(&loop->teardowns);
	rig__list_init(&loop->cm_inbox);
	loop->cm_stalled = UINT64_MAX;	/* never found stalled */
	rig__list_init(&loop->live);
	loop->live_tick = live_tick;
	ret = rig__events_open(loop);
	if (ret) {
		free(loop);
		return ret;
	}
	pthread_mutex_init(&loop->lock, NULL);
	pthread_mutex_init(&loop->cm_lock, NULL);
	pthread_mutex_init(&loop->job_lock, NULL);
	pthread_mutex_init(&loop->inbox_lock, NULL);
	pthread_mutex_init(&loop->live_lock, NULL);
	pthread_cond_init(&loop->job_cond, NULL);
	pthread_mutex_lock(&nic->lock);
	rig__list_add(&nic->loops, &loop->link);
	/* A NIC that died since the loop's fds were set drops them now. */
	if (nic->dead)
		rig__events_drop_dead(loop);
	loop->comp_vector = nic->ctx->num_comp_vectors > 1
		? (int)(nic->loops_opened % (unsigned)nic->ctx->num_comp_vectors) : 0;
	nic->loops_opened++;
	pthread_mutex_unlock(&nic->lock);
	*out = loop;
	return 0;
}

/* The loop's queue pair listed first in the NIC, or NULL. */
static struct rig__qp *first_qp(struct rig_loop *loop)
{
	struct rig_nic *nic = loop->nic;
	struct rig__qp *found = NULL;
	struct rig__list *l;

	pthread_mutex_lock(&nic->lock);
	for (l = nic->qps.next; l != &nic->qps && !found; l = l->next) {
		struct rig__qp *qp = container_of(l, struct rig__qp, link);

		if (qp->loop == loop)
			found = qp;
	}
	pthread_mutex_unlock(&nic->lock);
	return found;
}

int rig__loop_free(struct rig_loop *loop)
{
	struct rig_nic *nic = loop->nic;
	struct rig__qp *qp;
	int ret = 0, r;

	/* The helper's jobs end first (they take cm_lock to finish), then
	 * listeners and handshakes under way: they make queue pairs. */
	helper_stop(loop);
	pthread_mutex_lock(&loop->cm_lock);
	if (loop->cm_consumer)
		loop->cm_consumer->close(loop);
	pthread_mutex_unlock(&loop->cm_lock);
	while ((qp = first_qp(loop))) {
		r = loop->free_qp(qp);
		if (r) {
			/* The NIC still holds it: leave its memory be. */
			pthread_mutex_lock(&nic->lock);
			rig__list_del(&qp->link);
			pthread_mutex_unlock(&nic->lock);
			if (!ret)
				ret = r;
		}
	}
	/* News nobody took: a failed dial's connection goes with it. */
	while (loop->news.next != &loop->news) {
		struct rig__news *n = container_of(loop->news.next, struct rig__news, link);

		rig__list_del(&n->link);
		if (n->handed)
			n->handed(n);
	}
	pthread_mutex_lock(&nic->lock);
	rig__list_del(&loop->link);
	pthread_mutex_unlock(&nic->lock);
	rig__events_close(loop);
	pthread_mutex_destroy(&loop->lock);
	pthread_mutex_destroy(&loop->cm_lock);
	pthread_mutex_destroy(&loop->job_lock);
	pthread_mutex_destroy(&loop->inbox_lock);
	pthread_mutex_destroy(&loop->live_lock);
	pthread_cond_destroy(&loop->job_cond);
	free(loop);
	return ret;
}

RIG_EXPORT __cold int rig_loop_open(struct rig_nic *nic, struct rig_loop **out)
{
	int ret;

	if (!nic || !out)
		return rig__fail(EINVAL, "rig_loop_open: NULL argument");
	ret = rig__loop_open(nic, out);
	/* Its connections are probed by default; the NIC's own loop's are
	 * not, for its queue pairs (rig_dial, rig_accept) may belong to any
	 * thread, and a pass reads their send CQs (rig(7) LIVENESS). */
	if (!ret)
		rig_loop_liveness(*out, RIG_LIVENESS_MS);
	return ret;
}

RIG_EXPORT __cold int rig_loop_close(struct rig_loop *loop)
{
	if (!loop || loop == loop->nic->own)
		return rig__fail(EINVAL, "rig_loop_close: %s", loop ? "the NIC's own loop goes with the NIC"
								: "NULL loop");
	return rig__loop_free(loop);
}

RIG_EXPORT struct rig_loop *rig_nic_loop(struct rig_nic *nic)
{
	if (!nic) {
		rig__fail(EINVAL, "rig_nic_loop: nic is NULL");
		return NULL;
	}
	return nic->own;
}

RIG_EXPORT int rig_loop_fd(const struct rig_loop *loop)
{
	return loop ? loop->epfd : rig__fail(EINVAL, "rig_loop_fd: loop is NULL");
}

static int queue_poll(struct io_uring *ring, struct rig_loop *loop,
		      uint64_t user_data)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe)
		return rig__fail(EBUSY, "rig_uring_watch: the io_uring has no free SQE");
	io_uring_prep_poll_multishot(sqe, loop->epfd, POLLIN);
	io_uring_sqe_set_data64(sqe, user_data);
	return 0;
}

/*
 * Watches @loop, with the NIC's lock and the loop's held (the NIC's list
 * of queue pairs, then the loop's flags, in the order of events.c): the
 * first watch arms the rings of every queue pair the loop has, on_add
 * those it will have.
 */
static void list_locked(struct rig_loop *loop)
{
	struct rig_nic *nic = loop->nic;
	struct rig__list *l;

	if (loop->listing)
		return;
	__atomic_store_n(&loop->listing, true, __ATOMIC_RELEASE);
	for (l = nic->qps.next; l != &nic->qps; l = l->next) {
		struct rig__qp *qp = container_of(l, struct rig__qp, link);

		if (qp->loop == loop) {
			arm(qp, RIG_SEND);
			arm(qp, RIG_RECEIVE);
		}
	}
}

static void watch_locked(struct rig_loop *loop)
{
	loop->watched = true;
	list_locked(loop);
}

/* A loop handled before anyone watched it is watched from its first
 * rig_loop_handle on: a program that never called a watch would get
 * its connections' news and none of its rings', and look half-working.
 * Its listing is turned on (a watch call may still come, and finds its
 * rings armed), as rig_loop_watch would. */
static __cold void list_on_first_use(struct rig_loop *loop)
{
	pthread_mutex_lock(&loop->nic->lock);
	pthread_mutex_lock(&loop->lock);
	list_locked(loop);
	pthread_mutex_unlock(&loop->lock);
	pthread_mutex_unlock(&loop->nic->lock);
}

RIG_EXPORT __cold int rig_loop_watch(struct rig_loop *loop)
{
	struct rig_nic *nic;
	int ret = 0;

	if (!loop)
		return rig__fail(EINVAL, "rig_loop_watch: loop is NULL");
	nic = loop->nic;
	pthread_mutex_lock(&nic->lock);
	pthread_mutex_lock(&loop->lock);
	if (loop->watched)
		ret = rig__fail(EALREADY, "rig_loop_watch: the loop is watched already");
	else
		watch_locked(loop);
	pthread_mutex_unlock(&loop->lock);
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

RIG_EXPORT __cold int rig_uring_watch(struct io_uring *ring, struct rig_loop *loop,
				      uint64_t user_data)
{
	struct rig_nic *nic;
	int ret;

	if (!ring || !loop)
		return rig__fail(EINVAL, "rig_uring_watch: NULL argument");
	nic = loop->nic;
	pthread_mutex_lock(&nic->lock);
	pthread_mutex_lock(&loop->lock);
	if (loop->watched)
		ret = rig__fail(EALREADY, "rig_uring_watch: the loop is watched already");
	else if (!(ret = queue_poll(ring, loop, user_data)))
		watch_locked(loop);
	pthread_mutex_unlock(&loop->lock);
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

/* The io_uring watch of @loop ended with the poll's error @res. */
static int watch_ended(struct rig_loop *loop, int res)
{
	pthread_mutex_lock(&loop->lock);
	loop->watched = false;
	pthread_mutex_unlock(&loop->lock);
	if (res == -ECANCELED)
		return rig__fail(ECANCELED, "rig_uring_handle: the application cancelled the loop's poll; "
				 "the loop is no longer watched");
	return rig__fail(-res, "rig_uring_handle: the loop's poll ended: %s; "
			 "the loop is no longer watched", strerror(-res));
}

/*
 * The completion event of a liveness probe on an idle send ring (L1):
 * nothing for the application to take, so not handed out; the ring is
 * armed again, as a hand-out would arm it, and the loop's next pass
 * reads the probe's CQE (a failure there is news of both rings). With
 * liveness on, the loop's thread owns the send rings of its connections
 * (this one), so their idleness is its own to read, and no entry's CQE
 * can land unseen between the event and the arming.
 */
static bool probe_news(const struct rig_loop *loop, const struct rig__news *n)
{
	const struct rig__qp *qp;
	const struct rig__ring *r;

	if (n->what.news != RIG_NEWS_RING || n->what.side != RIG_SEND)
		return false;
	qp = rig__qp(n->what.qp);
	r = &qp->pub.ring[RIG_SEND];
	return __atomic_load_n(&qp->live, __ATOMIC_RELAXED) &&
	       __atomic_load_n(&loop->live_ns, __ATOMIC_RELAXED) &&
	       qp->probe_out && r->head == r->tail &&
	       !rig__qp_broken_for(&qp->pub, RIG_SEND);
}

/*
 * rig(7) Q4: a ring handed out moves the entries waiting in its queue
 * pair's rings to the NIC, its own and the other's, before the
 * application polls it: its completion event says the NIC has freed
 * room, and the application may poll only later, or only the other
 * ring. After the loop's lock: moving them reads the CQs, and a failure
 * found there is news (events.c takes the lock). The queue pair cannot
 * go meanwhile: a close marks it under the lock rig__qp_feed takes, and
 * its memory lives until this thread hands out its RIG_NEWS_CLOSED.
 */
static void feed_handed(const struct rig_ready *ready, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (ready[i].news == RIG_NEWS_RING)
			rig__qp_feed(rig__qp(ready[i].qp));
}

RIG_EXPORT int rig_loop_handle(struct rig_loop *loop, struct rig_ready *ready, int max)
{
	struct rig__news *n;
	bool backlog = false;
	unsigned sources;
	int ret, i;

	if (!loop || !ready || max <= 0)
		return rig__fail(EINVAL, "rig_loop_handle: %s",
				 max <= 0 ? "no room for news" : "NULL argument");
	if (unlikely(!__atomic_load_n(&loop->listing, __ATOMIC_ACQUIRE)))
		list_on_first_use(loop);
	sources = rig__events_ready(loop);
	if (sources & RIG__SOURCE_ASYNC) {
		ret = rig__events_async(loop->nic);
		if (ret < 0)
			return ret;
	}
	/* rdma_cm events, and those a wait read and kept for the loop. */
	if ((sources & (RIG__SOURCE_CM | RIG__SOURCE_TIMER)) ||
	    __atomic_load_n(&loop->cm_owed, __ATOMIC_ACQUIRE))
		backlog = rig__events_take_cm(loop, sources);
	pthread_mutex_lock(&loop->lock);
	if (sources & RIG__SOURCE_CHANNEL)
		rig__events_take_locked(loop);
	for (i = 0; i < max && loop->news.next != &loop->news; i++) {
		n = container_of(loop->news.next, struct rig__news, link);
		rig__list_del(&n->link);
		/* A ring's news or a connection's end, listed before the
		 * application closed its queue pair: nothing of it is the
		 * application's any more (its memory lives until the close's
		 * news is handed out, and events_forget unlinks these). */
		if ((n->what.news == RIG_NEWS_RING || n->what.news == RIG_NEWS_GONE) &&
		    __atomic_load_n(&rig__qp(n->what.qp)->closing, __ATOMIC_ACQUIRE)) {
			i--;
			continue;
		}
		if (probe_news(loop, n)) {
			arm(rig__qp(n->what.qp), RIG_SEND);
			i--;
			continue;
		}
		ready[i] = n->what;
		/* A queue pair's news carries its cookie as it is now. */
		if (n->what.news == RIG_NEWS_RING || n->what.news == RIG_NEWS_GONE)
			ready[i].cookie = __atomic_load_n(&rig__qp(n->what.qp)->cookie,
							   __ATOMIC_RELAXED);
		if (n->what.news == RIG_NEWS_RING)
			arm(rig__qp(n->what.qp), n->what.side);
		if (n->handed)
			n->handed(n);
	}
	/* News or rdma_cm events left for later, or handshake messages
	 * owed for news just handed out (conn.c): a fresh wakeup brings the
	 * application's poll back for them (a multishot poll fires on
	 * wakeups, not on a level), so it may return to its other I/O
	 * instead of calling again at once. The eventfd is then not read
	 * first (on_done would, the list being empty): the write wakes the
	 * poll whatever its count, and the count is read once nothing waits.
	 * Otherwise as before, checked again after on_done: another thread
	 * may set cm_owed meanwhile (rig__loop_wake), and find the eventfd
	 * still signalled, so write nothing. */
	if (backlog || loop->news.next != &loop->news ||
	    __atomic_load_n(&loop->cm_owed, __ATOMIC_ACQUIRE)) {
		eventfd_write(loop->ready_efd, 1);
		loop->ready_signalled = true;
	} else {
		on_done(loop->watcher);
		if (__atomic_load_n(&loop->cm_owed, __ATOMIC_ACQUIRE)) {
			eventfd_write(loop->ready_efd, 1);
			loop->ready_signalled = true;
		}
	}
	RIG_PROBE(loop_handout, loop->id, i, (int)(backlog || loop->news.next != &loop->news));
	pthread_mutex_unlock(&loop->lock);
	feed_handed(ready, i);
	return i;
}

RIG_EXPORT int rig_uring_handle(struct io_uring *ring, struct rig_loop *loop,
				const struct io_uring_cqe *cqe,
				struct rig_ready *ready, int max)
{
	int ret;

	if (!ring || !loop)
		return rig__fail(EINVAL, "rig_uring_handle: NULL argument");
	/* A multishot poll that ended (no F_MORE) is queued again, unless it
	 * ended in an error: the application cancelled it, or it cannot go
	 * on. Queued again, it would end the same way, over and over. */
	if (cqe && !(cqe->flags & IORING_CQE_F_MORE)) {
		if (cqe->res < 0)
			return watch_ended(loop, cqe->res);
		/* No SQE free: submitting the application's own would be
		 * deciding for it, as liburing's helpers never do. The watch
		 * ends instead; once it has submitted, rig_uring_watch starts
		 * it again, and the news waiting meanwhile is not lost (its
		 * eventfd keeps the loop's fd readable). */
		ret = queue_poll(ring, loop, cqe->user_data);
		if (ret) {
			pthread_mutex_lock(&loop->lock);
			loop->watched = false;
			pthread_mutex_unlock(&loop->lock);
			return rig__fail(EBUSY, "rig_uring_handle: the loop's poll ended and the "
					 "io_uring has no free SQE to queue it again; the loop is no "
					 "longer watched: submit, then call rig_uring_watch again");
		}
	}
	return rig_loop_handle(loop, ready, max);
}
