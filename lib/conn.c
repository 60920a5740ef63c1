/* SPDX-License-Identifier: MIT */
/*
 * Connections by address (include/rig/cm.h): the layer above the queue
 * pair. rdma_cm carries the endpoints and resolves addresses; the queue
 * pair is rig's own, connected by rig_qp_connect, so its timeouts and
 * access rules are the same as for an endpoint exchanged any other way.
 *
 * The handshake, one step per rdma_cm event (conn_step()); no step waits:
 *
 *	state            side    takes                 then
 *	QUEUED           dial    (its turn came)       RESOLVING_ADDR
 *	RESOLVING_ADDR   dial    ADDR_RESOLVED         RESOLVING_ROUTE
 *	RESOLVING_ROUTE  dial    ROUTE_RESOLVED        MAKING, then CONNECTING
 *	CONNECTING       dial    CONNECT_RESPONSE      ESTABLISHING, then UP
 *	                                               (a loop's: OWING)
 *	MAKING           accept  (the request made it) ACCEPTING (a loop's: OWING)
 *	OWING            both    its news handed out   accept: ACCEPTING; dial: UP
 *	ACCEPTING        accept  ESTABLISHED           UP
 *	UP               both    DISCONNECTED, REJECTED, DEVICE_REMOVAL,
 *	                         CONNECT_ERROR, UNREACHABLE: the peer is gone;
 *	                         the helper answers it (answer())
 *
 * A loop's connection hands its queue pair out (RIG_NEWS_ACCEPTED or
 * RIG_NEWS_DIALED) as soon as it is at RTS, before the handshake's next
 * message: it OWES the peer that message (the answer, or the dialer's
 * RTU) until the loop's thread next takes its steps after the news was
 * handed out (pay_owed()). So the receives the application posted on
 * the news are in place before the peer can learn of the connection,
 * and so can send. rig_accept and rig_dial hand out a queue pair that is
 * up, as before. A handshake that fails once its news was handed out
 * fails the queue pair, which is the application's, as a peer that left
 * fails it, and the loop hands out RIG_NEWS_GONE (fail_owned()).
 *
 * Any other event before UP ends the handshake with its error (DONE). In
 * MAKING and ESTABLISHING the slow part (making a queue pair, taking it
 * to RTS) runs on the loop's helper thread (loop.c), which then takes
 * the next step under cm_lock; a step that fails meanwhile leaves the
 * helper to finish the drop. The loop's thread makes one control call
 * per event at most. A loop's connections get their events from the
 * loop's rdma_cm channel (events.c), their bounds run on the loop's
 * timer. rig_dial and rig_accept take the same steps from a channel of
 * their own, inline; a connection they made moves to the loop's channel
 * once up, so that the loop hears when its peer leaves.
 *
 * Where a connection is (conn.home), all under its loop's cm_lock:
 *	HANDSHAKE  in loop->handshakes: a loop's handshake under way
 *	HALF_OPEN  in its listener's half_open: rig_listen's, under way
 *	ACCEPTED   in its listener's accepted: up, not yet taken by rig_accept
 *	NONE       on no list: up and the application's (its queue pair's
 *	           release hook ends it), rig_dial's until it returns, or
 *	           the helper's until it finishes a step that failed
 *	NEWS       on no list: a loop's dial that failed, all it held given
 *	           back; its DIALED news frees it when handed out
 * Its news (up, gone) sits in the loop's list, under the loop's lock.
 * conn_end() is the one way a connection goes, from wherever it is.
 */
#include <arpa/inet.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include "internal.h"
#include "probes.h"

/* Address and route resolution: rdma_cm wants a bound of its own; the
 * caller's bound applies too. */
#define RIG_CM_RESOLVE_MS 2000
#define RIG_CM_BACKLOG 1024
/* A loop's dials under way at once; the rest wait their turn
 * (CONN_QUEUED) with an id and nothing more. Each under way costs a
 * queue pair made ahead of its answer: more would only wait on the
 * helper, and would take more of a listener's RIG_CM_HANDSHAKES. */
#define RIG_CM_DIALS 16
/* The loop's time one pass of conn_tick may take. */
#define RIG_CM_TICK_BUDGET_NS 5000000
/* Ids a loop's helper may have yet to destroy (drop_id); beyond, the
 * loop destroys them itself, and reads the requests of a flood no faster
 * than it sheds them. */
#define RIG_CM_DROPS 256

/* What an rdma_cm id's context points to. */
enum cm_kind { CM_LISTENER, CM_CONN };

enum conn_state {
	CONN_QUEUED,
	CONN_RESOLVING_ADDR,
	CONN_RESOLVING_ROUTE,
	CONN_MAKING,
	CONN_CONNECTING,
	CONN_ESTABLISHING,
	CONN_ACCEPTING,
	CONN_OWING,
	CONN_UP,
	CONN_DONE,
};

/* For the conn_step probe. */
static const char *const state_names[] = {
	[CONN_QUEUED] = "QUEUED",
	[CONN_RESOLVING_ADDR] = "RESOLVING_ADDR",
	[CONN_RESOLVING_ROUTE] = "RESOLVING_ROUTE",
	[CONN_MAKING] = "MAKING",
	[CONN_CONNECTING] = "CONNECTING",
	[CONN_ESTABLISHING] = "ESTABLISHING",
	[CONN_ACCEPTING] = "ACCEPTING",
	[CONN_OWING] = "OWING",
	[CONN_UP] = "UP",
	[CONN_DONE] = "DONE",
};

enum conn_home { HOME_NONE, HOME_HANDSHAKE, HOME_HALF_OPEN, HOME_ACCEPTED,
		 HOME_NEWS };

struct shared;

struct rig_listener {
	enum cm_kind kind;
	struct rig_loop *loop;
	struct rdma_cm_id *id;
	struct rdma_event_channel *ch;	/* rig_listen's own, or the loop's */
	bool blocking;			/* rig_listen: rig_accept takes them */
	uint64_t cookie;
	struct rig__list link;		/* in loop->listeners */
	/* rig_listen's: handshakes under way, and connections up that
	 * rig_accept has not handed out yet; -EPROTO once a request with
	 * garbage was rejected. */
	struct rig__list half_open, accepted;
	int rejected;
	unsigned handshakes;		/* under way, at most RIG_CM_HANDSHAKES */
	/* A loop's listener: requests beyond RIG_CM_HANDSHAKES waiting their
	 * turn, oldest first (handoffs; a shared listener's under its lock,
	 * its count atomic), and when a handshake of it last came up
	 * (atomic): the waiting go once none has for RIG_CM_HALF_OPEN_MS. */
	struct rig__list waiting;
	unsigned n_waiting;
	int64_t last_up;
	/* rig_loops_listen: the listener this is (the application's
	 * handle) or a member loop's part of (in that loop's listeners, no
	 * id of its own); a part is leaving (atomic) once the listener is
	 * closed, and its loop drops it on its next pass. */
	struct shared *group;
	bool leaving;
};

struct conn {
	enum cm_kind kind;
	struct rig_loop *loop;
	struct rdma_cm_id *id;
	struct rig_listener *listener;	/* the accepting side's, until up */
	bool accepting;
	bool blocking;			/* rig_dial's or rig_listen's */
	bool dialing;			/* counted in loop->dials */
	bool counted;			/* in loop->cm_held */
	struct sockaddr_storage dst;	/* a dial's, for its start */
	enum conn_state state;
	enum conn_home home;
	struct rig__list link;		/* in the list home names, if any */
	int result;			/* once CONN_DONE or CONN_UP */
	int64_t started;		/* for conn_done's probe; 0 once told */
	int64_t deadline;		/* while half-open */
	uint64_t cookie;
	struct rig__qp *qp;
	struct rig_endpoint peer;
	uint8_t peer_mtu;		/* its port's (enum ibv_mtu), 0: not given */
	/* The endpoint's GID is the address rdma_cm connected to, so the
	 * peer may be one of our own queue pairs (M4). */
	bool may_be_local;
	struct rig__qp_owner qp_owner;
	struct rig__news up, gone;	/* ACCEPTED or DIALED, then GONE */
	/* A loop's: its news went out before the handshake's end (OWING),
	 * and was handed out (set under the loop's lock by its thread); the
	 * answer it owes. */
	bool early;
	bool handed;
	uint8_t priv[RIG__CM_PRIVATE_MTU];
	bool established;		/* up() came: a disconnect ends it */
	/* The accepting side's answer went: its REP waits for the RTU,
	 * resent until the CM's retries run out. Only the id's destroy
	 * cancels it; after rdma_reject, the destroy waits for those
	 * retries (tens of seconds). */
	bool replied;
	/* A step's slow part and what follows it (cm_lock held); while
	 * in_job, the helper thread runs them and owns qp. */
	struct rig__job job;
	bool in_job;
	/* The departed peer's answer, while the helper owes it (gone()):
	 * the id is the answer's to destroy if the connection ends first. */
	struct answer *answer;
	int (*slow)(struct conn *c);
	void (*then)(struct conn *c, int ret);
};

/* What a step needs of an event, copied so the event can be acked first
 * (rdma_destroy_id waits for the acks of its events). The id's context
 * is copied too: once the event is acked, a connection's id may be
 * destroyed by the helper (release) and must not be read. */
struct cm_ev {
	enum rdma_cm_event_type type;
	int status;
	struct rdma_cm_id *id, *listen_id;
	void *context;
	uint8_t priv[64];
	size_t priv_len;
};

/* A request waiting its turn at a loop's listener, or handed from the
 * loop that read it to the one that serves it (rig_loops_listen). */
struct handoff {
	struct rig__list link;		/* in a listener's waiting, or a cm_inbox */
	struct rig_listener *part;	/* the serving loop's part */
	struct cm_ev ev;
	int64_t at;			/* when it came to wait, or was handed */
};

/* An event a wait read, kept for the loop (in loop->cm_kept). */
struct kept {
	struct rig__list link;
	struct cm_ev ev;
};

static const struct rig__cm_consumer consumer;
static void dials_next(struct rig_loop *loop);
static void shared_unreserve(struct shared *g);

/* The name a failure's message gives the call that drove it. */
static const char *step_name(const struct conn *c)
{
	if (c->accepting)
		return c->blocking ? "rig_accept" : "rig_loop_listen";
	return c->blocking ? "rig_dial" : "rig_loop_dial";
}

/* @us from now on the monotonic clock; @us >= 0. */
static int64_t deadline_after(int64_t us)
{
	if (us > INT64_MAX / 4000)
		return INT64_MAX / 2;
	return rig__now_ns() + us * 1000;
}

static int to_sockaddr(const char *addr, uint16_t port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *in = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (addr && inet_pton(AF_INET, addr, &in->sin_addr) == 1) {
		in->sin_family = AF_INET;
		in->sin_port = htons(port);
		return 0;
	}
	if (addr && inet_pton(AF_INET6, addr, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons(port);
		return 0;
	}
	return rig__fail(EINVAL, "'%s' is not a numeric IPv4 or IPv6 address",
			 addr ? addr : "(null)");
}

/* The id must sit on this NIC's device, or the endpoints would lie. */
static int same_device(const struct rig_nic *nic, const struct rdma_cm_id *id,
		       const char *step)
{
	const char *dev = id->verbs ? ibv_get_device_name(id->verbs->device) : "no device";

	if (id->verbs && !strcmp(dev, nic->name))
		return 0;
	return rig__fail(ENODEV, "%s: the address is on %s, not on %s", step, dev, nic->name);
}

/* RoCE's GID of an address: an IPv6 address is its own, an IPv4 one is
 * ::ffff:a.b.c.d. False for any other family. */
static bool gid_of_address(const struct sockaddr *sa, uint8_t gid[16])
{
	memset(gid, 0, 16);
	if (sa->sa_family == AF_INET) {
		gid[10] = gid[11] = 0xff;
		memcpy(gid + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(gid, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return true;
	}
	return false;
}

/*
 * M4 for a connection by address: whether the peer may be one of this
 * NIC's queue pairs. Its endpoint is its word. It must name the address
 * rdma_cm connected to (what the network delivered), and the queue pair
 * it names must have been made for the other end of this very connection
 * (its ports are ours, swapped): a process on this host connects from our
 * own address, and may name any queue pair of ours.
 */
static bool peer_may_be_local(struct conn *c)
{
	uint16_t ours = rdma_get_src_port(c->id), theirs = rdma_get_dst_port(c->id);
	struct rig_nic *nic = c->loop->nic;
	struct rig__list *l;
	uint8_t gid[16];
	bool found = false;

	if (!gid_of_address(rdma_get_peer_addr(c->id), gid) || memcmp(gid, c->peer.gid, 16) ||
	    !ours || !theirs)
		return false;
	pthread_mutex_lock(&nic->lock);
	for (l = nic->qps.next; l != &nic->qps && !found; l = l->next) {
		struct rig__qp *qp = container_of(l, struct rig__qp, link);

		found = qp->self.qp == c->peer.qp && qp->cm_port[0] == theirs &&
			qp->cm_port[1] == ours;
	}
	pthread_mutex_unlock(&nic->lock);
	return found;
}

/* The peer's address as rdma_cm connected to it ("198.18.0.2",
 * "fd00::2"), or "" for an address of another family; true if IPv6. */
static bool peer_ip(struct rdma_cm_id *id, char ip[INET6_ADDRSTRLEN])
{
	const struct sockaddr *sa = rdma_get_peer_addr(id);
	bool v6 = sa->sa_family == AF_INET6;

	if ((sa->sa_family != AF_INET && !v6) ||
	    !inet_ntop(sa->sa_family,
		       v6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
			  : (const void *)&((const struct sockaddr_in *)sa)->sin_addr,
		       ip, INET6_ADDRSTRLEN))
		ip[0] = 0;
	return v6;
}

/* "198.18.0.2:7471" or "[fd00::2]:7471": the peer's address and port as
 * rdma_cm connected to them, for rig_qp_peer and the failure's log line. */
static void peer_name(struct rdma_cm_id *id, char *out, size_t len)
{
	char ip[INET6_ADDRSTRLEN];
	bool v6 = peer_ip(id, ip);

	if (!ip[0]) {
		out[0] = 0;
		return;
	}
	snprintf(out, len, v6 ? "[%s]:%u" : "%s:%u", ip, ntohs(rdma_get_dst_port(id)));
}

/*
 * What rdma_cm resolved for the connection, as it would set it in the
 * RTR step: the index of the source GID, the traffic class (the ToS of
 * the id, or the device's default_roce_tos) and the hop limit. A port
 * with several addresses has a GID for each, and the peer may reach only
 * the one it connected to (another subnet, a VLAN kept for RoCE).
 */
static int resolved_route(struct conn *c, struct rig__route *r)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RTR };
	struct rig_nic *nic = c->loop->nic;
	union ibv_gid gid;
	int mask = 0;

	if (rdma_init_qp_attr(c->id, &attr, &mask))
		return rig__fail(errno, "%s: rdma_init_qp_attr: %s", step_name(c),
				 strerror(errno));
	if (!(mask & IBV_QP_AV) || !attr.ah_attr.is_global)
		return rig__fail(EPROTO, "%s: rdma_cm resolved no global route", step_name(c));
	/* The endpoint we sent names our address's GID; the packets must
	 * come from it. */
	if (ibv_query_gid(nic->ctx, nic->port, attr.ah_attr.grh.sgid_index, &gid) ||
	    memcmp(gid.raw, c->qp->self.gid, 16))
		return rig__fail(EPROTO, "%s: rdma_cm's source GID (index %u of %s port %u) "
				 "is not the GID of the connection's address",
				 step_name(c), attr.ah_attr.grh.sgid_index, nic->name, nic->port);
	*r = (struct rig__route){ .sgid_index = attr.ah_attr.grh.sgid_index,
				  .traffic_class = attr.ah_attr.grh.traffic_class,
				  .hop_limit = attr.ah_attr.grh.hop_limit,
				  .flow_label = attr.ah_attr.grh.flow_label,
				  .peer_mtu = c->peer_mtu };
	peer_name(c->id, r->peer, sizeof(r->peer));
	return 0;
}

static void conn_param(struct rdma_conn_param *p, const uint8_t *priv,
		       const struct rig__qp *qp)
{
	memset(p, 0, sizeof(*p));
	p->private_data = priv;
	p->private_data_len = RIG__CM_PRIVATE_MTU;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->qp_num = qp->pub.ibqp->qp_num;
	/* The CM exchanges these; rig_qp_connect sets the real ones. */
	p->responder_resources = 1;
	p->initiator_depth = 1;
}

/* ------------------------------------------------------------ lifetimes */

static void set_home(struct conn *c, enum conn_home home, struct rig__list *list)
{
	rig__list_del(&c->link);
	c->home = home;
	if (list)
		rig__list_add(list->prev, &c->link);
}

/* When the request waiting at @l since @at is turned away: once no
 * handshake of @l has come up for RIG_CM_HALF_OPEN_MS since it came. A
 * storm's handshakes come up one after another while the waiting wait
 * their turns, however many; a flood's are left half-done, and hold
 * every turn until their bound. */
static int64_t wait_end_of(const struct rig_listener *l, int64_t at)
{
	int64_t up = __atomic_load_n(&l->last_up, __ATOMIC_RELAXED);

	return (up > at ? up : at) + RIG_CM_HALF_OPEN_MS * 1000000ll;
}

/* wait_end_of() the oldest request waiting at @l; 0 if none waits. */
static int64_t wait_end(const struct rig_listener *l)
{
	if (l->waiting.next == &l->waiting)
		return 0;
	return wait_end_of(l, container_of(l->waiting.next, struct handoff, link)->at);
}

/* The earliest deadline of the loop's handshakes and of the requests
 * waiting at its own listeners arms its timer; none disarms it. cm_lock
 * held. */
static void rearm(struct rig_loop *loop)
{
	int64_t first = 0, at;
	struct rig__list *l;

	for (l = loop->handshakes.next; l != &loop->handshakes; l = l->next) {
		struct conn *c = container_of(l, struct conn, link);

		if (!first || c->deadline < first)
			first = c->deadline;
	}
	for (l = loop->listeners.next; l != &loop->listeners; l = l->next) {
		at = wait_end(container_of(l, struct rig_listener, link));
		if (at && (!first || at < first))
			first = at;
	}
	rig__events_set_timer(loop, first);
}

/*
 * An id destroyed off the loop. rdma_destroy_id waits in the kernel for
 * the message it sends (the REJ of a dropped handshake, a shed request's
 * REJ): under a busy host, tens of milliseconds each, and a flood sheds
 * hundreds in one turn. The loop's helper destroys the ids of the loop's
 * own channel, which outlives the helper (rig__loop_free); its events
 * find no context (take_id) and are acked at once, so the destroy, which
 * waits for their acks, waits for no lock.
 */
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

/* Destroys @id (no context, nothing kept for it): on the helper when it
 * is of @loop's channel and the helper has fewer than RIG_CM_DROPS, else
 * here (@loop NULL: here). A request not yet answered is rejected
 * (@reject) now: the helper destroys ids in turn, each waiting for its
 * message, and the peer of the last of a hundred would hear seconds
 * late. One answered is not (conn.replied): its destroy sends the REJ. */
static void drop_id(struct rig_loop *loop, struct rdma_cm_id *id, bool reject)
{
	bool ours = loop && id->channel == loop->cm;
	struct id_drop *d = NULL;

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

/* Refuses a request: the REJ goes now, the id after (drop_id). */
static void refuse(struct rig_loop *loop, struct rdma_cm_id *id)
{
	rdma_reject(id, NULL, 0);
	drop_id(loop, id, false);
}

/* Kept events that name @id go: it is being destroyed. A kept request's
 * new id goes with its listener's id. cm_lock held. */
static void forget_kept(struct rig_loop *loop, const struct rdma_cm_id *id)
{
	struct rig__list *l, *next;

	for (l = loop->cm_kept.next; l != &loop->cm_kept; l = next) {
		struct kept *k = container_of(l, struct kept, link);

		next = l->next;
		if (id && k->ev.id != id && k->ev.listen_id != id)
			continue;
		if (k->ev.type == RDMA_CM_EVENT_CONNECT_REQUEST)
			refuse(loop, k->ev.id);
		rig__list_del(l);
		free(k);
	}
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

/* Frees @c's queue pair: on the helper thread for a loop's connection
 * (destroying one takes the kernel as long as making it), else here. */
static void free_qp(struct conn *c)
{
	struct reap *r = c->blocking ? NULL : malloc(sizeof(*r));

	c->qp->owner = NULL;	/* not through the release hook: we are it */
	if (r) {
		*r = (struct reap){ .job = { .work = reap_work, .teardown = true }, .qp = c->qp };
		if (!rig__loop_defer(c->loop, &r->job))
			goto out;
		free(r);
	}
	rig__qp_free(c->qp);
out:
	c->qp = NULL;
}

/*
 * A departed peer's answer (rdma_disconnect), sent on the loop's helper:
 * on bnxt_re and mlx5 it is a message through the CM, and a server's
 * clients often leave together. The id stays the connection's, to be
 * destroyed where its queue pair is (rig_qp_destroy on the caller's
 * thread, rig_qp_close on the helper), unless the connection ends while
 * the answer is owed: then take_id() leaves the id to the answer, which
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
 * on the helper for a loop's connection, else here. cm_lock held. */
static void answer(struct conn *c)
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
 * and is acked at once. cm_lock held. */
static struct rdma_cm_id *take_id(struct conn *c)
{
	struct rdma_cm_id *id = c->id;

	if (!id)
		return NULL;
	forget_kept(c->loop, id);
	id->context = NULL;
	c->id = NULL;
	if (!c->answer)
		return id;
	c->answer->c = NULL;
	c->answer = NULL;
	return NULL;
}

/* Gives back what @c holds: its place in a list, its queue pair, its id
 * and what was kept for it. cm_lock held; no helper works on it. */
static void conn_strip(struct conn *c)
{
	struct rdma_cm_id *id = take_id(c);

	set_home(c, HOME_NONE, NULL);
	if (c->qp)
		free_qp(c);
	if (id)
		drop_id(c->loop, id, c->accepting && !c->replied);
}

/* The handshake's outcome, once, for the conn_done probe: @result and
 * the peer's address (the one dialed, or the one a request came from). */
static void handshake_over(struct conn *c, int result)
{
	char peer[INET6_ADDRSTRLEN] = "";

	if (!c->started)
		return;
	if (RIG_PROBES_ON && c->id)
		peer_ip(c->id, peer);
	RIG_PROBE(conn_done, (uintptr_t)c, (int)c->accepting, result, peer,
		  rig__now_ns() - c->started);
	c->started = 0;
}

static void wake(struct rig_loop *loop);
static bool requests_wait(struct rig_listener *l);
static struct rig_listener *head_of(struct rig_listener *l);

/* @c's handshake no longer counts among its listener's under way: a
 * request waiting for its turn takes it on the loop's next pass, which
 * this may be (a helper's step may end a handshake too). */
static void listener_leave(struct conn *c)
{
	struct rig_listener *l = c->listener;

	if (l) {
		l->handshakes--;
		if (l->group)
			shared_unreserve(l->group);
		if (requests_wait(l))
			wake(c->loop);
	}
	c->listener = NULL;
}

static void conn_free(struct conn *c)
{
	if (c->counted)
		__atomic_sub_fetch(&c->loop->cm_held, 1, __ATOMIC_RELAXED);
	free(c);
}

/* The one way a connection goes: off whatever list holds it, its news
 * withdrawn, its queue pair and id destroyed, its memory freed. */
static void conn_end(struct conn *c)
{
	handshake_over(c, -ECONNABORTED);	/* a handshake its loop dropped */
	/* The application destroyed a queue pair handed out early. */
	listener_leave(c);
	conn_strip(c);
	rig__loop_unpost(c->loop, &c->up);
	rig__loop_unpost(c->loop, &c->gone);
	conn_free(c);
}

/* A failed dial's news was handed out (loop->lock held): conn_strip
 * left nothing else of it. */
static void free_when_handed(struct rig__news *n)
{
	conn_free(container_of(n, struct conn, up));
}

/* A loop's dial leaves the count it was in: it is up or failed, or was
 * dropped before its turn came. dials_next() starts the next. */
static void dial_over(struct conn *c)
{
	if (c->state == CONN_QUEUED)
		c->loop->dials_queued--;
	if (c->dialing)
		c->loop->dials--;
	c->dialing = false;
}

/* The rest of fail(), once no helper works on @c. A loop's dial reports
 * its outcome as news; rig_dial's caller ends its own; an accept that
 * failed goes without a word. */
static void finish(struct conn *c)
{
	if (c->blocking && !c->accepting)
		return;
	if (c->accepting) {
		conn_end(c);
		return;
	}
	conn_strip(c);
	c->home = HOME_NEWS;
	c->up.what = (struct rig_ready){ NULL, RIG_SEND, RIG_NEWS_DIALED, c->result, c->cookie };
	c->up.handed = free_when_handed;
	rig__loop_post(c->loop, &c->up);
}

static void fail_owned(struct conn *c, int err);

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

/* Ends a handshake that did not make it, with -@err; while the helper
 * works on it, the helper finishes. */
static void fail(struct conn *c, int err)
{
	dial_over(c);
	if (app_has_qp(c)) {
		fail_owned(c, err);
		return;
	}
	handshake_over(c, -err);
	listener_leave(c);
	c->state = CONN_DONE;
	c->result = -err;
	set_home(c, HOME_NONE, NULL);
	if (!c->in_job)
		finish(c);
}

/* The helper's half of a step: its slow part, then the rest under cm_lock. */
static void job_work(struct rig__job *job)
{
	struct conn *c = container_of(job, struct conn, job);
	struct rig_loop *loop = c->loop;
	int ret = c->slow(c);

	pthread_mutex_lock(&loop->cm_lock);
	c->in_job = false;
	if (c->state == CONN_DONE)
		finish(c);	/* failed or dropped meanwhile */
	else
		c->then(c, ret);
	dials_next(loop);
	pthread_mutex_unlock(&loop->cm_lock);
}

/* Runs @slow off the loop, then @then; both here for a blocking caller,
 * or when no helper thread can be had. */
static void off_loop(struct conn *c, enum conn_state state, int (*slow)(struct conn *),
		     void (*then)(struct conn *, int))
{
	c->state = state;
	c->slow = slow;
	c->then = then;
	if (!c->blocking) {
		c->job.work = job_work;
		/* A dial's queue pair starts its handshake: the helper puts
		 * the steps of those under way first (loop.c). */
		c->job.starts = state == CONN_MAKING && !c->accepting;
		c->in_job = true;
		if (!rig__loop_defer(c->loop, &c->job))
			return;
		c->in_job = false;
	}
	then(c, slow(c));
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
	c->qp = NULL;		/* its destroyer frees it */
	handshake_over(c, -ECONNABORTED);	/* with the peer's address */
	established = c->established;
	id = take_id(c);
	conn_end(c);
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

static struct conn *conn_new(struct rig_loop *loop, bool blocking, uint64_t cookie)
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
		__atomic_add_fetch(&loop->cm_held, 1, __ATOMIC_RELAXED);
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
static void up(struct conn *c)
{
	struct rig_listener *l = c->listener;
	uint64_t cookie = l ? l->cookie : c->cookie;

	dial_over(c);
	handshake_over(c, 0);
	if (l)
		__atomic_store_n(&head_of(l)->last_up, rig__now_ns(), __ATOMIC_RELAXED);
	listener_leave(c);
	c->state = CONN_UP;
	c->established = true;
	c->result = 0;
	c->qp->owner = &c->qp_owner;
	c->gone.what = (struct rig_ready){ &c->qp->pub, RIG_SEND, RIG_NEWS_GONE, 0, cookie };
	/* A peer that gave its MTU ("rig2") is a rig that takes liveness
	 * probes (rig(7) LIVENESS); one of rig 0.2 would refuse them. */
	if (c->peer_mtu)
		rig__loop_live_add(c->qp);
	if (c->blocking && c->accepting) {
		set_home(c, HOME_ACCEPTED, &l->accepted);
		return;
	}
	set_home(c, HOME_NONE, NULL);
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
static void hand_early(struct conn *c)
{
	uint64_t cookie = c->accepting ? c->listener->cookie : c->cookie;

	c->state = CONN_OWING;
	c->early = true;
	/* The application's time, not the peer's: RIG_CM_HANDSHAKES bounds
	 * how many may wait for it. */
	c->deadline = INT64_MAX / 2;
	c->qp->owner = &c->qp_owner;
	c->gone.what = (struct rig_ready){ &c->qp->pub, RIG_SEND, RIG_NEWS_GONE, 0, cookie };
	c->up.what = (struct rig_ready){ &c->qp->pub, RIG_SEND,
					 c->accepting ? RIG_NEWS_ACCEPTED : RIG_NEWS_DIALED,
					 0, cookie };
	c->up.handed = early_handed;
	rig__loop_post(c->loop, &c->up);
}

/* ---------------------------------------------------------------- steps */

static int err_of(const struct cm_ev *ev)
{
	switch (ev->type) {
	case RDMA_CM_EVENT_REJECTED:
		return ECONNREFUSED;
	case RDMA_CM_EVENT_ADDR_ERROR:
		return ev->status < 0 ? -ev->status : EHOSTUNREACH;
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		return EHOSTUNREACH;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return ENODEV;
	default:
		return EPROTO;
	}
}

/* An event that ends a connection that is up. REJECTED: a dial is up once
 * its RTU is sent, but the listener may have dropped the handshake at
 * its bound before the RTU came; the CM takes its REJ even now. */
static bool departure(enum rdma_cm_event_type type)
{
	return type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_REJECTED ||
	       type == RDMA_CM_EVENT_DEVICE_REMOVAL || type == RDMA_CM_EVENT_CONNECT_ERROR ||
	       type == RDMA_CM_EVENT_UNREACHABLE;
}

static int departure_err(enum rdma_cm_event_type type)
{
	return type == RDMA_CM_EVENT_DEVICE_REMOVAL ? ENODEV : ECONNRESET;
}

static const char *departure_why(enum rdma_cm_event_type type)
{
	switch (type) {
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return "the device went away (rdma_cm DEVICE_REMOVAL)";
	case RDMA_CM_EVENT_DISCONNECTED:
		return "the peer left (rdma_cm DISCONNECTED)";
	case RDMA_CM_EVENT_REJECTED:
		return "the peer dropped the handshake after ours ended (rdma_cm REJECTED)";
	default:
		return "the connection failed (rdma_cm event after it was up)";
	}
}

/* The slow parts of the steps; 0 or -errno. */
static int make_qp(struct conn *c)
{
	struct rig_nic *nic = c->loop->nic;
	struct rig_qp *qp;
	uint8_t gid[16];
	int ret = rig_qp_make_in(c->loop, &qp);

	if (ret)
		return ret;
	c->qp = rig__qp(qp);
	/* Its endpoint names the address rdma_cm uses on our side, which
	 * need not be the NIC's first, and it keeps the connection's ports.
	 * Under the NIC's lock: M4's checks of other connections read them. */
	pthread_mutex_lock(&nic->lock);
	if (gid_of_address(rdma_get_local_addr(c->id), gid))
		memcpy(c->qp->self.gid, gid, 16);
	c->qp->cm_port[0] = rdma_get_src_port(c->id);
	c->qp->cm_port[1] = rdma_get_dst_port(c->id);
	pthread_mutex_unlock(&nic->lock);
	return 0;
}

static int connect_qp(struct conn *c)
{
	struct rig__route route;
	int ret = resolved_route(c, &route);

	return ret ? ret : rig__qp_connect(&c->qp->pub, &c->peer, c->may_be_local, &route);
}

static int make_and_connect_qp(struct conn *c)
{
	int ret = make_qp(c);

	return ret ? ret : connect_qp(c);
}

/* Our endpoint and our port's MTU, in @priv, to send with @param: the
 * peer's link may carry larger frames than ours, and each side takes the
 * smaller MTU. 0 or -errno. */
static int our_param(struct conn *c, struct rdma_conn_param *param,
		     uint8_t priv[RIG__CM_PRIVATE_MTU])
{
	struct rig_nic *nic = c->loop->nic;
	struct ibv_port_attr pattr;
	struct rig_endpoint self;
	int ret = ibv_query_port(nic->ctx, nic->port, &pattr);

	if (ret)
		return rig__fail_verbs(ret, nic, "ibv_query_port");
	rig_qp_endpoint(&c->qp->pub, &self);
	rig__cm_pack_mtu(&self, (uint8_t)pattr.active_mtu, priv);
	conn_param(param, priv, c->qp);
	return 0;
}

/* The dial's queue pair is made: send the request. */
static void dial_connect(struct conn *c, int ret)
{
	struct rdma_conn_param param;
	uint8_t priv[RIG__CM_PRIVATE_MTU];

	if (!ret)
		ret = our_param(c, &param, priv);
	if (!ret && rdma_connect(c->id, &param))
		ret = rig__fail(errno, "%s: rdma_connect: %s", step_name(c), strerror(errno));
	if (ret)
		fail(c, -ret);
	else
		c->state = CONN_CONNECTING;
}

/* The dial's queue pair is at RTS: tell the listener; a loop's dial
 * hands it out first, and tells the listener once that is done. */
static void dial_establish(struct conn *c, int ret)
{
	if (!ret && !c->blocking) {
		hand_early(c);
		return;
	}
	if (!ret && rdma_establish(c->id))
		ret = rig__fail(errno, "%s: rdma_establish: %s", step_name(c),
				strerror(errno));
	if (ret)
		fail(c, -ret);
	else
		up(c);
}

/* The answer is sent. The peer's time starts now: the time a burst of
 * requests waited for their queue pairs, or the application for its
 * news, was ours. */
static void answered(struct conn *c)
{
	c->state = CONN_ACCEPTING;
	c->replied = true;
	c->deadline = rig__now_ns() + RIG_CM_HALF_OPEN_MS * 1000000ll;
	if (!c->blocking)
		rearm(c->loop);
}

/* The accepting side's queue pair is at RTS: answer the request; a
 * loop's listener hands it out first, and answers once that is done. */
static void accept_answer(struct conn *c, int ret)
{
	struct rdma_conn_param param;

	if (!ret)
		ret = our_param(c, &param, c->priv);
	if (!ret && !c->blocking) {
		hand_early(c);
		return;
	}
	if (!ret && rdma_accept(c->id, &param))
		ret = rig__fail(errno, "%s: rdma_accept: %s", step_name(c), strerror(errno));
	if (ret) {
		rdma_reject(c->id, NULL, 0);
		fail(c, -ret);
		return;
	}
	answered(c);
}

/* What an OWING connection owes its peer, now that the application had
 * its news: the answer, or the dialer's RTU. cm_lock held. */
static void pay(struct conn *c)
{
	struct rdma_conn_param param;
	int ret = 0;

	if (c->accepting) {
		conn_param(&param, c->priv, c->qp);
		if (rdma_accept(c->id, &param))
			ret = rig__fail(errno, "%s: rdma_accept: %s", step_name(c),
					strerror(errno));
	} else if (rdma_establish(c->id)) {
		ret = rig__fail(errno, "%s: rdma_establish: %s", step_name(c), strerror(errno));
	}
	/* The id left the connecting state: the peer gave up meanwhile (its
	 * rejection, or its request's end, waits in the channel). */
	if (ret == -EINVAL)
		ret = -ECONNRESET;
	if (ret)
		fail(c, -ret);
	else if (c->accepting)
		answered(c);
	else
		up(c);
}

/* Pays what the loop's connections owe, for the news handed out since
 * its last pass. cm_lock held. */
static void pay_owed(struct rig_loop *loop)
{
	struct rig__list *l, *next;

	for (l = loop->handshakes.next; l != &loop->handshakes; l = next) {
		struct conn *c = container_of(l, struct conn, link);

		next = l->next;
		if (c->state == CONN_OWING && __atomic_load_n(&c->handed, __ATOMIC_ACQUIRE))
			pay(c);
	}
}

/* Keeps a request for its turn at @l, a loop's own listener, if fewer
 * than RIG_CM_WAITING wait. Its id's events, until then, find no
 * context and are acked. A dialer that gives up meanwhile is not heard
 * of (no event of its REJ reached the listener on Linux 6.1, tested):
 * its request is answered at its turn, and dropped at the handshake's
 * bound, or turned away at its own. cm_lock held. */
static bool wait_turn(struct rig_listener *l, const struct cm_ev *ev)
{
	struct handoff *h;

	if (l->blocking || l->group || l->n_waiting >= RIG_CM_WAITING ||
	    !(h = malloc(sizeof(*h))))
		return false;
	*h = (struct handoff){ .part = l, .ev = *ev, .at = rig__now_ns() };
	ev->id->context = NULL;
	rig__list_add(l->waiting.prev, &h->link);
	l->n_waiting++;
	rearm(l->loop);
	return true;
}

static void accept_request(struct rig_listener *l, const struct cm_ev *ev);

/* Requests waiting at @l, a loop's own listener, take the turns free,
 * oldest first, once those past their wait (wait_end_of) are rejected:
 * a flood's requests do not take the turns its dropped handshakes free.
 * Every pass of the loop comes here: with none waiting, it costs nothing
 * (rearm reads every handshake and sets the timer). cm_lock held. */
static void admit(struct rig_listener *l)
{
	int64_t now;
	struct handoff *h;
	bool late;

	if (l->waiting.next == &l->waiting)
		return;
	now = rig__now_ns();
	while (l->waiting.next != &l->waiting) {
		h = container_of(l->waiting.next, struct handoff, link);
		late = wait_end_of(l, h->at) <= now;
		if (!late && l->handshakes >= RIG_CM_HANDSHAKES)
			break;
		rig__list_del(&h->link);
		l->n_waiting--;
		if (!late) {
			accept_request(l, &h->ev);
		} else {
			rig__fail(ECONNREFUSED, "rig_loop_listen: no handshake came up in %d ms",
				  RIG_CM_HALF_OPEN_MS);
			refuse(l->loop, h->ev.id);
		}
		free(h);
	}
	rearm(l->loop);
}

/* A new request on listener @l: answer it, let it wait, or reject it. */
static void accept_request(struct rig_listener *l, const struct cm_ev *ev)
{
	const char *step = l->blocking ? "rig_accept" : "rig_loop_listen";
	struct rig_loop *loop = l->loop;
	struct rig_endpoint peer;
	uint8_t peer_mtu;
	struct conn *c;
	int ret;

	ret = rig__cm_parse_mtu(ev->priv, ev->priv_len, &peer, &peer_mtu);
	if (!ret)
		ret = same_device(loop->nic, ev->id, step);
	/* Shed load: a flood of requests costs a reject each, not a queue
	 * pair each, beyond those a loop's listener lets wait. */
	if (!ret && l->handshakes >= RIG_CM_HANDSHAKES) {
		if (wait_turn(l, ev))
			return;
		ret = rig__fail(EAGAIN, "%s: %u handshakes under way already", step,
				l->handshakes);
	}
	c = ret ? NULL : conn_new(loop, l->blocking, l->cookie);
	if (!c) {
		l->rejected = ret ? ret : -ENOMEM;
		if (l->group) {
			/* Another loop read it: its id is in this one's channel. */
			shared_unreserve(l->group);
			forget_kept(loop, ev->id);
		}
		refuse(loop, ev->id);
		return;
	}
	c->listener = l;
	c->accepting = true;
	l->handshakes++;
	c->id = ev->id;
	c->id->context = c;
	c->peer = peer;
	c->peer_mtu = peer_mtu;
	c->may_be_local = peer_may_be_local(c);
	/* No bound while its queue pair is made: that is our own work, and
	 * RIG_CM_HANDSHAKES bounds how much of it may wait. */
	c->deadline = INT64_MAX / 2;
	RIG_PROBE(conn_step, (uintptr_t)c, 1, rdma_event_str(ev->type), "NEW", ev->status);
	if (l->blocking)
		set_home(c, HOME_HALF_OPEN, &l->half_open);
	else
		set_home(c, HOME_HANDSHAKE, &loop->handshakes);
	off_loop(c, CONN_MAKING, make_and_connect_qp, accept_answer);
}

/* A connection that is up hears that its peer left, or its device went:
 * its queue pair fails at once, as an async event fails it (F1, F6). */
static void lose(struct conn *c, int err, const char *why)
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

static void gone(struct conn *c, enum rdma_cm_event_type type)
{
	if (c->gone.what.result)
		return;		/* told once */
	lose(c, departure_err(type), departure_why(type));
	answer(c);
	c->established = false;	/* answered: nothing more to end */
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

/* The rest of fail() once the application has the queue pair (its early
 * news was handed out): the queue pair fails as when the peer leaves
 * (F1, F6) and the loop hands out RIG_NEWS_GONE; the application
 * destroys it, and the connection with it. The id goes now, as a dropped
 * handshake's does: the peer hears the REJ at once (drop_id). */
static void fail_owned(struct conn *c, int err)
{
	struct rdma_cm_id *id;

	handshake_over(c, -err);
	listener_leave(c);
	set_home(c, HOME_NONE, NULL);
	c->state = CONN_UP;	/* no event comes: its id is gone */
	lose(c, err, owned_why(err));
	id = take_id(c);
	if (id)
		drop_id(c->loop, id, c->accepting && !c->replied);
}

/* One step of @c's handshake, or its end (the table at the top). */
static void conn_step(struct conn *c, const struct cm_ev *ev)
{
	int ret = 0;

	RIG_PROBE(conn_step, (uintptr_t)c, (int)c->accepting, rdma_event_str(ev->type),
		  state_names[c->state], ev->status);
	switch (c->state) {
	case CONN_RESOLVING_ADDR:
		if (ev->type != RDMA_CM_EVENT_ADDR_RESOLVED)
			break;
		ret = same_device(c->loop->nic, c->id, step_name(c));
		if (!ret && rdma_resolve_route(c->id, RIG_CM_RESOLVE_MS))
			ret = rig__fail(errno, "%s: rdma_resolve_route: %s", step_name(c),
					strerror(errno));
		if (ret)
			fail(c, -ret);
		else
			c->state = CONN_RESOLVING_ROUTE;
		return;
	case CONN_RESOLVING_ROUTE:
		if (ev->type != RDMA_CM_EVENT_ROUTE_RESOLVED)
			break;
		off_loop(c, CONN_MAKING, make_qp, dial_connect);
		return;
	case CONN_CONNECTING:
		/* No QP is attached to the id: the CM stops at the response
		 * and waits for rdma_establish. */
		if (ev->type != RDMA_CM_EVENT_CONNECT_RESPONSE)
			break;
		ret = rig__cm_parse_mtu(ev->priv, ev->priv_len, &c->peer, &c->peer_mtu);
		if (ret) {
			fail(c, -ret);
			return;
		}
		c->may_be_local = peer_may_be_local(c);
		off_loop(c, CONN_ESTABLISHING, connect_qp, dial_establish);
		return;
	case CONN_ACCEPTING:
		if (ev->type == RDMA_CM_EVENT_ESTABLISHED) {
			up(c);
			return;
		}
		/* fall through */
	case CONN_OWING:
		/* The peer left a handshake whose queue pair is handed out. */
		if (c->early && departure(ev->type)) {
			fail(c, departure_err(ev->type));
			return;
		}
		break;
	case CONN_UP:
		if (departure(ev->type))
			gone(c, ev->type);
		return;
	case CONN_MAKING:
	case CONN_ESTABLISHING:
		break;		/* the peer gave up while we worked */
	case CONN_QUEUED:
		break;		/* no rdma_cm work started: no event comes */
	case CONN_DONE:
		return;
	}
	fail(c, -rig__fail(err_of(ev), "%s: %s (status %d)", step_name(c),
			   rdma_event_str(ev->type), ev->status));
}

/* Copies what a step needs of @raw into @ev, and acks @raw. */
static void take_event(struct rdma_cm_event *raw, struct cm_ev *ev)
{
	const uint8_t *priv = raw->param.conn.private_data;
	size_t len = priv ? raw->param.conn.private_data_len : 0, i;

	*ev = (struct cm_ev){ raw->event, raw->status, raw->id, raw->listen_id,
			      raw->id->context, { 0 }, 0 };
	/* The transport pads private data with zeros: keep what fits, and
	 * only if the rest is padding (else it is not a rig endpoint). */
	ev->priv_len = len < sizeof(ev->priv) ? len : sizeof(ev->priv);
	for (i = ev->priv_len; i < len; i++)
		if (priv[i])
			ev->priv_len = 0;
	if (ev->priv_len)
		memcpy(ev->priv, priv, ev->priv_len);
	rdma_ack_cm_event(raw);
}

/* One event, copied and acked: a step of the connection or listener it
 * names. cm_lock held. */
static void step(const struct cm_ev *ev)
{
	struct rig_loop *loop;
	struct conn *c;

	if (ev->type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		accept_request(ev->listen_id->context, ev);
		return;
	}
	c = ev->context;
	if (c && c->kind == CM_CONN) {
		loop = c->loop;		/* the step may free c */
		conn_step(c, ev);
		dials_next(loop);	/* it may have ended a dial */
	}
	/* else a listener's own event: nothing to do */
}

static void conn_event(struct rig_loop *loop, struct rdma_cm_event *raw)
{
	struct cm_ev ev;

	(void)loop;
	take_event(raw, &ev);
	step(&ev);
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
	take_event(raw, &k->ev);
	c = k->ev.type == RDMA_CM_EVENT_CONNECT_REQUEST ? NULL : k->ev.context;
	if (c && c->kind == CM_CONN && c->state == CONN_UP && departure(k->ev.type))
		rig__events_fail_qp(c->qp, departure_err(k->ev.type),
				    departure_why(k->ev.type));
	rig__list_add(loop->cm_kept.prev, &k->link);
}

static void conn_replay(struct rig_loop *loop)
{
	while (loop->cm_kept.next != &loop->cm_kept) {
		struct kept *k = container_of(loop->cm_kept.next, struct kept, link);

		rig__list_del(&k->link);
		step(&k->ev);
		free(k);
	}
	pay_owed(loop);
}

/* The loop's timer fired: drop what is past its bound. cm_lock held. */
static void conn_tick(struct rig_loop *loop)
{
	int64_t now = rig__now_ns(), end = now + RIG_CM_TICK_BUDGET_NS;
	struct rig__list *l, *next;

	/* A few per pass, and the timer, set to a deadline already past,
	 * fires again at once. */
	for (l = loop->handshakes.next; l != &loop->handshakes && rig__now_ns() < end;
	     l = next) {
		struct conn *c = container_of(l, struct conn, link);

		next = l->next;
		if (c->deadline <= now) {
			rig__fail(ETIMEDOUT, "%s: no answer in time", step_name(c));
			fail(c, ETIMEDOUT);
		}
	}
	dials_next(loop);
	rearm(loop);
}

static void listener_close(struct rig_listener *l);

/* The loop closes (its helper has stopped): everything of ours in it. */
static void conn_close(struct rig_loop *loop)
{
	while (loop->listeners.next != &loop->listeners)
		listener_close(container_of(loop->listeners.next, struct rig_listener, link));
	while (loop->handshakes.next != &loop->handshakes)
		conn_end(container_of(loop->handshakes.next, struct conn, link));
	forget_kept(loop, NULL);
}

static bool conn_turn(struct rig_loop *loop, int64_t end);

static const struct rig__cm_consumer consumer = {
	conn_event, conn_note, conn_replay, conn_tick, conn_close, conn_turn
};

/* ------------------------------------------------------- loop-driven API */

/* Makes the dial's id on @ch; 0 or -errno. */
static int dial_id(struct conn *c, struct rdma_event_channel *ch, const char *addr,
		   uint16_t port, struct sockaddr_storage *ss)
{
	int ret = to_sockaddr(addr, port, ss);

	if (ret)
		return ret;
	if (rdma_create_id(ch, &c->id, c, RDMA_PS_TCP))
		return rig__fail(errno, "rdma_create_id: %s", strerror(errno));
	return 0;
}

/* The first step; 0 or the errno that ends the dial (the kernel may
 * know at once that no route leads there). */
static int dial_start(struct conn *c, const char *addr, struct sockaddr_storage *ss)
{
	c->state = CONN_RESOLVING_ADDR;
	if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)ss, RIG_CM_RESOLVE_MS))
		return rig__fail(errno, "%s: rdma_resolve_addr(%s): %s", step_name(c), addr,
				 strerror(errno));
	return 0;
}

/*
 * Starts the loop's queued dials, oldest first, while fewer than
 * RIG_CM_DIALS are under way: a storm of dials then makes queue pairs at
 * the rate handshakes finish, and each answer finds its dial's next step
 * near the head of the helper's queue. Called where no walk of the
 * handshakes is under way: a dial that fails at once leaves the list.
 * cm_lock held.
 */
static void dials_next(struct rig_loop *loop)
{
	char addr[INET6_ADDRSTRLEN];
	struct rig__list *l, *next;
	struct conn *c;
	int ret;

	for (l = loop->handshakes.next; l != &loop->handshakes && loop->dials_queued &&
	     loop->dials < RIG_CM_DIALS; l = next) {
		next = l->next;
		c = container_of(l, struct conn, link);
		if (c->state != CONN_QUEUED)
			continue;
		loop->dials_queued--;
		if (!inet_ntop(c->dst.ss_family, c->dst.ss_family == AF_INET6
			       ? (const void *)&((struct sockaddr_in6 *)&c->dst)->sin6_addr
			       : (const void *)&((struct sockaddr_in *)&c->dst)->sin_addr,
			       addr, sizeof(addr)))
			addr[0] = 0;
		ret = dial_start(c, addr, &c->dst);
		if (ret) {
			fail(c, -ret);
			continue;
		}
		c->dialing = true;
		loop->dials++;
	}
}

RIG_EXPORT __cold int rig_loop_dial(struct rig_loop *loop, const char *addr, uint16_t port,
				    int64_t us, uint64_t cookie)
{
	struct conn *c;
	int ret;

	if (!loop || us < 0)
		return rig__fail(EINVAL, "rig_loop_dial: %s", us < 0 ? "negative time" : "NULL loop");
	c = conn_new(loop, false, cookie);
	if (!c)
		return rig__fail(ENOMEM, "rig_loop_dial: out of memory");
	pthread_mutex_lock(&loop->cm_lock);
	ret = rig__events_cm_channel(loop, &consumer);
	if (!ret)
		ret = dial_id(c, loop->cm, addr, port, &c->dst);
	if (ret) {
		pthread_mutex_unlock(&loop->cm_lock);
		free(c);
		return ret;
	}
	/* From here on, every outcome is news; the bound holds while the
	 * dial waits its turn too. */
	c->deadline = deadline_after(us);
	c->state = CONN_QUEUED;
	loop->dials_queued++;
	set_home(c, HOME_HANDSHAKE, &loop->handshakes);
	dials_next(loop);
	rearm(loop);
	pthread_mutex_unlock(&loop->cm_lock);
	return 0;
}

/* Closes @l with its handshakes under way and the connections rig_accept
 * never took. cm_lock held. Once its id is destroyed, the kernel has
 * dropped the requests still queued for it. */
static void part_drop(struct rig_listener *p);

/* Rejects the requests waiting at @l: it closes. Those of a shared
 * listener are of its own channel. cm_lock or, shared, its lock held. */
static void turn_away(struct rig_listener *l)
{
	struct handoff *h;

	while (l->waiting.next != &l->waiting) {
		h = container_of(l->waiting.next, struct handoff, link);
		rig__list_del(&h->link);
		refuse(l->group ? NULL : l->loop, h->ev.id);
		free(h);
	}
	__atomic_store_n(&l->n_waiting, 0, __ATOMIC_RELAXED);
}

static void listener_close(struct rig_listener *l)
{
	struct rig_loop *loop = l->loop;
	struct rig__list *e, *next;

	if (l->group) {
		part_drop(l);	/* a loop that closes leaves the listener */
		return;
	}

	for (e = loop->handshakes.next; e != &loop->handshakes; e = next) {
		struct conn *c = container_of(e, struct conn, link);

		next = e->next;
		if (c->listener == l)
			fail(c, ECONNABORTED);	/* the helper drops it if busy */
	}
	while (l->half_open.next != &l->half_open)
		fail(container_of(l->half_open.next, struct conn, link), ECONNABORTED);
	while (l->accepted.next != &l->accepted)
		conn_end(container_of(l->accepted.next, struct conn, link));
	turn_away(l);
	forget_kept(loop, l->id);
	rig__list_del(&l->link);
	rdma_destroy_id(l->id);
	if (l->blocking)
		rdma_destroy_event_channel(l->ch);
	free(l);
}

static int listen_on(struct rig_loop *loop, const char *addr, uint16_t port,
		     bool blocking, uint64_t cookie, struct rig_listener **out)
{
	const char *step = blocking ? "rig_listen" : "rig_loop_listen";
	struct sockaddr_storage ss;
	struct rig_listener *l;
	int ret;

	ret = to_sockaddr(addr, port, &ss);
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l)
		return rig__fail(ENOMEM, "%s: out of memory", step);
	l->kind = CM_LISTENER;
	l->loop = loop;
	l->blocking = blocking;
	l->cookie = cookie;
	rig__list_init(&l->link);
	rig__list_init(&l->half_open);
	rig__list_init(&l->accepted);
	rig__list_init(&l->waiting);
	pthread_mutex_lock(&loop->cm_lock);
	ret = rig__events_cm_channel(loop, &consumer);
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
	ret = same_device(loop->nic, l->id, step);
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

static int shared_close(struct shared *g);

RIG_EXPORT __cold int rig_listener_close(struct rig_listener *l)
{
	struct rig_loop *loop;

	if (!l)
		return rig__fail(EINVAL, "rig_listener_close: NULL listener");
	if (l->group)
		return shared_close(l->group);
	loop = l->loop;
	pthread_mutex_lock(&loop->cm_lock);
	listener_close(l);
	pthread_mutex_unlock(&loop->cm_lock);
	return 0;
}

/* --------------------------------------------------- the blocking wrappers */

/* The longest single poll() of pump(): time left beyond it is waited in
 * more turns, so no bound overflows poll's int of milliseconds. */
#define RIG_CM_POLL_MAX_MS (3600 * 1000)

/* Takes @ch's pending events as steps, under cm_lock; with none, waits
 * for one until @deadline. 0, or -ETIMEDOUT when nothing came by then. */
static int pump(struct rig_loop *loop, struct rdma_event_channel *ch, int64_t deadline,
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
static int move_to_loop(struct conn *c)
{
	struct rig_loop *loop = c->loop;
	int ret;

	ret = rig__events_cm_channel(loop, &consumer);
	if (!ret && rdma_migrate_id(c->id, loop->cm))
		ret = rig__fail(errno, "%s: rdma_migrate_id: %s", step_name(c), strerror(errno));
	if (!ret)
		c->blocking = false;
	return ret;
}

RIG_EXPORT __cold int rig_dial(struct rig_nic *nic, const char *addr, uint16_t port,
			       int64_t us, struct rig_qp **out)
{
	struct rdma_event_channel *ch;
	struct sockaddr_storage ss;
	struct rig_loop *loop;
	int64_t deadline;
	struct conn *c;
	int ret;

	if (!nic || !out || us < 0)
		return rig__fail(EINVAL, "rig_dial: %s", us < 0 ? "negative time" : "NULL argument");
	deadline = deadline_after(us);
	loop = nic->own;
	c = conn_new(loop, true, 0);
	if (!c)
		return rig__fail(ENOMEM, "rig_dial: out of memory");
	ret = rig__events_new_cm_channel(&ch);
	if (ret) {
		free(c);
		return ret;
	}
	ret = dial_id(c, ch, addr, port, &ss);
	if (!ret)
		ret = dial_start(c, addr, &ss);
	while (!ret && c->state != CONN_UP && c->state != CONN_DONE)
		ret = pump(loop, ch, deadline, "rig_dial");
	if (!ret && c->state == CONN_DONE)
		ret = c->result;	/* rig_errmsg() was set by the step */
	pthread_mutex_lock(&loop->cm_lock);
	if (!ret)
		ret = move_to_loop(c);
	if (!ret) {
		*out = &c->qp->pub;
	} else {
		handshake_over(c, ret);	/* a bound passed: no step failed it */
		conn_end(c);
	}
	pthread_mutex_unlock(&loop->cm_lock);
	rdma_destroy_event_channel(ch);
	return ret;
}

/* rig_listen's handshakes past their bound are dropped. cm_lock held. */
static void drop_late(struct rig_listener *l, int64_t now)
{
	struct rig__list *e, *next;

	for (e = l->half_open.next; e != &l->half_open; e = next) {
		struct conn *c = container_of(e, struct conn, link);

		next = e->next;
		if (c->deadline <= now)
			fail(c, ETIMEDOUT);
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
		set_home(c, HOME_NONE, NULL);
		ret = move_to_loop(c);
		if (ret) {
			conn_end(c);
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
	deadline = deadline_after(us);
	for (;;) {
		pthread_mutex_lock(&l->loop->cm_lock);
		ret = accept_turn(l, deadline, out, &wait_until);
		pthread_mutex_unlock(&l->loop->cm_lock);
		if (ret)
			return ret < 0 ? ret : 0;
		ret = pump(l->loop, l->ch, wait_until, "waiting for a connection");
		if (ret)
			return ret;
	}
}

/* ----------------------------------------- one listener, many loops */

/*
 * rig_loops_listen: one rdma_cm id listens, on a channel of its own whose
 * fd sits in the fd set of every member loop, with a timer's. Whichever
 * member turns first reads a request (shared_read), acks it, picks the
 * member to serve it (hand), moves the request's id to that loop's
 * channel and puts the request in that loop's inbox; the member takes it
 * on its own next pass (take_inbox) and from there on it is a request
 * like rig_loop_listen's: the queue pair is made in that loop, and its
 * news and events are that loop's only. No loop waits for another: a
 * request never needs the thread of any loop but the one it was handed
 * to, and one left there RIG_CM_STALL_MS is taken back by any member
 * that turns (steal) and handed again, and that loop is passed over
 * until it makes a pass of its own. Every member wakes for a request and
 * the first to read it wins: EPOLLEXCLUSIVE would wake one, which may be
 * a loop whose thread is busy elsewhere while the others sleep.
 *
 * Why not pick by a loop's last pass alone: a loop whose thread sleeps
 * because it has nothing to do has not turned for as long as one whose
 * thread is stuck; a request not taken in time tells them apart.
 *
 * Locks: a member's cm_lock, then the listener's lock, then a loop's
 * inbox_lock or its lock; another loop's cm_lock only by trylock.
 */

/* RIG_CM_STALL_MS (cm.h): a loop's turns come that late only when its
 * thread is busy elsewhere. */

struct shared {
	struct rig_listener head;	/* the application's handle */
	pthread_mutex_t lock;		/* all below but handshakes */
	struct rig_listener **parts;	/* each member loop's part */
	int n;
	int rr;				/* the part picked last */
	int refs;			/* the handle's and each part's */
	bool closed;			/* rig_listener_close was called */
	int timer_fd;			/* in every member's fd set */
	int64_t timer_at;		/* its deadline, 0 when disarmed */
	unsigned handshakes;		/* atomic: under way in all members */
};

static void shared_unreserve(struct shared *g)
{
	__atomic_sub_fetch(&g->handshakes, 1, __ATOMIC_RELAXED);
}

/* A loop passed over: a request waited in its inbox too long, and it has
 * made no pass since. */
static bool stalled(struct rig_loop *loop)
{
	return __atomic_load_n(&loop->cm_turns, __ATOMIC_ACQUIRE) ==
	       __atomic_load_n(&loop->cm_stalled, __ATOMIC_ACQUIRE);
}

/* Refuses a request nobody serves; events of its id kept by @kept_in
 * (its channel's loop, cm_lock held) go first. */
static void handoff_reject(struct shared *g, struct handoff *h, struct rig_loop *kept_in)
{
	if (kept_in)
		forget_kept(kept_in, h->ev.id);
	refuse(kept_in, h->ev.id);
	shared_unreserve(g);
	free(h);
}

/* @loop's next pass takes what was handed to it, or drops its part. */
static void wake(struct rig_loop *loop)
{
	__atomic_store_n(&loop->cm_owed, true, __ATOMIC_RELEASE);
	pthread_mutex_lock(&loop->lock);
	loop->watcher->done(loop->watcher);
	pthread_mutex_unlock(&loop->lock);
}

/* The listener's timer, for @at (CLOCK_MONOTONIC ns). g->lock held. */
static void shared_arm(struct shared *g, int64_t at)
{
	struct itimerspec its = { 0 };

	g->timer_at = at;
	its.it_value.tv_sec = at / 1000000000;
	its.it_value.tv_nsec = at % 1000000000;
	timerfd_settime(g->timer_fd, TFD_TIMER_ABSTIME, &its, NULL);
}

/*
 * Hands @h to the member loop with the fewest connections, the next in
 * turn among equals, passing over loops found stalled while another may
 * be picked, and parts leaving; refuses it when none is left or the
 * listener closed. The count rises at once, so that the next pick, on
 * any thread, sees it. g->lock held.
 */
static void hand(struct shared *g, struct handoff *h)
{
	struct rig_listener *best = NULL, *p;
	unsigned held, best_held = 0;
	int pass, k, i, bi = 0;
	int64_t at;

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
	h->at = at = rig__now_ns();
	__atomic_add_fetch(&best->loop->cm_held, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&best->loop->inbox_lock);
	rig__list_add(best->loop->cm_inbox.prev, &h->link);
	pthread_mutex_unlock(&best->loop->inbox_lock);
	/* From here @h is the member's, which may have taken and freed it. */
	if (!g->timer_at)
		shared_arm(g, at + RIG_CM_STALL_MS * 1000000ll);
	wake(best->loop);
}

/*
 * The listener's timer fired: requests that waited RIG_CM_STALL_MS in the
 * inbox of a member whose thread does not turn are taken back and handed
 * again, and that member is passed over until its next pass. A member
 * whose cm_lock is held is turning (or its helper is at work): its
 * requests are looked at again later. @self's cm_lock held.
 */
static void steal(struct shared *g, struct rig_loop *self)
{
	int64_t now = rig__now_ns(), stale = RIG_CM_STALL_MS * 1000000ll, next = 0;
	struct rig__list got, *e, *after;
	struct rig_loop *loop;
	struct handoff *h;
	int i;

	rig__list_init(&got);
	pthread_mutex_lock(&g->lock);
	g->timer_at = 0;
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
			forget_kept(loop, h->ev.id);
			__atomic_sub_fetch(&loop->cm_held, 1, __ATOMIC_RELAXED);
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
	if (next && (!g->timer_at || next < g->timer_at))
		shared_arm(g, next);
	pthread_mutex_unlock(&g->lock);
}

/* The listener whose requests wait: a shared one's head, for a part. */
static struct rig_listener *head_of(struct rig_listener *l)
{
	return l->group ? &l->group->head : l;
}

static bool requests_wait(struct rig_listener *l)
{
	return __atomic_load_n(&head_of(l)->n_waiting, __ATOMIC_RELAXED);
}

/* The listener's timer for the oldest request waiting, unless set
 * sooner. g->lock held. */
static void shared_arm_wait(struct shared *g)
{
	int64_t at = wait_end(&g->head);

	if (at && (!g->timer_at || at < g->timer_at))
		shared_arm(g, at);
}

/* Keeps @h for its turn, as wait_turn() for a loop's own listener, or
 * rejects it. g->lock held. */
static void shared_wait(struct shared *g, struct handoff *h)
{
	if (g->closed || g->head.n_waiting >= RIG_CM_WAITING) {
		rig__fail(EAGAIN, "rig_loops_listen: %s", g->closed ? "closed" :
			  "RIG_CM_HANDSHAKES under way already, RIG_CM_WAITING waiting");
		refuse(NULL, h->ev.id);	/* of the shared channel */
		free(h);
		return;
	}
	h->at = rig__now_ns();
	rig__list_add(g->head.waiting.prev, &h->link);
	__atomic_add_fetch(&g->head.n_waiting, 1, __ATOMIC_RELAXED);
	shared_arm_wait(g);
}

/* admit() for a shared listener: the requests waiting take the turns
 * free in all members. g->lock held. */
static void shared_admit(struct shared *g)
{
	int64_t now = rig__now_ns();
	struct handoff *h;
	bool late;

	while (g->head.waiting.next != &g->head.waiting) {
		h = container_of(g->head.waiting.next, struct handoff, link);
		late = wait_end_of(&g->head, h->at) <= now;
		if (!late && __atomic_add_fetch(&g->handshakes, 1, __ATOMIC_RELAXED) >
				     RIG_CM_HANDSHAKES) {
			shared_unreserve(g);
			break;
		}
		rig__list_del(&h->link);
		__atomic_sub_fetch(&g->head.n_waiting, 1, __ATOMIC_RELAXED);
		if (!late) {
			hand(g, h);
			continue;
		}
		rig__fail(ECONNREFUSED, "rig_loops_listen: no handshake came up in %d ms",
			  RIG_CM_HALF_OPEN_MS);
		refuse(NULL, h->ev.id);	/* of the shared channel */
		free(h);
	}
	shared_arm_wait(g);
}

/* Reads @p's listener's requests and hands each to a member, within the
 * pass's budget; true if some may remain. @p's loop's cm_lock held. */
static bool shared_read(struct rig_listener *p, int64_t end)
{
	struct shared *g = p->group;
	struct rdma_cm_event *raw;
	struct handoff *h;
	uint64_t expired;
	struct cm_ev ev;

	if (read(g->timer_fd, &expired, sizeof(expired)) == sizeof(expired))
		steal(g, p->loop);
	if (requests_wait(&g->head)) {
		pthread_mutex_lock(&g->lock);
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
		take_event(raw, &ev);
		if (ev.type != RDMA_CM_EVENT_CONNECT_REQUEST)
			continue;	/* the listener's own */
		h = malloc(sizeof(*h));
		if (!h) {
			rig__fail(ENOMEM, "rig_loops_listen: out of memory");
			refuse(NULL, ev.id);	/* of the shared channel */
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
		if (__atomic_add_fetch(&g->handshakes, 1, __ATOMIC_RELAXED) <= RIG_CM_HANDSHAKES) {
			hand(g, h);
		} else {
			shared_unreserve(g);
			shared_wait(g, h);
		}
		pthread_mutex_unlock(&g->lock);
	}
}

/* Moves the requests handed to @loop for part @p (NULL: for any part)
 * from its inbox to @got, in the order they came. */
static void inbox_take(struct rig_loop *loop, const struct rig_listener *p,
		       struct rig__list *got)
{
	struct rig__list *e, *after;

	rig__list_init(got);
	pthread_mutex_lock(&loop->inbox_lock);
	for (e = loop->cm_inbox.next; e != &loop->cm_inbox; e = after) {
		after = e->next;
		if (p && container_of(e, struct handoff, link)->part != p)
			continue;
		rig__list_del(e);
		rig__list_add(got->prev, e);
	}
	pthread_mutex_unlock(&loop->inbox_lock);
}

/* Takes what other loops (or this one) handed @loop: each request is
 * accepted here as rig_loop_listen's loop accepts. cm_lock held. */
static void take_inbox(struct rig_loop *loop)
{
	struct rig__list got;
	struct handoff *h;

	inbox_take(loop, NULL, &got);
	while (got.next != &got) {
		h = container_of(got.next, struct handoff, link);
		rig__list_del(&h->link);
		/* The connection, if made, counts from here on. */
		__atomic_sub_fetch(&loop->cm_held, 1, __ATOMIC_RELAXED);
		if (__atomic_load_n(&h->part->leaving, __ATOMIC_ACQUIRE)) {
			handoff_reject(h->part->group, h, loop);
			continue;
		}
		accept_request(h->part, &h->ev);
		free(h);
	}
}

/*
 * Takes @p out of its listener, in @p's loop (cm_lock held): on that
 * loop's pass after rig_listener_close, or as the loop closes. What was
 * handed to the loop goes to the other members (refused once the
 * listener closed), its handshakes under way from the listener are
 * dropped as a closing listener drops them, and the last part out
 * closes the id; the listener's memory goes with its last reference.
 */
static void shared_free(struct shared *g);

static void part_drop(struct rig_listener *p)
{
	struct shared *g = p->group;
	struct rig_loop *loop = p->loop;
	struct rdma_cm_id *id = NULL;
	struct rig__list got, *e, *after;
	struct handoff *h;
	bool last;
	int i;

	pthread_mutex_lock(&g->lock);
	for (i = 0; i < g->n; i++)
		if (g->parts[i] == p) {
			g->parts[i] = g->parts[--g->n];
			break;
		}
	if (g->rr >= g->n)
		g->rr = 0;
	rig__events_unwatch_fd(loop, g->head.ch->fd);
	rig__events_unwatch_fd(loop, g->timer_fd);
	inbox_take(loop, p, &got);
	while (got.next != &got) {
		h = container_of(got.next, struct handoff, link);
		rig__list_del(&h->link);
		__atomic_sub_fetch(&loop->cm_held, 1, __ATOMIC_RELAXED);
		forget_kept(loop, h->ev.id);
		hand(g, h);
	}
	if (!g->n) {
		turn_away(&g->head);
		id = g->head.id;	/* nobody serves it any more */
		g->head.id = NULL;
	}
	last = --g->refs == 0;
	pthread_mutex_unlock(&g->lock);
	if (id)
		rdma_destroy_id(id);
	for (e = loop->handshakes.next; e != &loop->handshakes; e = after) {
		struct conn *c = container_of(e, struct conn, link);

		after = e->next;
		if (c->listener == p)
			fail(c, ECONNABORTED);	/* the helper drops it if busy */
	}
	rig__list_del(&p->link);
	free(p);
	if (last)
		shared_free(g);
}

/* Each pass of @loop (cm_lock held): its shared listeners' requests, and
 * what was handed to it. */
static bool conn_turn(struct rig_loop *loop, int64_t end)
{
	struct rig__list *l, *next;
	bool more = false;

	__atomic_add_fetch(&loop->cm_turns, 1, __ATOMIC_RELEASE);
	for (l = loop->listeners.next; l != &loop->listeners; l = next) {
		struct rig_listener *p = container_of(l, struct rig_listener, link);

		next = l->next;
		if (!p->group) {
			admit(p);
			continue;
		}
		if (__atomic_load_n(&p->leaving, __ATOMIC_ACQUIRE))
			part_drop(p);
		else if (shared_read(p, end))
			more = true;
	}
	take_inbox(loop);
	return more;
}

static void shared_free(struct shared *g)
{
	turn_away(&g->head);
	if (g->head.id)
		rdma_destroy_id(g->head.id);
	if (g->head.ch)
		rdma_destroy_event_channel(g->head.ch);
	if (g->timer_fd >= 0)
		close(g->timer_fd);
	pthread_mutex_destroy(&g->lock);
	free(g->parts);
	free(g);
}

/* rig_listener_close of a shared listener: it stops listening now; each
 * member drops its part on its own next pass (woken for it). */
static int shared_close(struct shared *g)
{
	struct rdma_cm_id *id;
	bool last;
	int i;

	pthread_mutex_lock(&g->lock);
	g->closed = true;
	turn_away(&g->head);
	id = g->head.id;
	g->head.id = NULL;
	for (i = 0; i < g->n; i++) {
		__atomic_store_n(&g->parts[i]->leaving, true, __ATOMIC_RELEASE);
		wake(g->parts[i]->loop);
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

/* Makes @loop a member of @g: its part, the listener's fds in its set. */
static int part_join(struct shared *g, struct rig_loop *loop)
{
	struct rig_listener *p = calloc(1, sizeof(*p));
	int ret;

	if (!p)
		return rig__fail(ENOMEM, "rig_loops_listen: out of memory");
	p->kind = CM_LISTENER;
	p->loop = loop;
	p->group = g;
	p->ch = g->head.ch;
	p->cookie = g->head.cookie;
	rig__list_init(&p->half_open);
	rig__list_init(&p->accepted);
	rig__list_init(&p->waiting);
	pthread_mutex_lock(&loop->cm_lock);
	ret = rig__events_cm_channel(loop, &consumer);
	if (!ret)
		ret = rig__events_watch_cm_fd(loop, g->head.ch->fd);
	if (!ret) {
		ret = rig__events_watch_cm_fd(loop, g->timer_fd);
		if (ret)
			rig__events_unwatch_fd(loop, g->head.ch->fd);
	}
	if (!ret) {
		rig__list_add(&loop->listeners, &p->link);
		pthread_mutex_lock(&g->lock);
		g->parts[g->n++] = p;
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
	rig__events_unwatch_fd(loop, g->head.ch->fd);
	rig__events_unwatch_fd(loop, g->timer_fd);
	rig__list_del(&p->link);
	pthread_mutex_unlock(&loop->cm_lock);
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
	ret = to_sockaddr(addr, port, &ss);
	if (ret)
		return ret;
	g = calloc(1, sizeof(*g));
	if (!g || !(g->parts = calloc((size_t)n, sizeof(*g->parts)))) {
		free(g);
		return rig__fail(ENOMEM, "rig_loops_listen: out of memory");
	}
	g->head.kind = CM_LISTENER;
	g->head.cookie = cookie;
	g->head.group = g;
	rig__list_init(&g->head.link);
	rig__list_init(&g->head.half_open);
	rig__list_init(&g->head.accepted);
	rig__list_init(&g->head.waiting);
	pthread_mutex_init(&g->lock, NULL);
	g->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (g->timer_fd < 0) {
		ret = rig__fail(errno, "rig_loops_listen: timerfd_create: %s", strerror(errno));
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
	ret = same_device(loops[0]->nic, g->head.id, "rig_loops_listen");
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
	g->refs = 1 + n;
	*out = &g->head;
	return 0;
out:
	shared_free(g);
	return ret;
}
