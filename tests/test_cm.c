/* SPDX-License-Identifier: MIT */
/*
 * Connecting by address with librdmacm (include/rig/cm.h), in both
 * topologies: on one host the listener and the dialer share rxe0; on two,
 * the listener is on rxe1 and the dialer on rxe0.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "t_device.h"
#include "t_raw_cm.h"

/*
 * A port for each test (nic_close_closes_its_listener has 18590). Each
 * test runs in a process of its own, so a counter would give every test
 * the same port, and a test would then depend on the kernel having let go
 * of the port, and of the CM's listen on its service ID, when the test
 * before it ended.
 */
enum { PORT_DIAL_ACCEPT = 18515, PORT_GARBAGE, PORT_LISTENER_FD, PORT_NEGATIVE,
       PORT_HUGE, PORT_GONE_EARLY, PORT_CLAIM_DIALER, PORT_CLAIM_LISTENER,
       PORT_NAMES_PEER, PORT_RAW_WRITER, PORT_RIG1_DIALER, PORT_RIG2_DIALER,
       PORT_RIG3_SINK };

struct server {
	struct rig_listener *l;
	int64_t us;
	int ret;
	struct rig_qp *qp;
};

static void *accept_one(void *arg)
{
	struct server *s = arg;

	s->ret = rig_accept(s->l, s->us, &s->qp);
	return NULL;
}

/* M3, M4: a dialed and an accepted queue pair follow the same rules as
 * with rig_qp_connect: messages go both ways; reads only on one NIC. */
Test(cm, M3_M4_dial_and_accept)
{
	const char *ip = t_other_ip();
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(t_other_dev()) : cn;
	struct server s = { NULL, 10000000, -1, NULL };
	struct rig_qp *qp = NULL;
	struct t_buf ctx, crx, stx, srx;
	pthread_t t;
	uint16_t port = PORT_DIAL_ACCEPT;
	int ret;

	cr_assert_not_null(ip);
	cr_assert_eq(rig_listen(sn, ip, port, &s.l), 0, "%s", rig_errmsg());
	pthread_create(&t, NULL, accept_one, &s);
	ret = rig_dial(cn, ip, port, 10000000, &qp);
	pthread_join(t, NULL);
	cr_assert_eq(ret, 0, "rig_dial: %s", rig_errmsg());
	cr_assert_eq(s.ret, 0, "rig_accept failed");
	t_buf(&ctx, cn, 4096, 1);
	t_buf(&crx, cn, 4096, 0);
	t_buf(&stx, sn, 4096, 2);
	t_buf(&srx, sn, 4096, 0);
	t_exchange(qp, s.qp, &ctx, &srx, 4096);
	t_exchange(s.qp, qp, &stx, &crx, 1000);
	if (t_peer_dev()) {
		/* M4: the listener is on another NIC: no reads, either way. */
		cr_assert_eq(rig_qp_read(qp, ctx.r, 0, crx.r, 0, 8), -EINVAL);
		cr_assert_eq(qp->local, 0);
		cr_assert_eq(s.qp->local, 0);
	} else {
		struct rig_completion c;

		/* M4: both ends on one NIC handle: local, reads both ways. */
		cr_assert_eq(qp->local, 1);
		cr_assert_eq(s.qp->local, 1);
		cr_assert_eq(rig_qp_read(qp, stx.r, 0, crx.r, 0, 4096), 0, "%s", rig_errmsg());
		c = t_take(qp, RIG_SEND, 5000);
		cr_assert_eq(c.error, 0, "%s", c.why);
		cr_assert_arr_eq(crx.mem, stx.mem, 4096);
		/* into stx, which held another pattern */
		cr_assert_eq(rig_qp_read(s.qp, ctx.r, 0, stx.r, 0, 4096), 0, "%s", rig_errmsg());
		c = t_take(s.qp, RIG_SEND, 5000);
		cr_assert_eq(c.error, 0, "%s", c.why);
		cr_assert_arr_eq(stx.mem, ctx.mem, 4096);
	}
	cr_assert_eq(rig_qp_destroy(qp), 0);
	cr_assert_eq(rig_qp_destroy(s.qp), 0);
	cr_assert_eq(rig_listener_close(s.l), 0);
	if (sn != cn)
		cr_assert_eq(rig_nic_close(sn), 0);
	cr_assert_eq(rig_nic_close(cn), 0);
}

/* Nobody listens on that port: refused, at once. */
Test(cm, dial_without_listener_is_refused)
{
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_qp *qp = (struct rig_qp *)0x1;
	double t0 = t_now_ms();

	cr_assert_eq(rig_dial(cn, t_other_ip(), 9, 10000000, &qp), -ECONNREFUSED, "%s",
		     rig_errmsg());
	cr_assert_lt(t_now_ms() - t0, 5000.0);
	cr_assert_eq(qp, (struct rig_qp *)0x1, "out set on failure");
	cr_assert_eq(rig_nic_close(cn), 0);
}

/* An address nothing answers for: the dial ends by its bound (or the
 * resolution's own 2 s), with an error, never a hang. Late by 500 ms at
 * most, and by what the machine stalled a thread meanwhile. */
Test(cm, dial_unreachable_address_is_bounded)
{
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_qp *qp = NULL;
	double t0, dt;
	int ret;

	t_stall_start();
	t0 = t_now_ms();
	ret = rig_dial(cn, "198.18.0.99", 18500, 3000000, &qp);
	dt = t_now_ms() - t0;
	cr_assert(ret == -ETIMEDOUT || ret == -EHOSTUNREACH || ret == -ENETUNREACH,
		  "%d %s", ret, rig_errmsg());
	cr_assert_lt(dt, 3500.0 + t_stall_max_ms(), "took %.0f ms for a 3 s bound "
		     "(%.1f ms stalled)", dt, t_stall_max_ms());
	cr_assert_eq(rig_nic_close(cn), 0);
}

/* Bad input: not an address; a listener on an address of no device. */
Test(cm, bad_addresses)
{
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_listener *l = NULL;
	struct rig_qp *qp = NULL;

	cr_assert_eq(rig_dial(cn, "not-an-address", 1, 1000, &qp), -EINVAL);
	cr_assert_eq(rig_listen(cn, "::1::", 1, &l), -EINVAL);
	cr_assert_eq(rig_dial(cn, "198.18.0.1", 1, -1, &qp), -EINVAL);
	cr_assert_eq(rig_nic_close(cn), 0);
}

/* The peer's private data is untrusted: a raw rdma_cm client sends
 * garbage; the request is rejected, and the listener serves the next. */
static void *raw_garbage_client(void *arg)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_conn_param p = { 0 };
	struct sockaddr_in sin = { 0 };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_init_attr ia = { 0 };
	static const char junk[40] = "not an endpoint at all";
	long ok = 0;

	sin.sin_family = AF_INET;
	sin.sin_port = htons(*(uint16_t *)arg);
	inet_pton(AF_INET, t_other_ip(), &sin.sin_addr);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000) ||
	    rdma_get_cm_event(ch, &ev))
		return (void *)0;
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 2000) || rdma_get_cm_event(ch, &ev))
		return (void *)0;
	rdma_ack_cm_event(ev);
	pd = ibv_alloc_pd(id->verbs);
	cq = ibv_create_cq(id->verbs, 4, NULL, NULL, 0);
	ia.send_cq = ia.recv_cq = cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	qp = ibv_create_qp(pd, &ia);
	p.private_data = junk;
	p.private_data_len = sizeof(junk);
	p.qp_num = qp->qp_num;
	p.retry_count = 6;
	if (!rdma_connect(id, &p) && !rdma_get_cm_event(ch, &ev)) {
		ok = ev->event == RDMA_CM_EVENT_REJECTED;
		rdma_ack_cm_event(ev);
	}
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return (void *)ok;
}

Test(cm, garbage_private_data_is_rejected)
{
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(t_other_dev()) : cn;
	struct server s = { NULL, 10000000, -1, NULL };
	uint16_t port = PORT_GARBAGE;
	struct rig_qp *qp = NULL;
	pthread_t t;
	void *rejected;
	int ret;

	cr_assert_eq(rig_listen(sn, t_other_ip(), port, &s.l), 0, "%s", rig_errmsg());
	pthread_create(&t, NULL, raw_garbage_client, &port);
	ret = rig_accept(s.l, 10000000, &s.qp);
	pthread_join(t, &rejected);
	cr_assert_eq(ret, -EPROTO, "%d %s", ret, rig_errmsg());
	cr_assert_eq((long)rejected, 1, "the client was not told REJECTED");
	/* The listener goes on. */
	pthread_create(&t, NULL, accept_one, &s);
	ret = rig_dial(cn, t_other_ip(), port, 10000000, &qp);
	pthread_join(t, NULL);
	cr_assert_eq(ret, 0, "%s", rig_errmsg());
	cr_assert_eq(s.ret, 0);
	cr_assert_eq(rig_listener_close(s.l), 0);
	if (sn != cn)
		cr_assert_eq(rig_nic_close(sn), 0);
	cr_assert_eq(rig_nic_close(cn), 0);
}

/* The listener's fd in the application's io_uring: a CQE comes when a
 * request is pending; rig_accept(l, 0) then takes it, and with nothing
 * pending it returns -ETIMEDOUT at once. */
struct dialer {
	struct rig_nic *nic;
	uint16_t port;
	int ret;
	struct rig_qp *qp;
};

static void *dial_one(void *arg)
{
	struct dialer *d = arg;

	d->ret = rig_dial(d->nic, t_other_ip(), d->port, 10000000, &d->qp);
	return NULL;
}

Test(cm, listener_fd_in_io_uring)
{
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(t_other_dev()) : cn;
	struct rig_listener *l;
	struct dialer d = { cn, PORT_LISTENER_FD, -1, NULL };
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct rig_qp *qp = NULL;
	pthread_t t;

	cr_assert_eq(rig_listen(sn, t_other_ip(), d.port, &l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_accept(l, 0, &qp), -ETIMEDOUT, "nothing pending");
	cr_assert_null(qp);
	cr_assert_eq(io_uring_queue_init(4, &ring, 0), 0);
	io_uring_prep_poll_add(io_uring_get_sqe(&ring), rig_listener_fd(l), POLLIN);
	io_uring_submit(&ring);
	pthread_create(&t, NULL, dial_one, &d);
	cr_assert_eq(io_uring_wait_cqe(&ring, &cqe), 0);
	cr_assert(cqe->res & POLLIN);
	io_uring_cqe_seen(&ring, cqe);
	/* The fd said a request is there: accept it without waiting. */
	cr_assert_eq(rig_accept(l, 0, &qp), 0, "%s", rig_errmsg());
	pthread_join(t, NULL);
	cr_assert_eq(d.ret, 0, "%s", rig_errmsg());
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_listener_close(l), 0);
	if (sn != cn)
		cr_assert_eq(rig_nic_close(sn), 0);
	cr_assert_eq(rig_nic_close(cn), 0);
}

/*
 * A NIC owns its listeners, as it owns its queue pairs: rig_nic_close with
 * a listener still open closes it too (its rdma_cm id and event channel),
 * and every fd the open and the listen took is closed again. The port is
 * this test's alone: the tests of this binary may run side by side.
 */
Test(cm, nic_close_closes_its_listener)
{
	const uint16_t port = 18590;
	struct rig_listener *l;
	struct rig_nic *n;
	int before, open_fds, after;

	/* librdmacm opens the device for itself on its first use and keeps
	 * it for the life of the process: one full round first, so that the
	 * count below sees only what the NIC and its listener hold. */
	n = t_nic_open(t_other_dev());
	cr_assert_eq(rig_listen(n, t_other_ip(), port, &l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_listener_close(l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(n), 0, "%s", rig_errmsg());

	before = t_fd_count();
	n = t_nic_open(t_other_dev());
	cr_assert_eq(rig_listen(n, t_other_ip(), port, &l), 0, "%s", rig_errmsg());
	open_fds = t_fd_count();
	cr_assert_gt(open_fds, before);
	cr_assert_eq(rig_nic_close(n), 0, "%s", rig_errmsg());
	after = t_fd_count();
	cr_assert_eq(after, before,
		     "rig_nic_close left %d of the %d fds of the NIC and its listener open",
		     after - before, open_fds - before);
}

/* ---- bounds at their extremes ------------------------------------------ */

/*
 * C1, C2: a negative bound, INT64_MIN included, is -EINVAL before any
 * arithmetic on it: *out stays untouched and the listener goes on. A bound
 * of 0 with nothing pending is -ETIMEDOUT at once.
 */
Test(cm, C1_C2_negative_bounds_are_EINVAL_and_change_nothing)
{
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(t_other_dev()) : cn;
	struct server s = { NULL, 10000000, -1, NULL };
	struct rig_qp *qp = (struct rig_qp *)0x1;
	uint16_t port = PORT_NEGATIVE;
	pthread_t t;
	double t0;
	int ret;

	cr_assert_eq(rig_listen(sn, t_other_ip(), port, &s.l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_dial(cn, t_other_ip(), port, INT64_MIN, &qp), -EINVAL);
	cr_assert_eq(rig_dial(cn, t_other_ip(), port, -1, &qp), -EINVAL);
	cr_assert_eq(rig_accept(s.l, INT64_MIN, &qp), -EINVAL);
	cr_assert_eq(rig_accept(s.l, -1, &qp), -EINVAL);
	cr_assert_eq(qp, (struct rig_qp *)0x1, "out set on failure");
	t0 = t_now_ms();
	cr_assert_eq(rig_accept(s.l, 0, &qp), -ETIMEDOUT, "nothing pending: %s", rig_errmsg());
	cr_assert_lt(t_now_ms() - t0, 1000.0, "a bound of 0 waited %.0f ms", t_now_ms() - t0);
	cr_assert_eq(qp, (struct rig_qp *)0x1, "out set on failure");
	/* The listener goes on. */
	pthread_create(&t, NULL, accept_one, &s);
	ret = rig_dial(cn, t_other_ip(), port, 10000000, &qp);
	pthread_join(t, NULL);
	cr_assert_eq(ret, 0, "rig_dial: %s", rig_errmsg());
	cr_assert_eq(s.ret, 0, "rig_accept failed");
	cr_assert_eq(rig_qp_destroy(qp), 0);
	cr_assert_eq(rig_qp_destroy(s.qp), 0);
	cr_assert_eq(rig_listener_close(s.l), 0);
	if (sn != cn)
		cr_assert_eq(rig_nic_close(sn), 0);
	cr_assert_eq(rig_nic_close(cn), 0);
}

/* An accept whose result the test reads while it may still run. A first
 * accept with no bound costs the thread what its start costs (more under
 * AddressSanitizer), before the window the test measures. */
struct watched {
	struct server s;
	int first;
	sem_t ready;
};

static void *accept_watched(void *arg)
{
	struct watched *w = arg;
	struct rig_qp *qp = NULL;
	int ret;

	w->first = rig_accept(w->s.l, 0, &qp);
	sem_post(&w->ready);
	ret = rig_accept(w->s.l, w->s.us, &qp);
	w->s.qp = qp;
	__atomic_store_n(&w->s.ret, ret, __ATOMIC_RELEASE);
	return NULL;
}

static double thread_cpu_ms(clockid_t cid)
{
	struct timespec ts;

	cr_assert_eq(clock_gettime(cid, &ts), 0, "%s", strerror(errno));
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* How long the idle accept is watched, and the CPU it may take meanwhile:
 * a poll that slept costs nothing; one turned into a spin costs the whole
 * window, or at least the share a busy machine leaves a thread. */
#define IDLE_WATCH_US 1000000
#define IDLE_CPU_MAX_MS 100.0

/*
 * Bounds of months and more: rig_accept sleeps (its thread takes next to
 * no CPU time over a second of waiting) and returns the connection when
 * a dial comes; rig_dial with the same bound connects. 30 days is more
 * milliseconds than an int holds, INT64_MAX more nanoseconds than an
 * int64_t.
 */
Test(cm, bounds_of_30_days_and_INT64_MAX_wait_asleep_then_connect)
{
	static const int64_t bound[2] = { 30 * 86400 * 1000000ll, INT64_MAX };
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(t_other_dev()) : cn;
	struct rig_listener *l;
	struct rig_qp *qp;
	clockid_t cid;
	pthread_t t;
	double cpu0, cpu;
	int i, ret;

	cr_assert_eq(rig_listen(sn, t_other_ip(), PORT_HUGE, &l), 0, "%s", rig_errmsg());
	for (i = 0; i < 2; i++) {
		struct watched w;
		struct timespec ts;

		memset(&w, 0, sizeof(w));
		w.s = (struct server){ l, bound[i], 1, NULL };
		w.first = 1;
		cr_assert_eq(sem_init(&w.ready, 0, 0), 0);
		cr_assert_eq(pthread_create(&t, NULL, accept_watched, &w), 0);
		cr_assert_eq(pthread_getcpuclockid(t, &cid), 0);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += 10;
		cr_assert_eq(sem_timedwait(&w.ready, &ts), 0, "the accepting thread did not start");
		cr_assert_eq(w.first, -ETIMEDOUT, "rig_accept(0) with nothing pending: %d",
			     w.first);
		cpu0 = thread_cpu_ms(cid);
		usleep(IDLE_WATCH_US);	/* the window measured, not a wait for an event */
		cpu = thread_cpu_ms(cid) - cpu0;
		ret = __atomic_load_n(&w.s.ret, __ATOMIC_ACQUIRE);
		cr_assert_eq(ret, 1, "bound %lld us: rig_accept returned %d (%s) with nothing "
			     "pending", (long long)bound[i], ret, rig_errmsg());
		cr_log_info("bound %lld us: the waiting accept took %.1f ms of CPU in %d ms",
			    (long long)bound[i], cpu, IDLE_WATCH_US / 1000);
		cr_assert_lt(cpu, IDLE_CPU_MAX_MS, "bound %lld us: the waiting accept took "
			     "%.1f ms of CPU in %d ms", (long long)bound[i], cpu,
			     IDLE_WATCH_US / 1000);
		qp = NULL;
		ret = rig_dial(cn, t_other_ip(), PORT_HUGE, bound[i], &qp);
		cr_assert_eq(ret, 0, "bound %lld us: rig_dial: %d %s", (long long)bound[i], ret,
			     rig_errmsg());
		cr_assert_eq(pthread_join(t, NULL), 0);
		cr_assert_eq(w.s.ret, 0, "bound %lld us: rig_accept: %d", (long long)bound[i],
			     w.s.ret);
		cr_assert_eq(rig_qp_destroy(qp), 0);
		cr_assert_eq(rig_qp_destroy(w.s.qp), 0);
		sem_destroy(&w.ready);
	}
	cr_assert_eq(rig_listener_close(l), 0);
	if (sn != cn)
		cr_assert_eq(rig_nic_close(sn), 0);
	cr_assert_eq(rig_nic_close(cn), 0);
}

/* ---- raw rdma_cm ends, driven from the test's thread -------------------- */

/* ---- a connection gone before rig_accept took it -------------------------- */

/*
 * rig_listen(3): closing the listener drops the connections no rig_accept
 * took, and a connection that was never the application's gives no news.
 *
 * Two raw clients, A and B, finish their handshakes; B leaves at once, and
 * one rig_accept reads A's ESTABLISHED, B's ESTABLISHED and B's
 * DISCONNECTED in one batch: it returns A and keeps B, up and gone. The
 * test makes that batch: the clients run in the test's thread, so nothing
 * moves while rig_accept runs. First the three requests, A's, B's and a
 * garbage one G's: a rig_accept answers A and B and returns -EPROTO for G
 * (calls with no bound read what came after). Then each step waits for
 * the event it causes to be queued on the listener's channel: the channel
 * wakes its pollers once per event queued, and an edge-triggered epoll
 * reports each wakeup that comes after the last report. A sends its RTU
 * (ESTABLISHED); then B sends its RTU (ESTABLISHED), and only then its
 * disconnect request (DISCONNECTED). Then rig_accept runs again.
 *
 * Then the listener is closed and the NIC's own loop handled: it hands out
 * nothing of B, and the NIC closes cleanly. News of B left in the loop's
 * list once the listener freed B would be read from freed memory.
 */
enum { CLIENT_A, CLIENT_B, CLIENT_G, CLIENTS };

Test(cm, listener_close_drops_a_connection_gone_before_accept_took_it, .timeout = 60)
{
	static const char junk[40] = "not an endpoint at all";
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(t_other_dev()) : cn;
	struct rdma_event_channel *ch[CLIENTS];
	struct rdma_cm_id *id[CLIENTS];
	struct rig_qp *offer[CLIENTS];	/* each request names one of these */
	struct rig_endpoint e;
	uint8_t priv[CLIENTS][RIG_CM_PRIVATE];
	struct rdma_conn_param p;
	struct pollfd pfd[CLIENTS + 1];
	bool answered[CLIENTS] = { false };
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	struct rig_listener *l;
	struct rig_qp *qp = NULL;
	struct rig_ready r[16];
	struct raw_ev ev;
	struct epoll_event ee;
	double end, t_answer;
	uint16_t port = PORT_GONE_EARLY;
	int i, n, ret, epfd;

	cr_assert_eq(rig_listen(sn, t_other_ip(), port, &l), 0, "%s", rig_errmsg());
	for (i = 0; i < CLIENTS; i++) {
		offer[i] = t_qp(cn);
		rig_qp_endpoint(offer[i], &e);
		rig_cm_pack(&e, priv[i]);
		ch[i] = raw_channel();
		id[i] = raw_resolve(ch[i], t_other_ip(), port);
		if (i == CLIENT_G)
			t_raw_param(&p, junk, sizeof(junk), e.qp);
		else
			t_raw_param(&p, priv[i], RIG_CM_PRIVATE, e.qp);
		cr_assert_eq(rdma_connect(id[i], &p), 0, "rdma_connect: %s", strerror(errno));
	}

	/* 1: the requests, answered or rejected */
	t_answer = t_now_ms();	/* rig's answers come after it */
	ret = rig_accept(l, 10000000, &qp);
	cr_assert_eq(ret, -EPROTO, "the first rig_accept: %d %s", ret, rig_errmsg());
	end = t_now_ms() + 10000;
	while (!answered[CLIENT_A] || !answered[CLIENT_B] || !answered[CLIENT_G]) {
		for (i = 0; i < CLIENTS; i++)
			pfd[i] = (struct pollfd){ ch[i]->fd, POLLIN, 0 };
		pfd[CLIENTS] = (struct pollfd){ rig_listener_fd(l), POLLIN, 0 };
		cr_assert_lt(t_now_ms(), end, "the requests were not all answered in 10 s");
		if (poll(pfd, CLIENTS + 1, 100) <= 0)
			continue;
		for (i = 0; i < CLIENTS; i++) {
			if (!(pfd[i].revents & POLLIN))
				continue;
			ev = raw_next(ch[i], 0);
			cr_assert_eq(ev.type, i == CLIENT_G ? RDMA_CM_EVENT_REJECTED
							     : RDMA_CM_EVENT_CONNECT_RESPONSE,
				     "client %d: %s", i, rdma_event_str(ev.type));
			answered[i] = true;
		}
		if (pfd[CLIENTS].revents & POLLIN) {
			/* a request that came after the first batch */
			ret = rig_accept(l, 0, &qp);
			cr_assert(ret == -ETIMEDOUT || ret == -EPROTO, "rig_accept: %d %s", ret,
				  rig_errmsg());
		}
	}

	/* 2: A is up; then B is up, and leaves. The channel is empty: the
	 * requests were read, and nothing else came. */
	epfd = epoll_create1(EPOLL_CLOEXEC);
	cr_assert_geq(epfd, 0);
	ee = (struct epoll_event){ .events = EPOLLIN | EPOLLET };
	cr_assert_eq(epoll_ctl(epfd, EPOLL_CTL_ADD, rig_listener_fd(l), &ee), 0);
	cr_assert_eq(epoll_wait(epfd, &ee, 1, 0), 0, "the listener has an event before A's RTU");
	cr_assert_eq(rdma_establish(id[CLIENT_A]), 0, "rdma_establish: %s", strerror(errno));
	cr_assert_eq(epoll_wait(epfd, &ee, 1, 10000), 1, "no ESTABLISHED for A in 10 s");
	cr_assert_eq(rdma_establish(id[CLIENT_B]), 0, "rdma_establish: %s", strerror(errno));
	cr_assert_eq(epoll_wait(epfd, &ee, 1, 10000), 1, "no ESTABLISHED for B in 10 s");
	cr_assert_eq(rdma_disconnect(id[CLIENT_B]), 0, "rdma_disconnect: %s", strerror(errno));
	cr_assert_eq(epoll_wait(epfd, &ee, 1, 10000), 1, "no DISCONNECTED for B in 10 s");
	close(epfd);
	cr_log_info("%.0f ms from the first rig_accept to B's DISCONNECTED",
		    t_now_ms() - t_answer);
	cr_assert_lt(t_now_ms() - t_answer, RIG_CM_HALF_OPEN_MS,
		     "%.0f ms since the first rig_accept: past the half-open bound, A and B "
		     "may have been dropped", t_now_ms() - t_answer);

	/* 3: one batch: A's ESTABLISHED, B's ESTABLISHED, B's DISCONNECTED */
	ret = rig_accept(l, 0, &qp);
	cr_assert_eq(ret, 0, "the second rig_accept: %d %s", ret, rig_errmsg());
	cr_assert_eq(ibv_query_qp(qp->ibqp, &qa, IBV_QP_DEST_QPN, &qia), 0);
	rig_qp_endpoint(offer[CLIENT_A], &e);
	cr_assert_eq(qa.dest_qp_num, e.qp, "rig_accept returned the queue pair of a client "
		     "other than A (dest qp %#x)", qa.dest_qp_num);

	/* 4: B goes with the listener, and with it all of B */
	cr_assert_eq(rig_listener_close(l), 0, "%s", rig_errmsg());
	n = rig_loop_handle(rig_nic_loop(sn), r, 16);
	cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
	for (i = 0; i < n; i++)
		cr_assert_eq(r[i].qp, qp, "news %d (result %d) of a queue pair rig_accept never "
			     "handed out", r[i].news, r[i].result);

	cr_assert_eq(rig_qp_destroy(qp), 0, "%s", rig_errmsg());
	for (i = 0; i < CLIENTS; i++) {
		rdma_destroy_id(id[i]);
		rdma_destroy_event_channel(ch[i]);
		cr_assert_eq(rig_qp_destroy(offer[i]), 0);
	}
	if (sn != cn)
		cr_assert_eq(rig_nic_close(sn), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(cn), 0, "%s", rig_errmsg());
}

/* ---- M4: who counts as local is not the peer's to say --------------------- */

/* @qp grants its peer nothing: no remote access but the write access the
 * peer's liveness probes need (rig(7) L1; no region of the application's
 * grants remote write, so a write with bytes fails at the region:
 * M4_L1_zero_length_write_taken_a_write_with_bytes_refused), no reads
 * served, and reads of its own are refused (P3) and post nothing. */
static void expect_remote(struct rig_qp *qp, struct rig_nic *nic, const char *who)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	struct t_buf src, dst;

	memset(&a, 0, sizeof(a));
	cr_assert_eq(ibv_query_qp(qp->ibqp, &a, IBV_QP_STATE | IBV_QP_ACCESS_FLAGS |
				  IBV_QP_MAX_DEST_RD_ATOMIC, &ia), 0);
	cr_assert_eq(a.qp_state, IBV_QPS_RTS, "%s: state %d", who, a.qp_state);
	cr_assert_eq(a.qp_access_flags & ~IBV_ACCESS_REMOTE_WRITE, 0,
		     "%s: the peer's claim got it access %#x", who, a.qp_access_flags);
	cr_assert_eq(a.max_dest_rd_atomic, 0, "%s: it serves %d reads of the peer's", who,
		     a.max_dest_rd_atomic);
	cr_assert_eq(qp->local, 0, "%s: counted as local", who);
	t_buf(&src, nic, 64, 1);
	t_buf(&dst, nic, 64, 0);
	cr_assert_eq(rig_qp_read(qp, src.r, 0, dst.r, 0, 8), -EINVAL, "%s: rig_qp_read", who);
	cr_assert_eq(rig_qp_room(qp, RIG_SEND), RIG_RING_ENTRIES, "%s: a refused read posted",
		     who);
}

/*
 * M4, P3: a raw rdma_cm client dials a rig listener on rxe0 with an
 * endpoint that claims rxe0's GID and the number of a live queue pair of
 * the listener's NIC. The peer chooses both: the accepted queue pair must
 * grant it nothing. On two hosts the client is on the other host (rxe1),
 * and its GID is not the address it connected from; on one host it is on
 * rxe0 itself, as another process of this host would be: its GID is
 * truthfully ours, and only the queue pair it names tells it apart.
 */
Test(cm, M4_P3_a_dialer_claiming_our_gid_and_qpn_gets_no_access)
{
	struct rig_nic *ln, *pn;
	struct rig_qp *decoy, *own;
	struct server s = { NULL, 10000000, -1, NULL };
	struct rig_endpoint claim, mine;
	uint8_t priv[RIG_CM_PRIVATE];
	struct rdma_event_channel *ch;
	struct rdma_conn_param p;
	struct rdma_cm_id *id;
	pthread_t t;

	ln = t_nic_open(t_dev());
	pn = t_nic_open(t_other_dev());
	decoy = t_qp(ln);
	own = t_qp(pn);
	rig_qp_endpoint(decoy, &claim);
	rig_qp_endpoint(own, &mine);
	rig_cm_pack(&claim, priv);
	cr_assert_eq(rig_listen(ln, getenv("RIG_TEST_IP"), PORT_CLAIM_DIALER, &s.l), 0, "%s",
		     rig_errmsg());
	cr_assert_eq(pthread_create(&t, NULL, accept_one, &s), 0);
	ch = raw_channel();
	id = raw_resolve(ch, getenv("RIG_TEST_IP"), PORT_CLAIM_DIALER);
	cr_assert_eq(strcmp(ibv_get_device_name(id->verbs->device),
			    t_other_dev()), 0,
		     "the raw client is on %s", ibv_get_device_name(id->verbs->device));
	t_raw_param(&p, priv, RIG_CM_PRIVATE, mine.qp);
	cr_assert_eq(rdma_connect(id, &p), 0, "rdma_connect: %s", strerror(errno));
	raw_expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, NULL);
	cr_assert_eq(rdma_establish(id), 0, "rdma_establish: %s", strerror(errno));
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(s.ret, 0, "rig_accept: %d", s.ret);

	expect_remote(s.qp, ln, "accepted");

	cr_assert_eq(rig_qp_destroy(s.qp), 0);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	cr_assert_eq(rig_listener_close(s.l), 0);
	cr_assert_eq(rig_nic_close(pn), 0);
	cr_assert_eq(rig_nic_close(ln), 0);
}

/*
 * M4, P3: the other way. A raw listener on rxe1 answers a rig_dial from
 * rxe0 with the dialer's own endpoint (from the request's private data):
 * rxe0's GID and the dialer's own queue-pair number, as a loopback
 * would. The dialed queue pair must grant it nothing.
 */
Test(cm, M4_P3_a_listener_claiming_our_gid_and_qpn_gets_no_access)
{
	struct rig_nic *dn, *pn;
	struct rig_qp *own;
	struct dialer d = { NULL, PORT_CLAIM_LISTENER, -1, NULL };
	struct rig_endpoint claim, mine;
	uint8_t priv[RIG_CM_PRIVATE];
	struct rdma_event_channel *ch;
	struct rdma_conn_param p;
	struct rdma_cm_id *lid;
	struct sockaddr_in sin;
	struct raw_ev req;
	pthread_t t;

	if (!t_peer_dev())
		cr_skip_test("a peer on another NIC than the dialer's needs two hosts");
	dn = t_nic_open(t_dev());
	pn = t_nic_open(t_peer_dev());
	own = t_qp(pn);
	rig_qp_endpoint(own, &mine);
	ch = raw_channel();
	to_sin(&sin, t_other_ip(), PORT_CLAIM_LISTENER);
	cr_assert_eq(rdma_create_id(ch, &lid, NULL, RDMA_PS_TCP), 0);
	cr_assert_eq(rdma_bind_addr(lid, (struct sockaddr *)&sin), 0, "%s", strerror(errno));
	cr_assert_eq(rdma_listen(lid, 8), 0, "%s", strerror(errno));
	d.nic = dn;
	cr_assert_eq(pthread_create(&t, NULL, dial_one, &d), 0);
	raw_expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, &req);
	/* rig_dial's form: "rig3", the endpoint, its port's MTU code, its sink */
	cr_assert_geq(req.len, RIG_CM_PRIVATE_SINK, "the request's private data: %zu bytes",
		      req.len);
	cr_assert_eq(memcmp(req.priv, "rig3", 4), 0, "the request's private data's tag");
	cr_assert_eq(rig_endpoint_unpack(req.priv + 4, RIG_ENDPOINT_WIRE, &claim), 0,
		     "the request's endpoint");
	rig_cm_pack(&claim, priv);	/* the dialer's own endpoint, sent back */
	t_raw_param(&p, priv, RIG_CM_PRIVATE, mine.qp);
	cr_assert_eq(rdma_accept(req.id, &p), 0, "rdma_accept: %s", strerror(errno));
	raw_expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(d.ret, 0, "rig_dial: %d", d.ret);

	expect_remote(d.qp, dn, "dialed");

	cr_assert_eq(rig_qp_destroy(d.qp), 0);
	rdma_destroy_id(req.id);
	rdma_destroy_id(lid);
	rdma_destroy_event_channel(ch);
	cr_assert_eq(rig_nic_close(pn), 0);
	cr_assert_eq(rig_nic_close(dn), 0);
}

/* The failure's log lines, kept for the test that reads them. */
static char log_lines[4][256];
static int log_count;

static void keep_log(enum rig_log_level level, const char *line)
{
	(void)level;
	if (log_count < 4)
		snprintf(log_lines[log_count], sizeof(log_lines[0]), "%s", line);
	__atomic_add_fetch(&log_count, 1, __ATOMIC_RELAXED);
}

/* A failure names its connection: rig_qp_peer gives both ends' queue-pair
 * numbers and the address and port rdma_cm connected, and the failure's
 * log line says the same, so that an operator can match the two hosts'
 * logs and `rdma res show qp`. The dialer's peer is the listener's address
 * and port; the listener's, the dialer's address and its source port. */
Test(cm, a_failure_names_its_peer_by_address_and_both_queue_pairs)
{
	const char *ip = t_other_ip(), *cip = getenv("RIG_TEST_IP");
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(t_other_dev()) : cn;
	struct server s = { NULL, 10000000, -1, NULL };
	struct rig_qp_peer cp = { .size = sizeof(cp) }, sp = { .size = sizeof(sp) };
	struct rig_endpoint se, ce;
	struct rig_completion c;
	struct rig_qp *qp = NULL;
	struct t_buf srx;
	char want[64], line[160];
	const char *colon;
	uint32_t cqpn;
	pthread_t t;
	long sport;

	cr_assert_not_null(ip);
	cr_assert_not_null(cip);
	cr_assert_eq(rig_listen(sn, ip, PORT_NAMES_PEER, &s.l), 0, "%s", rig_errmsg());
	pthread_create(&t, NULL, accept_one, &s);
	cr_assert_eq(rig_dial(cn, ip, PORT_NAMES_PEER, 10000000, &qp), 0, "%s", rig_errmsg());
	pthread_join(t, NULL);
	cr_assert_eq(s.ret, 0, "rig_accept failed");
	rig_qp_endpoint(s.qp, &se);
	rig_qp_endpoint(qp, &ce);

	cr_assert_eq(rig_qp_peer(qp, &cp), 0, "%s", rig_errmsg());
	cr_assert_eq(cp.qp, qp->ibqp->qp_num);
	cr_assert_eq(cp.peer_qp, s.qp->ibqp->qp_num);
	cr_assert_arr_eq(cp.gid, se.gid, 16);
	snprintf(want, sizeof(want), "%s:%u", ip, PORT_NAMES_PEER);
	cr_assert_str_eq(cp.addr, want);

	cr_assert_eq(rig_qp_peer(s.qp, &sp), 0, "%s", rig_errmsg());
	cr_assert_eq(sp.qp, s.qp->ibqp->qp_num);
	cr_assert_eq(sp.peer_qp, qp->ibqp->qp_num);
	cr_assert_arr_eq(sp.gid, ce.gid, 16);
	colon = strrchr(sp.addr, ':');
	cr_assert_not_null(colon, "%s", sp.addr);
	cr_assert_eq((size_t)(colon - sp.addr), strlen(cip), "%s", sp.addr);
	cr_assert_eq(strncmp(sp.addr, cip, strlen(cip)), 0, "%s", sp.addr);
	sport = strtol(colon + 1, NULL, 10);
	cr_assert(sport > 0 && sport < 65536, "%s", sp.addr);

	/* The dialer leaves: the listener's queue pair fails, and its log
	 * line names the dialer as rig_qp_peer does. */
	t_buf(&srx, sn, 64, 0);
	cr_assert_eq(rig_qp_receive(s.qp, srx.r, 0, 64), 0);
	cr_assert_eq(rig_set_log(keep_log, RIG_LOG_WARN), 0);
	cqpn = qp->ibqp->qp_num;
	cr_assert_eq(rig_qp_destroy(qp), 0);
	/* a wait hears of it (T3: polls alone read no rdma_cm event) */
	cr_assert_eq(rig_qp_wait(s.qp, RIG_RECEIVE, 10000000, &c), 1, "%s", rig_errmsg());
	cr_assert_eq(c.error, -ECONNRESET, "%d %s", c.error, c.why ? c.why : "");
	cr_assert_eq(rig_set_log(NULL, RIG_LOG_OFF), 0);
	cr_assert_eq(log_count, 1, "%d log lines", log_count);
	snprintf(line, sizeof(line), "queue pair 0x%06x (to %s, its queue pair 0x%06x) failed",
		 sp.qp, sp.addr, cqpn);
	cr_assert_not_null(strstr(log_lines[0], line), "log: %s\nwant: %s", log_lines[0], line);
	cr_assert_eq(rig_qp_destroy(s.qp), 0);
	rig_listener_close(s.l);
	if (sn != cn)
		cr_assert_eq(rig_nic_close(sn), 0);
	cr_assert_eq(rig_nic_close(cn), 0);
}

/* One completion of @cq within 10 s. */
static struct ibv_wc raw_wc_of(struct ibv_cq *cq)
{
	double end = t_now_ms() + 10000;
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		cr_assert_lt(t_now_ms(), end, "no completion in 10 s");
		usleep(1000);
	}
	cr_assert_eq(n, 1, "ibv_poll_cq: %d", n);
	return wc;
}

/*
 * M4, L1: the queue pair of a connection by address takes RDMA WRITEs, for
 * its peer's liveness probes (rig 0.3's zero-length ones here, from a
 * "rig1" peer), yet nobody may write the application's memory. A
 * raw-verbs client connects to a rig listener (rdma_cm, a rig endpoint
 * of its own queue pair) and knows a rig region's address and rkey: its
 * zero-length write succeeds, and the rig side sees no completion and
 * no failure; its 64-byte write with the stolen rkey is refused by the
 * region (REM_ACCESS_ERR: no region of the application's grants remote
 * write), and the region's bytes are unchanged.
 */
Test(cm, M4_L1_zero_length_write_taken_a_write_with_bytes_refused)
{
	struct rig_nic *ln = t_nic_open(t_dev());
	struct server s = { NULL, 10000000, -1, NULL };
	const char *gi = getenv(t_peer_dev() ? "RIG_TEST_PEER_GID_INDEX" : "RIG_TEST_GID_INDEX");
	uint8_t priv[RIG_CM_PRIVATE], before[4096], raw_buf[64];
	struct rig_endpoint mine = { 0 }, theirs;
	struct rdma_event_channel *ch;
	struct ibv_send_wr wr, *bad;
	struct rdma_conn_param p;
	struct t_raw_qp raw;
	struct rig_completion c;
	struct rdma_cm_id *id;
	struct ibv_port_attr pa;
	struct ibv_sge sge;
	struct t_buf region;
	union ibv_gid gid;
	struct ibv_wc wc;
	pthread_t t;

	t_buf(&region, ln, sizeof(before), 77);
	memcpy(before, region.mem, sizeof(before));
	cr_assert_eq(rig_listen(ln, getenv("RIG_TEST_IP"), PORT_RAW_WRITER, &s.l), 0, "%s",
		     rig_errmsg());
	cr_assert_eq(pthread_create(&t, NULL, accept_one, &s), 0);
	ch = raw_channel();
	id = raw_resolve(ch, getenv("RIG_TEST_IP"), PORT_RAW_WRITER);
	t_raw_qp_open(&raw, id->verbs, raw_buf, sizeof(raw_buf), IBV_ACCESS_LOCAL_WRITE);
	memset(raw_buf, 0xa5, sizeof(raw_buf));
	cr_assert_not_null(gi, "no GID index in the environment");
	cr_assert_eq(ibv_query_gid(id->verbs, 1, atoi(gi), &gid), 0);
	cr_assert_eq(ibv_query_port(id->verbs, 1, &pa), 0);
	mine.qp = raw.qp->qp_num;
	mine.psn = 0x1234;
	memcpy(mine.gid, gid.raw, 16);
	rig_cm_pack(&mine, priv);
	t_raw_param(&p, priv, RIG_CM_PRIVATE, raw.qp->qp_num);
	cr_assert_eq(rdma_connect(id, &p), 0, "rdma_connect: %s", strerror(errno));
	raw_expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, NULL);
	cr_assert_eq(rdma_establish(id), 0, "rdma_establish: %s", strerror(errno));
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(s.ret, 0, "rig_accept: %d", s.ret);
	rig_qp_endpoint(s.qp, &theirs);
	t_raw_connect(raw.qp, atoi(gi), pa.active_mtu, mine.psn, theirs.qp, theirs.psn,
		      theirs.gid);
	cr_assert_eq(rig_qp_receive(s.qp, region.r, 0, 64), 0);

	/* zero bytes: taken by the NIC, seen by nobody */
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.wr.rdma.remote_addr = (uintptr_t)region.r->addr;
	wr.wr.rdma.rkey = region.r->rkey;
	cr_assert_eq(ibv_post_send(raw.qp, &wr, &bad), 0);
	wc = raw_wc_of(raw.cq);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "the zero-length write got %s",
		     ibv_wc_status_str(wc.status));
	cr_assert_eq(rig_qp_poll(s.qp, RIG_RECEIVE, &c), 0, "the write completed a receive");
	cr_assert_eq(rig_qp_failure(s.qp, NULL), 0);
	cr_assert(memcmp(region.mem, before, sizeof(before)) == 0, "the region changed");

	/* 64 bytes with the stolen rkey: the region refuses */
	sge = (struct ibv_sge){ (uintptr_t)raw_buf, sizeof(raw_buf), raw.mr->lkey };
	wr.wr_id = 2;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	cr_assert_eq(ibv_post_send(raw.qp, &wr, &bad), 0);
	wc = raw_wc_of(raw.cq);
	cr_assert_eq(wc.status, IBV_WC_REM_ACCESS_ERR, "the 64-byte write got %s (%d)",
		     ibv_wc_status_str(wc.status), wc.status);
	cr_assert(memcmp(region.mem, before, sizeof(before)) == 0, "the region changed");

	cr_assert_eq(rig_qp_destroy(s.qp), 0);
	t_raw_qp_close(&raw);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	cr_assert_eq(rig_listener_close(s.l), 0);
	cr_assert_eq(rig_nic_close(ln), 0);
}

/*
 * A dialer of an older rig, written with plain librdmacm: it sends
 * @form ("rig1": rig_cm_pack's 34 bytes; "rig2": rig_cm_pack_mtu's 35)
 * and reads the answer with that release's parser, which takes its own
 * form and the older ones only. The answer must be in the request's form,
 * name the accepted queue pair, and the connection must come up.
 */
static void older_dialer_gets_its_form(int form, uint16_t port)
{
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(t_other_dev()) : cn;
	struct rig_endpoint mine, theirs, accepted_self;
	struct server s = { NULL, 20000000, -1, NULL };
	uint8_t priv[RIG_CM_PRIVATE_MTU], mtu = 0;
	const char *tag = form == 1 ? "rig1" : "rig2";
	struct rdma_event_channel *ch;
	struct rdma_conn_param p;
	struct rig_qp *offer = t_qp(cn);
	struct rdma_cm_id *id;
	struct raw_ev rep;
	pthread_t t;
	int ret;

	cr_assert_eq(rig_listen(sn, t_other_ip(), port, &s.l), 0, "%s", rig_errmsg());
	/* rig_accept answers the request, and takes the RTU */
	cr_assert_eq(pthread_create(&t, NULL, accept_one, &s), 0);
	rig_qp_endpoint(offer, &mine);
	if (form == 1)
		rig_cm_pack(&mine, priv);
	else
		rig_cm_pack_mtu(&mine, IBV_MTU_1024, priv);
	ch = raw_channel();
	id = raw_resolve(ch, t_other_ip(), port);
	t_raw_param(&p, priv, form == 1 ? RIG_CM_PRIVATE : RIG_CM_PRIVATE_MTU, mine.qp);
	cr_assert_eq(rdma_connect(id, &p), 0, "rdma_connect: %s", strerror(errno));
	raw_expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, &rep);
	cr_assert_eq(memcmp(rep.priv, tag, 4), 0, "the answer's tag is %.4s, not %s",
		     (const char *)rep.priv, tag);
	ret = form == 1 ? rig_cm_parse(rep.priv, rep.len, &theirs)
			: rig_cm_parse_mtu(rep.priv, rep.len, &theirs, &mtu);
	cr_assert_eq(ret, 0, "parsing the answer (%zu bytes): %d %s", rep.len, ret,
		     rig_errmsg());
	if (form == 2)
		cr_assert(mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096, "MTU code %u", mtu);
	cr_assert_eq(rdma_establish(id), 0, "rdma_establish: %s", strerror(errno));
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(s.ret, 0, "rig_accept: %d", s.ret);
	rig_qp_endpoint(s.qp, &accepted_self);
	cr_assert_eq(theirs.qp, accepted_self.qp, "the answer names queue pair %#x, not the "
		     "accepted %#x", theirs.qp, accepted_self.qp);

	cr_assert_eq(rig_qp_destroy(s.qp), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_listener_close(s.l), 0, "%s", rig_errmsg());
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	cr_assert_eq(rig_qp_destroy(offer), 0);
	if (sn != cn)
		cr_assert_eq(rig_nic_close(sn), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(cn), 0, "%s", rig_errmsg());
}

/*
 * A dialer of rig 0.2 speaks rig_cm_pack's form alone ("rig1", 34 bytes)
 * and reads the answer with rig_cm_parse, which takes that form only. A
 * listener answers a request in the form it came in: the answer to a
 * "rig1" request is rig_cm_pack's, its endpoint the accepted queue
 * pair's, and the connection comes up (it answered "rig2", which such a
 * dialer refused with -EPROTO). The other way round, a listener that
 * speaks rig1 only, is M4_P3_a_listener_claiming_our_gid_and_qpn_gets_no_access
 * (M3: the endpoints travel in the forms both ends read).
 */
Test(cm, M3_a_rig1_dialer_gets_a_rig1_answer)
{
	older_dialer_gets_its_form(1, PORT_RIG1_DIALER);
}

/*
 * M3, L1: a dialer of rig 0.3, or a peer written from rig-wire(7) before
 * "rig3", sends "rig2" (35 bytes) and reads the answer with
 * rig_cm_parse_mtu, which takes "rig1" and "rig2" only: a listener of
 * rig 0.4 answers "rig2", with its MTU and no sink, and the connection
 * comes up (rig probes such a peer with rig 0.3's zero-length write).
 */
Test(cm, M3_a_rig2_dialer_gets_a_rig2_answer)
{
	older_dialer_gets_its_form(2, PORT_RIG2_DIALER);
}

/*
 * M2, M3, L1, M4: a raw-verbs peer dials in "rig3" with a sink of its
 * own and gets a "rig3" answer whose sink is memory the listener's NIC
 * registered for remote write: a one-byte write there with the
 * answer's rkey and address (what rig's probes send) succeeds, and
 * neither the rig side's rings nor its failure see it; the same write
 * with the rkey changed is refused (REM_ACCESS_ERR: the key is checked).
 */
Test(cm, M3_L1_a_rig3_dialer_gets_a_rig3_answer_whose_sink_takes_a_byte)
{
	struct rig_nic *ln = t_nic_open(t_dev());
	struct server s = { NULL, 10000000, -1, NULL };
	const char *gi = getenv(t_peer_dev() ? "RIG_TEST_PEER_GID_INDEX" : "RIG_TEST_GID_INDEX");
	uint8_t priv[RIG_CM_PRIVATE_SINK], raw_buf[64], mtu = 0;
	struct rig_endpoint mine = { 0 }, theirs, accepted_self;
	struct rig_cm_sink my_sink, sink = { 0, 0 };
	struct rdma_event_channel *ch;
	struct ibv_send_wr wr, *bad;
	struct rdma_conn_param p;
	struct t_raw_qp raw;
	struct rig_completion c;
	struct rdma_cm_id *id;
	struct ibv_port_attr pa;
	struct ibv_sge sge;
	struct raw_ev rep;
	union ibv_gid gid;
	struct ibv_wc wc;
	pthread_t t;
	int ret;

	cr_assert_eq(rig_listen(ln, getenv("RIG_TEST_IP"), PORT_RIG3_SINK, &s.l), 0, "%s",
		     rig_errmsg());
	cr_assert_eq(pthread_create(&t, NULL, accept_one, &s), 0);
	ch = raw_channel();
	id = raw_resolve(ch, getenv("RIG_TEST_IP"), PORT_RIG3_SINK);
	/* the peer's own sink, and the byte it sends from */
	t_raw_qp_open(&raw, id->verbs, raw_buf, sizeof(raw_buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	memset(raw_buf, 0xa5, sizeof(raw_buf));
	cr_assert_not_null(gi, "no GID index in the environment");
	cr_assert_eq(ibv_query_gid(id->verbs, 1, atoi(gi), &gid), 0);
	cr_assert_eq(ibv_query_port(id->verbs, 1, &pa), 0);
	mine.qp = raw.qp->qp_num;
	mine.psn = 0x1234;
	memcpy(mine.gid, gid.raw, 16);
	my_sink = (struct rig_cm_sink){ raw.mr->rkey, (uintptr_t)raw_buf };
	rig_cm_pack_sink(&mine, pa.active_mtu, &my_sink, priv);
	t_raw_param(&p, priv, RIG_CM_PRIVATE_SINK, raw.qp->qp_num);
	cr_assert_eq(rdma_connect(id, &p), 0, "rdma_connect: %s", strerror(errno));
	raw_expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, &rep);
	cr_assert_eq(memcmp(rep.priv, "rig3", 4), 0, "the answer's tag is %.4s, not rig3",
		     (const char *)rep.priv);
	ret = rig_cm_parse_sink(rep.priv, rep.len, &theirs, &mtu, &sink);
	cr_assert_eq(ret, 3, "rig_cm_parse_sink of the answer (%zu bytes): %d %s", rep.len,
		     ret, rig_errmsg());
	cr_assert(sink.addr != 0, "the answer's sink is at address 0");
	cr_assert_eq(rdma_establish(id), 0, "rdma_establish: %s", strerror(errno));
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(s.ret, 0, "rig_accept: %d", s.ret);
	rig_qp_endpoint(s.qp, &accepted_self);
	cr_assert_eq(theirs.qp, accepted_self.qp);
	t_raw_connect(raw.qp, atoi(gi), pa.active_mtu, mine.psn, theirs.qp, theirs.psn,
		      theirs.gid);

	/* one byte into the sink, as rig's probes write it: taken */
	sge = (struct ibv_sge){ (uintptr_t)raw_buf, 1, raw.mr->lkey };
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.remote_addr = sink.addr;
	wr.wr.rdma.rkey = sink.rkey;
	cr_assert_eq(ibv_post_send(raw.qp, &wr, &bad), 0);
	wc = raw_wc_of(raw.cq);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "the write into the sink got %s",
		     ibv_wc_status_str(wc.status));
	cr_assert_eq(rig_qp_poll(s.qp, RIG_RECEIVE, &c), 0, "the write completed a receive");
	cr_assert_eq(rig_qp_failure(s.qp, NULL), 0);

	/* the same with another key: refused */
	wr.wr_id = 2;
	wr.wr.rdma.rkey = sink.rkey ^ 0x5a;
	cr_assert_eq(ibv_post_send(raw.qp, &wr, &bad), 0);
	wc = raw_wc_of(raw.cq);
	cr_assert_eq(wc.status, IBV_WC_REM_ACCESS_ERR, "a write with a wrong key got %s (%d)",
		     ibv_wc_status_str(wc.status), wc.status);

	cr_assert_eq(rig_qp_destroy(s.qp), 0);
	t_raw_qp_close(&raw);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	cr_assert_eq(rig_listener_close(s.l), 0);
	cr_assert_eq(rig_nic_close(ln), 0);
}
