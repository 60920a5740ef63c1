/* SPDX-License-Identifier: MIT */
#ifndef RIG_LOOP_H
#define RIG_LOOP_H
/*
 * Loops: completions and connections in the application's own io_uring,
 * beside its sockets, files and timers, with one loop per thread.
 *
 * A loop belongs to one NIC and is watched by one thread. A queue pair is
 * bound to its loop when it is made (rig_qp_make_in()); its completion
 * events then reach that loop only: each loop has a completion channel of
 * its own, so the kernel sorts the events, and an event costs the same
 * with one loop as with many. rig_qp_make() makes a queue pair in the
 * NIC's own loop, rig_nic_loop(). rig_qp_wait() works on a queue pair of
 * any loop, watched or not.
 *
 * Each loop has one fd, rig_loop_fd(), readable when one of its rings has
 * a completion event, the NIC has an async event, a connection of the loop
 * moves on, or news waits to be handed out. Watching the loop arms its
 * rings, so that their completions reach that fd and are handed out as
 * news. In io_uring, rig_uring_watch() does so and queues a multishot poll
 * on the fd, tagged with the application's user_data, and
 * rig_uring_handle() turns the poll's CQE into a list of news:
 *
 *	struct rig_ready ready[64];
 *	struct rig_completion c;
 *	struct io_uring_cqe *cqe;
 *	int i, n;
 *
 *	rig_loop_open(nic, &loop);		// one per thread
 *	rig_qp_make_in(loop, &qp);		// ... its queue pairs
 *	rig_uring_watch(&ring, loop, RDMA_TAG);
 *	io_uring_submit(&ring);
 *	for (;;) {
 *		io_uring_wait_cqe(&ring, &cqe);
 *		if (cqe->user_data == RDMA_TAG) {
 *			n = rig_uring_handle(&ring, loop, cqe, ready, 64);
 *			for (i = 0; i < n; i++)
 *				if (ready[i].news == RIG_NEWS_RING)	// poll it dry
 *					while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1)
 *						on_completion(ready[i].qp, ready[i].side, &c);
 *				else
 *					on_connection(&ready[i]);	// cm.h
 *			// n == 64: more may wait; call again with cqe NULL,
 *			// or go on: rig_loop_fd() fires again for them
 *		} else {
 *			on_other_io(cqe);	// sockets, timers, files...
 *		}
 *		io_uring_cqe_seen(&ring, cqe);
 *		io_uring_submit(&ring);
 *	}
 *
 * In any other event loop, rig_loop_watch() watches the loop; the
 * application waits for rig_loop_fd() to be readable and calls
 * rig_loop_handle(), which hands out the same news. With epoll:
 *
 *	struct epoll_event ev = { .events = EPOLLIN }, out;
 *
 *	rig_loop_watch(loop);
 *	ev.data.ptr = loop;
 *	epoll_ctl(ep, EPOLL_CTL_ADD, rig_loop_fd(loop), &ev);
 *	for (;;) {
 *		epoll_wait(ep, &out, 1, -1);
 *		if (out.data.ptr == loop) {
 *			n = rig_loop_handle(loop, ready, 64);
 *			...			// as above
 *		} else {
 *			on_other_fd(&out);
 *		}
 *	}
 *
 * With libuv:
 *
 *	static void on_rdma(uv_poll_t *h, int status, int events)
 *	{
 *		int n = rig_loop_handle(h->data, ready, 64);
 *		...				// as above
 *	}
 *
 *	rig_loop_watch(loop);
 *	uv_poll_init(uv, &poll, rig_loop_fd(loop));
 *	poll.data = loop;
 *	uv_poll_start(&poll, UV_READABLE, on_rdma);
 *	uv_run(uv, UV_RUN_DEFAULT);
 *
 * The fd is level-triggered: news left for later keeps it readable.
 *
 * A ring is armed when it is handed out, before the application polls it
 * dry: a completion that lands after the arming raises an event, one
 * before it is found by the poll. A listed ring stays unarmed until then.
 */
#include <stdint.h>

#include <rig/qp.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rig_nic;
struct rig_loop;
/* liburing's; the application includes <liburing.h> (which needs POSIX
 * in strict C99, so this header does not). */
struct io_uring;
struct io_uring_cqe;

/* What rig_uring_handle() hands out. */
enum rig_news {
	RIG_NEWS_RING,		/* poll @qp's ring @side dry */
	RIG_NEWS_ACCEPTED,	/* a listener of the loop accepted @qp (cm.h),
				 * before answering: receives posted now are
				 * in place before the dialer can send */
	RIG_NEWS_DIALED,	/* rig_loop_dial() @cookie ended: @qp connected
				 * and @result 0 (before the last handshake
				 * message: the listener is not up yet), or
				 * @qp NULL and @result -errno */
	RIG_NEWS_GONE,		/* @qp's connection ended (@result: -ECONNRESET
				 * when the peer left, -ENODEV when the device
				 * went, -ETIMEDOUT when a liveness probe found
				 * the peer's host gone; a handshake that failed
				 * after its news: also -ETIMEDOUT, -ECONNABORTED
				 * or the errno of its last step); its rings
				 * report the failure */
	RIG_NEWS_CLOSED,	/* rig_qp_close(@qp, @cookie) is done: @result 0
				 * (rig(7) D1 holds from now on), or -errno when
				 * the NIC refused (D2); @qp is only a name now */
};

struct rig_ready {
	struct rig_qp *qp;
	enum rig_side side;	/* RIG_NEWS_RING */
	enum rig_news news;
	int result;
	uint64_t cookie;	/* of the dial, the accepting listener, the close */
};

/**
 * rig_loop_open - a new loop of @nic, for one thread's event loop
 *
 * Returns 0 and sets *out, or -errno.
 */
int rig_loop_open(struct rig_nic *nic, struct rig_loop **out);

/**
 * rig_loop_close - close @loop: its listeners, half-open connections and
 * queue pairs go with it; a listener it shares with other loops
 * (rig_loops_listen()) it leaves. The NIC's own loop goes with the NIC only
 * (-EINVAL). Returns 0 or the first -errno met on the way.
 */
int rig_loop_close(struct rig_loop *loop);

/* The interval between liveness probes of a loop that rig_loop_open()
 * made, in ms: a host that vanishes is noticed within two of them and
 * the transport's retries (rig(7) LIVENESS). */
#define RIG_LIVENESS_MS 2000

/**
 * rig_loop_liveness - probe @loop's idle connections every @ms
 * milliseconds (0: never), so that a peer host that vanishes fails them
 * with -ETIMEDOUT and RIG_NEWS_GONE even when they only receive
 * (rig(7) LIVENESS)
 *
 * The probes run on the thread that handles the loop, which must be the
 * one that posts and polls the send rings of its connections. Returns 0,
 * or -EINVAL for a NULL @loop or @ms out of 0..86400000.
 */
int rig_loop_liveness(struct rig_loop *loop, int64_t ms);

/** rig_nic_loop - the NIC's own loop, which rig_qp_make() uses */
struct rig_loop *rig_nic_loop(struct rig_nic *nic);

/**
 * rig_qp_make_in - rig_qp_make(), with the queue pair bound to @loop for
 * its life
 */
int rig_qp_make_in(struct rig_loop *loop, struct rig_qp **out);

/**
 * rig_qp_close - rig_qp_destroy() off the loop's thread: returns at once
 *
 * The destroy runs on the loop's helper thread; RIG_NEWS_CLOSED with @qp
 * and @cookie comes out of the loop once it is done, and only then does
 * rig(7) D1 hold (the NIC writes no memory for @qp): free the memory its
 * entries named then. Meanwhile posts and polls of @qp return -EINVAL,
 * its entries get no completion, and the loop hands out no other news of
 * it. Returns 0, or -EINVAL for NULL, a queue pair closing already, or
 * one in the NIC's own loop (rig_qp_make, rig_dial, rig_accept: destroy
 * those); -ENOMEM. A failed call changes nothing.
 */
int rig_qp_close(struct rig_qp *qp, uint64_t cookie);

/**
 * rig_loop_fd - the loop's one fd, for io_uring, epoll or libuv loops
 *
 * Level-triggered: readable until rig_loop_handle() has handed out every
 * piece of news (another thread's rig_qp_wait, rig_qp_destroy or
 * rig_nic_events may have read the event that listed a ring).
 */
int rig_loop_fd(const struct rig_loop *loop);

/**
 * rig_loop_watch - watch @loop from any event loop (epoll, libuv, ...)
 *
 * Arms the rings of every queue pair the loop has, and will have, so that
 * rig_loop_fd() fires for their completions and rig_loop_handle() hands
 * them out. Returns 0, -EINVAL if @loop is NULL, or -EALREADY if @loop is
 * watched already (by this call or by rig_uring_watch()).
 */
int rig_loop_watch(struct rig_loop *loop);

/**
 * rig_uring_watch - watch @loop in the application's io_uring @ring
 *
 * rig_loop_watch(), plus one multishot poll on rig_loop_fd() tagged
 * @user_data, queued in @ring (not submitted). Returns 0, -EBUSY when
 * @ring has no free SQE (the loop is then not watched), or -EALREADY if
 * @loop is watched already. The watch lasts until the poll ends in an
 * error (rig_uring_handle()); then the loop may be watched again.
 */
int rig_uring_watch(struct io_uring *ring, struct rig_loop *loop,
		    uint64_t user_data);

/**
 * rig_uring_handle - handle a CQE tagged with @loop's user_data
 *
 * Re-queues the multishot poll if @cqe says it ended, then does what
 * rig_loop_handle() does. It submits nothing: with no SQE free for the
 * poll it returns -EBUSY and the loop is no longer watched (submit, then
 * rig_uring_watch() again; no news is lost). A @cqe whose res is negative ends the watch:
 * nothing is queued, and its res is returned (-ECANCELED when the
 * application cancelled the poll); news waits for the next watch.
 * Returns the count filled, or -errno.
 */
int rig_uring_handle(struct io_uring *ring, struct rig_loop *loop,
		     const struct io_uring_cqe *cqe, struct rig_ready *ready,
		     int max);

/**
 * rig_loop_handle - take the loop's events and hand out its news
 *
 * Takes the loop's completion events (acking them in batches), the NIC's
 * async events and the loop's connection events, moves its connections on
 * (and drops half-open ones past their bound), and fills @ready with up to
 * @max pieces of news; a ring failed by an async event or by its peer
 * leaving is listed too. With more than @max, call it again, or return to
 * the event loop: the loop's fd then fires again (a fresh wakeup, so a
 * multishot poll fires too). Connection requests are taken for a few
 * milliseconds per call at most; the rest wait for the next.
 *
 * Returns the count filled, or -errno.
 */
int rig_loop_handle(struct rig_loop *loop, struct rig_ready *ready, int max);

#ifdef __cplusplus
}
#endif
#endif
