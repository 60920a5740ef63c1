/* SPDX-License-Identifier: MIT */
/*
 * What drives the handshakes' steps (conn.h). A loop's connections get
 * their events from the loop's rdma_cm channel, through the consumer
 * events.c calls on the loop's thread for each pass (rig_loop_handle,
 * rig_nic_events): the events a wait kept, the messages owed for news
 * handed out, the channel's events, each listener's turn, the dials
 * whose slot came free, and the deadlines. rig_dial and rig_accept take
 * the same steps from a channel of their own, inline (drive_pump); a
 * connection they made moves to the loop's channel once up, so that the
 * loop hears when its peer leaves.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"

static void conn_event(struct rig_loop *loop, struct rdma_cm_event *raw)
{
	struct cm_ev ev;

	(void)loop;
	handshake_take_event(raw, &ev);
	handshake_step(&ev);
}

/* A wait read @raw (T3: it takes no step): a peer that left fails its
 * queue pair's record at once; the loop takes the step later. */
static void conn_note(struct rig_loop *loop, struct rdma_cm_event *raw)
{
	struct kept *k = malloc(sizeof(*k));
	struct conn *c;

	if (!k) {
		/* Taking the step now beats losing the event. */
		conn_event(loop, raw);
		return;
	}
	handshake_take_event(raw, &k->ev);
	c = k->ev.type == RDMA_CM_EVENT_CONNECT_REQUEST ? NULL : k->ev.context;
	if (c && c->kind == CM_CONN && c->state == CONN_UP && handshake_departure(k->ev.type))
		rig__events_fail_qp(c->qp, handshake_departure_err(k->ev.type),
				    handshake_departure_why(k->ev.type));
	rig__list_add(loop->cm_kept.prev, &k->link);
}

static void conn_replay(struct rig_loop *loop)
{
	while (loop->cm_kept.next != &loop->cm_kept) {
		struct kept *k = container_of(loop->cm_kept.next, struct kept, link);

		rig__list_del(&k->link);
		handshake_step(&k->ev);
		free(k);
	}
	handshake_pay_owed(loop);
}

/* The loop closes (its helper has stopped): everything of ours in it. */
static void conn_close(struct rig_loop *loop)
{
	struct rig_listener *l;

	while (loop->listeners.next != &loop->listeners) {
		l = container_of(loop->listeners.next, struct rig_listener, link);
		l->ops->drop(l);
	}
	while (loop->handshakes.next != &loop->handshakes)
		conn_end(container_of(loop->handshakes.next, struct conn, link), -ECONNABORTED);
	id_forget_kept(loop, NULL);
}

/* Each pass, after the loop's own channel: each listener's turn (the
 * requests waiting at a loop's own, the shared ones' requests and what
 * other loops handed this one), then the dials whose slot came free in
 * this pass or since the last. */
static bool conn_turn(struct rig_loop *loop, int64_t end)
{
	struct rig__list *l, *next;
	bool more = false;

	__atomic_add_fetch(&loop->cm_turns, 1, __ATOMIC_RELEASE);
	for (l = loop->listeners.next; l != &loop->listeners; l = next) {
		struct rig_listener *p = container_of(l, struct rig_listener, link);

		next = l->next;
		if (p->ops->turn(p, end))
			more = true;
	}
	handshake_dials_next(loop);
	return more;
}

static const struct rig__cm_consumer consumer = {
	conn_event, conn_note, conn_replay, handshake_deadlines, conn_close, conn_turn
};

/* The loop's rdma_cm channel, made on first use with our consumer; 0 or
 * -errno. cm_lock held. */
int drive_channel(struct rig_loop *loop)
{
	return rig__events_cm_channel(loop, &consumer);
}

/* The longest single poll() of drive_pump(): time left beyond it is
 * waited in more turns, so no bound overflows poll's int of ms. */
#define RIG_CM_POLL_MAX_MS (3600 * 1000)

/* Takes @ch's pending events as steps, under cm_lock; with none, waits
 * for one until @deadline. 0, or -ETIMEDOUT when nothing came by then. */
int drive_pump(struct rig_loop *loop, struct rdma_event_channel *ch, int64_t deadline,
	       const char *step_name)
{
	struct pollfd pfd = { ch->fd, POLLIN, 0 };
	struct rdma_cm_event *ev;
	int64_t left, ms;
	int n = 0;

	for (;;) {
		pthread_mutex_lock(&loop->cm_lock);
		while (!rdma_get_cm_event(ch, &ev)) {
			conn_event(loop, ev);
			n++;
		}
		pthread_mutex_unlock(&loop->cm_lock);
		if (n)
			return 0;
		left = deadline - rig__now_ns();
		if (left <= 0)
			return rig__fail(ETIMEDOUT, "%s: no answer in time", step_name);
		ms = left / 1000000 + 1;
		if (poll(&pfd, 1, (int)(ms < RIG_CM_POLL_MAX_MS ? ms : RIG_CM_POLL_MAX_MS)) < 0 &&
		    errno != EINTR)
			return rig__fail(errno, "%s: poll: %s", step_name, strerror(errno));
	}
}

/* A connection up on a channel of its own moves to its loop's, where the
 * loop hears of its peer leaving. cm_lock held. */
int drive_move_to_loop(struct conn *c)
{
	struct rig_loop *loop = c->loop;
	int ret;

	ret = drive_channel(loop);
	if (!ret && rdma_migrate_id(c->id, loop->cm))
		ret = rig__fail(errno, "%s: rdma_migrate_id: %s", step_name(c), strerror(errno));
	if (!ret)
		c->blocking = false;
	return ret;
}
