/* SPDX-License-Identifier: MIT */
/*
 * Completions in the application's own io_uring (include/rig/wait.h).
 *
 * One fd per NIC (an epoll set of the completion channel and the async
 * fd) carries every event of every queue pair, so the application queues
 * one multishot poll per NIC and an event costs the same with one queue
 * pair as with thousands: the CQ context names the queue pair directly.
 * A ring is armed when it is handed to the application, before it polls
 * it dry: the arm-then-drain order that loses no wakeup.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#include <liburing.h>

#include "internal.h"

static void arm(struct rig__qp *qp, enum rig_side side)
{
	/* A refusal here leaves the ring unarmed; its next poll still
	 * works, and the failure, if any, shows in its completions. */
	ibv_req_notify_cq(qp->pub.ring[side].cq, 0);
}

void rig__loop_arm(struct rig__qp *qp)
{
	if (!qp->nic->watched)
		return;
	arm(qp, RIG_SEND);
	arm(qp, RIG_RECEIVE);
}

int rig__loop_reserve(struct rig_nic *nic, unsigned nqps)
{
	struct rig_ready *p;
	unsigned cap;

	if (2 * nqps <= nic->pending_cap)
		return 0;
	cap = nic->pending_cap ? 2 * nic->pending_cap : 64;
	p = realloc(nic->pending, cap * sizeof(*p));
	if (!p)
		return rig__fail(ENOMEM, "rig_qp_make: no memory for the ready list");
	nic->pending = p;
	nic->pending_cap = cap;
	return 0;
}

/*
 * A listed ring stays unarmed until it is handed out: each event uses up
 * the arming, and arming a ring that is still listed would only raise
 * events for a ring the application is told of anyway. Arming happens at
 * hand-out, before the application polls it dry (arm, then poll).
 */
void rig__loop_ready(struct rig__qp *qp, enum rig_side side)
{
	struct rig_nic *nic = qp->nic;

	if (!nic->watched || (qp->pending & (1 << side)))
		return;
	/* rig__loop_reserve made room for both rings of every queue pair */
	nic->pending[nic->npending++] = (struct rig_ready){ &qp->pub, side };
	qp->pending |= 1 << side;
}

void rig__loop_forget(struct rig__qp *qp)
{
	struct rig_nic *nic = qp->nic;
	unsigned i, j;

	if (!qp->pending)
		return;
	for (i = j = 0; i < nic->npending; i++)
		if (nic->pending[i].qp != &qp->pub)
			nic->pending[j++] = nic->pending[i];
	nic->npending = j;
	qp->pending = 0;
}

/*
 * rig_nic_fd is readable while rings wait to be handed out, whoever
 * listed them: another thread's rig_qp_wait, rig_qp_destroy or
 * rig_nic_events may have read the channel or the async fd and used up
 * the readiness that would have woken the loop. The NIC's ready eventfd,
 * in the same epoll set, says so; it is written when the list fills and
 * read when it empties, so a loop that hands out everything it is woken
 * for pays no system call for it.
 */
void rig__loop_signal(struct rig_nic *nic)
{
	eventfd_t v;

	if (nic->npending && !nic->ready_signalled) {
		eventfd_write(nic->ready_efd, 1);
		nic->ready_signalled = true;
	} else if (!nic->npending && nic->ready_signalled) {
		eventfd_read(nic->ready_efd, &v);
		nic->ready_signalled = false;
	}
}

RIG_EXPORT int rig_nic_fd(const struct rig_nic *nic)
{
	return nic ? nic->epfd : rig__fail(EINVAL, "rig_nic_fd: nic is NULL");
}

static int queue_poll(struct io_uring *ring, struct rig_nic *nic,
		      uint64_t user_data)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);

	if (!sqe)
		return rig__fail(EBUSY, "rig_uring_watch: the io_uring has no free SQE");
	io_uring_prep_poll_multishot(sqe, nic->epfd, POLLIN);
	io_uring_sqe_set_data64(sqe, user_data);
	return 0;
}

RIG_EXPORT __cold int rig_uring_watch(struct io_uring *ring, struct rig_nic *nic,
				      uint64_t user_data)
{
	struct rig__list *l;
	int ret;

	if (!ring || !nic)
		return rig__fail(EINVAL, "rig_uring_watch: NULL argument");
	pthread_mutex_lock(&nic->lock);
	if (nic->watched) {
		ret = rig__fail(EALREADY, "rig_uring_watch: %s is watched already", nic->name);
		goto out;
	}
	ret = queue_poll(ring, nic, user_data);
	if (ret)
		goto out;
	nic->watched = true;
	for (l = nic->qps.next; l != &nic->qps; l = l->next)
		rig__loop_arm(container_of(l, struct rig__qp, link));
out:
	pthread_mutex_unlock(&nic->lock);
	return ret;
}

RIG_EXPORT int rig_nic_handle(struct rig_nic *nic, struct rig_ready *ready, int max)
{
	unsigned n;
	int ret, i;

	if (!nic || !ready || max <= 0)
		return rig__fail(EINVAL, "rig_nic_handle: %s",
				 max <= 0 ? "no room for ready rings" : "NULL argument");
	ret = rig_nic_events(nic);
	if (ret < 0)
		return ret;
	pthread_mutex_lock(&nic->lock);
	rig__nic_take_completion_events(nic);
	n = nic->npending < (unsigned)max ? nic->npending : (unsigned)max;
	for (i = 0; i < (int)n; i++) {
		ready[i] = nic->pending[i];
		rig__qp(ready[i].qp)->pending &= ~(1 << ready[i].side);
		arm(rig__qp(ready[i].qp), ready[i].side);
	}
	nic->npending -= n;
	memmove(nic->pending, nic->pending + n, nic->npending * sizeof(*nic->pending));
	rig__loop_signal(nic);
	pthread_mutex_unlock(&nic->lock);
	return (int)n;
}

RIG_EXPORT int rig_uring_handle(struct io_uring *ring, struct rig_nic *nic,
				const struct io_uring_cqe *cqe,
				struct rig_ready *ready, int max)
{
	int ret;

	if (!ring || !nic)
		return rig__fail(EINVAL, "rig_uring_handle: NULL argument");
	/* A multishot poll that ended (no F_MORE) is queued again. */
	if (cqe && !(cqe->flags & IORING_CQE_F_MORE)) {
		if (!io_uring_sq_space_left(ring))
			io_uring_submit(ring);
		ret = queue_poll(ring, nic, cqe->user_data);
		if (ret)
			return ret;
	}
	return rig_nic_handle(nic, ready, max);
}
