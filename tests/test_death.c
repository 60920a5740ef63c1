/* SPDX-License-Identifier: MIT */
/*
 * Processes that die, and processes that fork.
 *
 * The peer of a queue pair is another process: a child forked from the
 * test, talking to it over pipes. In the two-host topology
 * ($RIG_TEST_PEER_DEV set) the child uses that device, so its packets
 * cross the veth; on one host both use $RIG_TEST_DEV.
 *
 * Children use no Criterion assertion (a failed one would report from the
 * wrong process): they exit with a nonzero status, and the test checks it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_device.h"

#define LEN 4096		/* a message buffer */
#define MSG 64			/* a message */
#define DEPTH 16		/* sends in flight, receives posted */
#define KILL_AFTER 200		/* messages through before the kill */
/* The rule: a dead peer fails the survivor's sends after the transport
 * retries, 7 x 67 ms on rxe (rig uses retry count 6 there), so between
 * 0.3 s (the retry timer may have been armed before the kill) and 3 s. */
#define NOTICE_MIN_MS 300
#define NOTICE_MAX_MS 3000

/* ---- the child's side, without Criterion ------------------------------- */

static void child_die(const char *what, int ret)
{
	fprintf(stderr, "child %d: %s: %d %s\n", getpid(), what, ret, rig_errmsg());
	_exit(2);
}

static void xwrite(int fd, const void *p, size_t n)
{
	if (write(fd, p, n) != (ssize_t)n)
		child_die("write to pipe", -errno);
}

static void xread(int fd, void *p, size_t n)
{
	if (read(fd, p, n) != (ssize_t)n)
		child_die("read from pipe", -errno);
}

static uint8_t pattern(uint64_t seq, size_t i)
{
	return (uint8_t)(seq * 7 + i * 13 + 1);
}

/*
 * A peer process: opens @dev, makes a queue pair, sends its endpoint on
 * @out, reads ours from @in, connects, then answers each message with one
 * of its own, forever (until it is killed), or @count times and exits 0.
 * It checks every message's bytes.
 */
static void child_echo(const char *dev, int in, int out, long count)
{
	struct rig_nic *nic = NULL;
	struct rig_region *r = NULL;
	struct rig_endpoint me, peer;
	struct rig_completion c;
	static uint8_t buf[2 * LEN];
	uint64_t seq;
	int ret, i;

	ret = rig_nic_open(dev, &nic);
	if (ret)
		child_die("rig_nic_open", ret);
	ret = rig_region_register(nic, buf, sizeof(buf), &r);
	if (ret)
		child_die("rig_region_register", ret);
	struct rig_qp *qp = NULL;

	ret = rig_qp_make(nic, &qp);
	if (ret)
		child_die("rig_qp_make", ret);
	rig_qp_endpoint(qp, &me);
	xwrite(out, &me, sizeof(me));
	xread(in, &peer, sizeof(peer));
	ret = rig_qp_connect(qp, &peer);
	if (ret)
		child_die("rig_qp_connect", ret);
	for (i = 0; i < DEPTH; i++)
		if ((ret = rig_qp_receive(qp, r, (size_t)i * MSG, MSG)))
			child_die("rig_qp_receive", ret);
	xwrite(out, "r", 1);
	for (seq = 0; count < 0 || seq < (uint64_t)count; seq++) {
		uint8_t *m = buf + (seq % DEPTH) * MSG;
		size_t k;

		while ((ret = rig_qp_poll(qp, RIG_RECEIVE, &c)) == 0)
			;
		if (ret < 0 || c.error || c.bytes != MSG)
			child_die("receive", ret < 0 ? ret : c.error);
		for (k = 0; k < MSG; k++)
			if (m[k] != pattern(seq, k))
				child_die("message bytes", (int)seq);
		/* the answer, from the second half of buf */
		for (k = 0; k < MSG; k++)
			buf[LEN + k] = pattern(seq, k) ^ 0xff;
		if ((ret = rig_qp_receive(qp, r, (seq % DEPTH) * MSG, MSG)))
			child_die("rig_qp_receive", ret);
		if ((ret = rig_qp_send(qp, r, LEN, MSG)))
			child_die("rig_qp_send", ret);
		while ((ret = rig_qp_poll(qp, RIG_SEND, &c)) == 0)
			;
		if (ret < 0 || c.error)
			child_die("send", ret < 0 ? ret : c.error);
	}
	ret = rig_nic_close(nic);
	_exit(ret ? 3 : 0);
}

/* ---- the test's side --------------------------------------------------- */

struct peer {
	pid_t pid;
	int to, from;		/* pipes to and from the child */
};

static void peer_start(struct peer *p, const char *dev, long count)
{
	p->pid = t_fork_piped(&p->to, &p->from, 0);
	if (p->pid == 0)
		child_echo(dev, p->from, p->to, count);
}

/* Exchanges endpoints with the child and connects @qp to its queue pair;
 * returns once the child has its receives posted. */
static void peer_connect(struct peer *p, struct rig_qp *qp)
{
	struct rig_endpoint me, them;
	char ready;
	int ret;

	cr_assert_eq(read(p->from, &them, sizeof(them)), (ssize_t)sizeof(them),
		     "the child sent no endpoint");
	rig_qp_endpoint(qp, &me);
	cr_assert_eq(write(p->to, &me, sizeof(me)), (ssize_t)sizeof(me));
	ret = rig_qp_connect(qp, &them);
	cr_assert_eq(ret, 0, "rig_qp_connect: %d %s", ret, rig_errmsg());
	cr_assert_eq(read(p->from, &ready, 1), 1, "the child did not get ready");
}

static int peer_wait(struct peer *p)
{
	int status;

	cr_assert_eq(waitpid(p->pid, &status, 0), p->pid);
	close(p->to);
	close(p->from);
	return status;
}

/* Sends message @seq from @src (offset (seq % DEPTH) * MSG). */
static void send_msg(struct rig_qp *qp, struct t_buf *src, uint64_t seq)
{
	size_t at = (seq % DEPTH) * MSG, k;
	int ret;

	for (k = 0; k < MSG; k++)
		src->mem[at + k] = pattern(seq, k);
	ret = rig_qp_send(qp, src->r, at, MSG);
	cr_assert_eq(ret, 0, "rig_qp_send: %d %s", ret, rig_errmsg());
}

/* Ping-pongs @n messages with the echo child over @qp, checking the
 * answers' bytes. @dst has DEPTH receives' room. */
static void exchange(struct rig_qp *qp, struct t_buf *src, struct t_buf *dst, int n)
{
	struct rig_completion c;
	int i, ret;
	size_t k;

	for (i = 0; i < n; i++) {
		ret = rig_qp_receive(qp, dst->r, (i % DEPTH) * MSG, MSG);
		cr_assert_eq(ret, 0, "rig_qp_receive: %d %s", ret, rig_errmsg());
		send_msg(qp, src, (uint64_t)i);
		c = t_take(qp, RIG_SEND, 5000);
		cr_assert_eq(c.error, 0, "send %d: %d %s", i, c.error, c.why);
		c = t_take(qp, RIG_RECEIVE, 5000);
		cr_assert_eq(c.error, 0, "receive %d: %d %s", i, c.error, c.why);
		cr_assert_eq(c.bytes, MSG);
		for (k = 0; k < MSG; k++)
			cr_assert_eq(dst->mem[(i % DEPTH) * MSG + k],
				     (uint8_t)(pattern((uint64_t)i, k) ^ 0xff),
				     "answer %d, byte %zu", i, k);
	}
}

TestSuite(death, .timeout = 120);

/*
 * F3, F6 with a dead peer process: the peer is killed with SIGKILL while
 * our sends stream to it. Every entry due on either ring then completes:
 * a prefix of successes (what the peer took before it died), then every
 * one with -ETIMEDOUT, the sends first failed by the transport after its
 * retries and the receives completed by rig with the same error, in ring
 * order, within the retry bound. Then a new process connects to a new
 * queue pair and messages flow.
 */
Test(death, F3_F6_peer_SIGKILL_mid_stream_survivor_fails_ETIMEDOUT_then_reconnect)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *qp = t_qp(nic);
	struct t_buf src, dst;
	struct rig_completion c;
	uint64_t posted = 0, sent = 0, got = 0, rposted;
	double k0, k1, first_err = -1, last_empty = 0, now;
	int ret, status, errors = 0;
	struct peer p;

	t_buf(&src, nic, DEPTH * MSG, 1);
	t_buf(&dst, nic, DEPTH * MSG, 2);
	peer_start(&p, t_other_dev(), -1);
	peer_connect(&p, qp);
	/* receives for the child's answers; the child sends one per message */
	for (rposted = 0; rposted < DEPTH; rposted++)
		cr_assert_eq(rig_qp_receive(qp, dst.r, (rposted % DEPTH) * MSG, MSG), 0);

	/* Stream: the child answers each message, so sends and receives
	 * complete in lockstep; keep sends in flight up to the child's
	 * receives, and repost our receives as they complete. */
	while (got < KILL_AFTER) {
		while (posted - got < DEPTH)
			send_msg(qp, &src, posted++);
		while (rig_qp_poll(qp, RIG_SEND, &c) == 1) {
			cr_assert_eq(c.error, 0, "send %llu: %d %s",
				     (unsigned long long)sent, c.error, c.why);
			sent++;
		}
		while (rig_qp_poll(qp, RIG_RECEIVE, &c) == 1) {
			cr_assert_eq(c.error, 0, "receive %llu: %d %s",
				     (unsigned long long)got, c.error, c.why);
			got++;
			cr_assert_eq(rig_qp_receive(qp, dst.r, (rposted++ % DEPTH) * MSG,
						    MSG), 0);
		}
	}

	k0 = t_now_ms();
	cr_assert_eq(kill(p.pid, SIGKILL), 0);
	k1 = t_now_ms();
	status = peer_wait(&p);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "the child ended otherwise: status %#x", status);
	/* The child's queue pair is gone with its process: sends posted now
	 * are surely in flight to nobody (D1: a survivor with receives only
	 * would learn nothing). */
	while (posted - sent < DEPTH)
		send_msg(qp, &src, posted++);

	/* Take every due entry, in order, alternating the rings. */
	while (sent < posted || got < rposted) {
		int side;

		for (side = RIG_SEND; side <= RIG_RECEIVE; side++) {
			uint64_t *n = side == RIG_SEND ? &sent : &got;

			ret = rig_qp_poll(qp, side, &c);
			cr_assert_geq(ret, 0, "rig_qp_poll: %d", ret);
			if (!ret) {
				/* an entry was due and had not completed */
				if (*n < (side == RIG_SEND ? posted : rposted))
					last_empty = t_now_ms();
				continue;
			}
			now = t_now_ms();
			if (c.error) {
				cr_assert_eq(c.error, -ETIMEDOUT,
					     "%s %llu: %d %s, not -ETIMEDOUT",
					     side == RIG_SEND ? "send" : "receive",
					     (unsigned long long)*n, c.error, c.why);
				if (first_err < 0)
					first_err = now;
				errors++;
			} else {
				/* a success after the first failure breaks the order */
				cr_assert_lt(first_err, 0, "%s %llu succeeded after the failure",
					     side == RIG_SEND ? "send" : "receive",
					     (unsigned long long)*n);
				cr_assert_lt(*n, side == RIG_SEND ? posted : rposted);
			}
			(*n)++;
		}
		now = t_now_ms();
		/* Only a verdict the clock proves, whatever the scheduler
		 * does to this process: an entry was still due at the last
		 * poll that found its ring empty. */
		cr_assert_leq(last_empty - k1, NOTICE_MAX_MS,
			      "an entry was still due %.0f ms after the kill",
			      last_empty - k1);
		cr_assert_leq(now - k1, 10 * NOTICE_MAX_MS, "entries still due after %d ms",
			      10 * NOTICE_MAX_MS);
	}
	cr_assert_geq(first_err, 0, "no entry failed");
	/* the sends posted after the child's death all failed, and every
	 * receive posted since its last answer */
	cr_assert_geq(errors, DEPTH);
	cr_assert_geq(first_err - k0, NOTICE_MIN_MS,
		      "failure noticed %.0f ms after the kill, before the retries ran out",
		      first_err - k0);
	cr_assert_eq(rig_qp_failure(qp, &ret), -ETIMEDOUT);
	cr_assert_eq(ret, IBV_WC_RETRY_EXC_ERR, "wc status %d", ret);
	cr_log_info("peer on %s killed: first failure after %.0f ms, all %d due entries "
		    "failed within %.0f ms", t_other_dev(), first_err - k0, errors, now - k0);

	/* a new process, a new queue pair: messages flow */
	cr_assert_eq(rig_qp_destroy(qp), 0);
	qp = t_qp(nic);
	peer_start(&p, t_other_dev(), 100);
	peer_connect(&p, qp);
	exchange(qp, &src, &dst, 100);
	status = peer_wait(&p);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the new peer ended with status %#x", status);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/*
 * A rig process killed with entries due on both rings of several queue
 * pairs (sends waiting for receives the peer has not posted, receives
 * waiting for sends) leaves the device fit for the next process: raw verbs
 * query it, make a queue pair, connect it and send; and rig connects to a
 * new process and messages flow.
 */
Test(death, rig_process_killed_with_entries_due_device_serves_next)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	int a[2], status, i;
	char ready;
	pid_t pid;

	cr_assert_eq(pipe(a), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct rig_nic *nic = NULL;
		struct rig_region *r = NULL;
		static uint8_t buf[LEN];
		int ret;

		close(a[0]);
		if ((ret = rig_nic_open(t_dev(), &nic)))
			child_die("rig_nic_open", ret);
		if ((ret = rig_region_register(nic, buf, sizeof(buf), &r)))
			child_die("rig_region_register", ret);
		/* four pairs: one end sends 8 with no receive posted at the
		 * other (RNR waits), the other end has 8 receives due */
		for (i = 0; i < 4; i++) {
			struct rig_qp *x = NULL, *y = NULL;
			struct rig_endpoint ex, ey;
			int k;

			if ((ret = rig_qp_make(nic, &x)) || (ret = rig_qp_make(nic, &y)))
				child_die("rig_qp_make", ret);
			rig_qp_endpoint(x, &ex);
			rig_qp_endpoint(y, &ey);
			if ((ret = rig_qp_connect(x, &ey)) || (ret = rig_qp_connect(y, &ex)))
				child_die("rig_qp_connect", ret);
			for (k = 0; k < 8; k++) {
				if ((ret = rig_qp_send(x, r, 0, LEN)))
					child_die("rig_qp_send", ret);
				if ((ret = rig_qp_receive(x, r, 0, LEN)))
					child_die("rig_qp_receive", ret);
			}
		}
		xwrite(a[1], "r", 1);
		for (;;)
			pause();
	}
	close(a[1]);
	cr_assert_eq(read(a[0], &ready, 1), 1, "the rig process did not get ready");
	close(a[0]);
	cr_assert_eq(kill(pid, SIGKILL), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "status %#x", status);

	/* raw verbs, in this process: query, make, connect, send */
	list = ibv_get_device_list(NULL);
	cr_assert_not_null(list);
	for (i = 0; list[i] && !ctx; i++)
		if (!strcmp(t_dev(), ibv_get_device_name(list[i])))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	cr_assert_not_null(ctx, "cannot open %s", t_dev());
	cr_assert_eq(ibv_query_device(ctx, &da), 0);
	cr_assert_gt(da.max_qp, 0);
	cr_assert_eq(ibv_query_port(ctx, 1, &pa), 0);
	cr_assert_eq(pa.state, IBV_PORT_ACTIVE, "port state %d", pa.state);
	{
		const char *gi = getenv("RIG_TEST_GID_INDEX");
		struct ibv_qp_init_attr ia = { 0 };
		static uint8_t sbuf[MSG], rbuf[MSG];
		struct ibv_pd *pd;
		struct ibv_cq *cq;
		struct ibv_mr *smr, *rmr;
		struct ibv_qp *qa, *qb;
		union ibv_gid gid;
		struct ibv_wc wc;
		double end;
		int n = 0, got = 0;

		cr_assert_not_null(gi, "RIG_TEST_GID_INDEX is unset");
		cr_assert_eq(ibv_query_gid(ctx, 1, atoi(gi), &gid), 0);
		pd = ibv_alloc_pd(ctx);
		cr_assert_not_null(pd);
		cq = ibv_create_cq(ctx, 8, NULL, NULL, 0);
		cr_assert_not_null(cq);
		for (i = 0; i < MSG; i++)
			sbuf[i] = (uint8_t)(i * 3 + 5);
		smr = ibv_reg_mr(pd, sbuf, MSG, 0);
		rmr = ibv_reg_mr(pd, rbuf, MSG, IBV_ACCESS_LOCAL_WRITE);
		cr_assert(smr && rmr);
		ia.send_cq = ia.recv_cq = cq;
		ia.cap.max_send_wr = ia.cap.max_recv_wr = 2;
		ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
		ia.qp_type = IBV_QPT_RC;
		ia.sq_sig_all = 1;
		qa = ibv_create_qp(pd, &ia);
		qb = ibv_create_qp(pd, &ia);
		cr_assert(qa && qb);
		t_raw_connect(qa, atoi(gi), pa.active_mtu, 11, qb->qp_num, 22, gid.raw);
		t_raw_connect(qb, atoi(gi), pa.active_mtu, 22, qa->qp_num, 11, gid.raw);
		{
			struct ibv_sge rs = { (uintptr_t)rbuf, MSG, rmr->lkey };
			struct ibv_sge ss = { (uintptr_t)sbuf, MSG, smr->lkey };
			struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
			struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &ss, .num_sge = 1,
						  .opcode = IBV_WR_SEND }, *sbad;

			cr_assert_eq(ibv_post_recv(qb, &rw, &rbad), 0);
			cr_assert_eq(ibv_post_send(qa, &sw, &sbad), 0);
		}
		end = t_now_ms() + 5000;
		while (got < 2) {
			n = ibv_poll_cq(cq, 1, &wc);
			cr_assert_geq(n, 0);
			if (n) {
				cr_assert_eq(wc.status, IBV_WC_SUCCESS, "wr %llu: %s",
					     (unsigned long long)wc.wr_id,
					     ibv_wc_status_str(wc.status));
				got++;
			}
			cr_assert_lt(t_now_ms(), end, "raw send got %d of 2 completions", got);
		}
		cr_assert_arr_eq(rbuf, sbuf, MSG);
		cr_assert_eq(ibv_destroy_qp(qa), 0);
		cr_assert_eq(ibv_destroy_qp(qb), 0);
		cr_assert_eq(ibv_destroy_cq(cq), 0);
		cr_assert_eq(ibv_dereg_mr(smr), 0);
		cr_assert_eq(ibv_dereg_mr(rmr), 0);
		cr_assert_eq(ibv_dealloc_pd(pd), 0);
	}
	cr_assert_eq(ibv_close_device(ctx), 0);

	/* and rig, with a new peer process */
	{
		struct rig_nic *nic = t_nic_open(t_dev());
		struct rig_qp *qp = t_qp(nic);
		struct t_buf src, dst;
		struct peer p;

		t_buf(&src, nic, DEPTH * MSG, 3);
		t_buf(&dst, nic, DEPTH * MSG, 4);
		peer_start(&p, t_other_dev(), 50);
		peer_connect(&p, qp);
		exchange(qp, &src, &dst, 50);
		status = peer_wait(&p);
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
		cr_assert_eq(rig_nic_close(nic), 0);
	}
}

/*
 * fork() while queue pairs are live: the child writes all over its copy
 * of the registered buffers and exits; the parent's queue pairs go on
 * working and its regions hold what the parent put there, both while the
 * child lives and after. rdma-core 44 on Linux 6.1 needs no
 * ibv_fork_init(): the kernel copies pinned pages for the child at fork
 * (so the parent keeps the pages the NIC uses), and libibverbs says so
 * with IBV_FORK_UNNEEDED.
 */
Test(death, fork_with_live_queue_pairs_parent_unharmed)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *a = t_qp(nic), *b = t_qp(nic);
	struct rig_completion c;
	struct t_buf src, dst;
	int to, from, status, round;
	char byte;
	pid_t pid;

	cr_assert_eq(ibv_is_fork_initialized(), IBV_FORK_UNNEEDED);
	t_connect(a, b);
	t_buf(&src, nic, LEN, 5);
	t_buf(&dst, nic, LEN, 6);
	/* one message before the fork: the queue pairs are live */
	cr_assert_eq(rig_qp_receive(b, dst.r, 0, LEN), 0);
	cr_assert_eq(rig_qp_send(a, src.r, 0, LEN), 0);
	cr_assert_eq(t_take(a, RIG_SEND, 5000).error, 0);
	cr_assert_eq(t_take(b, RIG_RECEIVE, 5000).error, 0);
	cr_assert_arr_eq(dst.mem, src.mem, LEN);
	/* a receive posted before the fork, filled after it */
	memset(dst.mem, 0, LEN);
	cr_assert_eq(rig_qp_receive(b, dst.r, 0, LEN), 0);

	pid = t_fork_piped(&to, &from, 0);
	if (pid == 0) {
		memset(src.mem, 0xee, LEN);
		memset(dst.mem, 0xdd, LEN);
		xwrite(to, "w", 1);
		xread(from, &byte, 1);
		_exit(src.mem[0] == 0xee && dst.mem[LEN - 1] == 0xdd ? 0 : 4);
	}
	cr_assert_eq(read(from, &byte, 1), 1, "the child did not write");

	/* round 0 while the child lives, round 1 after it exited */
	for (round = 0; round < 2; round++) {
		size_t i;

		/* the parent writes to its pages after the fork: they must
		 * stay the ones the NIC reads */
		for (i = 0; i < LEN; i++)
			src.mem[i] = (uint8_t)(i * 7 + round * 3 + 9);
		if (round == 1)
			cr_assert_eq(rig_qp_receive(b, dst.r, 0, LEN), 0);
		cr_assert_eq(rig_qp_send(a, src.r, 0, LEN), 0);
		c = t_take(a, RIG_SEND, 5000);
		cr_assert_eq(c.error, 0, "round %d send: %d %s", round, c.error, c.why);
		c = t_take(b, RIG_RECEIVE, 5000);
		cr_assert_eq(c.error, 0, "round %d receive: %d %s", round, c.error, c.why);
		cr_assert_eq(c.bytes, LEN);
		cr_assert_arr_eq(dst.mem, src.mem, LEN, "round %d: the bytes differ", round);
		/* and the other way */
		cr_assert_eq(rig_qp_receive(a, dst.r, 0, LEN), 0);
		cr_assert_eq(rig_qp_send(b, src.r, 0, LEN / 2), 0);
		cr_assert_eq(t_take(b, RIG_SEND, 5000).error, 0);
		c = t_take(a, RIG_RECEIVE, 5000);
		cr_assert_eq(c.error, 0);
		cr_assert_eq(c.bytes, LEN / 2);
		cr_assert_arr_eq(dst.mem, src.mem, LEN / 2);
		if (round == 0) {
			cr_assert_eq(write(to, "x", 1), 1);
			cr_assert_eq(waitpid(pid, &status, 0), pid);
			cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
				  "the child's copy was not its own: status %#x", status);
		}
	}
	close(to);
	close(from);
	cr_assert_eq(rig_nic_close(nic), 0);
}
