/* SPDX-License-Identifier: MIT */
/*
 * A loop's own listener (rig_loop_listen) and rig_listen's, whose
 * connections rig_accept takes (conn.h). A listener keeps at most
 * RIG_CM_HANDSHAKES handshakes under way (its turns, conn.c); a loop's
 * lets up to RIG_CM_WAITING requests beyond them wait for a turn, oldest
 * first, while its handshakes come up, and turns the rest away (the
 * dialer may try again). rig_listen's turns every request beyond them
 * away at once, and rig_accept reports each. All under the loop's
 * cm_lock.
 */
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "probes.h"

void listen_init(struct rig_listener *l, const struct listener_ops *ops,
		 struct rig_loop *loop, uint64_t cookie)
{
	l->kind = CM_LISTENER;
	l->ops = ops;
	l->head = l;
	l->loop = loop;
	l->cookie = cookie;
	rig__list_init(&l->link);
	rig__list_init(&l->half_open);
	rig__list_init(&l->accepted);
	rig__list_init(&l->waiting);
}

/* Keeps a request for its turn at @l, a loop's own listener, if fewer
 * than RIG_CM_WAITING wait. Its id's events, until then, find no
 * context and are acked. A dialer that gives up meanwhile is not heard
 * of (no event of its REJ reached the listener on Linux 6.1, tested):
 * its request is answered for nobody at its turn, and dropped at the
 * handshake's bound. */
static bool wait_turn(struct rig_listener *l, const struct cm_ev *ev)
{
	struct handoff *h;

	if (l->blocking || l->n_waiting >= RIG_CM_WAITING || !(h = malloc(sizeof(*h))))
		return false;
	*h = (struct handoff){ .part = l, .ev = *ev, .at = rig__now_ns() };
	ev->id->context = NULL;
	rig__list_add(l->waiting.prev, &h->link);
	__atomic_add_fetch(&l->n_waiting, 1, __ATOMIC_RELAXED);
	handshake_rearm(l->loop);
	return true;
}

/*
 * A new request on @l: answer it, let it wait, or reject it. @turn: it
 * holds one of @l's head's turns already (a shared listener's, taken by
 * the loop that read it); else it takes one here if one is free. The
 * connection made holds the turn until its handshake ends.
 */
static void accept_request(struct rig_listener *l, const struct cm_ev *ev, bool turn)
{
	const char *step = l->blocking ? "rig_accept" : "rig_loop_listen";
	struct rig_loop *loop = l->loop;
	struct rig_cm_sink peer_sink;
	struct rig_endpoint peer;
	uint8_t peer_mtu;
	struct conn *c;
	int form, ret;

	form = rig_cm_parse_sink(ev->priv, ev->priv_len, &peer, &peer_mtu, &peer_sink);
	ret = form < 0 ? form : route_same_device(loop->nic, ev->id, step);
	/* Shed load: a flood of requests costs a reject each, not a queue
	 * pair each, beyond those a loop's listener lets wait. */
	if (!ret && !turn && !(turn = turn_take(l->head))) {
		if (wait_turn(l, ev))
			return;
		ret = rig__fail(EAGAIN, "%s: %u handshakes under way already", step,
				RIG_CM_HANDSHAKES);
	}
	c = ret ? NULL : conn_new(loop, l->blocking, l->cookie);
	if (!c) {
		l->rejected = ret ? ret : -ENOMEM;
		if (turn)
			turn_give(l->head);
		/* Another loop may have read it: its events are in this one's
		 * channel. */
		id_forget_kept(loop, ev->id);
		id_refuse(loop, ev->id);
		return;
	}
	c->listener = l;
	c->accepting = true;
	c->id = ev->id;
	c->id->context = c;
	c->peer = peer;
	c->peer_mtu = peer_mtu;
	c->peer_form = (uint8_t)form;
	c->peer_sink = peer_sink;
	c->may_be_local = route_peer_may_be_local(c);
	/* No bound while its queue pair is made: that is our own work, and
	 * RIG_CM_HANDSHAKES bounds how much of it may wait. */
	c->deadline = INT64_MAX / 2;
	RIG_PROBE(conn_step, (uintptr_t)c, 1, rdma_event_str(ev->type), "NEW", ev->status);
	if (l->blocking)
		conn_set_home(c, HOME_HALF_OPEN, &l->half_open);
	else
		conn_set_home(c, HOME_HANDSHAKE, &loop->handshakes);
	handshake_off_loop(c, CONN_MAKING, handshake_make_and_connect,
			   handshake_accept_answer);
}

/* A request that holds a turn of @l's shared listener already. */
void listen_request(struct rig_listener *l, const struct cm_ev *ev)
{
	accept_request(l, ev, true);
}

static void own_request(struct rig_listener *l, const struct cm_ev *ev)
{
	accept_request(l, ev, false);
}

/* Requests waiting at @l, a loop's own listener, take the turns free,
 * oldest first, once those past their wait (wait_end_of) are rejected:
 * a flood's requests do not take the turns its dropped handshakes free.
 * Every pass of the loop comes here: with none waiting, it costs nothing. */
static bool admit(struct rig_listener *l, int64_t end)
{
	int64_t now;
	struct handoff *h;
	bool late, turn = false;

	(void)end;
	if (l->waiting.next == &l->waiting)
		return false;
	now = rig__now_ns();
	while (l->waiting.next != &l->waiting) {
		h = container_of(l->waiting.next, struct handoff, link);
		late = wait_end_of(l, h->at) <= now;
		if (!late && !(turn = turn_take(l)))
			break;
		rig__list_del(&h->link);
		__atomic_sub_fetch(&l->n_waiting, 1, __ATOMIC_RELAXED);
		if (!late) {
			accept_request(l, &h->ev, turn);
		} else {
			rig__fail(ECONNREFUSED, "rig_loop_listen: no handshake came up in %d ms",
				  RIG_CM_HALF_OPEN_MS);
			id_refuse(l->loop, h->ev.id);
		}
		free(h);
	}
	handshake_rearm(l->loop);
	return false;
}

/* Rejects the requests waiting at @head: it closes. A shared listener's
 * are of its own channel (its head has no loop). The waiting list's
 * lock held. */
void listen_turn_away(struct rig_listener *head)
{
	struct handoff *h;

	while (head->waiting.next != &head->waiting) {
		h = container_of(head->waiting.next, struct handoff, link);
		rig__list_del(&h->link);
		id_refuse(head->loop, h->ev.id);
		free(h);
	}
	__atomic_store_n(&head->n_waiting, 0, __ATOMIC_RELAXED);
}

/* Closes @l with its handshakes under way and the connections rig_accept
 * never took. Once its id is destroyed, the kernel has dropped the
 * requests still queued for it. */
static void listener_close(struct rig_listener *l)
{
	struct rig_loop *loop = l->loop;
	struct rig__list *e, *next;

	for (e = loop->handshakes.next; e != &loop->handshakes; e = next) {
		struct conn *c = container_of(e, struct conn, link);

		next = e->next;
		if (c->listener == l)
			conn_fail(c, ECONNABORTED);	/* the helper drops it if busy */
	}
	while (l->half_open.next != &l->half_open)
		conn_fail(container_of(l->half_open.next, struct conn, link), ECONNABORTED);
	while (l->accepted.next != &l->accepted)
		conn_end(container_of(l->accepted.next, struct conn, link), -ECONNABORTED);
	listen_turn_away(l);
	id_forget_kept(loop, l->id);
	rig__list_del(&l->link);
	rdma_destroy_id(l->id);
	if (l->blocking)
		rdma_destroy_event_channel(l->ch);
	free(l);
}

static int own_close(struct rig_listener *l)
{
	struct rig_loop *loop = l->loop;

	pthread_mutex_lock(&loop->cm_lock);
	listener_close(l);
	pthread_mutex_unlock(&loop->cm_lock);
	return 0;
}

/* A turn came free at a loop's own listener: its loop's next pass
 * admits the requests waiting (admit). */
static void own_turn_freed(struct rig_listener *head)
{
	rig__loop_wake(head->loop);
}

static const struct listener_ops own_ops = {
	.request = own_request,
	.turn = admit,
	.drop = listener_close,
	.close = own_close,
	.turn_freed = own_turn_freed,
};

static int listen_on(struct rig_loop *loop, const char *addr, uint16_t port,
		     bool blocking, uint64_t cookie, struct rig_listener **out)
{
	const char *step = blocking ? "rig_listen" : "rig_loop_listen";
	struct sockaddr_storage ss;
	struct rig_listener *l;
	int ret;

	ret = route_sockaddr(addr, port, &ss);
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l)
		return rig__fail(ENOMEM, "%s: out of memory", step);
	listen_init(l, &own_ops, loop, cookie);
	l->blocking = blocking;
	pthread_mutex_lock(&loop->cm_lock);
	ret = drive_channel(loop);
	if (ret)
		goto out_free;
	if (blocking) {
		ret = rig__events_new_cm_channel(&l->ch);
		if (ret)
			goto out_free;
	} else {
		l->ch = loop->cm;
	}
	if (rdma_create_id(l->ch, &l->id, l, RDMA_PS_TCP)) {
		ret = rig__fail(errno, "%s: rdma_create_id: %s", step, strerror(errno));
		goto out_channel;
	}
	if (rdma_bind_addr(l->id, (struct sockaddr *)&ss)) {
		ret = rig__fail(errno, "%s: rdma_bind_addr(%s:%u): %s", step, addr, port,
				strerror(errno));
		goto out_id;
	}
	/* Bound to the wildcard, the id has no device yet: it listens on
	 * every one, and a request that comes to another device than the
	 * NIC's is rejected (accept_request). */
	ret = route_wildcard(&ss) ? 0 : route_same_device(loop->nic, l->id, step);
	if (ret)
		goto out_id;
	if (rdma_listen(l->id, RIG_CM_BACKLOG)) {
		ret = rig__fail(errno, "%s: rdma_listen(%s:%u): %s", step, addr, port,
				strerror(errno));
		goto out_id;
	}
	rig__list_add(&loop->listeners, &l->link);
	pthread_mutex_unlock(&loop->cm_lock);
	*out = l;
	return 0;

out_id:
	rdma_destroy_id(l->id);
out_channel:
	if (blocking)
		rdma_destroy_event_channel(l->ch);
out_free:
	pthread_mutex_unlock(&loop->cm_lock);
	free(l);
	return ret;
}

RIG_EXPORT __cold int rig_loop_listen(struct rig_loop *loop, const char *addr, uint16_t port,
				      uint64_t cookie, struct rig_listener **out)
{
	if (!loop || !out)
		return rig__fail(EINVAL, "rig_loop_listen: NULL argument");
	return listen_on(loop, addr, port, false, cookie, out);
}

RIG_EXPORT __cold int rig_listen(struct rig_nic *nic, const char *addr, uint16_t port,
				 struct rig_listener **out)
{
	if (!nic || !out)
		return rig__fail(EINVAL, "rig_listen: NULL argument");
	return listen_on(nic->own, addr, port, true, 0, out);
}

RIG_EXPORT int rig_listener_fd(const struct rig_listener *l)
{
	return l ? l->ch->fd : rig__fail(EINVAL, "rig_listener_fd: NULL listener");
}

RIG_EXPORT __cold int rig_listener_close(struct rig_listener *l)
{
	if (!l)
		return rig__fail(EINVAL, "rig_listener_close: NULL listener");
	return l->ops->close(l);
}

/* rig_listen's handshakes past their bound are dropped. */
static void drop_late(struct rig_listener *l, int64_t now)
{
	struct rig__list *e, *next;

	for (e = l->half_open.next; e != &l->half_open; e = next) {
		struct conn *c = container_of(e, struct conn, link);

		next = e->next;
		if (c->deadline <= now)
			conn_fail(c, ETIMEDOUT);
	}
}

/* One turn of rig_accept under cm_lock: a connection to hand out (1), a
 * rejected request to report (-errno), or the time to wait until (0). */
static int accept_turn(struct rig_listener *l, int64_t deadline, struct rig_qp **out,
		       int64_t *wait_until)
{
	struct rig__list *e;
	struct conn *c;
	int ret;

	drop_late(l, rig__now_ns());
	if (l->accepted.next != &l->accepted) {
		c = container_of(l->accepted.next, struct conn, link);
		conn_set_home(c, HOME_NONE, NULL);
		ret = drive_move_to_loop(c);
		if (ret) {
			conn_end(c, ret);
			return ret;
		}
		*out = &c->qp->pub;
		return 1;
	}
	if (l->rejected) {
		ret = l->rejected;
		l->rejected = 0;
		return rig__fail(-ret, "rig_accept: request rejected: %s", rig_errmsg());
	}
	/* Past the caller's bound, a handshake under way still gets its own. */
	*wait_until = deadline;
	for (e = l->half_open.next; e != &l->half_open; e = e->next) {
		c = container_of(e, struct conn, link);
		if (c->deadline > *wait_until)
			*wait_until = c->deadline;
	}
	return 0;
}

RIG_EXPORT __cold int rig_accept(struct rig_listener *l, int64_t us, struct rig_qp **out)
{
	int64_t deadline, wait_until = 0;
	int ret;

	if (!l || !out || us < 0)
		return rig__fail(EINVAL, "rig_accept: %s", us < 0 ? "negative time" : "NULL argument");
	if (!l->blocking)
		return rig__fail(EINVAL, "rig_accept: the listener's loop accepts for it");
	deadline = route_deadline_after(us);
	for (;;) {
		pthread_mutex_lock(&l->loop->cm_lock);
		ret = accept_turn(l, deadline, out, &wait_until);
		pthread_mutex_unlock(&l->loop->cm_lock);
		if (ret)
			return ret < 0 ? ret : 0;
		ret = drive_pump(l->loop, l->ch, wait_until, "waiting for a connection");
		if (ret)
			return ret;
	}
}
