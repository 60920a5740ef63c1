/* SPDX-License-Identifier: MIT */
/*
 * The handshake's steps (conn.h), one per rdma_cm event; no step waits:
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
 *	                         the helper answers it (id_answer())
 *
 * A loop's connection hands its queue pair out (RIG_NEWS_ACCEPTED or
 * RIG_NEWS_DIALED) as soon as it is at RTS, before the handshake's next
 * message: it OWES the peer that message (the answer, or the dialer's
 * RTU) until the loop's thread next takes its steps after the news was
 * handed out (handshake_pay_owed()). So the receives the application
 * posted on the news are in place before the peer can learn of the
 * connection, and so can send. rig_accept and rig_dial hand out a queue
 * pair that is up. A handshake that fails once its news was handed out
 * fails the queue pair, which is the application's, as a peer that left
 * fails it, and the loop hands out RIG_NEWS_GONE (conn.c).
 *
 * Any other event before UP ends the handshake with its error (DONE). In
 * MAKING and ESTABLISHING the slow part (making a queue pair, taking it
 * to RTS) runs on the loop's helper thread (loop.c), which then takes
 * the next step under cm_lock; a step that fails meanwhile leaves the
 * helper to finish the drop. The loop's thread makes one control call
 * per event at most. The deadlines of a loop's handshakes run on the
 * loop's timer (handshake_deadlines). All here under the loop's cm_lock.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "probes.h"

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
bool handshake_departure(enum rdma_cm_event_type type)
{
	return type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_REJECTED ||
	       type == RDMA_CM_EVENT_DEVICE_REMOVAL || type == RDMA_CM_EVENT_CONNECT_ERROR ||
	       type == RDMA_CM_EVENT_UNREACHABLE;
}

int handshake_departure_err(enum rdma_cm_event_type type)
{
	return type == RDMA_CM_EVENT_DEVICE_REMOVAL ? ENODEV : ECONNRESET;
}

const char *handshake_departure_why(enum rdma_cm_event_type type)
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

/* ---------------------------------------------- the slow parts, off loop */

/* The helper's half of a step: its slow part, then the rest under cm_lock. */
static void job_work(struct rig__job *job)
{
	struct conn *c = container_of(job, struct conn, job);
	struct rig_loop *loop = c->loop;
	int ret = c->slow(c);

	pthread_mutex_lock(&loop->cm_lock);
	c->in_job = false;
	if (c->state == CONN_DONE)
		conn_finish(c);	/* failed or dropped meanwhile */
	else
		c->then(c, ret);
	handshake_dials_next(loop);
	pthread_mutex_unlock(&loop->cm_lock);
}

/* Runs @slow off the loop, then @then; both here for a blocking caller,
 * or when no helper thread can be had. */
void handshake_off_loop(struct conn *c, enum conn_state state, int (*slow)(struct conn *),
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

/* The slow parts of the steps; 0 or -errno. */
static int make_qp(struct conn *c)
{
	struct rig_nic *nic = c->loop->nic;
	struct rig_qp *qp;
	uint8_t gid[16];
	/* rig(7) M4: a queue pair that may face another host lives in the
	 * far protection domain, where no region grants remote access,
	 * whatever its provider lets its peer do. A listener knows its peer
	 * already (route_peer_may_be_local); a dialer knows where it goes:
	 * to an address of this NIC, it may meet a queue pair of ours. A
	 * NIC of a program built against rig 0.3 makes none (nic.c). */
	bool far = !nic->near_only &&
		   (c->accepting ? !c->may_be_local : !route_peer_is_self(c));
	int ret = rig__qp_make(c->loop, far, &qp);

	if (ret)
		return ret;
	c->qp = rig__qp(qp);
	/* Its endpoint names the address rdma_cm uses on our side, which
	 * need not be the NIC's first, and it keeps the connection's ports.
	 * Under the NIC's lock: M4's checks of other connections read them. */
	pthread_mutex_lock(&nic->lock);
	if (route_gid_of_address(rdma_get_local_addr(c->id), gid))
		memcpy(c->qp->self.gid, gid, 16);
	c->qp->cm_port[0] = rdma_get_src_port(c->id);
	c->qp->cm_port[1] = rdma_get_dst_port(c->id);
	pthread_mutex_unlock(&nic->lock);
	return 0;
}

static int connect_qp(struct conn *c)
{
	struct rig__route route;
	int ret = route_resolved(c, &route);

	return ret ? ret : rig__qp_connect(&c->qp->pub, &c->peer, c->may_be_local, &route);
}

int handshake_make_and_connect(struct conn *c)
{
	int ret = make_qp(c);

	return ret ? ret : connect_qp(c);
}

/* ---------------------------------------------------------------- steps */

/* Our endpoint, our port's MTU and our sink, in c->priv, to send with
 * @param: the peer's link may carry larger frames than ours, and each
 * side takes the smaller MTU; the peer's probes write into the sink
 * (region.c). A dialer sends "rig3"; a listener answers a request in
 * its own form: a peer that sent rig_cm_pack's ("rig1", a rig 0.2
 * dialer) reads only that form, and gets no MTU; one that sent "rig2"
 * (rig 0.3) reads "rig1" and "rig2" only, and gets no sink. 0 or -errno. */
static int our_param(struct conn *c, struct rdma_conn_param *param)
{
	struct rig_nic *nic = c->loop->nic;
	struct rig_cm_sink sink = { rig__sink_mr(c->qp)->rkey, (uintptr_t)nic->sink };
	struct rig_endpoint self;
	uint8_t mtu;
	int ret;

	rig_qp_endpoint(&c->qp->pub, &self);
	if (c->accepting && c->peer_form == 1) {
		rig_cm_pack(&self, c->priv);
		c->priv_len = RIG_CM_PRIVATE;
	} else {
		ret = route_port_mtu(c, &mtu);
		if (ret)
			return ret;
		mtu = route_mtu(c, (enum ibv_mtu)mtu);
		if (c->accepting && c->peer_form == 2) {
			rig_cm_pack_mtu(&self, mtu, c->priv);
			c->priv_len = RIG_CM_PRIVATE_MTU;
		} else {
			rig_cm_pack_sink(&self, mtu, &sink, c->priv);
			c->priv_len = RIG_CM_PRIVATE_SINK;
		}
	}
	route_conn_param(param, c->priv, c->priv_len, c->qp);
	return 0;
}

/* The dial's queue pair is made: send the request. */
static void dial_connect(struct conn *c, int ret)
{
	struct rdma_conn_param param;

	if (!ret)
		ret = our_param(c, &param);
	if (!ret && rdma_connect(c->id, &param))
		ret = rig__fail(errno, "%s: rdma_connect: %s", step_name(c), strerror(errno));
	if (ret)
		conn_fail(c, -ret);
	else
		c->state = CONN_CONNECTING;
}

/* The dial's queue pair is at RTS: tell the listener; a loop's dial
 * hands it out first, and tells the listener once that is done. */
static void dial_establish(struct conn *c, int ret)
{
	if (!ret && !c->blocking) {
		conn_hand_early(c);
		return;
	}
	if (!ret && rdma_establish(c->id))
		ret = rig__fail(errno, "%s: rdma_establish: %s", step_name(c),
				strerror(errno));
	if (ret)
		conn_fail(c, -ret);
	else
		conn_up(c);
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
		handshake_rearm(c->loop);
}

/* The accepting side's queue pair is at RTS: answer the request; a
 * loop's listener hands it out first, and answers once that is done. */
void handshake_accept_answer(struct conn *c, int ret)
{
	struct rdma_conn_param param;

	if (!ret)
		ret = our_param(c, &param);
	if (!ret && !c->blocking) {
		conn_hand_early(c);
		return;
	}
	if (!ret && rdma_accept(c->id, &param))
		ret = rig__fail(errno, "%s: rdma_accept: %s", step_name(c), strerror(errno));
	if (ret) {
		rdma_reject(c->id, NULL, 0);
		conn_fail(c, -ret);
		return;
	}
	answered(c);
}

/* What an OWING connection owes its peer, now that the application had
 * its news: the answer, or the dialer's RTU. */
static void pay(struct conn *c)
{
	struct rdma_conn_param param;
	int ret = 0;

	if (c->accepting) {
		route_conn_param(&param, c->priv, c->priv_len, c->qp);
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
		conn_fail(c, -ret);
	else if (c->accepting)
		answered(c);
	else
		conn_up(c);
}

/* Pays what the loop's connections owe, for the news handed out since
 * its last pass. A queue pair the application is closing owes nothing:
 * its release drops the handshake, as a dropped one is (the peer hears
 * the REJ). */
void handshake_pay_owed(struct rig_loop *loop)
{
	struct rig__list *l, *next;

	for (l = loop->handshakes.next; l != &loop->handshakes; l = next) {
		struct conn *c = container_of(l, struct conn, link);

		next = l->next;
		if (c->state == CONN_OWING && __atomic_load_n(&c->handed, __ATOMIC_ACQUIRE) &&
		    !__atomic_load_n(&c->qp->closing, __ATOMIC_ACQUIRE))
			pay(c);
	}
}

static void gone(struct conn *c, enum rdma_cm_event_type type)
{
	if (c->gone.what.result)
		return;		/* told once */
	conn_lose(c, handshake_departure_err(type), handshake_departure_why(type));
	id_answer(c);
	c->established = false;	/* answered: nothing more to end */
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
		ret = route_same_device(c->loop->nic, c->id, step_name(c));
		if (!ret && rdma_resolve_route(c->id, RIG_CM_RESOLVE_MS))
			ret = rig__fail(errno, "%s: rdma_resolve_route: %s", step_name(c),
					strerror(errno));
		if (ret)
			conn_fail(c, -ret);
		else
			c->state = CONN_RESOLVING_ROUTE;
		return;
	case CONN_RESOLVING_ROUTE:
		if (ev->type != RDMA_CM_EVENT_ROUTE_RESOLVED)
			break;
		handshake_off_loop(c, CONN_MAKING, make_qp, dial_connect);
		return;
	case CONN_CONNECTING:
		/* No QP is attached to the id: the CM stops at the response
		 * and waits for rdma_establish. */
		if (ev->type != RDMA_CM_EVENT_CONNECT_RESPONSE)
			break;
		/* Any form: a peer may answer "rig3" in "rig2" or "rig1"
		 * (rig-wire(7) THE FORMS MEET); it is probed as it answered. */
		ret = rig_cm_parse_sink(ev->priv, ev->priv_len, &c->peer, &c->peer_mtu,
					&c->peer_sink);
		if (ret < 0) {
			conn_fail(c, -ret);
			return;
		}
		c->peer_form = (uint8_t)ret;
		c->may_be_local = route_peer_may_be_local(c);
		handshake_off_loop(c, CONN_ESTABLISHING, connect_qp, dial_establish);
		return;
	case CONN_ACCEPTING:
		if (ev->type == RDMA_CM_EVENT_ESTABLISHED) {
			conn_up(c);
			return;
		}
		/* fall through */
	case CONN_OWING:
		/* The peer left a handshake whose queue pair is handed out. */
		if (c->early && handshake_departure(ev->type)) {
			conn_fail(c, handshake_departure_err(ev->type));
			return;
		}
		break;
	case CONN_UP:
		if (handshake_departure(ev->type))
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
	conn_fail(c, -rig__fail(err_of(ev), "%s: %s (status %d)", step_name(c),
				rdma_event_str(ev->type), ev->status));
}

/* Copies what a step needs of @raw into @ev, and acks @raw. */
void handshake_take_event(struct rdma_cm_event *raw, struct cm_ev *ev)
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

/* One event, copied and acked: a step of the connection it names, or a
 * request for the listener it came to. */
void handshake_step(const struct cm_ev *ev)
{
	struct rig_listener *l;
	struct conn *c;

	if (ev->type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		l = ev->listen_id->context;
		l->ops->request(l, ev);
		return;
	}
	c = ev->context;
	if (c && c->kind == CM_CONN)
		conn_step(c, ev);
	/* else a listener's own event: nothing to do */
}

/* ---------------------------------------------------- dials, deadlines */

/* The first step of a dial; 0 or the errno that ends it (the kernel may
 * know at once that no route leads there). */
int handshake_dial_start(struct conn *c, const char *addr, struct sockaddr_storage *ss)
{
	c->state = CONN_RESOLVING_ADDR;
	if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)ss, RIG_CM_RESOLVE_MS))
		return rig__fail(errno, "%s: rdma_resolve_addr(%s): %s", step_name(c), addr,
				 strerror(errno));
	return 0;
}

/*
 * Starts the loop's queued dials, oldest first, while a slot is free
 * (dial_start_turn): a storm of dials then makes queue pairs at the rate
 * handshakes finish, and each answer finds its dial's next step near the
 * head of the helper's queue. Called where no walk of the handshakes is
 * under way: a dial that fails at once leaves the list.
 */
void handshake_dials_next(struct rig_loop *loop)
{
	char addr[INET6_ADDRSTRLEN];
	struct rig__list *l, *next;
	struct conn *c;
	int ret;

	for (l = loop->handshakes.next; l != &loop->handshakes && loop->dials_queued &&
	     loop->dials < RIG_CM_DIALS; l = next) {
		next = l->next;
		c = container_of(l, struct conn, link);
		if (!dial_start_turn(c))
			continue;
		if (!inet_ntop(c->dst.ss_family, c->dst.ss_family == AF_INET6
			       ? (const void *)&((struct sockaddr_in6 *)&c->dst)->sin6_addr
			       : (const void *)&((struct sockaddr_in *)&c->dst)->sin_addr,
			       addr, sizeof(addr)))
			addr[0] = 0;
		ret = handshake_dial_start(c, addr, &c->dst);
		if (ret)
			conn_fail(c, -ret);
	}
}

/* The earliest deadline of the loop's handshakes and of the requests
 * waiting at its own listeners arms its timer; none disarms it. */
void handshake_rearm(struct rig_loop *loop)
{
	int64_t first = 0, at;
	struct rig__list *l;

	for (l = loop->handshakes.next; l != &loop->handshakes; l = l->next) {
		struct conn *c = container_of(l, struct conn, link);

		if (!first || c->deadline < first)
			first = c->deadline;
	}
	for (l = loop->listeners.next; l != &loop->listeners; l = l->next) {
		struct rig_listener *head = container_of(l, struct rig_listener, link);

		/* A part's requests wait at its shared listener's head,
		 * whose own timer bounds them (listen_shared.c). */
		if (head->head != head)
			continue;
		at = wait_end(head);
		if (at && (!first || at < first))
			first = at;
	}
	rig__events_set_timer(loop, first);
}

/* The loop's timer fired: drop what is past its bound; the dials whose
 * slots that freed start. */
void handshake_deadlines(struct rig_loop *loop)
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
			conn_fail(c, ETIMEDOUT);
		}
	}
	handshake_dials_next(loop);
	handshake_rearm(loop);
}
