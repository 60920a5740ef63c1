/* SPDX-License-Identifier: MIT */
/*
 * Rings deeper than the NIC's queues (rig(7) Q4) on a device: at depth 8
 * the rings keep their 4095 entries, those beyond the NIC's depth wait in
 * the ring, and who moves them - the loop at a hand-out, a wait on either
 * ring, the queue pair's posts and polls - keeps every program moving.
 * The ordering of a failure with entries waiting is replayed on every
 * provider's profile in tests/test_replay.c (Q4_*); here the device's.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rig/rig.h>

#include "t_device.h"

#define DEPTH 8
#define MSG 8		/* bytes per message: its index, then a pattern */

static struct rig_nic *shallow_nic(void)
{
	struct rig_nic *nic = t_nic_open(t_dev());

	cr_assert_eq(rig_nic_set_depth(nic, DEPTH), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_set_depth(nic, 0), -EINVAL);
	cr_assert_eq(rig_nic_set_depth(nic, RIG_RING_ENTRIES + 1), -EINVAL);
	return nic;
}

/* Fills message @i of @b: its index, then the index's complement. */
static void stamp(struct t_buf *b, uint32_t i)
{
	uint32_t v[2] = { i, ~i };

	memcpy(b->mem + (size_t)i * MSG, v, MSG);
}

static bool stamped(const struct t_buf *b, uint32_t slot, uint32_t i)
{
	uint32_t v[2];

	memcpy(v, b->mem + (size_t)slot * MSG, MSG);
	return v[0] == i && v[1] == ~i;
}

static void post_receives(struct rig_qp *qp, struct t_buf *rx, int n)
{
	int i;

	for (i = 0; i < n; i++)
		cr_assert_eq(rig_qp_receive(qp, rx->r, (size_t)i * MSG, MSG), 0,
			     "receive %d: %s", i, rig_errmsg());
}

static void post_sends(struct rig_qp *qp, struct t_buf *tx, int n)
{
	int i;

	for (i = 0; i < n; i++) {
		stamp(tx, (uint32_t)i);
		cr_assert_eq(rig_qp_send(qp, tx->r, (size_t)i * MSG, MSG), 0,
			     "send %d: %s", i, rig_errmsg());
	}
}

/*
 * Q4 (a): a loop-driven sender posts 4095 sends at depth 8, its peer 4095
 * receives, and the application polls only the rings the loop lists:
 * every message arrives, in order. The loop moves the waiting entries
 * when it hands out a ring's news, before the application polls: here
 * the application leaves the sender's send ring unpolled until every
 * message arrived, so only the loop moves its sends.
 */
Test(depth, Q4_loop_moves_4095_sends_at_depth_8, .timeout = 300)
{
	struct rig_nic *nic = shallow_nic();
	struct rig_ready ready[32];
	struct rig_completion c;
	struct rig_loop *loop;
	struct rig_qp *a, *b;
	struct t_buf tx, rx;
	int sent = 0, got = 0, a_news = 0, i, n;
	double end;

	t_buf(&tx, nic, RIG_RING_ENTRIES * MSG, 1);
	t_buf(&rx, nic, RIG_RING_ENTRIES * MSG, 2);
	memset(rx.mem, 0, rx.len);
	cr_assert_eq(rig_loop_open(nic, &loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(loop, &a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(loop, &b), 0, "%s", rig_errmsg());
	t_connect(a, b);
	cr_assert_eq(rig_loop_watch(loop), 0, "%s", rig_errmsg());
	post_receives(b, &rx, RIG_RING_ENTRIES);
	post_sends(a, &tx, RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(a, RIG_SEND), 0);
	end = t_now_ms() + 240000;
	while (got < RIG_RING_ENTRIES) {
		struct pollfd p = { .fd = rig_loop_fd(loop), .events = POLLIN };

		cr_assert_lt(t_now_ms(), end, "%d received after 240 s", got);
		poll(&p, 1, 1000);
		n = rig_loop_handle(loop, ready, 32);
		cr_assert_geq(n, 0, "rig_loop_handle: %s", rig_errmsg());
		for (i = 0; i < n; i++) {
			if (ready[i].news != RIG_NEWS_RING)
				continue;
			/* The sender's news, only once everything arrived. */
			if (ready[i].qp == a && got < RIG_RING_ENTRIES) {
				a_news++;
				continue;
			}
			while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1) {
				cr_assert_eq(c.error, 0, "%s", c.why);
				if (ready[i].qp == a) {
					cr_assert_eq(ready[i].side, RIG_SEND);
					sent++;
					continue;
				}
				cr_assert_eq(ready[i].side, RIG_RECEIVE);
				cr_assert_eq(c.bytes, MSG);
				cr_assert(stamped(&rx, (uint32_t)got, (uint32_t)got),
					  "receive %d holds another message", got);
				got++;
			}
		}
	}
	cr_assert_gt(a_news, 0, "the sender's ring was never handed out");
	/* Now the sender's completions, all of them, in order. */
	while (sent < RIG_RING_ENTRIES) {
		c = t_take(a, RIG_SEND, 10000);
		cr_assert_eq(c.error, 0, "send %d: %s", sent, c.why);
		sent++;
	}
	cr_assert_eq(rig_qp_room(a, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), RIG_RING_ENTRIES);
	rig_loop_close(loop);
	rig_nic_close(nic);
}

/*
 * Q4, C3: a loop that starts to list news on its own thread while the
 * owner, on another, takes the completions of its waiting rings inline.
 * Until the loop lists, only the owner reads the CQs, and its polls take
 * a waiting ring's completions without feed_lock; once the loop lists,
 * its thread moves waiting entries at each hand-out, reading the CQs,
 * and the owner's polls of a waiting ring take the lock again (from the
 * owner's next out-of-line call: rig(7) Q4). Here 4095 receives and 4095
 * sends wait beyond the depth when the loop thread starts to watch and
 * hand out news, as fast as it can, while the owner streams every
 * message through and checks each, in order. Under ThreadSanitizer
 * (tests/run-all's races job) it also proves that no access of the two
 * threads to a ring races.
 */
static struct rig_qp_stats ring_stats(struct rig_qp *qp, enum rig_side side);

struct lister {
	struct rig_loop *loop;
	int go, stop, handed;
	char err[160];
};

static void *lists_news(void *arg)
{
	struct lister *l = arg;
	struct rig_ready ready[32];
	int n;

	while (!__atomic_load_n(&l->go, __ATOMIC_ACQUIRE))
		usleep(100);
	if (rig_loop_watch(l->loop)) {
		snprintf(l->err, sizeof(l->err), "rig_loop_watch: %s", rig_errmsg());
		return NULL;
	}
	while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd p = { .fd = rig_loop_fd(l->loop), .events = POLLIN };

		poll(&p, 1, 10);
		n = rig_loop_handle(l->loop, ready, 32);
		if (n < 0) {
			snprintf(l->err, sizeof(l->err), "rig_loop_handle: %s", rig_errmsg());
			return NULL;
		}
		l->handed += n;	/* news is only a hint: the owner polls */
	}
	return NULL;
}

Test(depth, Q4_C3_a_loop_starts_listing_beside_an_owner_polling_inline, .timeout = 300)
{
	struct rig_nic *nic = shallow_nic();
	struct lister l = { 0 };
	struct rig_completion c;
	struct rig_qp *a, *b;
	struct t_buf tx, rx;
	int got = 0, sent = 0, ret;
	pthread_t th;
	double end;

	t_buf(&tx, nic, RIG_RING_ENTRIES * MSG, 7);
	t_buf(&rx, nic, RIG_RING_ENTRIES * MSG, 8);
	memset(rx.mem, 0, rx.len);
	cr_assert_eq(rig_loop_open(nic, &l.loop), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(l.loop, &a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_make_in(l.loop, &b), 0, "%s", rig_errmsg());
	t_connect(a, b);
	post_receives(b, &rx, RIG_RING_ENTRIES);
	post_sends(a, &tx, RIG_RING_ENTRIES);
	cr_assert_eq(pthread_create(&th, NULL, lists_news, &l), 0);
	end = t_now_ms() + 240000;
	while (got < RIG_RING_ENTRIES || sent < RIG_RING_ENTRIES) {
		cr_assert_lt(t_now_ms(), end, "%d received, %d sent after 240 s", got, sent);
		/* The loop starts listing once the owner is taking inline. */
		if (got >= 100)
			__atomic_store_n(&l.go, 1, __ATOMIC_RELEASE);
		while ((ret = rig_qp_poll(b, RIG_RECEIVE, &c)) == 1) {
			cr_assert_eq(c.error, 0, "receive %d: %s", got, c.why);
			cr_assert_eq(c.bytes, MSG);
			cr_assert(stamped(&rx, (uint32_t)got, (uint32_t)got),
				  "receive %d holds another message", got);
			got++;
		}
		cr_assert_eq(ret, 0, "%s", rig_errmsg());
		while ((ret = rig_qp_poll(a, RIG_SEND, &c)) == 1) {
			cr_assert_eq(c.error, 0, "send %d: %s", sent, c.why);
			sent++;
		}
		cr_assert_eq(ret, 0, "%s", rig_errmsg());
	}
	__atomic_store_n(&l.go, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&l.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	cr_assert_eq(l.err[0], 0, "%s", l.err);
	cr_assert_gt(l.handed, 0, "the loop handed out no news");
	cr_assert_eq(rig_qp_room(a, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), RIG_RING_ENTRIES);
	cr_assert_eq(ring_stats(b, RIG_RECEIVE).waited, (uint64_t)(RIG_RING_ENTRIES - DEPTH));
	rig_loop_close(l.loop);
	rig_nic_close(nic);
}

/*
 * Q4, T2 (b): at depth 8 both sides post 4095 receives, then 4095 sends
 * each, and each thread waits for all its sends before it polls a
 * receive. It completes: a wait on the send ring moves the receive ring's
 * waiting entries, and wakes for its completions.
 */
struct side {
	struct rig_qp *qp;
	struct t_buf tx, rx;
	char err[160];
};

static void *waits_for_its_sends(void *arg)
{
	struct side *s = arg;
	struct rig_completion c;
	int i, ret;

	for (i = 0; i < RIG_RING_ENTRIES; i++) {
		ret = rig_qp_wait(s->qp, RIG_SEND, 60 * 1000000, &c);
		if (ret != 1 || c.error) {
			snprintf(s->err, sizeof(s->err), "send %d: wait %d, error %d (%s)", i,
				 ret, ret == 1 ? c.error : 0, ret == 1 && c.why ? c.why : rig_errmsg());
			return NULL;
		}
	}
	for (i = 0; i < RIG_RING_ENTRIES; i++) {
		ret = rig_qp_wait(s->qp, RIG_RECEIVE, 60 * 1000000, &c);
		if (ret != 1 || c.error || !stamped(&s->rx, (uint32_t)i, (uint32_t)i)) {
			snprintf(s->err, sizeof(s->err), "receive %d: wait %d, error %d", i,
				 ret, ret == 1 ? c.error : 0);
			return NULL;
		}
	}
	return NULL;
}

Test(depth, Q4_T2_a_wait_on_one_ring_moves_the_other, .timeout = 300)
{
	struct rig_nic *nic = shallow_nic();
	struct side s[2];
	pthread_t th[2];
	int k;

	memset(s, 0, sizeof(s));
	for (k = 0; k < 2; k++) {
		s[k].qp = t_qp(nic);
		t_buf(&s[k].tx, nic, RIG_RING_ENTRIES * MSG, 10 + k);
		t_buf(&s[k].rx, nic, RIG_RING_ENTRIES * MSG, 20 + k);
	}
	t_connect(s[0].qp, s[1].qp);
	for (k = 0; k < 2; k++)
		post_receives(s[k].qp, &s[k].rx, RIG_RING_ENTRIES);
	for (k = 0; k < 2; k++)
		post_sends(s[k].qp, &s[k].tx, RIG_RING_ENTRIES);
	for (k = 0; k < 2; k++)
		cr_assert_eq(pthread_create(&th[k], NULL, waits_for_its_sends, &s[k]), 0);
	for (k = 0; k < 2; k++)
		pthread_join(th[k], NULL);
	for (k = 0; k < 2; k++)
		cr_assert_eq(s[k].err[0], 0, "side %d: %s", k, s[k].err);
	rig_nic_close(nic);
}

/*
 * Q4, T2: the wait alone. a waits on its send ring for one send that b
 * receives only once its 48 sends to a completed; those need a's waiting
 * receives moved to the NIC, 8 at a time, and nothing but a's wait on
 * its send ring runs on a's side meanwhile. The wait wakes for the
 * receive ring's completions and moves them. (Without it, b's sends
 * would meet RNR NAKs until Soft-RoCE gives up, about 470 ms, and fail.)
 */
struct peer_b {
	struct rig_qp *qp;
	struct t_buf *tx, *rx;
	int n;
	char err[160];
};

static void *b_sends_then_receives(void *arg)
{
	struct peer_b *p = arg;
	struct rig_completion c;
	int i, ret;

	for (i = 0; i < p->n; i++) {
		stamp(p->tx, (uint32_t)i);
		if ((ret = rig_qp_send(p->qp, p->tx->r, (size_t)i * MSG, MSG))) {
			snprintf(p->err, sizeof(p->err), "send %d: %d", i, ret);
			return NULL;
		}
	}
	for (i = 0; i < p->n; i++) {
		ret = rig_qp_wait(p->qp, RIG_SEND, 20 * 1000000, &c);
		if (ret != 1 || c.error) {
			snprintf(p->err, sizeof(p->err), "send %d: wait %d, error %d (%s)", i,
				 ret, ret == 1 ? c.error : 0, ret == 1 && c.why ? c.why : "");
			return NULL;
		}
	}
	if ((ret = rig_qp_receive(p->qp, p->rx->r, 0, MSG)))
		snprintf(p->err, sizeof(p->err), "the receive: %d", ret);
	return NULL;
}

Test(depth, Q4_T2_a_wait_wakes_for_the_other_ring, .timeout = 120)
{
	struct rig_nic *nic = shallow_nic();
	struct t_buf atx, arx, btx, brx;
	struct peer_b pb = { .n = 48 };
	struct rig_completion c;
	struct rig_qp *a, *b;
	pthread_t th;
	int i, ret;

	a = t_qp(nic);
	b = t_qp(nic);
	t_buf(&atx, nic, 64 * MSG, 7);
	t_buf(&arx, nic, 64 * MSG, 8);
	t_buf(&btx, nic, 64 * MSG, 9);
	t_buf(&brx, nic, 64 * MSG, 10);
	memset(arx.mem, 0, arx.len);
	t_connect(a, b);
	post_receives(a, &arx, pb.n);
	cr_assert_eq(rig_qp_send(a, atx.r, 0, MSG), 0, "%s", rig_errmsg());
	pb.qp = b;
	pb.tx = &btx;
	pb.rx = &brx;
	cr_assert_eq(pthread_create(&th, NULL, b_sends_then_receives, &pb), 0);
	ret = rig_qp_wait(a, RIG_SEND, 30 * 1000000, &c);
	pthread_join(th, NULL);
	cr_assert_eq(pb.err[0], 0, "b: %s", pb.err);
	cr_assert_eq(ret, 1, "a's send: %d %s", ret, rig_errmsg());
	cr_assert_eq(c.error, 0, "a's send: %s", c.why);
	for (i = 0; i < pb.n; i++) {
		c = t_take(a, RIG_RECEIVE, 5000);
		cr_assert_eq(c.error, 0, "receive %d: %s", i, c.why);
		cr_assert(stamped(&arx, (uint32_t)i, (uint32_t)i), "receive %d", i);
	}
	rig_nic_close(nic);
}

/*
 * Q4, F3, F5 (c): a failure with entries waiting. The peer is gone (its
 * queue pair destroyed) before 4000 sends and 4000 receives are posted at
 * depth 8: the first send's retries end in -ETIMEDOUT, and every entry of
 * both rings completes with it, in order; the NIC took 8 of each ring and
 * nothing after (the posts counted through the context's ops table, where
 * libibverbs' inline ibv_post_send and ibv_post_recv call).
 */
static struct ibv_qp *counted;
static int (*real_post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
static int (*real_post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
static int sends_out, recvs_out;

static int count_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct ibv_send_wr *w;

	if (qp == counted)
		for (w = wr; w; w = w->next)
			sends_out++;
	return real_post_send(qp, wr, bad);
}

static int count_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *w;

	if (qp == counted)
		for (w = wr; w; w = w->next)
			recvs_out++;
	return real_post_recv(qp, wr, bad);
}

Test(depth, Q4_F3_F5_a_failure_completes_4000_waiting_entries, .timeout = 120)
{
	struct rig_nic *nic = shallow_nic();
	struct rig_completion c;
	struct ibv_context *ctx;
	const char *why = NULL;
	struct rig_qp *a, *b;
	struct t_buf tx, rx;
	int i, side, n = 4000;

	a = t_qp(nic);
	b = t_qp(nic);
	t_buf(&tx, nic, RIG_RING_ENTRIES * MSG, 3);
	t_buf(&rx, nic, RIG_RING_ENTRIES * MSG, 4);
	t_connect(a, b);
	cr_assert_eq(rig_qp_destroy(b), 0, "%s", rig_errmsg());
	counted = a->ibqp;
	ctx = a->ibqp->context;
	real_post_send = ctx->ops.post_send;
	real_post_recv = ctx->ops.post_recv;
	ctx->ops.post_send = count_send;
	ctx->ops.post_recv = count_recv;
	post_receives(a, &rx, n);
	post_sends(a, &tx, n);
	cr_assert_eq(sends_out, DEPTH, "the NIC took %d sends", sends_out);
	cr_assert_eq(recvs_out, DEPTH, "the NIC took %d receives", recvs_out);
	c = t_take(a, RIG_SEND, 10000);
	cr_assert_eq(c.error, -ETIMEDOUT, "the first send: %d (%s)", c.error, c.why);
	why = c.why;
	cr_assert_eq(rig_qp_failure(a, NULL), -ETIMEDOUT);
	/* A post after the failure: accepted, never sent (F5). */
	cr_assert_eq(rig_qp_send(a, tx.r, 0, MSG), 0, "%s", rig_errmsg());
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		int due = side == RIG_SEND ? n : n;

		for (i = 0; i < due; i++) {
			c = t_take(a, side, 5000);
			cr_assert_eq(c.error, -ETIMEDOUT, "%s %d: %d (%s)",
				     side == RIG_SEND ? "send" : "receive", i, c.error, c.why);
			cr_assert_eq(c.why, why, "%s %d: another reason: %s",
				     side == RIG_SEND ? "send" : "receive", i, c.why);
		}
		cr_assert_eq(rig_qp_poll(a, side, &c), 0, "an entry too many");
		cr_assert_eq(rig_qp_room(a, side), RIG_RING_ENTRIES);
	}
	cr_assert_eq(sends_out, DEPTH, "%d sends reached the NIC", sends_out);
	cr_assert_eq(recvs_out, DEPTH, "%d receives reached the NIC", recvs_out);
	ctx->ops.post_send = real_post_send;
	ctx->ops.post_recv = real_post_recv;
	rig_nic_close(nic);
}

/* A counter of the device's port 1 (sysfs hw_counters: Soft-RoCE's
 * drivers/infiniband/sw/rxe/rxe_hw_counters.c names them), or -1 where
 * the device has none. */
static long long hw_counter(const char *name)
{
	char path[256];
	long long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/hw_counters/%s",
		 t_dev(), name);
	f = fopen(path, "r");
	if (!f)
		return -1;
	if (fscanf(f, "%lld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static struct rig_qp_stats ring_stats(struct rig_qp *qp, enum rig_side side)
{
	struct rig_qp_stats s = { .size = sizeof(s) };

	cr_assert_eq(rig_qp_stats(qp, side, &s), 0, "%s", rig_errmsg());
	return s;
}

/*
 * Q4, M3 (d): a burst of 1000 messages at depth 8, the receiver taking
 * one every 2 ms: the NIC holds 8 receives, the sender meets RNR NAKs and
 * resends, and none is lost or reordered.
 *
 * It begins with one stretch of a receive queue run dry, made sure: the
 * sender takes its first 8 completions before the receiver polls at all.
 * A send completes once the peer acknowledged it, and the peer's NIC
 * acknowledges a send after it wrote the receive's CQE (Soft-RoCE:
 * drivers/infiniband/sw/rxe/rxe_resp.c, do_complete posts the CQE, then
 * acknowledge sends the ACK); so then b's NIC holds no receive, all 8
 * CQEs are in b's CQ, and 992 receives wait in b's ring. The sender's
 * next poll gives its NIC 8 more sends: the first meets an RNR NAK and
 * is resent (M3), until b refills. b's first poll reads the 8 CQEs and
 * refills: its receive ring has run dry exactly once (rig_qp_stats).
 *
 * What relates that count to the device's (Soft-RoCE counts the RNR NAKs
 * its responders send, send_rnr_err, and those its requesters receive,
 * rcvd_rnr_err): a stretch counted while a send of the peer is on the
 * wire gives at least one NAK, which the test waits for before b polls.
 * Over the whole burst neither bounds the other: a stretch no send meets
 * gives none, one that lasts several resend periods gives one for each,
 * and a stretch that begins after the receiver's last read of its CQ and
 * ends at its next refill is never seen, so gives NAKs the count has not.
 */
Test(depth, Q4_M3_a_receive_burst_beyond_the_depth, .timeout = 300)
{
	struct rig_nic *nic = shallow_nic();
	long long nak0 = hw_counter("send_rnr_err"), rnr0 = hw_counter("rcvd_rnr_err");
	long long nak = nak0;
	struct rig_completion c;
	struct rig_qp_stats s;
	struct rig_qp *a, *b;
	struct t_buf tx, rx;
	int i, n = 1000, sent = 0, ret;
	double end;

	a = t_qp(nic);
	b = t_qp(nic);
	t_buf(&tx, nic, RIG_RING_ENTRIES * MSG, 5);
	t_buf(&rx, nic, RIG_RING_ENTRIES * MSG, 6);
	memset(rx.mem, 0, rx.len);
	t_connect(a, b);
	post_receives(b, &rx, n);
	post_sends(a, &tx, n);
	s = ring_stats(b, RIG_RECEIVE);
	cr_assert_eq(s.waited, (uint64_t)(n - DEPTH), "%llu receives waited",
		     (unsigned long long)s.waited);
	cr_assert_eq(s.ran_dry, 0);
	for (; sent < DEPTH; sent++) {
		c = t_take(a, RIG_SEND, 10000);
		cr_assert_eq(c.error, 0, "send %d: %s", sent, c.why);
	}
	/* b's NIC holds no receive: send 8 cannot complete. */
	cr_assert_eq(rig_qp_poll(a, RIG_SEND, &c), 0);
	cr_assert_eq(ring_stats(b, RIG_RECEIVE).ran_dry, 0);
	if (nak0 >= 0) {
		end = t_now_ms() + 10000;
		while ((nak = hw_counter("send_rnr_err")) == nak0) {
			cr_assert_lt(t_now_ms(), end, "no RNR NAK in 10 s with b's receive queue empty");
			usleep(1000);
		}
	}
	for (i = 0; i < n; i++) {
		ret = rig_qp_wait(b, RIG_RECEIVE, 10 * 1000000, &c);
		cr_assert_eq(ret, 1, "receive %d: %d %s", i, ret, rig_errmsg());
		cr_assert_eq(c.error, 0, "receive %d: %s", i, c.why);
		cr_assert(stamped(&rx, (uint32_t)i, (uint32_t)i), "receive %d: another message", i);
		/* The first receive is taken inline; the poll whose take
		 * makes room for a chain of two reads the CQ, and finds that
		 * every receive the NIC held has completed: run dry, once. */
		if (i == 0)
			cr_assert_eq(ring_stats(b, RIG_RECEIVE).ran_dry, 0);
		if (i == 1) {
			s = ring_stats(b, RIG_RECEIVE);
			cr_assert_eq(s.ran_dry, 1, "b's receive ring ran dry %llu times",
				     (unsigned long long)s.ran_dry);
		}
		while (rig_qp_poll(a, RIG_SEND, &c) == 1) {
			cr_assert_eq(c.error, 0, "send %d: %s", sent, c.why);
			sent++;
		}
		usleep(2000);
	}
	while (sent < n) {
		c = t_take(a, RIG_SEND, 10000);
		cr_assert_eq(c.error, 0, "send %d: %s", sent, c.why);
		sent++;
	}
	s = ring_stats(b, RIG_RECEIVE);
	cr_assert_geq(s.ran_dry, 1);
	cr_assert_eq(s.waited, (uint64_t)(n - DEPTH));
	cr_log_info("b's receive ring ran dry %llu times; the device sent %lld RNR NAKs (%lld before b's first poll) and its requesters received %lld",
		    (unsigned long long)s.ran_dry, hw_counter("send_rnr_err") - nak0, nak - nak0,
		    rnr0 >= 0 ? hw_counter("rcvd_rnr_err") - rnr0 : -1);
	if (nak0 >= 0)
		cr_assert_gt(nak, nak0);
	rig_nic_close(nic);
}

/*
 * Q4: RIG_QP_DEPTH, read when a NIC opens, sets the depth of the queue
 * pairs it makes; a value out of 1..4095 is ignored; rig_nic_set_depth
 * changes it for the queue pairs made after it only.
 */
static uint32_t depth_opened_with(const char *env)
{
	struct rig_nic *nic;
	struct rig_qp *qp;
	uint32_t d;

	if (env)
		setenv("RIG_QP_DEPTH", env, 1);
	else
		unsetenv("RIG_QP_DEPTH");
	nic = t_nic_open(t_dev());
	qp = t_qp(nic);
	d = qp->ring[RIG_SEND].depth;
	cr_assert_eq(qp->ring[RIG_RECEIVE].depth, d);
	cr_assert_eq(rig_qp_room(qp, RIG_SEND), RIG_RING_ENTRIES);
	rig_nic_close(nic);
	return d;
}

Test(depth, Q4_RIG_QP_DEPTH_sets_the_depth)
{
	struct rig_nic *nic;
	struct rig_qp *before, *after;

	cr_assert_eq(depth_opened_with(NULL), RIG_RING_ENTRIES);
	cr_assert_eq(depth_opened_with("1"), 1);
	cr_assert_eq(depth_opened_with("63"), 63);
	cr_assert_eq(depth_opened_with("4095"), RIG_RING_ENTRIES);
	cr_assert_eq(depth_opened_with("0"), RIG_RING_ENTRIES);
	cr_assert_eq(depth_opened_with("4096"), RIG_RING_ENTRIES);
	cr_assert_eq(depth_opened_with("8x"), RIG_RING_ENTRIES);
	unsetenv("RIG_QP_DEPTH");
	nic = t_nic_open(t_dev());
	before = t_qp(nic);
	cr_assert_eq(rig_nic_set_depth(nic, 5), 0);
	after = t_qp(nic);
	cr_assert_eq(before->ring[RIG_SEND].depth, RIG_RING_ENTRIES);
	cr_assert_eq(after->ring[RIG_SEND].depth, 5);
	rig_nic_close(nic);
}
