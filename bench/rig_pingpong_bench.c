/* SPDX-License-Identifier: MIT */
/*
 * rig_pingpong_bench: bench/pingpong.h's ping-pong on rig, the same program
 * as bench/raw_pingpong.c but for the backend below: rig_nic_open,
 * rig_region_register, rig_qp_make/connect, the inline rig_qp_receive,
 * rig_qp_send and rig_qp_poll, and rig_qp_wait for sleeping (it spins as
 * the NIC's setting says, adaptive by default, then sleeps in an io_uring
 * on the NIC's completion channel).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rig/rig.h>

#include "bench.h"

#define BE_NAME "rig"
#define RIG_BENCH_WAIT_US 1000000	/* one rig_qp_wait; repeated at the bound */

struct be_nic {
	struct rig_nic *nic;
};

struct be_qp {
	struct rig_qp *qp;
	struct rig_region *region;
};

static char rig_bench_msg[160];

static const char *be_errmsg(void)
{
	return rig_bench_msg[0] ? rig_bench_msg : rig_errmsg();
}

static int be_nic_open(struct be_nic *nic, const char *dev, int gidx)
{
	(void)gidx;	/* rig takes the NIC's RoCE v2 GID itself */
	const char *spin = getenv("BENCH_RIG_SPIN");	/* ns, -1 adaptive */
	const char *watch = getenv("BENCH_RIG_WATCH");
	int ret;

	rig_bench_msg[0] = '\0';
	ret = rig_nic_open(dev, &nic->nic);
	if (!ret && spin && *spin)
		ret = rig_nic_set_spin(nic->nic, strtoll(spin, NULL, 0));
	/* BENCH_RIG_WATCH=1: the NIC's own loop, which rig_qp_make uses, is
	 * watched, as a server's loop is: its thread may move entries
	 * waiting beyond the depth, so every poll of a waiting ring goes
	 * out of line (rig(7) Q4). Nothing reads the loop's fd here. */
	if (!ret && watch && *watch == '1')
		ret = rig_loop_watch(rig_nic_loop(nic->nic));
	return ret;
}

static void be_nic_close(struct be_nic *nic)
{
	rig_nic_close(nic->nic);
}

static int be_qp_make(struct be_nic *nic, struct be_qp *q, void *buf,
		      size_t len)
{
	int ret;

	q->qp = NULL;
	q->region = NULL;
	ret = rig_region_register(nic->nic, buf, len, &q->region);
	if (ret)
		return ret;
	return rig_qp_make(nic->nic, &q->qp);
}

static void be_qp_endpoint(struct be_qp *q, struct bench_ep *ep)
{
	struct rig_endpoint e;

	rig_qp_endpoint(q->qp, &e);
	memset(ep, 0, sizeof(*ep));
	ep->qpn = e.qp;
	ep->psn = e.psn;
	memcpy(ep->gid, e.gid, 16);
	memcpy(ep->mac, e.mac, 6);
}

static int be_qp_connect(struct be_qp *q, const struct bench_ep *peer)
{
	struct rig_endpoint e;

	e.qp = peer->qpn;
	e.psn = peer->psn;
	memcpy(e.gid, peer->gid, 16);
	memcpy(e.mac, peer->mac, 6);
	return rig_qp_connect(q->qp, &e);
}

/* BENCH_STATS=1: each queue pair's backlog counters on stderr, at the
 * end (rig(7) Q4: what waited beyond the NIC's depth, how often its
 * queue was found empty). */
static void be_qp_stats(struct be_qp *q)
{
	struct rig_qp_stats s[2] = { { .size = sizeof(s[0]) }, { .size = sizeof(s[1]) } };

	if (!getenv("BENCH_STATS") || rig_qp_stats(q->qp, RIG_SEND, &s[0]) ||
	    rig_qp_stats(q->qp, RIG_RECEIVE, &s[1]))
		return;
	fprintf(stderr, "rig: send posted %u waited %llu ran_dry %llu; "
		"receive posted %u waited %llu ran_dry %llu\n",
		s[0].posted, (unsigned long long)s[0].waited,
		(unsigned long long)s[0].ran_dry, s[1].posted,
		(unsigned long long)s[1].waited, (unsigned long long)s[1].ran_dry);
}

static void be_qp_destroy(struct be_qp *q)
{
	if (q->qp) {
		be_qp_stats(q);
		rig_qp_destroy(q->qp);
	}
	if (q->region)
		rig_region_deregister(q->region);
}

static inline __attribute__((always_inline)) int be_post_recv(struct be_qp *q, size_t at, size_t n)
{
	return rig_qp_receive(q->qp, q->region, at, n);
}

static inline __attribute__((always_inline)) int be_post_send(struct be_qp *q, size_t at, size_t n)
{
	return rig_qp_send(q->qp, q->region, at, n);
}

static int rig_bench_failed(const struct rig_completion *c)
{
	snprintf(rig_bench_msg, sizeof(rig_bench_msg), "completion: %s",
		 c->why);
	return c->error;
}

static inline __attribute__((always_inline)) int be_poll(struct be_qp *q, int side)
{
	struct rig_completion c;
	int ret = rig_qp_poll(q->qp, (enum rig_side)side, &c);

	if (ret == 1 && c.error)
		return rig_bench_failed(&c);
	return ret;
}

static int be_wait(struct be_qp *q, int side)
{
	struct rig_completion c;
	int ret;

	do
		ret = rig_qp_wait(q->qp, (enum rig_side)side,
				  RIG_BENCH_WAIT_US, &c);
	while (!ret);
	if (ret == 1 && c.error)
		return rig_bench_failed(&c);
	return ret;
}

#include "pingpong.h"
