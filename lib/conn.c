/* SPDX-License-Identifier: MIT */
/*
 * A connection's life (conn.h), and the counts it holds while its
 * handshake is under way. Each count is taken in one function here and
 * given back in one function here, and every way a handshake ends
 * (up, failed, dropped, its queue pair destroyed) goes through
 * handshake_end(), which gives back all of them:
 *
 *	count                    taken by          given back by
 *	a dial's place in the    dial_queue,       dial_leave: a slot freed
 *	loop's queue, or a slot  dial_start_turn   wakes the loop, whose next
 *	(loop->dials_queued,                       pass starts the next dial
 *	loop->dials)
 *	a turn at a listener     turn_take         turn_give: a turn freed
 *	(head->handshakes)                         tells the listener's kind
 *	                                           (ops->turn_freed), which
 *	                                           wakes whoever admits
 *	a share of its loop      share_take        share_give
 *	(loop->cm_held, read by rig_loops_listen's choice): held by a
 *	connection for its life (conn_new, conn_free), and by a request in a
 *	loop's inbox (listen_shared.c) until a connection takes its place
 *
 * conn_end() is the one way a connection goes, from wherever it is (see
 * enum conn_home). Its news (up, gone) sits in the loop's list, under the
 * loop's lock.
 */
#include <arpa/inet.h>
#include <stdlib.h>

#include "conn.h"
#include "probes.h"

/* ---------------------------------------------------------------- counts */

void share_take(struct rig_loop *loop)
{
	__atomic_add_fetch(&loop->cm_held, 1, __ATOMIC_RELAXED);
}

void share_give(struct rig_loop *loop)
{
	__atomic_sub_fetch(&loop->cm_held, 1, __ATOMIC_RELAXED);
}

/* One of @head's RIG_CM_HANDSHAKES turns, if one is free. Atomic: a
 * shared listener's members take them on their own threads. */
bool turn_take(struct rig_listener *head)
{
	if (__atomic_add_fetch(&head->handshakes, 1, __ATOMIC_RELAXED) <= RIG_CM_HANDSHAKES)
		return true;
	__atomic_sub_fetch(&head->handshakes, 1, __ATOMIC_RELAXED);
	return false;
}

/* A turn comes free: a request waiting for one takes it on the pass of
 * whichever loop admits for @head, woken by its kind. */
void turn_give(struct rig_listener *head)
{
	__atomic_sub_fetch(&head->handshakes, 1, __ATOMIC_RELAXED);
	if (requests_wait(head))
		head->ops->turn_freed(head);
}

bool requests_wait(const struct rig_listener *head)
{
	return __atomic_load_n(&head->n_waiting, __ATOMIC_RELAXED);
}

/* When the request waiting at @head since @at is turned away: once no
 * handshake of @head has come up for RIG_CM_HALF_OPEN_MS since it came.
 * A storm's handshakes come up one after another while the waiting wait
 * their turns, however many; a flood's are left half-done, and hold
 * every turn until their bound. */
int64_t wait_end_of(const struct rig_listener *head, int64_t at)
{
	int64_t up = __atomic_load_n(&head->last_up, __ATOMIC_RELAXED);

	return (up > at ? up : at) + RIG_CM_HALF_OPEN_MS * 1000000ll;
}

/* wait_end_of() the oldest request waiting at @head; 0 if none waits.
 * The waiting list's lock held. */
int64_t wait_end(const struct rig_listener *head)
{
	if (head->waiting.next == &head->waiting)
		return 0;
	return wait_end_of(head, container_of(head->waiting.next, struct handoff, link)->at);
}

/* A loop's dial waits its turn among the loop's dials. */
void dial_queue(struct conn *c)
{
	c->dial = DIAL_QUEUED;
	c->loop->dials_queued++;
}

/* A queued dial takes one of the loop's RIG_CM_DIALS slots, if free. */
bool dial_start_turn(struct conn *c)
{
	struct rig_loop *loop = c->loop;

	if (c->dial != DIAL_QUEUED || loop->dials >= RIG_CM_DIALS)
		return false;
	loop->dials_queued--;
	loop->dials++;
	c->dial = DIAL_UNDER_WAY;
	return true;
}

/* @c leaves the loop's dials: a slot it held starts the next dial on the
 * loop's next pass (drive.c), wherever it was freed. */
static void dial_leave(struct conn *c)
{
	struct rig_loop *loop = c->loop;
	enum dial_place was = c->dial;

	c->dial = DIAL_NONE;
	if (was == DIAL_QUEUED) {
		loop->dials_queued--;
	} else if (was == DIAL_UNDER_WAY) {
		loop->dials--;
		if (loop->dials_queued)
			rig__loop_wake(loop);
	}
}

/* The handshake is over, with @result (0: up): its counts go back, and
 * the conn_done probe tells its outcome once, with the peer's address
 * (the one dialed, or the one a request came from). */
static void handshake_end(struct conn *c, int result)
{
	struct rig_listener *l = c->listener;
	char peer[INET6_ADDRSTRLEN] = "";

	if (c->started) {
		if (RIG_PROBES_ON && c->id)
			route_peer_ip(c->id, peer);
		RIG_PROBE(conn_done, (uintptr_t)c, (int)c->accepting, result, peer,
			  rig__now_ns() - c->started);
		c->started = 0;
	}
	dial_leave(c);
	if (l) {
		c->listener = NULL;
		if (!result)
			__atomic_store_n(&l->head->last_up, rig__now_ns(), __ATOMIC_RELAXED);
		turn_give(l->head);
	}
}

/* ------------------------------------------------------------ lifetimes */

void conn_set_home(struct conn *c, enum conn_home home, struct rig__list *list)
{
	rig__list_del(&c->link);
	c->home = home;
	if (list)
		rig__list_add(list->prev, &c->link);
}

/* @c's queue pair leaves it: no owner, and off the loop's liveness list,
 * where the loop's pass may have put it (both under cm_lock, as the pass
 * tells owners of what it found). */
static struct rig__qp *qp_let_go(struct conn *c)
{
	struct rig__qp *qp = c->qp;

	c->qp = NULL;
	qp->owner = NULL;
	rig__loop_live_del(qp);
	return qp;
}

/* A queue pair freed off the loop. */
struct reap {
	struct rig__job job;
	struct rig__qp *qp;
};

static void reap_work(struct rig__job *job)
{
	struct reap *r = container_of(job, struct reap, job);

	rig__qp_free(r->qp);
	free(r);
}

/* Frees @c's queue pair, never handed out: on the helper thread for a
 * loop's connection (destroying one takes the kernel as long as making
 * it), else here. */
static void free_qp(struct conn *c)
{
	struct rig__qp *qp = qp_let_go(c);
	struct reap *r = c->blocking ? NULL : malloc(sizeof(*r));

	if (r) {
		*r = (struct reap){ .job = { .work = reap_work, .teardown = true }, .qp = qp };
		if (!rig__loop_defer(c->loop, &r->job))
			return;
		free(r);
	}
	rig__qp_free(qp);
}

/* Gives back what @c holds: its place in a list, its queue pair, its id
 * and what was kept for it. No helper works on it. */
static void conn_strip(struct conn *c)
{
	struct rdma_cm_id *id = id_take(c);

	conn_set_home(c, HOME_NONE, NULL);
	if (c->qp)
		free_qp(c);
	if (id)
		id_drop(c->loop, id, c->accepting && !c->replied);
}

static void conn_free(struct conn *c)
{
	if (c->counted)
		share_give(c->loop);
	free(c);
}

/* The one way a connection goes: its handshake ended with @result if it
 * had not, off whatever list holds it, its news withdrawn, its queue
 * pair and id destroyed, its memory freed. */
void conn_end(struct conn *c, int result)
{
	handshake_end(c, result);
	conn_strip(c);
	rig__loop_unpost(c->loop, &c->up);
	rig__loop_unpost(c->loop, &c->gone);
	conn_free(c);
}

/* A connection no handshake began for (its dial refused before any
 * step): it goes as conn_end() says, without a conn_done to tell. */
void conn_discard(struct conn *c, int result)
{
	c->started = 0;
	conn_end(c, result);
}

/* A failed dial's news was handed out (loop->lock held): conn_strip
 * left nothing else of it. */
static void free_when_handed(struct rig__news *n)
{
	conn_free(container_of(n, struct conn, up));
}

/* The rest of conn_fail(), once no helper works on @c. A loop's dial
 * reports its outcome as news; rig_dial's caller ends its own; an accept
 * that failed goes without a word. */
void conn_finish(struct conn *c)
{
	if (c->blocking && !c->accepting)
		return;
	if (c->accepting) {
		conn_end(c, c->result);
		return;
	}
	conn_strip(c);
	c->home = HOME_NEWS;
	c->up.what = (struct rig_ready){ NULL, RIG_SEND, RIG_NEWS_DIALED, c->result, c->cookie };
	c->up.handed = free_when_handed;
	rig__loop_post(c->loop, &c->up);
}

/* A connection that is up hears that its peer left, or its device went,
 * or its handshake failed once its queue pair was handed out: its queue
 * pair fails at once, as an async event fails it (F1, F6), and the loop
 * hands out RIG_NEWS_GONE. */
void conn_lose(struct conn *c, int err, const char *why)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	rig__events_fail_qp(c->qp, err, why);
	/* F2: the NIC runs nothing more of it; what it completed before
	 * counts, what it flushes now completes with the failure's error.
	 * Here, not on the helper with the peer's answer: rig may complete
	 * the due entries itself once it knows of the failure (F6), and
	 * their buffers are then the application's again. */
	ibv_modify_qp(c->qp->pub.ibqp, &attr, IBV_QP_STATE);
	c->gone.what.result = -err;
	rig__loop_post(c->loop, &c->gone);
}

/* Whether the application has @c's queue pair: its early news was handed
 * out. News still waiting is withdrawn: the handshake fails as if it had
 * never been posted. */
static bool app_has_qp(struct conn *c)
{
	if (!c->early)
		return false;
	c->early = false;
	if (rig__loop_unpost(c->loop, &c->up))
		return false;
	c->early = true;
	return true;
}

/* Why a handshake failed once its queue pair was the application's. */
static const char *owned_why(int err)
{
	switch (err) {
	case ETIMEDOUT:
		return "the peer did not finish the handshake in time (RIG_CM_HALF_OPEN_MS)";
	case ECONNABORTED:
		return "the listener closed before the handshake ended";
	case ECONNRESET:
		return "the peer left before the handshake ended";
	case ENODEV:
		return "the device went away (rdma_cm DEVICE_REMOVAL)";
	default:
		return "the handshake failed after the queue pair was handed out";
	}
}

/* The rest of conn_fail() once the application has the queue pair (its
 * early news was handed out): the queue pair fails as when the peer
 * leaves, and the application destroys it, and the connection with it.
 * The id goes now, as a dropped handshake's does: the peer hears the REJ
 * at once (id_drop). */
static void fail_owned(struct conn *c, int err)
{
	struct rdma_cm_id *id;

	handshake_end(c, -err);
	conn_set_home(c, HOME_NONE, NULL);
	c->state = CONN_UP;	/* no event comes: its id is gone */
	conn_lose(c, err, owned_why(err));
	id = id_take(c);
	if (id)
		id_drop(c->loop, id, c->accepting && !c->replied);
}

/* Ends a handshake that did not make it, with -@err; while the helper
 * works on it, the helper finishes. */
void conn_fail(struct conn *c, int err)
{
	if (app_has_qp(c)) {
		fail_owned(c, err);
		return;
	}
	handshake_end(c, -err);
	c->state = CONN_DONE;
	c->result = -err;
	conn_set_home(c, HOME_NONE, NULL);
	if (!c->in_job)
		conn_finish(c);
}

/*
 * The queue pair goes (rig_qp_destroy, rig_nic_close, rig_qp_close's
 * helper): so does its connection. The id is taken from it under
 * cm_lock, with no context left, and destroyed after: the loop's thread
 * takes cm_lock for each rdma_cm event, and a disconnect and a destroy
 * wait for the kernel (and its CM's messages to the peer). An event of
 * the id that the loop reads meanwhile finds no connection and is acked
 * at once, so the destroy, which waits for those acks, never waits for
 * the lock.
 */
static void release(struct rig__qp_owner *o)
{
	struct conn *c = container_of(o, struct conn, qp_owner);
	struct rig_loop *loop = c->loop;
	struct rdma_cm_id *id;
	bool established;

	pthread_mutex_lock(&loop->cm_lock);
	qp_let_go(c);		/* its destroyer frees it */
	established = c->established;
	/* The probe first, with the peer's address: the id goes next. */
	handshake_end(c, -ECONNABORTED);
	id = id_take(c);
	conn_end(c, -ECONNABORTED);
	pthread_mutex_unlock(&loop->cm_lock);
	if (!id)
		return;
	/* A handshake handed out early and never done is rejected by the
	 * id's destroy, as a dropped one: a disconnect there could make the
	 * destroy wait in the kernel. */
	if (established)
		rdma_disconnect(id);
	rdma_destroy_id(id);
}

/* A liveness probe found the peer's host gone: the queue pair failed
 * with -@error (-ETIMEDOUT) and its rings were told; the connection's
 * end is news, as when the peer leaves. cm_lock held. */
static void lost(struct rig__qp_owner *o, int error)
{
	struct conn *c = container_of(o, struct conn, qp_owner);

	if (c->gone.what.result)
		return;		/* told once */
	c->gone.what.result = -error;
	rig__loop_post(c->loop, &c->gone);
}

struct conn *conn_new(struct rig_loop *loop, bool blocking, uint64_t cookie)
{
	struct conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->kind = CM_CONN;
	c->loop = loop;
	c->blocking = blocking;
	c->cookie = cookie;
	/* A loop's connections count for rig_loops_listen's choice. */
	c->counted = !blocking;
	if (c->counted)
		share_take(loop);
	c->started = rig__now_ns();
	c->home = HOME_NONE;
	c->qp_owner.release = release;
	c->qp_owner.lost = lost;
	rig__list_init(&c->link);
	rig__list_init(&c->up.link);
	rig__list_init(&c->gone.link);
	return c;
}

/* The handshake is done: the queue pair is the application's now, or
 * rig_accept's to hand out. */
void conn_up(struct conn *c)
{
	struct rig_listener *l = c->listener;
	uint64_t cookie = l ? l->cookie : c->cookie;

	handshake_end(c, 0);
	c->state = CONN_UP;
	c->established = true;
	c->result = 0;
	/* An early one's owner and cookie were set before its news went
	 * out: the application may be destroying it now (release waits for
	 * cm_lock), or have set a cookie of its own. */
	if (!c->early) {
		c->qp->owner = &c->qp_owner;
		rig_qp_set_cookie(&c->qp->pub, cookie);
	}
	c->gone.what = (struct rig_ready){ &c->qp->pub, RIG_SEND, RIG_NEWS_GONE, 0, cookie };
	/* A peer that gave its MTU ("rig2") or its sink too ("rig3") takes
	 * liveness probes (rig(7) L1); one of rig 0.2 would refuse them.
	 * "rig3"'s write a byte into its sink; "rig2"'s stay as rig 0.3's
	 * (ring.c, rig__qp_probe). */
	if (c->peer_form >= 2) {
		c->qp->probe_sink = c->peer_form == 3;
		c->qp->probe_rkey = c->peer_sink.rkey;
		c->qp->probe_addr = c->peer_sink.addr;
		rig__loop_live_add(c->qp);
	}
	if (c->blocking && c->accepting) {
		conn_set_home(c, HOME_ACCEPTED, &l->accepted);
		return;
	}
	conn_set_home(c, HOME_NONE, NULL);
	if (c->blocking || c->early)
		return;		/* rig_dial returns it; the news went out */
	c->up.what = (struct rig_ready){ &c->qp->pub, RIG_SEND,
					 c->accepting ? RIG_NEWS_ACCEPTED : RIG_NEWS_DIALED,
					 0, cookie };
	rig__loop_post(c->loop, &c->up);
}

/* A loop's early news was handed out (the loop's lock held, on its
 * thread): its next pass pays what @c owes. */
static void early_handed(struct rig__news *n)
{
	struct conn *c = container_of(n, struct conn, up);

	__atomic_store_n(&c->handed, true, __ATOMIC_RELEASE);
	__atomic_store_n(&c->loop->cm_owed, true, __ATOMIC_RELEASE);
}

/* A loop's queue pair is at RTS: it is the application's now, before the
 * peer hears the handshake's next message (OWING). */
void conn_hand_early(struct conn *c)
{
	uint64_t cookie = c->accepting ? c->listener->cookie : c->cookie;

	c->state = CONN_OWING;
	c->early = true;
	/* The application's time, not the peer's: RIG_CM_HANDSHAKES bounds
	 * how many may wait for it. */
	c->deadline = INT64_MAX / 2;
	c->qp->owner = &c->qp_owner;
	rig_qp_set_cookie(&c->qp->pub, cookie);
	c->gone.what = (struct rig_ready){ &c->qp->pub, RIG_SEND, RIG_NEWS_GONE, 0, cookie };
	c->up.what = (struct rig_ready){ &c->qp->pub, RIG_SEND,
					 c->accepting ? RIG_NEWS_ACCEPTED : RIG_NEWS_DIALED,
					 0, cookie };
	c->up.handed = early_handed;
	rig__loop_post(c->loop, &c->up);
}
