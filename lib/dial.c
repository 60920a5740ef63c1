/* SPDX-License-Identifier: MIT */
/*
 * Dials (conn.h): rig_loop_dial, whose outcome is the loop's news, and
 * the blocking rig_dial. A loop has at most RIG_CM_DIALS dials under
 * way; the rest wait their turn with an id and nothing more (conn.c
 * counts them, handshake.c starts them).
 */
#include <stdlib.h>
#include <string.h>

#include "conn.h"

/* Makes the dial's id on @ch; 0 or -errno. */
static int dial_id(struct conn *c, struct rdma_event_channel *ch, const char *addr,
		   uint16_t port, struct sockaddr_storage *ss)
{
	int ret = route_sockaddr(addr, port, ss);

	if (ret)
		return ret;
	if (rdma_create_id(ch, &c->id, c, RDMA_PS_TCP))
		return rig__fail(errno, "rdma_create_id: %s", strerror(errno));
	return 0;
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
	ret = drive_channel(loop);
	if (!ret)
		ret = dial_id(c, loop->cm, addr, port, &c->dst);
	if (ret) {
		conn_discard(c, ret);
		pthread_mutex_unlock(&loop->cm_lock);
		return ret;
	}
	/* From here on, every outcome is news; the bound holds while the
	 * dial waits its turn too. */
	c->deadline = route_deadline_after(us);
	c->state = CONN_QUEUED;
	dial_queue(c);
	conn_set_home(c, HOME_HANDSHAKE, &loop->handshakes);
	handshake_dials_next(loop);
	handshake_rearm(loop);
	pthread_mutex_unlock(&loop->cm_lock);
	return 0;
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
	deadline = route_deadline_after(us);
	loop = nic->own;
	c = conn_new(loop, true, 0);
	if (!c)
		return rig__fail(ENOMEM, "rig_dial: out of memory");
	ret = rig__events_new_cm_channel(&ch);
	if (ret) {
		pthread_mutex_lock(&loop->cm_lock);
		conn_discard(c, ret);
		pthread_mutex_unlock(&loop->cm_lock);
		return ret;
	}
	ret = dial_id(c, ch, addr, port, &ss);
	if (!ret)
		ret = handshake_dial_start(c, addr, &ss);
	while (!ret && c->state != CONN_UP && c->state != CONN_DONE)
		ret = drive_pump(loop, ch, deadline, "rig_dial");
	if (!ret && c->state == CONN_DONE)
		ret = c->result;	/* rig_errmsg() was set by the step */
	pthread_mutex_lock(&loop->cm_lock);
	if (!ret)
		ret = drive_move_to_loop(c);
	if (!ret)
		*out = &c->qp->pub;
	else
		conn_end(c, ret);	/* a bound passed: no step failed it */
	pthread_mutex_unlock(&loop->cm_lock);
	rdma_destroy_event_channel(ch);
	return ret;
}
