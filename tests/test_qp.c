/* SPDX-License-Identifier: MIT */
/*
 * The queue pair on one device: rings, messages, loopback, polling and the
 * caller's mistakes (rig(7) Q, M1-M5, P, T1, T3, D1). Failures are in
 * test_fail.c, the two-host rules in test_remote.c.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_device.h"

#define MiB (1u << 20)

static struct rig_nic *nic;
static struct rig_qp *a, *b;

static void pair_setup(void)
{
	nic = t_nic_open(t_dev());
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
}

static void pair_teardown(void)
{
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	while (n--)
		h = (h ^ *p++) * 1099511628211ull;
	return h;
}

/* Q1, Q2: 4095 entries fill each ring; the next is -ENOSPC; completions
 * come back in the order of the entries; a slot frees only when its
 * completion is taken, not when the NIC completes it. */
Test(ring, Q1_Q2_fill_both_rings_in_order, .init = pair_setup,
     .fini = pair_teardown, .timeout = 120)
{
	enum { N = RIG_RING_ENTRIES, STRIDE = 128 };
	struct t_buf src, dst;
	struct rig_completion c;
	int i;

	t_buf(&src, nic, (size_t)N * STRIDE, 1);
	t_buf(&dst, nic, (size_t)N * STRIDE, 0);
	memset(dst.mem, 0, dst.len);
	cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), N);
	for (i = 0; i < N; i++) {
		cr_assert_eq(rig_qp_receive(b, dst.r, (size_t)i * STRIDE, STRIDE), 0);
		cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), N - 1 - i);
	}
	cr_assert_eq(rig_qp_receive(b, dst.r, 0, STRIDE), -ENOSPC);
	/* Message i has length i % 100 + 1: its completion tells its place. */
	for (i = 0; i < N; i++)
		cr_assert_eq(rig_qp_send(a, src.r, (size_t)i * STRIDE, i % 100 + 1), 0,
			     "send %d: %s", i, rig_errmsg());
	cr_assert_eq(rig_qp_room(a, RIG_SEND), 0);
	cr_assert_eq(rig_qp_send(a, src.r, 0, 1), -ENOSPC);
	cr_assert_eq(rig_qp_room(a, RIG_SEND), 0, "a refused post took room");

	/* Wait until the last message has landed: the NIC has completed
	 * every receive, yet no slot is free until poll takes it. */
	for (double end = t_now_ms() + 30000;
	     dst.mem[(size_t)(N - 1) * STRIDE] != src.mem[(size_t)(N - 1) * STRIDE];)
		cr_assert_lt(t_now_ms(), end, "the last message never landed");
	cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), 0);

	for (i = 0; i < N; i++) {
		c = t_take(b, RIG_RECEIVE, 5000);
		cr_assert_eq(c.error, 0, "receive %d: %s", i, c.why);
		cr_assert_eq(c.bytes, (uint32_t)(i % 100 + 1), "receive %d out of order", i);
		cr_assert_arr_eq(dst.mem + (size_t)i * STRIDE, src.mem + (size_t)i * STRIDE,
				 i % 100 + 1);
		cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), i + 1);
	}
	for (i = 0; i < N; i++) {
		c = t_take(a, RIG_SEND, 5000);
		cr_assert_eq(c.error, 0, "send %d: %s", i, c.why);
		cr_assert_null(c.why);
		cr_assert_eq(c.bytes, (uint32_t)(i % 100 + 1), "send %d out of order", i);
		cr_assert_eq(rig_qp_room(a, RIG_SEND), i + 1);
	}
	cr_assert_eq(rig_qp_poll(a, RIG_SEND, &c), 0);
	cr_assert_eq(rig_qp_poll(b, RIG_RECEIVE, &c), 0);
}

/* Sends one message of n bytes a -> b and checks it arrives intact. */
static void send_checked(size_t n)
{
	struct t_buf src, dst;
	struct rig_completion c;

	t_buf(&src, nic, n, 7);
	t_buf(&dst, nic, n, 99);
	if (n)
		dst.mem[n - 1] = (uint8_t)~src.mem[n - 1];
	cr_assert_eq(rig_qp_receive(b, dst.r, 0, n), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_send(a, src.r, 0, n), 0, "%s", rig_errmsg());
	c = t_take(a, RIG_SEND, 20000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, n);
	c = t_take(b, RIG_RECEIVE, 20000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, n);
	cr_assert_eq(fnv1a(dst.mem, n), fnv1a(src.mem, n), "%zu bytes differ", n);
}

/* Q3: 0 bytes, 1 byte, 1 MiB and the device's largest message arrive intact. */
Test(message, Q3_zero_bytes, .init = pair_setup, .fini = pair_teardown)
{
	send_checked(0);
}

Test(message, Q3_one_byte, .init = pair_setup, .fini = pair_teardown)
{
	send_checked(1);
}

Test(message, Q3_one_mib, .init = pair_setup, .fini = pair_teardown)
{
	send_checked(MiB);
}

Test(message, Q3_device_largest, .init = pair_setup, .fini = pair_teardown,
     .timeout = 60)
{
	/* Soft-RoCE says 8 MiB and does not enforce it; rig does. */
	if (!strncmp(t_dev() ? t_dev() : "rxe", "rxe", 3))
		cr_assert_eq(a->msg_max, 8 * MiB);
	send_checked(a->msg_max);
}

/* Q3: one byte over the limit is -EINVAL, for send, receive and read. */
Test(message, Q3_one_byte_more_is_einval, .init = pair_setup,
     .fini = pair_teardown)
{
	struct t_buf big;
	size_t n = (size_t)a->msg_max + 1;

	t_buf(&big, nic, n, 3);
	cr_assert_eq(rig_qp_send(a, big.r, 0, n), -EINVAL);
	cr_assert_eq(rig_qp_receive(b, big.r, 0, n), -EINVAL);
	cr_assert_eq(rig_qp_read(a, big.r, 0, big.r, 0, n), -EINVAL);
	cr_assert_eq(rig_qp_room(a, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), RIG_RING_ENTRIES);
	send_checked(0);	/* nothing was posted: the first message is this one */
}

/* M4: a queue pair connected to itself sends to itself and reads from
 * this process's memory. */
Test(loopback, M4_to_itself)
{
	struct t_buf src, dst, rd;
	struct rig_completion c;
	struct rig_qp *q;

	nic = t_nic_open(t_dev());
	q = t_qp(nic);
	t_connect(q, q);
	t_buf(&src, nic, 4096, 5);
	t_buf(&dst, nic, 4096, 0);
	t_buf(&rd, nic, 4096, 0);
	cr_assert_eq(rig_qp_receive(q, dst.r, 0, 4096), 0);
	cr_assert_eq(rig_qp_send(q, src.r, 100, 3000), 0);
	cr_assert_eq(rig_qp_read(q, src.r, 10, rd.r, 20, 4000), 0, "%s", rig_errmsg());
	c = t_take(q, RIG_SEND, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, 3000);
	c = t_take(q, RIG_SEND, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, 4000);
	c = t_take(q, RIG_RECEIVE, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, 3000);
	cr_assert_arr_eq(dst.mem, src.mem + 100, 3000);
	cr_assert_arr_eq(rd.mem + 20, src.mem + 10, 4000);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* M4: another queue pair of the same NIC serves reads too, both ways. */
Test(loopback, M4_read_from_same_nic_peer, .init = pair_setup,
     .fini = pair_teardown)
{
	struct t_buf src, dst;
	struct rig_completion c;

	t_buf(&src, nic, MiB, 11);
	t_buf(&dst, nic, MiB, 0);
	cr_assert_eq(rig_qp_read(a, src.r, 0, dst.r, 0, MiB), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_read(b, src.r, 1, dst.r, 0, 17), 0, "%s", rig_errmsg());
	c = t_take(a, RIG_SEND, 10000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, MiB);
	c = t_take(b, RIG_SEND, 10000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, 17);
	cr_assert_arr_eq(dst.mem, src.mem + 1, 17);
	cr_assert_arr_eq(dst.mem + 17, src.mem + 17, MiB - 17);
}

/* T1: poll returns 0 on an empty ring, and while the due entry has not
 * completed. */
Test(poll, T1_empty_ring, .init = pair_setup, .fini = pair_teardown)
{
	struct rig_completion c = { 77, 77, "untouched" };
	struct t_buf buf;
	int i;

	cr_assert_eq(rig_qp_poll(a, RIG_SEND, &c), 0);
	cr_assert_eq(rig_qp_poll(a, RIG_RECEIVE, &c), 0);
	t_buf(&buf, nic, 64, 0);
	cr_assert_eq(rig_qp_receive(a, buf.r, 0, 64), 0);
	for (i = 0; i < 1000; i++)
		cr_assert_eq(rig_qp_poll(a, RIG_RECEIVE, &c), 0);
	cr_assert_eq(c.bytes, 77, "an empty poll wrote the completion");
	cr_assert_eq(rig_qp_room(a, RIG_RECEIVE), RIG_RING_ENTRIES - 1);
}

/*
 * T3: polling makes no system call, on success and on failure. A child
 * process installs a seccomp filter that kills it on any system call but
 * exit_group, then polls; it reports through shared memory.
 */
struct t3_report {
	int got[4];
	int error[4];
};

static void seccomp_kill_all_but_exit(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_exit_group, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog))
		_exit(3);
}

/* Polls @side of @qp until a completion or @spins; no system call. */
static int spin_poll(struct rig_qp *qp, enum rig_side side, long spins,
		     struct rig_completion *c)
{
	int ret = 0;

	while (spins-- && !(ret = rig_qp_poll(qp, side, c)))
		;
	return ret;
}

Test(poll, T3_no_system_call, .init = pair_setup, .fini = pair_teardown)
{
	struct t3_report *rep;
	struct t_buf src, dst;
	struct rig_completion c;
	int status;
	pid_t pid;

	rep = mmap(NULL, sizeof(*rep), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(rep, MAP_FAILED);
	t_buf(&src, nic, 4096, 1);
	t_buf(&dst, nic, 4096, 0);
	/* One message that fits, then one that does not: the child takes a
	 * success and then the failure of both queue pairs. */
	cr_assert_eq(rig_qp_receive(b, dst.r, 0, 100), 0);
	cr_assert_eq(rig_qp_receive(b, dst.r, 100, 100), 0);
	cr_assert_eq(rig_qp_send(a, src.r, 0, 100), 0);
	cr_assert_eq(rig_qp_send(a, src.r, 0, 200), 0);

	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		seccomp_kill_all_but_exit();
		/* An empty ring first: many polls, none of them a syscall. */
		spin_poll(a, RIG_RECEIVE, 100000, &c);
		rep->got[0] = spin_poll(b, RIG_RECEIVE, 1L << 30, &c);
		rep->error[0] = c.error;
		rep->got[1] = spin_poll(b, RIG_RECEIVE, 1L << 30, &c);
		rep->error[1] = c.error;
		rep->got[2] = spin_poll(a, RIG_SEND, 1L << 30, &c);
		rep->error[2] = c.error;
		rep->got[3] = spin_poll(a, RIG_SEND, 1L << 30, &c);
		rep->error[3] = c.error;
		syscall(__NR_exit_group, 0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status), "the polling child was killed by signal %d (SIGSYS = %d): a system call",
		  WIFSIGNALED(status) ? WTERMSIG(status) : 0, SIGSYS);
	cr_assert_eq(WEXITSTATUS(status), 0);
	cr_assert_eq(rep->got[0], 1);
	cr_assert_eq(rep->error[0], 0);
	cr_assert_eq(rep->got[1], 1);
	cr_assert_eq(rep->error[1], -EIO, "the too-long message's receive: %d", rep->error[1]);
	cr_assert_eq(rep->got[2], 1);
	cr_assert_eq(rep->error[2], 0);
	cr_assert_eq(rep->got[3], 1);
	cr_assert_eq(rep->error[3], -EREMOTEIO);
}

/* M1, M2: the endpoint names the queue pair, a 24-bit PSN, this NIC's GID
 * (the IPv4-mapped address of its netdev) and its MAC. */
Test(make, M1_M2_endpoint)
{
	struct rig_endpoint e[8];
	uint8_t gid[16] = { [10] = 0xff, [11] = 0xff };
	const char *ip = getenv("RIG_TEST_IP");
	int i, same_psn = 0;

	nic = t_nic_open(t_dev());
	for (i = 0; i < 8; i++) {
		struct rig_qp *q = t_qp(nic);

		rig_qp_endpoint(q, &e[i]);
		cr_assert_eq(e[i].qp, q->ibqp->qp_num);
		cr_assert_leq(e[i].psn, 0xffffff);
		same_psn += i && e[i].psn == e[0].psn;
	}
	cr_assert_lt(same_psn, 7, "eight queue pairs, one PSN: not random");
	if (ip) {
		cr_assert_eq(inet_pton(AF_INET, ip, gid + 12), 1);
		cr_assert_arr_eq(e[0].gid, gid, 16);
	}
	cr_assert(memcmp(e[0].mac, (uint8_t[6]){ 0 }, 6), "no MAC address");
	cr_assert_eq(rig_nic_close(nic), 0, "close with queue pairs alive");
}

/*
 * The verbs calls that make a queue pair's queues, interposed: librig
 * calls them through its PLT, so these come first. @fail_cq and @fail_qp
 * fail the n-th call from now (1: the next) with @err, as the kernel
 * fails them when it cannot pin the queues (ib_umem_get: ENOMEM beyond
 * RLIMIT_MEMLOCK, on mlx5 and bnxt_re; rxe pins nothing). @made and
 * @destroyed count the real CQs and QPs made and destroyed meanwhile.
 */
static struct {
	int fail_cq, fail_qp, err;
	int made, destroyed;
} pin;

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	__typeof__(&ibv_create_cq) real = T_NEXT(ibv_create_cq);
	struct ibv_cq *cq;

	if (pin.fail_cq && !--pin.fail_cq) {
		errno = pin.err;
		return NULL;
	}
	cq = real(ctx, cqe, cq_context, channel, comp_vector);
	pin.made += cq != NULL;
	return cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	__typeof__(&ibv_destroy_cq) real = T_NEXT(ibv_destroy_cq);
	int ret = real(cq);

	pin.destroyed += !ret;
	return ret;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	__typeof__(&ibv_create_qp) real = T_NEXT(ibv_create_qp);
	struct ibv_qp *qp;

	if (pin.fail_qp && !--pin.fail_qp) {
		errno = pin.err;
		return NULL;
	}
	qp = real(pd, attr);
	pin.made += qp != NULL;
	return qp;
}

/* Makes a queue pair with the @nth CQ or QP refused with @err; checks it
 * fails with -@err and gives back every CQ it made; returns the message. */
static const char *make_refused(int fail_cq, int fail_qp, int err,
				const char *step)
{
	struct rig_qp *qp = NULL;
	const char *msg;
	int ret;

	pin.fail_cq = fail_cq;
	pin.fail_qp = fail_qp;
	pin.err = err;
	pin.made = pin.destroyed = 0;
	ret = rig_qp_make(nic, &qp);
	msg = rig_errmsg();
	cr_assert_eq(ret, -err, "rig_qp_make: %d, not %d (%s)", ret, -err, msg);
	cr_assert_null(qp);
	cr_assert_eq(pin.fail_cq + pin.fail_qp, 0, "the refusal was not reached");
	cr_assert_eq(pin.made, fail_cq ? fail_cq - 1 : 2);
	cr_assert_eq(pin.destroyed, pin.made, "made %d CQs, gave back %d",
		     pin.made, pin.destroyed);
	cr_assert_not_null(strstr(msg, step), "%s", msg);
	return msg;
}

/*
 * ibv_query_device, interposed too: while @play_vendor is set it reports
 * that vendor id, so the NIC opened meanwhile is taken for that hardware
 * (0x14e4: bnxt_re) by what rig derives from it.
 */
static uint32_t play_vendor;

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	__typeof__(&ibv_query_device) real = T_NEXT(ibv_query_device);
	int ret = real(ctx, attr);

	if (!ret && play_vendor)
		attr->vendor_id = play_vendor;
	return ret;
}

/*
 * M1, C1: mlx5 and bnxt_re pin each queue pair's queues (about 2 MiB for
 * rig's 4095-entry rings on bnxt_re: providers/bnxt_re/verbs.c,
 * bnxt_re_alloc_queues, rounds the send queue up to 8192 128-byte slots),
 * and the kernel counts them against RLIMIT_MEMLOCK, so a program with
 * the default 8 MiB gets ENOMEM from ibv_create_cq or ibv_create_qp after
 * a few queue pairs. On such a NIC (rxe taken for bnxt_re) the message
 * says so: the limit, its value now and what a queue pair pins there,
 * rig_nic_qp_pinned's figure. Soft-RoCE pins nothing: its ENOMEM keeps
 * the plain message, as does any other refusal. A refused make leaks
 * nothing: the next one works.
 */
Test(make, M1_C1_enomem_names_rlimit_memlock)
{
	struct rlimit rl;
	const char *msg;
	struct rig_qp *qp;

	nic = t_nic_open(t_dev());
	cr_assert_eq(rig_nic_qp_pinned(nic), 0, "Soft-RoCE pins no queue memory");
	msg = make_refused(1, 0, ENOMEM, "ibv_create_cq refused by ");
	cr_assert_null(strstr(msg, "RLIMIT_MEMLOCK"), "%s", msg);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());

	play_vendor = 0x14e4;
	nic = t_nic_open(t_dev());
	play_vendor = 0;
	/* The full depth's figure, whatever RIG_QP_DEPTH says (the shallow
	 * pass of tests/run-all sets it). */
	cr_assert_eq(rig_nic_set_depth(nic, RIG_RING_ENTRIES), 0);
	cr_assert_eq(rig_nic_qp_pinned(nic), 2432 * 1024);
	cr_assert_eq(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
	rl.rlim_cur = 8 * MiB;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < rl.rlim_cur)
		rl.rlim_cur = rl.rlim_max;
	cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);

	msg = make_refused(1, 0, ENOMEM, "ibv_create_cq refused by ");
	cr_assert_not_null(strstr(msg, "Cannot allocate memory; queue memory is pinned"), "%s", msg);
	if (rl.rlim_cur == 8 * MiB)
		cr_assert_not_null(strstr(msg, "RLIMIT_MEMLOCK (8192 KiB now; a queue pair pins about 2432 KiB on "),
				   "%s", msg);
	cr_assert_not_null(strstr(msg, "): raise `ulimit -l`"), "%s", msg);
	make_refused(2, 0, ENOMEM, "RLIMIT_MEMLOCK (");
	msg = make_refused(0, 1, ENOMEM, "ibv_create_qp refused by ");
	cr_assert_not_null(strstr(msg, "RLIMIT_MEMLOCK ("), "%s", msg);
	msg = make_refused(0, 1, EINVAL, "ibv_create_qp refused by ");
	cr_assert_null(strstr(msg, "RLIMIT_MEMLOCK"), "%s", msg);
	if (rl.rlim_max == RLIM_INFINITY) {
		rl.rlim_cur = RLIM_INFINITY;
		cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
		msg = make_refused(0, 1, ENOMEM, "RLIMIT_MEMLOCK (unlimited now;");
	}

	qp = t_qp(nic);
	t_connect(qp, qp);
	cr_assert_eq(rig_qp_destroy(qp), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/*
 * M1, Q4: rig_nic_qp_pinned follows the NIC's depth (rig_nic_set_depth):
 * on the device taken for mlx5, 1088 KiB at the full depth (a send queue
 * of 4096 WQEs of 64 bytes, 256 KiB; receive entries of 16 bytes; CQs of
 * 8192 and 4096 CQEs of 64 bytes), 12 KiB at depth 8 (a send queue of
 * 9 x 64 and receives of 8 x 16 in one page, and two CQs of 16 CQEs, a
 * page each), and the full figure again when set back; rig_nic_query
 * gives the depth. Soft-RoCE pins none at any depth.
 */
Test(make, M1_Q4_pinned_follows_the_depth)
{
	struct rig_nic_info info = { .size = sizeof(info) };

	play_vendor = 0x02c9;
	nic = t_nic_open(t_dev());
	play_vendor = 0;
	cr_assert_eq(rig_nic_set_depth(nic, RIG_RING_ENTRIES), 0);
	cr_assert_eq(rig_nic_qp_pinned(nic), 1088 * 1024, "%lld",
		     (long long)rig_nic_qp_pinned(nic));
	cr_assert_eq(rig_nic_query(nic, &info), 0);
	cr_assert_eq(info.depth, RIG_RING_ENTRIES);
	cr_assert_eq(rig_nic_set_depth(nic, 8), 0);
	cr_assert_eq(rig_nic_qp_pinned(nic), 12 * 1024, "%lld",
		     (long long)rig_nic_qp_pinned(nic));
	cr_assert_eq(rig_nic_query(nic, &info), 0);
	cr_assert_eq(info.depth, 8);
	cr_assert_eq(rig_nic_set_depth(nic, RIG_RING_ENTRIES), 0);
	cr_assert_eq(rig_nic_qp_pinned(nic), 1088 * 1024);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());

	nic = t_nic_open(t_dev());
	cr_assert_eq(rig_nic_set_depth(nic, 8), 0);
	cr_assert_eq(rig_nic_qp_pinned(nic), 0);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/*
 * M1: on mlx5 a queue pair is made by ibv_create_qp_ex with
 * send_ops_flags SEND, RDMA_WRITE and RDMA_READ, for mlx5's 64-byte send
 * WQE (lib/qp.c, create_qp); a refused extended create falls back to the
 * plain one; any other provider gets the plain create. The device is
 * taken for mlx5, bnxt_re and itself (play_vendor), and the provider's
 * create_qp_ex, which libibverbs' inline ibv_create_qp_ex calls through
 * the context's verbs ops, is counted (the plain ibv_create_qp calls the
 * provider's create_qp). The queue pair made through it posts with
 * ibv_post_send as any other: a message each way.
 */
static struct ibv_qp *(*real_create_qp_ex)(struct ibv_context *, struct ibv_qp_init_attr_ex *);
static int ex_calls, ex_refuse;
static uint32_t ex_mask;
static uint64_t ex_ops;

static struct ibv_qp *counted_create_qp_ex(struct ibv_context *ctx,
					   struct ibv_qp_init_attr_ex *ax)
{
	ex_calls++;
	ex_mask = ax->comp_mask;
	ex_ops = ax->send_ops_flags;
	if (ex_refuse || !real_create_qp_ex) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return real_create_qp_ex(ctx, ax);
}

/* Opens the device as @vendor (0: itself) and counts its extended
 * creates from its second queue pair on; returns the first. */
static struct rig_qp *open_counted(uint32_t vendor, struct verbs_context **vctx)
{
	struct rig_qp *first;

	play_vendor = vendor;
	nic = t_nic_open(t_dev());
	play_vendor = 0;
	first = t_qp(nic);
	*vctx = verbs_get_ctx(first->ibqp->context);
	cr_assert_not_null(*vctx);
	real_create_qp_ex = (*vctx)->create_qp_ex;
	(*vctx)->create_qp_ex = counted_create_qp_ex;
	ex_calls = ex_refuse = 0;
	return first;
}

Test(make, M1_mlx5_asks_its_64_byte_send_wqe)
{
	static const uint32_t others[] = { 0x14e4, 0 };
	struct verbs_context *vctx;
	struct rig_qp *first, *qp;
	struct t_buf tx, rx;
	size_t i;

	first = open_counted(0x02c9, &vctx);
	qp = t_qp(nic);
	cr_assert_eq(ex_calls, 1, "%d extended creates", ex_calls);
	cr_assert_eq(ex_mask, IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS);
	cr_assert_eq(ex_ops, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE |
			     IBV_QP_EX_WITH_RDMA_READ, "send_ops_flags 0x%llx",
		     (unsigned long long)ex_ops);
	t_connect(qp, first);
	t_buf(&tx, nic, 64, 1);
	t_buf(&rx, nic, 64, 2);
	t_exchange(qp, first, &tx, &rx, 64);
	t_exchange(first, qp, &rx, &tx, 64);
	ex_refuse = 1;
	qp = t_qp(nic);
	cr_assert_eq(ex_calls, 2, "%d extended creates", ex_calls);
	cr_assert_eq(rig_qp_destroy(qp), 0, "%s", rig_errmsg());
	vctx->create_qp_ex = real_create_qp_ex;
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());

	for (i = 0; i < sizeof(others) / sizeof(others[0]); i++) {
		open_counted(others[i], &vctx);
		qp = t_qp(nic);
		cr_assert_eq(ex_calls, 0, "vendor 0x%x: %d extended creates", others[i],
			     ex_calls);
		vctx->create_qp_ex = real_create_qp_ex;
		cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
	}
}

/* Checks that no post changed anything: rooms full, and the next real
 * message is the first to arrive. */
static void assert_untouched(void)
{
	cr_assert_eq(rig_qp_room(a, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(a, RIG_RECEIVE), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(b, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), RIG_RING_ENTRIES);
	send_checked(5);
}

/* P2, P4, C2: every way a post can name bad bytes is -EINVAL and posts
 * nothing; rig_errmsg() says which. */
Test(args, P2_P4_bad_ranges, .init = pair_setup, .fini = pair_teardown)
{
	struct t_buf buf;
	size_t huge = SIZE_MAX;

	t_buf(&buf, nic, 1000, 0);
	cr_assert_eq(rig_qp_send(a, NULL, 0, 1), -EINVAL);
	cr_assert_eq(rig_qp_receive(b, NULL, 0, 1), -EINVAL);
	cr_assert_eq(rig_qp_send(a, buf.r, 1001, 0), -EINVAL);
	cr_assert_eq(rig_qp_send(a, buf.r, 0, 1001), -EINVAL);
	cr_assert_eq(rig_qp_send(a, buf.r, 999, 2), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "not inside"), "%s", rig_errmsg());
	cr_assert_eq(rig_qp_send(a, buf.r, huge, 2), -EINVAL, "at + n overflows");
	cr_assert_eq(rig_qp_send(a, buf.r, 2, huge), -EINVAL, "at + n overflows");
	cr_assert_eq(rig_qp_receive(b, buf.r, 1000, 1), -EINVAL);
	cr_assert_eq(rig_qp_receive(b, buf.r, huge, huge), -EINVAL);
	cr_assert_eq(rig_qp_send(a, buf.r, 1000, 0), 0 - 0, "an empty range at the end is fine");
	/* That one was valid: take it out again, then check nothing else
	 * was posted. It lands in a receive posted now. */
	cr_assert_eq(rig_qp_receive(b, buf.r, 0, 0), 0);
	cr_assert_eq(t_take(a, RIG_SEND, 5000).error, 0);
	cr_assert_eq(t_take(b, RIG_RECEIVE, 5000).bytes, 0);
	assert_untouched();
}

/* P3: a read checks both regions. */
Test(args, P3_bad_read, .init = pair_setup, .fini = pair_teardown)
{
	struct t_buf s, d;

	t_buf(&s, nic, 100, 0);
	t_buf(&d, nic, 100, 0);
	cr_assert_eq(rig_qp_read(a, NULL, 0, d.r, 0, 1), -EINVAL);
	cr_assert_eq(rig_qp_read(a, s.r, 0, NULL, 0, 1), -EINVAL);
	cr_assert_eq(rig_qp_read(a, s.r, 50, d.r, 0, 51), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "source"), "%s", rig_errmsg());
	cr_assert_eq(rig_qp_read(a, s.r, 0, d.r, 50, 51), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "destination"), "%s", rig_errmsg());
	assert_untouched();
}

/* P2, P5: a region of another NIC, and a deregistered one, are refused;
 * the deregistered handle stays safe to pass until its NIC closes. */
Test(args, P2_P5_foreign_and_deregistered_regions, .init = pair_setup,
     .fini = pair_teardown)
{
	struct rig_nic *other = t_nic_open(t_dev());
	struct t_buf mine, theirs;

	t_buf(&mine, nic, 100, 0);
	t_buf(&theirs, other, 100, 0);
	cr_assert_eq(rig_qp_send(a, theirs.r, 0, 1), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "another NIC"), "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive(b, theirs.r, 0, 1), -EINVAL);
	cr_assert_eq(rig_qp_read(a, theirs.r, 0, mine.r, 0, 1), -EINVAL);
	cr_assert_eq(rig_qp_read(a, mine.r, 0, theirs.r, 0, 1), -EINVAL);

	cr_assert_eq(rig_region_deregister(mine.r), 0);
	cr_assert_eq(rig_region_deregister(mine.r), -EINVAL, "twice");
	cr_assert_eq(rig_qp_send(a, mine.r, 0, 1), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "deregistered"), "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive(b, mine.r, 0, 1), -EINVAL);
	cr_assert_eq(rig_qp_read(a, mine.r, 0, mine.r, 0, 1), -EINVAL);
	cr_assert_eq(rig_nic_close(other), 0);
	assert_untouched();
}

/* P2, C2: posts to a queue pair that is not connected; bad sides. */
Test(args, P2_not_connected_and_bad_side)
{
	struct rig_completion c;
	struct t_buf buf;
	struct rig_qp *q;

	nic = t_nic_open(t_dev());
	q = t_qp(nic);
	t_buf(&buf, nic, 100, 0);
	cr_assert_eq(rig_qp_send(q, buf.r, 0, 1), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "not connected"), "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive(q, buf.r, 0, 1), -EINVAL);
	cr_assert_eq(rig_qp_read(q, buf.r, 0, buf.r, 0, 1), -EINVAL);
	cr_assert_eq(rig_qp_room(q, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(q, RIG_RECEIVE), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_poll(q, RIG_SEND, &c), 0);
	cr_assert_eq(rig_qp_room(q, (enum rig_side)2), -EINVAL);
	cr_assert_eq(rig_qp_poll(q, (enum rig_side)2, &c), -EINVAL);
	cr_assert_eq(rig_qp_poll(q, RIG_SEND, NULL), -EINVAL);
	cr_assert_eq(rig_qp_destroy(q), 0);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* rig_qp_peer: a queue pair connected by endpoint names its peer by
 * GID in text and by both queue-pair numbers; a smaller, older structure
 * gets the fields it has; bad calls are -EINVAL and touch nothing. */
Test(args, a_queue_pair_names_its_peer, .init = pair_setup, .fini = pair_teardown)
{
	struct rig_qp_peer p, old, untouched;
	struct rig_endpoint eb;
	char gid[INET6_ADDRSTRLEN];
	struct rig_qp *q;

	rig_qp_endpoint(b, &eb);
	cr_assert_not_null(inet_ntop(AF_INET6, eb.gid, gid, sizeof(gid)));
	memset(&p, 0xa5, sizeof(p));
	p.size = sizeof(p);
	cr_assert_eq(rig_qp_peer(a, &p), 0, "%s", rig_errmsg());
	cr_assert_eq(p.size, sizeof(p));
	cr_assert_eq(p.qp, a->ibqp->qp_num);
	cr_assert_eq(p.peer_qp, b->ibqp->qp_num);
	cr_assert_arr_eq(p.gid, eb.gid, 16);
	cr_assert_str_eq(p.addr, gid);
	/* Soft-RoCE's GIDs of IPv4 addresses are IPv4-mapped */
	cr_assert_eq(strncmp(p.addr, "::ffff:", 7), 0, "%s", p.addr);

	/* an older structure, of the first three fields only */
	memset(&old, 0xa5, sizeof(old));
	old.size = 12;
	cr_assert_eq(rig_qp_peer(b, &old), 0);
	cr_assert_eq(old.size, 12);
	cr_assert_eq(old.qp, b->ibqp->qp_num);
	cr_assert_eq(old.peer_qp, a->ibqp->qp_num);
	cr_assert_eq(old.gid[0], 0xa5, "wrote past the caller's size");

	memset(&untouched, 0x5a, sizeof(untouched));
	untouched.size = sizeof(untouched);
	p = untouched;
	cr_assert_eq(rig_qp_peer(NULL, &p), -EINVAL);
	cr_assert_eq(rig_qp_peer(a, NULL), -EINVAL);
	p.size = 7;
	cr_assert_eq(rig_qp_peer(a, &p), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "size"), "%s", rig_errmsg());
	p.size = sizeof(p);
	q = t_qp(nic);
	cr_assert_eq(rig_qp_peer(q, &p), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "never connected"), "%s", rig_errmsg());
	cr_assert_eq(memcmp(&p, &untouched, sizeof(p)), 0, "a refused call wrote");
	cr_assert_eq(rig_qp_destroy(q), 0);
}

/* M5: connecting twice, or to an endpoint whose qp or psn is over 24
 * bits, is -EINVAL and changes nothing. */
Test(args, M5_connect_refusals, .init = pair_setup, .fini = pair_teardown)
{
	struct rig_endpoint e;
	struct rig_qp *q = t_qp(nic);

	rig_qp_endpoint(b, &e);
	cr_assert_eq(rig_qp_connect(a, &e), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "already connected"), "%s", rig_errmsg());
	e.qp = 0x1000000;
	cr_assert_eq(rig_qp_connect(q, &e), -EINVAL);
	rig_qp_endpoint(b, &e);
	e.psn = 0x1000000;
	cr_assert_eq(rig_qp_connect(q, &e), -EINVAL);
	cr_assert_eq(rig_qp_connect(q, NULL), -EINVAL);
	/* q is still unconnected and connects fine to itself. */
	cr_assert_eq(rig_qp_room(q, RIG_SEND), RIG_RING_ENTRIES);
	rig_qp_endpoint(q, &e);
	cr_assert_eq(rig_qp_connect(q, &e), 0, "%s", rig_errmsg());
	assert_untouched();
}

/* D1: destroy frees a connected queue pair; the NIC closes cleanly with
 * regions still registered. */
Test(destroy, D1_destroy_then_close, .init = pair_setup)
{
	struct t_buf buf;

	t_buf(&buf, nic, 100, 0);
	cr_assert_eq(rig_qp_receive(a, buf.r, 0, 100), 0);
	cr_assert_eq(rig_qp_destroy(a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(b), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* Batches: one doorbell for up to RIG_BATCH_MAX entries, each entry's
 * cookie back with its completion, in ring order (Q2). */
Test(batch, Q2_batch_post_and_poll_with_cookies, .init = pair_setup,
     .fini = pair_teardown)
{
	struct rig_post rx[RIG_BATCH_MAX], tx[RIG_BATCH_MAX];
	struct rig_completion c[RIG_BATCH_MAX];
	uint64_t cookies[RIG_BATCH_MAX];
	struct t_buf src, dst;
	int i, got, n;

	t_buf(&src, nic, RIG_BATCH_MAX * 64, 3);
	t_buf(&dst, nic, RIG_BATCH_MAX * 64, 0);
	for (i = 0; i < RIG_BATCH_MAX; i++) {
		rx[i] = (struct rig_post){ dst.r, (size_t)i * 64, 64, 1000 + i };
		tx[i] = (struct rig_post){ src.r, (size_t)i * 64, (size_t)i + 1, 2000 + i };
	}
	cr_assert_eq(rig_qp_receive_batch(b, rx, RIG_BATCH_MAX), RIG_BATCH_MAX, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), RIG_RING_ENTRIES - RIG_BATCH_MAX);
	cr_assert_eq(rig_qp_send_batch(a, tx, RIG_BATCH_MAX), RIG_BATCH_MAX, "%s", rig_errmsg());
	for (got = 0; got < RIG_BATCH_MAX; got += n) {
		n = rig_qp_poll_batch(b, RIG_RECEIVE, c + got, cookies + got, RIG_BATCH_MAX - got);
		cr_assert_geq(n, 0);
	}
	for (i = 0; i < RIG_BATCH_MAX; i++) {
		cr_assert_eq(c[i].error, 0, "%s", c[i].why);
		cr_assert_eq(c[i].bytes, (uint32_t)i + 1, "receive %d out of order", i);
		cr_assert_eq(cookies[i], 1000u + i);
		cr_assert_arr_eq(dst.mem + i * 64, src.mem + i * 64, i + 1);
	}
	for (got = 0; got < RIG_BATCH_MAX; got += n) {
		n = rig_qp_poll_batch(a, RIG_SEND, c + got, cookies + got, RIG_BATCH_MAX - got);
		cr_assert_geq(n, 0);
	}
	for (i = 0; i < RIG_BATCH_MAX; i++) {
		cr_assert_eq(c[i].bytes, (uint32_t)i + 1);
		cr_assert_eq(cookies[i], 2000u + i);
	}
	cr_assert_eq(rig_qp_poll_batch(a, RIG_SEND, c, cookies, RIG_BATCH_MAX), 0);
	assert_untouched();
}

/* Single posts take a cookie too (rig_qp_tag), given back with their
 * completions in ring order (Q2), untagged ones with 0; a tag with no
 * entry due, or a bad side, is -EINVAL and changes nothing (C2). */
Test(batch, Q2_C2_single_posts_tagged_get_their_cookies_back, .init = pair_setup,
     .fini = pair_teardown)
{
	struct rig_completion c[4];
	uint64_t cookies[4];
	struct t_buf src, dst;
	int i, got, n;

	t_buf(&src, nic, 256, 4);
	t_buf(&dst, nic, 256, 0);
	cr_assert_eq(rig_qp_tag(a, RIG_SEND, 1), -EINVAL, "a tag with nothing posted");
	cr_assert_eq(rig_qp_tag(NULL, RIG_SEND, 1), -EINVAL);
	for (i = 0; i < 4; i++) {
		cr_assert_eq(rig_qp_receive(b, dst.r, (size_t)i * 64, 64), 0, "%s", rig_errmsg());
		if (i != 2)	/* the third stays untagged: 0 */
			cr_assert_eq(rig_qp_tag(b, RIG_RECEIVE, 300u + i), 0, "%s", rig_errmsg());
		cr_assert_eq(rig_qp_send(a, src.r, (size_t)i * 64, (size_t)i + 1), 0, "%s",
			     rig_errmsg());
		cr_assert_eq(rig_qp_tag(a, RIG_SEND, 400u + i), 0, "%s", rig_errmsg());
	}
	cr_assert_eq(rig_qp_tag(a, (enum rig_side)2, 9), -EINVAL);
	for (got = 0; got < 4; got += n) {
		n = rig_qp_poll_batch(b, RIG_RECEIVE, c + got, cookies + got, 4 - got);
		cr_assert_geq(n, 0);
	}
	for (i = 0; i < 4; i++) {
		cr_assert_eq(c[i].bytes, (uint32_t)i + 1, "receive %d out of order", i);
		cr_assert_eq(cookies[i], i == 2 ? 0 : 300u + i, "receive %d: cookie %llu", i,
			     (unsigned long long)cookies[i]);
	}
	for (got = 0; got < 4; got += n) {
		n = rig_qp_poll_batch(a, RIG_SEND, c + got, cookies + got, 4 - got);
		cr_assert_geq(n, 0);
	}
	for (i = 0; i < 4; i++)
		cr_assert_eq(cookies[i], 400u + i, "send %d: cookie %llu", i,
			     (unsigned long long)cookies[i]);
	cr_assert_eq(rig_qp_tag(a, RIG_SEND, 1), -EINVAL, "a tag with nothing due");
}

/* C2: one bad entry, or too little room, posts none of the batch. */
Test(batch, C2_bad_batches_post_nothing, .init = pair_setup, .fini = pair_teardown)
{
	struct rig_post p[3];
	struct t_buf buf;
	int i;

	t_buf(&buf, nic, 256, 0);
	for (i = 0; i < 3; i++)
		p[i] = (struct rig_post){ buf.r, 0, 8, 0 };
	p[1].at = 250;	/* 250 + 8 > 256 */
	cr_assert_eq(rig_qp_send_batch(a, p, 3), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "entry 1"), "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive_batch(b, p, 3), -EINVAL);
	p[1].at = 0;
	cr_assert_eq(rig_qp_send_batch(a, p, 0), -EINVAL);
	cr_assert_eq(rig_qp_send_batch(a, p, RIG_BATCH_MAX + 1), -EINVAL);
	cr_assert_eq(rig_qp_send_batch(a, NULL, 1), -EINVAL);
	for (i = 0; i < RIG_RING_ENTRIES - 2; i++)
		cr_assert_eq(rig_qp_receive(b, buf.r, 0, 8), 0);
	cr_assert_eq(rig_qp_receive_batch(b, p, 3), -ENOSPC);
	cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), 2);
	cr_assert_eq(rig_qp_receive_batch(b, p, 2), 2);
	cr_assert_eq(rig_qp_room(b, RIG_RECEIVE), 0);
	cr_assert_eq(rig_qp_room(a, RIG_SEND), RIG_RING_ENTRIES);
}
