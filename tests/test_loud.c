/* SPDX-License-Identifier: MIT */
/*
 * What a new user meets first, said loudly: a loop no watch call watched,
 * an io_uring with no SQE free when the loop's poll must be queued again,
 * and a listener on every address (rig_uring_watch(3), rig_loop_listen(3)).
 */
#include <criterion/criterion.h>
#include <liburing.h>
#include <poll.h>
#include <string.h>

#include "t_device.h"

#define TAG_RIG 0x5249470000000000ull

/* Takes the loop's news until @qp's ring @side has had one completion of
 * @bytes, or 10 s pass; any other ring's completions are polled dry. */
static void await_ring(struct rig_loop *loop, struct rig_qp *qp, enum rig_side side,
		       uint32_t bytes, const char *what)
{
	struct pollfd pfd = { .fd = rig_loop_fd(loop), .events = POLLIN };
	struct rig_ready ready[8];
	struct rig_completion c;
	double end = t_now_ms() + 10000;
	bool got = false;
	int n, i;

	while (!got) {
		cr_assert_lt(t_now_ms(), end, "%s: no news of the ring in 10 s", what);
		if (poll(&pfd, 1, 100) != 1)
			continue;
		n = rig_loop_handle(loop, ready, 8);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		for (i = 0; i < n; i++) {
			if (ready[i].news != RIG_NEWS_RING)
				continue;
			while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1) {
				cr_assert_eq(c.error, 0, "%s", c.why ? c.why : "");
				if (ready[i].qp == qp && ready[i].side == side) {
					cr_assert_eq(c.bytes, bytes);
					got = true;
				}
			}
		}
	}
}

/*
 * A loop that no watch call watched hands out its rings' news from its
 * first rig_loop_handle on, as rig_loop_watch would have it: it used to
 * hand out none while its connections' news came, and a program that
 * forgot the watch looked half-working (T2: news of a ring with
 * completions is handed out).
 */
Test(loud, a_loop_never_watched_hands_out_its_rings_news_T2)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_ready ready[4];
	struct rig_loop *loop;
	struct rig_qp *a, *b;
	struct t_buf buf;

	cr_assert_eq(rig_loop_open(nic, &loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(loop, &a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(loop, &b), 0, "%s", rig_errmsg());
	t_buf(&buf, nic, 128, 1);
	t_connect(a, b);
	cr_assert_eq(rig_loop_handle(loop, ready, 4), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive(b, buf.r, 0, 64), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_send(a, buf.r, 64, 16), 0, "%s", rig_errmsg());
	await_ring(loop, b, RIG_RECEIVE, 16, "a loop never watched");
	/* A watch may still come, and is the only one. */
	cr_assert_eq(rig_loop_watch(loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_watch(loop), -EALREADY);
	cr_assert_eq(rig_qp_receive(b, buf.r, 0, 64), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_send(a, buf.r, 64, 16), 0, "%s", rig_errmsg());
	await_ring(loop, b, RIG_RECEIVE, 16, "the same loop, watched");
	cr_assert_eq(rig_qp_destroy(a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(b), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/*
 * The loop's multishot poll ended and the application's io_uring has no
 * SQE free to queue it again: rig_uring_handle submits none of the
 * application's SQEs (liburing's helpers never submit for the caller),
 * fails with -EBUSY and leaves the loop unwatched, so that, once the
 * application submitted, rig_uring_watch starts the watch again and the
 * news comes (C1: the failure is clear, and nothing of the caller's
 * changed).
 */
Test(loud, no_free_sqe_for_the_poll_submits_nothing_of_the_applications_C1)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_loop *loop = rig_nic_loop(nic);
	struct io_uring_cqe ended = { .user_data = TAG_RIG, .res = POLLIN, .flags = 0 };
	struct __kernel_timespec ts = { 0, 100 * 1000000 };
	struct rig_qp *a = t_qp(nic), *b = t_qp(nic);
	struct io_uring_cqe *cqe;
	struct io_uring_sqe *sqe;
	struct rig_ready ready[4];
	struct rig_completion c;
	struct io_uring ring;
	struct t_buf buf;
	bool got = false;
	int mine = 0, n, i;
	double end;

	t_buf(&buf, nic, 128, 2);
	t_connect(a, b);
	cr_assert_eq(io_uring_queue_init(4, &ring, 0), 0);
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG_RIG), 0, "%s", rig_errmsg());
	cr_assert_eq(io_uring_submit(&ring), 1);
	while ((sqe = io_uring_get_sqe(&ring))) {
		io_uring_prep_nop(sqe);
		io_uring_sqe_set_data64(sqe, 1);
		mine++;
	}
	cr_assert_eq(mine, 4);
	n = rig_uring_handle(&ring, loop, &ended, ready, 4);
	cr_assert_eq(n, -EBUSY, "rig_uring_handle: %d, not -EBUSY", n);
	cr_assert_eq(io_uring_sq_ready(&ring), 4,
		     "rig_uring_handle submitted %u of the application's 4 SQEs",
		     4 - io_uring_sq_ready(&ring));
	cr_assert(strstr(rig_errmsg(), "rig_uring_watch"), "%s", rig_errmsg());
	cr_assert_eq(io_uring_submit(&ring), 4);
	cr_assert_eq(rig_uring_watch(&ring, loop, TAG_RIG), 0,
		     "the loop stayed watched with no poll: %s", rig_errmsg());
	cr_assert_eq(io_uring_submit(&ring), 1);

	cr_assert_eq(rig_qp_receive(b, buf.r, 0, 64), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_send(a, buf.r, 64, 24), 0, "%s", rig_errmsg());
	for (end = t_now_ms() + 10000; !got;) {
		cr_assert_lt(t_now_ms(), end, "no news of the receive in 10 s");
		if (io_uring_submit_and_wait_timeout(&ring, &cqe, 1, &ts, NULL) < 0)
			continue;
		if (cqe->user_data != TAG_RIG) {
			io_uring_cqe_seen(&ring, cqe);	/* one of the nops */
			continue;
		}
		n = rig_uring_handle(&ring, loop, cqe, ready, 4);
		io_uring_cqe_seen(&ring, cqe);
		cr_assert_geq(n, 0, "rig_uring_handle: %d %s", n, rig_errmsg());
		for (i = 0; i < n; i++)
			while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1) {
				cr_assert_eq(c.error, 0);
				if (ready[i].qp == b && ready[i].side == RIG_RECEIVE) {
					cr_assert_eq(c.bytes, 24);
					got = true;
				}
			}
	}
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* Runs @loop (and @other beside it, if any) until @loop hands out @news
 * with @cookie, or 30 s pass; returns its queue pair. */
static struct rig_qp *await_conn(struct rig_loop *loop, enum rig_news news, uint64_t cookie,
				 struct rig_loop *other)
{
	struct rig_ready ready[8];
	double end = t_now_ms() + 30000;
	int n, i;

	for (;;) {
		cr_assert_lt(t_now_ms(), end, "no news %d in 30 s", (int)news);
		if (other) {
			n = rig_loop_handle(other, ready, 8);
			cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		}
		n = rig_loop_handle(loop, ready, 8);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		for (i = 0; i < n; i++)
			if (ready[i].news == news) {
				cr_assert_eq(ready[i].result, 0, "news %d: %d", (int)news,
					     ready[i].result);
				cr_assert_eq(ready[i].cookie, cookie);
				return ready[i].qp;
			}
		poll(NULL, 0, 2);
	}
}

/*
 * rig_loop_listen on 0.0.0.0 listens on every address, as plain rdma_cm
 * does (it gave -ENODEV: the wildcard names no device), and takes the
 * connections that come to its NIC; :: too.
 */
Test(loud, a_listener_on_the_wildcard_takes_its_nics_connections, .timeout = 120)
{
	struct rig_nic *nic = t_nic_open(t_other_dev());
	struct rig_loop *server, *client;
	struct rig_listener *l, *l6;
	struct rig_qp *accepted, *dialed;
	struct t_buf tx, rx;
	int ret;

	cr_assert_eq(rig_loop_open(nic, &server), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_open(nic, &client), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_watch(server), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_watch(client), 0, "%s", rig_errmsg());
	ret = rig_loop_listen(server, "0.0.0.0", 7390, 0x11, &l);
	cr_assert_eq(ret, 0, "rig_loop_listen(0.0.0.0): %d %s", ret, rig_errmsg());
	ret = rig_loop_listen(server, "::", 7391, 0x12, &l6);
	cr_assert_eq(ret, 0, "rig_loop_listen(::): %d %s", ret, rig_errmsg());
	cr_assert_eq(rig_loop_dial(client, t_other_ip(), 7390, 20000000, 0x21), 0, "%s",
		     rig_errmsg());
	accepted = await_conn(server, RIG_NEWS_ACCEPTED, 0x11, client);
	dialed = await_conn(client, RIG_NEWS_DIALED, 0x21, server);
	t_buf(&tx, nic, 64, 3);
	t_buf(&rx, nic, 64, 4);
	t_exchange(dialed, accepted, &tx, &rx, 40);
	cr_assert_eq(rig_listener_close(l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_listener_close(l6), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(client), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(server), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* Runs @loop until it hands out @news of @qp; returns that news. */
static struct rig_ready await_news_of(struct rig_loop *loop, struct rig_qp *qp,
				      enum rig_news news)
{
	struct rig_ready ready[8];
	struct rig_completion c;
	double end = t_now_ms() + 30000;
	int n, i;

	for (;;) {
		cr_assert_lt(t_now_ms(), end, "no news %d of the queue pair in 30 s", (int)news);
		n = rig_loop_handle(loop, ready, 8);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		for (i = 0; i < n; i++) {
			if (ready[i].news == RIG_NEWS_RING)
				while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1)
					;
			if (ready[i].qp == qp && ready[i].news == news)
				return ready[i];
		}
		poll(NULL, 0, 2);
	}
}

/*
 * A queue pair's cookie (rig_qp_set_cookie(3)): a connection's starts as
 * its dial's or listener's, and the loop hands back the one set last with
 * each piece of news of the queue pair, so that a server finds its state
 * of the connection from the news alone.
 */
Test(loud, a_queue_pairs_cookie_comes_back_with_its_news, .timeout = 120)
{
	struct rig_nic *nic = t_nic_open(t_other_dev());
	struct rig_loop *server, *client;
	struct rig_qp *accepted, *dialed;
	struct rig_listener *l;
	struct rig_ready r;
	struct t_buf tx, rx;

	cr_assert_eq(rig_loop_open(nic, &server), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_open(nic, &client), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_listen(server, t_other_ip(), 7392, 0x11, &l), 0, "%s",
		     rig_errmsg());
	cr_assert_eq(rig_loop_dial(client, t_other_ip(), 7392, 20000000, 0x21), 0, "%s",
		     rig_errmsg());
	accepted = await_conn(server, RIG_NEWS_ACCEPTED, 0x11, client);
	dialed = await_conn(client, RIG_NEWS_DIALED, 0x21, server);
	cr_assert_eq(rig_qp_cookie(accepted), 0x11, "the listener's cookie");
	cr_assert_eq(rig_qp_cookie(dialed), 0x21, "the dial's cookie");
	cr_assert_eq(rig_qp_set_cookie(accepted, 0xc0ffee), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_cookie(accepted), 0xc0ffee);
	cr_assert_eq(rig_qp_set_cookie(NULL, 1), -EINVAL);
	cr_assert_eq(rig_qp_cookie(NULL), 0);

	t_buf(&tx, nic, 64, 5);
	t_buf(&rx, nic, 64, 6);
	cr_assert_eq(rig_qp_receive(accepted, rx.r, 0, 64), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_send(dialed, tx.r, 0, 32), 0, "%s", rig_errmsg());
	r = await_news_of(server, accepted, RIG_NEWS_RING);
	cr_assert_eq(r.cookie, 0xc0ffee, "the ring's news carries cookie %#llx",
		     (unsigned long long)r.cookie);
	/* The peer leaves: the end of the connection carries it too. */
	cr_assert_eq(rig_qp_destroy(dialed), 0, "%s", rig_errmsg());
	r = await_news_of(server, accepted, RIG_NEWS_GONE);
	cr_assert_eq(r.cookie, 0xc0ffee, "the connection's end carries cookie %#llx",
		     (unsigned long long)r.cookie);
	cr_assert_eq(rig_listener_close(l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(client), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(server), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}
