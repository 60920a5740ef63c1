/* SPDX-License-Identifier: MIT */
/*
 * The failure model replayed on the host (rig(7) Q1, Q2, T1, F1-F6): the
 * library's own post and poll code (rig/qp.h's inline hot path and
 * lib/ring.c) runs against a fake NIC (tests/fake_verbs.c) whose CQEs each
 * test writes one by one, in every order a NIC may write them, and whose
 * posts each test may refuse. The device suites reach only the orders
 * Soft-RoCE happens to produce; here each order is chosen.
 *
 * Entries get distinct lengths, so the bytes of a completion tell which
 * entry it is (Q2). Most receives take a message shorter than the
 * receive, so their bytes must come from the CQE (T1).
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_verbs.h"

static struct fake *f;

static void setup(void)
{
	f = fake_new();
}

static void teardown(void)
{
	fake_free(f);
}

TestSuite(replay, .init = setup, .fini = teardown);

static const char *const ring_name[] = { "send", "receive" };

static void post_one(enum rig_side side, size_t n)
{
	int ret = side == RIG_SEND ? rig_qp_send(f->qp, &f->r, 0, n)
				   : rig_qp_receive(f->qp, &f->r, 0, n);

	cr_assert_eq(ret, 0, "post of %zu bytes on the %s ring: %d %s", n,
		     ring_name[side], ret, rig_errmsg());
}

static void expect_room(enum rig_side side, int room)
{
	cr_assert_eq(rig_qp_room(f->qp, side), room, "%s ring: room %d, not %d",
		     ring_name[side], rig_qp_room(f->qp, side), room);
}

static void expect_none(enum rig_side side)
{
	struct rig_completion c;
	int ret = rig_qp_poll(f->qp, side, &c);

	cr_assert_eq(ret, 0, "%s ring: poll gave %d (error %d), not 0",
		     ring_name[side], ret, ret == 1 ? c.error : 0);
}

/* Takes the next completion of @side, which must be there with @error, and
 * @bytes if it succeeded; returns its reason. */
static const char *expect(enum rig_side side, int error, uint32_t bytes)
{
	struct rig_completion c;
	int ret;

	memset(&c, 0xa5, sizeof(c));
	ret = rig_qp_poll(f->qp, side, &c);
	cr_assert_eq(ret, 1, "%s ring: poll gave %d, not a completion (%s)",
		     ring_name[side], ret, rig_errmsg());
	cr_assert_eq(c.error, error, "%s ring: error %d, not %d (%s)",
		     ring_name[side], c.error, error, c.why ? c.why : "no reason");
	if (error) {
		cr_assert_not_null(c.why, "%s ring: a failure without a reason",
				   ring_name[side]);
		return c.why;
	}
	cr_assert_eq(c.bytes, bytes, "%s ring: %u bytes, not %u",
		     ring_name[side], c.bytes, bytes);
	cr_assert_null(c.why, "%s ring: a success with a reason: %s",
		       ring_name[side], c.why);
	return NULL;
}

static void expect_ok(enum rig_side side, uint32_t bytes)
{
	expect(side, 0, bytes);
}

/* Takes @n failed completions of @side, each with @error and @why. */
static void expect_failed(enum rig_side side, int n, int error, const char *why)
{
	while (n-- > 0)
		cr_assert_eq(expect(side, error, 0), why,
			     "%s ring: a completion with another reason",
			     ring_name[side]);
}

static void expect_failure(int error, int wc_status)
{
	int st = -2;

	cr_assert_eq(rig_qp_failure(f->qp, &st), error, "rig_qp_failure: %d, not %d",
		     rig_qp_failure(f->qp, NULL), error);
	cr_assert_eq(st, wc_status, "rig_qp_failure: status %d, not %d", st,
		     wc_status);
}

static void batch(struct rig_post *p, int count, size_t len, uint64_t cookie)
{
	int i;

	for (i = 0; i < count; i++)
		p[i] = (struct rig_post){ &f->r, 0, len + i, cookie + i };
}

/* ------------------------------------------------------ refused posts */

/*
 * F5: a post to a failed queue pair completes with the failure's error,
 * and rig_qp_poll_batch gives back 0 as its cookie, as for any entry
 * posted one at a time, though its slot last held a batch entry's cookie.
 */
static void F5_posts_to_a_failed_qp_carry_no_stale_cookie(void)
{
	struct rig_completion c[RIG_BATCH_MAX];
	uint64_t cookie[RIG_BATCH_MAX];
	struct rig_post p[RIG_BATCH_MAX];
	const char *why;
	int b, i, side, n;

	/* 64 batches of 64 leave a batch cookie in every slot of both rings. */
	for (b = 0; b < (int)(RIG__SLOTS / RIG_BATCH_MAX); b++) {
		batch(p, RIG_BATCH_MAX, 1, 1000 + b * RIG_BATCH_MAX);
		cr_assert_eq(rig_qp_send_batch(f->qp, p, RIG_BATCH_MAX), RIG_BATCH_MAX);
		cr_assert_eq(rig_qp_receive_batch(f->qp, p, RIG_BATCH_MAX), RIG_BATCH_MAX);
		for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
			fake_complete(f, side, RIG_BATCH_MAX, IBV_WC_SUCCESS);
			n = rig_qp_poll_batch(f->qp, side, c, cookie, RIG_BATCH_MAX);
			cr_assert_eq(n, RIG_BATCH_MAX);
			for (i = 0; i < RIG_BATCH_MAX; i++) {
				cr_assert_eq(c[i].error, 0);
				cr_assert_eq(c[i].bytes, 1 + i);
				cr_assert_eq(cookie[i], 1000 + b * RIG_BATCH_MAX + i);
			}
		}
	}

	post_one(RIG_SEND, 7);
	fake_complete(f, RIG_SEND, 1, IBV_WC_REM_OP_ERR);
	why = expect(RIG_SEND, -EREMOTEIO, 0);
	for (i = 0; i < 8; i++) {
		post_one(RIG_SEND, 10 + i);
		cr_assert_eq(rig_qp_read(f->qp, &f->r, 0, &f->r, 100, 20 + i), 0);
		post_one(RIG_RECEIVE, 30 + i);
	}
	/* F5: none of them reached the NIC. */
	cr_assert_eq(f->ring[RIG_SEND].nreq, RIG__SLOTS + 1);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, RIG__SLOTS);
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 16);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 8);
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		memset(cookie, 0xff, sizeof(cookie));
		n = rig_qp_poll_batch(f->qp, side, c, cookie, RIG_BATCH_MAX);
		cr_assert_eq(n, side == RIG_SEND ? 16 : 8);
		for (i = 0; i < n; i++) {
			cr_assert_eq(c[i].error, -EREMOTEIO);
			cr_assert_eq(c[i].why, why);
			cr_assert_eq(cookie[i], 0, "%s entry %d: cookie %llu, not 0",
				     ring_name[side], i, (unsigned long long)cookie[i]);
		}
		expect_none(side);
		expect_room(side, RIG_RING_ENTRIES);
	}
	/* A batch posted to the failed queue pair keeps its own cookies. */
	batch(p, 3, 40, 77);
	cr_assert_eq(rig_qp_send_batch(f->qp, p, 3), 3);
	cr_assert_eq(rig_qp_poll_batch(f->qp, RIG_SEND, c, cookie, RIG_BATCH_MAX), 3);
	for (i = 0; i < 3; i++) {
		cr_assert_eq(c[i].error, -EREMOTEIO);
		cr_assert_eq(cookie[i], 77 + i);
	}
	expect_failure(-EREMOTEIO, IBV_WC_REM_OP_ERR);
}

Test(replay, F5_posts_to_a_failed_qp_carry_no_stale_cookie)
{
	F5_posts_to_a_failed_qp_carry_no_stale_cookie();
}

/*
 * C1, Q1: a provider that refuses a request (bad_wr pointing at it) took
 * nothing. The post returns its -errno and names the verbs call, the ring
 * keeps its room, the queue pair stays healthy, and the next post takes
 * the sequence number the refused one had.
 */
static void C1_Q1_refused_post_posts_nothing(void)
{
	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	fake_refuse(f, RIG_SEND, 0, ENOMEM);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 11), -ENOMEM);
	cr_assert_not_null(strstr(rig_errmsg(), "ibv_post_send"), "%s", rig_errmsg());
	fake_refuse(f, RIG_SEND, 0, ENOMEM);
	cr_assert_eq(rig_qp_read(f->qp, &f->r, 0, &f->r, 100, 12), -ENOMEM);
	fake_refuse(f, RIG_RECEIVE, 0, EAGAIN);
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 21), -EAGAIN);
	cr_assert_not_null(strstr(rig_errmsg(), "ibv_post_recv"), "%s", rig_errmsg());
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 1);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 1);
	cr_assert_eq(f->ring[RIG_SEND].nreq, 1);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, 1);
	expect_failure(0, -1);

	post_one(RIG_SEND, 13);
	post_one(RIG_RECEIVE, 22);
	cr_assert_eq(f->ring[RIG_SEND].req[1].wr_id, 1);
	cr_assert_eq(f->ring[RIG_SEND].req[1].length, 13);
	cr_assert_eq(f->ring[RIG_RECEIVE].req[1].wr_id, 1);
	fake_complete(f, RIG_SEND, 2, IBV_WC_SUCCESS);
	fake_message(f, 5);
	fake_message(f, 6);
	expect_ok(RIG_SEND, 10);
	expect_ok(RIG_SEND, 13);
	expect_ok(RIG_RECEIVE, 5);
	expect_ok(RIG_RECEIVE, 6);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
	expect_failure(0, -1);
}

Test(replay, C1_Q1_refused_post_posts_nothing)
{
	C1_Q1_refused_post_posts_nothing();
}

/*
 * F5, F6: Soft-RoCE queues the request, then its doorbell write() fails;
 * it returns the error with bad_wr still NULL. The request is in the NIC's
 * queue and may run: the post counts (0, one slot less), the queue pair
 * fails with the provider's error, and the library completes every due
 * entry of both rings itself, in order. The NIC's late CQEs are dropped.
 */
static void doorbell_fails(enum rig_side side, int err)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_doorbell_fails(f, side, err);
	post_one(side, side == RIG_SEND ? 11 : 22);
	cr_assert_eq(f->ring[side].nreq, 2 + side);
	/* Posts after it never reach the NIC (F2, F5). */
	post_one(RIG_SEND, 12);
	post_one(RIG_RECEIVE, 23);
	cr_assert_eq(f->ring[RIG_SEND].nreq, 1 + (side == RIG_SEND));
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, 2 + (side == RIG_RECEIVE));
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 2 - (side == RIG_SEND));
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 3 - (side == RIG_RECEIVE));

	why = expect(side, -err, 0);
	expect_failure(-err, -1);
	/* The NIC completes all it held, too late. */
	fake_complete(f, RIG_SEND, (int)f->ring[RIG_SEND].nreq, IBV_WC_SUCCESS);
	fake_complete(f, RIG_RECEIVE, (int)f->ring[RIG_RECEIVE].nreq, IBV_WC_SUCCESS);
	expect_failed(side, 1 + (side == RIG_SEND ? 1 : 2), -err, why);
	expect_failed(!side, side == RIG_SEND ? 3 : 2, -err, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
	expect_failure(-err, -1);
}

static void F5_F6_send_queued_but_its_doorbell_failed(void)
{
	doorbell_fails(RIG_SEND, EIO);
}

Test(replay, F5_F6_send_queued_but_its_doorbell_failed)
{
	F5_F6_send_queued_but_its_doorbell_failed();
}

static void F5_F6_receive_queued_but_its_doorbell_failed(void)
{
	doorbell_fails(RIG_RECEIVE, EBADF);
}

Test(replay, F5_F6_receive_queued_but_its_doorbell_failed)
{
	F5_F6_receive_queued_but_its_doorbell_failed();
}

/*
 * Q1: a provider that refuses request k of a batch took the k before it:
 * the batch returns k and the rest are not posted; refused at 0, it
 * returns -errno and posts nothing. The queue pair stays healthy.
 */
static void batch_refused(enum rig_side side)
{
	int (*post)(struct rig_qp *, const struct rig_post *, int) =
		side == RIG_SEND ? rig_qp_send_batch : rig_qp_receive_batch;
	struct rig_completion c[8];
	struct rig_post p[8];
	uint64_t cookie[8];
	int i;

	batch(p, 8, 10, 100);
	fake_refuse(f, side, 5, ENOMEM);
	cr_assert_eq(post(f->qp, p, 8), 5);
	expect_room(side, RIG_RING_ENTRIES - 5);
	cr_assert_eq(f->ring[side].nreq, 5);
	fake_refuse(f, side, 0, ENOMEM);
	cr_assert_eq(post(f->qp, p + 5, 3), -ENOMEM);
	expect_room(side, RIG_RING_ENTRIES - 5);
	cr_assert_eq(f->ring[side].nreq, 5);
	expect_failure(0, -1);

	cr_assert_eq(post(f->qp, p + 5, 3), 3);
	for (i = 0; i < 8; i++)
		cr_assert_eq(f->ring[side].req[i].wr_id, i);
	fake_complete(f, side, 8, IBV_WC_SUCCESS);
	cr_assert_eq(rig_qp_poll_batch(f->qp, side, c, cookie, 8), 8);
	for (i = 0; i < 8; i++) {
		cr_assert_eq(c[i].error, 0);
		cr_assert_eq(c[i].bytes, 10 + i);
		cr_assert_eq(cookie[i], 100 + i);
	}
	expect_none(side);
	expect_room(side, RIG_RING_ENTRIES);
}

static void Q1_send_batch_refused_part_way(void)
{
	batch_refused(RIG_SEND);
}

Test(replay, Q1_send_batch_refused_part_way)
{
	Q1_send_batch_refused_part_way();
}

static void Q1_receive_batch_refused_part_way(void)
{
	batch_refused(RIG_RECEIVE);
}

Test(replay, Q1_receive_batch_refused_part_way)
{
	Q1_receive_batch_refused_part_way();
}

/*
 * F5, F6: a batch the provider queued whole before its doorbell failed
 * (bad_wr NULL) is posted whole; the queue pair fails as for one request.
 */
static void F5_F6_batch_queued_but_its_doorbell_failed(void)
{
	struct rig_completion c[RIG_BATCH_MAX];
	uint64_t cookie[RIG_BATCH_MAX];
	struct rig_post p[4];
	int i;

	post_one(RIG_SEND, 10);
	batch(p, 4, 20, 200);
	fake_doorbell_fails(f, RIG_RECEIVE, EIO);
	cr_assert_eq(rig_qp_receive_batch(f->qp, p, 4), 4);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, 4);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 4);
	batch(p, 3, 30, 300);
	cr_assert_eq(rig_qp_send_batch(f->qp, p, 3), 3);
	cr_assert_eq(f->ring[RIG_SEND].nreq, 1);
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 4);

	cr_assert_eq(rig_qp_poll_batch(f->qp, RIG_RECEIVE, c, cookie, RIG_BATCH_MAX), 4);
	for (i = 0; i < 4; i++) {
		cr_assert_eq(c[i].error, -EIO);
		cr_assert_not_null(c[i].why);
		cr_assert_eq(cookie[i], 200 + i);
	}
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	fake_complete(f, RIG_RECEIVE, 4, IBV_WC_SUCCESS);
	cr_assert_eq(rig_qp_poll_batch(f->qp, RIG_SEND, c, cookie, RIG_BATCH_MAX), 4);
	for (i = 0; i < 4; i++) {
		cr_assert_eq(c[i].error, -EIO);
		cr_assert_eq(cookie[i], i ? 300 + i - 1 : 0);
	}
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_failure(-EIO, -1);
}

Test(replay, F5_F6_batch_queued_but_its_doorbell_failed)
{
	F5_F6_batch_queued_but_its_doorbell_failed();
}

/*
 * F1, F5: bnxt_re of rdma-core before 47 (Debian 12 ships 44) keeps a
 * queue-pair state of its own, moves it to ERR in its poll (an error CQE
 * of the send queue, a terminal CQE: providers/bnxt_re/verbs.c,
 * bnxt_re_poll_err_scqe, bnxt_re_poll_term_cqe), and then refuses every
 * post: bnxt_re_post_send unless the queue pair is RTS or SQD,
 * bnxt_re_post_recv in ERR, each with *bad set and EINVAL (see
 * FAKE_BNXT_RE_44 in fake_verbs.h). The poll that moves it flushes what
 * the queue pair holds on that CQ, so the library learns of the failure
 * there too; these tests set the provider's state themselves
 * (provider_failed), for a refusal that comes first. A post rig checked that the
 * provider refuses as invalid is a failed queue pair's post: accepted, and
 * completed in order with the failure's error, which is the refusal's
 * (-ECANCELED, no reason seen) while no reason is found. Another refusal
 * (a provider's full queue, ENOMEM) still refuses that one post on a
 * healthy queue pair.
 */
static void provider_failed(void)
{
	fake_profile(f, FAKE_BNXT_RE_44);
	f->ibqp.state = IBV_QPS_ERR;
	f->nic_failed = true;
}

static const char *refused_after_terminal(void)
{
	const char *why;

	fake_profile(f, FAKE_BNXT_RE_44);
	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_RECEIVE, 20);
	fake_refuse(f, RIG_SEND, 0, ENOMEM);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 12), -ENOMEM);
	expect_failure(0, -1);
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	expect_ok(RIG_SEND, 10);

	/* The provider fails the queue pair; the library has seen nothing. */
	provider_failed();
	expect_none(RIG_SEND);
	expect_failure(0, -1);

	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 12), 0, "%s", rig_errmsg());
	expect_failure(-ECANCELED, -1);
	cr_assert_eq(rig_qp_read(f->qp, &f->r, 0, &f->r, 100, 13), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 21), 0, "%s", rig_errmsg());
	cr_assert_eq(f->ring[RIG_SEND].nreq, 2);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, 1);
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 3);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 2);

	/* bnxt_re flushes what it held (bnxt_re_poll_flush_lists). */
	fake_complete(f, RIG_SEND, 1, IBV_WC_WR_FLUSH_ERR);
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_WR_FLUSH_ERR);
	why = expect(RIG_SEND, -ECANCELED, 0);
	cr_assert_not_null(strstr(why, "refused a post"), "%s", why);
	return why;
}

Test(replay, F1_F5_a_post_refused_after_bnxt_re_failed_the_qp)
{
	const char *why = refused_after_terminal();

	expect_failed(RIG_SEND, 2, -ECANCELED, why);
	expect_failed(RIG_RECEIVE, 2, -ECANCELED, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
	expect_failure(-ECANCELED, -1);
	/* Posts from now on reach no NIC (F5). */
	post_one(RIG_RECEIVE, 22);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, 1);
	expect_failed(RIG_RECEIVE, 1, -ECANCELED, why);
}

/*
 * F5: the batch paths take a refused chain the same way: the whole batch
 * is accepted and completes in order with its cookies.
 */
Test(replay, F1_F5_a_batch_refused_after_bnxt_re_failed_the_qp)
{
	struct rig_completion c[RIG_BATCH_MAX];
	uint64_t cookie[RIG_BATCH_MAX];
	struct rig_post p[4];
	const char *why;
	int i, side;

	fake_profile(f, FAKE_BNXT_RE_44);
	post_one(RIG_RECEIVE, 10);
	provider_failed();
	expect_none(RIG_RECEIVE);
	batch(p, 4, 20, 200);
	cr_assert_eq(rig_qp_receive_batch(f->qp, p, 4), 4, "%s", rig_errmsg());
	expect_failure(-ECANCELED, -1);
	batch(p, 3, 30, 300);
	cr_assert_eq(rig_qp_send_batch(f->qp, p, 3), 3, "%s", rig_errmsg());
	cr_assert_eq(f->ring[RIG_SEND].nreq, 0);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, 1);
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_WR_FLUSH_ERR);
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		int n = side == RIG_SEND ? 3 : 5;

		cr_assert_eq(rig_qp_poll_batch(f->qp, side, c, cookie, RIG_BATCH_MAX), n);
		why = c[0].why;
		cr_assert_not_null(strstr(why, "refused a post"), "%s", why);
		for (i = 0; i < n; i++) {
			cr_assert_eq(c[i].error, -ECANCELED);
			cr_assert_eq(c[i].why, why);
			cr_assert_eq(cookie[i], side == RIG_SEND ? 300 + i
					   : i ? 200 + i - 1 : 0);
		}
		expect_none(side);
	}
	expect_failure(-ECANCELED, -1);
}

/*
 * F3: the refusal is a failure whose reason is not seen yet. An error CQE
 * waiting in a CQ when the post is refused is the failure at once; one
 * that lands later replaces the refusal for the completions still to
 * come, as a reason replaces a bare flush.
 */
static void refused_then_reason(bool late)
{
	const char *why;

	fake_profile(f, FAKE_BNXT_RE_44);
	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	provider_failed();
	expect_none(RIG_RECEIVE);
	if (late)	/* lands after the refusal read the send CQ once */
		fake_hold(f, RIG_SEND, 1);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 11), 0, "%s", rig_errmsg());
	if (late)
		expect_failure(-ECANCELED, -1);
	else
		expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
	why = expect(RIG_SEND, -ETIMEDOUT, 0);
	expect_failed(RIG_SEND, 1, -ETIMEDOUT, why);
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_WR_FLUSH_ERR);
	expect_failed(RIG_RECEIVE, 1, -ETIMEDOUT, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
}

Test(replay, F3_F5_refused_post_with_its_reason_waiting)
{
	refused_then_reason(false);
}

Test(replay, F3_F5_refused_post_then_its_reason)
{
	refused_then_reason(true);
}

/* ------------------------------------------- the failure model, replayed */

/*
 * F3: the NIC writes a flush on one ring before the application sees the
 * failing entry on the other. Receive ring [success, flush, flush], send
 * ring [success, RETRY_EXC_ERR, flush]; in either order of taking the
 * rings, the entries after the successes carry the retry error.
 */
static void flush_before_reason(enum rig_side first)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_SEND, 12);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	post_one(RIG_RECEIVE, 22);
	fake_message(f, 5);
	fake_complete(f, RIG_RECEIVE, 2, IBV_WC_WR_FLUSH_ERR);
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	fake_complete(f, RIG_SEND, 1, IBV_WC_WR_FLUSH_ERR);

	if (first == RIG_RECEIVE) {
		expect_ok(RIG_RECEIVE, 5);
		why = expect(RIG_RECEIVE, -ETIMEDOUT, 0);
		expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 1);
		expect_room(RIG_SEND, RIG_RING_ENTRIES - 3);
		expect_failed(RIG_RECEIVE, 1, -ETIMEDOUT, why);
		expect_none(RIG_RECEIVE);
		expect_ok(RIG_SEND, 10);
	} else {
		expect_ok(RIG_SEND, 10);
		why = expect(RIG_SEND, -ETIMEDOUT, 0);
		expect_room(RIG_SEND, RIG_RING_ENTRIES - 1);
		expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 3);
		expect_failed(RIG_SEND, 1, -ETIMEDOUT, why);
		expect_none(RIG_SEND);
		expect_ok(RIG_RECEIVE, 5);
	}
	expect_failed(!first, 2, -ETIMEDOUT, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
}

static void F3_flush_before_its_reason_on_the_other_ring_receive_first(void)
{
	flush_before_reason(RIG_RECEIVE);
}

Test(replay, F3_flush_before_its_reason_on_the_other_ring_receive_first)
{
	F3_flush_before_its_reason_on_the_other_ring_receive_first();
}

static void F3_flush_before_its_reason_on_the_other_ring_send_first(void)
{
	flush_before_reason(RIG_SEND);
}

Test(replay, F3_flush_before_its_reason_on_the_other_ring_send_first)
{
	F3_flush_before_its_reason_on_the_other_ring_send_first();
}

/*
 * F3: the failing send's CQE lands after the application read the send
 * ring empty and took a flush of the receive ring. With no reason in
 * sight the flush reports "flushed without saying why" (-ECANCELED); once
 * the reason is reaped it replaces that record, and every completion taken
 * after it carries the reason's error.
 */
static void F3_reason_lands_after_its_ring_was_read_empty(void)
{
	const char *flushed, *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_SEND, 12);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	post_one(RIG_RECEIVE, 22);
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	expect_ok(RIG_SEND, 10);
	expect_none(RIG_SEND);

	fake_complete(f, RIG_RECEIVE, 3, IBV_WC_WR_FLUSH_ERR);
	flushed = expect(RIG_RECEIVE, -ECANCELED, 0);
	expect_failure(-ECANCELED, IBV_WC_WR_FLUSH_ERR);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 2);

	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	fake_complete(f, RIG_SEND, 1, IBV_WC_WR_FLUSH_ERR);
	why = expect(RIG_SEND, -ETIMEDOUT, 0);
	cr_assert_neq(why, flushed);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
	expect_failed(RIG_SEND, 1, -ETIMEDOUT, why);
	expect_failed(RIG_RECEIVE, 2, -ETIMEDOUT, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
}

Test(replay, F3_reason_lands_after_its_ring_was_read_empty)
{
	F3_reason_lands_after_its_ring_was_read_empty();
}

/*
 * F3: the failing send's CQE lands while the library looks for the reason
 * of a flush, just after its first read of the send ring found nothing.
 * It reads both rings once more before it settles for -ECANCELED.
 */
static void F3_reason_lands_while_the_library_looks_for_it(void)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_complete(f, RIG_RECEIVE, 2, IBV_WC_WR_FLUSH_ERR);
	fake_hold(f, RIG_SEND, 1);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	why = expect(RIG_RECEIVE, -ETIMEDOUT, 0);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
	expect_failed(RIG_RECEIVE, 1, -ETIMEDOUT, why);
	expect_failed(RIG_SEND, 1, -ETIMEDOUT, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
}

Test(replay, F3_reason_lands_while_the_library_looks_for_it)
{
	F3_reason_lands_while_the_library_looks_for_it();
}

/*
 * F3: the first failure is kept. A second error CQE (its own entry
 * included) and an async event after it change neither what later
 * completions carry nor rig_qp_failure.
 */
static void F3_the_first_failure_is_kept(void)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_complete(f, RIG_SEND, 1, IBV_WC_REM_OP_ERR);
	fake_complete(f, RIG_SEND, 1, IBV_WC_WR_FLUSH_ERR);
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_LOC_LEN_ERR);
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_WR_FLUSH_ERR);
	why = expect(RIG_SEND, -EREMOTEIO, 0);
	fake_event(f, EIO, "QP_FATAL, injected");
	expect_failed(RIG_RECEIVE, 2, -EREMOTEIO, why);
	expect_failed(RIG_SEND, 1, -EREMOTEIO, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_failure(-EREMOTEIO, IBV_WC_REM_OP_ERR);
}

Test(replay, F3_the_first_failure_is_kept)
{
	F3_the_first_failure_is_kept();
}

/*
 * F1, F3: an async event that explains a bare flush replaces its
 * -ECANCELED record; the event fails the NIC's trust, so the library
 * completes what is due itself (F6).
 */
static void F1_F3_async_event_replaces_a_bare_flush(void)
{
	static const char fatal[] = "QP_FATAL, injected";

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_complete(f, RIG_RECEIVE, 2, IBV_WC_WR_FLUSH_ERR);
	expect(RIG_RECEIVE, -ECANCELED, 0);
	fake_event(f, EIO, fatal);
	cr_assert_eq(expect(RIG_RECEIVE, -EIO, 0), fatal);
	expect_failure(-EIO, -1);
	fake_complete(f, RIG_SEND, 2, IBV_WC_SUCCESS);
	expect_failed(RIG_SEND, 2, -EIO, fatal);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_failure(-EIO, -1);
}

Test(replay, F1_F3_async_event_replaces_a_bare_flush)
{
	F1_F3_async_event_replaces_a_bare_flush();
}

/*
 * F1, F3: an async event that reports an error the rings report too does
 * not win over that error's CQE. bnxt_re raises one for every error of a
 * queue pair on recent kernels (drivers/infiniband/hw/bnxt_re/main.c,
 * bnxt_re_handle_qp_async_event: the requester's REQ_TIMEOUT_RETRY_LIMIT
 * becomes IB_EVENT_QP_ACCESS_ERR, the responder's RES_EXCEEDS_WQE
 * IB_EVENT_QP_REQ_ERR), while the hardware writes the error CQE; and its
 * provider, reading the event (providers/bnxt_re/verbs.c,
 * bnxt_re_async_event), lists the queue pair for the flushes that
 * ibv_poll_cq makes up for everything still queued. A dead peer is M3's
 * -ETIMEDOUT, not -EACCES; an overlong message P4's -EMSGSIZE, not
 * -EPROTO; every entry carries it, in order, whichever was written first.
 */
static const char access_err[] = "QP_ACCESS_ERR, injected";

/* The requester: the retry error, then the event (the order the
 * hardware and the firmware write them in). */
static void F1_F3_error_cqe_then_its_async_event(void)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	fake_event(f, EACCES, access_err);
	fake_complete(f, RIG_SEND, 1, IBV_WC_WR_FLUSH_ERR);
	fake_complete(f, RIG_RECEIVE, 2, IBV_WC_WR_FLUSH_ERR);
	why = expect(RIG_RECEIVE, -ETIMEDOUT, 0);
	cr_assert_neq(why, access_err);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
	expect_failed(RIG_RECEIVE, 1, -ETIMEDOUT, why);
	expect_failed(RIG_SEND, 2, -ETIMEDOUT, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
}

Test(replay, F1_F3_error_cqe_then_its_async_event)
{
	F1_F3_error_cqe_then_its_async_event();
}

/* The responder: another thread read the event (rig_nic_events) before
 * the error CQE of the overlong message landed; the owner polls after. */
static void F1_F3_async_event_then_its_error_cqe(void)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_event(f, EPROTO, "QP_REQ_ERR, injected");
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_LOC_LEN_ERR);
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_WR_FLUSH_ERR);
	fake_complete(f, RIG_SEND, 1, IBV_WC_WR_FLUSH_ERR);
	why = expect(RIG_SEND, -EMSGSIZE, 0);
	expect_failure(-EMSGSIZE, IBV_WC_LOC_LEN_ERR);
	expect_failed(RIG_RECEIVE, 2, -EMSGSIZE, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_failure(-EMSGSIZE, IBV_WC_LOC_LEN_ERR);
}

Test(replay, F1_F3_async_event_then_its_error_cqe)
{
	F1_F3_async_event_then_its_error_cqe();
}

/*
 * F1, F2: the bound. The CQEs the NIC wrote by the owner's first poll
 * after the event count; then the event stands and later CQEs are
 * dropped. bnxt_re's provider makes up a flush, at that poll, for every
 * request still queued (bnxt_re_poll_flush_wcs), so a hardware CQE later
 * than that names no request of the queue pair anyway.
 */
static void F1_F2_error_cqe_after_the_event_was_applied_is_dropped(void)
{
	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	fake_event(f, EACCES, access_err);
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_WR_FLUSH_ERR);
	cr_assert_eq(expect(RIG_RECEIVE, -EACCES, 0), access_err);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	expect_failed(RIG_SEND, 1, -EACCES, access_err);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_failure(-EACCES, -1);
}

Test(replay, F1_F2_error_cqe_after_the_event_was_applied_is_dropped)
{
	F1_F2_error_cqe_after_the_event_was_applied_is_dropped();
}

/* F1, F3: the peer leaving (a connection's rdma_cm event) reports no
 * error of the rings: it wins over an error CQE not yet polled, as an
 * event always did. */
static void F1_F3_peer_left_wins_over_an_unpolled_error_cqe(void)
{
	static const char left[] = "the peer left, injected";

	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	fake_event(f, ECONNRESET, left);
	cr_assert_eq(expect(RIG_RECEIVE, -ECONNRESET, 0), left);
	expect_failed(RIG_SEND, 1, -ECONNRESET, left);
	expect_failure(-ECONNRESET, -1);
}

Test(replay, F1_F3_peer_left_wins_over_an_unpolled_error_cqe)
{
	F1_F3_peer_left_wins_over_an_unpolled_error_cqe();
}

/*
 * F1, T2: a failure the rings find is news for both rings, as an event is
 * (events.c tells an event's to both): the library calls the hook the
 * layer above set, once per queue pair, whichever ring or post found it.
 * bnxt_re is why (providers/bnxt_re/verbs.c): it makes up flushes inside
 * ibv_poll_cq with no completion event, and an error send CQE lists only
 * the send queue for flushing (bnxt_re_poll_err_scqe), so the receive
 * ring may never raise an event that would wake its waiter or list it in
 * its loop.
 */
static int told;

static void count_told(struct rig__qp *qp)
{
	cr_assert_eq(qp, &f->q);
	cr_assert_neq(rig_qp_failure(f->qp, NULL), 0, "told before the failure was kept");
	told++;
}

static void expect_told(int n)
{
	cr_assert_eq(told, n, "both rings told %d times, not %d", told, n);
}

static void tell_reset(void)
{
	enum fake_profile profile = f->profile;

	fake_reset(f);
	fake_profile(f, profile);
	f->q.rings_failed = count_told;
	told = 0;
}

static void F1_T2_a_failure_the_rings_find_is_news_for_both(void)
{
	const char *why;

	/* An error CQE on the send ring, found by the quiet receive ring. */
	tell_reset();
	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	why = expect(RIG_RECEIVE, -ETIMEDOUT, 0);
	expect_told(1);
	expect_failed(RIG_RECEIVE, 1, -ETIMEDOUT, why);
	expect_failed(RIG_SEND, 1, -ETIMEDOUT, why);
	post_one(RIG_SEND, 11);
	expect_failed(RIG_SEND, 1, -ETIMEDOUT, why);
	expect_told(1);

	/* A bare flush, then its reason: told once, at the flush. (On the
	 * plain fake only: a provider flushes the failing send before its
	 * reason could land, see every_script_on_every_profile.) */
	if (f->profile == FAKE_PLAIN) {
		tell_reset();
		post_one(RIG_SEND, 10);
		post_one(RIG_RECEIVE, 20);
		post_one(RIG_RECEIVE, 21);
		fake_complete(f, RIG_RECEIVE, 2, IBV_WC_WR_FLUSH_ERR);
		expect(RIG_RECEIVE, -ECANCELED, 0);
		expect_told(1);
		fake_complete(f, RIG_SEND, 1, IBV_WC_REM_OP_ERR);
		why = expect(RIG_SEND, -EREMOTEIO, 0);
		expect_failed(RIG_RECEIVE, 1, -EREMOTEIO, why);
		expect_told(1);
	}

	/* A doorbell the NIC refused, found by the post itself. */
	tell_reset();
	post_one(RIG_RECEIVE, 20);
	fake_doorbell_fails(f, RIG_SEND, EIO);
	post_one(RIG_SEND, 10);
	expect_told(1);
	expect(RIG_RECEIVE, -EIO, 0);
	expect(RIG_SEND, -EIO, 0);
	expect_told(1);

	/* A completion of an unknown kind, and a CQ that cannot be read. */
	tell_reset();
	post_one(RIG_RECEIVE, 20);
	fake_cqe(f, RIG_RECEIVE, 0, IBV_WC_SUCCESS, IBV_WC_RECV, 4, IBV_WC_WITH_IMM);
	expect(RIG_RECEIVE, -EPROTO, 0);
	expect_told(1);
	tell_reset();
	post_one(RIG_SEND, 10);
	fake_cq_fails(f, RIG_SEND, -EIO);
	expect(RIG_SEND, -EIO, 0);
	expect_told(1);

	/* An event: events.c told both rings when it recorded it. */
	tell_reset();
	post_one(RIG_RECEIVE, 20);
	fake_event(f, EIO, "QP_FATAL, injected");
	expect(RIG_RECEIVE, -EIO, 0);
	expect_told(0);
}

Test(replay, F1_T2_a_failure_the_rings_find_is_news_for_both)
{
	F1_T2_a_failure_the_rings_find_is_news_for_both();
}

/*
 * F3: a flush with no reason anywhere (bnxt_re's provider makes up
 * flushes in ibv_poll_cq once its async event path listed the queue pair
 * for flushing, and the event may say nothing rig counts): -ECANCELED.
 */
static void F3_flushes_without_a_reason_report_ECANCELED(void)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_complete(f, RIG_SEND, 1, IBV_WC_WR_FLUSH_ERR);
	fake_complete(f, RIG_RECEIVE, 2, IBV_WC_WR_FLUSH_ERR);
	why = expect(RIG_SEND, -ECANCELED, 0);
	expect_failed(RIG_RECEIVE, 2, -ECANCELED, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_failure(-ECANCELED, IBV_WC_WR_FLUSH_ERR);
}

Test(replay, F3_flushes_without_a_reason_report_ECANCELED)
{
	F3_flushes_without_a_reason_report_ECANCELED();
}

/*
 * F6: an error on the send ring, and receives the NIC never completes
 * (Soft-RoCE writes no CQE for them). Polled first, the quiet receive ring
 * finds the failure on the other ring and completes every due receive.
 * Flushes a NIC writes for them later, and a receive posted after the
 * failure (F5), do not disturb the order.
 */
static void F6_error_on_one_ring_completes_the_quiet_other(void)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	post_one(RIG_RECEIVE, 22);
	fake_complete(f, RIG_SEND, 1, IBV_WC_REM_OP_ERR);
	why = expect(RIG_RECEIVE, -EREMOTEIO, 0);
	expect_failure(-EREMOTEIO, IBV_WC_REM_OP_ERR);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 2);
	fake_complete(f, RIG_RECEIVE, 3, IBV_WC_WR_FLUSH_ERR);
	post_one(RIG_RECEIVE, 23);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 3);
	expect_failed(RIG_RECEIVE, 3, -EREMOTEIO, why);
	expect_none(RIG_RECEIVE);
	expect_failed(RIG_SEND, 1, -EREMOTEIO, why);
	expect_none(RIG_SEND);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
}

Test(replay, F6_error_on_one_ring_completes_the_quiet_other)
{
	F6_error_on_one_ring_completes_the_quiet_other();
}

/*
 * F1, F2: a receive with immediate data is of a kind the receive ring
 * does not take. Its entry fails with -EPROTO, and so does every due
 * entry: the NIC is no longer trusted, and CQEs it writes after that are
 * dropped. What it completed on the other ring before still counts.
 */
static void F1_F2_receive_with_immediate_data(void)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	post_one(RIG_RECEIVE, 22);
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	fake_cqe(f, RIG_RECEIVE, 0, IBV_WC_SUCCESS, IBV_WC_RECV, 4, IBV_WC_WITH_IMM);
	why = expect(RIG_RECEIVE, -EPROTO, 0);
	expect_failure(-EPROTO, -1);
	fake_cqe(f, RIG_RECEIVE, 1, IBV_WC_SUCCESS, IBV_WC_RECV, 5, 0);
	fake_cqe(f, RIG_RECEIVE, 2, IBV_WC_SUCCESS, IBV_WC_RECV, 6, 0);
	fake_cqe(f, RIG_SEND, 1, IBV_WC_SUCCESS, IBV_WC_SEND, 0, 0);
	expect_failed(RIG_RECEIVE, 2, -EPROTO, why);
	expect_ok(RIG_SEND, 10);
	expect_failed(RIG_SEND, 1, -EPROTO, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_failure(-EPROTO, -1);
}

Test(replay, F1_F2_receive_with_immediate_data)
{
	F1_F2_receive_with_immediate_data();
}

/*
 * F1, F2: the same for an RDMA write on the send ring, taken by
 * rig_qp_poll_batch; the success behind it in the same CQ came after it,
 * and is dropped too.
 */
static void F1_F2_rdma_write_on_the_send_ring(void)
{
	struct rig_completion c[4];
	uint64_t cookie[4];

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_SEND, 12);
	post_one(RIG_RECEIVE, 20);
	fake_message(f, 7);
	fake_cqe(f, RIG_SEND, 0, IBV_WC_SUCCESS, IBV_WC_SEND, 0, 0);
	fake_cqe(f, RIG_SEND, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, 0, 0);
	fake_cqe(f, RIG_SEND, 2, IBV_WC_SUCCESS, IBV_WC_SEND, 0, 0);
	cr_assert_eq(rig_qp_poll_batch(f->qp, RIG_SEND, c, cookie, 4), 3);
	cr_assert_eq(c[0].error, 0);
	cr_assert_eq(c[0].bytes, 10);
	cr_assert_eq(c[1].error, -EPROTO);
	cr_assert_eq(c[2].error, -EPROTO);
	cr_assert_eq(c[2].why, c[1].why);
	expect_ok(RIG_RECEIVE, 7);
	expect_none(RIG_RECEIVE);
	expect_none(RIG_SEND);
	expect_failure(-EPROTO, -1);
}

Test(replay, F1_F2_rdma_write_on_the_send_ring)
{
	F1_F2_rdma_write_on_the_send_ring();
}

/*
 * F1, F6: a CQ the library cannot read fails the queue pair (-EIO, no
 * verbs status); what the other CQ held by then still counts.
 */
static void F1_F6_unreadable_cq(void)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	fake_cq_fails(f, RIG_RECEIVE, -EIO);
	why = expect(RIG_RECEIVE, -EIO, 0);
	expect_failure(-EIO, -1);
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	fake_complete(f, RIG_RECEIVE, 2, IBV_WC_SUCCESS);
	expect_failed(RIG_RECEIVE, 1, -EIO, why);
	expect_ok(RIG_SEND, 10);
	expect_failed(RIG_SEND, 1, -EIO, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
}

Test(replay, F1_F6_unreadable_cq)
{
	F1_F6_unreadable_cq();
}

/*
 * Q2: a CQE whose wr_id names no due entry (beyond head, or one taken
 * long ago) is ignored, on the slow path where the library reads wr_id:
 * it neither fails the queue pair nor shifts the entries.
 */
static void Q2_cqe_for_no_due_entry_is_ignored(void)
{
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	fake_cqe(f, RIG_SEND, 7, IBV_WC_LOC_PROT_ERR, IBV_WC_SEND, 0, 0);
	expect_none(RIG_SEND);
	expect_failure(0, -1);
	fake_complete(f, RIG_SEND, 2, IBV_WC_SUCCESS);
	expect_ok(RIG_SEND, 10);
	expect_ok(RIG_SEND, 11);

	post_one(RIG_SEND, 12);
	post_one(RIG_SEND, 13);
	post_one(RIG_RECEIVE, 20);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	fake_cqe(f, RIG_SEND, 0, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, 0);
	fake_complete(f, RIG_SEND, 1, IBV_WC_WR_FLUSH_ERR);
	fake_cqe(f, RIG_RECEIVE, 99, IBV_WC_SUCCESS, IBV_WC_RECV, 3, 0);
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_WR_FLUSH_ERR);
	why = expect(RIG_SEND, -ETIMEDOUT, 0);
	expect_failed(RIG_SEND, 1, -ETIMEDOUT, why);
	expect_failed(RIG_RECEIVE, 1, -ETIMEDOUT, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	cr_assert_eq(fake_unpolled(f, RIG_SEND), 0);
	cr_assert_eq(fake_unpolled(f, RIG_RECEIVE), 0);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
}

Test(replay, Q2_cqe_for_no_due_entry_is_ignored)
{
	Q2_cqe_for_no_due_entry_is_ignored();
}

/*
 * Q2, F3: sequence numbers (and so wr_ids) wrap past 2^32 in the middle of
 * 64 entries of each ring: the order and the bytes hold, with no failure
 * and with one after the wrap (send 40 exhausts its retries; receives from
 * 30 on are flushed, and sends from 52 on never complete).
 */
#define WRAP_START 0xfffffff0u

static void wrap(int fail)
{
	struct rig_completion c[RIG_BATCH_MAX];
	uint64_t cookie[RIG_BATCH_MAX];
	struct rig_post p[RIG_BATCH_MAX];
	const char *why = NULL;
	int i, side;

	for (side = RIG_SEND; side <= RIG_RECEIVE; side++)
		f->qp->ring[side].head = f->qp->ring[side].tail = WRAP_START;
	for (i = 0; i < 64; i++)
		post_one(RIG_SEND, 100 + i);
	batch(p, RIG_BATCH_MAX, 1000, 5000);
	cr_assert_eq(rig_qp_receive_batch(f->qp, p, RIG_BATCH_MAX), RIG_BATCH_MAX);
	for (i = 0; i < 64; i++) {
		cr_assert_eq(f->ring[RIG_SEND].req[i].wr_id, (uint32_t)(WRAP_START + i));
		cr_assert_eq(f->ring[RIG_RECEIVE].req[i].wr_id, (uint32_t)(WRAP_START + i));
	}
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 64);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES - 64);

	if (!fail) {
		fake_complete(f, RIG_SEND, 64, IBV_WC_SUCCESS);
		for (i = 0; i < 64; i++)
			fake_message(f, 500 + i);
	} else {
		fake_complete(f, RIG_SEND, 40, IBV_WC_SUCCESS);
		fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
		fake_complete(f, RIG_SEND, 11, IBV_WC_WR_FLUSH_ERR);
		for (i = 0; i < 30; i++)
			fake_message(f, 500 + i);
		fake_complete(f, RIG_RECEIVE, 34, IBV_WC_WR_FLUSH_ERR);
	}
	/* The receive ring first: its flush makes the library look at the
	 * send ring, which it reaps ahead across the wrap. */
	cr_assert_eq(rig_qp_poll_batch(f->qp, RIG_RECEIVE, c, cookie, RIG_BATCH_MAX),
		     RIG_BATCH_MAX);
	for (i = 0; i < 64; i++) {
		cr_assert_eq(cookie[i], 5000 + i);
		if (!fail || i < 30) {
			cr_assert_eq(c[i].error, 0, "receive %d: %d", i, c[i].error);
			cr_assert_eq(c[i].bytes, 500 + i);
		} else {
			cr_assert_eq(c[i].error, -ETIMEDOUT, "receive %d: %d", i,
				     c[i].error);
			why = why ? why : c[i].why;
			cr_assert_eq(c[i].why, why);
		}
	}
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
	for (i = 0; i < 64; i++) {
		if (!fail || i < 40)
			expect_ok(RIG_SEND, 100 + i);
		else
			expect_failed(RIG_SEND, 1, -ETIMEDOUT, why);
		expect_room(RIG_SEND, RIG_RING_ENTRIES - 63 + i);
	}
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++)
		cr_assert_eq(f->qp->ring[side].tail, (uint32_t)(WRAP_START + 64));
	if (fail)
		expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
	else
		expect_failure(0, -1);
}

static void Q2_sequence_numbers_wrap(void)
{
	wrap(0);
}

Test(replay, Q2_sequence_numbers_wrap)
{
	Q2_sequence_numbers_wrap();
}

static void F3_Q2_sequence_numbers_wrap_with_a_failure(void)
{
	wrap(1);
}

Test(replay, F3_Q2_sequence_numbers_wrap_with_a_failure)
{
	F3_Q2_sequence_numbers_wrap_with_a_failure();
}

/*
 * Q1: a slot frees when its completion is taken, not when the NIC writes
 * it nor when the library reaps it ahead; a full ring refuses a post with
 * -ENOSPC, after the failure too (F5: accepted room permitting).
 */
static void Q1_F5_room_frees_when_taken(void)
{
	struct rig_post p[1];
	const char *why;
	int i;

	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_SEND, 12);
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 3);
	fake_complete(f, RIG_SEND, 3, IBV_WC_SUCCESS);
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 3);
	expect_ok(RIG_SEND, 10);
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 2);
	/* An empty receive ring with an entry due reaps the send ring. */
	post_one(RIG_RECEIVE, 20);
	expect_none(RIG_RECEIVE);
	cr_assert_eq(fake_unpolled(f, RIG_SEND), 0);
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 2);
	expect_ok(RIG_SEND, 11);
	expect_ok(RIG_SEND, 12);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);

	for (i = 1; i < RIG_RING_ENTRIES; i++)
		post_one(RIG_RECEIVE, 20 + i % 100);
	expect_room(RIG_RECEIVE, 0);
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 1), -ENOSPC);
	batch(p, 1, 1, 1);
	cr_assert_eq(rig_qp_receive_batch(f->qp, p, 1), -ENOSPC);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, RIG_RING_ENTRIES);

	post_one(RIG_SEND, 13);
	fake_complete(f, RIG_SEND, 1, IBV_WC_LOC_PROT_ERR);
	why = expect(RIG_SEND, -EFAULT, 0);
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 1), -ENOSPC);
	expect_room(RIG_RECEIVE, 0);
	expect_failed(RIG_RECEIVE, 1, -EFAULT, why);
	expect_room(RIG_RECEIVE, 1);
	post_one(RIG_RECEIVE, 1);
	expect_room(RIG_RECEIVE, 0);
	expect_failed(RIG_RECEIVE, RIG_RING_ENTRIES, -EFAULT, why);
	expect_none(RIG_RECEIVE);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, RIG_RING_ENTRIES);
}

Test(replay, Q1_F5_room_frees_when_taken)
{
	Q1_F5_room_frees_when_taken();
}

/*
 * T1, F6: what an empty poll costs. A thread spinning on a quiet ring reads
 * its CQ once per poll, through rig_qp_poll and rig_qp_poll_batch alike.
 * The other ring's CQ is read as well only while a failure can be there:
 * while the NIC holds entries of that ring whose CQEs the library has not
 * read (the quiet ring may be one the NIC never completes, F6), or after
 * a flush. A CQE found there is kept for its ring, which then owes
 * nothing, and the look stops.
 */
static void spin_empty(enum rig_side side, int polls, bool batch)
{
	struct rig_completion c[4];
	int i;

	for (i = 0; i < polls; i++) {
		if (batch)
			cr_assert_eq(rig_qp_poll_batch(f->qp, side, c, NULL, 4), 0);
		else
			expect_none(side);
	}
}

static void expect_polls(unsigned long send, unsigned long receive)
{
	cr_assert_eq(f->ring[RIG_SEND].cq.polls, send, "send CQ read %lu times, not %lu",
		     f->ring[RIG_SEND].cq.polls, send);
	cr_assert_eq(f->ring[RIG_RECEIVE].cq.polls, receive,
		     "receive CQ read %lu times, not %lu",
		     f->ring[RIG_RECEIVE].cq.polls, receive);
}

static void T1_F6_an_empty_poll_reads_one_cq(void)
{
	post_one(RIG_SEND, 10);
	spin_empty(RIG_SEND, 1000, false);
	expect_polls(1000, 0);
	spin_empty(RIG_SEND, 1000, true);
	expect_polls(2000, 0);

	/* A receive at the NIC: a failure may sit on its CQ. */
	post_one(RIG_RECEIVE, 20);
	spin_empty(RIG_SEND, 100, false);
	expect_polls(2100, 100);
	fake_message(f, 5);
	spin_empty(RIG_SEND, 100, false);
	expect_polls(2200, 101);
	spin_empty(RIG_SEND, 100, true);
	expect_polls(2300, 101);
	cr_assert_eq(fake_unpolled(f, RIG_RECEIVE), 0);
	expect_ok(RIG_RECEIVE, 5);

	/* And the send ring's completion, then an empty receive ring. */
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	expect_ok(RIG_SEND, 10);
	post_one(RIG_RECEIVE, 21);
	f->ring[RIG_SEND].cq.polls = f->ring[RIG_RECEIVE].cq.polls = 0;
	spin_empty(RIG_RECEIVE, 1000, false);
	spin_empty(RIG_RECEIVE, 1000, true);
	expect_polls(0, 2000);
	expect_failure(0, -1);
}

Test(replay, T1_F6_an_empty_poll_reads_one_cq)
{
	T1_F6_an_empty_poll_reads_one_cq();
}


/*
 * F1, F5, F6: the NIC fails a send and flushes what else the queue pair
 * holds, and the application posts a send and a receive before it polls.
 * The library knows nothing yet (unless an async event told it: F5), so
 * both reach the NIC, whose provider does with them what it does
 * (fake_verbs.h): rxe's kernel flushes the send and never sees the
 * receive; mlx5 flushes both; bnxt_re's flush lists take them at the next
 * poll of their CQ. On every profile: the success before the failure,
 * then the retry error on every other entry of both rings, in order.
 */
static void F1_F5_F6_posts_after_the_nic_failed_the_qp(void)
{
	bool knew;
	const char *why;

	post_one(RIG_SEND, 10);
	post_one(RIG_SEND, 11);
	post_one(RIG_SEND, 12);
	post_one(RIG_RECEIVE, 20);
	post_one(RIG_RECEIVE, 21);
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	fake_complete(f, RIG_SEND, 1, IBV_WC_WR_FLUSH_ERR);
	fake_complete(f, RIG_RECEIVE, 2, IBV_WC_WR_FLUSH_ERR);
	knew = rig__qp_broken(f->qp) != 0;
	cr_assert_eq(knew, f->evented);
	post_one(RIG_SEND, 13);
	post_one(RIG_RECEIVE, 22);
	cr_assert_eq(f->ring[RIG_SEND].nreq, knew ? 3 : 4);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, knew ? 2 : 3);

	why = expect(RIG_RECEIVE, -ETIMEDOUT, 0);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
	expect_failed(RIG_RECEIVE, 2, -ETIMEDOUT, why);
	expect_ok(RIG_SEND, 10);
	expect_failed(RIG_SEND, 3, -ETIMEDOUT, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
	/* Known now: a post reaches no NIC (F5). */
	post_one(RIG_SEND, 14);
	cr_assert_eq(f->ring[RIG_SEND].nreq, knew ? 3 : 4);
	expect_failed(RIG_SEND, 1, -ETIMEDOUT, why);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
}

Test(replay, F1_F5_F6_posts_after_the_nic_failed_the_qp)
{
	F1_F5_F6_posts_after_the_nic_failed_the_qp();
}

/* ------------------------------------------------ the scripts, per profile */

/*
 * Every script above again, on every provider profile (fake_verbs.h) that
 * can write its CQEs in its order, with the same verdict. Left out where
 * a profile cannot:
 *   - on rxe and mlx5, a flush, a success or a reason written after the
 *     queue pair's first error or flush: the NIC flushed every request
 *     it held then (NIC);
 *   - on bnxt_re, a reason that lands after the library read its ring
 *     empty: the flush lists flush the failing request in software at
 *     that read (bnxt_re_poll_flush_lists), and the provider has no
 *     request left to name when the error CQE lands; and a CQE naming a
 *     request the ring does not hold: the provider names the request
 *     itself, the oldest its queue holds (bnxt_re_poll_err_scqe), and an
 *     error CQE links the queue for flushing (BNXT);
 *   - with Linux 6.7 on, a flush or an error with no async event, or with
 *     another one than the kernel raises (bnxt_re_handle_qp_async_event),
 *     whose verdict is another (K67).
 */
#define ALL ((1u << FAKE_PROFILES) - 1)
#define BNXT ((1u << FAKE_BNXT_RE_44) | (1u << FAKE_BNXT_RE_44_K67) | \
	      (1u << FAKE_BNXT_RE_50) | (1u << FAKE_BNXT_RE_50_K67))
#define K67 ((1u << FAKE_BNXT_RE_44_K67) | (1u << FAKE_BNXT_RE_50_K67))
#define NIC ((1u << FAKE_RXE) | (1u << FAKE_MLX5))

static const struct script {
	const char *name;
	void (*run)(void);
	unsigned profiles;		/* 1 << enum fake_profile */
} scripts[] = {
#define SCRIPT(name, profiles) { #name, name, profiles }
	SCRIPT(F5_posts_to_a_failed_qp_carry_no_stale_cookie, ALL),
	SCRIPT(C1_Q1_refused_post_posts_nothing, ALL),
	SCRIPT(F5_F6_send_queued_but_its_doorbell_failed, ALL),
	SCRIPT(F5_F6_receive_queued_but_its_doorbell_failed, ALL),
	SCRIPT(Q1_send_batch_refused_part_way, ALL),
	SCRIPT(Q1_receive_batch_refused_part_way, ALL),
	SCRIPT(F5_F6_batch_queued_but_its_doorbell_failed, ALL),
	SCRIPT(F3_flush_before_its_reason_on_the_other_ring_receive_first, ALL & ~NIC),
	SCRIPT(F3_flush_before_its_reason_on_the_other_ring_send_first, ALL & ~NIC),
	SCRIPT(F3_reason_lands_after_its_ring_was_read_empty, ALL & ~BNXT & ~NIC),
	SCRIPT(F3_reason_lands_while_the_library_looks_for_it, ALL & ~BNXT & ~NIC),
	SCRIPT(F3_the_first_failure_is_kept, ALL),
	SCRIPT(F1_F3_async_event_replaces_a_bare_flush, ALL & ~K67),
	SCRIPT(F1_F3_error_cqe_then_its_async_event, ALL),
	SCRIPT(F1_F3_async_event_then_its_error_cqe, ALL),
	SCRIPT(F1_F2_error_cqe_after_the_event_was_applied_is_dropped, ALL),
	SCRIPT(F1_F3_peer_left_wins_over_an_unpolled_error_cqe, ALL & ~K67),
	SCRIPT(F1_T2_a_failure_the_rings_find_is_news_for_both, ALL),
	SCRIPT(F3_flushes_without_a_reason_report_ECANCELED, ALL & ~K67),
	SCRIPT(F6_error_on_one_ring_completes_the_quiet_other, ALL),
	SCRIPT(F1_F2_receive_with_immediate_data, ALL),
	SCRIPT(F1_F2_rdma_write_on_the_send_ring, ALL),
	SCRIPT(F1_F6_unreadable_cq, ALL),
	SCRIPT(Q2_cqe_for_no_due_entry_is_ignored, ALL & ~BNXT),
	SCRIPT(Q2_sequence_numbers_wrap, ALL),
	SCRIPT(F3_Q2_sequence_numbers_wrap_with_a_failure, ALL & ~NIC),
	SCRIPT(Q1_F5_room_frees_when_taken, ALL),
	SCRIPT(T1_F6_an_empty_poll_reads_one_cq, ALL),
	SCRIPT(F1_F5_F6_posts_after_the_nic_failed_the_qp, ALL),
#undef SCRIPT
};

static enum fake_profile every_profile[FAKE_PROFILES];

static struct criterion_test_params profiles(void)
{
	int i;

	for (i = 0; i < FAKE_PROFILES; i++)
		every_profile[i] = i;
	return cr_make_param_array(enum fake_profile, every_profile, FAKE_PROFILES);
}

ParameterizedTestParameters(replay, every_script_on_every_profile)
{
	return profiles();
}

ParameterizedTest(enum fake_profile *profile, replay, every_script_on_every_profile)
{
	size_t i;
	int runs = 0;

	for (i = 0; i < sizeof(scripts) / sizeof(scripts[0]); i++) {
		if (!(scripts[i].profiles & 1u << *profile))
			continue;
		fake_reset(f);
		fake_profile(f, *profile);
		cr_log_info("%s: %s", fake_profile_name[*profile], scripts[i].name);
		scripts[i].run();
		runs++;
	}
	cr_assert_geq(runs, 20, "%s: %d scripts", fake_profile_name[*profile], runs);
}

/* ------------------------------------------ rings deeper than the NIC */

/* Requests the fake NIC took on @side so far. */
static size_t taken(enum rig_side side)
{
	return f->ring[side].nreq;
}

/*
 * Q4: at depth 2, ten sends and ten receives: the NIC takes two of each,
 * and each completion read lets the next one go, in ring order, with the
 * lengths posted; a poll of one ring moves the other's (the fake fails
 * the test if the NIC ever holds more than 2 whose CQEs rig has not read).
 */
static void Q4_entries_beyond_the_depth_go_in_order(void)
{
	int i;

	fake_depth(f, 2);
	for (i = 0; i < 10; i++) {
		post_one(RIG_SEND, 100 + i);
		post_one(RIG_RECEIVE, 200 + i);
	}
	expect_room(RIG_SEND, RIG_RING_ENTRIES - 10);
	cr_assert_eq(taken(RIG_SEND), 2, "the NIC took %zu sends, not 2", taken(RIG_SEND));
	cr_assert_eq(taken(RIG_RECEIVE), 2, "the NIC took %zu receives", taken(RIG_RECEIVE));
	/* Two messages land; a poll of the send ring moves two receives. */
	fake_complete(f, RIG_RECEIVE, 2, IBV_WC_SUCCESS);
	expect_none(RIG_SEND);
	cr_assert_eq(taken(RIG_RECEIVE), 4, "a poll of the send ring moved %zu receives, not 2",
		     taken(RIG_RECEIVE) - 2);
	for (i = 0; i < 10; i++) {
		if (f->ring[RIG_SEND].next <= (size_t)i)
			fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
		expect_ok(RIG_SEND, 100 + i);
		if (f->ring[RIG_RECEIVE].next <= (size_t)i)
			fake_complete(f, RIG_RECEIVE, 1, IBV_WC_SUCCESS);
		expect_ok(RIG_RECEIVE, 200 + i);
	}
	for (i = 0; i < 10; i++) {
		cr_assert_eq(f->ring[RIG_SEND].req[i].wr_id, (uint64_t)i, "send %d went as %llu",
			     i, (unsigned long long)f->ring[RIG_SEND].req[i].wr_id);
		cr_assert_eq(f->ring[RIG_RECEIVE].req[i].length, 200u + i, "receive %d", i);
	}
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	/* Nothing waits: the inline path is back. */
	cr_assert_eq(f->q.pub.broken & RIG__WAITING_ANY, 0, "a RIG__WAITING bit still set");
}

/*
 * Q4, F3, F5: a failure with entries waiting on both rings. The NIC held
 * two of each; the first send succeeded, the second failed. Every other
 * entry of both rings, those the NIC held and those that never left the
 * ring, completes with the failure's error, in order; nothing more goes
 * to the NIC, and a post after the failure is accepted and completes the
 * same way (F5).
 */
static void Q4_F3_failure_completes_the_waiting_entries_in_order(void)
{
	const char *why;
	int i;

	fake_depth(f, 2);
	for (i = 0; i < 40; i++) {
		post_one(RIG_SEND, 10 + i);
		post_one(RIG_RECEIVE, 20);
	}
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	expect_ok(RIG_SEND, 10);
	why = expect(RIG_SEND, -ETIMEDOUT, 0);
	expect_failure(-ETIMEDOUT, IBV_WC_RETRY_EXC_ERR);
	post_one(RIG_SEND, 7);
	post_one(RIG_RECEIVE, 7);
	expect_failed(RIG_SEND, 39, -ETIMEDOUT, why);
	expect_failed(RIG_RECEIVE, 41, -ETIMEDOUT, why);
	expect_none(RIG_SEND);
	expect_none(RIG_RECEIVE);
	/* The NIC took one more send once the first CQE was read, no more. */
	cr_assert_leq(taken(RIG_SEND), 3, "%zu sends reached the NIC", taken(RIG_SEND));
	cr_assert_eq(taken(RIG_RECEIVE), 2, "%zu receives reached the NIC", taken(RIG_RECEIVE));
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
	expect_room(RIG_RECEIVE, RIG_RING_ENTRIES);
}

/* The same, the failure found first on the receive ring, by a poll of
 * the send ring (the reason is on the other ring, F3). */
static void Q4_F3_failure_on_the_receive_ring_found_by_the_send_ring(void)
{
	const char *why;
	int i;

	fake_depth(f, 3);
	for (i = 0; i < 30; i++) {
		post_one(RIG_SEND, 1);
		post_one(RIG_RECEIVE, 8);
	}
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_LOC_LEN_ERR);	/* a message too long */
	why = expect(RIG_SEND, -EMSGSIZE, 0);
	expect_failure(-EMSGSIZE, IBV_WC_LOC_LEN_ERR);
	expect_failed(RIG_SEND, 29, -EMSGSIZE, why);
	cr_assert_eq(expect(RIG_RECEIVE, -EMSGSIZE, 0), why, "the failing receive");
	expect_failed(RIG_RECEIVE, 29, -EMSGSIZE, why);
	expect_none(RIG_RECEIVE);
	cr_assert_eq(taken(RIG_SEND), 3, "%zu sends reached the NIC", taken(RIG_SEND));
	cr_assert_eq(taken(RIG_RECEIVE), 3, "%zu receives reached the NIC", taken(RIG_RECEIVE));
}

/* Q4, F1: an async event with entries waiting: they never reach the NIC
 * and complete with the event's error, after those the NIC held. */
static void Q4_F1_event_with_entries_waiting(void)
{
	static const char why[] = "QP_FATAL, injected";
	int i;

	fake_depth(f, 1);
	for (i = 0; i < 5; i++)
		post_one(RIG_SEND, 1);
	fake_event(f, EIO, why);
	post_one(RIG_SEND, 1);
	expect_failed(RIG_SEND, 6, -EIO, why);
	expect_none(RIG_SEND);
	cr_assert_eq(taken(RIG_SEND), 1, "%zu sends reached the NIC", taken(RIG_SEND));
}

/* Q4, C2: batches beyond the depth wait whole and keep their cookies;
 * room is the ring's (Q1), -ENOSPC only when the ring is full. */
static void Q4_batches_beyond_the_depth(void)
{
	struct rig_completion c[RIG_BATCH_MAX];
	uint64_t cookie[RIG_BATCH_MAX];
	struct rig_post p[RIG_BATCH_MAX];
	int i, n, got = 0;

	fake_depth(f, 3);
	batch(p, 10, 30, 1000);
	cr_assert_eq(rig_qp_send_batch(f->qp, p, 10), 10, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive_batch(f->qp, p, 10), 10, "%s", rig_errmsg());
	cr_assert_eq(taken(RIG_SEND), 3, "%zu sends", taken(RIG_SEND));
	cr_assert_eq(taken(RIG_RECEIVE), 3, "%zu receives", taken(RIG_RECEIVE));
	while (got < 10) {
		fake_complete(f, RIG_SEND, (int)(taken(RIG_SEND) - f->ring[RIG_SEND].next),
			      IBV_WC_SUCCESS);
		n = rig_qp_poll_batch(f->qp, RIG_SEND, c, cookie, RIG_BATCH_MAX);
		cr_assert_gt(n, 0, "poll_batch: %d (%s)", n, rig_errmsg());
		for (i = 0; i < n; i++, got++) {
			cr_assert_eq(c[i].error, 0, "entry %d failed", got);
			cr_assert_eq(c[i].bytes, 30u + got, "entry %d: %u bytes", got, c[i].bytes);
			cr_assert_eq(cookie[i], 1000u + got, "entry %d: cookie", got);
		}
	}
	for (i = 0; i < RIG_RING_ENTRIES - 10; i++)
		post_one(RIG_RECEIVE, 1);
	expect_room(RIG_RECEIVE, 0);
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 1), -ENOSPC, "a full ring");
	cr_assert_eq(taken(RIG_RECEIVE), 3, "%zu receives", taken(RIG_RECEIVE));
}

/* Q4, F2: a flush says the queue pair failed before its reason is seen:
 * the flushed entries' room goes to no waiting entry (the reason then
 * found, on the other ring, is the failure of them all, F3). */
static void Q4_F2_nothing_follows_a_flush(void)
{
	const char *why;
	int i;

	fake_depth(f, 2);
	for (i = 0; i < 6; i++)
		post_one(RIG_RECEIVE, 4);
	fake_complete(f, RIG_RECEIVE, 2, IBV_WC_WR_FLUSH_ERR);
	why = expect(RIG_RECEIVE, -ECANCELED, 0);
	expect_failed(RIG_RECEIVE, 5, -ECANCELED, why);
	expect_none(RIG_RECEIVE);
	cr_assert_eq(taken(RIG_RECEIVE), 2, "%zu receives reached the NIC", taken(RIG_RECEIVE));
}

/*
 * Q4, P1: a batch that fits in the NIC posted while the other ring has
 * entries waiting goes to the NIC at once, once: at depth 2, three
 * receives (one waits), then a batch of two sends, which the NIC takes.
 * Polls and a message move the waiting receive and nothing else: the
 * NIC took two sends, no more, each once, and both complete in order.
 * (The batch's sends went to the NIC while nothing waited on their ring;
 * a feed that took them for waiting ones would read requests never kept,
 * as test_vanish's control, run at RIG_QP_DEPTH=2, found: a crash.)
 */
static void Q4_P1_a_batch_that_fits_beside_a_waiting_ring(void)
{
	struct rig_post p[2];
	int i;

	fake_depth(f, 2);
	for (i = 0; i < 3; i++)
		post_one(RIG_RECEIVE, 16);
	batch(p, 2, 8, 500);
	cr_assert_eq(rig_qp_send_batch(f->qp, p, 2), 2, "%s", rig_errmsg());
	cr_assert_eq(taken(RIG_SEND), 2, "%zu sends", taken(RIG_SEND));
	expect_none(RIG_SEND);
	fake_message(f, 4);
	expect_ok(RIG_RECEIVE, 4);
	cr_assert_eq(taken(RIG_RECEIVE), 3, "%zu receives", taken(RIG_RECEIVE));
	expect_none(RIG_SEND);
	cr_assert_eq(taken(RIG_SEND), 2, "%zu sends reached the NIC", taken(RIG_SEND));
	fake_complete(f, RIG_SEND, 2, IBV_WC_SUCCESS);
	expect_ok(RIG_SEND, 8);
	expect_ok(RIG_SEND, 9);
	expect_none(RIG_SEND);
	cr_assert_eq(taken(RIG_SEND), 2, "%zu sends reached the NIC", taken(RIG_SEND));
}

/*
 * Q4: a ring with nothing waiting keeps the inline path while the other
 * ring's entries wait. At depth 8 (receives go in chains of two), twenty
 * receives: eight at the NIC, twelve waiting. The send ring's posts and
 * polls test no bit of the receive ring's; a poll of the send ring with
 * a send due and none completed moves the receives that eight messages
 * freed room for, all eight; a poll of the idle send ring returns at
 * once and moves nothing; the receive ring's own polls take inline until
 * the one whose take makes room for a chain, which moves it.
 */
static void Q4_a_ring_with_nothing_waiting_stays_inline(void)
{
	int i;

	fake_depth(f, 8);
	for (i = 0; i < 20; i++)
		post_one(RIG_RECEIVE, 4);
	cr_assert_eq(taken(RIG_RECEIVE), 8, "the NIC took %zu receives", taken(RIG_RECEIVE));
	cr_assert_neq(f->q.pub.broken & RIG__WAITING(RIG_RECEIVE), 0);
	cr_assert_eq(rig__qp_broken_for(f->qp, RIG_SEND), 0,
		     "the send ring's inline code sees broken 0x%x",
		     rig__qp_broken_for(f->qp, RIG_SEND));
	for (i = 0; i < 8; i++)
		fake_message(f, 4);
	post_one(RIG_SEND, 5);
	cr_assert_eq(taken(RIG_SEND), 1);
	expect_none(RIG_SEND);
	cr_assert_eq(taken(RIG_RECEIVE), 16, "a spinning send poll moved %zu receives, not 8",
		     taken(RIG_RECEIVE) - 8);
	for (i = 0; i < 8; i++)
		expect_ok(RIG_RECEIVE, 4);
	fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
	expect_ok(RIG_SEND, 5);
	fake_message(f, 4);
	fake_message(f, 4);
	expect_none(RIG_SEND);
	cr_assert_eq(taken(RIG_RECEIVE), 16, "a poll of the idle send ring moved receives");
	/* Inline: the NIC's queue has room for one receive once it is
	 * taken, and a move waits for a chain of two. */
	cr_assert_eq(rig__qp_poll_out(f->qp, RIG_RECEIVE), 0);
	expect_ok(RIG_RECEIVE, 4);
	cr_assert_eq(taken(RIG_RECEIVE), 16, "the inline receive poll moved %zu",
		     taken(RIG_RECEIVE) - 16);
	/* The poll whose take makes room for the chain goes out of line,
	 * takes it and moves the chain. */
	cr_assert_neq(rig__qp_poll_out(f->qp, RIG_RECEIVE), 0);
	expect_ok(RIG_RECEIVE, 4);
	cr_assert_eq(taken(RIG_RECEIVE), 18, "the receive poll moved %zu, not a chain of 2",
		     taken(RIG_RECEIVE) - 16);
	for (i = 0; i < 8; i++)
		cr_assert_eq(f->ring[RIG_RECEIVE].req[i].wr_id, (uint64_t)i);
	cr_assert_eq(f->ring[RIG_RECEIVE].req[17].wr_id, 17);
}

/*
 * Q4, C3: until a loop lists the queue pair's news, no thread but its
 * owner reads its CQs: the owner's polls take a waiting ring's
 * completions inline between moves, and the loop's hand-out
 * (rig__qp_feed) leaves the queue pair alone, since it would read a CQ
 * the owner reads without the lock. Once the loop lists, the owner's next
 * out-of-line call turns that off for good: every poll of the waiting
 * ring goes out of line, and a hand-out moves the entries itself,
 * reading the CQ. At depth 8 (chains of two), twenty receives: eight at
 * the NIC, twelve waiting.
 */
static void Q4_C3_a_listing_loop_takes_the_polls_out_of_line(void)
{
	struct rig_loop *loop = calloc(1, sizeof(*loop));
	int i;

	cr_assert_not_null(loop);
	f->q.loop = loop;
	fake_depth(f, 8);
	for (i = 0; i < 20; i++)
		post_one(RIG_RECEIVE, 4);
	cr_assert_eq(taken(RIG_RECEIVE), 8);
	cr_assert_eq(rig__qp_poll_out(f->qp, RIG_RECEIVE), 0, "no loop lists: inline");
	for (i = 0; i < 8; i++)
		fake_message(f, 4);
	__atomic_store_n(&loop->listing, true, __ATOMIC_RELEASE);
	rig__qp_feed(&f->q);
	cr_assert_eq(taken(RIG_RECEIVE), 8, "the hand-out read the owner's CQ");
	expect_ok(RIG_RECEIVE, 4);	/* inline */
	cr_assert_eq(taken(RIG_RECEIVE), 8);
	cr_assert_neq(rig__qp_poll_out(f->qp, RIG_RECEIVE), 0);
	expect_ok(RIG_RECEIVE, 4);	/* the refill: reads the CQ, moves 8 */
	cr_assert_eq(taken(RIG_RECEIVE), 16, "the refill moved %zu", taken(RIG_RECEIVE) - 8);
	for (i = 0; i < 6; i++) {
		cr_assert_neq(rig__qp_poll_out(f->qp, RIG_RECEIVE), 0, "poll %d inline", i);
		expect_ok(RIG_RECEIVE, 4);
	}
	cr_assert_eq(f->q.pub.ring[RIG_RECEIVE].ahead, 0);
	cr_assert_neq(rig__qp_poll_out(f->qp, RIG_RECEIVE), 0, "a listing loop: out of line");
	for (i = 0; i < 8; i++)
		fake_message(f, 4);
	rig__qp_feed(&f->q);
	cr_assert_eq(taken(RIG_RECEIVE), 20, "the hand-out moved %zu of 4",
		     taken(RIG_RECEIVE) - 16);
	for (i = 0; i < 8; i++)
		expect_ok(RIG_RECEIVE, 4);
	expect_none(RIG_RECEIVE);
	for (i = 0; i < 20; i++)
		cr_assert_eq(f->ring[RIG_RECEIVE].req[i].wr_id, (uint64_t)i);
	f->q.loop = NULL;
	free(loop);
}

static const struct script shallow_scripts[] = {
#define SCRIPT(name, profiles) { #name, name, profiles }
	SCRIPT(Q4_entries_beyond_the_depth_go_in_order, ALL),
	SCRIPT(Q4_F3_failure_completes_the_waiting_entries_in_order, ALL),
	SCRIPT(Q4_F3_failure_on_the_receive_ring_found_by_the_send_ring, ALL & ~NIC & ~BNXT),
	SCRIPT(Q4_F1_event_with_entries_waiting, ALL),
	SCRIPT(Q4_batches_beyond_the_depth, ALL),
	SCRIPT(Q4_F2_nothing_follows_a_flush, ALL & ~NIC & ~BNXT),
	SCRIPT(Q4_P1_a_batch_that_fits_beside_a_waiting_ring, ALL),
	SCRIPT(Q4_a_ring_with_nothing_waiting_stays_inline, ALL),
	SCRIPT(Q4_C3_a_listing_loop_takes_the_polls_out_of_line, ALL),
#undef SCRIPT
};

ParameterizedTestParameters(replay, Q4_shallow_scripts_on_every_profile)
{
	return profiles();
}

ParameterizedTest(enum fake_profile *profile, replay, Q4_shallow_scripts_on_every_profile)
{
	size_t i;

	for (i = 0; i < sizeof(shallow_scripts) / sizeof(shallow_scripts[0]); i++) {
		if (!(shallow_scripts[i].profiles & 1u << *profile))
			continue;
		fake_reset(f);
		fake_profile(f, *profile);
		cr_log_info("%s: %s", fake_profile_name[*profile], shallow_scripts[i].name);
		shallow_scripts[i].run();
	}
}

/* ---------------------------------------------------- generated orders */

/*
 * Every script of up to 6 CQEs over 3 sends and 3 receives: each ring's
 * CQEs are successes, then at most one error, then flushes (one error in
 * all: the first failure leaves none for a second), interleaved in every
 * order; the application polls one ring, the other or neither before the
 * first CQE and after each one, then takes all it can, starting with
 * either ring. The model checks each completion as it is taken:
 *   - Q2, T1: a ring's completions come in entry order; an entry whose
 *     success CQE the library read succeeds with its bytes;
 *   - F3, F6: once any error or flush is written, every entry completes,
 *     whether the NIC writes its CQE or not; an entry completed by the
 *     library itself (its ring's CQ held nothing for it when polled)
 *     ignores the CQE written for it later, and so do those after it;
 *   - F3: a failed completion carries the failure's error: -ECANCELED
 *     while no error CQE was written; the error's own entry, and every one
 *     taken after a completion carried it, the real one; -ECANCELED is
 *     only possible if a flush was written before the error;
 *   - rig_qp_failure agrees with the last failed completion; no success
 *     on a ring after one of its failures; rig_qp_room at every step.
 */
#define GEN_ENTRIES 3			/* per ring */
#define GEN_CQES (2 * GEN_ENTRIES)
/* A ring with len CQEs has 2 len + 1 scripts. */
#define GEN_RING_SCRIPTS ((GEN_ENTRIES + 1) * (GEN_ENTRIES + 1))

static const enum ibv_wc_status gen_status[2] = { IBV_WC_RETRY_EXC_ERR,
						  IBV_WC_LOC_LEN_ERR };
static const int gen_error[2] = { -ETIMEDOUT, -EMSGSIZE };

struct gen {
	/* the script */
	enum fake_profile profile;
	int ncqe;
	enum rig_side ring[GEN_CQES];
	char kind[GEN_CQES];		/* 's'uccess, 'e'rror or 'f'lush */
	char poll[GEN_CQES + 1];	/* before CQE 0, after each: '-', 'S', 'R' */
	enum rig_side drain;		/* the ring the final drain starts with */
	/* the model */
	char entry[2][GEN_ENTRIES + 1];	/* the kind of CQE written for each entry */
	int entries[2];			/* posted on each ring */
	int nreq[2];			/* of those, the NIC's */
	bool refused;			/* the provider refused a post (F1, F5) */
	int written[2], taken[2];
	int self_from[2];		/* first entry the library completes itself, or -1 */
	bool failed_seen[2];
	bool indicator;			/* an error or flush was written */
	bool error_written;
	bool flush_first;		/* a flush was written before the error */
	int real, real_status;		/* the script's error CQE, if any */
	bool real_seen;
	/* the kernel's async event (a _K67 profile): raised with the first
	 * error or flush; applied at the next poll, it is the failure unless
	 * an error CQE was written by then, and the written counts then
	 * bound what the library takes from the NIC (F2) */
	bool ev_raised, ev_applied, ev_record;
	int ev_error;
	int frozen[2];
	const char *why[3];		/* seen with -ECANCELED, the real error, the event's */
	char msg[160];
};

static uint32_t gen_bytes(enum rig_side side, int k)
{
	return side == RIG_SEND ? 10 + k : 20 + k;
}

static int gen_fail(struct gen *g, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int gen_fail(struct gen *g, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g->msg, sizeof(g->msg), fmt, ap);
	va_end(ap);
	return -1;
}

static int gen_check_room(struct gen *g)
{
	int side;

	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		if (rig_qp_room(f->qp, side) !=
		    RIG_RING_ENTRIES - (g->entries[side] - g->taken[side]))
			return gen_fail(g, "%s ring: room %d with %d taken",
					ring_name[side], rig_qp_room(f->qp, side),
					g->taken[side]);
	}
	return 0;
}

/* The errors a failed completion of entry @j may carry. */
static bool gen_error_ok(const struct gen *g, enum rig_side side, int j,
			 bool self, int error)
{
	if (g->ev_record)
		return error == g->ev_error;
	if (!g->error_written)
		return error == -ECANCELED;
	if ((!self && g->entry[side][j] == 'e') || g->real_seen || !g->flush_first)
		return error == g->real;
	return error == -ECANCELED || error == g->real;
}

/* Polls @side once: 1 if it took a completion, 0 if none, -1 if the
 * library and the model disagree. */
static int gen_poll(struct gen *g, enum rig_side side)
{
	int j = g->taken[side], want, ret, st, seen, wst;
	struct rig_completion c;
	bool self;

	/* Any poll applies an event: the CQs are read first (F1, F3). */
	if (g->ev_raised && !g->ev_applied) {
		g->ev_applied = true;
		g->ev_record = !g->error_written;
		g->frozen[RIG_SEND] = g->written[RIG_SEND];
		g->frozen[RIG_RECEIVE] = g->written[RIG_RECEIVE];
	}
	if (g->ev_record && j >= g->frozen[side] && j < g->entries[side] &&
	    (g->self_from[side] < 0 || g->self_from[side] > j))
		g->self_from[side] = j;	/* F2: later CQEs are dropped */
	if (j == g->entries[side]) {
		want = 0;
	} else if (g->self_from[side] >= 0 || j < g->written[side]) {
		want = 1;
	} else if (g->indicator) {
		/* F6: the library completes this one and all after it. */
		want = 1;
		g->self_from[side] = j;
	} else {
		want = 0;
	}
	ret = rig_qp_poll(f->qp, side, &c);
	if (ret != want)
		return gen_fail(g, "%s poll for entry %d gave %d, not %d",
				ring_name[side], j, ret, want);
	if (!ret)
		return gen_check_room(g);
	g->taken[side]++;
	self = g->self_from[side] >= 0 && j >= g->self_from[side];
	if (!self && g->entry[side][j] == 's') {
		if (g->failed_seen[side])
			return gen_fail(g, "%s entry %d: a success after a failure",
					ring_name[side], j);
		if (c.error || c.bytes != gen_bytes(side, j) || c.why)
			return gen_fail(g, "%s entry %d: error %d, %u bytes, not a success of %u",
					ring_name[side], j, c.error, c.bytes,
					gen_bytes(side, j));
		return gen_check_room(g) ? -1 : 1;
	}
	g->failed_seen[side] = true;
	if (!gen_error_ok(g, side, j, self, c.error) || !c.why)
		return gen_fail(g, "%s entry %d (%s): error %d",
				ring_name[side], j, self ? "the library's" : "the NIC's",
				c.error);
	seen = g->ev_record ? 2 : c.error == g->real;
	wst = seen == 2 ? -1 : seen ? g->real_status : IBV_WC_WR_FLUSH_ERR;
	/* A refusal, not a flush, may be the failure with no reason seen. */
	if (!seen && g->refused && rig_qp_failure(f->qp, &st) == c.error && st == -1)
		wst = -1;
	g->real_seen |= seen == 1;
	if (!g->why[seen])
		g->why[seen] = c.why;
	if (c.why != g->why[seen])
		return gen_fail(g, "%s entry %d: another reason for error %d",
				ring_name[side], j, c.error);
	if (rig_qp_failure(f->qp, &st) != c.error || st != wst)
		return gen_fail(g, "rig_qp_failure %d (status %d) after a completion with %d",
				rig_qp_failure(f->qp, NULL), st, c.error);
	return gen_check_room(g) ? -1 : 1;
}

/*
 * Has the NIC write CQE @i. A provider that flushed its entry already
 * (bnxt_re's flush lists) completed it as flushed: the model takes it as
 * a flush, with the flush already counted.
 */
static void gen_write(struct gen *g, int i)
{
	enum rig_side side = g->ring[i];
	int k = g->written[side]++, ok;

	g->entry[side][k] = g->kind[i];
	switch (g->kind[i]) {
	case 's':
		if (side == RIG_SEND)
			ok = fake_complete(f, side, 1, IBV_WC_SUCCESS);
		else
			ok = fake_message(f, gen_bytes(side, k));
		if (!ok)
			g->entry[side][k] = 'f';
		return;
	case 'e':
		if (!fake_complete(f, side, 1, gen_status[side])) {
			g->entry[side][k] = 'f';
			return;
		}
		g->error_written = true;
		break;
	default:
		fake_complete(f, side, 1, IBV_WC_WR_FLUSH_ERR);
		g->flush_first |= !g->error_written;
		break;
	}
	g->indicator = true;
	if (f->evented && !g->ev_raised) {
		g->ev_raised = true;
		g->ev_error = -f->q.event_error;
	}
}

static int gen_step(struct gen *g, char poll)
{
	if (poll == '-')
		return 0;
	return gen_poll(g, poll == 'S' ? RIG_SEND : RIG_RECEIVE) < 0 ? -1 : 0;
}

/* Takes what is left, ring after ring, until neither gives any. */
static int gen_drain(struct gen *g)
{
	enum rig_side side = g->drain;
	int idle, took, ret;

	for (idle = 0; idle < 2; side = !side) {
		took = 0;
		while ((ret = gen_poll(g, side)) == 1)
			took = 1;
		if (ret < 0)
			return -1;
		idle = took ? 0 : idle + 1;
	}
	return 0;
}

static int gen_end(struct gen *g)
{
	int side, want = 0, st, wst = -1;
	struct rig_completion c;

	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		if (g->taken[side] != (g->indicator ? g->entries[side] : g->written[side]))
			return gen_fail(g, "%s ring: %d taken in the end",
					ring_name[side], g->taken[side]);
	}
	if (g->ev_record) {
		want = g->ev_error;
	} else if (g->indicator) {
		want = g->real_seen ? g->real : -ECANCELED;
		wst = g->real_seen ? g->real_status : IBV_WC_WR_FLUSH_ERR;
	}
	if (!g->real_seen && g->refused && rig_qp_failure(f->qp, &st) == want && st == -1)
		wst = -1;
	if (rig_qp_failure(f->qp, &st) != want || st != wst)
		return gen_fail(g, "rig_qp_failure %d (status %d) in the end, not %d",
				rig_qp_failure(f->qp, NULL), st, want);
	if (!g->indicator)
		return 0;
	/* F5: a failed queue pair takes posts and fails them. */
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		if ((side == RIG_SEND ? rig_qp_send(f->qp, &f->r, 0, 1)
				      : rig_qp_receive(f->qp, &f->r, 0, 1)) ||
		    (int)f->ring[side].nreq != g->nreq[side] ||
		    rig_qp_poll(f->qp, side, &c) != 1 || c.error != want ||
		    rig_qp_poll(f->qp, side, &c) != 0)
			return gen_fail(g, "%s ring: a post after the failure",
					ring_name[side]);
	}
	return 0;
}

/*
 * F1, F5: the application posts a send and a receive once the NIC failed
 * the queue pair (after its first error or flush CQE and the poll after
 * it), before or after the library knows, as that poll went.
 * Each is accepted. Once the library knows, none reaches the NIC; before,
 * the NIC takes it, and the profile's provider and NIC do with it what they
 * do (a flush, nothing, or a refusal that fails the queue pair).
 */
static int gen_post_after_failure(struct gen *g)
{
	bool knew = rig_qp_failure(f->qp, NULL) ||
		    (rig__qp_broken(f->qp) & (RIG__FAILED | RIG__EVENT));
	int side, ret, before;

	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		before = (int)f->ring[side].nreq;
		ret = side == RIG_SEND ? rig_qp_send(f->qp, &f->r, 0, gen_bytes(side, GEN_ENTRIES))
				       : rig_qp_receive(f->qp, &f->r, 0, 40 + GEN_ENTRIES);
		if (ret)
			return gen_fail(g, "%s post after the NIC failed: %d %s",
					ring_name[side], ret, rig_errmsg());
		g->entries[side]++;
		g->nreq[side] = (int)f->ring[side].nreq;
		if (g->nreq[side] == before + !knew)
			continue;
		if (knew || g->nreq[side] != before || !rig_qp_failure(f->qp, NULL))
			return gen_fail(g, "%s post after the NIC failed: %d requests, not %d",
					ring_name[side], g->nreq[side], before + !knew);
		g->refused = true;	/* the provider's, and then it is a failure */
		knew = true;
	}
	return gen_check_room(g);
}

static int gen_run(struct gen *g)
{
	int i, k;
	bool posted = false;

	fake_reset(f);
	fake_profile(f, g->profile);
	for (k = 0; k < GEN_ENTRIES; k++) {
		if (rig_qp_send(f->qp, &f->r, 0, gen_bytes(RIG_SEND, k)) ||
		    rig_qp_receive(f->qp, &f->r, 0, 40 + k))
			return gen_fail(g, "post %d refused: %s", k, rig_errmsg());
	}
	memset(g->entry, 0, sizeof(g->entry));
	g->entries[0] = g->entries[1] = g->nreq[0] = g->nreq[1] = GEN_ENTRIES;
	g->refused = false;
	g->written[0] = g->written[1] = g->taken[0] = g->taken[1] = 0;
	g->self_from[0] = g->self_from[1] = -1;
	g->failed_seen[0] = g->failed_seen[1] = false;
	g->indicator = g->error_written = g->flush_first = g->real_seen = false;
	g->ev_raised = g->ev_applied = g->ev_record = false;
	g->why[0] = g->why[1] = g->why[2] = NULL;
	if (gen_step(g, g->poll[0]))
		return -1;
	for (i = 0; i < g->ncqe; i++) {
		gen_write(g, i);
		if (gen_check_room(g) || gen_step(g, g->poll[i + 1]))
			return -1;
		if (g->indicator && !posted) {
			posted = true;
			if (gen_post_after_failure(g))
				return -1;
		}
	}
	return gen_drain(g) || gen_end(g) ? -1 : 0;
}

/* Fails the test, naming the script and where the model disagreed. */
static void gen_report(const struct gen *g)
{
	char s[128];
	int i, n = 0;

	n += snprintf(s + n, sizeof(s) - n, "polls %c", g->poll[0]);
	for (i = 0; i < g->ncqe; i++)
		n += snprintf(s + n, sizeof(s) - n, " %c:%c %c", "SR"[g->ring[i]],
			      g->kind[i], g->poll[i + 1]);
	cr_assert_fail("%s: CQEs and %s, drain from %s: %s", fake_profile_name[g->profile],
		       s, ring_name[g->drain], g->msg);
}

/* Runs every poll schedule of the interleaving in @g, each with either
 * drain order; returns how many. Under a provider's profile, one drain
 * order a schedule (the schedules take turns): half the time, for six
 * profiles. */
static int gen_polls(struct gen *g)
{
	int schedules = 1, i, s, x, runs = 0;

	for (i = 0; i <= g->ncqe; i++)
		schedules *= 3;
	for (s = 0; s < schedules; s++) {
		for (i = 0, x = s; i <= g->ncqe; i++, x /= 3)
			g->poll[i] = "-SR"[x % 3];
		for (g->drain = RIG_SEND; g->drain <= RIG_RECEIVE; g->drain++) {
			if (g->profile != FAKE_PLAIN && g->drain != (enum rig_side)(s & 1))
				continue;
			if (gen_run(g))
				gen_report(g);
			runs++;
		}
	}
	return runs;
}

/* The CQE kinds of one ring: successes, at most one error, flushes. */
static int gen_ring_scripts(char out[][GEN_ENTRIES + 1])
{
	int len, e, a, n = 0;

	for (len = 0; len <= GEN_ENTRIES; len++) {
		for (e = 0; e <= (len > 0); e++) {
			for (a = 0; a + e <= len; a++) {
				memset(out[n], 'f', len);
				memset(out[n], 's', a);
				if (e)
					out[n][a] = 'e';
				out[n++][len] = 0;
			}
		}
	}
	return n;
}

ParameterizedTestParameters(replay, Q1_Q2_T1_F3_F5_F6_every_order_of_up_to_6_cqes)
{
	return profiles();
}

ParameterizedTest(enum fake_profile *profile, replay,
		  Q1_Q2_T1_F3_F5_F6_every_order_of_up_to_6_cqes, .timeout = 120)
{
	char ring[2][GEN_RING_SCRIPTS][GEN_ENTRIES + 1];
	int n, a, b, mask, i, ka, kb, runs = 0;
	struct gen g;

	g.profile = *profile;
	n = gen_ring_scripts(ring[RIG_SEND]);
	gen_ring_scripts(ring[RIG_RECEIVE]);
	for (a = 0; a < n; a++) {
		for (b = 0; b < n; b++) {
			int ls = (int)strlen(ring[RIG_SEND][a]);
			int lr = (int)strlen(ring[RIG_RECEIVE][b]);

			if (strchr(ring[RIG_SEND][a], 'e') && strchr(ring[RIG_RECEIVE][b], 'e'))
				continue;
			g.ncqe = ls + lr;
			g.real = strchr(ring[RIG_SEND][a], 'e') ? gen_error[RIG_SEND]
								: gen_error[RIG_RECEIVE];
			g.real_status = strchr(ring[RIG_SEND][a], 'e') ? gen_status[RIG_SEND]
								       : gen_status[RIG_RECEIVE];
			/* Each bit of mask: the next CQE is the send ring's. */
			for (mask = 0; mask < 1 << g.ncqe; mask++) {
				if (__builtin_popcount(mask) != ls)
					continue;
				for (i = ka = kb = 0; i < g.ncqe; i++) {
					g.ring[i] = mask & (1 << i) ? RIG_SEND : RIG_RECEIVE;
					g.kind[i] = mask & (1 << i) ? ring[RIG_SEND][a][ka++]
								    : ring[RIG_RECEIVE][b][kb++];
				}
				runs += gen_polls(&g);
			}
		}
	}
	cr_log_info("%s: %d runs", fake_profile_name[g.profile], runs);
}

/* ------------------------------------- M4: the far protection domain */

/* The lkey of every request the fake NIC took on @side is @lkey. */
static void expect_lkeys(enum rig_side side, size_t n, uint32_t lkey)
{
	size_t i;

	cr_assert_eq(f->ring[side].nreq, n, "%s ring: the NIC took %zu requests, not %zu",
		     ring_name[side], f->ring[side].nreq, n);
	for (i = 0; i < n; i++)
		cr_assert_eq(f->ring[side].req[i].lkey, lkey,
			     "%s ring, request %zu: lkey %#x, not %#x", ring_name[side], i,
			     f->ring[side].req[i].lkey, lkey);
}

/*
 * Every post of @far's queue pair, on every path, to a NIC @depth deep:
 * single posts (the inline hot path, and the slow path of a shallow
 * ring, whose entries wait and are fed later), and batches of each ring.
 * 2 sends, a batch of 2 sends, 2 receives, a batch of 2 receives: with
 * depth 2, the second half of each waits in the ring until the first
 * half completes and a poll feeds them.
 */
static void lkeys_of_every_post(bool far, uint32_t depth)
{
	uint32_t lkey = far ? FAKE_FAR_LKEY : FAKE_LKEY;
	struct rig_completion c;
	struct rig_post p[2];
	int side, i;

	fake_far(f, far);
	if (depth)
		fake_depth(f, depth);
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		post_one((enum rig_side)side, 10);
		post_one((enum rig_side)side, 11);
		batch(p, 2, 20, 1);
		cr_assert_eq(side == RIG_SEND ? rig_qp_send_batch(f->qp, p, 2)
					      : rig_qp_receive_batch(f->qp, p, 2), 2,
			     "%s batch: %s", ring_name[side], rig_errmsg());
	}
	for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
		for (i = 0; i < 4; i++) {
			if (side == RIG_SEND)
				fake_complete(f, RIG_SEND, 1, IBV_WC_SUCCESS);
			else
				fake_message(f, 5);
			cr_assert_eq(rig_qp_poll(f->qp, (enum rig_side)side, &c), 1,
				     "%s ring, entry %d: no completion", ring_name[side], i);
			cr_assert_eq(c.error, 0, "%s ring, entry %d: %d %s", ring_name[side],
				     i, c.error, c.why);
		}
		expect_lkeys((enum rig_side)side, 4, lkey);
	}
}

/* M4: a queue pair of the far domain posts with each region's far lkey,
 * on the inline hot path, the slow paths of a shallow ring and batches;
 * a near one with its lkey, as before. */
Test(replay, M4_far_qp_posts_carry_the_far_lkey_on_every_path)
{
	lkeys_of_every_post(true, 0);
}

Test(replay, M4_far_qp_posts_carry_the_far_lkey_shallow_rings)
{
	lkeys_of_every_post(true, 2);
}

Test(replay, M4_near_qp_posts_carry_the_near_lkey)
{
	lkeys_of_every_post(false, 2);
}

/* M4, P3: a far queue pair serves no reads, so it posts none: -EINVAL,
 * nothing posted. */
Test(replay, M4_P3_far_qp_read_is_EINVAL_posts_nothing)
{
	fake_far(f, true);
	cr_assert_eq(rig_qp_read(f->qp, &f->r, 0, &f->r, 64, 8), -EINVAL);
	cr_assert_eq(f->ring[RIG_SEND].nreq, 0);
	expect_room(RIG_SEND, RIG_RING_ENTRIES);
}

/*
 * rig_region_register, against ibv_reg_mr and ibv_dereg_mr of this file
 * (lib/region.c is linked into this program, so its calls come here):
 * what it registers in which protection domain, and what a refusal of
 * the second registration gives back.
 */
#define REG_MAX 8
static struct {
	int calls;		/* ibv_reg_mr calls */
	int refuse_at;		/* the call (1-based) refused, or 0 */
	int refuse_errno;
	struct ibv_pd *pd[REG_MAX];
	int access[REG_MAX];
	struct ibv_mr mr[REG_MAX];
	bool live[REG_MAX];
} reg;

/* verbs.h makes ibv_reg_mr a macro over the function of that name. */
struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	int i = reg.calls++;

	cr_assert_lt(i, REG_MAX);
	if (reg.calls == reg.refuse_at) {
		errno = reg.refuse_errno;
		return NULL;
	}
	reg.pd[i] = pd;
	reg.access[i] = access;
	reg.mr[i] = (struct ibv_mr){ .pd = pd, .addr = addr, .length = length,
				     .lkey = 0x100u + (uint32_t)i, .rkey = 0x200u + (uint32_t)i };
	reg.live[i] = true;
	return &reg.mr[i];
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	int i = (int)(mr - reg.mr);

	cr_assert(i >= 0 && i < REG_MAX && reg.live[i], "ibv_dereg_mr of an unknown MR");
	reg.live[i] = false;
	return 0;
}

static int reg_live(void)
{
	int i, n = 0;

	for (i = 0; i < REG_MAX; i++)
		n += reg.live[i];
	return n;
}

static struct ibv_pd near_pd, far_pd;

static void reg_setup(void)
{
	setup();
	memset(&reg, 0, sizeof(reg));
	f->nic.pd = &near_pd;
	f->nic.far_pd = &far_pd;
}

static void reg_teardown(void)
{
	rig__regions_free(&f->nic);
	teardown();
}

TestSuite(region, .init = reg_setup, .fini = reg_teardown);

/* M4: each region is registered in the near domain with remote read and
 * in the far one with local access only; its handle gives the near keys,
 * and the far lkey where a far queue pair looks for it. Deregistering
 * gives back both. */
Test(region, M4_registered_near_with_remote_read_and_far_with_none)
{
	static uint8_t mem[4096];
	struct rig_region *r;
	int ret = rig_region_register(&f->nic, mem, sizeof(mem), &r);

	cr_assert_eq(ret, 0, "rig_region_register: %d %s", ret, rig_errmsg());
	cr_assert_eq(reg.calls, 2, "%d registrations, not 2", reg.calls);
	cr_assert_eq(reg.pd[0], &near_pd);
	cr_assert_eq(reg.access[0], IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	cr_assert_eq(reg.pd[1], &far_pd);
	cr_assert_eq(reg.access[1], IBV_ACCESS_LOCAL_WRITE, "the far registration grants %#x",
		     reg.access[1]);
	cr_assert_eq(r->lkey, reg.mr[0].lkey);
	cr_assert_eq(r->rkey, reg.mr[0].rkey);
	cr_assert_eq(*(const uint32_t *)((const char *)r + rig__lkey_at(true)), reg.mr[1].lkey);
	cr_assert_eq(*(const uint32_t *)((const char *)r + rig__lkey_at(false)), reg.mr[0].lkey);
	cr_assert_eq(reg_live(), 2);
	cr_assert_eq(rig_region_deregister(r), 0, "%s", rig_errmsg());
	cr_assert_eq(reg_live(), 0, "%d registrations left", reg_live());
	cr_assert_eq(rig_region_deregister(r), -EINVAL);
}

/* C1, M1: a refusal of either registration returns its errno, names
 * ibv_reg_mr, and leaves nothing registered. */
static void refused_at(int call, int err)
{
	static uint8_t mem[4096];
	struct rig_region *r = (struct rig_region *)&r;
	int ret;

	reg.refuse_at = call;
	reg.refuse_errno = err;
	ret = rig_region_register(&f->nic, mem, sizeof(mem), &r);
	cr_assert_eq(ret, -err, "registration refused at call %d: %d, not %d", call, ret, -err);
	cr_assert_eq(reg.calls, call, "%d calls, not %d", reg.calls, call);
	cr_assert_eq(reg_live(), 0, "%d registrations left", reg_live());
	cr_assert_eq(r, (struct rig_region *)&r, "the out-pointer was written");
	cr_assert(strstr(rig_errmsg(), "ibv_reg_mr") && strstr(rig_errmsg(), strerror(err)),
		  "message: %s", rig_errmsg());
	cr_assert_eq(f->nic.regions.next, &f->nic.regions, "a region is listed");
}

Test(region, M4_C1_far_registration_refused_gives_back_the_near_one)
{
	refused_at(2, ENOMEM);
}

Test(region, C1_near_registration_refused_registers_nothing)
{
	refused_at(1, EFAULT);
}
