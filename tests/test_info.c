/* SPDX-License-Identifier: MIT */
/*
 * What rig tells of itself, on a device: rig_nic_query's pick, the
 * counters of rig_qp_stats that need a device (waits that slept, async
 * events) and the log lines of opening a NIC and of async events. The
 * ring counters and the failure lines are in tests/test_stats.c, on the
 * fake NIC; the devices rig passes over in tests/rig-info-test.
 *
 * Async events are injected as tests/test_event.c does: a pipe in place
 * of the context's async fd, in a child that never destroys its queue
 * pairs (ibv_destroy_qp would wait for an event the kernel never sent).
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <rdma/ib_user_verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t_device.h"

static const char *gid_index_env(void)
{
	const char *v = getenv("RIG_TEST_GID_INDEX");

	cr_assert_not_null(v, "RIG_TEST_GID_INDEX unset");
	return v;
}

/* The device, port and GID the bed set up, and Soft-RoCE's settings. */
Test(info, nic_query_names_the_pick)
{
	struct rig_nic_info info = { .size = sizeof(info) };
	struct ibv_port_attr pa;
	struct rig_endpoint e;
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *qp = t_qp(nic);
	uint32_t msg_max;

	cr_assert_eq(rig_nic_query(nic, &info), 0, "%s", rig_errmsg());
	cr_assert_eq(info.size, sizeof(info));
	cr_assert_str_eq(info.device, t_dev());
	cr_assert_eq(info.port, 1);
	cr_assert_eq(info.gid_index, (uint32_t)atoi(gid_index_env()));
	rig_qp_endpoint(qp, &e);
	cr_assert_arr_eq(info.gid, e.gid, 16);
	cr_assert_arr_eq(info.mac, e.mac, 6);
	cr_assert_eq(info.soft_roce, 1);
	cr_assert_eq(info.vendor_id, 0xffffff);
	cr_assert_eq(info.retry_cnt, 6, "Soft-RoCE's 7 retries forever");
	cr_assert_eq(ibv_query_port(qp->ibqp->context, 1, &pa), 0);
	msg_max = pa.max_msg_sz < RIG_MESSAGE_MAX ? pa.max_msg_sz : (uint32_t)RIG_MESSAGE_MAX;
	cr_assert_eq(info.msg_max, msg_max);
	cr_assert_eq(info.msg_max, qp->msg_max);
	cr_assert_eq(rig_qp_destroy(qp), 0);
	cr_assert_eq(rig_nic_close(nic), 0);
}

Test(info, nic_query_bad_arguments_change_nothing)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_nic_info info;

	memset(&info, 0xa5, sizeof(info));
	info.size = 7;
	cr_assert_eq(rig_nic_query(nic, &info), -EINVAL);
	cr_assert_eq(info.size, 7);
	cr_assert_eq(info.port, 0xa5a5a5a5);
	cr_assert_eq(rig_nic_query(NULL, &info), -EINVAL);
	cr_assert_eq(rig_nic_query(nic, NULL), -EINVAL);
	cr_assert_eq(rig_nic_qp_pinned(NULL), -EINVAL);
	/* An older caller's smaller structure: what it names, no more. */
	info.size = 8;
	cr_assert_eq(rig_nic_query(nic, &info), 0);
	cr_assert_eq(info.size, 8);
	cr_assert_eq(info.port, 1);
	cr_assert_eq((unsigned char)info.device[0], 0xa5);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* A wait that nothing ends sleeps: each counts once, on its ring only.
 * 1 s each: only a second's preemption inside its 50 us spin would let
 * one reach its end without sleeping. */
Test(info, stats_count_waits_that_slept)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *a = t_qp(nic), *b = t_qp(nic);
	struct rig_qp_stats s = { .size = sizeof(s) };
	struct rig_completion c;
	struct t_buf rx, tx;

	t_connect(a, b);
	t_buf(&rx, nic, 4096, 1);
	t_buf(&tx, nic, 4096, 2);
	cr_assert_eq(rig_qp_receive(b, rx.r, 0, 64), 0);
	cr_assert_eq(rig_qp_wait(b, RIG_RECEIVE, 1000000, &c), 0);
	cr_assert_eq(rig_qp_wait(b, RIG_RECEIVE, 1000000, &c), 0);
	cr_assert_eq(rig_qp_stats(b, RIG_RECEIVE, &s), 0);
	cr_assert_eq(s.slept, 2);
	cr_assert_eq(s.posted, 1);
	cr_assert_eq(s.taken, 0);
	cr_assert_eq(rig_qp_stats(b, RIG_SEND, &s), 0);
	cr_assert_eq(s.slept, 0);
	/* The message comes: the receive is taken, nothing failed, no
	 * entry was the library's to complete. */
	cr_assert_eq(rig_qp_send(a, tx.r, 0, 64), 0);
	cr_assert_eq(t_take(b, RIG_RECEIVE, 5000).error, 0);
	cr_assert_eq(t_take(a, RIG_SEND, 5000).error, 0);
	cr_assert_eq(rig_qp_stats(b, RIG_RECEIVE, &s), 0);
	cr_assert_eq(s.taken, 1);
	cr_assert_eq(s.completed, 0);
	cr_assert_eq(s.async_events, 0);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* ----------------------------------------------------------------- log */

#define MAX_LINES 16
static char lines[MAX_LINES][512];
static int nlines;

static void collect(enum rig_log_level level, const char *line)
{
	(void)level;
	if (nlines < MAX_LINES)
		snprintf(lines[nlines], sizeof(lines[0]), "%s", line);
	nlines++;
}

/* Opening a NIC: the pick at debug, Soft-RoCE's quirk at info, each once. */
Test(info, log_opening_tells_the_pick_and_the_quirk)
{
	char want[256];
	struct rig_nic *nic;

	cr_assert_eq(rig_set_log(collect, RIG_LOG_INFO), 0);
	nic = t_nic_open(t_dev());
	cr_assert_eq(nlines, 1, "%d lines, first: %s", nlines, lines[0]);
	snprintf(want, sizeof(want), "%s: Soft-RoCE quirk: transport retry count 6, not 7 "
		 "(its 7 retries forever; RNR waits count against it too)", t_dev());
	cr_assert_str_eq(lines[0], want);
	cr_assert_eq(rig_nic_close(nic), 0);

	nlines = 0;
	cr_assert_eq(rig_set_log(collect, RIG_LOG_DEBUG), 0);
	nic = t_nic_open(t_dev());
	cr_assert_eq(nlines, 2, "%d lines", nlines);
	snprintf(want, sizeof(want), "%s: port 1, GID index %s (", t_dev(), gid_index_env());
	cr_assert(!strncmp(lines[0], want, strlen(want)), "%s", lines[0]);
	cr_assert_eq(rig_nic_close(nic), 0);

	nlines = 0;
	cr_assert_eq(rig_set_log(collect, RIG_LOG_WARN), 0);
	nic = t_nic_open(t_dev());
	cr_assert_eq(nlines, 0, "%s", lines[0]);
	cr_assert_eq(rig_nic_close(nic), 0);
}

static int inject_fd = -1;

static void inject(struct ibv_context *ctx, uint64_t element, enum ibv_event_type type)
{
	struct ib_uverbs_async_event_desc d = { element, type, 0 };
	int p[2];

	if (inject_fd < 0) {
		T_CHILD_CHECK(pipe(p) == 0, "pipe");
		T_CHILD_CHECK(fcntl(p[0], F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
		T_CHILD_CHECK(dup2(p[0], ctx->async_fd) == ctx->async_fd, "dup2");
		close(p[0]);
		inject_fd = p[1];
	}
	T_CHILD_CHECK(write(inject_fd, &d, sizeof(d)) == sizeof(d), "write");
}

static uint64_t async_events(struct rig_qp *qp)
{
	struct rig_qp_stats s = { .size = sizeof(s) };

	T_CHILD_CHECK(rig_qp_stats(qp, RIG_SEND, &s) == 0, "%s", rig_errmsg());
	return s.async_events;
}

/*
 * An async event: one line when it is read, one when the queue pair's
 * owner applies the failure it brings, and the count of the queue pairs
 * it names. A port event fails nothing and counts for nobody.
 */
static void async_child(void)
{
	struct rig_nic *nic;
	struct rig_qp *a, *b;
	struct rig_completion c;
	char want[256];

	T_CHILD_CHECK(rig_set_log(collect, RIG_LOG_INFO) == 0, "rig_set_log");
	T_CHILD_CHECK(rig_nic_open(t_dev(), &nic) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_make(nic, &a) == 0 && rig_qp_make(nic, &b) == 0, "%s", rig_errmsg());
	nlines = 0;

	inject(a->ibqp->context, (uintptr_t)a->ibqp, IBV_EVENT_QP_FATAL);
	T_CHILD_CHECK(rig_nic_events(nic) == 1, "%s", rig_errmsg());
	T_CHILD_CHECK(nlines == 1, "%d lines", nlines);
	snprintf(want, sizeof(want), "%s: async event %s on queue pair 0x%06x", t_dev(),
		 ibv_event_type_str(IBV_EVENT_QP_FATAL), a->ibqp->qp_num);
	T_CHILD_CHECK(!strcmp(lines[0], want), "%s", lines[0]);
	T_CHILD_CHECK(async_events(a) == 1 && async_events(b) == 0, "counts %llu %llu",
		      (unsigned long long)async_events(a), (unsigned long long)async_events(b));
	/* The owner applies it at its next poll: the failure's line. */
	T_CHILD_CHECK(rig_qp_poll(a, RIG_SEND, &c) == 0, "nothing is due");
	T_CHILD_CHECK(nlines == 2, "%d lines", nlines);
	snprintf(want, sizeof(want), "%s: queue pair 0x%06x failed: %s "
		 "(the NIC reported the queue pair broken (QP_FATAL)); an async event",
		 t_dev(), a->ibqp->qp_num, strerror(EIO));
	T_CHILD_CHECK(!strcmp(lines[1], want), "%s", lines[1]);

	inject(a->ibqp->context, 1, IBV_EVENT_PORT_ERR);
	T_CHILD_CHECK(rig_nic_events(nic) == 1, "%s", rig_errmsg());
	T_CHILD_CHECK(nlines == 3, "%d lines", nlines);
	snprintf(want, sizeof(want), "%s: async event %s on port 1", t_dev(),
		 ibv_event_type_str(IBV_EVENT_PORT_ERR));
	T_CHILD_CHECK(!strcmp(lines[2], want), "%s", lines[2]);
	T_CHILD_CHECK(async_events(a) == 1 && async_events(b) == 0, "a port event counted");

	inject(a->ibqp->context, 0, IBV_EVENT_DEVICE_FATAL);
	T_CHILD_CHECK(rig_nic_events(nic) == 1, "%s", rig_errmsg());
	T_CHILD_CHECK(async_events(a) == 2 && async_events(b) == 1, "counts %llu %llu",
		      (unsigned long long)async_events(a), (unsigned long long)async_events(b));
	T_CHILD_CHECK(nlines == 4, "%d lines", nlines);
	snprintf(want, sizeof(want), "%s: async event %s: every queue pair fails", t_dev(),
		 ibv_event_type_str(IBV_EVENT_DEVICE_FATAL));
	T_CHILD_CHECK(!strcmp(lines[3], want), "%s", lines[3]);
}

Test(info, log_and_count_async_events)
{
	t_in_child(async_child);
}
