/* SPDX-License-Identifier: MIT */
/*
 * A raw rdma_cm peer's side of a handshake, for the suites that dial rig
 * as a peer written with plain librdmacm would: a non-blocking event
 * channel, an id resolved to an address, and the events it expects.
 * Included by one file of a test program that links librdmacm.
 */
#ifndef T_RAW_CM_H
#define T_RAW_CM_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <criterion/criterion.h>

#include "t_device.h"

struct raw_ev {
	enum rdma_cm_event_type type;
	struct rdma_cm_id *id;
	uint8_t priv[96];
	size_t len;
};

/* The next event of @ch (non-blocking), waited for up to @ms; acked, its
 * private data copied. */
static inline struct raw_ev raw_next(struct rdma_event_channel *ch, int ms)
{
	struct pollfd pfd = { ch->fd, POLLIN, 0 };
	double end = t_now_ms() + ms;
	struct rdma_cm_event *ev;
	struct raw_ev r;

	memset(&r, 0, sizeof(r));
	while (rdma_get_cm_event(ch, &ev)) {
		cr_assert_eq(errno, EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
		cr_assert_lt(t_now_ms(), end, "no rdma_cm event in %d ms", ms);
		poll(&pfd, 1, (int)(end - t_now_ms()) + 1);
	}
	r.type = ev->event;
	r.id = ev->id;
	if (ev->param.conn.private_data) {
		r.len = ev->param.conn.private_data_len;
		if (r.len > sizeof(r.priv))
			r.len = sizeof(r.priv);
		memcpy(r.priv, ev->param.conn.private_data, r.len);
	}
	rdma_ack_cm_event(ev);
	return r;
}

static inline void raw_expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		       struct raw_ev *out)
{
	struct raw_ev r = raw_next(ch, 10000);

	cr_assert_eq(r.type, want, "rdma_cm event %s, not %s", rdma_event_str(r.type),
		     rdma_event_str(want));
	if (out)
		*out = r;
}

static inline struct rdma_event_channel *raw_channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	cr_assert_not_null(ch, "rdma_create_event_channel: %s", strerror(errno));
	cr_assert_eq(fcntl(ch->fd, F_SETFL, O_NONBLOCK), 0);
	return ch;
}

static inline void to_sin(struct sockaddr_in *sin, const char *ip, uint16_t port)
{
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	cr_assert_eq(inet_pton(AF_INET, ip, &sin->sin_addr), 1, "address %s", ip);
}

/* An id on @ch with its route to @ip, @port resolved: ready to connect. */
static inline struct rdma_cm_id *raw_resolve(struct rdma_event_channel *ch, const char *ip,
				      uint16_t port)
{
	struct sockaddr_in sin;
	struct rdma_cm_id *id;

	to_sin(&sin, ip, port);
	cr_assert_eq(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP), 0, "%s", strerror(errno));
	cr_assert_eq(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000), 0, "%s",
		     strerror(errno));
	raw_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL);
	cr_assert_eq(rdma_resolve_route(id, 2000), 0, "%s", strerror(errno));
	raw_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL);
	return id;
}

#endif
