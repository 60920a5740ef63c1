/* SPDX-License-Identifier: MIT */
/*
 * The device goes away under live connections (rig(7) F1, F6).
 *
 * `rdma link delete` of a Soft-RoCE device makes rdma_cm raise
 * DEVICE_REMOVAL on every id of that device. A connection that hears it
 * fails its queue pair as an async event does: every due entry completes
 * with -ENODEV, in ring order, and the loop hands out RIG_NEWS_GONE with
 * -ENODEV, with no poll by the application. On two hosts the peer, on the
 * other device, hears its CM disconnect and fails with -ECONNRESET; on
 * one host both ends are on the device, and each fails with what it
 * heard first.
 *
 * The deletion itself completes only once every process that opened the
 * device has closed it, and librdmacm keeps a context on every device
 * until the process exits: the test's worker holds it. So the runner,
 * which opens no device, waits for the deletion to end once every test
 * has run, and adds the device back on its netdev (POST_ALL below), so
 * that whatever runs next in the VM finds the bed as it was.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_device.h"

#define NRECV 4
#define RECV_COOKIE 0x100
#define MSG 64
#define PORT 18710
#define LONG_MS 10000

/* The device that goes is the listener's, t_other_dev() (rxe1 on two
 * hosts); this is its netdev. */
static const char *gone_netdev(void)
{
	return t_peer_dev() ? t_peer_netdev() : t_netdev();
}

struct side {
	struct rig_nic *nic;
	struct rig_loop *loop;
	struct rig_qp *qp;
	int gone;		/* RIG_NEWS_GONE's result, once handed out */
	double gone_at;
};

static void side_open(struct side *s, const char *dev)
{
	memset(s, 0, sizeof(*s));
	s->nic = t_nic_open(dev);
	cr_assert_eq(rig_loop_open(s->nic, &s->loop), 0, "%s", rig_errmsg());
}

/* Handles the news of @s's loop: the connection's, GONE's. */
static void side_handle(struct side *s)
{
	struct rig_ready r[8];
	int i, n = rig_loop_handle(s->loop, r, 8);

	cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
	for (i = 0; i < n; i++) {
		if (r[i].news == RIG_NEWS_ACCEPTED || r[i].news == RIG_NEWS_DIALED) {
			cr_assert_eq(r[i].result, 0, "news %d: %d", r[i].news, r[i].result);
			cr_assert_null(s->qp, "a second connection");
			s->qp = r[i].qp;
		} else if (r[i].news == RIG_NEWS_GONE) {
			cr_assert_eq(r[i].qp, s->qp, "GONE of a queue pair not ours");
			cr_assert_eq(s->gone, 0, "GONE handed out twice");
			s->gone = r[i].result;
			s->gone_at = t_now_ms();
		}
		/* RIG_NEWS_RING: the completions are taken below. */
	}
}

/* Drives both loops until @done(a, b) or @end; false at @end. */
static bool pump(struct side *a, struct side *b, bool (*done)(struct side *, struct side *),
		 double end)
{
	struct pollfd p[2] = { { rig_loop_fd(a->loop), POLLIN, 0 },
			       { rig_loop_fd(b->loop), POLLIN, 0 } };

	while (!done(a, b)) {
		if (t_now_ms() >= end)
			return false;
		/* One host: both sides share a NIC, but each has its loop. */
		cr_assert_geq(poll(p, 2, 100), 0);
		side_handle(a);
		side_handle(b);
	}
	return true;
}

static bool both_up(struct side *a, struct side *b)
{
	return a->qp && b->qp;
}

static bool both_gone(struct side *a, struct side *b)
{
	return a->gone && b->gone;
}

/* The @n due receives of @qp fail with @error, in ring order. */
static void expect_failed(struct rig_qp *qp, int error, const char *word, const char *who)
{
	struct rig_completion c;
	uint64_t cookie;
	double end = t_now_ms() + LONG_MS;
	int i = 0, n;

	while (i < NRECV) {
		n = rig_qp_poll_batch(qp, RIG_RECEIVE, &c, &cookie, 1);
		cr_assert_geq(n, 0, "%s: rig_qp_poll_batch: %d %s", who, n, rig_errmsg());
		if (!n) {
			cr_assert_lt(t_now_ms(), end, "%s: %d of %d receives completed", who, i,
				     NRECV);
			continue;
		}
		cr_assert_eq(c.error, error, "%s: receive %d: %d (%s), want %d", who, i, c.error,
			     c.why ? c.why : "no reason", error);
		cr_assert_eq(cookie, RECV_COOKIE + (uint64_t)i, "%s: receive %d out of order", who,
			     i);
		cr_assert(c.why && strstr(c.why, word), "%s: the reason '%s' lacks '%s'", who,
			  c.why ? c.why : "(null)", word);
		i++;
	}
	cr_assert_eq(rig_qp_poll(qp, RIG_RECEIVE, &c), 0, "%s: more completions", who);
	cr_assert_eq(rig_qp_failure(qp, NULL), error);
}

Test(removal, F1_F6_device_removed_under_connections_ENODEV)
{
	struct side srv, cli;
	struct rig_listener *l;
	struct rig_post e[NRECV];
	struct t_buf sb, cb;
	double act;
	pid_t pid;
	int i;

	side_open(&srv, t_other_dev());
	side_open(&cli, t_dev());
	cr_assert_eq(rig_loop_listen(srv.loop, t_other_ip(), PORT, 1, &l), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_dial(cli.loop, t_other_ip(), PORT, LONG_MS * 1000ll, 2), 0, "%s",
		     rig_errmsg());
	cr_assert(pump(&srv, &cli, both_up, t_now_ms() + LONG_MS), "no connection in %d ms",
		  LONG_MS);
	/* Only receives: no transport retry could ever tell these. */
	t_buf(&sb, srv.nic, NRECV * MSG, 1);
	t_buf(&cb, cli.nic, NRECV * MSG, 2);
	for (i = 0; i < NRECV; i++)
		e[i] = (struct rig_post){ sb.r, (size_t)i * MSG, MSG, RECV_COOKIE + i };
	cr_assert_eq(rig_qp_receive_batch(srv.qp, e, NRECV), NRECV, "%s", rig_errmsg());
	for (i = 0; i < NRECV; i++)
		e[i].region = cb.r;
	cr_assert_eq(rig_qp_receive_batch(cli.qp, e, NRECV), NRECV, "%s", rig_errmsg());

	act = t_now_ms();
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		execlp("rdma", "rdma", "link", "delete", t_other_dev(), (char *)NULL);
		_exit(127);
	}
	cr_assert(pump(&srv, &cli, both_gone, act + LONG_MS),
		  "not told within %d ms: listener side %d, dialer side %d", LONG_MS, srv.gone,
		  cli.gone);
	fprintf(stderr, "test_removal (%s): RIG_NEWS_GONE %.0f ms (device's side), %.0f ms (peer) after rdma link delete\n",
		t_peer_dev() ? "two hosts" : "one host", srv.gone_at - act, cli.gone_at - act);
	if (t_peer_dev()) {
		cr_assert_eq(srv.gone, -ENODEV);
		expect_failed(srv.qp, -ENODEV, "DEVICE_REMOVAL", "the device's side");
		/* The other device stays: its side hears the peer leave. */
		cr_assert_eq(cli.gone, -ECONNRESET);
		expect_failed(cli.qp, -ECONNRESET, "DISCONNECTED", "the peer");
	} else {
		/* Both ends are on the device. The first to hear DEVICE_REMOVAL
		 * answers its peer's id with a disconnect, which may reach the
		 * other end before its own DEVICE_REMOVAL: each fails with the
		 * first it heard, and one of them heard the removal. */
		cr_assert(srv.gone == -ENODEV || cli.gone == -ENODEV,
			  "neither end heard DEVICE_REMOVAL: %d, %d", srv.gone, cli.gone);
		cr_assert(srv.gone == -ENODEV || srv.gone == -ECONNRESET, "%d", srv.gone);
		cr_assert(cli.gone == -ENODEV || cli.gone == -ECONNRESET, "%d", cli.gone);
		expect_failed(srv.qp, srv.gone, srv.gone == -ENODEV ? "DEVICE_REMOVAL" :
			      "DISCONNECTED", "the listener's side");
		expect_failed(cli.qp, cli.gone, cli.gone == -ENODEV ? "DEVICE_REMOVAL" :
			      "DISCONNECTED", "the dialer's side");
	}
	/* Everything closes with the device going. */
	cr_assert_eq(rig_qp_destroy(srv.qp), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(cli.qp), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_listener_close(l), 0);
	cr_assert_eq(rig_loop_close(srv.loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_loop_close(cli.loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(srv.nic), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(cli.nic), 0, "%s", rig_errmsg());
	/* The deletion ends when this process does; the runner waits. */
}

/* In the runner, which holds no device: once the workers are gone the
 * deletion ends; then the device comes back on its netdev. */
ReportHook(POST_ALL)(struct criterion_global_stats *stats)
{
	char cmd[256];
	int i;

	(void)stats;
	if (!getenv("RIG_GUEST") || !t_other_dev() || !gone_netdev())
		return;
	snprintf(cmd, sizeof(cmd), "rdma link show %s/1 >/dev/null 2>&1", t_other_dev());
	for (i = 0; i < 300 && system(cmd) == 0; i++)
		usleep(100000);
	snprintf(cmd, sizeof(cmd), "rdma link add %s type rxe netdev %s", t_other_dev(),
		 gone_netdev());
	if (system(cmd) != 0)
		fprintf(stderr, "test_removal: could not add %s back on %s\n", t_other_dev(),
			gone_netdev());
}
