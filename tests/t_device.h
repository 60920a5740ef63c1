/* SPDX-License-Identifier: MIT */
/* Helpers of the device tests: the NIC under test, connected pairs. */
#ifndef T_DEVICE_H
#define T_DEVICE_H
#include <dlfcn.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <rig/rig.h>

/* Which sanitizer the test is built with (gcc's macros, clang's feature
 * tests): some bounds and memory checks differ under them. */
#if defined(__SANITIZE_ADDRESS__)
#define T_ASAN 1
#elif defined(__SANITIZE_THREAD__)
#define T_TSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define T_ASAN 1
#elif __has_feature(thread_sanitizer)
#define T_TSAN 1
#endif
#endif
#ifndef T_ASAN
#define T_ASAN 0
#endif
#ifndef T_TSAN
#define T_TSAN 0
#endif

/* The next definition of @fn after the test's own, which interposes it
 * (the executable exports it, -rdynamic): the library's or the
 * provider's real one, to call through. */
#define T_NEXT(fn) ((__typeof__(&fn))dlsym(RTLD_NEXT, #fn))

/* The device under test ($RIG_TEST_DEV, else the first), and in the
 * two-host topology the other one ($RIG_TEST_PEER_DEV). */
const char *t_dev(void);
const char *t_peer_dev(void);
/* The other host's device and address ($RIG_TEST_PEER_IP) across two
 * hosts, else this host's ($RIG_TEST_IP): where a test's far side lives. */
const char *t_other_dev(void);
const char *t_other_ip(void);
/* Their netdevs in the two-host topology, the ends of one veth pair
 * ($RIG_TEST_NETDEV, $RIG_TEST_PEER_NETDEV; veth0 and veth1 if unset). */
const char *t_netdev(void);
const char *t_peer_netdev(void);

/*
 * The stall meter: a thread that asks for nothing but to wake every
 * millisecond. The longest gap between its wake-ups is how long the
 * machine (a busy host, the emulated guest's scheduling) kept a thread
 * from running during the test: what a bound on a wake-up or a notice
 * adds for the machine, measured in the same run rather than guessed.
 * t_stall_start() once per test; t_stall_max_ms() at any time after.
 */
void t_stall_start(void);
double t_stall_max_ms(void);

/* Opens a NIC; fails the test if it cannot. */
struct rig_nic *t_nic_open(const char *name);

/* A queue pair, and two connected to each other. */
struct rig_qp *t_qp(struct rig_nic *nic);
void t_connect(struct rig_qp *a, struct rig_qp *b);

/* A registered buffer of n bytes filled with a pattern from seed. */
struct t_buf {
	uint8_t *mem;
	size_t len;
	struct rig_region *r;
};
void t_buf(struct t_buf *b, struct rig_nic *nic, size_t len, unsigned seed);

/* Polls @side until a completion comes or @ms pass; fails the test at
 * the bound. Returns the completion. */
struct rig_completion t_take(struct rig_qp *qp, enum rig_side side, int ms);
/* One message of @n bytes from @from's @tx to @to's @rx, both completions
 * taken and the bytes checked. */
void t_exchange(struct rig_qp *from, struct rig_qp *to, struct t_buf *tx,
		struct t_buf *rx, size_t n);

/* A raw-verbs peer's resources on @verbs (a device rdma_cm resolved): a
 * protection domain, one CQ of 8 for both queues, an RC queue pair of 4
 * requests each way whose every send is signalled, and @buf's @len bytes
 * registered there with @access. t_raw_qp_close gives them back. */
struct t_raw_qp {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
};
void t_raw_qp_open(struct t_raw_qp *r, struct ibv_context *verbs, void *buf, size_t len,
		   int access);
void t_raw_qp_close(struct t_raw_qp *r);

/* Takes a raw-verbs RC queue pair RESET->INIT->RTR->RTS towards a peer,
 * as any verbs program would: it may read, write and send, and grants
 * nothing itself. Retry count 6: Soft-RoCE's 7 means forever. */
void t_raw_connect(struct ibv_qp *qp, int sgid_index, enum ibv_mtu mtu,
		   uint32_t psn, uint32_t peer_qpn, uint32_t peer_psn,
		   const uint8_t peer_gid[16]);

/*
 * A forked child's verdict. T_CHILD_CHECK fails in the child: it writes
 * where and why into memory shared with the test, then _exit(1)s, for
 * Criterion's asserts belong to the test's own process. t_child_report()
 * readies that memory (before fork); t_child_say() leaves a note there
 * (where a crash would stop the child); t_child_msg() reads it.
 * t_in_child() runs @fn in a child (a hang ends by SIGALRM after 60 s) and
 * fails the test with the child's message, or the signal that ended it.
 */
void t_child_report(void);
void t_child_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *t_child_msg(void);
void t_child_fail(const char *file, int line, const char *cond, const char *fmt, ...)
	__attribute__((format(printf, 4, 5), noreturn));
#define T_CHILD_CHECK(cond, ...)                                               \
	do {                                                                   \
		if (!(cond))                                                   \
			t_child_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);  \
	} while (0)
void t_in_child(void (*fn)(void));

/*
 * The first failure of a thread other than the test's (a server's loop
 * thread): Criterion's asserts belong to the test's thread, so that one
 * writes why into @f and the test asserts on it. t_fail_say() keeps the
 * first message only, whichever of several threads gets there first;
 * f->failed, read with acquire, says f->err is written.
 */
struct t_fail {
	int failed;		/* atomic */
	char err[512];
};
void t_fail_say(struct t_fail *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Where @qp stands among @n queue pairs (a server's table of its
 * connections; NULL finds a free place), or -1. */
int t_qp_index(struct rig_qp *const *qps, int n, const struct rig_qp *qp);

/*
 * A gate that other threads wait at until the test opens it (a server's
 * loops held back, a call of the server's held in an interposed verbs
 * function). T_GATE_INIT or t_gate_init() makes it, shut or open.
 * t_gate_wait() waits there; t_gate_wait_locked() is the same with
 * g->lock already held, for a caller with more state under that lock.
 * g->held counts the threads at the gate now; t_gate_held() waits up to
 * @ms for the first and returns 0, or ETIMEDOUT. t_gate_open() lets them
 * and all that come after through.
 */
struct t_gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool open;
	int held;
};
#define T_GATE_INIT { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0 }
void t_gate_init(struct t_gate *g, bool open);
void t_gate_wait(struct t_gate *g);
void t_gate_wait_locked(struct t_gate *g);
int t_gate_held(struct t_gate *g, int ms);
void t_gate_open(struct t_gate *g);

/*
 * Forks a child joined to the test by a pipe each way, made with pipe2's
 * @flags (0, or O_CLOEXEC so that no later child inherits them). In both
 * processes *@to is then the end that writes to the other one and *@from
 * the end that reads from it; the other ends are closed. Returns the
 * child's pid in the test and 0 in the child; fails the test if a pipe or
 * the fork fails. For the suites' peer processes (test_death's echo,
 * test_vanish's peer, test_access's owner, test_conn's clients).
 */
pid_t t_fork_piped(int *to, int *from, int flags);

/* Runs one rig_qp_wait of 20 ms on @qp's receive ring in a new thread
 * and joins it: far past the 50 us spin, so the thread really sleeps in
 * an io_uring of its own; fails the test (naming thread @i) unless it
 * returned 0 at the bound. For the tests of what exited sleepers leave. */
void t_sleep_in_a_thread(struct rig_qp *qp, int i);

/* The fds this process has open; its resident memory in KiB, from
 * smaps_rollup, which walks the page tables (statm's figure comes from
 * per-thread counters that Linux 6.1 folds in only every 64 page faults). */
int t_fd_count(void);
long t_resident_kib(void);

/* Monotonic milliseconds. */
double t_now_ms(void);

/* Whether the long forms run: RIG_TEST_LONG=1 (make check-long). */
bool t_long(void);

/* Runs a shell command in the test VM (ip, tc); fails the test if it
 * fails. A tc command marks the wire touched, for t_wire_mend. */
void t_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The wire between the two hosts whole again after a test cut it: no
 * qdisc on either end, and no neighbour entry left half-resolved (an
 * INCOMPLETE one would make the next ARP probe, and so the next connect,
 * wait up to a second). Does nothing when no tc command of t_sh ran since
 * the last mend. Never asserts: fini may call it. */
void t_wire_mend(void);

/* What a raw rdma_cm end offers: @priv (@len bytes) as its private data
 * and @qp_num as its queue pair, with one read each way, retries and RNR
 * retries at their most (none is attached to the id: the CM waits for
 * rdma_establish after the answer). */
struct rdma_conn_param;
void t_raw_param(struct rdma_conn_param *p, const void *priv, size_t len,
		 uint32_t qp_num);

#endif
