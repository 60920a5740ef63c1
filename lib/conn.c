/* SPDX-License-Identifier: MIT */
/*
 * Connections by address (include/rig/cm.h): the layer above the queue
 * pair. rdma_cm carries the endpoints and resolves addresses; the queue
 * pair is rig's own, connected by rig_qp_connect, so its timeouts and
 * access rules are the same as for an endpoint exchanged any other way.
 * A connection owns its queue pair's rdma_cm id, and gives it back through
 * the queue pair's release hook when the queue pair is destroyed.
 *
 * Each handshake is a sequence of steps, one per rdma_cm event, and no
 * step waits: conn_event() takes one event and makes the next control
 * call. The slow part of a step (making a queue pair, taking it to RTS)
 * runs on the loop's helper thread (loop.c), which then makes the step's
 * rdma_cm call under cm_lock; so does freeing a queue pair of a dropped
 * handshake. The loop's thread makes one control call per event at most
 * (no more than the sends of a socket server's accept). A loop's connections get their events from the loop's rdma_cm
 * channel, read by the demultiplexer (events.c) whenever rig_loop_fd()
 * fires; their bounds run on the loop's timer. rig_dial and rig_accept
 * drive the same steps from a channel of their own, waiting on it with
 * poll(); a connection they made moves to the loop's channel once up, so
 * that the loop hears when its peer leaves.
 */
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

#include "internal.h"

/* Address and route resolution: rdma_cm wants a bound of its own; the
 * caller's bound applies too. */
#define RIG_CM_RESOLVE_MS 2000
#define RIG_CM_BACKLOG 1024
/* The loop's time one pass of conn_tick may take. */
#define RIG_CM_TICK_BUDGET_NS 5000000

/* What an rdma_cm id's context points to. */
enum cm_kind { CM_LISTENER, CM_CONN };

enum conn_state {
	CONN_RESOLVING_ADDR,	/* dial: rdma_resolve_addr sent */
	CONN_RESOLVING_ROUTE,	/* dial: rdma_resolve_route sent */
	CONN_MAKING,		/* its queue pair is being made (and for an
				 * accept, connected) off the loop */
	CONN_CONNECTING,	/* dial: rdma_connect sent */
	CONN_ESTABLISHING,	/* dial: its queue pair goes to RTS off the loop */
	CONN_ACCEPTING,		/* accept: rdma_accept sent */
	CONN_UP,
	CONN_DONE,		/* failed or dropped; freed soon */
};

struct rig_listener {
	enum cm_kind kind;
	struct rig_loop *loop;
	struct rdma_cm_id *id;
	struct rdma_event_channel *ch;	/* rig_listen's own, or the loop's */
	bool blocking;			/* rig_listen: rig_accept takes them */
	uint64_t cookie;
	struct rig__owned owned;	/* in loop->owned */
	/* rig_listen's: handshakes under way, and connections up that
	 * rig_accept has not handed out yet; -EPROTO once a request with
	 * garbage was rejected. */
	struct rig__list half_open, accepted;
	int rejected;
	unsigned handshakes;		/* under way, at most RIG_CM_HANDSHAKES */
};

struct conn {
	enum cm_kind kind;
	struct rig_loop *loop;
	struct rdma_cm_id *id;
	struct rig_listener *listener;	/* the accepting side's, while half-open */
	bool accepting;
	bool blocking;			/* rig_dial's or rig_listen's */
	enum conn_state state;
	int result;			/* once CONN_DONE or CONN_UP */
	int64_t deadline;		/* while half-open */
	uint64_t cookie;
	struct rig__qp *qp;
	struct rig_endpoint peer;
	/* While half-open: in loop->owned (loop-driven) or the listener's
	 * half_open; once up, in the listener's accepted (rig_listen's). */
	struct rig__owned owned;
	struct rig__qp_owner qp_owner;
	struct rig__news up, gone;	/* ACCEPTED or DIALED, then GONE */
	/* A step's slow part and what follows it (cm_lock held); while
	 * in_job, the helper thread runs them and owns qp. */
	struct rig__job job;
	bool in_job;
	int (*slow)(struct conn *c);
	void (*then)(struct conn *c, int ret);
};

static const struct rig__cm_consumer consumer;

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

static void conn_param(struct rdma_conn_param *p, const uint8_t *priv,
		       const struct rig__qp *qp)
{
	memset(p, 0, sizeof(*p));
	p->private_data = priv;
	p->private_data_len = RIG_CM_PRIVATE;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->qp_num = qp->pub.ibqp->qp_num;
	/* The CM exchanges these; rig_qp_connect sets the real ones. */
	p->responder_resources = 1;
	p->initiator_depth = 1;
}

/* ------------------------------------------------------------ lifetimes */

static void conn_owned_close(struct rig__owned *o);

/* The connection an entry of loop->owned is, or NULL for a listener. */
static struct conn *half_open(struct rig__list *l)
{
	struct rig__owned *o = container_of(l, struct rig__owned, link);

	return o->close == conn_owned_close ? container_of(o, struct conn, owned) : NULL;
}

/* The earliest deadline of the loop's half-open connections arms its
 * timer; none disarms it. cm_lock held. */
static void rearm(struct rig_loop *loop)
{
	int64_t first = 0;
	struct rig__list *l;

	for (l = loop->owned.next; l != &loop->owned; l = l->next) {
		struct conn *c = half_open(l);

		if (c && (!first || c->deadline < first))
			first = c->deadline;
	}
	rig__events_set_timer(loop, first);
}

static void conn_free(struct conn *c)
{
	if (c->qp) {
		/* Not through the release hook: we are that connection. */
		c->qp->owner = NULL;
		rig__qp_free(c->qp);
	}
	if (c->id)
		rdma_destroy_id(c->id);
	free(c);
}

static void free_when_handed(struct rig__news *n)
{
	free(container_of(n, struct conn, up));
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

	c->qp->owner = NULL;
	if (r) {
		*r = (struct reap){ .job.work = reap_work, .qp = c->qp };
		if (!rig__loop_defer(c->loop, &r->job))
			goto out;
		free(r);
	}
	rig__qp_free(c->qp);
out:
	c->qp = NULL;
}

/* The rest of fail(), once no helper works on @c. */
static void drop(struct conn *c)
{
	if (c->qp)
		free_qp(c);
	if (c->id) {
		rdma_destroy_id(c->id);
		c->id = NULL;
	}
	if (c->blocking)
		return;		/* the blocking wrapper frees it */
	if (c->accepting) {
		free(c);
		return;
	}
	c->up.what = (struct rig_ready){ NULL, RIG_SEND, RIG_NEWS_DIALED, c->result, c->cookie };
	c->up.handed = free_when_handed;
	rig__loop_post(c->loop, &c->up);
}

/*
 * Ends a handshake that did not make it, with -@err. A dial the loop
 * drives reports it as news, and its memory goes when the news is handed
 * out; an accept that fails is dropped without a word. While the helper
 * works on it, the helper finishes the drop.
 */
static void fail(struct conn *c, int err)
{
	if (c->listener && c->state != CONN_UP && c->state != CONN_DONE)
		c->listener->handshakes--;
	c->listener = NULL;
	c->state = CONN_DONE;
	c->result = -err;
	rig__list_del(&c->owned.link);
	if (!c->in_job)
		drop(c);
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
		drop(c);	/* failed or dropped meanwhile */
	else
		c->then(c, ret);
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
		c->in_job = true;
		if (!rig__loop_defer(c->loop, &c->job))
			return;
		c->in_job = false;
	}
	then(c, slow(c));
}

/* The queue pair goes (rig_qp_destroy): the connection goes with it. */
static void release(struct rig__qp_owner *o)
{
	struct conn *c = container_of(o, struct conn, qp_owner);
	struct rig_loop *loop = c->loop;

	/* Under cm_lock no event of the id is being handled: every one read
	 * is acked, so destroying the id cannot wait. */
	pthread_mutex_lock(&loop->cm_lock);
	rig__list_del(&c->owned.link);	/* if rig_accept never took it */
	pthread_mutex_lock(&loop->lock);
	rig__list_del(&c->up.link);
	rig__list_del(&c->gone.link);
	pthread_mutex_unlock(&loop->lock);
	rdma_disconnect(c->id);
	rdma_destroy_id(c->id);
	pthread_mutex_unlock(&loop->cm_lock);
	free(c);
}

static void conn_owned_close(struct rig__owned *o)
{
	conn_free(container_of(o, struct conn, owned));
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
	c->owned.close = conn_owned_close;
	c->qp_owner.release = release;
	rig__list_init(&c->owned.link);
	rig__list_init(&c->up.link);
	rig__list_init(&c->gone.link);
	return c;
}

/* The handshake is done: the queue pair is the application's now. */
static void up(struct conn *c)
{
	struct rig_listener *l = c->listener;

	if (l)
		l->handshakes--;
	c->state = CONN_UP;
	c->result = 0;
	c->qp->owner = &c->qp_owner;
	rig__list_del(&c->owned.link);
	c->gone.what = (struct rig_ready){ &c->qp->pub, RIG_SEND, RIG_NEWS_GONE, 0,
					   l ? l->cookie : c->cookie };
	if (c->blocking && l) {
		rig__list_add(l->accepted.prev, &c->owned.link);
		return;
	}
	if (c->blocking)
		return;
	c->up.what = (struct rig_ready){ &c->qp->pub, RIG_SEND,
					 l ? RIG_NEWS_ACCEPTED : RIG_NEWS_DIALED, 0,
					 l ? l->cookie : c->cookie };
	rig__loop_post(c->loop, &c->up);
}

/* ---------------------------------------------------------------- steps */

/* What a step needs of an event, copied so the event can be acked first
 * (rdma_destroy_id waits for the acks of its events). */
struct cm_ev {
	enum rdma_cm_event_type type;
	int status;
	struct rdma_cm_id *id, *listen_id;
	uint8_t priv[64];
	size_t priv_len;
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

/* The slow parts of the steps; 0 or -errno. */
static int make_qp(struct conn *c)
{
	struct rig_qp *qp;
	int ret = rig_qp_make_in(c->loop, &qp);

	if (!ret)
		c->qp = rig__qp(qp);
	return ret;
}

static int make_and_connect_qp(struct conn *c)
{
	int ret = make_qp(c);

	return ret ? ret : rig_qp_connect(&c->qp->pub, &c->peer);
}

static int connect_qp(struct conn *c)
{
	return rig_qp_connect(&c->qp->pub, &c->peer);
}

/* Our endpoint, in @priv, to send with @param. */
static void our_param(struct conn *c, struct rdma_conn_param *param,
		      uint8_t priv[RIG_CM_PRIVATE])
{
	struct rig_endpoint self;

	rig_qp_endpoint(&c->qp->pub, &self);
	rig_cm_pack(&self, priv);
	conn_param(param, priv, c->qp);
}

/* The dial's queue pair is made: send the request. */
static void dial_connect(struct conn *c, int ret)
{
	struct rdma_conn_param param;
	uint8_t priv[RIG_CM_PRIVATE];

	if (!ret) {
		our_param(c, &param, priv);
		if (rdma_connect(c->id, &param))
			ret = rig__fail(errno, "rdma_connect: %s", strerror(errno));
	}
	if (ret)
		fail(c, -ret);
	else
		c->state = CONN_CONNECTING;
}

/* The dial's queue pair is at RTS: tell the listener. */
static void dial_establish(struct conn *c, int ret)
{
	if (!ret && rdma_establish(c->id))
		ret = rig__fail(errno, "rdma_establish: %s", strerror(errno));
	if (ret)
		fail(c, -ret);
	else
		up(c);
}

/* The dialing side's steps; 0 or the errno that ends the dial. */
static int dial_step(struct conn *c, const struct cm_ev *ev)
{
	int ret;

	switch (c->state) {
	case CONN_RESOLVING_ADDR:
		if (ev->type != RDMA_CM_EVENT_ADDR_RESOLVED)
			break;
		ret = same_device(c->loop->nic, c->id, "rig_dial");
		if (ret)
			return -ret;
		if (rdma_resolve_route(c->id, RIG_CM_RESOLVE_MS))
			return -rig__fail(errno, "rdma_resolve_route: %s", strerror(errno));
		c->state = CONN_RESOLVING_ROUTE;
		return 0;
	case CONN_RESOLVING_ROUTE:
		if (ev->type != RDMA_CM_EVENT_ROUTE_RESOLVED)
			break;
		off_loop(c, CONN_MAKING, make_qp, dial_connect);
		return 0;
	case CONN_CONNECTING:
		/* No QP is attached to the id: the CM stops at the response
		 * and waits for rdma_establish. */
		if (ev->type != RDMA_CM_EVENT_CONNECT_RESPONSE)
			break;
		ret = rig_cm_parse(ev->priv, ev->priv_len, &c->peer);
		if (ret)
			return -ret;
		off_loop(c, CONN_ESTABLISHING, connect_qp, dial_establish);
		return 0;
	default:
		break;
	}
	return -rig__fail(err_of(ev), "rig_dial: %s (status %d)", rdma_event_str(ev->type),
			  ev->status);
}

/* The accepting side's queue pair is at RTS: answer the request. */
static void accept_answer(struct conn *c, int ret)
{
	struct rdma_conn_param param;
	uint8_t priv[RIG_CM_PRIVATE];
	bool blocking = c->blocking;

	if (!ret) {
		our_param(c, &param, priv);
		if (rdma_accept(c->id, &param))
			ret = -errno;
	}
	if (ret) {
		rdma_reject(c->id, NULL, 0);
		fail(c, -ret);
		if (blocking)
			free(c);
		return;
	}
	/* The peer's time starts now: the time a burst of requests waited
	 * for their queue pairs was ours. */
	c->state = CONN_ACCEPTING;
	c->deadline = rig__now_ns() + RIG_CM_HALF_OPEN_MS * 1000000ll;
	if (!blocking)
		rearm(c->loop);
}

/* A new request on listener @l: answer it, or reject it. */
static void accept_step(struct rig_listener *l, const struct cm_ev *ev)
{
	struct rig_loop *loop = l->loop;
	struct rig_endpoint peer;
	struct conn *c;
	int ret;

	ret = rig_cm_parse(ev->priv, ev->priv_len, &peer);
	if (!ret)
		ret = same_device(loop->nic, ev->id, "rig_accept");
	/* Shed load: a flood of requests costs a reject each, not a queue
	 * pair each. */
	if (!ret && l->handshakes >= RIG_CM_HANDSHAKES)
		ret = rig__fail(EAGAIN, "rig_accept: %u handshakes under way already",
				l->handshakes);
	c = ret ? NULL : conn_new(loop, l->blocking, l->cookie);
	if (!c) {
		l->rejected = ret ? ret : -ENOMEM;
		rdma_reject(ev->id, NULL, 0);
		rdma_destroy_id(ev->id);
		return;
	}
	c->listener = l;
	c->accepting = true;
	l->handshakes++;
	c->id = ev->id;
	c->id->context = c;
	c->peer = peer;
	/* No bound while its queue pair is made: that is our own work, and
	 * RIG_CM_HANDSHAKES bounds how much of it may wait. */
	c->deadline = INT64_MAX / 2;
	rig__list_add(l->blocking ? &l->half_open : &loop->owned, &c->owned.link);
	off_loop(c, CONN_MAKING, make_and_connect_qp, accept_answer);
}

/* A connection that is up hears that its peer left, or its device went:
 * its queue pair fails at once, as an async event fails it (F1, F6). */
static void gone(struct conn *c, const struct cm_ev *ev)
{
	int err = ev->type == RDMA_CM_EVENT_DEVICE_REMOVAL ? ENODEV : ECONNRESET;
	const char *why = ev->type == RDMA_CM_EVENT_DEVICE_REMOVAL
		? "the device went away (rdma_cm DEVICE_REMOVAL)"
		: ev->type == RDMA_CM_EVENT_DISCONNECTED
		? "the peer left (rdma_cm DISCONNECTED)"
		: ev->type == RDMA_CM_EVENT_REJECTED
		? "the peer dropped the handshake after ours ended (rdma_cm REJECTED)"
		: "the connection failed (rdma_cm event after it was up)";

	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	if (c->gone.what.result)
		return;		/* told once */
	rig__events_fail_qp(c->qp, err, why);
	/* F2: the NIC runs nothing more of it; what it completed before
	 * counts, what it flushes now completes with the failure's error. */
	ibv_modify_qp(c->qp->pub.ibqp, &attr, IBV_QP_STATE);
	c->gone.what.result = -err;
	rig__loop_post(c->loop, &c->gone);
	/* Answer the peer's disconnect request, so its side completes. */
	rdma_disconnect(c->id);
}

/* One event, of either kind of channel; acks it. cm_lock held, or the
 * channel is the blocking caller's own. */
static void conn_event(struct rig_loop *loop, struct rdma_cm_event *raw)
{
	struct cm_ev ev = { raw->event, raw->status, raw->id, raw->listen_id, { 0 }, 0 };
	const uint8_t *priv = raw->param.conn.private_data;
	size_t len = priv ? raw->param.conn.private_data_len : 0, i;
	struct conn *c;
	bool blocking;
	int ret;

	(void)loop;
	/* The transport pads private data with zeros: keep what fits, and
	 * only if the rest is padding (else it is not a rig endpoint). */
	ev.priv_len = len < sizeof(ev.priv) ? len : sizeof(ev.priv);
	for (i = ev.priv_len; i < len; i++)
		if (priv[i])
			ev.priv_len = 0;
	if (ev.priv_len)
		memcpy(ev.priv, priv, ev.priv_len);
	rdma_ack_cm_event(raw);

	if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
		accept_step(ev.listen_id->context, &ev);
		return;
	}
	c = ev.id->context;
	if (!c || c->kind != CM_CONN)
		return;		/* a listener's own events: nothing to do */
	switch (c->state) {
	case CONN_UP:
		/* REJECTED: a dial is up once its RTU is sent, but the
		 * listener may have dropped the handshake at its bound
		 * before the RTU came; the CM takes its REJ even now. */
		if (ev.type == RDMA_CM_EVENT_DISCONNECTED ||
		    ev.type == RDMA_CM_EVENT_REJECTED ||
		    ev.type == RDMA_CM_EVENT_DEVICE_REMOVAL ||
		    ev.type == RDMA_CM_EVENT_CONNECT_ERROR ||
		    ev.type == RDMA_CM_EVENT_UNREACHABLE)
			gone(c, &ev);
		return;
	case CONN_ACCEPTING:
		if (ev.type == RDMA_CM_EVENT_ESTABLISHED) {
			up(c);
			return;
		}
		blocking = c->blocking;
		fail(c, err_of(&ev));	/* frees a loop's accept */
		if (blocking)
			free(c);
		return;
	case CONN_DONE:
		return;
	default:
		ret = dial_step(c, &ev);
		if (ret)
			fail(c, ret);
	}
}

/* The loop's timer fired: drop what is past its bound. cm_lock held. */
static void conn_tick(struct rig_loop *loop)
{
	int64_t now = rig__now_ns(), end = now + RIG_CM_TICK_BUDGET_NS;
	struct rig__list *l, *next;

	/* A few per pass, and the timer, set to a deadline already past,
	 * fires again at once. */
	for (l = loop->owned.next; l != &loop->owned && rig__now_ns() < end; l = next) {
		struct conn *c = half_open(l);

		next = l->next;
		if (c && c->deadline <= now) {
			if (!c->listener)
				rig__fail(ETIMEDOUT, "rig_loop_dial: no answer in time");
			fail(c, ETIMEDOUT);
		}
	}
	rearm(loop);
}

static const struct rig__cm_consumer consumer = { conn_event, conn_tick };

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
		return rig__fail(errno, "rdma_resolve_addr(%s): %s", addr, strerror(errno));
	return 0;
}

RIG_EXPORT __cold int rig_loop_dial(struct rig_loop *loop, const char *addr, uint16_t port,
				    int64_t us, uint64_t cookie)
{
	struct sockaddr_storage ss;
	struct conn *c;
	int ret;

	if (!loop || us < 0)
		return rig__fail(EINVAL, "rig_loop_dial: bad argument");
	c = conn_new(loop, false, cookie);
	if (!c)
		return rig__fail(ENOMEM, "rig_loop_dial: out of memory");
	pthread_mutex_lock(&loop->cm_lock);
	ret = rig__events_cm_channel(loop, &consumer);
	if (!ret)
		ret = dial_id(c, loop->cm, addr, port, &ss);
	if (ret) {
		pthread_mutex_unlock(&loop->cm_lock);
		free(c);
		return ret;
	}
	c->deadline = deadline_after(us);
	rig__list_add(&loop->owned, &c->owned.link);
	/* From here on, every outcome is news. */
	ret = dial_start(c, addr, &ss);
	if (ret)
		fail(c, -ret);
	else
		rearm(loop);
	pthread_mutex_unlock(&loop->cm_lock);
	return 0;
}

static void listener_close(struct rig__owned *o)
{
	struct rig_listener *l = container_of(o, struct rig_listener, owned);

	struct rig__list *e, *next;

	/* Its handshakes under way (in the loop's list, or rig_listen's
	 * own) go with it, and connections rig_accept never took. */
	for (e = l->loop->owned.next; e != &l->loop->owned; e = next) {
		struct conn *c = half_open(e);

		next = e->next;
		if (c && c->listener == l && c->in_job) {
			fail(c, ECONNABORTED);	/* the helper drops it */
		} else if (c && c->listener == l) {
			rig__list_del(e);
			conn_free(c);
		}
	}
	while (l->half_open.next != &l->half_open) {
		struct conn *c = container_of(l->half_open.next, struct conn, owned.link);

		rig__list_del(&c->owned.link);
		conn_free(c);
	}
	while (l->accepted.next != &l->accepted) {
		struct conn *c = container_of(l->accepted.next, struct conn, owned.link);

		rig__list_del(&c->owned.link);
		c->qp->owner = NULL;
		rig__qp_free(c->qp);
		c->qp = NULL;
		conn_free(c);
	}
	rdma_destroy_id(l->id);
	if (l->blocking)
		rdma_destroy_event_channel(l->ch);
	free(l);
}

static int listen_on(struct rig_loop *loop, const char *addr, uint16_t port,
		     bool blocking, uint64_t cookie, struct rig_listener **out)
{
	struct sockaddr_storage ss;
	struct rig_listener *l;
	int ret;

	ret = to_sockaddr(addr, port, &ss);
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l)
		return rig__fail(ENOMEM, "rig_listen: out of memory");
	l->kind = CM_LISTENER;
	l->loop = loop;
	l->blocking = blocking;
	l->cookie = cookie;
	l->owned.close = listener_close;
	rig__list_init(&l->half_open);
	rig__list_init(&l->accepted);
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
		ret = rig__fail(errno, "rdma_create_id: %s", strerror(errno));
		goto out_channel;
	}
	if (rdma_bind_addr(l->id, (struct sockaddr *)&ss)) {
		ret = rig__fail(errno, "rdma_bind_addr(%s:%u): %s", addr, port, strerror(errno));
		goto out_id;
	}
	ret = same_device(loop->nic, l->id, "rig_listen");
	if (ret)
		goto out_id;
	if (rdma_listen(l->id, RIG_CM_BACKLOG)) {
		ret = rig__fail(errno, "rdma_listen(%s:%u): %s", addr, port, strerror(errno));
		goto out_id;
	}
	rig__list_add(&loop->owned, &l->owned.link);
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
	struct rig_loop *loop;

	if (!l)
		return rig__fail(EINVAL, "rig_listener_close: NULL listener");
	loop = l->loop;
	/* Under cm_lock: no other thread is handling a request of its. Once
	 * its id is destroyed, the kernel has dropped the requests still
	 * queued for it. */
	pthread_mutex_lock(&loop->cm_lock);
	rig__list_del(&l->owned.link);
	listener_close(&l->owned);
	pthread_mutex_unlock(&loop->cm_lock);
	return 0;
}

/* --------------------------------------------------- the blocking wrappers */

/* Hands @ch's pending events to the steps; with none, waits for one
 * until @deadline. 0, or -ETIMEDOUT when nothing came by then. */
static int pump(struct rig_loop *loop, struct rdma_event_channel *ch, int64_t deadline,
		const char *step)
{
	struct pollfd pfd = { ch->fd, POLLIN, 0 };
	struct rdma_cm_event *ev;
	int64_t left;
	int n = 0;

	for (;;) {
		while (!rdma_get_cm_event(ch, &ev)) {
			conn_event(loop, ev);
			n++;
		}
		if (n)
			return 0;
		left = deadline - rig__now_ns();
		if (left <= 0)
			return rig__fail(ETIMEDOUT, "%s: no answer in time", step);
		if (poll(&pfd, 1, (int)((left + 999999) / 1000000)) < 0 && errno != EINTR)
			return rig__fail(errno, "%s: poll: %s", step, strerror(errno));
	}
}

/* A connection up on a channel of its own moves to its loop's, where the
 * loop hears of its peer leaving. */
static int move_to_loop(struct conn *c)
{
	struct rig_loop *loop = c->loop;
	int ret;

	pthread_mutex_lock(&loop->cm_lock);
	ret = rig__events_cm_channel(loop, &consumer);
	if (!ret && rdma_migrate_id(c->id, loop->cm))
		ret = rig__fail(errno, "rdma_migrate_id: %s", strerror(errno));
	if (!ret)
		c->blocking = false;
	pthread_mutex_unlock(&loop->cm_lock);
	return ret;
}

RIG_EXPORT __cold int rig_dial(struct rig_nic *nic, const char *addr, uint16_t port,
			       int64_t us, struct rig_qp **out)
{
	int64_t deadline = deadline_after(us);
	struct rdma_event_channel *ch;
	struct sockaddr_storage ss;
	struct conn *c;
	int ret;

	if (!nic || !out || us < 0)
		return rig__fail(EINVAL, "rig_dial: bad argument");
	c = conn_new(nic->own, true, 0);
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
		ret = pump(c->loop, ch, deadline, "rig_dial");
	if (!ret && c->state == CONN_DONE)
		ret = c->result;	/* rig_errmsg() was set by the step */
	if (!ret)
		ret = move_to_loop(c);
	if (!ret) {
		*out = &c->qp->pub;
		rdma_destroy_event_channel(ch);
		return 0;
	}
	if (c->state == CONN_UP)
		c->state = CONN_DONE;
	c->owned.close(&c->owned);	/* conn_free, with the errno kept */
	rdma_destroy_event_channel(ch);
	return ret;
}

/* rig_listen's handshakes past their bound are dropped. */
static void drop_late(struct rig_listener *l, int64_t now)
{
	struct rig__list *e, *next;

	for (e = l->half_open.next; e != &l->half_open; e = next) {
		struct conn *c = container_of(e, struct conn, owned.link);

		next = e->next;
		if (c->deadline <= now) {
			fail(c, ETIMEDOUT);
			free(c);
		}
	}
}

RIG_EXPORT __cold int rig_accept(struct rig_listener *l, int64_t us, struct rig_qp **out)
{
	int64_t deadline = deadline_after(us), wait_until;
	struct rig__list *e;
	struct conn *c;
	int ret;

	if (!l || !out || us < 0)
		return rig__fail(EINVAL, "rig_accept: bad argument");
	if (!l->blocking)
		return rig__fail(EINVAL, "rig_accept: the listener's loop accepts for it");
	for (;;) {
		drop_late(l, rig__now_ns());
		if (l->accepted.next != &l->accepted) {
			c = container_of(l->accepted.next, struct conn, owned.link);
			rig__list_del(&c->owned.link);
			ret = move_to_loop(c);
			if (ret) {
				conn_free(c);
				return ret;
			}
			*out = &c->qp->pub;
			return 0;
		}
		if (l->rejected) {
			ret = l->rejected;
			l->rejected = 0;
			return rig__fail(-ret, "rig_accept: request rejected: %s", rig_errmsg());
		}
		/* Past the caller's bound, a handshake under way still gets
		 * its own. */
		wait_until = deadline;
		for (e = l->half_open.next; e != &l->half_open; e = e->next) {
			c = container_of(e, struct conn, owned.link);
			if (c->deadline > wait_until)
				wait_until = c->deadline;
		}
		ret = pump(l->loop, l->ch, wait_until, "waiting for a connection");
		if (ret)
			return ret;
	}
}
