/* SPDX-License-Identifier: MIT */
/*
 * Async events (SPEC F1, F6). The NIC reports some failures only through
 * its async fd. rig_nic_events may run in any thread, while each queue pair
 * belongs to its owner's thread (C3), so it only records the failure and
 * sets RIG__EVENT; the owner's next poll applies it.
 */
#include <string.h>
#include <sys/eventfd.h>

#include "internal.h"

static void post_event(struct rig__qp *qp, int error, const char *why)
{
	uint32_t broken = __atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE);

	if (broken & RIG__EVENT)
		return;		/* the first one counts */
	qp->event_error = error;
	qp->event_why = why;
	/* Release: the owner reads event_* after it sees the bit. */
	__atomic_or_fetch(&qp->pub.broken, RIG__EVENT, __ATOMIC_RELEASE);
	/* Both rings now have a failure to report: wake their sleepers, and
	 * tell the loop. */
	for (int side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		if (qp->sleeper[side] >= 0)
			eventfd_write(qp->sleeper[side], 1);
		rig__loop_ready(qp, side);
	}
}

static void qp_event(struct rig_nic *nic, struct ibv_qp *ibqp, int error,
		     const char *why)
{
	struct rig__list *l;

	/* Trust only queue pairs this NIC lists. */
	pthread_mutex_lock(&nic->lock);
	for (l = nic->qps.next; l != &nic->qps; l = l->next) {
		struct rig__qp *qp = container_of(l, struct rig__qp, link);

		if (!ibqp || qp->pub.ibqp == ibqp)
			post_event(qp, error, why);
	}
	rig__loop_signal(nic);
	pthread_mutex_unlock(&nic->lock);
}

RIG_EXPORT int rig_nic_events(struct rig_nic *nic)
{
	struct ibv_async_event ev;
	int n = 0;

	if (!nic)
		return rig__fail(EINVAL, "rig_nic_events: nic is NULL");
	while (!ibv_get_async_event(nic->ctx, &ev)) {
		n++;
		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
			qp_event(nic, ev.element.qp, EIO,
				 "the NIC reported the queue pair broken (QP_FATAL)");
			break;
		case IBV_EVENT_QP_REQ_ERR:
			qp_event(nic, ev.element.qp, EPROTO,
				 "the NIC reported an invalid request from the peer (QP_REQ_ERR)");
			break;
		case IBV_EVENT_QP_ACCESS_ERR:
			qp_event(nic, ev.element.qp, EACCES,
				 "the NIC reported an access violation by the peer (QP_ACCESS_ERR)");
			break;
		case IBV_EVENT_DEVICE_FATAL:
			qp_event(nic, NULL, ENODEV,
				 "the NIC failed (DEVICE_FATAL)");
			break;
		default:
			/* Port and GID changes fail nothing: the device's own
			 * completions say whether a send still gets through. */
			break;
		}
		ibv_ack_async_event(&ev);
	}
	if (errno != EAGAIN && errno != EWOULDBLOCK)
		return rig__fail(errno, "ibv_get_async_event(%s): %s", nic->name,
				 strerror(errno));
	return n;
}
