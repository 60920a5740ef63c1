/* SPDX-License-Identifier: MIT */
/*
 * Queue pairs across two hosts (rig(7) P1, M3, M4, M5, F1, F3, F5), run only
 * in the two-host topology of `tests/rxe-vm --two-hosts`: rxe0 on veth0 and
 * rxe1 on veth1, so every packet between them crosses the veth. The rig
 * side is always on rxe0 ($RIG_TEST_DEV); its peer, a rig queue pair or a
 * raw-verbs one, is on rxe1 ($RIG_TEST_PEER_DEV). Without a peer device
 * every test FAILS: this binary is only run where there is one.
 *
 * Some tests break the wire (a netem qdisc on veth0, plus a neighbour flush),
 * and the VM is shared by all the tests of a run, so this binary runs its
 * tests one at a time: a constructor sets CRITERION_JOBS=1 before
 * Criterion reads it (an explicit --jobs on the command line would still
 * win; don't pass one). A test that cuts the wire restores it before it
 * ends, and its suite's fini restores it again (fini runs after a failed
 * assertion, not after a crash); every test also removes any qdisc left on
 * either end in its init. The tests of connections by address (suite
 * by_address) add a second address to each end, filters, a route and a
 * ToS of rdma_cm's, or set one end's MTU to 9000, and remove them alike.
 */
#include <criterion/criterion.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "t_device.h"
#include "t_grant_all.h"
#include "t_raw_cm.h"

#define BIG (1u << 20)		/* the largest message of the tests */
#define RAW_LEN 8192		/* the raw peer's buffer */
#define RAW_PSN 0x5a5a5a	/* the raw peer's first send PSN */

__attribute__((constructor)) static void run_serially(void)
{
	setenv("CRITERION_JOBS", "1", 1);
}

/* ---- the wire ---------------------------------------------------------- */

/* Runs @cmd in the VM, ignoring its status: for restoring in fini, which
 * must not assert. */
static void sh_quiet(const char *cmd)
{
	int ret = system(cmd);

	(void)ret;
}

/* Every packet either end sends is lost, ARP included, and both neighbour
 * caches forget the other's MAC, so that resolving it again needs the
 * (lost) ARP. Both directions: an ARP reply to a request sent before the
 * cut, from a test before this one, must not teach the cache again after
 * the flush (a busy machine once let a connect through that way). */
static void wire_cut(void)
{
	t_sh("tc qdisc add dev %s root netem loss 100%%", t_netdev());
	t_sh("tc qdisc add dev %s root netem loss 100%%", t_peer_netdev());
	t_sh("ip neigh flush dev %s", t_netdev());
	t_sh("ip neigh flush dev %s", t_peer_netdev());
}

/* ---- fixture: one rig NIC per host ------------------------------------- */

static struct rig_nic *nic_a;	/* rxe0 */
static struct rig_nic *nic_b;	/* rxe1 */

static void setup(void)
{
	cr_assert_not_null(t_peer_dev(),
			   "RIG_TEST_PEER_DEV is unset: test_remote needs the two-host "
			   "topology (tests/rxe-vm --two-hosts)");
	cr_assert_not_null(t_dev(), "RIG_TEST_DEV is unset");
	cr_assert_not_null(getenv("RIG_TEST_NETDEV"), "RIG_TEST_NETDEV is unset");
	t_wire_mend();	/* in case a crashed test (no fini) left the wire cut */
	t_stall_start();	/* for check_window */
	nic_a = t_nic_open(t_dev());
	nic_b = t_nic_open(t_peer_dev());
}

static void teardown(void)
{
	if (nic_a)
		rig_nic_close(nic_a);
	if (nic_b)
		rig_nic_close(nic_b);
	nic_a = nic_b = NULL;
}

/* Tests that cut the wire restore it before they end, and again here,
 * where a failed assertion still gets (a crash does not). */
static void wire_teardown(void)
{
	t_wire_mend();
	teardown();
}

TestSuite(remote, .init = setup, .fini = teardown);
TestSuite(wire, .init = setup, .fini = wire_teardown);

/* ---- helpers ----------------------------------------------------------- */

/* Takes the next completion of @side and checks it: success with @bytes
 * when @error is 0, else exactly @error with a reason. */
static struct rig_completion expect(struct rig_qp *qp, enum rig_side side,
				    int error, uint32_t bytes, const char *what)
{
	struct rig_completion c = t_take(qp, side, 5000);

	cr_assert_eq(c.error, error, "%s: error %d (%s), %u bytes; expected %d (%s)",
		     what, c.error, c.why ? c.why : "no reason", c.bytes, error,
		     strerror(-error));
	if (error) {
		cr_assert_not_null(c.why, "%s: a failed completion without a reason", what);
	} else {
		cr_assert_null(c.why, "%s: success with a reason", what);
		cr_assert_eq(c.bytes, bytes, "%s: %u bytes, expected %u", what,
			     c.bytes, bytes);
	}
	return c;
}

/* Neither ring has a completion to take. */
static void expect_idle(struct rig_qp *qp)
{
	struct rig_completion c;

	cr_assert_eq(rig_qp_poll(qp, RIG_SEND, &c), 0, "a send completion too many");
	cr_assert_eq(rig_qp_poll(qp, RIG_RECEIVE, &c), 0, "a receive completion too many");
	cr_assert_eq(rig_qp_room(qp, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(qp, RIG_RECEIVE), RIG_RING_ENTRIES);
}

static enum ibv_qp_state qp_state(struct rig_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	cr_assert_eq(ibv_query_qp(qp->ibqp, &a, IBV_QP_STATE, &ia), 0);
	return a.qp_state;
}

/* Sends @n bytes at 0 of @tx from @from; @to receives them into @rx, whose
 * bytes after the message must stay as they were. */
static void exchange(struct rig_qp *from, struct t_buf *tx, struct rig_qp *to,
		     struct t_buf *rx, size_t n)
{
	int ret;

	memset(rx->mem, 0xee, rx->len);
	ret = rig_qp_receive(to, rx->r, 0, rx->len);
	cr_assert_eq(ret, 0, "rig_qp_receive: %d %s", ret, rig_errmsg());
	ret = rig_qp_send(from, tx->r, 0, n);
	cr_assert_eq(ret, 0, "rig_qp_send of %zu: %d %s", n, ret, rig_errmsg());
	expect(from, RIG_SEND, 0, (uint32_t)n, "send");
	expect(to, RIG_RECEIVE, 0, (uint32_t)n, "receive");
	cr_assert(memcmp(rx->mem, tx->mem, n) == 0, "%zu bytes arrived changed", n);
	cr_assert_eq(rx->mem[n], 0xee, "the receive wrote past the message");
}

/* Sleeps until t_now_ms() >= @t. */
static void pause_until(double t)
{
	double now;

	while ((now = t_now_ms()) < t) {
		double ms = t - now;
		struct timespec ts = { (time_t)(ms / 1e3),
				       (long)((ms - (time_t)(ms / 1e3) * 1e3) * 1e6) };
		nanosleep(&ts, NULL);
	}
}

/* ---- a raw-verbs peer on rxe1 ------------------------------------------ */

struct raw {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	uint8_t *buf;
	int gid_index;
	union ibv_gid gid;
	enum ibv_mtu mtu;
	struct ibv_cq *cq;	/* per pair */
	struct ibv_qp *qp;	/* per pair */
};

static struct raw raw;

/* A verbs context of the device named @dev, for what rig does not do. */
static struct ibv_context *open_device(const char *dev)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	int i;

	cr_assert_not_null(list);
	for (i = 0; list[i]; i++)
		if (!strcmp(dev, ibv_get_device_name(list[i])))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	cr_assert_not_null(ctx, "cannot open %s", dev);
	return ctx;
}

static void raw_open(struct raw *r)
{
	const char *gi = getenv("RIG_TEST_PEER_GID_INDEX");
	struct ibv_port_attr pa;

	cr_assert_not_null(gi, "RIG_TEST_PEER_GID_INDEX is unset");
	r->ctx = open_device(t_peer_dev());
	r->pd = ibv_alloc_pd(r->ctx);
	cr_assert_not_null(r->pd);
	r->buf = malloc(RAW_LEN);
	cr_assert_not_null(r->buf);
	r->mr = ibv_reg_mr(r->pd, r->buf, RAW_LEN, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(r->mr);
	r->gid_index = atoi(gi);
	cr_assert_eq(ibv_query_gid(r->ctx, 1, r->gid_index, &r->gid), 0);
	cr_assert_eq(ibv_query_port(r->ctx, 1, &pa), 0);
	r->mtu = pa.active_mtu;
}

/* A fresh RC queue pair, with a CQ of its own. */
static void raw_pair_new(struct raw *r)
{
	struct ibv_qp_init_attr ia = { 0 };

	r->cq = ibv_create_cq(r->ctx, 64, NULL, NULL, 0);
	cr_assert_not_null(r->cq);
	ia.send_cq = ia.recv_cq = r->cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 1;
	r->qp = ibv_create_qp(r->pd, &ia);
	cr_assert_not_null(r->qp);
}

static void raw_pair_free(struct raw *r)
{
	if (r->qp)
		cr_assert_eq(ibv_destroy_qp(r->qp), 0);
	if (r->cq)
		cr_assert_eq(ibv_destroy_cq(r->cq), 0);
	r->qp = NULL;
	r->cq = NULL;
}

static void raw_close(struct raw *r)
{
	if (!r->ctx)
		return;
	if (r->qp)
		ibv_destroy_qp(r->qp);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->mr)
		ibv_dereg_mr(r->mr);
	free(r->buf);
	if (r->pd)
		ibv_dealloc_pd(r->pd);
	ibv_close_device(r->ctx);
	memset(r, 0, sizeof(*r));
}

/* What a rig queue pair needs to connect to the raw one. The MAC stays
 * zero: on RoCE the kernel resolves it at RTR, and rig does not use it. */
static void raw_endpoint(const struct raw *r, struct rig_endpoint *e)
{
	memset(e, 0, sizeof(*e));
	e->qp = r->qp->qp_num;
	e->psn = RAW_PSN;
	memcpy(e->gid, r->gid.raw, 16);
}

/* Connects the raw queue pair to @peer. */
static void raw_connect(struct raw *r, const struct rig_endpoint *peer)
{
	t_raw_connect(r->qp, r->gid_index, r->mtu, RAW_PSN, peer->qp, peer->psn,
		      peer->gid);
}

/* A fresh rig queue pair on rxe0 and a fresh raw one on rxe1, connected. */
static struct rig_qp *raw_pair_connect(struct raw *r)
{
	struct rig_qp *qa = t_qp(nic_a);
	struct rig_endpoint ea, er;
	int ret;

	raw_pair_new(r);
	raw_endpoint(r, &er);
	rig_qp_endpoint(qa, &ea);
	ret = rig_qp_connect(qa, &er);
	cr_assert_eq(ret, 0, "rig_qp_connect to the raw peer: %d %s", ret, rig_errmsg());
	raw_connect(r, &ea);
	return qa;
}

/* Posts one work request of @op over [at, at + n) of the raw buffer;
 * for reads and writes, against @remote_addr / @rkey. */
static void raw_post(struct raw *r, enum ibv_wr_opcode op, size_t at, size_t n,
		     uint64_t remote_addr, uint32_t rkey)
{
	struct ibv_sge sge = { (uintptr_t)(r->buf + at), (uint32_t)n, r->mr->lkey };
	struct ibv_send_wr wr = { 0 }, *bad;

	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	if (op == IBV_WR_SEND_WITH_IMM)
		wr.imm_data = htobe32(0x12345678);
	wr.wr.rdma.remote_addr = remote_addr;
	wr.wr.rdma.rkey = rkey;
	cr_assert_eq(ibv_post_send(r->qp, &wr, &bad), 0);
}

/* The raw peer's next work completion, within @ms. */
static struct ibv_wc raw_wc(struct raw *r, int ms)
{
	double end = t_now_ms() + ms;
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(r->cq, 1, &wc)) == 0)
		cr_assert_lt(t_now_ms(), end, "the raw peer got no completion in %d ms", ms);
	cr_assert_eq(n, 1, "ibv_poll_cq: %d", n);
	return wc;
}

static void raw_setup(void)
{
	setup();
	raw_open(&raw);
}

static void raw_teardown(void)
{
	raw_close(&raw);
	teardown();
}

TestSuite(raw_peer, .init = raw_setup, .fini = raw_teardown);

/* ---- 1. across hosts --------------------------------------------------- */

/* P1, M3: a queue pair on rxe0 and one on rxe1, in one process, connect,
 * and messages of 1 B, 4 KiB and 1 MiB arrive intact both ways. */
Test(remote, P1_M3_across_hosts_1B_4KiB_1MiB_both_ways)
{
	static const size_t sizes[] = { 1, 4096, BIG };
	struct rig_qp *qa = t_qp(nic_a), *qb = t_qp(nic_b);
	struct t_buf txa, rxa, txb, rxb;
	struct rig_endpoint ea, eb;
	double t0;
	size_t i;

	rig_qp_endpoint(qa, &ea);
	rig_qp_endpoint(qb, &eb);
	cr_assert(memcmp(ea.gid, eb.gid, 16) != 0, "both ends have one GID: not two hosts");
	t0 = t_now_ms();
	t_connect(qa, qb);
	cr_log_info("connect across hosts: %.0f ms", t_now_ms() - t0);
	t_buf(&txa, nic_a, BIG, 11);
	t_buf(&rxa, nic_a, BIG + 64, 12);
	t_buf(&txb, nic_b, BIG, 13);
	t_buf(&rxb, nic_b, BIG + 64, 14);

	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		exchange(qa, &txa, qb, &rxb, sizes[i]);
		exchange(qb, &txb, qa, &rxa, sizes[i]);
	}
	expect_idle(qa);
	expect_idle(qb);
	cr_assert_eq(rig_qp_destroy(qa), 0);
	cr_assert_eq(rig_qp_destroy(qb), 0);
}

/* ---- 2. M4: no reads across hosts ------------------------------------- */

/* M4, P3: on either host, a read is -EINVAL when the peer is on another
 * NIC, even with both regions valid; nothing is posted (room unchanged,
 * no completion, the destination untouched); the queue pair still sends.
 * A pair on one NIC reads the same regions: the refusal is the rule's. */
Test(remote, M4_P3_read_from_other_host_is_EINVAL_posts_nothing)
{
	struct rig_qp *qa = t_qp(nic_a), *qb = t_qp(nic_b);
	struct rig_qp *qc = t_qp(nic_a), *qd = t_qp(nic_a);
	struct rig_qp *qp[2] = { qa, qb };
	struct rig_nic *nic[2] = { nic_a, nic_b };
	struct t_buf src[2], dst[2], rx[2];
	struct rig_completion c;
	int i, ret;

	t_connect(qa, qb);
	for (i = 0; i < 2; i++) {
		t_buf(&src[i], nic[i], 4096, 21 + i);
		t_buf(&dst[i], nic[i], 4096, 31 + i);
		t_buf(&rx[i], nic[i], 4096, 41 + i);
	}

	for (i = 0; i < 2; i++) {
		uint8_t before[4096];

		memcpy(before, dst[i].mem, sizeof(before));
		ret = rig_qp_read(qp[i], src[i].r, 0, dst[i].r, 0, 100);
		cr_assert_eq(ret, -EINVAL, "read on %s: %d (%s), expected -EINVAL",
			     i ? "rxe1" : "rxe0", ret, rig_errmsg());
		cr_assert_eq(rig_qp_room(qp[i], RIG_SEND), RIG_RING_ENTRIES,
			     "a refused read took a slot");
		ret = rig_qp_read(qp[i], src[i].r, 0, dst[i].r, 0, 0);
		cr_assert_eq(ret, -EINVAL, "empty read: %d, expected -EINVAL", ret);
		cr_assert_eq(rig_qp_room(qp[i], RIG_SEND), RIG_RING_ENTRIES);
		cr_assert_eq(rig_qp_poll(qp[i], RIG_SEND, &c), 0,
			     "a refused read completed");
		cr_assert(memcmp(before, dst[i].mem, sizeof(before)) == 0,
			  "a refused read wrote its destination");
	}
	/* Still working: the first send-ring completion is the send's. */
	for (i = 0; i < 2; i++) {
		cr_assert_eq(rig_qp_receive(qp[!i], rx[!i].r, 0, 4096), 0);
		cr_assert_eq(rig_qp_send(qp[i], src[i].r, 0, 37), 0);
		expect(qp[i], RIG_SEND, 0, 37, "send after the refused read");
		expect(qp[!i], RIG_RECEIVE, 0, 37, "its receive");
		cr_assert(memcmp(rx[!i].mem, src[i].mem, 37) == 0);
	}
	expect_idle(qa);
	expect_idle(qb);

	/* Control: the same kind of read between two queue pairs of rxe0. */
	t_connect(qc, qd);
	ret = rig_qp_read(qc, src[0].r, 0, dst[0].r, 0, 100);
	cr_assert_eq(ret, 0, "read on one NIC: %d %s", ret, rig_errmsg());
	expect(qc, RIG_SEND, 0, 100, "read on one NIC");
	cr_assert(memcmp(dst[0].mem, src[0].mem, 100) == 0);
	for (i = 0; i < 2; i++) {
	}
}

/* ---- 3. M4: a remote peer gets no access ------------------------------- */

/* The raw peer's RDMA @op of @n bytes against @at of @region is refused
 * with REM_INV_REQ_ERR, as Soft-RoCE refuses it; the region is unchanged
 * (@region_before), and so is the raw buffer: a read brought nothing. */
static void raw_access_refused(enum ibv_wr_opcode op, struct t_buf *region,
			       const uint8_t *region_before, size_t at, size_t n)
{
	uint8_t raw_before[RAW_LEN];
	struct ibv_wc wc;

	memset(raw.buf, 0x5c, RAW_LEN);
	memcpy(raw_before, raw.buf, RAW_LEN);
	raw_post(&raw, op, 0, n, (uintptr_t)(region->r->addr + at), region->r->rkey);
	wc = raw_wc(&raw, 3000);
	cr_assert_eq(wc.status, IBV_WC_REM_INV_REQ_ERR,
		     "the raw %s of %zu bytes at %zu got %s (%d), expected REM_INV_REQ_ERR",
		     op == IBV_WR_RDMA_READ ? "read" : "write", n, at,
		     ibv_wc_status_str(wc.status), wc.status);
	cr_assert(memcmp(region->mem, region_before, region->len) == 0,
		  "the rig region changed");
	cr_assert(memcmp(raw.buf, raw_before, RAW_LEN) == 0,
		  "the raw peer's buffer changed");
}

/*
 * M4: a raw-verbs peer on rxe1 knows a rig region's address and rkey (the
 * region is registered with remote read, for local peers' reads; only the
 * queue pair's access flags stand in the way). Its RDMA @op is refused
 * every time, each in a fresh pair since a refusal tears both queue pairs
 * down, and the region's bytes are unchanged.
 */
static void remote_access_refused_every_time(enum ibv_wr_opcode op)
{
	static const struct { size_t at, n; } spans[] = {
		{ 0, 4096 }, { 100, 64 }, { 4095, 1 }, { 0, 1 },
	};
	uint8_t before[4096];
	struct t_buf region;
	size_t i;

	t_buf(&region, nic_a, 4096, 51);
	memcpy(before, region.mem, sizeof(before));
	for (i = 0; i < sizeof(spans) / sizeof(spans[0]); i++) {
		struct rig_qp *qa = raw_pair_connect(&raw);

		raw_access_refused(op, &region, before, spans[i].at, spans[i].n);
		cr_assert_eq(rig_qp_destroy(qa), 0);
		raw_pair_free(&raw);
	}
}

Test(raw_peer, M4_remote_peer_rdma_read_refused_region_unchanged)
{
	remote_access_refused_every_time(IBV_WR_RDMA_READ);
}

Test(raw_peer, M4_remote_peer_rdma_write_refused_region_unchanged)
{
	remote_access_refused_every_time(IBV_WR_RDMA_WRITE);
}

/*
 * M4, F3, F5: what the rig side reports after such a refusal. Its NIC
 * tears its queue pair down without saying why (no error completion, no
 * event on rxe): its two due receives are flushed. There is no failing
 * entry to latch, so rig reports its own "flushed without saying why",
 * -ECANCELED (lib/ring.c, RIG__CAUSE_FLUSH), on both, and on a send posted
 * afterwards; never success.
 */
Test(raw_peer, M4_F3_F5_rig_side_of_refused_remote_access_fails_ECANCELED)
{
	static const enum ibv_wr_opcode ops[] = { IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE };
	uint8_t before[4096];
	struct t_buf region, rx;
	size_t i;

	t_buf(&region, nic_a, 4096, 53);
	t_buf(&rx, nic_a, 2 * 4096, 54);
	memcpy(before, region.mem, sizeof(before));
	for (i = 0; i < 2; i++) {
		struct rig_qp *qa = raw_pair_connect(&raw);
		struct rig_completion c;

		cr_assert_eq(rig_qp_receive(qa, rx.r, 0, 4096), 0);
		cr_assert_eq(rig_qp_receive(qa, rx.r, 4096, 4096), 0);
		raw_access_refused(ops[i], &region, before, 0, 64);

		c = expect(qa, RIG_RECEIVE, -ECANCELED, 0, "rig receive 1 after the refusal");
		cr_log_info("after a refused %s, rig reports %d: %s",
			    i ? "write" : "read", c.error, c.why);
		expect(qa, RIG_RECEIVE, -ECANCELED, 0, "rig receive 2 after the refusal");
		cr_assert_eq(rig_qp_send(qa, region.r, 0, 16), 0,
			     "F5: a post to a failed queue pair is accepted");
		expect(qa, RIG_SEND, -ECANCELED, 0, "F5: rig send posted after the refusal");
		expect_idle(qa);
		cr_assert_eq(rig_qp_destroy(qa), 0);
		raw_pair_free(&raw);
	}
}

/* ---- 4. M3: retries over a cut wire ------------------------------------ */

/*
 * M3: with every packet from rxe0 lost, a send fails with -ETIMEDOUT once
 * its retries end. Soft-RoCE gets retry count 6 (its 7 is "forever"):
 * 7 tries of 67 ms, measured at 473-477 ms on Soft-RoCE. The
 * window [400, 3000] ms allows, below, a first interval cut short by a
 * retransmit timer still pending (we wait 150 ms after the warm-up send
 * so that it is not) and jiffy rounding, and above, slow TCG scheduling;
 * a send that never fails is caught at 5 s.
 */
#define M3_MIN_MS 400
#define M3_MAX_MS 3000

struct cut {
	struct rig_qp *qa, *qb;
	struct t_buf txa, rxa, rxb;
	double t0;		/* when the doomed send was posted */
};

/* Connects qa (rxe0) to qb (rxe1) and checks the wire; posts a receive on
 * qa; cuts the wire and posts the send from qa that cannot arrive. */
static void cut_wire_and_send(struct cut *k)
{
	double warm;

	k->qa = t_qp(nic_a);
	k->qb = t_qp(nic_b);
	t_connect(k->qa, k->qb);
	t_buf(&k->txa, nic_a, 4096, 61);
	t_buf(&k->rxa, nic_a, 4096, 62);
	t_buf(&k->rxb, nic_b, 4096, 63);
	exchange(k->qa, &k->txa, k->qb, &k->rxb, 64);	/* the wire works */
	warm = t_now_ms();

	cr_assert_eq(rig_qp_receive(k->qa, k->rxa.r, 0, 4096), 0);
	cr_assert_eq(rig_qp_receive(k->qb, k->rxb.r, 0, 4096), 0);
	wire_cut();
	pause_until(warm + 150);
	k->t0 = t_now_ms();
	cr_assert_eq(rig_qp_send(k->qa, k->txa.r, 0, 64), 0);
}

static void check_window(const struct cut *k, const struct rig_completion *c,
			 const char *what)
{
	double t = t_now_ms() - k->t0;

	cr_log_info("%s failed %.1f ms after the send was posted: %s", what, t, c->why);
	cr_assert(t >= M3_MIN_MS && t <= M3_MAX_MS + t_stall_max_ms(),
		  "%s failed %.1f ms after the send was posted, not in [%d, %d] "
		  "(+ %.1f ms stalled)", what, t, M3_MIN_MS, M3_MAX_MS, t_stall_max_ms());
}

static void cut_done(struct cut *k)
{
	/* F5: a post to the failed queue pair is accepted and fails alike. */
	cr_assert_eq(rig_qp_send(k->qa, k->txa.r, 0, 8), 0);
	expect(k->qa, RIG_SEND, -ETIMEDOUT, 0, "F5: a send posted after the failure");
	expect_idle(k->qa);
	t_wire_mend();
}

/* M3, F3, F5: the send fails with -ETIMEDOUT in the window; the receive
 * due on the same queue pair fails with the same error. */
Test(wire, M3_F3_send_over_cut_wire_ETIMEDOUT_after_retries)
{
	struct cut k;
	struct rig_completion c;

	cut_wire_and_send(&k);
	c = expect(k.qa, RIG_SEND, -ETIMEDOUT, 0, "send over the cut wire");
	check_window(&k, &c, "the send");
	expect(k.qa, RIG_RECEIVE, -ETIMEDOUT, 0, "F3: the receive due on the failed queue pair");
	cut_done(&k);
}

/* M3, F3: the same, taking the receive ring first. Its entry is flushed
 * when the send fails; the reason is on the send ring, and the receive
 * must report it (-ETIMEDOUT), not a bare flush and never success. */
Test(wire, M3_F3_cut_wire_receive_ring_first_reports_ETIMEDOUT)
{
	struct cut k;
	struct rig_completion c;

	cut_wire_and_send(&k);
	c = expect(k.qa, RIG_RECEIVE, -ETIMEDOUT, 0, "the receive due, taken first");
	check_window(&k, &c, "the receive");
	expect(k.qa, RIG_SEND, -ETIMEDOUT, 0, "the send over the cut wire");
	cut_done(&k);
}

/* ---- 5. M5: connect refused part-way, then again ----------------------- */

/* Connects @qa (refused before) to @eb and @qb to @qa, and checks that a
 * message goes through each way. */
static void connect_again_and_talk(struct rig_qp *qa, struct rig_qp *qb,
				   const struct rig_endpoint *eb)
{
	struct rig_endpoint ea;
	struct t_buf txa, rxa, txb, rxb;
	int ret;

	ret = rig_qp_connect(qa, eb);
	cr_assert_eq(ret, 0, "M5: connect again: %d %s", ret, rig_errmsg());
	cr_assert_eq(qp_state(qa), IBV_QPS_RTS);
	rig_qp_endpoint(qa, &ea);
	ret = rig_qp_connect(qb, &ea);
	cr_assert_eq(ret, 0, "connect the peer: %d %s", ret, rig_errmsg());
	t_buf(&txa, nic_a, 4096, 71);
	t_buf(&rxa, nic_a, 4096, 72);
	t_buf(&txb, nic_b, 4096, 73);
	t_buf(&rxb, nic_b, 4096, 74);
	exchange(qa, &txa, qb, &rxb, 1000);
	exchange(qb, &txb, qa, &rxa, 1000);
	expect_idle(qa);
	expect_idle(qb);
}

/* The connect of @qa to @e fails at RTR: the kernel cannot resolve the
 * peer's MAC (ARP unanswered within its 1 s). */
static void expect_refused_at_rtr(struct rig_qp *qa, const struct rig_endpoint *e)
{
	struct t_buf tx;
	double t0 = t_now_ms();
	int ret;

	ret = rig_qp_connect(qa, e);
	cr_log_info("refused connect: %d after %.0f ms: %s", ret, t_now_ms() - t0,
		    rig_errmsg());
	cr_assert_eq(ret, -ETIMEDOUT, "connect: %d (%s), expected -ETIMEDOUT",
		     ret, rig_errmsg());
	cr_assert_not_null(strstr(rig_errmsg(), "INIT->RTR"),
			   "C1: the message does not name the step: %s", rig_errmsg());
	cr_assert_not_null(strstr(rig_errmsg(), t_dev()),
			   "C1: the message does not name the NIC: %s", rig_errmsg());
	cr_assert_eq(qp_state(qa), IBV_QPS_INIT, "refused part-way: INIT, not %d",
		     qp_state(qa));
	/* Half connected is not connected: posts are refused. */
	t_buf(&tx, nic_a, 64, 75);
	cr_assert_eq(rig_qp_send(qa, tx.r, 0, 64), -EINVAL);
	cr_assert_eq(rig_qp_receive(qa, tx.r, 0, 64), -EINVAL);
	cr_assert_eq(rig_qp_room(qa, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(qa, RIG_RECEIVE), RIG_RING_ENTRIES);
}

/* M5, C1: with the wire cut (packets and ARP lost), the connect fails at
 * INIT->RTR; with the wire back, the same call on the same queue pair goes
 * back to RESET, connects, and messages go through. */
Test(wire, M5_C1_connect_refused_at_RTR_wire_cut_then_again)
{
	struct rig_qp *qa = t_qp(nic_a), *qb = t_qp(nic_b);
	struct rig_endpoint eb;

	rig_qp_endpoint(qb, &eb);
	wire_cut();
	expect_refused_at_rtr(qa, &eb);
	t_wire_mend();
	connect_again_and_talk(qa, qb, &eb);
}

/* M5, C1: the same with the wire whole but a GID nobody answers for (an
 * unused address of veth's subnet); the second connect names the real
 * peer. */
Test(remote, M5_C1_connect_refused_at_RTR_unreachable_gid_then_again)
{
	struct rig_qp *qa = t_qp(nic_a), *qb = t_qp(nic_b);
	struct rig_endpoint eb, nobody;
	const char *ip = getenv("RIG_TEST_PEER_IP");
	unsigned a, b, c, d;

	cr_assert_not_null(ip, "RIG_TEST_PEER_IP is unset");
	cr_assert_eq(sscanf(ip, "%u.%u.%u.%u", &a, &b, &c, &d), 4);
	rig_qp_endpoint(qb, &eb);
	nobody = eb;
	memset(nobody.gid, 0, 16);
	nobody.gid[10] = nobody.gid[11] = 0xff;
	nobody.gid[12] = (uint8_t)a;
	nobody.gid[13] = (uint8_t)b;
	nobody.gid[14] = (uint8_t)c;
	nobody.gid[15] = 99;	/* 198.18.0.99: on the subnet, on no host */
	cr_assert_neq(d, 99);
	expect_refused_at_rtr(qa, &nobody);
	connect_again_and_talk(qa, qb, &eb);
}

/* M5: connect on a connected queue pair is -EINVAL, with a good endpoint
 * or any other, and changes nothing: it still carries messages. */
Test(remote, M5_connect_on_connected_qp_is_EINVAL)
{
	struct rig_qp *qa = t_qp(nic_a), *qb = t_qp(nic_b), *qc = t_qp(nic_b);
	struct rig_endpoint eb, ec;
	struct t_buf txa, rxb;

	t_connect(qa, qb);
	rig_qp_endpoint(qb, &eb);
	rig_qp_endpoint(qc, &ec);
	cr_assert_eq(rig_qp_connect(qa, &eb), -EINVAL);
	cr_assert_eq(rig_qp_connect(qa, &ec), -EINVAL);
	cr_assert_eq(qp_state(qa), IBV_QPS_RTS);
	t_buf(&txa, nic_a, 4096, 81);
	t_buf(&rxb, nic_b, 4096, 82);
	exchange(qa, &txa, qb, &rxb, 500);
	expect_idle(qa);
}

/* M5: an endpoint whose qp or psn is over 24 bits is -EINVAL and changes
 * nothing (the queue pair stays in RESET); a good connect then works. */
Test(remote, M5_endpoint_over_24_bits_is_EINVAL_changes_nothing)
{
	struct rig_qp *qa = t_qp(nic_a), *qb = t_qp(nic_b);
	struct rig_endpoint eb, bad;

	rig_qp_endpoint(qb, &eb);
	bad = eb;
	bad.qp = eb.qp | 1u << 24;
	cr_assert_eq(rig_qp_connect(qa, &bad), -EINVAL);
	cr_assert_eq(qp_state(qa), IBV_QPS_RESET);
	bad = eb;
	bad.psn = eb.psn | 1u << 24;
	cr_assert_eq(rig_qp_connect(qa, &bad), -EINVAL);
	cr_assert_eq(qp_state(qa), IBV_QPS_RESET);
	bad = eb;
	bad.qp = bad.psn = 0xffffffffu;
	cr_assert_eq(rig_qp_connect(qa, &bad), -EINVAL);
	cr_assert_eq(qp_state(qa), IBV_QPS_RESET);
	cr_assert_eq(rig_qp_room(qa, RIG_SEND), RIG_RING_ENTRIES);
	connect_again_and_talk(qa, qb, &eb);
}

/* ---- 6. F1: a completion of an unknown kind ----------------------------- */

/*
 * F1, F2, F3, F5: a raw peer sends with immediate data into a rig receive.
 * That receive completes with -EPROTO (rig's error for a completion of a
 * kind its ring does not take), and so does every later entry of the
 * queue pair, on both rings, in order:
 *   r1: filled by a plain send the NIC completed after the bad one;
 *   r2: never filled;
 *   s0: a send posted before the bad one landed, stuck in RNR (the raw
 *       peer posts no receive), so the NIC cannot complete it with success;
 *   s1: posted after the bad one landed, before rig saw it (the same);
 *   s2, s3, r3, r4: posted after rig saw it.
 */
Test(raw_peer, F1_F3_F5_send_with_imm_fails_qp_EPROTO_both_rings_in_order)
{
	struct rig_qp *qa = raw_pair_connect(&raw);
	struct t_buf tx, rx;
	struct rig_completion c;
	const char *why;
	struct ibv_wc wc;
	int i;

	t_buf(&tx, nic_a, 4096, 91);
	t_buf(&rx, nic_a, 5 * 4096, 92);
	for (i = 0; i < 3; i++)
		cr_assert_eq(rig_qp_receive(qa, rx.r, i * 4096, 4096), 0);
	cr_assert_eq(rig_qp_send(qa, tx.r, 0, 64), 0);			/* s0 */

	raw_post(&raw, IBV_WR_SEND_WITH_IMM, 0, 64, 0, 0);		/* into r0 */
	wc = raw_wc(&raw, 3000);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "raw send with imm: %s",
		     ibv_wc_status_str(wc.status));
	raw_post(&raw, IBV_WR_SEND, 64, 64, 0, 0);			/* into r1 */
	wc = raw_wc(&raw, 3000);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "raw plain send: %s",
		     ibv_wc_status_str(wc.status));
	cr_assert_eq(rig_qp_send(qa, tx.r, 64, 64), 0);			/* s1 */

	c = expect(qa, RIG_RECEIVE, -EPROTO, 0, "r0, the send with immediate data");
	why = c.why;
	cr_log_info("unknown kind: %s", why);
	for (i = 1; i < 3; i++) {
		c = expect(qa, RIG_RECEIVE, -EPROTO, 0, "a receive after the unknown kind");
		cr_assert_str_eq(c.why, why, "r%d: another reason", i);
	}
	for (i = 0; i < 2; i++) {
		c = expect(qa, RIG_SEND, -EPROTO, 0, "a send due at the unknown kind");
		cr_assert_str_eq(c.why, why, "s%d: another reason", i);
	}

	/* Posted after: accepted (F5), completed with the same error. */
	cr_assert_eq(rig_qp_send(qa, tx.r, 0, 10), 0);			/* s2 */
	cr_assert_eq(rig_qp_receive(qa, rx.r, 3 * 4096, 4096), 0);	/* r3 */
	cr_assert_eq(rig_qp_send(qa, tx.r, 0, 20), 0);			/* s3 */
	cr_assert_eq(rig_qp_receive(qa, rx.r, 4 * 4096, 4096), 0);	/* r4 */
	cr_assert_eq(rig_qp_room(qa, RIG_SEND), RIG_RING_ENTRIES - 2);
	cr_assert_eq(rig_qp_room(qa, RIG_RECEIVE), RIG_RING_ENTRIES - 2);
	for (i = 0; i < 2; i++) {
		c = expect(qa, RIG_SEND, -EPROTO, 0, "a send posted after");
		cr_assert_str_eq(c.why, why);
		c = expect(qa, RIG_RECEIVE, -EPROTO, 0, "a receive posted after");
		cr_assert_str_eq(c.why, why);
	}
	expect_idle(qa);
	cr_assert_eq(rig_qp_destroy(qa), 0);
	raw_pair_free(&raw);
}

/* ---- 7. M3: connections by address use the address's GID -------------- */

/*
 * A port with two addresses, as RoCE set-ups often have (a second subnet
 * or VLAN kept for lossless traffic): each veth end gets a second address,
 * and policy routing sends packets between the two second addresses
 * through the veth, as the test VM does for the first ones. rdma_rxe adds a
 * GID for each, after the first addresses' GIDs; a NIC's own GID stays the
 * first address's.
 *
 * The route from rxe1 to ADDR2_A carries a hop limit of ADDR2_HOPS, which
 * rdma_cm resolves with the route; rxe1's default RoCE ToS (rdma_cm's
 * configfs) is TOS when a test sets it.
 */
#define ADDR2_A "198.19.0.1"	/* veth0's second address: rxe0 */
#define ADDR2_B "198.19.0.2"	/* veth1's: rxe1 */
#define ADDR2_HOPS 17
#define TOS 32
#define CM_CONFIG "/sys/kernel/config/rdma_cm"

/* Ports of the by_address tests' listeners, one each (see test_cm.c). */
enum { PORT_SECOND_ADDRESS = 18600, PORT_TOS, PORT_MTU_SMALL_DIALS, PORT_MTU_BIG_DIALS,
       PORT_MTU_SMALL_LOOP_DIALS, PORT_MTU_BIG_LOOP_DIALS, PORT_VLAN_LISTENER_SMALL,
       PORT_VLAN_DIALER_SMALL };
/* A VLAN on each veth end (vlan_mtus), and its addresses. */
#define VLAN_ID 7
#define VLAN_A "198.20.0.1"	/* on veth0's VLAN: rxe0 */
#define VLAN_B "198.20.0.2"	/* on veth1's: rxe1 */
/* The netdevs' MTU as tests/rxe-vm makes them, and the jumbo one. */
#define MTU_PLAIN 1500
#define MTU_JUMBO 9000

/* loop_dial_from's listener, closed once its queue pairs are destroyed:
 * each loop hands its queue pair out before its handshake's last message
 * (rig(7)), and a listener closed before that ends drops the connection
 * (-ECONNABORTED). Both queue pairs can send from their news on. */
static struct rig_listener *loop_listener;

/* Everything the by_address tests add, removed, and both netdevs' MTUs
 * as they were; quiet, for fini too. */
static void addr2_remove(void)
{
	char cmd[1024];

	/* One ip and one tc for all: each process start costs ~0.3 s in
	 * the emulated guest. */
	snprintf(cmd, sizeof(cmd),
		 "tc -force -b - 2>/dev/null <<EOF\n"
		 "qdisc del dev %s clsact\n"
		 "qdisc del dev %s clsact\n"
		 "EOF\n"
		 "ip -force -b - 2>/dev/null <<EOF\n"
		 "rule del pref 10 to " ADDR2_B " lookup 102\n"
		 "rule del pref 10 to " ADDR2_A " lookup 103\n"
		 "route flush table 102\n"
		 "route flush table 103\n"
		 "addr del " ADDR2_A "/24 dev %s\n"
		 "addr del " ADDR2_B "/24 dev %s\n"
		 "link set dev %s mtu %d\n"
		 "link set dev %s mtu %d\n"
		 "neigh flush dev %s\n"
		 "neigh flush dev %s\n"
		 "link del %s.%d\n"
		 "link del %s.%d\n"
		 "rule del pref 10 to " VLAN_B " lookup 104\n"
		 "rule del pref 10 to " VLAN_A " lookup 105\n"
		 "EOF\n"
		 "d=" CM_CONFIG "/%s; if [ -d $d ]; then "
		 "echo 0 >$d/ports/1/default_roce_tos; rmdir $d; fi",
		 t_netdev(), t_peer_netdev(), t_netdev(), t_peer_netdev(),
		 t_netdev(), MTU_PLAIN, t_peer_netdev(), MTU_PLAIN, t_netdev(),
		 t_peer_netdev(), t_netdev(), VLAN_ID, t_peer_netdev(), VLAN_ID, t_peer_dev());
	sh_quiet(cmd);
}

/* The IPv4-mapped GID of @ip. */
static void mapped_gid(const char *ip, uint8_t gid[16])
{
	memset(gid, 0, 16);
	gid[10] = gid[11] = 0xff;
	cr_assert_eq(inet_pton(AF_INET, ip, gid + 12), 1, "%s", ip);
}

static const char *gid_str(const uint8_t gid[16], char *s, size_t n)
{
	return inet_ntop(AF_INET6, gid, s, (socklen_t)n);
}

/* Waits (5 s at most) until @dev's port has a RoCE v2 GID for @ip. */
static void wait_for_gid(const char *dev, const char *ip)
{
	double end = t_now_ms() + 5000;
	struct ibv_context *ctx = open_device(dev);
	uint8_t want[16];
	int i;

	mapped_gid(ip, want);
	for (;;) {
		struct ibv_port_attr pa;

		cr_assert_eq(ibv_query_port(ctx, 1, &pa), 0);
		for (i = 0; i < pa.gid_tbl_len; i++) {
			struct ibv_gid_entry e;

			if (ibv_query_gid_ex(ctx, 1, i, &e, 0) == 0 &&
			    e.gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(e.gid.raw, want, 16)) {
				ibv_close_device(ctx);
				return;
			}
		}
		cr_assert_lt(t_now_ms(), end, "%s has no GID for %s after 5 s", dev, ip);
		nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	}
}

/* The second addresses, their routes through the veth (the one from rxe1
 * with a hop limit), and their GIDs. */
static void addr2_add(void)
{
	t_sh("ip -b - <<EOF\n"
	     "addr add " ADDR2_A "/24 dev %s\n"
	     "addr add " ADDR2_B "/24 dev %s\n"
	     "rule add pref 10 iif lo to " ADDR2_B " lookup 102\n"
	     "route add " ADDR2_B " dev %s src " ADDR2_A " table 102\n"
	     "rule add pref 10 iif lo to " ADDR2_A " lookup 103\n"
	     "route add " ADDR2_A " dev %s src " ADDR2_B " table 103 hoplimit %d\n"
	     "EOF",
	     t_netdev(), t_peer_netdev(), t_netdev(), t_peer_netdev(), ADDR2_HOPS);
	wait_for_gid(t_dev(), ADDR2_A);
	wait_for_gid(t_peer_dev(), ADDR2_B);
}

/* The NICs open on a host whose port has both addresses already. */
static void addr2_setup(void)
{
	cr_assert_not_null(t_peer_dev(), "RIG_TEST_PEER_DEV is unset: needs two hosts");
	addr2_remove();
	addr2_add();
	setup();
}

static void addr2_teardown(void)
{
	teardown();
	addr2_remove();
}

TestSuite(by_address, .init = addr2_setup, .fini = addr2_teardown);

/*
 * The packets filter @pref on side @dir ("ingress" or "egress") of @dev's
 * clsact has matched: u32's counter. Each filter of a netdev has a pref of
 * its own: 1 for the drop (ingress), 11 to 13 for the counters (egress).
 */
static unsigned long filter_hits(const char *dev, const char *dir, int pref)
{
	char cmd[128], line[512];
	unsigned long hit, success = 0;
	int found = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "tc -s filter show dev %s %s pref %d", dev, dir, pref);
	f = popen(cmd, "r");
	cr_assert_not_null(f, "%s", cmd);
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "(rule hit ");

		if (p && sscanf(p, "(rule hit %lu success %lu)", &hit, &success) == 2)
			found++;
	}
	cr_assert_eq(pclose(f), 0, "'%s' failed", cmd);
	cr_assert_eq(found, 1, "'%s' shows %d counters, not 1", cmd, found);
	return success;
}

/*
 * Every RoCE v2 packet from a first address (a NIC's own GID) is lost on
 * the way, as on a network that routes only the second subnet between the
 * hosts: dropped as it comes in at the other end (filters at pref 1). Not
 * as it leaves: rdma_rxe takes a packet its own qdisc drops for one to
 * send again at once, without end, where a packet lost on the wire counts
 * against the retries (M3).
 */
static void drop_first_addresses(void)
{
	const char *dev[2] = { t_netdev(), t_peer_netdev() };
	const char *from[2] = { getenv("RIG_TEST_PEER_IP"), getenv("RIG_TEST_IP") };
	int i;

	for (i = 0; i < 2; i++) {
		cr_assert_not_null(from[i], "RIG_TEST_IP or RIG_TEST_PEER_IP is unset");
		t_sh("tc qdisc add dev %s clsact", dev[i]);
		t_sh("tc filter add dev %s ingress pref 1 protocol ip u32 match ip src %s/32 "
		     "match ip dport 4791 0xffff action drop", dev[i], from[i]);
	}
}

struct acceptor {
	struct rig_listener *l;
	int ret;
	struct rig_qp *qp;
};

static void *accept_one(void *arg)
{
	struct acceptor *s = arg;

	s->ret = rig_accept(s->l, 10000000, &s->qp);
	return NULL;
}

/* @dn dials a listener of @ln's at @addr, @port; *@ql is the accepted
 * queue pair, *@qd the dialed one. */
static void dial_from(struct rig_nic *ln, struct rig_nic *dn, const char *addr,
		      uint16_t port, struct rig_qp **ql, struct rig_qp **qd)
{
	struct acceptor s = { NULL, -1, NULL };
	pthread_t t;
	int ret;

	ret = rig_listen(ln, addr, port, &s.l);
	cr_assert_eq(ret, 0, "rig_listen on %s: %d %s", addr, ret, rig_errmsg());
	cr_assert_eq(pthread_create(&t, NULL, accept_one, &s), 0);
	ret = rig_dial(dn, addr, port, 10000000, qd);
	pthread_join(t, NULL);
	cr_assert_eq(ret, 0, "rig_dial to %s: %d %s", addr, ret, rig_errmsg());
	cr_assert_eq(s.ret, 0, "rig_accept on %s: %d", addr, s.ret);
	cr_assert_eq(rig_listener_close(s.l), 0);
	*ql = s.qp;
}

/* rxe1 dials a listener of rxe0's at @addr, @port; *@qa is the accepted
 * queue pair (rxe0), *@qb the dialed one (rxe1). */
static void dial(const char *addr, uint16_t port, struct rig_qp **qa, struct rig_qp **qb)
{
	dial_from(nic_a, nic_b, addr, port, qa, qb);
}

/* @qp's endpoint carries the GID of @ip. */
static void expect_endpoint_gid(struct rig_qp *qp, const char *ip, const char *who)
{
	struct rig_endpoint e;
	uint8_t want[16];
	char got_s[INET6_ADDRSTRLEN], want_s[INET6_ADDRSTRLEN];

	mapped_gid(ip, want);
	rig_qp_endpoint(qp, &e);
	cr_assert(memcmp(e.gid, want, 16) == 0, "%s: endpoint GID %s, expected %s", who,
		  gid_str(e.gid, got_s, sizeof(got_s)), gid_str(want, want_s, sizeof(want_s)));
}

/*
 * M3: a connection dialed to a port's second address sends from that
 * address's GID, the one rdma_cm resolved, not from the NIC's own (its
 * first address's). With every RoCE v2 packet from a first address
 * dropped, queue pairs connected by the NICs' own GIDs cannot talk (the
 * control: the filter works); the dialed connection's handshake goes by
 * the second addresses either way, and its messages must too: 4 KiB each
 * way arrive intact, no completion fails, and both endpoints carry the
 * second addresses' GIDs. Sent from the first addresses, the first send
 * fails with -ETIMEDOUT after its retries.
 */
Test(by_address, M3_dial_to_a_second_address_sends_from_its_gid)
{
	struct rig_qp *qc = t_qp(nic_a), *qd = t_qp(nic_b), *qa, *qb;
	struct t_buf txa, rxa, txb, rxb;

	drop_first_addresses();
	t_buf(&txa, nic_a, 4096, 101);
	t_buf(&rxa, nic_a, 4096 + 64, 102);
	t_buf(&txb, nic_b, 4096, 103);
	t_buf(&rxb, nic_b, 4096 + 64, 104);

	/* The control: by the NICs' own GIDs, nothing goes through. */
	t_connect(qc, qd);
	cr_assert_eq(rig_qp_receive(qd, rxb.r, 0, 4096), 0);
	cr_assert_eq(rig_qp_send(qc, txa.r, 0, 4096), 0);
	expect(qc, RIG_SEND, -ETIMEDOUT, 0, "control: a send from the NIC's own GID");
	cr_assert_eq(rig_qp_destroy(qc), 0);
	cr_assert_eq(rig_qp_destroy(qd), 0);

	dial(ADDR2_A, PORT_SECOND_ADDRESS, &qa, &qb);
	exchange(qb, &txb, qa, &rxa, 4096);
	exchange(qa, &txa, qb, &rxb, 4096);
	expect_idle(qa);
	expect_idle(qb);
	expect_endpoint_gid(qa, ADDR2_A, "the accepted queue pair (rxe0)");
	expect_endpoint_gid(qb, ADDR2_B, "the dialed queue pair (rxe1)");
	cr_log_info("RoCE v2 packets from the first addresses dropped: %lu into %s, "
		    "%lu into %s", filter_hits(t_netdev(), "ingress", 1), t_netdev(),
		    filter_hits(t_peer_netdev(), "ingress", 1), t_peer_netdev());
	cr_assert_eq(rig_qp_destroy(qa), 0);
	cr_assert_eq(rig_qp_destroy(qb), 0);
	addr2_remove();
}

/*
 * M3: a dialed connection's messages carry the traffic class and hop limit
 * rdma_cm resolved: rxe1's default RoCE ToS, set to TOS in rdma_cm's
 * configfs, and the hop limit of rxe1's route to ADDR2_A. Counted on
 * rxe1's veth as its packets leave: RoCE v2 (UDP port 4791) packets whose
 * BTH opcode (the first byte after the 20-byte IP and 8-byte UDP headers)
 * is 0x04, RC SEND Only, so the connection manager's MADs (UD, on QP 1,
 * which carry the resolved ToS already) do not count. N messages of 512
 * bytes, one packet each: at least N with the ToS (DSCP bits; ECN masked),
 * at least N with the hop limit as TTL (the IP header's byte 8), and at
 * least N in all.
 */
#define TOS_MSGS 8

Test(by_address, M3_dialed_connection_sends_with_the_tos_and_hop_limit_rdma_cm_resolved)
{
	const char *nd = t_peer_netdev();
	struct rig_qp *qa, *qb;
	struct t_buf txb, rxa;
	unsigned long tos, hops, sends;
	int i;

	t_sh("grep -qw configfs /proc/mounts || mount -t configfs none /sys/kernel/config");
	t_sh("mkdir " CM_CONFIG "/%s", t_peer_dev());
	t_sh("echo %d >" CM_CONFIG "/%s/ports/1/default_roce_tos", TOS, t_peer_dev());
	t_sh("tc qdisc add dev %s clsact", nd);
	t_sh("tc filter add dev %s egress pref 11 protocol ip u32 match ip tos %d 0xfc "
	     "match ip dport 4791 0xffff match u8 0x04 0xff at 28 action continue", nd, TOS);
	t_sh("tc filter add dev %s egress pref 12 protocol ip u32 match u8 %d 0xff at 8 "
	     "match ip dport 4791 0xffff match u8 0x04 0xff at 28 action continue", nd,
	     ADDR2_HOPS);
	t_sh("tc filter add dev %s egress pref 13 protocol ip u32 "
	     "match ip dport 4791 0xffff match u8 0x04 0xff at 28 action pass", nd);

	dial(ADDR2_A, PORT_TOS, &qa, &qb);
	t_buf(&txb, nic_b, 512, 105);
	t_buf(&rxa, nic_a, 512 + 64, 106);
	for (i = 0; i < TOS_MSGS; i++)
		exchange(qb, &txb, qa, &rxa, 512);
	expect_idle(qa);
	expect_idle(qb);
	tos = filter_hits(nd, "egress", 11);
	hops = filter_hits(nd, "egress", 12);
	sends = filter_hits(nd, "egress", 13);
	cr_log_info("%s sent %lu SEND Only packets: %lu with ToS %d, %lu with TTL %d", nd,
		    sends, tos, TOS, hops, ADDR2_HOPS);
	cr_assert_geq(sends, TOS_MSGS, "the filters saw %lu sends of %d", sends, TOS_MSGS);
	cr_assert_geq(tos, TOS_MSGS, "%lu of %lu sends carried ToS %d", tos, sends, TOS);
	cr_assert_geq(hops, TOS_MSGS, "%lu of %lu sends carried TTL %d", hops, sends,
		      ADDR2_HOPS);
	cr_assert_eq(rig_qp_destroy(qa), 0);
	cr_assert_eq(rig_qp_destroy(qb), 0);
	addr2_remove();
}

/* ---- mixed MTUs ---------------------------------------------------------- */

/* The active MTU of @dev's port once it is @want (rxe follows its netdev's
 * MTU when it changes); fails after 5 s. */
static void wait_for_active_mtu(const char *dev, enum ibv_mtu want)
{
	double end = t_now_ms() + 5000;
	struct ibv_context *ctx = open_device(dev);
	struct ibv_port_attr pa;
	for (;;) {
		cr_assert_eq(ibv_query_port(ctx, 1, &pa), 0);
		if (pa.active_mtu == want)
			break;
		cr_assert_lt(t_now_ms(), end, "%s's active MTU is %d after 5 s, not %d", dev,
			     pa.active_mtu, want);
		nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	}
	ibv_close_device(ctx);
}

/* dial_from() by the loop calls: @dn's own loop dials a listener in
 * @ln's; both loops are handled in turn until each has its news. */
static void loop_dial_from(struct rig_nic *ln, struct rig_nic *dn, const char *addr,
			   uint16_t port, struct rig_qp **ql, struct rig_qp **qd)
{
	struct rig_loop *ll = rig_nic_loop(ln), *dl = rig_nic_loop(dn);
	double end = t_now_ms() + 15000;
	struct rig_listener *l;
	struct rig_ready r;
	struct pollfd pfd[2];
	int ret;

	*ql = *qd = NULL;
	ret = rig_loop_listen(ll, addr, port, 1, &l);
	cr_assert_eq(ret, 0, "rig_loop_listen on %s: %d %s", addr, ret, rig_errmsg());
	ret = rig_loop_dial(dl, addr, port, 10000000, 2);
	cr_assert_eq(ret, 0, "rig_loop_dial to %s: %d %s", addr, ret, rig_errmsg());
	while (!*ql || !*qd) {
		cr_assert_lt(t_now_ms(), end, "no connection in 15 s (accepted %p, dialed %p)",
			     (void *)*ql, (void *)*qd);
		pfd[0] = (struct pollfd){ rig_loop_fd(ll), POLLIN, 0 };
		pfd[1] = (struct pollfd){ rig_loop_fd(dl), POLLIN, 0 };
		poll(pfd, 2, 20);
		ret = rig_loop_handle(ll, &r, 1);
		cr_assert_geq(ret, 0, "rig_loop_handle: %d %s", ret, rig_errmsg());
		if (ret) {
			cr_assert_eq(r.news, RIG_NEWS_ACCEPTED, "the listener's news %d", r.news);
			cr_assert_eq(r.result, 0, "accepted: %d", r.result);
			*ql = r.qp;
		}
		ret = rig_loop_handle(dl, &r, 1);
		cr_assert_geq(ret, 0, "rig_loop_handle: %d %s", ret, rig_errmsg());
		if (ret) {
			cr_assert_eq(r.news, RIG_NEWS_DIALED, "the dialer's news %d", r.news);
			cr_assert_eq(r.result, 0, "the dial: %d %s", r.result, rig_errmsg());
			*qd = r.qp;
		}
	}
	loop_listener = l;
}

static enum ibv_mtu path_mtu(struct rig_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	cr_assert_eq(ibv_query_qp(qp->ibqp, &a, IBV_QP_PATH_MTU, &ia), 0);
	return a.path_mtu;
}

/* @n bytes from @qa to @qb and back: each end receives the message into
 * @rx, and the other sends it back from there. */
static void echo(struct rig_qp *qa, struct t_buf *tx, struct t_buf *rxa, struct rig_qp *qb,
		 struct t_buf *rxb, size_t n)
{
	exchange(qa, tx, qb, rxb, n);
	exchange(qb, rxb, qa, rxa, n);
	cr_assert(memcmp(rxa->mem, tx->mem, n) == 0, "the echo of %zu bytes came back changed",
		  n);
}

/*
 * Mixed MTUs: veth0 carries 9000-byte frames, so rxe0's active MTU is
 * 4096; veth1 carries 1500, and rxe1's is 1024. Each side of a connection
 * by address gives its MTU in the private data and both take the smaller
 * (packets of 4096 do not fit veth1's frames: with rxe0 at its own MTU,
 * the first 4 KiB message never arrives). Connected, 4 KiB and 64 KiB
 * echo both ways, starting from either end, whichever side dials and
 * whether the blocking calls or a loop's connect, and both queue pairs
 * have path MTU 1024. rxe's active MTU follows its
 * netdev's at once: no link bounce is needed.
 */
#define MTU_ECHO_MAX (64 * 1024)

static void mixed_mtus(bool small_dials, bool by_loop)
{
	void (*connect)(struct rig_nic *, struct rig_nic *, const char *, uint16_t,
			struct rig_qp **, struct rig_qp **) = by_loop ? loop_dial_from : dial_from;
	struct rig_qp *qa, *qb, *ql, *qd;
	struct t_buf txa, rxa, txb, rxb;
	const size_t sizes[] = { 4096, MTU_ECHO_MAX };
	size_t i;

	t_sh("ip link set dev %s mtu %d", t_netdev(), MTU_JUMBO);
	wait_for_active_mtu(t_dev(), IBV_MTU_4096);
	wait_for_active_mtu(t_peer_dev(), IBV_MTU_1024);
	if (small_dials) {	/* rxe1 dials rxe0 */
		connect(nic_a, nic_b, getenv("RIG_TEST_IP"),
			by_loop ? PORT_MTU_SMALL_LOOP_DIALS : PORT_MTU_SMALL_DIALS, &ql, &qd);
		qa = ql;
		qb = qd;
	} else {		/* rxe0 dials rxe1 */
		connect(nic_b, nic_a, getenv("RIG_TEST_PEER_IP"),
			by_loop ? PORT_MTU_BIG_LOOP_DIALS : PORT_MTU_BIG_DIALS, &ql, &qd);
		qa = qd;
		qb = ql;
	}
	t_buf(&txa, nic_a, MTU_ECHO_MAX, 107);
	t_buf(&rxa, nic_a, MTU_ECHO_MAX + 64, 108);
	t_buf(&txb, nic_b, MTU_ECHO_MAX, 109);
	t_buf(&rxb, nic_b, MTU_ECHO_MAX + 64, 110);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		echo(qa, &txa, &rxa, qb, &rxb, sizes[i]);	/* 9000 first */
		echo(qb, &txb, &rxb, qa, &rxa, sizes[i]);	/* 1500 first */
	}
	expect_idle(qa);
	expect_idle(qb);
	cr_assert_eq(path_mtu(qa), IBV_MTU_1024, "rxe0's queue pair: path MTU %d",
		     path_mtu(qa));
	cr_assert_eq(path_mtu(qb), IBV_MTU_1024, "rxe1's queue pair: path MTU %d",
		     path_mtu(qb));
	cr_assert_eq(rig_qp_destroy(qa), 0);
	cr_assert_eq(rig_qp_destroy(qb), 0);
	if (loop_listener)
		cr_assert_eq(rig_listener_close(loop_listener), 0);
	loop_listener = NULL;
	addr2_remove();
}

Test(by_address, M3_mixed_mtus_the_1500_side_dials_and_4KiB_64KiB_echo_both_ways)
{
	mixed_mtus(true, false);
}

Test(by_address, M3_mixed_mtus_the_9000_side_dials_and_4KiB_64KiB_echo_both_ways)
{
	mixed_mtus(false, false);
}

Test(by_address, M3_mixed_mtus_the_1500_side_loop_dials_and_4KiB_64KiB_echo_both_ways)
{
	mixed_mtus(true, true);
}

Test(by_address, M3_mixed_mtus_the_9000_side_loop_dials_and_4KiB_64KiB_echo_both_ways)
{
	mixed_mtus(false, true);
}

/* ---- a VLAN of smaller frames ----------------------------------------------- */

/*
 * M3: a VLAN on the port may carry smaller frames than the port, whose
 * MTU rxe and the NICs take from the netdev under it. Both veths carry
 * 9000-byte frames (both ports' active MTU is 4096); the VLAN on one end
 * carries 1500, on the other 9000. A connection between the VLAN's
 * addresses must use path MTU 1024 on both queue pairs, whichever side
 * has the small VLAN: a packet of 4096 would not leave its netdev (rxe
 * sets DF), and the first 4 KiB message would never arrive. The dialer
 * learns its side from its route (rdma_cm sets its MTU from the netdev),
 * the listener its own from the netdev under its source GID; each gives
 * the smaller in the private data, and both take the smaller of all.
 */
static void vlan_mtus(bool listener_small)
{
	struct rig_qp *ql, *qd;
	struct t_buf txa, rxa, txb, rxb;
	const size_t sizes[] = { 4096, MTU_ECHO_MAX };
	int mtu0 = listener_small ? MTU_JUMBO : MTU_PLAIN;	/* rxe0 dials */
	int mtu1 = listener_small ? MTU_PLAIN : MTU_JUMBO;
	size_t i;

	t_sh("ip -b - <<EOF\n"
	     "link set dev %s mtu %d\n"
	     "link set dev %s mtu %d\n"
	     "link add link %s name %s.%d type vlan id %d\n"
	     "link add link %s name %s.%d type vlan id %d\n"
	     "link set dev %s.%d mtu %d up\n"
	     "link set dev %s.%d mtu %d up\n"
	     "addr add " VLAN_A "/24 dev %s.%d\n"
	     "addr add " VLAN_B "/24 dev %s.%d\n"
	     /* both ends are of one kernel: out through the VLANs, as
	      * tests/rxe-vm routes the veth's own addresses */
	     "rule add pref 10 iif lo to " VLAN_B " lookup 104\n"
	     "route add " VLAN_B " dev %s.%d src " VLAN_A " table 104\n"
	     "rule add pref 10 iif lo to " VLAN_A " lookup 105\n"
	     "route add " VLAN_A " dev %s.%d src " VLAN_B " table 105\n"
	     "EOF",
	     t_netdev(), MTU_JUMBO, t_peer_netdev(), MTU_JUMBO,
	     t_netdev(), t_netdev(), VLAN_ID, VLAN_ID, t_peer_netdev(), t_peer_netdev(), VLAN_ID,
	     VLAN_ID, t_netdev(), VLAN_ID, mtu0, t_peer_netdev(), VLAN_ID, mtu1,
	     t_netdev(), VLAN_ID, t_peer_netdev(), VLAN_ID, t_netdev(), VLAN_ID,
	     t_peer_netdev(), VLAN_ID);
	wait_for_active_mtu(t_dev(), IBV_MTU_4096);
	wait_for_active_mtu(t_peer_dev(), IBV_MTU_4096);
	wait_for_gid(t_dev(), VLAN_A);
	wait_for_gid(t_peer_dev(), VLAN_B);
	/* rxe0 dials rxe1's VLAN address; a loop's dial for the one case,
	 * the blocking calls for the other */
	if (listener_small)
		dial_from(nic_b, nic_a, VLAN_B, PORT_VLAN_LISTENER_SMALL, &ql, &qd);
	else
		loop_dial_from(nic_b, nic_a, VLAN_B, PORT_VLAN_DIALER_SMALL, &ql, &qd);
	cr_assert_eq(path_mtu(qd), IBV_MTU_1024, "the dialer's queue pair: path MTU %d",
		     path_mtu(qd));
	cr_assert_eq(path_mtu(ql), IBV_MTU_1024, "the listener's queue pair: path MTU %d",
		     path_mtu(ql));
	t_buf(&txa, nic_a, MTU_ECHO_MAX, 111);
	t_buf(&rxa, nic_a, MTU_ECHO_MAX + 64, 112);
	t_buf(&txb, nic_b, MTU_ECHO_MAX, 113);
	t_buf(&rxb, nic_b, MTU_ECHO_MAX + 64, 114);
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		echo(qd, &txa, &rxa, ql, &rxb, sizes[i]);
		echo(ql, &txb, &rxb, qd, &rxa, sizes[i]);
	}
	expect_idle(qd);
	expect_idle(ql);
	cr_assert_eq(rig_qp_destroy(qd), 0);
	cr_assert_eq(rig_qp_destroy(ql), 0);
	if (loop_listener)
		cr_assert_eq(rig_listener_close(loop_listener), 0);
	loop_listener = NULL;
	addr2_remove();
}

Test(by_address, M3_a_listeners_vlan_of_1500_under_ports_of_9000_takes_path_mtu_1024)
{
	vlan_mtus(true);
}

Test(by_address, M3_a_dialers_vlan_of_1500_under_ports_of_9000_takes_path_mtu_1024)
{
	vlan_mtus(false);
}

/* ---- M4 on a NIC that grants every queue pair remote access ------------ */

enum { PORT_FAR_READER = 18660 };

/*
 * M4 whatever access the NIC grants a queue pair: with
 * every queue pair of this process granted remote read and write and a
 * responder depth of 1, as bnxt_re before Linux 6.13 does, a raw-verbs
 * client on the other host connects by address (rdma_cm, a rig endpoint
 * of its own queue pair) to a rig listener, and RDMA-READs a rig region
 * with its real address and rkey. The read fails with a remote access
 * error, and not a byte of the region reaches the client: the accepted
 * queue pair faces another host, and lives where no region grants
 * remote access.
 */
Test(remote, M4_peer_on_other_host_reads_nothing_when_the_NIC_grants_all)
{
	struct acceptor s = { NULL, -1, NULL };
	const char *gi = getenv("RIG_TEST_PEER_GID_INDEX");
	uint8_t priv[RIG_CM_PRIVATE], buf[256];
	struct rig_endpoint mine = { 0 }, theirs;
	struct rdma_event_channel *ch;
	struct ibv_send_wr wr = { 0 }, *bad;
	struct rdma_conn_param p;
	struct t_raw_qp raw;
	struct rdma_cm_id *id;
	struct ibv_port_attr pa;
	struct ibv_sge sge;
	struct t_buf region;
	union ibv_gid gid;
	struct ibv_wc wc;
	double end;
	pthread_t t;
	size_t i;
	int n;

	cr_assert_not_null(gi, "RIG_TEST_PEER_GID_INDEX is unset");
	__atomic_store_n(&grant_all, true, __ATOMIC_RELAXED);
	t_buf(&region, nic_a, sizeof(buf), 91);
	cr_assert_eq(rig_listen(nic_a, getenv("RIG_TEST_IP"), PORT_FAR_READER, &s.l), 0, "%s",
		     rig_errmsg());
	cr_assert_eq(pthread_create(&t, NULL, accept_one, &s), 0);

	/* The client: an id routed from the other host's address */
	ch = raw_channel();
	id = raw_resolve(ch, getenv("RIG_TEST_IP"), PORT_FAR_READER);
	cr_assert_str_eq(ibv_get_device_name(id->verbs->device), t_peer_dev(),
			 "the client is not on the other host's device");
	memset(buf, 0xa5, sizeof(buf));
	t_raw_qp_open(&raw, id->verbs, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
	cr_assert_eq(ibv_query_gid(id->verbs, 1, atoi(gi), &gid), 0);
	cr_assert_eq(ibv_query_port(id->verbs, 1, &pa), 0);
	mine.qp = raw.qp->qp_num;
	mine.psn = RAW_PSN;
	memcpy(mine.gid, gid.raw, 16);
	rig_cm_pack(&mine, priv);
	t_raw_param(&p, priv, RIG_CM_PRIVATE, raw.qp->qp_num);
	cr_assert_eq(rdma_connect(id, &p), 0, "rdma_connect: %s", strerror(errno));
	raw_expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE, NULL);
	cr_assert_eq(rdma_establish(id), 0, "rdma_establish: %s", strerror(errno));
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(s.ret, 0, "rig_accept: %d %s", s.ret, rig_errmsg());
	rig_qp_endpoint(s.qp, &theirs);
	t_raw_connect(raw.qp, atoi(gi), pa.active_mtu, RAW_PSN, theirs.qp, theirs.psn, theirs.gid);

	/* The read, with the region's real address and rkey */
	sge = (struct ibv_sge){ (uintptr_t)buf, sizeof(buf), raw.mr->lkey };
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = (uintptr_t)region.r->addr;
	wr.wr.rdma.rkey = region.r->rkey;
	cr_assert_eq(ibv_post_send(raw.qp, &wr, &bad), 0);
	end = t_now_ms() + 10000;
	while ((n = ibv_poll_cq(raw.cq, 1, &wc)) == 0)
		cr_assert_lt(t_now_ms(), end, "the read got no completion in 10 s");
	cr_assert_eq(n, 1);
	for (i = 0; i < sizeof(buf) && buf[i] == 0xa5; i++)
		;
	cr_assert_eq(i, sizeof(buf), "the client's read brought the region's bytes "
		     "(status %s): byte %zu is %#x", ibv_wc_status_str(wc.status), i, buf[i]);
	cr_assert_eq(wc.status, IBV_WC_REM_ACCESS_ERR,
		     "the client's read got %s (%d), expected REM_ACCESS_ERR",
		     ibv_wc_status_str(wc.status), wc.status);

	__atomic_store_n(&grant_all, false, __ATOMIC_RELAXED);
	cr_assert_eq(rig_qp_destroy(s.qp), 0, "%s", rig_errmsg());
	t_raw_qp_close(&raw);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	cr_assert_eq(rig_listener_close(s.l), 0, "%s", rig_errmsg());
}

enum { PORT_FAR_BOTH = 18661 };

/* 4 KiB each way between @qa, of @na, and @qb, of @nb, in four new
 * buffers filled from @fill on: the posts of both ends take their keys. */
static void exchange_both_ways(struct rig_nic *na, struct rig_qp *qa,
			       struct rig_nic *nb, struct rig_qp *qb, int fill)
{
	struct t_buf txa, rxa, txb, rxb;

	t_buf(&txa, na, 4096, fill);
	t_buf(&rxa, na, 4096, fill + 1);
	t_buf(&txb, nb, 4096, fill + 2);
	t_buf(&rxb, nb, 4096, fill + 3);
	t_exchange(qa, qb, &txa, &rxb, 4096);
	t_exchange(qb, qa, &txb, &rxa, 4096);
}

/*
 * M4: a connection by address between two hosts has both its queue pairs
 * in their NICs' far protection domains (not the one of rig_qp_make's
 * queue pairs), the dialer's as the listener's, and still carries
 * messages both ways: their posts take the far registrations' keys.
 */
Test(remote, M4_both_ends_of_a_connection_across_hosts_are_far)
{
	struct rig_qp *ma = t_qp(nic_a), *mb = t_qp(nic_b), *qa, *qb;

	dial(getenv("RIG_TEST_IP"), PORT_FAR_BOTH, &qa, &qb);
	cr_assert_neq(qa->ibqp->pd, ma->ibqp->pd,
		      "the listener's queue pair is in the protection domain of rig_qp_make's");
	cr_assert_neq(qb->ibqp->pd, mb->ibqp->pd,
		      "the dialer's queue pair is in the protection domain of rig_qp_make's");
	cr_assert_eq(qa->local, 0);
	cr_assert_eq(qb->local, 0);
	exchange_both_ways(nic_a, qa, nic_b, qb, 1);
	cr_assert_eq(rig_qp_destroy(qa), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(qb), 0, "%s", rig_errmsg());
}

/*
 * M4 and rig(7) Versions and compatibility: a program built against rig
 * 0.3's headers bound rig_nic_open@RIG_0.1, and its inline posts put a
 * region's near key (rig_region.lkey) in every request. Its NICs make
 * near queue pairs only, by address too, so those posts still work; the
 * same dial from a NIC of rig_nic_open@@RIG_0.4 gets far ones. Bound here
 * as such a program bound it.
 */
enum { PORT_AS_0_3 = 18669 };
int rig_nic_open_as_0_3(const char *name, struct rig_nic **out);
__asm__(".symver rig_nic_open_as_0_3, rig_nic_open@RIG_0.1");

Test(remote, M4_a_program_built_against_rig_0_3_keeps_near_queue_pairs)
{
	struct rig_nic *old_a, *old_b;
	struct rig_qp *ma, *qa, *qb;

	cr_assert_eq(rig_nic_open_as_0_3(t_dev(), &old_a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_open_as_0_3(t_peer_dev(), &old_b), 0, "%s", rig_errmsg());
	ma = t_qp(old_a);
	dial_from(old_a, old_b, getenv("RIG_TEST_IP"), PORT_AS_0_3, &qa, &qb);
	cr_assert_eq(qa->ibqp->pd, ma->ibqp->pd,
		     "the listener's queue pair is far: rig 0.3's posts would carry the wrong key");
	cr_assert_eq(qa->lkey_at, offsetof(struct rig_region, lkey));
	cr_assert_eq(qb->lkey_at, offsetof(struct rig_region, lkey));
	cr_assert_eq(qa->local, 0);
	cr_assert_eq(qb->local, 0);
	exchange_both_ways(old_a, qa, old_b, qb, 5);
	cr_assert_eq(rig_nic_close(old_b), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(old_a), 0, "%s", rig_errmsg());
}
