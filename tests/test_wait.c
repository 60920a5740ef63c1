/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/* rig_qp_wait on the device (rig(7) T2). */
#include <criterion/criterion.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "t_device.h"

static struct rig_nic *nic;
static struct rig_qp *a, *b;
static struct t_buf src, dst;

static void pair_setup(void)
{
	nic = t_nic_open(t_dev());
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
	t_buf(&src, nic, 4096, 1);
	t_buf(&dst, nic, 4096, 0);
}

static void pair_teardown(void)
{
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* T2: a negative time, or nothing due, is -EINVAL. */
Test(wait, T2_einval, .init = pair_setup, .fini = pair_teardown)
{
	struct rig_completion c;

	cr_assert_eq(rig_qp_wait(a, RIG_RECEIVE, 1000, &c), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "no entry"), "%s", rig_errmsg());
	cr_assert_eq(rig_qp_receive(a, dst.r, 0, 64), 0);
	cr_assert_eq(rig_qp_wait(a, RIG_RECEIVE, -1, &c), -EINVAL);
	cr_assert_eq(rig_qp_wait(a, (enum rig_side)2, 0, &c), -EINVAL);
	cr_assert_eq(rig_qp_wait(a, RIG_RECEIVE, 0, NULL), -EINVAL);
	cr_assert_eq(rig_qp_wait(a, RIG_RECEIVE, 0, &c), 0, "nothing came: 0 at once");
	cr_assert_eq(rig_qp_room(a, RIG_RECEIVE), RIG_RING_ENTRIES - 1);
}

/* T2: with nothing coming, wait returns 0 at its bound: nothing early.
 * Late: the kernel's timer slack (50 us), then however long a busy host
 * keeps the emulated guest's thread from running, which is not the
 * library's to bound. 100 ms still catches a wait that sleeps through
 * its bound once more (200 ms late at the 200 ms bound). */
Test(wait, T2_returns_0_at_the_bound, .init = pair_setup, .fini = pair_teardown)
{
	struct rig_completion c;
	int64_t bounds_us[] = { 0, 1000, 20000, 200000 };
	size_t i;

	cr_assert_eq(rig_qp_receive(a, dst.r, 0, 64), 0);
	for (i = 0; i < sizeof(bounds_us) / sizeof(bounds_us[0]); i++) {
		double t0 = t_now_ms(), dt;

		cr_assert_eq(rig_qp_wait(a, RIG_RECEIVE, bounds_us[i], &c), 0);
		dt = t_now_ms() - t0;
		cr_log_info("wait(%ld us) returned 0 after %.3f ms", (long)bounds_us[i], dt);
		cr_assert_geq(dt, bounds_us[i] / 1000.0, "woke early: %.3f ms", dt);
		cr_assert_leq(dt, bounds_us[i] / 1000.0 + 100, "woke late: %.3f ms for %ld us",
			      dt, (long)bounds_us[i]);
	}
	cr_assert_eq(rig_qp_room(a, RIG_RECEIVE), RIG_RING_ENTRIES - 1, "the entry is still due");
}

struct sender {
	struct rig_qp *qp;
	int delay_ms;
	int n;
};

static void *send_later(void *arg)
{
	struct sender *s = arg;
	struct rig_completion c;
	int i;

	for (i = 0; i < s->n; i++) {
		usleep(s->delay_ms * 1000);
		if (rig_qp_send(s->qp, src.r, 0, 64) || rig_qp_wait(s->qp, RIG_SEND, 5000000, &c) != 1 ||
		    c.error)
			return (void *)1;
	}
	return NULL;
}

/* T2: a completion that comes mid-wait, from another thread, ends it. */
Test(wait, T2_wakes_when_a_completion_comes, .init = pair_setup,
     .fini = pair_teardown)
{
	struct sender s = { a, 100, 1 };
	struct rig_completion c;
	pthread_t t;
	double t0, dt;
	void *ret;

	cr_assert_eq(rig_qp_receive(b, dst.r, 0, 64), 0);
	t0 = t_now_ms();
	pthread_create(&t, NULL, send_later, &s);
	cr_assert_eq(rig_qp_wait(b, RIG_RECEIVE, 10000000, &c), 1, "%s", rig_errmsg());
	dt = t_now_ms() - t0;
	pthread_join(t, &ret);
	cr_assert_null(ret);
	cr_assert_eq(c.error, 0);
	cr_assert_eq(c.bytes, 64);
	cr_assert_arr_eq(dst.mem, src.mem, 64);
	cr_assert_geq(dt, 100.0);
	cr_assert_lt(dt, 1000.0, "woke %.1f ms after a send made at 100 ms", dt);
}

/* T2, C3: two threads sleep on two queue pairs of one NIC (one completion
 * channel); each wakes for its own completion, whoever reads the event. */
struct waiter_arg {
	struct rig_qp *qp;
	int n;
	int got;
};

static void *wait_many(void *arg)
{
	struct waiter_arg *w = arg;
	struct rig_completion c;
	int i;

	for (i = 0; i < w->n; i++)
		if (rig_qp_wait(w->qp, RIG_RECEIVE, 5000000, &c) == 1 && !c.error)
			w->got++;
	return NULL;
}

Test(wait, T2_C3_two_threads_one_channel, .init = pair_setup,
     .fini = pair_teardown, .timeout = 120)
{
	enum { N = 200 };
	struct rig_qp *c_ = t_qp(nic), *d = t_qp(nic);
	struct waiter_arg wb = { b, N, 0 }, wd = { d, N, 0 };
	pthread_t tb, td;
	int i;

	/* One thread per queue pair (C3): this one owns the senders a and c,
	 * the two waiters own the receivers b and d. */
	t_connect(c_, d);
	for (i = 0; i < N; i++) {
		cr_assert_eq(rig_qp_receive(b, dst.r, 0, 64), 0);
		cr_assert_eq(rig_qp_receive(d, dst.r, 64, 64), 0);
	}
	pthread_create(&tb, NULL, wait_many, &wb);
	pthread_create(&td, NULL, wait_many, &wd);
	for (i = 0; i < N; i++) {
		usleep((i % 7) * 300);
		cr_assert_eq(rig_qp_send(i & 1 ? a : c_, src.r, 0, 64), 0);
		cr_assert_eq(rig_qp_send(i & 1 ? c_ : a, src.r, 0, 64), 0);
		cr_assert_eq(t_take(a, RIG_SEND, 5000).error, 0);
		cr_assert_eq(t_take(c_, RIG_SEND, 5000).error, 0);
	}
	pthread_join(tb, NULL);
	pthread_join(td, NULL);
	cr_assert_eq(wb.got, N);
	cr_assert_eq(wd.got, N);
}

/* T2: no wakeup is lost. Two threads ping-pong, each sleeping in
 * rig_qp_wait for the other's message; a lost wakeup would stall a wait
 * for its whole 10 s bound and fail the round. */
struct pinger {
	struct rig_qp *qp;
	struct t_buf *buf;
	int rounds;
	int first;
	int failed_round;
};

static void *ping(void *arg)
{
	struct pinger *p = arg;
	struct rig_completion c;
	int i;

	for (i = 0; i < p->rounds; i++) {
		if (rig_qp_receive(p->qp, p->buf->r, 0, 8))
			goto fail;
		if (p->first && (rig_qp_send(p->qp, p->buf->r, 8, 8) ||
				 rig_qp_wait(p->qp, RIG_SEND, 10000000, &c) != 1 || c.error))
			goto fail;
		if (rig_qp_wait(p->qp, RIG_RECEIVE, 10000000, &c) != 1 || c.error)
			goto fail;
		if (!p->first && (rig_qp_send(p->qp, p->buf->r, 8, 8) ||
				  rig_qp_wait(p->qp, RIG_SEND, 10000000, &c) != 1 || c.error))
			goto fail;
	}
	p->failed_round = -1;
	return NULL;
fail:
	p->failed_round = i;
	return NULL;
}

Test(wait, T2_no_lost_wakeup, .init = pair_setup, .fini = pair_teardown,
     .timeout = 600)
{
	int rounds = getenv("RIG_TEST_WAIT_ROUNDS") ? atoi(getenv("RIG_TEST_WAIT_ROUNDS")) : 100000;
	struct t_buf bufb;
	struct pinger pa = { a, &src, rounds / 2, 1, 0 };
	struct pinger pb = { b, &bufb, rounds / 2, 0, 0 };
	pthread_t ta, tb;

	t_buf(&bufb, nic, 64, 3);
	pthread_create(&ta, NULL, ping, &pa);
	pthread_create(&tb, NULL, ping, &pb);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	/* Each round is two waits per thread on a completion that races the
	 * arming of the CQ. */
	cr_assert_eq(pa.failed_round, -1, "a stalled in round %d", pa.failed_round);
	cr_assert_eq(pb.failed_round, -1, "b stalled in round %d", pb.failed_round);
}

/* T2: an idle wait sleeps: under 5% of one core over 2 s. */
Test(wait, T2_idle_wait_burns_no_core, .init = pair_setup, .fini = pair_teardown)
{
	struct rig_completion c;
	struct rusage r0, r1;
	double cpu_ms;

	cr_assert_eq(rig_qp_receive(a, dst.r, 0, 64), 0);
	getrusage(RUSAGE_THREAD, &r0);
	cr_assert_eq(rig_qp_wait(a, RIG_RECEIVE, 2000000, &c), 0);
	getrusage(RUSAGE_THREAD, &r1);
	cpu_ms = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) * 1e3 +
		 (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e3 +
		 (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) * 1e3 +
		 (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e3;
	cr_log_info("idle 2 s wait used %.2f ms of CPU", cpu_ms);
	cr_assert_lt(cpu_ms, 100.0, "a 2 s idle wait used %.1f ms of CPU", cpu_ms);
}

/*
 * T2: a thread that slept in rig_qp_wait leaves nothing behind when it
 * exits. Each sleeping thread gets an io_uring and an eventfd of its own;
 * 100 threads, one after another, each sleep once (a 20 ms bound, far past
 * the 50 us spin, on a receive nobody sends to) and exit. The queue pair
 * passes from thread to thread (one at a time, C3); it is made before the
 * count, so only what the sleeps took can differ.
 */
Test(wait, T2_exited_sleepers_leave_no_fd, .init = pair_setup,
     .fini = pair_teardown, .timeout = 120)
{
	enum { THREADS = 100 };
	int before, after, i;

	cr_assert_eq(rig_qp_receive(a, dst.r, 0, 64), 0);
	before = t_fd_count();
	for (i = 0; i < THREADS; i++)
		t_sleep_in_a_thread(a, i);
	after = t_fd_count();
	cr_assert_eq(after, before, "%d threads that slept once left %d fds open",
		     THREADS, after - before);
	cr_assert_eq(rig_qp_room(a, RIG_RECEIVE), RIG_RING_ENTRIES - 1, "the entry is still due");
}

/* ---- a sleep whose io_uring_enter fails ------------------------------- */

#if defined(__x86_64__)
#define T_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define T_AUDIT_ARCH AUDIT_ARCH_AARCH64
#endif

#ifdef T_AUDIT_ARCH
/*
 * From here on, io_uring_enter fails with ENOMEM whenever it would submit
 * 3 entries or more: the 3 polls (completion channel, eventfd, async fd)
 * a sleep of rig_qp_wait submits in one enter, plus any that an earlier
 * failed enter left queued. Every other system call, and every smaller
 * enter (a cleanup's), goes through. (args[1], to_submit, is an unsigned
 * int: its low word, first on a little-endian machine.)
 */
static void fail_enters_of_3_or_more(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, T_AUDIT_ARCH, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_enter, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 3, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOMEM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };

	T_CHILD_CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS: %m");
	T_CHILD_CHECK(syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0, "seccomp: %m");
}

static void enter_fails_child(void)
{
	struct rig_completion c;
	struct rig_qp *q, *p;
	struct rig_nic *n;
	struct rig_region *r;
	static uint8_t mem[4096];
	int i, ret;

	T_CHILD_CHECK(rig_nic_open(t_dev(), &n) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_make(n, &q) == 0 && rig_qp_make(n, &p) == 0, "%s", rig_errmsg());
	{
		struct rig_endpoint eq, ep;

		rig_qp_endpoint(q, &eq);
		rig_qp_endpoint(p, &ep);
		T_CHILD_CHECK(rig_qp_connect(q, &ep) == 0 && rig_qp_connect(p, &eq) == 0, "%s",
		      rig_errmsg());
	}
	T_CHILD_CHECK(rig_region_register(n, mem, sizeof(mem), &r) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_receive(q, r, 0, 64) == 0, "%s", rig_errmsg());
	fail_enters_of_3_or_more();
	for (i = 0; i < 8; i++) {
		/* What the parent reports if a signal ends this child. */
		t_child_say("in wait %d of 8", i);
		/* A bound long enough that every wait gets past its spin to the
		 * sleep, however the emulated guest stalls it; the failed enter
		 * returns at once. */
		ret = rig_qp_wait(q, RIG_RECEIVE, 2000000, &c);
		T_CHILD_CHECK(ret == -ENOMEM, "wait %d: %d (%s), expected -ENOMEM", i, ret, rig_errmsg());
		T_CHILD_CHECK(strstr(rig_errmsg(), "io_uring"),
		      "wait %d: the message does not name io_uring: %s", i, rig_errmsg());
	}
	T_CHILD_CHECK(rig_qp_room(q, RIG_RECEIVE) == RIG_RING_ENTRIES - 1, "the entry is still due");
	t_child_say("%s", "");
}
#endif

/*
 * T2, C1: a sleep whose io_uring_enter fails reports it (-ENOMEM, and
 * rig_errmsg() names io_uring) and leaves no poll queued behind: the next
 * waits fail the same way, each on its own 3 polls, instead of finding the
 * submission queue filling up with polls no enter took until a sleep gets
 * no SQE at all. A seccomp filter makes the enters fail; it is in a child
 * process because a filter cannot be removed.
 */
Test(wait, T2_failed_sleep_reports_ENOMEM_every_time)
{
#ifdef T_AUDIT_ARCH
	t_in_child(enter_fails_child);
#else
	cr_skip_test("no seccomp audit arch for this machine in the test");
#endif
}
