/* SPDX-License-Identifier: MIT */
/*
 * Connecting by address (include/rig/cm.h). rdma_cm carries the endpoints
 * and resolves addresses; the queue pair is rig's own, connected by
 * rig_qp_connect, so its timeouts and access rules are the same as for an
 * endpoint exchanged any other way. The cm_id stays with the queue pair
 * until it is destroyed.
 */
#include <arpa/inet.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <rdma/rdma_cma.h>

#include "internal.h"

/* Address and route resolution, each bounded by the caller's deadline
 * too; rdma_cm wants a timeout of its own. */
#define RIG_CM_RESOLVE_MS 2000
/* Once a request is taken, the handshake gets this long whatever the
 * caller's bound: rig_accept(l, 0) after the listener's fd fired must not
 * give up on a connection it has already accepted. */
#define RIG_CM_HANDSHAKE_US 5000000

/* Owned by its NIC: rig_nic_close closes the listeners still open. */
struct rig_listener {
	struct rig_nic *nic;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct rig__list link;		/* in nic->listeners */
};

static int64_t deadline_after(int64_t us)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (us > INT64_MAX / 4000)
		return INT64_MAX / 2;
	return ts.tv_sec * 1000000000ll + ts.tv_nsec + us * 1000;
}

/* Waits for the next event of @ch until @deadline; 0 or -ETIMEDOUT. */
static int next_event(struct rdma_event_channel *ch, int64_t deadline,
		      struct rdma_cm_event **ev, const char *step)
{
	struct pollfd pfd = { ch->fd, POLLIN, 0 };
	struct timespec ts;
	int64_t left;

	for (;;) {
		if (!rdma_get_cm_event(ch, ev))
			return 0;
		if (errno != EAGAIN)
			return rig__fail(errno, "%s: rdma_get_cm_event: %s", step, strerror(errno));
		clock_gettime(CLOCK_MONOTONIC, &ts);
		left = deadline - (ts.tv_sec * 1000000000ll + ts.tv_nsec);
		if (left <= 0)
			return rig__fail(ETIMEDOUT, "%s: no answer in time", step);
		if (poll(&pfd, 1, (int)((left + 999999) / 1000000)) < 0 && errno != EINTR)
			return rig__fail(errno, "%s: poll: %s", step, strerror(errno));
	}
}

/* Waits for event @want; any other is an error, named. */
static int expect_event(struct rdma_event_channel *ch, int64_t deadline,
			enum rdma_cm_event_type want, struct rdma_cm_event **ev,
			const char *step)
{
	int ret = next_event(ch, deadline, ev, step), err;

	if (ret)
		return ret;
	if ((*ev)->event == want)
		return 0;
	switch ((*ev)->event) {
	case RDMA_CM_EVENT_REJECTED:
		err = ECONNREFUSED;
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
		err = (*ev)->status ? -(*ev)->status : EHOSTUNREACH;
		break;
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
		err = EHOSTUNREACH;
		break;
	default:
		err = EPROTO;
	}
	ret = rig__fail(err, "%s: %s (status %d)", step, rdma_event_str((*ev)->event),
			(*ev)->status);
	rdma_ack_cm_event(*ev);
	return ret;
}

/* A non-blocking event channel: waits go through poll with a bound. */
static int make_channel(struct rdma_event_channel **out)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	int ret;

	if (!ch)
		return rig__fail(errno ? errno : ENODEV, "rdma_create_event_channel: %s",
				 strerror(errno ? errno : ENODEV));
	ret = rig__set_nonblock(ch->fd, "the rdma_cm event channel");
	if (ret) {
		rdma_destroy_event_channel(ch);
		return ret;
	}
	*out = ch;
	return 0;
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
		       const struct rig_qp *qp)
{
	memset(p, 0, sizeof(*p));
	p->private_data = priv;
	p->private_data_len = RIG_CM_PRIVATE;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->qp_num = qp->ibqp->qp_num;
	/* The CM exchanges these; rig_qp_connect sets the real ones. */
	p->responder_resources = 1;
	p->initiator_depth = 1;
}

/* Hands @id and @ch to @qp, to go with it at destroy. */
static void attach(struct rig_qp *qp, struct rdma_cm_id *id,
		   struct rdma_event_channel *ch)
{
	rig__qp(qp)->cm_id = id;
	rig__qp(qp)->cm_ch = ch;
}

void rig__qp_cm_free(struct rig__qp *qp)
{
	if (qp->cm_id) {
		rdma_disconnect(qp->cm_id);
		rdma_destroy_id(qp->cm_id);
	}
	if (qp->cm_ch)
		rdma_destroy_event_channel(qp->cm_ch);
}

RIG_EXPORT __cold int rig_dial(struct rig_nic *nic, const char *addr, uint16_t port,
			       int64_t us, struct rig_qp **out)
{
	int64_t deadline = deadline_after(us);
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	struct rdma_conn_param param;
	struct rdma_cm_id *id;
	struct sockaddr_storage ss;
	struct rig_endpoint self, peer;
	uint8_t priv[RIG_CM_PRIVATE];
	struct rig_qp *qp = NULL;
	int ret;

	if (!nic || !out || us < 0)
		return rig__fail(EINVAL, "rig_dial: bad argument");
	ret = to_sockaddr(addr, port, &ss);
	if (ret)
		return ret;
	ret = make_channel(&ch);
	if (ret)
		return ret;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) {
		ret = rig__fail(errno, "rdma_create_id: %s", strerror(errno));
		goto out_channel;
	}
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, RIG_CM_RESOLVE_MS)) {
		ret = rig__fail(errno, "rdma_resolve_addr(%s): %s", addr, strerror(errno));
		goto out_id;
	}
	ret = expect_event(ch, deadline, RDMA_CM_EVENT_ADDR_RESOLVED, &ev, "resolving the address");
	if (ret)
		goto out_id;
	rdma_ack_cm_event(ev);
	ret = same_device(nic, id, "rig_dial");
	if (ret)
		goto out_id;
	if (rdma_resolve_route(id, RIG_CM_RESOLVE_MS)) {
		ret = rig__fail(errno, "rdma_resolve_route(%s): %s", addr, strerror(errno));
		goto out_id;
	}
	ret = expect_event(ch, deadline, RDMA_CM_EVENT_ROUTE_RESOLVED, &ev, "resolving the route");
	if (ret)
		goto out_id;
	rdma_ack_cm_event(ev);

	ret = rig_qp_make(nic, &qp);
	if (ret)
		goto out_id;
	rig_qp_endpoint(qp, &self);
	rig_cm_pack(&self, priv);
	conn_param(&param, priv, qp);
	if (rdma_connect(id, &param)) {
		ret = rig__fail(errno, "rdma_connect(%s): %s", addr, strerror(errno));
		goto out_qp;
	}
	/* No QP is attached to the id: the CM stops at the response and
	 * waits for rdma_establish. */
	ret = expect_event(ch, deadline, RDMA_CM_EVENT_CONNECT_RESPONSE, &ev, "connecting");
	if (ret)
		goto out_qp;
	ret = rig_cm_parse(ev->param.conn.private_data, ev->param.conn.private_data_len, &peer);
	rdma_ack_cm_event(ev);
	if (ret)
		goto out_qp;
	ret = rig_qp_connect(qp, &peer);
	if (ret)
		goto out_qp;
	if (rdma_establish(id)) {
		ret = rig__fail(errno, "rdma_establish: %s", strerror(errno));
		goto out_qp;
	}
	attach(qp, id, ch);
	*out = qp;
	return 0;

out_qp:
	rig_qp_destroy(qp);
out_id:
	rdma_destroy_id(id);
out_channel:
	rdma_destroy_event_channel(ch);
	return ret;
}

RIG_EXPORT __cold int rig_listen(struct rig_nic *nic, const char *addr, uint16_t port,
				 struct rig_listener **out)
{
	struct sockaddr_storage ss;
	struct rig_listener *l;
	int ret;

	if (!nic || !out)
		return rig__fail(EINVAL, "rig_listen: NULL argument");
	ret = to_sockaddr(addr, port, &ss);
	if (ret)
		return ret;
	l = calloc(1, sizeof(*l));
	if (!l)
		return rig__fail(ENOMEM, "rig_listen: out of memory");
	l->nic = nic;
	ret = make_channel(&l->ch);
	if (ret)
		goto out_free;
	if (rdma_create_id(l->ch, &l->id, NULL, RDMA_PS_TCP)) {
		ret = rig__fail(errno, "rdma_create_id: %s", strerror(errno));
		goto out_channel;
	}
	if (rdma_bind_addr(l->id, (struct sockaddr *)&ss)) {
		ret = rig__fail(errno, "rdma_bind_addr(%s:%u): %s", addr, port, strerror(errno));
		goto out_id;
	}
	ret = same_device(nic, l->id, "rig_listen");
	if (ret)
		goto out_id;
	if (rdma_listen(l->id, 64)) {
		ret = rig__fail(errno, "rdma_listen(%s:%u): %s", addr, port, strerror(errno));
		goto out_id;
	}
	pthread_mutex_lock(&nic->lock);
	rig__list_add(&nic->listeners, &l->link);
	pthread_mutex_unlock(&nic->lock);
	*out = l;
	return 0;

out_id:
	rdma_destroy_id(l->id);
out_channel:
	rdma_destroy_event_channel(l->ch);
out_free:
	free(l);
	return ret;
}

RIG_EXPORT int rig_listener_fd(const struct rig_listener *l)
{
	return l ? l->ch->fd : rig__fail(EINVAL, "rig_listener_fd: NULL listener");
}

RIG_EXPORT __cold int rig_accept(struct rig_listener *l, int64_t us, struct rig_qp **out)
{
	int64_t deadline = deadline_after(us);
	struct rdma_event_channel *ch = NULL;
	struct rdma_cm_event *ev;
	struct rdma_conn_param param;
	struct rdma_cm_id *id;
	struct rig_endpoint self, peer;
	uint8_t priv[RIG_CM_PRIVATE];
	struct rig_qp *qp = NULL;
	int ret;

	if (!l || !out || us < 0)
		return rig__fail(EINVAL, "rig_accept: bad argument");
	/* Only connection requests come to the listener's channel: each
	 * accepted id moves to a channel of its own below. */
	do {
		ret = next_event(l->ch, deadline, &ev, "waiting for a connection");
		if (ret)
			return ret;
		if (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
			rdma_ack_cm_event(ev);
	} while (ev->event != RDMA_CM_EVENT_CONNECT_REQUEST);
	id = ev->id;
	ret = rig_cm_parse(ev->param.conn.private_data, ev->param.conn.private_data_len, &peer);
	rdma_ack_cm_event(ev);
	if (!ret)
		ret = same_device(l->nic, id, "rig_accept");
	if (ret) {
		int keep = ret;

		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return rig__fail(-keep, "rig_accept: request rejected: %s", rig_errmsg());
	}
	ret = make_channel(&ch);
	if (ret)
		goto out_reject;
	if (rdma_migrate_id(id, ch)) {
		ret = rig__fail(errno, "rdma_migrate_id: %s", strerror(errno));
		goto out_reject;
	}
	ret = rig_qp_make(l->nic, &qp);
	if (ret)
		goto out_reject;
	ret = rig_qp_connect(qp, &peer);
	if (ret)
		goto out_reject;
	rig_qp_endpoint(qp, &self);
	rig_cm_pack(&self, priv);
	conn_param(&param, priv, qp);
	if (rdma_accept(id, &param)) {
		ret = rig__fail(errno, "rdma_accept: %s", strerror(errno));
		goto out_qp;
	}
	ret = expect_event(ch, deadline_after(RIG_CM_HANDSHAKE_US),
			   RDMA_CM_EVENT_ESTABLISHED, &ev, "accepting");
	if (ret)
		goto out_qp;
	rdma_ack_cm_event(ev);
	attach(qp, id, ch);
	*out = qp;
	return 0;

out_reject:
	rdma_reject(id, NULL, 0);
out_qp:
	if (qp)
		rig_qp_destroy(qp);
	rdma_destroy_id(id);
	if (ch)
		rdma_destroy_event_channel(ch);
	return ret;
}

void rig__listener_free(struct rig__list *link)
{
	struct rig_listener *l = container_of(link, struct rig_listener, link);
	struct rig_nic *nic = l->nic;

	pthread_mutex_lock(&nic->lock);
	rig__list_del(&l->link);
	pthread_mutex_unlock(&nic->lock);
	rdma_destroy_id(l->id);
	rdma_destroy_event_channel(l->ch);
	free(l);
}

RIG_EXPORT __cold int rig_listener_close(struct rig_listener *l)
{
	if (!l)
		return rig__fail(EINVAL, "rig_listener_close: NULL listener");
	rig__listener_free(&l->link);
	return 0;
}
