/* SPDX-License-Identifier: MIT */
/*
 * rig_loops_listen (conn.h): one rdma_cm id listens, on a channel of its
 * own whose fd sits in the fd set of every member loop, with a timer's
 * and an eventfd's. Whichever member turns first reads a request
 * (shared_read), acks it, picks the member to serve it (hand), moves the
 * request's id to that loop's channel and puts the request in that
 * loop's inbox; the member takes it on its own next pass (take_inbox)
 * and from there on it is a request like rig_loop_listen's: the queue
 * pair is made in that loop, and its news and events are that loop's
 * only. No loop waits for another: a request never needs the thread of
 * any loop but the one it was handed to, and one left there
 * RIG_CM_STALL_MS is taken back by any member that turns (steal) and
 * handed again, and that loop is passed over until it makes a pass of
 * its own. Every member wakes for a request and the first to read it
 * wins: EPOLLEXCLUSIVE would wake one, which may be a loop whose thread
 * is busy elsewhere while the others sleep.
 *
 * The listener's turns (RIG_CM_HANDSHAKES) are its head's, over all
 * members: a request takes one as it is read, or waits for one at the
 * head (RIG_CM_WAITING), and a turn freed in any member wakes every
 * member (the eventfd), so that whichever turns next admits the oldest.
 *
 * Why not pick by a loop's last pass alone: a loop whose thread sleeps
 * because it has nothing to do has not turned for as long as one whose
 * thread is stuck; a request not taken in time tells them apart.
 *
 * Locks: a member's cm_lock, then the listener's lock, then a loop's
 * inbox_lock or its lock; another loop's cm_lock only by trylock.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "conn.h"

/* RIG_CM_STALL_MS (cm.h): a loop's turns come that late only when its
 * thread is busy elsewhere. */

struct shared {
	struct rig_listener head;	/* the application's handle */
	pthread_mutex_t lock;		/* all below, and the head's waiting */
	struct rig_listener **parts;	/* each member loop's part */
	int n;
	int rr;				/* the part picked last */
	int refs;			/* the handle's and each part's */
	bool closed;			/* rig_listener_close was called */
	/* The timer, in every member's fd set, fires at the earlier of two
	 * deadlines, each its own (0: none): the first request handed to a
	 * member that may be stalled, and the oldest waiting request's. */
	int timer_fd;
	int64_t stall_at, wait_at;
	int wake_fd;			/* in every member's set: a turn came free */
};

static void shared_timer(struct shared *g)
{
	struct itimerspec its = { 0 };
	int64_t at = g->stall_at;

	if (g->wait_at && (!at || g->wait_at < at))
		at = g->wait_at;
	its.it_value.tv_sec = at / 1000000000;
	its.it_value.tv_nsec = at % 1000000000;
	timerfd_settime(g->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* A loop passed over: a request waited in its inbox too long, and it has
 * made no pass since. */
static bool stalled(struct rig_loop *loop)
{
	return __atomic_load_n(&loop->cm_turns, __ATOMIC_ACQUIRE) ==
	       __atomic_load_n(&loop->cm_stalled, __ATOMIC_ACQUIRE);
}

/* Refuses a request nobody serves, and gives back its turn; events of
 * its id kept by @kept_in (its channel's loop, cm_lock held) go first. */
static void handoff_reject(struct shared *g, struct handoff *h, struct rig_loop *kept_in)
{
	if (kept_in)
		id_forget_kept(kept_in, h->ev.id);
	id_refuse(kept_in, h->ev.id);
	if (h->turn)
		turn_give(&g->head);
	free(h);
}

/*
 * Hands @h to the member loop with the fewest connections, the next in
 * turn among equals, passing over loops found stalled while another may
 * be picked, and parts leaving; refuses it when none is left or the
 * listener closed. The loop's share rises at once, so that the next
 * pick, on any thread, sees it. g->lock held.
 */
static void hand(struct shared *g, struct handoff *h)
{
	struct rig_listener *best = NULL, *p;
	unsigned held, best_held = 0;
	int pass, k, i, bi = 0;

	for (pass = 0; pass < 2 && !best && !g->closed; pass++)
		for (k = 1; k <= g->n; k++) {
			i = (g->rr + k) % g->n;
			p = g->parts[i];
			if (__atomic_load_n(&p->leaving, __ATOMIC_ACQUIRE) ||
			    (!pass && stalled(p->loop)))
				continue;
			held = __atomic_load_n(&p->loop->cm_held, __ATOMIC_RELAXED);
			if (!best || held < best_held) {
				best = p;
				best_held = held;
				bi = i;
			}
		}
	if (!best) {
		rig__fail(ECONNREFUSED, "rig_loops_listen: no member loop left to serve a request");
		handoff_reject(g, h, NULL);
		return;
	}
	/* rdma_migrate_id waits for the acks of the id's events: every
	 * one read was acked as it was read. */
	if (h->ev.id->channel != best->loop->cm && rdma_migrate_id(h->ev.id, best->loop->cm)) {
		rig__fail(errno, "rig_loops_listen: rdma_migrate_id: %s", strerror(errno));
		handoff_reject(g, h, NULL);
		return;
	}
	g->rr = bi;
	h->part = best;
	h->at = rig__now_ns();
	/* Handed in order: one armed already is the sooner. */
	if (!g->stall_at) {
		g->stall_at = h->at + RIG_CM_STALL_MS * 1000000ll;
		shared_timer(g);
	}
	share_take(best->loop);
	pthread_mutex_lock(&best->loop->inbox_lock);
	rig__list_add(best->loop->cm_inbox.prev, &h->link);
	pthread_mutex_unlock(&best->loop->inbox_lock);
	/* From here @h is the member's, which may have taken and freed it. */
	rig__loop_wake(best->loop);
}

/*
 * The stall deadline passed: requests that waited RIG_CM_STALL_MS in the
 * inbox of a member whose thread does not turn are taken back and handed
 * again, and that member is passed over until its next pass. A member
 * whose cm_lock is held is turning (or its helper is at work): its
 * requests are looked at again later. @self's cm_lock and g->lock held.
 */
static void steal(struct shared *g, struct rig_loop *self)
{
	int64_t now = rig__now_ns(), stale = RIG_CM_STALL_MS * 1000000ll, next = 0;
	struct rig__list got, *e, *after;
	struct rig_loop *loop;
	struct handoff *h;
	int i;

	rig__list_init(&got);
	g->stall_at = 0;
	for (i = 0; i < g->n; i++) {
		loop = g->parts[i]->loop;
		if (loop == self)
			continue;	/* its pass takes its inbox next */
		if (pthread_mutex_trylock(&loop->cm_lock)) {
			if (!next || now + stale < next)
				next = now + stale;
			continue;
		}
		pthread_mutex_lock(&loop->inbox_lock);
		for (e = loop->cm_inbox.next; e != &loop->cm_inbox; e = after) {
			after = e->next;
			h = container_of(e, struct handoff, link);
			if (h->part->group != g)
				continue;
			if (h->at + stale > now) {
				if (!next || h->at + stale < next)
					next = h->at + stale;
				continue;
			}
			rig__list_del(e);
			rig__list_add(got.prev, e);
			id_forget_kept(loop, h->ev.id);
			share_give(loop);
			__atomic_store_n(&loop->cm_stalled,
					 __atomic_load_n(&loop->cm_turns, __ATOMIC_ACQUIRE),
					 __ATOMIC_RELEASE);
		}
		pthread_mutex_unlock(&loop->inbox_lock);
		pthread_mutex_unlock(&loop->cm_lock);
	}
	while (got.next != &got) {
		h = container_of(got.next, struct handoff, link);
		rig__list_del(&h->link);
		hand(g, h);
	}
	if (next && (!g->stall_at || next < g->stall_at))
		g->stall_at = next;
	shared_timer(g);
}

/* The timer's deadline for the oldest request waiting. g->lock held. */
static void shared_wait_timer(struct shared *g)
{
	g->wait_at = wait_end(&g->head);
	shared_timer(g);
}

/* Keeps @h, which found no turn free, for its turn at the head, or
 * rejects it. g->lock held. */
static void shared_wait(struct shared *g, struct handoff *h)
{
	if (g->closed || g->head.n_waiting >= RIG_CM_WAITING) {
		rig__fail(EAGAIN, "rig_loops_listen: %s", g->closed ? "closed" :
			  "RIG_CM_HANDSHAKES under way already, RIG_CM_WAITING waiting");
		id_refuse(NULL, h->ev.id);	/* of the shared channel */
		free(h);
		return;
	}
	h->at = rig__now_ns();
	rig__list_add(g->head.waiting.prev, &h->link);
	__atomic_add_fetch(&g->head.n_waiting, 1, __ATOMIC_RELAXED);
	if (!g->wait_at)
		shared_wait_timer(g);
}

/* The requests waiting take the turns free in all members, oldest
 * first, once those past their wait are rejected (as a loop's own
 * listener admits). g->lock held. */
static void shared_admit(struct shared *g)
{
	int64_t now = rig__now_ns();
	struct handoff *h;
	bool late;

	while (g->head.waiting.next != &g->head.waiting) {
		h = container_of(g->head.waiting.next, struct handoff, link);
		late = wait_end_of(&g->head, h->at) <= now;
		if (!late && !(h->turn = turn_take(&g->head)))
			break;
		rig__list_del(&h->link);
		__atomic_sub_fetch(&g->head.n_waiting, 1, __ATOMIC_RELAXED);
		if (!late) {
			hand(g, h);
			continue;
		}
		rig__fail(ECONNREFUSED, "rig_loops_listen: no handshake came up in %d ms",
			  RIG_CM_HALF_OPEN_MS);
		id_refuse(NULL, h->ev.id);	/* of the shared channel */
		free(h);
	}
	shared_wait_timer(g);
}

/* Reads @p's listener's requests and hands each to a member, within the
 * pass's budget; true if some may remain. @p's loop's cm_lock held. */
static bool shared_read(struct rig_listener *p, int64_t end)
{
	struct shared *g = p->group;
	struct rdma_cm_event *raw;
	struct handoff *h;
	uint64_t expired;
	eventfd_t freed;
	struct cm_ev ev;
	bool fired;

	fired = read(g->timer_fd, &expired, sizeof(expired)) == sizeof(expired);
	/* A turn freed anywhere: drained by whichever member reads it. */
	eventfd_read(g->wake_fd, &freed);
	if (fired || requests_wait(&g->head)) {
		pthread_mutex_lock(&g->lock);
		if (fired)
			steal(g, p->loop);
		shared_admit(g);
		pthread_mutex_unlock(&g->lock);
	}
	for (;;) {
		if (rig__now_ns() >= end)
			return true;
		if (rdma_get_cm_event(g->head.ch, &raw))
			return false;
		/* The listener's id may go (rig_listener_close) once this
		 * is acked: nothing of it is read after. */
		handshake_take_event(raw, &ev);
		if (ev.type != RDMA_CM_EVENT_CONNECT_REQUEST)
			continue;	/* the listener's own */
		h = calloc(1, sizeof(*h));
		if (!h) {
			rig__fail(ENOMEM, "rig_loops_listen: out of memory");
			id_refuse(NULL, ev.id);	/* of the shared channel */
			continue;
		}
		h->ev = ev;
		/* No connection yet: an event of the id before the serving
		 * loop makes one is dropped (step), and the handshake ends
		 * as that event would end it, or at its bound. */
		ev.id->context = NULL;
		pthread_mutex_lock(&g->lock);
		/* Over all members, as one listener: a turn, a wait or a
		 * reject. */
		h->turn = turn_take(&g->head);
		if (h->turn)
			hand(g, h);
		else
			shared_wait(g, h);
		pthread_mutex_unlock(&g->lock);
	}
}

/* Moves the requests handed to @loop for part @p from its inbox to @got,
 * in the order they came. */
static void inbox_take(struct rig_loop *loop, const struct rig_listener *p,
		       struct rig__list *got)
{
	struct rig__list *e, *after;

	rig__list_init(got);
	pthread_mutex_lock(&loop->inbox_lock);
	for (e = loop->cm_inbox.next; e != &loop->cm_inbox; e = after) {
		after = e->next;
		if (container_of(e, struct handoff, link)->part != p)
			continue;
		rig__list_del(e);
		rig__list_add(got->prev, e);
	}
	pthread_mutex_unlock(&loop->inbox_lock);
}

/* Takes what was handed to @p's loop for @p: each request is accepted
 * here as rig_loop_listen's loop accepts, with the turn it holds. Its
 * share of the loop goes to the connection made of it. cm_lock held. */
static void take_inbox(struct rig_listener *p)
{
	struct rig_loop *loop = p->loop;
	struct rig__list got;
	struct handoff *h;

	inbox_take(loop, p, &got);
	while (got.next != &got) {
		h = container_of(got.next, struct handoff, link);
		rig__list_del(&h->link);
		share_give(loop);
		if (__atomic_load_n(&p->leaving, __ATOMIC_ACQUIRE)) {
			handoff_reject(p->group, h, loop);
			continue;
		}
		listen_request(p, &h->ev);
		free(h);
	}
}

static void shared_free(struct shared *g)
{
	listen_turn_away(&g->head);
	if (g->head.id)
		rdma_destroy_id(g->head.id);
	if (g->head.ch)
		rdma_destroy_event_channel(g->head.ch);
	if (g->timer_fd >= 0)
		close(g->timer_fd);
	if (g->wake_fd >= 0)
		close(g->wake_fd);
	pthread_mutex_destroy(&g->lock);
	free(g->parts);
	free(g);
}

/* The listener's fds in @loop's set, or out of it. */
static int watch(struct shared *g, struct rig_loop *loop)
{
	int ret = rig__events_watch_cm_fd(loop, g->head.ch->fd);

	if (!ret && (ret = rig__events_watch_cm_fd(loop, g->timer_fd)))
		rig__events_unwatch_fd(loop, g->head.ch->fd);
	if (!ret && (ret = rig__events_watch_cm_fd(loop, g->wake_fd))) {
		rig__events_unwatch_fd(loop, g->head.ch->fd);
		rig__events_unwatch_fd(loop, g->timer_fd);
	}
	return ret;
}

static void unwatch(struct shared *g, struct rig_loop *loop)
{
	rig__events_unwatch_fd(loop, g->head.ch->fd);
	rig__events_unwatch_fd(loop, g->timer_fd);
	rig__events_unwatch_fd(loop, g->wake_fd);
}

/*
 * Takes @p out of its listener, in @p's loop (cm_lock held): on that
 * loop's pass after rig_listener_close, or as the loop closes. Its
 * handshakes under way from the listener are dropped first, as a closing
 * listener drops them, while the listener surely lives (each gives its
 * turn back to it); what was handed to the loop goes to the other
 * members (refused once the listener closed); the last part out closes
 * the id, and the listener's memory goes with its last reference.
 */
static void part_drop(struct rig_listener *p)
{
	struct shared *g = p->group;
	struct rig_loop *loop = p->loop;
	struct rdma_cm_id *id = NULL;
	struct rig__list got, *e, *after;
	struct handoff *h;
	bool last;
	int i;

	for (e = loop->handshakes.next; e != &loop->handshakes; e = after) {
		struct conn *c = container_of(e, struct conn, link);

		after = e->next;
		if (c->listener == p)
			conn_fail(c, ECONNABORTED);	/* the helper drops it if busy */
	}
	pthread_mutex_lock(&g->lock);
	for (i = 0; i < g->n; i++)
		if (g->parts[i] == p) {
			g->parts[i] = g->parts[--g->n];
			break;
		}
	if (g->rr >= g->n)
		g->rr = 0;
	unwatch(g, loop);
	inbox_take(loop, p, &got);
	while (got.next != &got) {
		h = container_of(got.next, struct handoff, link);
		rig__list_del(&h->link);
		share_give(loop);
		id_forget_kept(loop, h->ev.id);
		hand(g, h);
	}
	if (!g->n) {
		listen_turn_away(&g->head);
		id = g->head.id;	/* nobody serves it any more */
		g->head.id = NULL;
	}
	last = --g->refs == 0;
	pthread_mutex_unlock(&g->lock);
	if (id)
		rdma_destroy_id(id);
	rig__list_del(&p->link);
	free(p);
	if (last)
		shared_free(g);
}

/* Each pass of @p's loop: a part leaving goes; else the listener's
 * requests, and what was handed to the loop for it. */
static bool part_turn(struct rig_listener *p, int64_t end)
{
	bool more;

	if (__atomic_load_n(&p->leaving, __ATOMIC_ACQUIRE)) {
		part_drop(p);
		return false;
	}
	more = shared_read(p, end);
	take_inbox(p);
	return more;
}

/* rig_listener_close of a shared listener: it stops listening now; each
 * member drops its part on its own next pass (woken for it). */
static int shared_close(struct rig_listener *head)
{
	struct shared *g = head->group;
	struct rdma_cm_id *id;
	bool last;
	int i;

	pthread_mutex_lock(&g->lock);
	g->closed = true;
	listen_turn_away(&g->head);
	id = g->head.id;
	g->head.id = NULL;
	for (i = 0; i < g->n; i++) {
		__atomic_store_n(&g->parts[i]->leaving, true, __ATOMIC_RELEASE);
		rig__loop_wake(g->parts[i]->loop);
	}
	last = --g->refs == 0;
	pthread_mutex_unlock(&g->lock);
	/* Waits only for the acks of requests a member has read, which it
	 * acks as it reads them. */
	if (id)
		rdma_destroy_id(id);
	if (last)
		shared_free(g);
	return 0;
}

/* A turn came free in some member while requests wait: every member
 * wakes, and the first to turn admits them (shared_read). */
static void shared_turn_freed(struct rig_listener *head)
{
	eventfd_write(head->group->wake_fd, 1);
}

/* The application's handle: no loop of its own reads it. */
static const struct listener_ops head_ops = {
	.close = shared_close,
	.turn_freed = shared_turn_freed,
};

/* A member loop's part: in the loop's listeners, no id of its own. */
static const struct listener_ops part_ops = {
	.turn = part_turn,
	.drop = part_drop,
};

/* Makes @loop a member of @g: its part, the listener's fds in its set,
 * and the part's reference. */
static int part_join(struct shared *g, struct rig_loop *loop)
{
	struct rig_listener *p = calloc(1, sizeof(*p));
	int ret;

	if (!p)
		return rig__fail(ENOMEM, "rig_loops_listen: out of memory");
	listen_init(p, &part_ops, loop, g->head.cookie);
	p->head = &g->head;
	p->group = g;
	p->ch = g->head.ch;
	pthread_mutex_lock(&loop->cm_lock);
	ret = drive_channel(loop);
	if (!ret)
		ret = watch(g, loop);
	if (!ret) {
		rig__list_add(&loop->listeners, &p->link);
		pthread_mutex_lock(&g->lock);
		g->parts[g->n++] = p;
		g->refs++;
		pthread_mutex_unlock(&g->lock);
	}
	pthread_mutex_unlock(&loop->cm_lock);
	if (ret)
		free(p);
	return ret;
}

/* Undoes part_join before the id listens: no request came. */
static void part_unjoin(struct shared *g, struct rig_listener *p)
{
	struct rig_loop *loop = p->loop;

	pthread_mutex_lock(&loop->cm_lock);
	unwatch(g, loop);
	rig__list_del(&p->link);
	pthread_mutex_unlock(&loop->cm_lock);
	g->refs--;
	free(p);
}

RIG_EXPORT __cold int rig_loops_listen(struct rig_loop *const *loops, int n, const char *addr,
				       uint16_t port, uint64_t cookie, struct rig_listener **out)
{
	struct sockaddr_storage ss;
	struct shared *g;
	int i, j, ret;

	if (!loops || !out || n < 1)
		return rig__fail(EINVAL, "rig_loops_listen: %s", n < 1 ? "no loop" : "NULL argument");
	for (i = 0; i < n; i++) {
		if (!loops[i])
			return rig__fail(EINVAL, "rig_loops_listen: loop %d is NULL", i);
		if (loops[i]->nic != loops[0]->nic)
			return rig__fail(EINVAL, "rig_loops_listen: loop %d is of %s, loop 0 of %s",
					 i, loops[i]->nic->name, loops[0]->nic->name);
		for (j = 0; j < i; j++)
			if (loops[j] == loops[i])
				return rig__fail(EINVAL, "rig_loops_listen: loops %d and %d are one",
						 j, i);
	}
	ret = route_sockaddr(addr, port, &ss);
	if (ret)
		return ret;
	g = calloc(1, sizeof(*g));
	if (!g || !(g->parts = calloc((size_t)n, sizeof(*g->parts)))) {
		free(g);
		return rig__fail(ENOMEM, "rig_loops_listen: out of memory");
	}
	listen_init(&g->head, &head_ops, NULL, cookie);
	g->head.group = g;
	g->refs = 1;		/* the handle's; each part adds its own */
	pthread_mutex_init(&g->lock, NULL);
	g->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	g->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (g->timer_fd < 0 || g->wake_fd < 0) {
		ret = rig__fail(errno, "rig_loops_listen: %s: %s",
				g->timer_fd < 0 ? "timerfd_create" : "eventfd", strerror(errno));
		goto out;
	}
	ret = rig__events_new_cm_channel(&g->head.ch);
	if (ret)
		goto out;
	if (rdma_create_id(g->head.ch, &g->head.id, &g->head, RDMA_PS_TCP)) {
		ret = rig__fail(errno, "rig_loops_listen: rdma_create_id: %s", strerror(errno));
		goto out;
	}
	if (rdma_bind_addr(g->head.id, (struct sockaddr *)&ss)) {
		ret = rig__fail(errno, "rig_loops_listen: rdma_bind_addr(%s:%u): %s", addr, port,
				strerror(errno));
		goto out;
	}
	ret = route_wildcard(&ss) ? 0 :
	      route_same_device(loops[0]->nic, g->head.id, "rig_loops_listen");
	/* Every member watches the channel before the id listens: a request
	 * never waits for a loop that is not there yet. */
	for (i = 0; !ret && i < n; i++)
		ret = part_join(g, loops[i]);
	if (!ret && rdma_listen(g->head.id, RIG_CM_BACKLOG))
		ret = rig__fail(errno, "rig_loops_listen: rdma_listen(%s:%u): %s", addr, port,
				strerror(errno));
	if (ret) {
		while (g->n)
			part_unjoin(g, g->parts[--g->n]);
		goto out;
	}
	*out = &g->head;
	return 0;
out:
	shared_free(g);
	return ret;
}
