/* SPDX-License-Identifier: MIT */
#ifndef RIG_WAIT_H
#define RIG_WAIT_H
/*
 * Waiting for completions, two ways.
 *
 * rig_qp_wait() waits for one ring: it spins briefly, then sleeps through
 * an io_uring of rig's own on the NIC's completion channel.
 *
 * The loop integration puts completions into an io_uring the application
 * owns, beside its sockets, files and timers. Each NIC has one fd,
 * rig_nic_fd(), readable when a watched ring has a completion event or the
 * NIC has an async event; rig_uring_watch() queues a multishot poll on it,
 * tagged with the application's user_data, and rig_uring_handle() turns
 * the poll's CQE into the list of rings to poll. The cost of an event does
 * not grow with the number of queue pairs, and the application makes no
 * verbs call:
 *
 *	struct rig_ready ready[64];
 *	struct rig_completion c;
 *	struct io_uring_cqe *cqe;
 *	int i, n;
 *
 *	rig_uring_watch(&ring, nic, RDMA_TAG);	// every queue pair of nic
 *	io_uring_submit(&ring);
 *	for (;;) {
 *		io_uring_wait_cqe(&ring, &cqe);
 *		if (cqe->user_data == RDMA_TAG) {
 *			n = rig_uring_handle(&ring, nic, cqe, ready, 64);
 *			for (i = 0; i < n; i++)		// poll each ring dry
 *				while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1)
 *					on_completion(ready[i].qp, ready[i].side, &c);
 *			// n == 64: call again with cqe NULL for the rest
 *		} else {
 *			on_other_io(cqe);	// sockets, timers, files...
 *		}
 *		io_uring_cqe_seen(&ring, cqe);
 *		io_uring_submit(&ring);
 *	}
 */
#include <stdint.h>

#include <rig/qp.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * rig_qp_wait - rig_qp_poll() once the oldest due entry of @side has a
 * completion, waiting at most @us microseconds (SPEC T2)
 *
 * Returns 1 with @c filled, 0 at the bound (the entry still due), or
 * -EINVAL if @us < 0 or no entry of @side is due.
 */
int rig_qp_wait(struct rig_qp *qp, enum rig_side side, int64_t us,
		struct rig_completion *c);

/* liburing's; the application includes <liburing.h> (which needs POSIX
 * in strict C99, so this header does not). */
struct io_uring;
struct io_uring_cqe;

/* A ring that has completions to take, or a failure to report. */
struct rig_ready {
	struct rig_qp *qp;
	enum rig_side side;
};

/**
 * rig_nic_fd - the NIC's one fd for event loops
 *
 * Readable when a watched ring has a completion event, the NIC has an
 * async event pending, or rings wait to be handed out (another thread's
 * rig_qp_wait, rig_qp_destroy or rig_nic_events may have taken the event
 * that listed them). Level-triggered: rig_uring_handle() (or
 * rig_nic_handle()) drains it when it hands out every ready ring. For
 * epoll or libuv loops.
 */
int rig_nic_fd(const struct rig_nic *nic);

/**
 * rig_uring_watch - watch every queue pair of @nic in the application's
 * io_uring @ring
 *
 * Arms the rings of every queue pair the NIC has, and will have, and queues
 * one multishot poll on rig_nic_fd() tagged @user_data (not submitted).
 * Returns 0, -EBUSY when @ring has no free SQE, or -EALREADY if @nic is
 * watched already.
 */
int rig_uring_watch(struct io_uring *ring, struct rig_nic *nic,
		    uint64_t user_data);

/**
 * rig_uring_handle - handle a CQE tagged with @nic's user_data
 *
 * Takes the NIC's completion events (acking them in batches) and its async
 * events, and fills @ready with up to @max rings to poll now; a ring failed
 * by an async event is listed too. Each ring handed out is armed first, so
 * poll it dry: a completion that lands after the arming raises an event,
 * and one before it is found by the poll. A listed ring stays unarmed
 * until it is handed out.
 * Re-queues the multishot poll if @cqe says it ended. With more than @max
 * ready, call it again with @cqe NULL for the rest.
 *
 * Returns the count filled, or -errno.
 */
int rig_uring_handle(struct io_uring *ring, struct rig_nic *nic,
		     const struct io_uring_cqe *cqe, struct rig_ready *ready,
		     int max);

/**
 * rig_nic_handle - rig_uring_handle() for loops that are not io_uring
 */
int rig_nic_handle(struct rig_nic *nic, struct rig_ready *ready, int max);

#ifdef __cplusplus
}
#endif
#endif
