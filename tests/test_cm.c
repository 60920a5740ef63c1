/* SPDX-License-Identifier: MIT */
/*
 * Connecting by address with librdmacm (include/rig/cm.h), in both
 * topologies: on one host the listener and the dialer share rxe0; on two,
 * the listener is on rxe1 and the dialer on rxe0.
 */
#include <criterion/criterion.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#include "t_device.h"

/*
 * A port for each test (nic_close_closes_its_listener has 18590). Each
 * test runs in a process of its own, so a counter would give every test
 * the same port, and a test would then depend on the kernel having let go
 * of the port, and of the CM's listen on its service ID, when the test
 * before it ended.
 */
enum { PORT_DIAL_ACCEPT = 18515, PORT_GARBAGE, PORT_LISTENER_FD };

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

/* The listener's side: its NIC and address. */
static const char *server_ip(void)
{
	return getenv(t_peer_dev() ? "RIG_TEST_PEER_IP" : "RIG_TEST_IP");
}

static const char *server_dev(void)
{
	return t_peer_dev() ? t_peer_dev() : t_dev();
}

/* M3, M4: a dialed and an accepted queue pair follow the same rules as
 * with rig_qp_connect: messages go both ways; reads only on one NIC. */
Test(cm, M3_M4_dial_and_accept)
{
	const char *ip = server_ip();
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(server_dev()) : cn;
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

		cr_assert_eq(rig_qp_read(qp, stx.r, 0, crx.r, 0, 4096), 0, "%s", rig_errmsg());
		c = t_take(qp, RIG_SEND, 5000);
		cr_assert_eq(c.error, 0, "%s", c.why);
		cr_assert_arr_eq(crx.mem, stx.mem, 4096);
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

	cr_assert_eq(rig_dial(cn, server_ip(), 9, 10000000, &qp), -ECONNREFUSED, "%s",
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
	inet_pton(AF_INET, server_ip(), &sin.sin_addr);
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
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(server_dev()) : cn;
	struct server s = { NULL, 10000000, -1, NULL };
	uint16_t port = PORT_GARBAGE;
	struct rig_qp *qp = NULL;
	pthread_t t;
	void *rejected;
	int ret;

	cr_assert_eq(rig_listen(sn, server_ip(), port, &s.l), 0, "%s", rig_errmsg());
	pthread_create(&t, NULL, raw_garbage_client, &port);
	ret = rig_accept(s.l, 10000000, &s.qp);
	pthread_join(t, &rejected);
	cr_assert_eq(ret, -EPROTO, "%d %s", ret, rig_errmsg());
	cr_assert_eq((long)rejected, 1, "the client was not told REJECTED");
	/* The listener goes on. */
	pthread_create(&t, NULL, accept_one, &s);
	ret = rig_dial(cn, server_ip(), port, 10000000, &qp);
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

	d->ret = rig_dial(d->nic, server_ip(), d->port, 10000000, &d->qp);
	return NULL;
}

Test(cm, listener_fd_in_io_uring)
{
	struct rig_nic *cn = t_nic_open(t_dev());
	struct rig_nic *sn = t_peer_dev() ? t_nic_open(server_dev()) : cn;
	struct rig_listener *l;
	struct dialer d = { cn, PORT_LISTENER_FD, -1, NULL };
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct rig_qp *qp = NULL;
	pthread_t t;

	cr_assert_eq(rig_listen(sn, server_ip(), d.port, &l), 0, "%s", rig_errmsg());
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
	n = t_nic_open(server_dev());
	cr_assert_eq(rig_listen(n, server_ip(), port, &l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_listener_close(l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(n), 0, "%s", rig_errmsg());

	before = t_fd_count();
	n = t_nic_open(server_dev());
	cr_assert_eq(rig_listen(n, server_ip(), port, &l), 0, "%s", rig_errmsg());
	open_fds = t_fd_count();
	cr_assert_gt(open_fds, before);
	cr_assert_eq(rig_nic_close(n), 0, "%s", rig_errmsg());
	after = t_fd_count();
	cr_assert_eq(after, before,
		     "rig_nic_close left %d of the %d fds of the NIC and its listener open",
		     after - before, open_fds - before);
}
