/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/* rig_qp_wait on the device (rig(7) T2). */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <liburing.h>
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

static void no_lost_wakeup(int64_t spin)
{
	int rounds = getenv("RIG_TEST_WAIT_ROUNDS") ? atoi(getenv("RIG_TEST_WAIT_ROUNDS")) : 100000;
	struct t_buf bufb;
	struct pinger pa = { a, &src, rounds / 2, 1, 0 };
	struct pinger pb = { b, &bufb, rounds / 2, 0, 0 };
	pthread_t ta, tb;

	cr_assert_eq(rig_nic_set_spin(nic, spin), 0);
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

/* With the default spin, most waits end in it; the rest race the arming. */
Test(wait, T2_no_lost_wakeup, .init = pair_setup, .fini = pair_teardown,
     .timeout = 600)
{
	no_lost_wakeup(RIG_SPIN_ADAPTIVE);
}

/* Without a spin, every wait arms and sleeps on the polls its thread
 * keeps armed from the last one, while the other thread's message races
 * it. */
Test(wait, T2_no_lost_wakeup_never_spinning, .init = pair_setup, .fini = pair_teardown,
     .timeout = 600)
{
	no_lost_wakeup(RIG_SPIN_NEVER);
}

static double thread_cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Every read of the device's CQs, through its ops table (ibv_poll_cq()
 * is an inline call of ops.poll_cq, for rig's inline poll and its library
 * alike). */
static int (*real_poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
static unsigned long cq_reads;

static int counting_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	__atomic_fetch_add(&cq_reads, 1, __ATOMIC_RELAXED);
	return real_poll_cq(cq, n, wc);
}

/* T2: an idle wait sleeps. The verdict counts CQ reads, not CPU time: in
 * the emulated guest a thread's CPU clock runs on while the host takes
 * the virtual CPU away, so on a loaded host a spin of 50 us can read as
 * many milliseconds. A wait that spun for its 2 s would read the CQ
 * hundreds of thousands of times even there; one that sleeps reads it
 * during its spin (50 us at most) and once it wakes: at most 2000 reads
 * here. Twice, so that the second wait sleeps on polls the first left
 * armed. The CPU time is logged (bench/guest reads it). */
Test(wait, T2_idle_wait_burns_no_core, .init = pair_setup, .fini = pair_teardown)
{
	struct ibv_context *ctx = a->ring[RIG_RECEIVE].cq->context;
	struct rig_completion c;
	unsigned long reads;
	double cpu0, cpu_ms;
	int i;

	cr_assert_eq(rig_qp_receive(a, dst.r, 0, 64), 0);
	real_poll_cq = ctx->ops.poll_cq;
	ctx->ops.poll_cq = counting_poll_cq;
	for (i = 0; i < 2; i++) {
		cpu0 = thread_cpu_ms();
		__atomic_store_n(&cq_reads, 0, __ATOMIC_RELAXED);
		cr_assert_eq(rig_qp_wait(a, RIG_RECEIVE, 2000000, &c), 0);
		reads = __atomic_load_n(&cq_reads, __ATOMIC_RELAXED);
		cpu_ms = thread_cpu_ms() - cpu0;
		cr_log_info("idle 2 s wait %d used %.3f ms of CPU, %lu CQ reads",
			    i, cpu_ms, reads);
		cr_assert_leq(reads, 2000, "a 2 s idle wait read the CQs %lu times", reads);
	}
	ctx->ops.poll_cq = real_poll_cq;
}

/* rig_nic_set_spin: a value out of range is -EINVAL and changes nothing. */
Test(wait, spin_setting_einval, .init = pair_setup, .fini = pair_teardown)
{
	cr_assert_eq(rig_nic_set_spin(NULL, 0), -EINVAL);
	cr_assert_eq(rig_nic_set_spin(nic, -2), -EINVAL);
	cr_assert_not_null(strstr(rig_errmsg(), "range"), "%s", rig_errmsg());
	cr_assert_eq(rig_nic_set_spin(nic, RIG_SPIN_MAX_NS + 1), -EINVAL);
	cr_assert_eq(rig_nic_set_spin(nic, RIG_SPIN_NEVER), 0);
	cr_assert_eq(rig_nic_set_spin(nic, RIG_SPIN_MAX_NS), 0);
	cr_assert_eq(rig_nic_set_spin(nic, RIG_SPIN_ADAPTIVE), 0);
}

/*
 * T2: the polls a timed-out wait leaves armed, and the CQ arming it
 * leaves unused, still wake the next wait: a message sent 100 ms into
 * it ends it. Then the same after the application took a completion
 * with its own poll between two waits (the arming it used up must be
 * redone). No spin: each wait goes straight to its sleep.
 */
Test(wait, T2_wakes_after_a_timeout, .init = pair_setup, .fini = pair_teardown)
{
	struct sender s = { a, 100, 1 };
	struct rig_completion c;
	pthread_t t;
	double t0, dt;
	void *ret;
	int round;

	cr_assert_eq(rig_nic_set_spin(nic, RIG_SPIN_NEVER), 0);
	for (round = 0; round < 2; round++) {
		cr_assert_eq(rig_qp_receive(b, dst.r, 0, 64), 0);
		cr_assert_eq(rig_qp_wait(b, RIG_RECEIVE, 20000, &c), 0, "round %d", round);
		if (round == 1) {
			/* A message the application polls itself. */
			cr_assert_eq(rig_qp_receive(b, dst.r, 0, 64), 0);
			s.delay_ms = 0;
			pthread_create(&t, NULL, send_later, &s);
			pthread_join(t, &ret);
			cr_assert_null(ret);
			cr_assert_eq(t_take(b, RIG_RECEIVE, 5000).error, 0);
			s.delay_ms = 100;
		}
		t0 = t_now_ms();
		pthread_create(&t, NULL, send_later, &s);
		cr_assert_eq(rig_qp_wait(b, RIG_RECEIVE, 10000000, &c), 1, "%s", rig_errmsg());
		dt = t_now_ms() - t0;
		pthread_join(t, &ret);
		cr_assert_null(ret);
		cr_assert_eq(c.error, 0);
		cr_assert_eq(c.bytes, 64);
		cr_assert_lt(dt, 1000.0, "round %d: woke %.1f ms after a send made at 100 ms",
			     round, dt);
	}
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

/* ---- a poll that fails ----------------------------------------------- */

/*
 * This executable's io_uring_submit_and_wait_timeout comes before
 * liburing's (the enter a sleep of rig_qp_wait makes). In a thread that
 * sets fail_polls it first gives each poll it is about to submit a flag
 * no kernel knows, so the kernel fails the poll with -EINVAL, as a kernel
 * that refuses multishot polls does; then it calls liburing's.
 */
static int (*real_submit_and_wait_timeout)(struct io_uring *, struct io_uring_cqe **,
					   unsigned, struct __kernel_timespec *, sigset_t *);
static __thread bool fail_polls;
static __thread int polls_failed;

__attribute__((constructor)) static void find_real_submit(void)
{
	real_submit_and_wait_timeout = T_NEXT(io_uring_submit_and_wait_timeout);
}

int io_uring_submit_and_wait_timeout(struct io_uring *ring, struct io_uring_cqe **cqe,
				     unsigned wait_nr, struct __kernel_timespec *ts,
				     sigset_t *sigmask)
{
	unsigned i;

	for (i = ring->sq.sqe_head; fail_polls && i != ring->sq.sqe_tail; i++) {
		struct io_uring_sqe *sqe = &ring->sq.sqes[i & *ring->sq.kring_mask];

		if (sqe->opcode == IORING_OP_POLL_ADD) {
			sqe->len |= 1u << 31;
			polls_failed++;
		}
	}
	return real_submit_and_wait_timeout(ring, cqe, wait_nr, ts, sigmask);
}

/*
 * T2: a poll the sleep needs that fails (here every poll, -EINVAL) fails
 * the wait with its error, at once, instead of being added again at each
 * turn, each turn's enter returning at once, a busy loop to the bound.
 * Then the thread's next wait starts afresh: it sleeps, and a message
 * 100 ms into it ends it. No spin: the wait goes straight to its sleep.
 */
Test(wait, T2_failed_poll_fails_the_wait, .init = pair_setup, .fini = pair_teardown)
{
	struct sender s = { a, 100, 1 };
	struct rig_completion c;
	double t0, cpu0, dt, cpu_ms;
	pthread_t t;
	void *sent;
	int ret;

	cr_assert_not_null(real_submit_and_wait_timeout, "%s", dlerror());
	cr_assert_eq(rig_nic_set_spin(nic, RIG_SPIN_NEVER), 0);
	cr_assert_eq(rig_qp_receive(b, dst.r, 0, 64), 0);
	fail_polls = true;
	t0 = t_now_ms();
	cpu0 = thread_cpu_ms();
	ret = rig_qp_wait(b, RIG_RECEIVE, 2000000, &c);
	cpu_ms = thread_cpu_ms() - cpu0;
	dt = t_now_ms() - t0;
	fail_polls = false;
	cr_log_info("the wait returned %d after %.1f ms, %.1f ms of CPU, %d polls failed: %s",
		    ret, dt, cpu_ms, polls_failed, rig_errmsg());
	cr_assert_gt(polls_failed, 0, "the wait never submitted a poll");
	cr_assert_eq(ret, -EINVAL, "%d: %s", ret, rig_errmsg());
	cr_assert_not_null(strstr(rig_errmsg(), "io_uring poll of"), "%s", rig_errmsg());
	cr_assert_lt(dt, 1000.0, "a wait whose poll failed returned after %.1f ms", dt);
	cr_assert_lt(cpu_ms, 500.0, "a wait whose poll failed used %.1f ms of CPU", cpu_ms);

	t0 = t_now_ms();
	pthread_create(&t, NULL, send_later, &s);
	cr_assert_eq(rig_qp_wait(b, RIG_RECEIVE, 10000000, &c), 1, "%s", rig_errmsg());
	dt = t_now_ms() - t0;
	pthread_join(t, &sent);
	cr_assert_null(sent);
	cr_assert_eq(c.error, 0);
	cr_assert_eq(c.bytes, 64);
	cr_assert_lt(dt, 1000.0, "woke %.1f ms after a send made at 100 ms", dt);
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

/* ---- system calls per sleep/wake cycle ------------------------------- */

#if defined(T_AUDIT_ARCH) && defined(SECCOMP_FILTER_FLAG_NEW_LISTENER) && \
	defined(SECCOMP_USER_NOTIF_FLAG_CONTINUE)
#include <poll.h>
#include <sys/ioctl.h>

/*
 * The waiting thread runs under a seccomp filter that hands each of its
 * system calls to a supervisor thread (SECCOMP_RET_USER_NOTIF), which
 * counts it and lets it run (SECCOMP_USER_NOTIF_FLAG_CONTINUE): a count
 * of exactly the calls that thread makes, whatever the kernel. The
 * sender sends message i only once the waiter entered io_uring_enter in
 * wait i, so every wait sleeps and is woken by the completion.
 */
enum { SC_WAITS = 200, SC_WARMUP = 2 };

static struct {
	int listener;			/* the filter's notification fd */
	unsigned long calls, enters;	/* by the waiting thread */
	unsigned long by_nr[512];
	int waiting;			/* the wait the waiter is in, from 1 */
	unsigned long enters_mark;	/* enters before that wait */
	int done;
	struct rig_qp *tx, *rx;
	struct rig_region *r;
	unsigned long per_wait[SC_WAITS];
	int failed;
} sc = { .listener = -1 };

static void *sc_supervise(void *unused)
{
	struct seccomp_notif_sizes sizes;
	struct seccomp_notif *req;
	struct seccomp_notif_resp *resp;

	(void)unused;
	T_CHILD_CHECK(syscall(__NR_seccomp, SECCOMP_GET_NOTIF_SIZES, 0, &sizes) == 0, "%m");
	req = calloc(1, sizes.seccomp_notif > sizeof(*req) ? sizes.seccomp_notif : sizeof(*req));
	resp = calloc(1, sizes.seccomp_notif_resp > sizeof(*resp) ? sizes.seccomp_notif_resp :
			 sizeof(*resp));
	while (__atomic_load_n(&sc.listener, __ATOMIC_ACQUIRE) < 0)
		sched_yield();
	while (!__atomic_load_n(&sc.done, __ATOMIC_ACQUIRE)) {
		struct pollfd p = { sc.listener, POLLIN, 0 };

		if (poll(&p, 1, 100) <= 0 || !(p.revents & POLLIN))
			continue;
		memset(req, 0, sizes.seccomp_notif);
		if (ioctl(sc.listener, SECCOMP_IOCTL_NOTIF_RECV, req))
			continue;	/* the thread went */
		if (req->data.nr < 512)
			sc.by_nr[req->data.nr]++;
		if (req->data.nr == __NR_io_uring_enter)
			__atomic_add_fetch(&sc.enters, 1, __ATOMIC_RELEASE);
		__atomic_add_fetch(&sc.calls, 1, __ATOMIC_RELEASE);
		memset(resp, 0, sizes.seccomp_notif_resp);
		resp->id = req->id;
		resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
		ioctl(sc.listener, SECCOMP_IOCTL_NOTIF_SEND, resp);
	}
	return NULL;
}

static void *sc_wait(void *unused)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
	};
	struct sock_fprog prog = { 1, f };
	struct rig_completion c;
	int i, fd;

	(void)unused;
	T_CHILD_CHECK(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS: %m");
	fd = syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
	T_CHILD_CHECK(fd >= 0, "seccomp: %m");
	__atomic_store_n(&sc.listener, fd, __ATOMIC_RELEASE);
	for (i = 0; i < SC_WAITS; i++) {
		unsigned long c0;

		if (rig_qp_receive(sc.rx, sc.r, 0, 64))
			break;
		c0 = __atomic_load_n(&sc.calls, __ATOMIC_ACQUIRE);
		sc.enters_mark = __atomic_load_n(&sc.enters, __ATOMIC_ACQUIRE);
		__atomic_store_n(&sc.waiting, i + 1, __ATOMIC_RELEASE);
		if (rig_qp_wait(sc.rx, RIG_RECEIVE, 10000000, &c) != 1 || c.error)
			break;
		sc.per_wait[i] = __atomic_load_n(&sc.calls, __ATOMIC_ACQUIRE) - c0;
	}
	sc.failed = i < SC_WAITS;
	__atomic_store_n(&sc.waiting, -1, __ATOMIC_RELEASE);
	return NULL;
}

static void syscalls_child(void)
{
	static uint8_t mem[4096];
	struct rig_endpoint ea, eb;
	struct rig_completion c;
	struct rig_nic *n;
	pthread_t sup, w;
	unsigned long most = 0, sum = 0;
	int i, nr;

	T_CHILD_CHECK(rig_nic_open(t_dev(), &n) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_make(n, &sc.tx) == 0 && rig_qp_make(n, &sc.rx) == 0, "%s",
		      rig_errmsg());
	rig_qp_endpoint(sc.tx, &ea);
	rig_qp_endpoint(sc.rx, &eb);
	T_CHILD_CHECK(rig_qp_connect(sc.tx, &eb) == 0 && rig_qp_connect(sc.rx, &ea) == 0, "%s",
		      rig_errmsg());
	T_CHILD_CHECK(rig_region_register(n, mem, sizeof(mem), &sc.r) == 0, "%s", rig_errmsg());
	/* No spin: each wait arms and sleeps at once. */
	T_CHILD_CHECK(rig_nic_set_spin(n, RIG_SPIN_NEVER) == 0, "%s", rig_errmsg());
	pthread_create(&sup, NULL, sc_supervise, NULL);
	pthread_create(&w, NULL, sc_wait, NULL);
	for (i = 0; i < SC_WAITS; i++) {
		double end = t_now_ms() + 10000;

		/* Until the waiter sleeps in wait i (or gave up). */
		while (__atomic_load_n(&sc.waiting, __ATOMIC_ACQUIRE) >= 0 &&
		       (__atomic_load_n(&sc.waiting, __ATOMIC_ACQUIRE) != i + 1 ||
			__atomic_load_n(&sc.enters, __ATOMIC_ACQUIRE) <= sc.enters_mark)) {
			T_CHILD_CHECK(t_now_ms() < end, "wait %d never slept", i);
			sched_yield();
		}
		if (__atomic_load_n(&sc.waiting, __ATOMIC_ACQUIRE) < 0)
			break;
		T_CHILD_CHECK(rig_qp_send(sc.tx, sc.r, 64, 64) == 0, "%s", rig_errmsg());
		do
			nr = rig_qp_poll(sc.tx, RIG_SEND, &c);
		while (!nr);
		T_CHILD_CHECK(nr == 1 && !c.error, "send %d: %d %s", i, nr, c.why);
	}
	pthread_join(w, NULL);
	__atomic_store_n(&sc.done, 1, __ATOMIC_RELEASE);
	pthread_join(sup, NULL);
	T_CHILD_CHECK(!sc.failed, "the waiter failed: %s", rig_errmsg());
	for (i = SC_WARMUP; i < SC_WAITS; i++) {
		sum += sc.per_wait[i];
		if (sc.per_wait[i] > most)
			most = sc.per_wait[i];
	}
	fprintf(stderr, "test_wait: system calls per sleep/wake cycle: mean %.2f, most %lu over %d waits; by call:",
		(double)sum / (SC_WAITS - SC_WARMUP), most, SC_WAITS - SC_WARMUP);
	for (nr = 0; nr < 512; nr++)
		if (sc.by_nr[nr])
			fprintf(stderr, " %d:%lu", nr, sc.by_nr[nr]);
	fprintf(stderr, " (io_uring_enter is %d)\n", __NR_io_uring_enter);
	T_CHILD_CHECK(most <= 3, "a sleep/wake cycle took %lu system calls (mean %.2f)", most,
		      (double)sum / (SC_WAITS - SC_WARMUP));
	t_child_say("%s", "");
}
#endif

/*
 * T2: a wait that sleeps and is woken by its completion costs at most 3
 * system calls in its thread (the arm, one io_uring_enter with nothing to
 * submit, one read of the channel), counted by a seccomp supervisor over
 * 200 waits, the first 2 (which make the thread's io_uring) left out.
 */
Test(wait, T2_three_syscalls_per_sleep, .timeout = 120)
{
#if defined(T_AUDIT_ARCH) && defined(SECCOMP_FILTER_FLAG_NEW_LISTENER) && \
	defined(SECCOMP_USER_NOTIF_FLAG_CONTINUE)
	t_in_child(syscalls_child);
#else
	cr_skip_test("no seccomp user notification in this build");
#endif
}
