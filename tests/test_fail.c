/* SPDX-License-Identifier: MIT */
/*
 * Failure on one device: queue pairs on the device under test, connected to
 * each other (rig(7) P4, F3, F5, F6, M3, D1, D2). Each test names the rules it
 * proves.
 *
 * The failure used throughout is a send longer than the peer's receive
 * (P4). On Soft-RoCE the receiver's entry gets LOC_QP_OP_ERR and the
 * sender's REM_OP_ERR, which lib/ring.c maps to -EIO and -EREMOTEIO; the
 * NIC flushes everything else of both queue pairs with WR_FLUSH_ERR, and
 * rig must report the first error instead (F3).
 *
 * Some tests need "the queue pair has failed at the NIC, and rig does not
 * know it yet" (nothing polled). They learn the NIC's state with
 * ibv_query_qp on the public ibqp field, a verbs call of the test's own,
 * never rig's. Two tests look into a ring's own CQ (public field cq) to
 * show that the NIC wrote nothing there; they only look while it must be
 * empty, so they take nothing from rig.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "t_device.h"

#define GOOD 200	/* the length of every send that fits */
#define LONG 200	/* the send that does not fit ... */
#define SHORT 64	/* ... the receive it meets */
#define ROOM 256	/* every other receive */
#define BUF 65536	/* each queue pair's buffer */
#define AT_RECV 32768	/* where a queue pair's receives land in its buffer */

static struct rig_nic *nic;
static struct rig_qp *a, *b;
static struct t_buf abuf, bbuf;

static void pair_setup(void)
{
	nic = t_nic_open(t_dev());
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
	t_buf(&abuf, nic, BUF, 11);
	t_buf(&bbuf, nic, BUF, 77);
}

static void pair_teardown(void)
{
	cr_assert_eq(rig_nic_close(nic), 0, "rig_nic_close: %s", rig_errmsg());
}

static void t_send(struct rig_qp *qp, const struct t_buf *buf, size_t at, size_t n)
{
	int ret = rig_qp_send(qp, buf->r, at, n);

	cr_assert_eq(ret, 0, "rig_qp_send(at %zu, %zu bytes): %d %s", at, n, ret,
		     rig_errmsg());
}

static void t_receive(struct rig_qp *qp, const struct t_buf *buf, size_t at, size_t n)
{
	int ret = rig_qp_receive(qp, buf->r, at, n);

	cr_assert_eq(ret, 0, "rig_qp_receive(at %zu, %zu bytes): %d %s", at, n, ret,
		     rig_errmsg());
}

/* The NIC's own idea of the queue pair's state (not rig's). */
static enum ibv_qp_state t_nic_state(struct rig_qp *qp)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	int ret = ibv_query_qp(qp->ibqp, &attr, IBV_QP_STATE, &init);

	cr_assert_eq(ret, 0, "ibv_query_qp: %d", ret);
	return attr.qp_state;
}

/*
 * Waits until the NIC has put the queue pair in ERR, polling its state for
 * at most 2 s; then lets the NIC finish its error handling. The state
 * changes first; the flush of the queue pair's receive queue runs after it
 * in a kernel task. The pause does not decide any outcome a test asserts
 * (a correct rig gives the same completions whether or not the flushes are
 * in the CQ yet): it makes sure the tests exercise the harder case, where
 * the NIC's bare flushes sit in the CQs before rig knows why.
 */
static void t_wait_nic_error(struct rig_qp *qp)
{
	double end = t_now_ms() + 2000;

	while (t_nic_state(qp) != IBV_QPS_ERR)
		cr_assert_lt(t_now_ms(), end, "the NIC did not fail the queue pair in 2 s");
	usleep(50 * 1000);
}

/* Asserts that poll of @side returns 0 on every call for the whole @ms. */
static void t_expect_nothing(struct rig_qp *qp, enum rig_side side, int ms)
{
	struct rig_completion c;
	double end = t_now_ms() + ms;
	int ret;

	do {
		ret = rig_qp_poll(qp, side, &c);
		cr_assert_eq(ret, 0, "the %s ring gave %d (error %d, %s) where nothing was due",
			     side == RIG_SEND ? "send" : "receive", ret,
			     ret == 1 ? c.error : 0, ret == 1 && c.why ? c.why : "-");
	} while (t_now_ms() < end);
}

/* Asserts that the NIC writes no completion into the ring's CQ for the
 * whole @ms: the ring's entries never reached the NIC, or the NIC will
 * never complete them. Only for a CQ that must stay empty. */
static void t_expect_empty_cq(struct rig_qp *qp, enum rig_side side, int ms)
{
	struct ibv_wc wc;
	double end = t_now_ms() + ms;
	int n;

	do {
		n = ibv_poll_cq(qp->ring[side].cq, 1, &wc);
		cr_assert_eq(n, 0, "the NIC completed an entry of the %s ring (status %s)",
			     side == RIG_SEND ? "send" : "receive",
			     n == 1 ? ibv_wc_status_str(wc.status) : "?");
	} while (t_now_ms() < end);
}

/* One completion a test expects: error 0 with its bytes, or an error. */
struct t_want {
	int error;
	uint32_t bytes;
};
#define OK(n) { 0, (n) }
#define FAIL(e) { -(e), 0 }

static const char *t_errname(int error)
{
	static char num[16];

	switch (error) {
	case -EIO: return "-EIO";
	case -EREMOTEIO: return "-EREMOTEIO";
	case -ETIMEDOUT: return "-ETIMEDOUT";
	case -ECANCELED: return "-ECANCELED";
	case -EPROTO: return "-EPROTO";
	default:
		snprintf(num, sizeof(num), "%d", error);
		return num;
	}
}

static void t_show(char *s, size_t size, int error, uint32_t bytes)
{
	size_t len = strlen(s);

	if (error)
		snprintf(s + len, size - len, " %s", t_errname(error));
	else
		snprintf(s + len, size - len, " ok/%u", bytes);
}

/*
 * Takes @n completions of a ring, each within 2 s, and checks them against
 * @want in order (Q2, F3). Every failed one must carry a reason, and the
 * very same one (pointer and so text) as *@why; a NULL *@why is set from
 * the first failed completion. The message on a mismatch shows the whole
 * sequence taken; it does not end the test, so that the rings taken after
 * a mismatch show what they report too.
 */
static void t_take_seq(struct rig_qp *qp, enum rig_side side, const struct t_want *want,
		       int n, const char **why, const char *what)
{
	char got[1024] = "", exp[1024] = "", bad[256] = "";
	struct rig_completion c;
	int i, ret;

	for (i = 0; i < n; i++) {
		double end = t_now_ms() + 2000;

		while ((ret = rig_qp_poll(qp, side, &c)) == 0 && t_now_ms() < end)
			;
		cr_assert_geq(ret, 0, "%s: rig_qp_poll: %d %s", what, ret, rig_errmsg());
		t_show(exp, sizeof(exp), want[i].error, want[i].bytes);
		if (ret == 0) {
			strcat(got, " (none in 2 s)");
			break;
		}
		t_show(got, sizeof(got), c.error, c.bytes);
		if (c.error == 0 && c.why && !*bad)
			snprintf(bad, sizeof(bad), "entry %d: error 0 with a why", i);
		if (c.error != 0 && !c.why && !*bad)
			snprintf(bad, sizeof(bad), "entry %d: error %d with a NULL why", i, c.error);
		if (c.error != 0 && c.why) {
			if (!*why)
				*why = c.why;
			else if (c.why != *why && !*bad)
				snprintf(bad, sizeof(bad), "entry %d: why \"%s\", not \"%s\"",
					 i, c.why, *why);
		}
	}
	for (i++; i < n; i++)
		t_show(exp, sizeof(exp), want[i].error, want[i].bytes);
	cr_expect_str_eq(got, exp, "%s: got [%s ], want [%s ]", what, got, exp);
	cr_expect_str_empty(bad, "%s: %s", what, bad);
}

static void t_expect_room(struct rig_qp *qp, int send, int receive)
{
	cr_assert_eq(rig_qp_room(qp, RIG_SEND), send);
	cr_assert_eq(rig_qp_room(qp, RIG_RECEIVE), receive);
}

/*
 * P4, F3, F5, F6. B posts four receives, the second too short; A sends
 * four messages, the second too long; A has two extra receives. Once the
 * NIC has failed both queue pairs, but before anything was polled, B posts
 * two sends (which the NIC only flushes). Each ring keeps its order: the
 * entries before the failing one keep their result and bytes, the failing
 * one carries its error, every later one of both rings of that queue pair
 * completes with it and the same reason. Posts after rig knows are accepted
 * and complete the same way, receives included (the NIC would never
 * complete those, F6). Taken in the natural order: the failing ring first.
 * CI runs it under valgrind in the emulated guest too (tests/run-all's
 * races job): 52 s on a quiet host, past 60 on a loaded one, so its bound
 * is 240 s, which only a hang reaches.
 */
Test(fail, P4_F3_F5_F6_too_long_send_fails_both, .init = pair_setup,
     .fini = pair_teardown, .timeout = 240)
{
	static const struct t_want a_send[] = { OK(GOOD), FAIL(EREMOTEIO), FAIL(EREMOTEIO),
						FAIL(EREMOTEIO) };
	static const struct t_want b_receive[] = { OK(GOOD), FAIL(EIO), FAIL(EIO), FAIL(EIO) };
	static const struct t_want a_receive[] = { FAIL(EREMOTEIO), FAIL(EREMOTEIO) };
	static const struct t_want b_send[] = { FAIL(EIO), FAIL(EIO) };
	static const struct t_want a_late[] = { FAIL(EREMOTEIO), FAIL(EREMOTEIO) };
	static const struct t_want b_late[] = { FAIL(EIO), FAIL(EIO) };
	const char *a_why = NULL, *b_why = NULL;
	int i, status;

	memset(bbuf.mem + AT_RECV, 0, BUF - AT_RECV);
	for (i = 0; i < 4; i++)
		t_receive(b, &bbuf, AT_RECV + i * ROOM, i == 1 ? SHORT : ROOM);
	t_receive(a, &abuf, AT_RECV, ROOM);
	t_receive(a, &abuf, AT_RECV + ROOM, ROOM);
	for (i = 0; i < 4; i++)
		t_send(a, &abuf, i * GOOD, i == 1 ? LONG : GOOD);

	t_wait_nic_error(a);
	t_wait_nic_error(b);
	t_send(b, &bbuf, 0, GOOD);
	t_send(b, &bbuf, GOOD, GOOD);
	t_expect_room(a, RIG_RING_ENTRIES - 4, RIG_RING_ENTRIES - 2);
	t_expect_room(b, RIG_RING_ENTRIES - 2, RIG_RING_ENTRIES - 4);

	t_take_seq(a, RIG_SEND, a_send, 4, &a_why, "A's send ring");
	t_take_seq(b, RIG_RECEIVE, b_receive, 4, &b_why, "B's receive ring");
	cr_assert_arr_eq(bbuf.mem + AT_RECV, abuf.mem, GOOD, "the first message is not intact");
	t_take_seq(a, RIG_RECEIVE, a_receive, 2, &a_why, "A's receive ring");
	t_take_seq(b, RIG_SEND, b_send, 2, &b_why, "B's send ring");
	cr_assert_str_neq(a_why, "", "A's why is empty");
	cr_assert_str_neq(b_why, "", "B's why is empty");
	t_expect_room(a, RIG_RING_ENTRIES, RIG_RING_ENTRIES);
	t_expect_room(b, RIG_RING_ENTRIES, RIG_RING_ENTRIES);
	/* The verbs status behind each side's failure stays reachable. */
	cr_assert_eq(rig_qp_failure(a, &status), -EREMOTEIO);
	cr_assert_eq(status, IBV_WC_REM_OP_ERR);
	cr_assert_eq(rig_qp_failure(b, &status), -EIO);
	cr_assert_eq(status, IBV_WC_LOC_QP_OP_ERR);

	/* F5: a failed queue pair stays failed and takes posts. */
	for (i = 0; i < 2; i++) {
		t_send(a, &abuf, 0, GOOD);
		t_receive(a, &abuf, AT_RECV, ROOM);
		t_send(b, &bbuf, 0, GOOD);
		t_receive(b, &bbuf, AT_RECV, ROOM);
	}
	t_expect_room(a, RIG_RING_ENTRIES - 2, RIG_RING_ENTRIES - 2);
	t_expect_room(b, RIG_RING_ENTRIES - 2, RIG_RING_ENTRIES - 2);
	t_take_seq(a, RIG_RECEIVE, a_late, 2, &a_why, "A's receive ring after the failure");
	t_take_seq(a, RIG_SEND, a_late, 2, &a_why, "A's send ring after the failure");
	t_take_seq(b, RIG_RECEIVE, b_late, 2, &b_why, "B's receive ring after the failure");
	t_take_seq(b, RIG_SEND, b_late, 2, &b_why, "B's send ring after the failure");
	t_expect_room(a, RIG_RING_ENTRIES, RIG_RING_ENTRIES);
	t_expect_room(b, RIG_RING_ENTRIES, RIG_RING_ENTRIES);
	t_expect_nothing(a, RIG_SEND, 0);
	t_expect_nothing(a, RIG_RECEIVE, 0);
	t_expect_nothing(b, RIG_SEND, 0);
	t_expect_nothing(b, RIG_RECEIVE, 0);
}

/*
 * F3, ring order. A sends three messages after a good one, the second too
 * long for B's receive; A has two receives of its own. Once the NIC has
 * failed both, the test takes A's rings in one order or the other. Either
 * way the result is the same: the receive ring reports A's failure
 * (-EREMOTEIO, the too-long send's sender error, found on the send ring),
 * not a bare flush, and the send ring reports the good send, the failing
 * one, then the failure.
 */
static const struct t_want order_send[] = { OK(GOOD), FAIL(EREMOTEIO), FAIL(EREMOTEIO),
					    FAIL(EREMOTEIO) };
static const struct t_want order_receive[] = { FAIL(EREMOTEIO), FAIL(EREMOTEIO) };

static void t_order_fail(void)
{
	int i;

	for (i = 0; i < 4; i++)
		t_receive(b, &bbuf, AT_RECV + i * ROOM, i == 1 ? SHORT : ROOM);
	t_receive(a, &abuf, AT_RECV, ROOM);
	t_receive(a, &abuf, AT_RECV + ROOM, ROOM);
	for (i = 0; i < 4; i++)
		t_send(a, &abuf, i * GOOD, i == 1 ? LONG : GOOD);
	t_wait_nic_error(a);
	t_wait_nic_error(b);
}

static void t_order(int receive_first)
{
	const char *why = NULL;

	t_order_fail();
	if (receive_first) {
		t_take_seq(a, RIG_RECEIVE, order_receive, 2, &why, "A's receive ring, taken first");
		t_take_seq(a, RIG_SEND, order_send, 4, &why, "A's send ring, taken second");
	} else {
		t_take_seq(a, RIG_SEND, order_send, 4, &why, "A's send ring, taken first");
		t_take_seq(a, RIG_RECEIVE, order_receive, 2, &why, "A's receive ring, taken second");
	}
	t_expect_room(a, RIG_RING_ENTRIES, RIG_RING_ENTRIES);
}

Test(fail, F3_ring_order_send_ring_first, .init = pair_setup, .fini = pair_teardown,
     .timeout = 60)
{
	t_order(0);
}

Test(fail, F3_ring_order_receive_ring_first, .init = pair_setup, .fini = pair_teardown,
     .timeout = 60)
{
	t_order(1);
}

/* The same two runs, one after the other on two fresh pairs, compared
 * entry by entry: error, bytes and the text of the reason. */
Test(fail, F3_ring_order_both_orders_agree, .init = pair_setup, .fini = pair_teardown,
     .timeout = 60)
{
	struct rig_completion c[2][6];	/* A's send entries 0-3, receives 0-1 */
	int run, i;

	for (run = 0; run < 2; run++) {
		if (run == 1) {
			a = t_qp(nic);
			b = t_qp(nic);
			t_connect(a, b);
		}
		t_order_fail();
		for (i = 0; i < 6; i++) {
			/* run 0: send ring first; run 1: receive ring first */
			int k = run == 0 ? i : (i + 4) % 6;

			c[run][k] = t_take(a, k < 4 ? RIG_SEND : RIG_RECEIVE, 2000);
		}
	}
	for (i = 0; i < 6; i++) {
		const char *w0 = c[0][i].why ? c[0][i].why : "NULL";
		const char *w1 = c[1][i].why ? c[1][i].why : "NULL";

		cr_expect(c[0][i].error == c[1][i].error && c[0][i].bytes == c[1][i].bytes &&
			  !strcmp(w0, w1),
			  "A's %s entry %d: send ring first gave %s/%u (%s), receive ring first %s/%u (%s)",
			  i < 4 ? "send" : "receive", i < 4 ? i : i - 4,
			  t_errname(c[0][i].error), c[0][i].bytes, w0,
			  t_errname(c[1][i].error), c[1][i].bytes, w1);
	}
}

/*
 * F6, the quiet ring. A's send fails at the NIC; only then, before rig has
 * polled anything, A posts a receive. Soft-RoCE never completes it (the
 * test watches A's receive CQ stay empty for 300 ms), yet polling only the
 * receive ring delivers A's failure for it: rig finds the failure on the
 * other ring. The send ring then still reports its entries in order.
 */
Test(fail, F6_quiet_receive_ring_gets_the_failure, .init = pair_setup,
     .fini = pair_teardown, .timeout = 60)
{
	static const struct t_want quiet[] = { FAIL(EREMOTEIO) };
	static const struct t_want send[] = { OK(GOOD), FAIL(EREMOTEIO) };
	const char *why = NULL;

	t_receive(b, &bbuf, AT_RECV, ROOM);
	t_receive(b, &bbuf, AT_RECV + ROOM, SHORT);
	t_send(a, &abuf, 0, GOOD);
	t_send(a, &abuf, GOOD, LONG);
	t_wait_nic_error(a);
	t_receive(a, &abuf, AT_RECV, ROOM);
	t_expect_empty_cq(a, RIG_RECEIVE, 300);

	t_take_seq(a, RIG_RECEIVE, quiet, 1, &why, "A's quiet receive ring");
	t_take_seq(a, RIG_SEND, send, 2, &why, "A's send ring, taken after");
	t_expect_room(a, RIG_RING_ENTRIES, RIG_RING_ENTRIES);
}

/*
 * M3, RNR. A's send goes out 100 ms before B posts the receive it needs;
 * the send waits (its ring polls empty the whole time: a dozen RNR
 * resends, 8 ms apart on Soft-RoCE) and then succeeds, its bytes intact.
 * 100 ms, not more: Soft-RoCE counts an RNR wait against the transport
 * retries and so caps it at ~475 ms (rig(7) M3), and on a busy machine the
 * receive may be posted well after the 100 ms.
 */
Test(fail, M3_rnr_send_100ms_before_receive_succeeds, .init = pair_setup,
     .fini = pair_teardown, .timeout = 60)
{
	static const struct t_want ok[] = { OK(1000) };
	const char *why = NULL;

	double t0, ms;

	memset(bbuf.mem, 0, 1000);
	t_send(a, &abuf, 0, 1000);
	t_expect_nothing(a, RIG_SEND, 100);
	t0 = t_now_ms();
	t_receive(b, &bbuf, 0, 4096);
	t_take_seq(b, RIG_RECEIVE, ok, 1, &why, "B's receive ring");
	/* The min RNR timer sets how soon the waiting send tries again:
	 * rig's 12 is 0.64 ms (Soft-RoCE rounds it to its 8 ms period,
	 * measured 8.7-12.4 ms); 0 would be 655 ms. The bound tells the two
	 * apart with room for a busy machine, and no more. */
	ms = t_now_ms() - t0;
	cr_log_info("the send landed %.1f ms after its receive was posted", ms);
	cr_assert_lt(ms, 400.0, "the send landed %.1f ms after its receive", ms);
	t_take_seq(a, RIG_SEND, ok, 1, &why, "A's send ring");
	cr_assert_arr_eq(bbuf.mem, abuf.mem, 1000, "the message is not intact");
}

/*
 * Sends one message from @qp to a peer that is gone, and checks it fails
 * with -ETIMEDOUT only after its retries: 7 tries (retry count 6 on
 * Soft-RoCE) x 67 ms = ~470 ms (measured 473-477 ms), 8 x 67 = ~540 ms on
 * IBTA devices. The window [400, 3000] ms allows a first retry interval cut
 * short by a timer an earlier send armed and the guest's 4 ms jiffies
 * (measured: at least 6 x 67 ms), and a slow emulated guest; it still
 * tells "after the retries" from "at once" (a local error) and from
 * "never" (retry count 7 on Soft-RoCE).
 */
static double t_send_to_dead_peer(struct rig_qp *qp, const struct t_buf *buf)
{
	struct rig_completion c;
	double t0, ms;

	t0 = t_now_ms();
	t_send(qp, buf, 0, 64);
	c = t_take(qp, RIG_SEND, 5000);
	ms = t_now_ms() - t0;
	cr_assert_eq(c.error, -ETIMEDOUT, "error %d (%s), want -ETIMEDOUT after %.1f ms",
		     c.error, c.why ? c.why : "no why", ms);
	cr_assert_not_null(c.why);
	cr_assert(ms >= 400 && ms <= 3000, "failed after %.1f ms, want 400..3000", ms);
	cr_log_info("send to a dead peer failed after %.1f ms", ms);
	return ms;
}

/* M3, dead peer: B is destroyed; A's send fails after its retries. */
Test(fail, M3_dead_peer_send_times_out_after_retries, .init = pair_setup,
     .fini = pair_teardown, .timeout = 60)
{
	cr_assert_eq(rig_qp_destroy(b), 0, "rig_qp_destroy: %s", rig_errmsg());
	t_send_to_dead_peer(a, &abuf);
}

/*
 * D1, D2. A is destroyed with entries outstanding on both rings: two
 * receives nobody sends to, two sends stuck on RNR (B has no receive), and
 * destroy returns 0. B, which then only receives, notices nothing: both its
 * rings poll empty for a whole second, twice the retry budget. B's sends
 * then fail with -ETIMEDOUT after their retries, and its receives with the
 * same failure (F3).
 */
Test(fail, D1_D2_destroy_with_entries_outstanding, .init = pair_setup,
     .fini = pair_teardown, .timeout = 60)
{
	static const struct t_want failed[] = { FAIL(ETIMEDOUT), FAIL(ETIMEDOUT) };
	const char *why = NULL;

	t_receive(a, &abuf, AT_RECV, ROOM);
	t_receive(a, &abuf, AT_RECV + ROOM, ROOM);
	t_send(a, &abuf, 0, GOOD);
	t_send(a, &abuf, GOOD, GOOD);
	t_expect_nothing(a, RIG_SEND, 20);
	cr_assert_eq(rig_qp_destroy(a), 0, "rig_qp_destroy: %s", rig_errmsg());

	t_receive(b, &bbuf, AT_RECV, ROOM);
	t_receive(b, &bbuf, AT_RECV + ROOM, ROOM);
	t_expect_nothing(b, RIG_RECEIVE, 1000);
	t_expect_nothing(b, RIG_SEND, 0);
	t_expect_room(b, RIG_RING_ENTRIES, RIG_RING_ENTRIES - 2);

	t_send_to_dead_peer(b, &bbuf);
	t_send(b, &bbuf, 0, GOOD);
	t_send(b, &bbuf, GOOD, GOOD);
	t_take_seq(b, RIG_SEND, failed, 2, &why, "B's later sends");
	t_take_seq(b, RIG_RECEIVE, failed, 2, &why, "B's receives");
	t_expect_room(b, RIG_RING_ENTRIES, RIG_RING_ENTRIES);
}

/*
 * F5, Q1, after the failure, without the NIC. Once rig knows A failed, a
 * ring takes exactly 4095 posts and refuses the 4096th with -ENOSPC; none
 * of them reaches the NIC (no flush ever shows in the send CQ), and all
 * complete, in order, with the failure's error and reason.
 */
static void t_fill_failed_ring(enum rig_side side, const char **why)
{
	struct rig_completion c;
	int i, ret;

	for (i = 0; i < RIG_RING_ENTRIES; i++) {
		ret = side == RIG_SEND ? rig_qp_send(a, abuf.r, 0, i % 300)
				       : rig_qp_receive(a, abuf.r, AT_RECV, i % 300);
		cr_assert_eq(ret, 0, "post %d: %d %s", i, ret, rig_errmsg());
	}
	cr_assert_eq(rig_qp_room(a, side), 0);
	ret = side == RIG_SEND ? rig_qp_send(a, abuf.r, 0, 1)
			       : rig_qp_receive(a, abuf.r, AT_RECV, 1);
	cr_assert_eq(ret, -ENOSPC, "post 4096: %d, want -ENOSPC", ret);
	cr_assert_eq(rig_qp_room(a, side), 0, "a refused post took room");
	t_expect_empty_cq(a, side, 200);

	for (i = 0; i < RIG_RING_ENTRIES; i++) {
		c = t_take(a, side, 2000);
		cr_assert_eq(c.error, -EREMOTEIO, "entry %d: error %d", i, c.error);
		cr_assert_eq(c.why, *why, "entry %d: why \"%s\"", i, c.why ? c.why : "NULL");
		cr_assert_eq(rig_qp_room(a, side), i + 1);
	}
	t_expect_nothing(a, side, 0);
}

Test(fail, F5_Q1_full_ring_after_failure_never_reaches_the_nic, .init = pair_setup,
     .fini = pair_teardown, .timeout = 120)
{
	static const struct t_want send[] = { OK(GOOD), FAIL(EREMOTEIO) };
	const char *why = NULL;

	t_receive(b, &bbuf, AT_RECV, ROOM);
	t_receive(b, &bbuf, AT_RECV + ROOM, SHORT);
	t_send(a, &abuf, 0, GOOD);
	t_send(a, &abuf, GOOD, LONG);
	t_take_seq(a, RIG_SEND, send, 2, &why, "A's send ring");
	t_expect_room(a, RIG_RING_ENTRIES, RIG_RING_ENTRIES);

	t_fill_failed_ring(RIG_SEND, &why);
	t_fill_failed_ring(RIG_RECEIVE, &why);
	t_expect_room(a, RIG_RING_ENTRIES, RIG_RING_ENTRIES);
}
