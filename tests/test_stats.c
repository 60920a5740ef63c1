/* SPDX-License-Identifier: MIT */
/*
 * rig_qp_stats and the log (rig_set_log, RIG_LOG), on the host: the
 * library's ring code (lib/ring.c, lib/errmsg.c) runs against the fake NIC
 * of tests/fake_verbs.c, whose CQEs the test scripts, so every count is
 * known exactly. What needs a device (rig_qp_wait's sleeps, async events
 * read from the NIC, the devices rig_nic_open passes over) is in
 * tests/test_info.c.
 */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
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

TestSuite(stats, .init = setup, .fini = teardown);

static struct rig_qp_stats stats(enum rig_side side)
{
	struct rig_qp_stats s = { .size = sizeof(s) };

	cr_assert_eq(rig_qp_stats(f->qp, side, &s), 0, "%s", rig_errmsg());
	cr_assert_eq(s.size, sizeof(s));
	return s;
}

static void expect_stats(enum rig_side side, uint32_t posted, uint32_t taken,
			 uint64_t full, uint64_t completed)
{
	struct rig_qp_stats s = stats(side);

	cr_assert_eq(s.posted, posted, "ring %d: posted %u, not %u", side, s.posted, posted);
	cr_assert_eq(s.taken, taken, "ring %d: taken %u, not %u", side, s.taken, taken);
	cr_assert_eq(s.due, posted - taken, "ring %d: due %u", side, s.due);
	cr_assert_eq(s.full, full, "ring %d: full %llu, not %llu", side,
		     (unsigned long long)s.full, (unsigned long long)full);
	cr_assert_eq(s.completed, completed, "ring %d: completed %llu, not %llu", side,
		     (unsigned long long)s.completed, (unsigned long long)completed);
	cr_assert_eq(s.slept, 0);
	cr_assert_eq(s.async_events, 0);
}

static void take(enum rig_side side, int error)
{
	struct rig_completion c;

	cr_assert_eq(rig_qp_poll(f->qp, side, &c), 1, "%s", rig_errmsg());
	cr_assert_eq(c.error, error, "error %d, not %d", c.error, error);
}

Test(stats, a_new_queue_pair_counts_nothing)
{
	expect_stats(RIG_SEND, 0, 0, 0, 0);
	expect_stats(RIG_RECEIVE, 0, 0, 0, 0);
}

/* Posts and takes are the ring's own sequence numbers; refusals for a
 * full ring count once each, single posts and batches alike, and only
 * on that ring. */
Test(stats, posted_taken_and_full_after_a_known_sequence)
{
	struct rig_post p[2] = { { &f->r, 0, 8, 0 }, { &f->r, 0, 8, 0 } };
	int i;

	for (i = 0; i < 3; i++)
		cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 16), 0);
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 16), 0);
	fake_complete(f, RIG_SEND, 2, IBV_WC_SUCCESS);
	take(RIG_SEND, 0);
	take(RIG_SEND, 0);
	expect_stats(RIG_SEND, 3, 2, 0, 0);
	expect_stats(RIG_RECEIVE, 1, 0, 0, 0);

	for (i = 3; i < RIG_RING_ENTRIES + 2; i++)
		cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 16), 0, "send %d", i);
	cr_assert_eq(rig_qp_room(f->qp, RIG_SEND), 0);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 16), -ENOSPC);
	cr_assert_eq(rig_qp_read(f->qp, &f->r, 0, &f->r, 64, 16), -ENOSPC);
	cr_assert_eq(rig_qp_send_batch(f->qp, p, 2), -ENOSPC);
	expect_stats(RIG_SEND, RIG_RING_ENTRIES + 2, 2, 3, 0);
	expect_stats(RIG_RECEIVE, 1, 0, 0, 0);
	/* A refusal for another reason is no full ring. */
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, FAKE_REGION_LEN + 1), -EINVAL);
	expect_stats(RIG_RECEIVE, 1, 0, 0, 0);
}

/* After a failure, the entries the NIC never completes are counted as
 * the library's own (F6), those the NIC did complete are not, and posts
 * to the failed queue pair (F5) join them. */
Test(stats, F6_entries_the_library_completed_after_a_failure)
{
	int i;

	for (i = 0; i < 4; i++)
		cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 64), 0);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 64), 0);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 64), 0);
	fake_message(f, 10);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	/* The second send is never completed by the NIC; nor are the three
	 * receives left. */
	take(RIG_SEND, -ETIMEDOUT);
	take(RIG_SEND, -ETIMEDOUT);
	expect_stats(RIG_SEND, 2, 2, 0, 1);
	take(RIG_RECEIVE, 0);
	for (i = 0; i < 3; i++)
		take(RIG_RECEIVE, -ETIMEDOUT);
	expect_stats(RIG_RECEIVE, 4, 4, 0, 3);
	/* F5: accepted, completed by the library. */
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 64), 0);
	take(RIG_RECEIVE, -ETIMEDOUT);
	expect_stats(RIG_RECEIVE, 5, 5, 0, 4);
	expect_stats(RIG_SEND, 2, 2, 0, 1);
}

/* What the backlog counts. */
static void expect_backlog(enum rig_side side, uint64_t waited, uint64_t ran_dry)
{
	struct rig_qp_stats s = stats(side);

	cr_assert_eq(s.waited, waited, "ring %d: waited %llu, not %llu", side,
		     (unsigned long long)s.waited, (unsigned long long)waited);
	cr_assert_eq(s.ran_dry, ran_dry, "ring %d: ran dry %llu times, not %llu", side,
		     (unsigned long long)s.ran_dry, (unsigned long long)ran_dry);
}

/*
 * Q4: at depth 2, five receives: two go to the NIC, three wait. Two
 * messages take both: the poll that reads their CQEs finds the NIC
 * holding no receive while three wait, and gives it two: once run dry.
 * One more message, one more receive given: the NIC held one, not dry.
 * The last two messages with nothing waiting: not dry either (the
 * application gave the ring no more). The send ring counts nothing.
 */
Test(stats, Q4_M3_receives_that_waited_and_a_receive_queue_run_dry)
{
	struct rig_completion c;
	int i;

	fake_depth(f, 2);
	for (i = 0; i < 5; i++)
		cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 64), 0, "%s", rig_errmsg());
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, 2);
	expect_backlog(RIG_RECEIVE, 3, 0);
	fake_message(f, 10);
	fake_message(f, 10);
	take(RIG_RECEIVE, 0);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, 4);
	expect_backlog(RIG_RECEIVE, 3, 1);
	take(RIG_RECEIVE, 0);
	cr_assert_eq(rig_qp_poll(f->qp, RIG_RECEIVE, &c), 0);
	fake_message(f, 10);
	take(RIG_RECEIVE, 0);
	cr_assert_eq(f->ring[RIG_RECEIVE].nreq, 5);
	expect_backlog(RIG_RECEIVE, 3, 1);
	fake_message(f, 10);
	fake_message(f, 10);
	take(RIG_RECEIVE, 0);
	take(RIG_RECEIVE, 0);
	expect_backlog(RIG_RECEIVE, 3, 1);
	expect_backlog(RIG_SEND, 0, 0);
	expect_stats(RIG_RECEIVE, 5, 5, 0, 0);
}

/*
 * Q4: a batch of five sends at depth 2 on an idle NIC waits whole and
 * the NIC gets two at once: five waited, and the NIC's empty queue is the
 * application's doing, not run dry. Once both complete and three wait,
 * the next poll finds it empty: run dry once.
 */
Test(stats, Q4_a_batch_over_the_depth_waits_and_is_not_run_dry)
{
	struct rig_post p[5];
	int i;

	for (i = 0; i < 5; i++)
		p[i] = (struct rig_post){ &f->r, 0, 8, 0 };
	fake_depth(f, 2);
	cr_assert_eq(rig_qp_send_batch(f->qp, p, 5), 5, "%s", rig_errmsg());
	cr_assert_eq(f->ring[RIG_SEND].nreq, 2);
	expect_backlog(RIG_SEND, 5, 0);
	fake_complete(f, RIG_SEND, 2, IBV_WC_SUCCESS);
	take(RIG_SEND, 0);
	cr_assert_eq(f->ring[RIG_SEND].nreq, 4);
	expect_backlog(RIG_SEND, 5, 1);
	expect_backlog(RIG_RECEIVE, 0, 0);
}

/* The size field: a smaller (older) structure gets what it names, a
 * bigger (newer) one its tail zeroed; bad arguments change nothing. */
Test(stats, size_and_bad_arguments)
{
	unsigned char buf[sizeof(struct rig_qp_stats) + 16];
	struct rig_qp_stats *s = (struct rig_qp_stats *)buf;
	size_t i;

	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 16), 0);
	memset(buf, 0xa5, sizeof(buf));
	s->size = 8;
	cr_assert_eq(rig_qp_stats(f->qp, RIG_SEND, s), 0);
	cr_assert_eq(s->size, 8);
	cr_assert_eq(s->posted, 1);
	for (i = 8; i < sizeof(buf); i++)
		cr_assert_eq(buf[i], 0xa5, "byte %zu written", i);

	memset(buf, 0xa5, sizeof(buf));
	s->size = sizeof(buf);
	cr_assert_eq(rig_qp_stats(f->qp, RIG_SEND, s), 0);
	cr_assert_eq(s->size, sizeof(struct rig_qp_stats));
	cr_assert_eq(s->posted, 1);
	for (i = sizeof(struct rig_qp_stats); i < sizeof(buf); i++)
		cr_assert_eq(buf[i], 0, "byte %zu not zeroed", i);

	memset(buf, 0xa5, sizeof(buf));
	s->size = 4;
	cr_assert_eq(rig_qp_stats(f->qp, RIG_SEND, s), -EINVAL);
	s->size = sizeof(*s);
	cr_assert_eq(rig_qp_stats(f->qp, 2, s), -EINVAL);
	cr_assert_eq(rig_qp_stats(NULL, RIG_SEND, s), -EINVAL);
	cr_assert_eq(rig_qp_stats(f->qp, RIG_SEND, NULL), -EINVAL);
	for (i = sizeof(s->size); i < sizeof(buf); i++)
		cr_assert_eq(buf[i], 0xa5, "byte %zu written", i);
}

/* ---------------------------------------------------------------- log */

static char lines[8][512];
static enum rig_log_level levels[8];
static int nlines;

static void collect(enum rig_log_level level, const char *line)
{
	if (nlines < 8) {
		levels[nlines] = level;
		snprintf(lines[nlines], sizeof(lines[0]), "%s", line);
	}
	nlines++;
}

/* One line per failure recorded, with the NIC, the queue pair, the error
 * and its cause; nothing for the completions that carry it later. */
Test(stats, log_a_failure_once_with_its_cause)
{
	cr_assert_eq(rig_set_log(collect, RIG_LOG_WARN), 0);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 64), 0);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 64), 0);
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 64), 0);
	fake_complete(f, RIG_SEND, 1, IBV_WC_REM_ACCESS_ERR);
	take(RIG_SEND, -EACCES);
	take(RIG_SEND, -EACCES);
	take(RIG_RECEIVE, -EACCES);
	cr_assert_eq(nlines, 1, "%d lines", nlines);
	cr_assert_eq(levels[0], RIG_LOG_WARN);
	cr_assert_str_eq(lines[0], "fake0: queue pair 0x000011 failed: Permission denied "
			 "(the peer refused access to its memory); an error completion");
}

/* A flush first, its reason later: two lines, the second says so. */
Test(stats, log_a_flush_then_its_reason)
{
	cr_assert_eq(rig_set_log(collect, RIG_LOG_DEBUG), 0);
	cr_assert_eq(rig_qp_receive(f->qp, &f->r, 0, 64), 0);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 64), 0);
	fake_complete(f, RIG_RECEIVE, 1, IBV_WC_WR_FLUSH_ERR);
	take(RIG_RECEIVE, -ECANCELED);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	take(RIG_SEND, -ETIMEDOUT);
	cr_assert_eq(nlines, 2, "%d lines: %s", nlines, lines[0]);
	cr_assert(strstr(lines[0], "failed: Operation canceled") &&
		  strstr(lines[0], "a flush, no reason seen"), "%s", lines[0]);
	cr_assert(strstr(lines[1], "failed, the reason of its flush found: Connection timed out"),
		  "%s", lines[1]);
}

/* Below its level a line is not made; a bad level changes nothing. */
Test(stats, log_levels)
{
	cr_assert_eq(rig_set_log(collect, RIG_LOG_OFF), 0);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 64), 0);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	take(RIG_SEND, -ETIMEDOUT);
	cr_assert_eq(nlines, 0);

	cr_assert_eq(rig_set_log(collect, RIG_LOG_WARN), 0);
	cr_assert_eq(rig_set_log(NULL, 4), -EINVAL);
	cr_assert_eq(rig_set_log(NULL, -1), -EINVAL);
	fake_reset(f);
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 64), 0);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	take(RIG_SEND, -ETIMEDOUT);
	cr_assert_eq(nlines, 1, "the bad calls changed the callback or level");
}

/* RIG_LOG, with no rig_set_log: stderr, "rig: LEVEL: line". Each test
 * runs in a process of its own, so RIG_LOG is read afresh here (the
 * suite's setup, which runs first, reads no level). */
static void log_env(void)
{
	setenv("RIG_LOG", "warn", 1);
	cr_redirect_stderr();
}

Test(stats, log_RIG_LOG_to_stderr, .init = log_env)
{
	cr_assert_eq(rig_qp_send(f->qp, &f->r, 0, 64), 0);
	fake_complete(f, RIG_SEND, 1, IBV_WC_RETRY_EXC_ERR);
	take(RIG_SEND, -ETIMEDOUT);
	fflush(stderr);
	cr_assert_stderr_eq_str("rig: warn: fake0: queue pair 0x000011 failed: Connection timed out "
				"(the peer did not acknowledge: transport retries exhausted); "
				"an error completion\n");
}
