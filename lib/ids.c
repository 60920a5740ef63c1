/* SPDX-License-Identifier: MIT */
/*
 * rdma_cm ids (conn.h): who destroys them and where, and the events kept
 * for them that go with them. All with the loop's cm_lock held.
 *
 * An id is destroyed off the loop. rdma_destroy_id waits in the kernel
 * for the message it sends (the REJ of a dropped handshake, a shed
 * request's REJ): under a busy host, tens of milliseconds each, and a
 * flood sheds hundreds in one turn. The loop's helper destroys the ids
 * of the loop's own channel, which outlives the helper (rig__loop_free);
 * their events find no context (an id leaves here with none) and are
 * acked at once, so the destroy, which waits for their acks, waits for
 * no lock.
 */
#include <stdlib.h>

#include "conn.h"

/* Ids a loop's helper may have yet to destroy; beyond, the loop destroys
 * them itself, and reads the requests of a flood no faster than it sheds
 * them. */
#define RIG_CM_DROPS 256

struct id_drop {
	struct rig__job job;
	struct rig_loop *loop;
	struct rdma_cm_id *id;
};

static void id_drop_work(struct rig__job *job)
{
	struct id_drop *d = container_of(job, struct id_drop, job);

	rdma_destroy_id(d->id);
	__atomic_sub_fetch(&d->loop->ids_dropping, 1, __ATOMIC_RELAXED);
	free(d);
}

/* Destroys @id: on the helper when it is of @loop's channel and the
 * helper has fewer than RIG_CM_DROPS, else here (@loop NULL: here). Its
 * context goes first: a request's id comes with its listener's, which
 * may be freed before an event of the id is read. A request not yet
 * answered is rejected (@reject) now: the helper destroys ids in turn,
 * each waiting for its message, and the peer of the last of a hundred
 * would hear seconds late. One answered is not (conn.replied): its
 * destroy sends the REJ. */
void id_drop(struct rig_loop *loop, struct rdma_cm_id *id, bool reject)
{
	bool ours = loop && id->channel == loop->cm;
	struct id_drop *d = NULL;

	id->context = NULL;
	if (ours &&
	    __atomic_add_fetch(&loop->ids_dropping, 1, __ATOMIC_RELAXED) <= RIG_CM_DROPS)
		d = malloc(sizeof(*d));
	if (d) {
		*d = (struct id_drop){ .job = { .work = id_drop_work, .quick = true },
				       .loop = loop, .id = id };
		if (reject)
			rdma_reject(id, NULL, 0);
		if (!rig__loop_defer(loop, &d->job))
			return;
		free(d);
	}
	if (ours)
		__atomic_sub_fetch(&loop->ids_dropping, 1, __ATOMIC_RELAXED);
	rdma_destroy_id(id);
}

/* Refuses a request: the REJ goes now, the id after (id_drop). */
void id_refuse(struct rig_loop *loop, struct rdma_cm_id *id)
{
	rdma_reject(id, NULL, 0);
	id_drop(loop, id, false);
}

/* Kept events that name @id (NULL: all) go: it is being destroyed. A
 * kept request's new id goes with its listener's id. */
void id_forget_kept(struct rig_loop *loop, const struct rdma_cm_id *id)
{
	struct rig__list *l, *next;

	for (l = loop->cm_kept.next; l != &loop->cm_kept; l = next) {
		struct kept *k = container_of(l, struct kept, link);

		next = l->next;
		if (id && k->ev.id != id && k->ev.listen_id != id)
			continue;
		if (k->ev.type == RDMA_CM_EVENT_CONNECT_REQUEST)
			id_refuse(loop, k->ev.id);
		rig__list_del(l);
		free(k);
	}
}

/*
 * A departed peer's answer (rdma_disconnect), sent on the loop's helper:
 * on bnxt_re and mlx5 it is a message through the CM, and a server's
 * clients often leave together. The id stays the connection's, to be
 * destroyed where its queue pair is (rig_qp_destroy on the caller's
 * thread, rig_qp_close on the helper), unless the connection ends while
 * the answer is owed: then id_take() leaves the id to the answer, which
 * destroys it once sent.
 */
struct answer {
	struct rig__job job;
	struct rig_loop *loop;
	struct rdma_cm_id *id;
	struct conn *c;		/* NULL once the connection ended: the id is ours */
};

static void answer_work(struct rig__job *job)
{
	struct answer *a = container_of(job, struct answer, job);
	bool ours;

	rdma_disconnect(a->id);
	pthread_mutex_lock(&a->loop->cm_lock);
	ours = !a->c;
	if (a->c)
		a->c->answer = NULL;
	pthread_mutex_unlock(&a->loop->cm_lock);
	if (ours)
		rdma_destroy_id(a->id);
	free(a);
}

/* Answers the departed peer's disconnect request, so its side completes:
 * on the helper for a loop's connection, else here. */
void id_answer(struct conn *c)
{
	struct answer *a = c->blocking ? NULL : malloc(sizeof(*a));

	if (a) {
		*a = (struct answer){ .job = { .work = answer_work, .teardown = true },
				      .loop = c->loop, .id = c->id, .c = c };
		if (!rig__loop_defer(c->loop, &a->job)) {
			c->answer = a;
			return;
		}
		free(a);
	}
	rdma_disconnect(c->id);
}

/* Takes @c's id from it, with no context and nothing kept for it; NULL
 * when it has none, or when an answer still owed will destroy it. An
 * event of the id that the loop reads from now on finds no connection
 * and is acked at once. */
struct rdma_cm_id *id_take(struct conn *c)
{
	struct rdma_cm_id *id = c->id;

	if (!id)
		return NULL;
	id_forget_kept(c->loop, id);
	id->context = NULL;
	c->id = NULL;
	if (!c->answer)
		return id;
	c->answer->c = NULL;
	c->answer = NULL;
	return NULL;
}
