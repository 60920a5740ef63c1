/* SPDX-License-Identifier: MIT */
/*
 * Async events (rig(7) F1, F6).
 *
 * Soft-RoCE raises no async event for any queue-pair failure and no
 * DEVICE_FATAL at all (its device removal blocks until every context is
 * closed), so those events are injected at the kernel boundary: a pipe is
 * dup2()ed over the context's async fd and real ib_uverbs_async_event_desc
 * records are written into it. libibverbs then reads and parses them
 * exactly as it would the kernel's. What rxe does raise, port down and up,
 * is tested for real.
 *
 * After an injected queue-pair event, ibv_destroy_qp would wait forever
 * for the kernel to count an event it never sent; so each injection runs
 * in a child process that reports through shared memory and exits
 * without destroying anything.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/ib_user_verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "internal.h"
#include "t_device.h"

static int inject_fd = -1;

/* Puts a pipe in place of the context's async fd; returns its write end.
 * The pipe's read end must be non-blocking, as rig made the real one. */
static void inject_setup(struct ibv_context *ctx)
{
	int p[2];

	T_CHILD_CHECK(pipe(p) == 0, "pipe");
	T_CHILD_CHECK(fcntl(p[0], F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	T_CHILD_CHECK(dup2(p[0], ctx->async_fd) == ctx->async_fd, "dup2");
	close(p[0]);
	inject_fd = p[1];
}

static void inject(uint64_t element, enum ibv_event_type type)
{
	struct ib_uverbs_async_event_desc d = { element, type, 0 };

	T_CHILD_CHECK(write(inject_fd, &d, sizeof(d)) == sizeof(d), "write");
}

static struct rig_nic *nic;
static struct rig_qp *a, *b;
static struct t_buf buf;

static void child_pair(void)
{
	struct rig_endpoint ea, eb;

	T_CHILD_CHECK(rig_nic_open(t_dev(), &nic) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_make(nic, &a) == 0 && rig_qp_make(nic, &b) == 0, "%s", rig_errmsg());
	rig_qp_endpoint(a, &ea);
	rig_qp_endpoint(b, &eb);
	T_CHILD_CHECK(rig_qp_connect(a, &eb) == 0 && rig_qp_connect(b, &ea) == 0, "%s", rig_errmsg());
	buf.len = 1 << 16;
	buf.mem = calloc(1, buf.len);
	T_CHILD_CHECK(rig_region_register(nic, buf.mem, buf.len, &buf.r) == 0, "%s", rig_errmsg());
	inject_setup(a->ibqp->context);
}

/* Takes @n completions of @side, each failed with @error. */
static void expect_failed(struct rig_qp *qp, enum rig_side side, int n, int error,
			  const char *word)
{
	struct rig_completion c;
	int i;

	for (i = 0; i < n; i++) {
		T_CHILD_CHECK(rig_qp_poll(qp, side, &c) == 1, "entry %d of the %s ring not complete", i,
		      side == RIG_SEND ? "send" : "receive");
		T_CHILD_CHECK(c.error == error, "entry %d: error %d, want %d", i, c.error, error);
		T_CHILD_CHECK(c.why && strstr(c.why, word), "entry %d: why %s", i, c.why);
	}
	T_CHILD_CHECK(rig_qp_poll(qp, side, &c) == 0, "more completions than entries");
	T_CHILD_CHECK(rig_qp_room(qp, side) == RIG_RING_ENTRIES, "room");
}

/* Entries due on both rings: receives nobody sends to, and sends to a
 * peer with no receive (RNR, which Soft-RoCE would end after ~475 ms). */
static void post_due(void)
{
	int i;

	for (i = 0; i < 3; i++)
		T_CHILD_CHECK(rig_qp_receive(a, buf.r, i * 64, 64) == 0, "%s", rig_errmsg());
	for (i = 0; i < 2; i++)
		T_CHILD_CHECK(rig_qp_send(a, buf.r, 0, 64) == 0, "%s", rig_errmsg());
}

static enum ibv_event_type qp_event_type;
static int qp_event_error;
static const char *qp_event_word;

static void qp_event_child(void)
{
	struct rig_completion c;
	int status;

	child_pair();
	post_due();
	inject((uintptr_t)a->ibqp, qp_event_type);
	T_CHILD_CHECK(rig_nic_events(nic) == 1, "events: %s", rig_errmsg());
	T_CHILD_CHECK(rig_nic_events(nic) == 0, "nothing more pending");
	/* Due entries of both rings complete with the event's error, in
	 * order, taken receive ring first. */
	expect_failed(a, RIG_RECEIVE, 3, qp_event_error, qp_event_word);
	expect_failed(a, RIG_SEND, 2, qp_event_error, qp_event_word);
	T_CHILD_CHECK(rig_qp_failure(a, &status) == qp_event_error && status == -1,
	      "rig_qp_failure: status %d", status);
	/* F5: later posts are accepted and fail the same way. */
	T_CHILD_CHECK(rig_qp_receive(a, buf.r, 0, 64) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_send(a, buf.r, 0, 64) == 0, "%s", rig_errmsg());
	expect_failed(a, RIG_SEND, 1, qp_event_error, qp_event_word);
	expect_failed(a, RIG_RECEIVE, 1, qp_event_error, qp_event_word);
	/* The event named a only: b is untouched. */
	T_CHILD_CHECK(rig_qp_poll(b, RIG_RECEIVE, &c) == 0 && rig_qp_room(b, RIG_SEND) == RIG_RING_ENTRIES,
	      "b changed");
}

Test(event, F1_QP_FATAL_fails_that_queue_pair)
{
	qp_event_type = IBV_EVENT_QP_FATAL;
	qp_event_error = -EIO;
	qp_event_word = "QP_FATAL";
	t_in_child(qp_event_child);
}

Test(event, F1_QP_REQ_ERR_fails_that_queue_pair)
{
	qp_event_type = IBV_EVENT_QP_REQ_ERR;
	qp_event_error = -EPROTO;
	qp_event_word = "QP_REQ_ERR";
	t_in_child(qp_event_child);
}

Test(event, F1_QP_ACCESS_ERR_fails_that_queue_pair)
{
	qp_event_type = IBV_EVENT_QP_ACCESS_ERR;
	qp_event_error = -EACCES;
	qp_event_word = "QP_ACCESS_ERR";
	t_in_child(qp_event_child);
}

/*
 * F1, F3: a failure known only as "flushed" gives way to its real reason
 * when that comes later. A bare flush taken before any reason is known is
 * reported as -ECANCELED ("flushed without saying why"); an async event
 * (or an error completion) found afterwards replaces that record, and the
 * entries taken from then on carry the event's error, as does
 * rig_qp_failure().
 *
 * The order is bnxt_re's: its provider links the queue pair onto its
 * CQs' software flush lists inside ibv_get_async_event() (the provider's
 * async-event hook) and makes up the flush completions inside
 * ibv_poll_cq(), so a poll between the event's read and rig's record of
 * it takes a flush first. rxe cannot produce it: it raises no async
 * event for any queue-pair failure. So the test builds the order itself:
 * it moves a's QP to ERR with a raw
 * ibv_modify_qp (what rig never does), which makes rxe flush a's
 * receives, takes one flush, and only then injects QP_FATAL for a.
 */
static void late_reason_child(void)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };
	struct rig_completion c;
	double end;
	int i, ret, status;

	alarm(60);	/* a hang fails the test (SIGALRM), it does not stall it */
	child_pair();
	for (i = 0; i < 4; i++)
		T_CHILD_CHECK(rig_qp_receive(a, buf.r, i * 64, 64) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(ibv_modify_qp(a->ibqp, &attr, IBV_QP_STATE) == 0, "->ERR");
	/* rxe flushes from a kernel task, after the state change. */
	end = t_now_ms() + 5000;
	while (!(ret = rig_qp_poll(a, RIG_RECEIVE, &c)))
		T_CHILD_CHECK(t_now_ms() < end, "no flush of a's receives within 5 s");
	T_CHILD_CHECK(ret == 1 && c.error == -ECANCELED, "first receive: %d, error %d (%s)", ret,
	      c.error, c.why ? c.why : "no reason");
	T_CHILD_CHECK(rig_qp_failure(a, &status) == -ECANCELED && status == IBV_WC_WR_FLUSH_ERR,
	      "before the event: status %d", status);

	inject((uintptr_t)a->ibqp, IBV_EVENT_QP_FATAL);
	T_CHILD_CHECK(rig_nic_events(nic) == 1, "events: %s", rig_errmsg());
	expect_failed(a, RIG_RECEIVE, 3, -EIO, "QP_FATAL");
	T_CHILD_CHECK(rig_qp_failure(a, &status) == -EIO && status == -1,
	      "rig_qp_failure after the event: %d, status %d", rig_qp_failure(a, NULL), status);
	/* F5: and so does a post made afterwards. */
	T_CHILD_CHECK(rig_qp_send(a, buf.r, 0, 64) == 0, "%s", rig_errmsg());
	expect_failed(a, RIG_SEND, 1, -EIO, "QP_FATAL");
}

Test(event, F1_F3_late_event_replaces_bare_flush)
{
	t_in_child(late_reason_child);
}

/* F6: DEVICE_FATAL fails every queue pair of the NIC, and entries the NIC
 * will never complete (receives with no sender) complete with its error. */
static void device_fatal_child(void)
{
	int i;

	child_pair();
	for (i = 0; i < 4; i++) {
		T_CHILD_CHECK(rig_qp_receive(a, buf.r, i * 64, 64) == 0, "%s", rig_errmsg());
		T_CHILD_CHECK(rig_qp_receive(b, buf.r, i * 64, 64) == 0, "%s", rig_errmsg());
	}
	inject(0, IBV_EVENT_DEVICE_FATAL);
	T_CHILD_CHECK(rig_nic_events(nic) == 1, "events: %s", rig_errmsg());
	expect_failed(a, RIG_RECEIVE, 4, -ENODEV, "DEVICE_FATAL");
	expect_failed(b, RIG_RECEIVE, 4, -ENODEV, "DEVICE_FATAL");
	/* Nothing reaches the NIC any more; posts still complete. */
	T_CHILD_CHECK(rig_qp_send(b, buf.r, 0, 8) == 0, "%s", rig_errmsg());
	expect_failed(b, RIG_SEND, 1, -ENODEV, "DEVICE_FATAL");
}

Test(event, F6_DEVICE_FATAL_fails_every_queue_pair)
{
	t_in_child(device_fatal_child);
}

/* F1, T2: an async event wakes a sleeping rig_qp_wait, which then
 * returns the failure. */
static void *inject_later(void *arg)
{
	(void)arg;
	usleep(100 * 1000);
	inject((uintptr_t)a->ibqp, IBV_EVENT_QP_FATAL);
	return NULL;
}

static void wait_wakes_child(void)
{
	struct rig_completion c;
	pthread_t t;
	double t0, dt;

	child_pair();
	T_CHILD_CHECK(rig_qp_receive(a, buf.r, 0, 64) == 0, "%s", rig_errmsg());
	t0 = t_now_ms();
	pthread_create(&t, NULL, inject_later, NULL);
	T_CHILD_CHECK(rig_qp_wait(a, RIG_RECEIVE, 10 * 1000000, &c) == 1, "wait: %s", rig_errmsg());
	dt = t_now_ms() - t0;
	pthread_join(t, NULL);
	T_CHILD_CHECK(c.error == -EIO, "error %d", c.error);
	T_CHILD_CHECK(dt >= 100 && dt < 2000, "woke after %.1f ms for an event at 100 ms", dt);
}

Test(event, F1_T2_event_wakes_a_sleeping_wait)
{
	t_in_child(wait_wakes_child);
}

/* A PORT_ERR fails nothing: the device's own completions say whether a
 * send still gets through. */
static void port_err_child(void)
{
	struct rig_completion c;

	child_pair();
	inject(1, IBV_EVENT_PORT_ERR);
	T_CHILD_CHECK(rig_nic_events(nic) == 1, "events: %s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_receive(b, buf.r, 64, 64) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_send(a, buf.r, 0, 64) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_wait(a, RIG_SEND, 5000000, &c) == 1 && c.error == 0, "send: %d %s",
	      c.error, c.why);
	T_CHILD_CHECK(rig_qp_wait(b, RIG_RECEIVE, 5000000, &c) == 1 && c.error == 0 && c.bytes == 64,
	      "receive: %d %s", c.error, c.why);
}

Test(event, F1_injected_PORT_ERR_fails_nothing)
{
	t_in_child(port_err_child);
}

/* The real device: taking the netdev down and up gives PORT_ERR and
 * PORT_ACTIVE, and fails no queue pair (Soft-RoCE keeps them RTS). */
static int events_within(struct rig_nic *n, int ms)
{
	double end = t_now_ms() + ms;
	int got = 0, r;

	while (!got && t_now_ms() < end) {
		r = rig_nic_events(n);
		cr_assert_geq(r, 0, "%s", rig_errmsg());
		got += r;
		usleep(5000);
	}
	return got;
}

Test(event, F1_real_port_down_and_up_fail_nothing)
{
	const char *netdev = getenv("RIG_TEST_NETDEV");
	struct rig_completion c;
	struct t_buf tb;

	cr_assert_not_null(netdev, "RIG_TEST_NETDEV unset");
	nic = t_nic_open(t_dev());
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
	t_buf(&tb, nic, 4096, 9);
	t_sh("ip link set %s down", netdev);
	cr_assert_geq(events_within(nic, 3000), 1, "no PORT_ERR within 3 s");
	t_sh("ip link set %s up", netdev);
	cr_assert_geq(events_within(nic, 3000), 1, "no PORT_ACTIVE within 3 s");
	/* Wait for the port to be usable again, then a message goes through. */
	for (double end = t_now_ms() + 5000;; usleep(10000)) {
		struct ibv_port_attr pa;

		cr_assert_eq(ibv_query_port(a->ibqp->context, 1, &pa), 0);
		if (pa.state == IBV_PORT_ACTIVE)
			break;
		cr_assert_lt(t_now_ms(), end, "port not ACTIVE again");
	}
	cr_assert_eq(rig_qp_receive(b, tb.r, 2048, 100), 0);
	cr_assert_eq(rig_qp_send(a, tb.r, 0, 100), 0);
	c = t_take(a, RIG_SEND, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	c = t_take(b, RIG_RECEIVE, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_arr_eq(tb.mem + 2048, tb.mem, 100);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/*
 * F1, F6: the device removed or reset. mlx5 and bnxt_re then disassociate
 * the context (the kernel's ib_uverbs_remove_one calls
 * ib_uverbs_free_hw_resources for a driver with a disassociate_ucontext
 * op): from then on its async fd polls EPOLLERR (ib_uverbs_event_poll)
 * and every read fails with EIO (ib_uverbs_event_read), for ever. Every
 * queue pair fails with -ENODEV, each loop hands out each failed ring's
 * news once, and then its fd is quiet: nobody reads the dead fd again.
 *
 * Soft-RoCE never disassociates: rdma_rxe has no disassociate_ucontext
 * op, so its removal waits in ib_uverbs_remove_one until every context is
 * closed (rdma_cm tells DEVICE_REMOVAL meanwhile). So the test plays the
 * disassociated context: ibv_get_async_event, interposed here (librig
 * calls it through the PLT; the executable exports it), fails with EIO
 * once armed, and an eventfd holding a count, readable for ever as the
 * dead fd is, stands in for the async fd of the loop's fd set. The NIC's
 * own loop, opened before the swap, keeps watching the real fd.
 */
static struct {
	bool dead;		/* ibv_get_async_event says EIO */
	int eio_reads;		/* how often it did */
	int fd, saved;		/* the stand-in and the real async fd */
} gone = { false, 0, -1, -1 };

int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	__typeof__(&ibv_get_async_event) real = T_NEXT(ibv_get_async_event);

	if (__atomic_load_n(&gone.dead, __ATOMIC_ACQUIRE)) {
		__atomic_add_fetch(&gone.eio_reads, 1, __ATOMIC_RELAXED);
		errno = EIO;
		return -1;
	}
	return real(ctx, ev);
}

/* The stand-in in place of the async fd (@real false), or the real one
 * back: the kernel takes the async fd in the commands that make CQs and
 * queue pairs, and refuses an eventfd (EBADF). */
static void gone_swap(struct rig_nic *n, bool real)
{
	int fd = real ? gone.saved : gone.fd;

	cr_assert_eq(dup2(fd, n->ctx->async_fd), n->ctx->async_fd);
}

static void gone_setup(struct rig_nic *n)
{
	gone.saved = dup(n->ctx->async_fd);
	gone.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	cr_assert(gone.saved >= 0 && gone.fd >= 0);
	gone_swap(n, false);
}

static void disassociate(void)
{
	__atomic_store_n(&gone.dead, true, __ATOMIC_RELEASE);
	cr_assert_eq(eventfd_write(gone.fd, 1), 0);
}

/* The real async fd back, for ibv_close_device to close. */
static void gone_teardown(struct rig_nic *n)
{
	gone_swap(n, true);
	close(gone.saved);
	close(gone.fd);
}

#define GONE_QPS 3

static void expect_gone(struct rig_qp *qp, enum rig_side side, int n)
{
	struct rig_completion c;
	int i, ret;

	for (i = 0; i < n; i++) {
		ret = rig_qp_poll(qp, side, &c);
		cr_assert_eq(ret, 1, "entry %d: %d %s", i, ret, rig_errmsg());
		cr_assert_eq(c.error, -ENODEV, "entry %d: error %d", i, c.error);
		cr_assert(c.why && strstr(c.why, "went away"), "entry %d: %s", i, c.why);
	}
	cr_assert_eq(rig_qp_poll(qp, side, &c), 0, "more completions than entries");
}

Test(event, F6_disassociated_NIC_fails_its_loops_queue_pairs_once, .timeout = 60)
{
	struct rig_qp *qa[GONE_QPS], *qb[GONE_QPS];
	struct rig_ready ready[32];
	struct rig_completion c;
	struct rig_loop *loop;
	struct pollfd pfd;
	struct t_buf tb;
	int seen[GONE_QPS][2] = { { 0 } };
	int i, k, n, status;

	nic = t_nic_open(t_dev());
	t_buf(&tb, nic, 4096, 1);
	/* The loop's fd set takes the stand-in (by its file, which stays
	 * open), the queue pairs are made with the real fd. */
	gone_setup(nic);
	cr_assert_eq(rig_loop_open(nic, &loop), 0, "%s", rig_errmsg());
	gone_swap(nic, true);
	for (i = 0; i < GONE_QPS; i++) {
		cr_assert_eq(rig_qp_make_in(loop, &qa[i]), 0, "%s", rig_errmsg());
		qb[i] = t_qp(nic);
		t_connect(qa[i], qb[i]);
		/* i + 1 receives on each: counts that tell the rings apart. */
		for (k = 0; k <= i; k++) {
			cr_assert_eq(rig_qp_receive(qa[i], tb.r, k * 64, 64), 0, "%s", rig_errmsg());
			cr_assert_eq(rig_qp_receive(qb[i], tb.r, k * 64, 64), 0, "%s", rig_errmsg());
		}
	}
	cr_assert_eq(rig_loop_watch(loop), 0, "%s", rig_errmsg());
	pfd = (struct pollfd){ rig_loop_fd(loop), POLLIN, 0 };
	cr_assert_eq(poll(&pfd, 1, 0), 0, "the loop's fd readable before anything happened");

	gone_swap(nic, false);
	disassociate();
	cr_assert_eq(poll(&pfd, 1, 0), 1, "the dead async fd does not make the loop's fd readable");
	/* Before the fix: -EIO, for ever, and no news. */
	n = rig_loop_handle(loop, ready, 32);
	cr_assert_eq(n, 2 * GONE_QPS, "rig_loop_handle: %d %s", n, n < 0 ? rig_errmsg() : "");
	for (k = 0; k < n; k++) {
		cr_assert_eq(ready[k].news, RIG_NEWS_RING);
		for (i = 0; i < GONE_QPS && ready[k].qp != qa[i]; i++)
			;
		cr_assert_lt(i, GONE_QPS, "news of a queue pair not in the loop");
		seen[i][ready[k].side]++;
	}
	for (i = 0; i < GONE_QPS; i++) {
		cr_assert(seen[i][RIG_SEND] == 1 && seen[i][RIG_RECEIVE] == 1,
			  "queue pair %d: send ring's news %d times, receive ring's %d", i,
			  seen[i][RIG_SEND], seen[i][RIG_RECEIVE]);
		/* F6: each due entry completes with -ENODEV, in order. */
		expect_gone(qa[i], RIG_RECEIVE, i + 1);
		expect_gone(qa[i], RIG_SEND, 0);
		cr_assert_eq(rig_qp_failure(qa[i], &status), -ENODEV);
		/* Every queue pair of the NIC, the own loop's too. */
		expect_gone(qb[i], RIG_RECEIVE, i + 1);
	}
	/* Nothing more: the dead fd left the loop's fd set. */
	cr_assert_eq(poll(&pfd, 1, 0), 0, "the loop's fd still readable");
	cr_assert_eq(rig_loop_handle(loop, ready, 32), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_events(nic), 0, "%s", rig_errmsg());
	/* T2: a wait on a failed ring with an entry due returns it; on an
	 * empty one it is refused. */
	cr_assert_eq(rig_qp_receive(qa[0], tb.r, 0, 64), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_wait(qa[0], RIG_RECEIVE, 1000000, &c), 1, "%s", rig_errmsg());
	cr_assert_eq(c.error, -ENODEV);
	cr_assert_eq(rig_qp_wait(qa[0], RIG_RECEIVE, 1000000, &c), -EINVAL);
	/* The dead fd was read once, and never again. */
	cr_assert_eq(gone.eio_reads, 1, "EIO read %d times", gone.eio_reads);
	gone_teardown(nic);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* F6, T2: the device going away wakes a sleeping wait, which returns the
 * failure (before the fix, -EIO). */
static void *disassociate_later(void *arg)
{
	(void)arg;
	usleep(100 * 1000);
	disassociate();
	return NULL;
}

Test(event, F6_T2_disassociation_wakes_a_sleeping_wait, .timeout = 60)
{
	struct rig_completion c;
	struct t_buf tb;
	pthread_t t;
	double t0, dt;
	int ret;

	nic = t_nic_open(t_dev());
	t_buf(&tb, nic, 4096, 1);
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
	gone_setup(nic);
	cr_assert_eq(rig_qp_receive(a, tb.r, 0, 64), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive(b, tb.r, 0, 64), 0, "%s", rig_errmsg());
	t0 = t_now_ms();
	pthread_create(&t, NULL, disassociate_later, NULL);
	ret = rig_qp_wait(a, RIG_RECEIVE, 10 * 1000000, &c);
	dt = t_now_ms() - t0;
	pthread_join(t, NULL);
	cr_assert_eq(ret, 1, "wait: %d %s", ret, rig_errmsg());
	cr_assert_eq(c.error, -ENODEV, "error %d", c.error);
	cr_assert(dt >= 100 && dt < 2000, "woke after %.1f ms for a removal at 100 ms", dt);
	/* The other queue pair failed too; a wait on an empty ring is refused
	 * (T2), not failed by the dead fd. */
	cr_assert_eq(rig_qp_wait(b, RIG_RECEIVE, 1000000, &c), 1, "%s", rig_errmsg());
	cr_assert_eq(c.error, -ENODEV);
	cr_assert_eq(rig_qp_wait(a, RIG_RECEIVE, 1000000, &c), -EINVAL);
	cr_assert_eq(rig_nic_events(nic), 0, "%s", rig_errmsg());
	cr_assert_eq(gone.eio_reads, 1, "EIO read %d times", gone.eio_reads);
	gone_teardown(nic);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}
