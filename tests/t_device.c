/* SPDX-License-Identifier: MIT */
/*
 * The main of every device test binary, and its helpers. Without a verbs
 * device the binary exits 77, which automake counts as SKIP, never PASS.
 * Inside the test VM (RIG_GUEST=1) a missing device is a failure.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include "t_device.h"

#if defined(__SANITIZE_THREAD__)
/*
 * Under ThreadSanitizer, Criterion's BoxFort cannot place its inheritable
 * arena: it maps it MAP_FIXED at 0x2000_0000_0000 + (rand_r() & 0x3fffff)
 * * 16 MiB, 10 tries, and TSan reserves nearly all of that range (shadow,
 * meta and PROT_NONE gaps), so start-up fails with "Could not initialize
 * inheritable arena" about four times in five. Calls from libcriterion
 * get addresses in 0x5660_0000_0000-0x5680_0000_0000 instead: application
 * memory for TSan's x86_64 layout, above where the kernel puts a PIE
 * binary and its brk (0x5555_5555_4000 + 2^28 pages of ASLR), so free in
 * the workers too. BoxFort still checks each page is unmapped first.
 */
int rand_r(unsigned int *seed)
{
	static int (*next_rand_r)(unsigned int *);
	static unsigned int pick;
	Dl_info info;

	if (dladdr(__builtin_return_address(0), &info) && info.dli_fname &&
	    strstr(info.dli_fname, "libcriterion"))
		return 0x366000 + (__atomic_fetch_add(&pick, 1, __ATOMIC_RELAXED) * 0x101) % 0x2000;
	if (!next_rand_r)
		next_rand_r = (int (*)(unsigned int *))dlsym(RTLD_NEXT, "rand_r");
	return next_rand_r(seed);
}
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
/*
 * LeakSanitizer's report at a worker's exit fails nothing: Criterion has
 * taken the test's result by then, and ignores the exit status (so does a
 * failed assertion in .fini). So each test's body runs inside this
 * wrapper: the Test() trampolines of this binary call this
 * criterion_internal_test_main, which hands Criterion's own a body that
 * ends with a leak check. What the test's statics still point to (its
 * NIC, before .fini closes it) is reachable, not a leak.
 *
 * Only with RIG_TEST_LSAN=1 (make check-long): checked so far with
 * test_qp, test_fail and test_leaks, not yet every suite. (rig registers
 * its region handles, mmap'd, as a root region, or each registered
 * region's ibv_mr, which only its handle points to, would count as
 * leaked.)
 */
static void (*test_body)(void);

static void leak_checked_body(void)
{
	const char *on = getenv("RIG_TEST_LSAN");

	test_body();
	if (!on || strcmp(on, "1"))
		return;
	cr_assert_eq(__lsan_do_recoverable_leak_check(), 0,
		     "LeakSanitizer found leaks (its report is above)");
}

void criterion_internal_test_main(void (*fn)(void))
{
	void (*real)(void (*)(void));

	real = (void (*)(void (*)(void)))dlsym(RTLD_NEXT, "criterion_internal_test_main");
	cr_assert_not_null(real, "dlsym(criterion_internal_test_main): %s", dlerror());
	test_body = fn;
	real(leak_checked_body);
}
#endif

static int device_present(void)
{
	struct ibv_device **list;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (list)
		ibv_free_device_list(list);
	return n > 0;
}

int main(int argc, char *argv[])
{
	struct criterion_test_set *tests;
	int ok;

	if (!device_present()) {
		if (getenv("RIG_GUEST")) {
			fprintf(stderr, "%s: FAIL: no verbs device inside the test VM\n",
				argv[0]);
			return 1;
		}
		fprintf(stderr, "%s: SKIP: no verbs device; run it through tests/rxe-vm\n",
			argv[0]);
		return 77;
	}
	tests = criterion_initialize();
	ok = criterion_handle_args(argc, argv, true);
	if (ok)
		ok = !criterion_run_all_tests(tests) ? 0 : 1;
	else
		ok = 1;
	criterion_finalize(tests);
	return ok ? 0 : 1;
}

const char *t_dev(void)
{
	return getenv("RIG_TEST_DEV");
}

const char *t_peer_dev(void)
{
	return getenv("RIG_TEST_PEER_DEV");
}

const char *t_other_dev(void)
{
	return t_peer_dev() ? t_peer_dev() : t_dev();
}

const char *t_other_ip(void)
{
	return getenv(t_peer_dev() ? "RIG_TEST_PEER_IP" : "RIG_TEST_IP");
}

const char *t_netdev(void)
{
	const char *n = getenv("RIG_TEST_NETDEV");

	return n ? n : "veth0";
}

const char *t_peer_netdev(void)
{
	const char *n = getenv("RIG_TEST_PEER_NETDEV");

	return n ? n : "veth1";
}

struct rig_nic *t_nic_open(const char *name)
{
	struct rig_nic *nic = NULL;
	int ret = rig_nic_open(name, &nic);

	cr_assert_eq(ret, 0, "rig_nic_open(%s): %d %s", name ? name : "NULL",
		     ret, rig_errmsg());
	return nic;
}

struct rig_qp *t_qp(struct rig_nic *nic)
{
	struct rig_qp *qp = NULL;
	int ret = rig_qp_make(nic, &qp);

	cr_assert_eq(ret, 0, "rig_qp_make: %d %s", ret, rig_errmsg());
	return qp;
}

void t_connect(struct rig_qp *a, struct rig_qp *b)
{
	struct rig_endpoint ea, eb;
	int ret;

	rig_qp_endpoint(a, &ea);
	rig_qp_endpoint(b, &eb);
	ret = rig_qp_connect(a, &eb);
	cr_assert_eq(ret, 0, "connect a: %d %s", ret, rig_errmsg());
	if (a != b) {
		ret = rig_qp_connect(b, &ea);
		cr_assert_eq(ret, 0, "connect b: %d %s", ret, rig_errmsg());
	}
}

/* Buffers live until the test's process exits: a region's memory must
 * outlive its registration, which the test's NIC close ends. */
static void **bufs;
static size_t nbufs;

static void free_bufs(void)
{
	while (nbufs)
		free(bufs[--nbufs]);
	free(bufs);
}

void t_buf(struct t_buf *b, struct rig_nic *nic, size_t len, unsigned seed)
{
	size_t i;
	int ret;

	if (!bufs)
		atexit(free_bufs);
	bufs = realloc(bufs, (nbufs + 1) * sizeof(*bufs));
	cr_assert_not_null(bufs);
	b->len = len;
	b->mem = malloc(len ? len : 1);
	cr_assert_not_null(b->mem);
	bufs[nbufs++] = b->mem;
	for (i = 0; i < len; i++)
		b->mem[i] = (uint8_t)(seed + i * 131 + (i >> 8));
	ret = rig_region_register(nic, b->mem, len ? len : 1, &b->r);
	cr_assert_eq(ret, 0, "rig_region_register: %d %s", ret, rig_errmsg());
}

void t_raw_qp_open(struct t_raw_qp *r, struct ibv_context *verbs, void *buf, size_t len,
		   int access)
{
	struct ibv_qp_init_attr ia = { 0 };

	r->pd = ibv_alloc_pd(verbs);
	r->cq = ibv_create_cq(verbs, 8, NULL, NULL, 0);
	cr_assert(r->pd && r->cq, "ibv_alloc_pd, ibv_create_cq: %s", strerror(errno));
	ia.send_cq = ia.recv_cq = r->cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 1;
	r->qp = ibv_create_qp(r->pd, &ia);
	cr_assert_not_null(r->qp, "ibv_create_qp: %s", strerror(errno));
	r->mr = ibv_reg_mr(r->pd, buf, len, access);
	cr_assert_not_null(r->mr, "ibv_reg_mr: %s", strerror(errno));
}

void t_raw_qp_close(struct t_raw_qp *r)
{
	ibv_destroy_qp(r->qp);
	ibv_dereg_mr(r->mr);
	ibv_destroy_cq(r->cq);
	ibv_dealloc_pd(r->pd);
}

void t_raw_connect(struct ibv_qp *qp, int sgid_index, enum ibv_mtu mtu,
		   uint32_t psn, uint32_t peer_qpn, uint32_t peer_psn,
		   const uint8_t peer_gid[16])
{
	struct ibv_qp_attr a = { 0 };

	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = peer_qpn;
	a.rq_psn = peer_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer_gid, 16);
	a.ah_attr.grh.sgid_index = sgid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV |
				   IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), 0);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 6;
	a.rnr_retry = 7;
	a.sq_psn = psn;
	a.max_rd_atomic = 1;
	cr_assert_eq(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
				   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), 0);
}

double t_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double stall_max;	/* atomic */

static void *stall_meter(void *arg)
{
	struct timespec ts;
	double last = t_now_ms(), now, gap, max = 0;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	for (;;) {
		ts.tv_nsec += 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
		now = t_now_ms();
		gap = now - last;
		last = now;
		/* A wake-up that was late starts the next tick from now. */
		if (gap > 1.5)
			clock_gettime(CLOCK_MONOTONIC, &ts);
		if (gap > max) {
			max = gap;
			__atomic_store(&stall_max, &max, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

void t_stall_start(void)
{
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, stall_meter, NULL), 0);
	cr_assert_eq(pthread_detach(t), 0);
}

double t_stall_max_ms(void)
{
	double max;

	__atomic_load(&stall_max, &max, __ATOMIC_RELAXED);
	return max;
}

struct rig_completion t_take(struct rig_qp *qp, enum rig_side side, int ms)
{
	struct rig_completion c;
	double end = t_now_ms() + ms;
	int ret;

	for (;;) {
		ret = rig_qp_poll(qp, side, &c);
		cr_assert_geq(ret, 0, "rig_qp_poll: %d %s", ret, rig_errmsg());
		if (ret == 1)
			return c;
		cr_assert_lt(t_now_ms(), end, "no completion on the %s ring within %d ms",
			     side == RIG_SEND ? "send" : "receive", ms);
	}
}

void t_exchange(struct rig_qp *from, struct rig_qp *to, struct t_buf *tx,
		struct t_buf *rx, size_t n)
{
	struct rig_completion c;

	cr_assert_eq(rig_qp_receive(to, rx->r, 0, rx->len), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_send(from, tx->r, 0, n), 0, "%s", rig_errmsg());
	c = t_take(from, RIG_SEND, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	c = t_take(to, RIG_RECEIVE, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, n);
	cr_assert_arr_eq(rx->mem, tx->mem, n);
}

bool t_long(void)
{
	const char *l = getenv("RIG_TEST_LONG");

	return l && !strcmp(l, "1");
}

/* A tc command of t_sh leaves this file, for t_wire_mend: with none, the
 * wire has no qdisc of a test's, and t_wire_mend starts no process (each
 * costs ~0.3 s in the emulated guest, and every test of a suite mends at
 * its start). A file, so a test that crashed leaves it for the next. */
#define T_WIRE_TOUCHED "/tmp/rig-test-wire-touched"

void t_sh(const char *fmt, ...)
{
	char cmd[2048];
	va_list ap;
	int ret;

	va_start(ap, fmt);
	ret = vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	cr_assert_lt(ret, (int)sizeof(cmd), "a command of %d bytes: t_sh takes %zu", ret,
		     sizeof(cmd) - 1);
	if (!strncmp(cmd, "tc ", 3)) {
		ret = open(T_WIRE_TOUCHED, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
		cr_assert_geq(ret, 0, "%s: %s", T_WIRE_TOUCHED, strerror(errno));
		close(ret);
	}
	ret = system(cmd);
	cr_assert_eq(ret, 0, "'%s' exited %d", cmd, ret);
}

void t_wire_mend(void)
{
	char cmd[512];
	int ret;

	if (!t_peer_dev() || access(T_WIRE_TOUCHED, F_OK))
		return;		/* one host: no wire; or no qdisc of a test's */
	snprintf(cmd, sizeof(cmd), "tc qdisc del dev %s root 2>/dev/null; "
		 "tc qdisc del dev %s root 2>/dev/null; "
		 "tc qdisc del dev %s clsact 2>/dev/null; "
		 "tc qdisc del dev %s clsact 2>/dev/null; "
		 "ip neigh flush dev %s; ip neigh flush dev %s",
		 t_netdev(), t_peer_netdev(), t_netdev(), t_peer_netdev(),
		 t_netdev(), t_peer_netdev());
	ret = system(cmd);
	(void)ret;	/* fini must not assert */
	unlink(T_WIRE_TOUCHED);
}

static char *child_msg;		/* shared with the children */
#define CHILD_MSG 512

void t_child_report(void)
{
	if (!child_msg) {
		child_msg = mmap(NULL, CHILD_MSG, PROT_READ | PROT_WRITE,
				 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		cr_assert_neq(child_msg, MAP_FAILED);
	}
	child_msg[0] = 0;
}

void t_child_say(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(child_msg, CHILD_MSG, fmt, ap);
	va_end(ap);
}

const char *t_child_msg(void)
{
	return child_msg;
}

void t_child_fail(const char *file, int line, const char *cond, const char *fmt, ...)
{
	va_list ap;
	int o = snprintf(child_msg, CHILD_MSG, "%s:%d: %s: ", file, line, cond);

	va_start(ap, fmt);
	vsnprintf(child_msg + o, CHILD_MSG - o, fmt, ap);
	va_end(ap);
	_exit(1);
}

void t_in_child(void (*fn)(void))
{
	int status;
	pid_t pid;

	t_child_report();
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		alarm(60);	/* a hang ends in SIGALRM, not a stalled suite */
		fn();
		_exit(0);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(!WIFSIGNALED(status), "the child was killed by signal %d (%s)%s%s",
		  WTERMSIG(status), strsignal(WTERMSIG(status)),
		  child_msg[0] ? ": " : "", child_msg);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child exited with %d: %s",
		  WEXITSTATUS(status), child_msg);
}

int t_fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			n++;
	closedir(d);
	return n;
}

long t_resident_kib(void)
{
	FILE *f = fopen("/proc/self/smaps_rollup", "r");
	char line[256];
	long kib = -1;

	cr_assert_not_null(f, "/proc/self/smaps_rollup: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Rss: %ld kB", &kib) == 1)
			break;
	fclose(f);
	cr_assert_geq(kib, 0, "no Rss line in /proc/self/smaps_rollup");
	return kib;
}

struct one_sleep {
	struct rig_qp *qp;
	int ret;
	char msg[256];
};

static void *sleep_once(void *arg)
{
	struct one_sleep *s = arg;
	struct rig_completion c;

	s->ret = rig_qp_wait(s->qp, RIG_RECEIVE, 20000, &c);
	snprintf(s->msg, sizeof(s->msg), "%s", rig_errmsg());
	return NULL;
}

void t_sleep_in_a_thread(struct rig_qp *qp, int i)
{
	struct one_sleep s = { qp, -1, "" };
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, sleep_once, &s), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(s.ret, 0, "thread %d: rig_qp_wait %d (%s), expected 0 at the bound",
		     i, s.ret, s.msg);
}

void t_raw_param(struct rdma_conn_param *p, const void *priv, size_t len,
		 uint32_t qp_num)
{
	memset(p, 0, sizeof(*p));
	p->private_data = len ? priv : NULL;
	p->private_data_len = (uint8_t)len;
	p->qp_num = qp_num;
	p->responder_resources = 1;
	p->initiator_depth = 1;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
}

/* One lock for every t_fail: a failure is rare, and the first one ends
 * the test. */
static pthread_mutex_t fail_lock = PTHREAD_MUTEX_INITIALIZER;

void t_fail_say(struct t_fail *f, const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&fail_lock);
	if (!f->failed) {	/* the first one says most */
		va_start(ap, fmt);
		vsnprintf(f->err, sizeof(f->err), fmt, ap);
		va_end(ap);
		__atomic_store_n(&f->failed, 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&fail_lock);
}

int t_qp_index(struct rig_qp *const *qps, int n, const struct rig_qp *qp)
{
	int i;

	for (i = 0; i < n; i++)
		if (qps[i] == qp)
			return i;
	return -1;
}

void t_gate_init(struct t_gate *g, bool open)
{
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->cond, NULL);
	g->open = open;
	g->held = 0;
}

void t_gate_wait_locked(struct t_gate *g)
{
	g->held++;
	pthread_cond_broadcast(&g->cond);
	while (!g->open)
		pthread_cond_wait(&g->cond, &g->lock);
	g->held--;
}

void t_gate_wait(struct t_gate *g)
{
	pthread_mutex_lock(&g->lock);
	t_gate_wait_locked(g);
	pthread_mutex_unlock(&g->lock);
}

int t_gate_held(struct t_gate *g, int ms)
{
	struct timespec until;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += ms / 1000;
	pthread_mutex_lock(&g->lock);
	while (!g->held && ret != ETIMEDOUT)
		ret = pthread_cond_timedwait(&g->cond, &g->lock, &until);
	pthread_mutex_unlock(&g->lock);
	return ret;
}

void t_gate_open(struct t_gate *g)
{
	pthread_mutex_lock(&g->lock);
	g->open = true;
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->lock);
}

pid_t t_fork_piped(int *to, int *from, int flags)
{
	int down[2], up[2];	/* test -> child, child -> test */
	pid_t pid;

	cr_assert_eq(pipe2(down, flags), 0, "pipe: %s", strerror(errno));
	cr_assert_eq(pipe2(up, flags), 0, "pipe: %s", strerror(errno));
	pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(down[1]);
		close(up[0]);
		*to = up[1];
		*from = down[0];
	} else {
		close(down[0]);
		close(up[1]);
		*to = down[1];
		*from = up[0];
	}
	return pid;
}
