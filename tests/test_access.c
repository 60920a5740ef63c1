/* SPDX-License-Identifier: MIT */
/*
 * Who may touch this process's memory (rig(7) M4), and what a region's
 * handle costs once deregistered (P5), on the device under test, one host.
 *
 * Every region is registered with remote read, so that a queue pair of
 * this process may read another's regions (M4); only the queue pair's own
 * access flags stand between a peer and the regions. A queue pair grants
 * remote read only when its peer's queue-pair number is one of its NIC
 * handle's own queue pairs. The GID says which device a peer is on, not
 * which process: another process on this host shares the device and the
 * GID, and must never read a byte of ours, whether it connects through rig
 * or through raw verbs with an rkey it learned or guessed.
 *
 * The other process is a fork, made before either process opens the
 * device; the two talk over pipes. The child owns the region and checks
 * its side (a failed check ends it, with a message in shared memory); the
 * test's own process plays the other process, the one that tries to read.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_device.h"
#include "t_grant_all.h"

#if T_ASAN
/*
 * AddressSanitizer keeps freed blocks in quarantine (up to 256 MiB, and
 * 1 MiB more per thread), so the block libibverbs allocates and frees
 * for each registration would grow the resident set that
 * region/churn_keeps_memory_flat_P5 measures by 2 MiB. In this binary
 * freed blocks are reused at once instead; a use after free is still
 * caught until the block is reused.
 */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "quarantine_size_mb=0:thread_local_quarantine_size_kb=0";
}

/*
 * Even so, ASan's own runtime grew the resident set by 6.4 MiB over the
 * rounds on a busy machine, with the heap flat (an ASan soak saw the
 * same). Under ASan the test weighs the heap in use instead; the plain
 * build weighs the resident set, which also shows the handle arena's
 * pages going back to the kernel.
 */
size_t __sanitizer_get_current_allocated_bytes(void);
static long memory_kib(void)
{
	return (long)(__sanitizer_get_current_allocated_bytes() / 1024);
}
#define MEMORY "the heap in use"
#else
static long memory_kib(void)
{
	return t_resident_kib();
}
#define MEMORY "the resident set"
#endif

#define LEN 4096		/* each region */
#define RAW_PSN 0x3c3c3c	/* the raw queue pair's first send PSN */

/* The flags a queue pair grants its peer, as the NIC has them. */
static unsigned access_flags(struct rig_qp *qp)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;

	if (ibv_query_qp(qp->ibqp, &a, IBV_QP_ACCESS_FLAGS, &ia))
		return ~0u;
	return a.qp_access_flags;
}

/* ---- the child: the process whose memory is at stake ------------------ */


/* Reads exactly @len bytes from @fd within @ms. 0, or -1 at end of file,
 * on an error, or at the bound. */
static int read_within(int fd, void *buf, size_t len, int ms)
{
	double end = t_now_ms() + ms;
	struct pollfd p = { fd, POLLIN, 0 };
	size_t got = 0;
	ssize_t n;

	while (got < len) {
		double left = end - t_now_ms();

		if (left <= 0 || poll(&p, 1, (int)left + 1) < 0)
			return -1;
		if (!p.revents)
			continue;
		n = read(fd, (uint8_t *)buf + got, len - got);
		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
	return write(fd, buf, len) == (ssize_t)len ? 0 : -1;
}

/* What the child offers: a queue pair for each of the other process's
 * queue pairs, the rig one and the raw one, and its region's address and
 * rkey (as if the other process had guessed them). */
struct offer {
	struct rig_endpoint to_rig;
	struct rig_endpoint to_raw;
	uint64_t addr;
	uint32_t rkey;
};

/* The other process's two queue pairs. */
struct answer {
	struct rig_endpoint rig;
	struct rig_endpoint raw;
};

/* The access the child's two queue pairs grant, once connected. */
struct granted {
	unsigned to_rig;
	unsigned to_raw;
};

/* Makes the offer, connects as told, says what it granted, then waits for
 * the other process to be done and checks that its region is unchanged. */
static void owner(int rd, int wr)
{
	struct rig_qp *to_rig, *to_raw;
	struct rig_region *r;
	struct rig_nic *nic;
	struct offer o = { 0 };
	struct answer ans;
	struct granted g;
	uint8_t *mem, before[LEN];
	char done;
	int i;

	alarm(60);	/* a hang ends in SIGALRM, not a stalled suite */
	T_CHILD_CHECK(rig_nic_open(t_dev(), &nic) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_make(nic, &to_rig) == 0 && rig_qp_make(nic, &to_raw) == 0, "%s",
	      rig_errmsg());
	mem = malloc(LEN);
	T_CHILD_CHECK(mem != NULL, "malloc");
	for (i = 0; i < LEN; i++)
		mem[i] = (uint8_t)(i * 13 + 7);
	memcpy(before, mem, LEN);
	T_CHILD_CHECK(rig_region_register(nic, mem, LEN, &r) == 0, "%s", rig_errmsg());

	rig_qp_endpoint(to_rig, &o.to_rig);
	rig_qp_endpoint(to_raw, &o.to_raw);
	o.addr = (uintptr_t)r->addr;
	o.rkey = r->rkey;
	T_CHILD_CHECK(write_all(wr, &o, sizeof(o)) == 0, "write the offer: %m");
	T_CHILD_CHECK(read_within(rd, &ans, sizeof(ans), 30000) == 0, "no answer");
	T_CHILD_CHECK(rig_qp_connect(to_rig, &ans.rig) == 0, "%s", rig_errmsg());
	T_CHILD_CHECK(rig_qp_connect(to_raw, &ans.raw) == 0, "%s", rig_errmsg());
	g.to_rig = access_flags(to_rig);
	g.to_raw = access_flags(to_raw);
	T_CHILD_CHECK(write_all(wr, &g, sizeof(g)) == 0, "write the grants: %m");

	T_CHILD_CHECK(read_within(rd, &done, 1, 30000) == 0, "the other process never said done");
	T_CHILD_CHECK(memcmp(mem, before, LEN) == 0, "the region changed");
	T_CHILD_CHECK(rig_nic_close(nic) == 0, "%s", rig_errmsg());
	free(mem);
}

/* ---- the other process's raw-verbs queue pair ------------------------- */

struct raw {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t buf[LEN];
	int gid_index;
	union ibv_gid gid;
	enum ibv_mtu mtu;
};

static void raw_open(struct raw *r)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	const char *gi = getenv("RIG_TEST_GID_INDEX");
	struct ibv_qp_init_attr ia = { 0 };
	struct ibv_port_attr pa;
	int i;

	cr_assert_not_null(gi, "RIG_TEST_GID_INDEX is unset");
	cr_assert_not_null(list);
	for (i = 0; list[i] && !r->ctx; i++)
		if (!t_dev() || !strcmp(t_dev(), ibv_get_device_name(list[i])))
			r->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	cr_assert_not_null(r->ctx, "cannot open %s", t_dev() ? t_dev() : "a device");
	r->pd = ibv_alloc_pd(r->ctx);
	cr_assert_not_null(r->pd);
	r->cq = ibv_create_cq(r->ctx, 16, NULL, NULL, 0);
	cr_assert_not_null(r->cq);
	r->mr = ibv_reg_mr(r->pd, r->buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(r->mr);
	ia.send_cq = ia.recv_cq = r->cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 1;
	r->qp = ibv_create_qp(r->pd, &ia);
	cr_assert_not_null(r->qp);
	r->gid_index = atoi(gi);
	cr_assert_eq(ibv_query_gid(r->ctx, 1, r->gid_index, &r->gid), 0);
	cr_assert_eq(ibv_query_port(r->ctx, 1, &pa), 0);
	r->mtu = pa.active_mtu;
}

static void raw_close(struct raw *r)
{
	cr_assert_eq(ibv_destroy_qp(r->qp), 0);
	cr_assert_eq(ibv_destroy_cq(r->cq), 0);
	cr_assert_eq(ibv_dereg_mr(r->mr), 0);
	cr_assert_eq(ibv_dealloc_pd(r->pd), 0);
	cr_assert_eq(ibv_close_device(r->ctx), 0);
}

/* The raw queue pair's next work completion, within @ms. */
static struct ibv_wc raw_wc(struct raw *r, int ms)
{
	double end = t_now_ms() + ms;
	struct ibv_wc wc;
	int n;

	while ((n = ibv_poll_cq(r->cq, 1, &wc)) == 0)
		cr_assert_lt(t_now_ms(), end, "the raw queue pair got no completion in %d ms", ms);
	cr_assert_eq(n, 1, "ibv_poll_cq: %d", n);
	return wc;
}

/*
 * M4, P3: another process on the same device, with the same GID, reads
 * nothing of ours:
 *   - through rig: its queue pair, connected to one of ours, refuses
 *     rig_qp_read with -EINVAL (the peer is not one of its NIC handle's
 *     queue pairs) and posts nothing;
 *   - through raw verbs: an RDMA read of our region, with its real
 *     address and rkey, fails with REM_INV_REQ_ERR (our queue pair grants
 *     no remote read), and brings no byte;
 * and both of our queue pairs facing it grant no access at all.
 */
Test(access, M4_other_process_on_same_device_reads_nothing, .timeout = 120)
{
	static struct raw raw;
	struct rig_completion c;
	struct rig_endpoint mine;
	struct t_buf src, dst;
	struct offer o;
	struct answer ans = { 0 };
	struct granted g;
	struct rig_nic *nic;
	struct rig_qp *qp;
	struct ibv_sge sge;
	struct ibv_send_wr wr = { 0 }, *bad;
	struct ibv_wc wc;
	uint8_t before[LEN];
	int to_child, from_child, status, ret, i;
	pid_t pid;

	t_child_report();
	pid = t_fork_piped(&to_child, &from_child, 0);
	if (pid == 0) {
		owner(from_child, to_child);	/* in the child: from and to the test */
		_exit(0);
	}

	nic = t_nic_open(t_dev());
	qp = t_qp(nic);
	t_buf(&src, nic, LEN, 3);
	t_buf(&dst, nic, LEN, 4);
	raw_open(&raw);
	cr_assert_eq(read_within(from_child, &o, sizeof(o), 30000), 0,
		     "no offer from the child: %s", t_child_msg());
	rig_qp_endpoint(qp, &mine);
	cr_assert(memcmp(mine.gid, o.to_rig.gid, 16) == 0, "the two processes have two GIDs");
	ans.rig = mine;
	ans.raw.qp = raw.qp->qp_num;
	ans.raw.psn = RAW_PSN;
	memcpy(ans.raw.gid, raw.gid.raw, 16);
	cr_assert_eq(write_all(to_child, &ans, sizeof(ans)), 0);
	ret = rig_qp_connect(qp, &o.to_rig);
	cr_assert_eq(ret, 0, "rig_qp_connect: %d %s", ret, rig_errmsg());
	t_raw_connect(raw.qp, raw.gid_index, raw.mtu, RAW_PSN, o.to_raw.qp, o.to_raw.psn,
		      o.to_raw.gid);
	/* The child's queue pairs are connected once it says what they grant. */
	cr_assert_eq(read_within(from_child, &g, sizeof(g), 30000), 0,
		     "the child did not connect: %s", t_child_msg());

	/* Through rig: refused, nothing posted, nothing written. */
	memcpy(before, dst.mem, LEN);
	ret = rig_qp_read(qp, src.r, 0, dst.r, 0, 64);
	cr_assert_eq(ret, -EINVAL, "rig_qp_read towards another process: %d (%s), expected -EINVAL",
		     ret, ret ? rig_errmsg() : "posted");
	cr_assert_eq(rig_qp_room(qp, RIG_SEND), RIG_RING_ENTRIES, "a refused read took a slot");
	cr_assert_eq(rig_qp_poll(qp, RIG_SEND, &c), 0, "a refused read completed");
	cr_assert(memcmp(before, dst.mem, LEN) == 0, "a refused read wrote its destination");

	/* Through raw verbs, with the region's real address and rkey. */
	memset(raw.buf, 0x5c, LEN);
	sge = (struct ibv_sge){ (uintptr_t)raw.buf, LEN, raw.mr->lkey };
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = o.addr;
	wr.wr.rdma.rkey = o.rkey;
	cr_assert_eq(ibv_post_send(raw.qp, &wr, &bad), 0);
	wc = raw_wc(&raw, 5000);
	cr_assert_eq(wc.status, IBV_WC_REM_INV_REQ_ERR,
		     "the raw read of the other process's region got %s (%d), "
		     "expected REM_INV_REQ_ERR", ibv_wc_status_str(wc.status), wc.status);
	for (i = 0; i < LEN; i++)
		cr_assert_eq(raw.buf[i], 0x5c, "the raw read brought byte %d", i);

	/* Neither of the child's queue pairs grants anything. */
	cr_assert_eq(g.to_rig, 0,
		     "the queue pair facing a rig queue pair of another process grants %#x",
		     g.to_rig);
	cr_assert_eq(g.to_raw, 0,
		     "the queue pair facing a raw queue pair of another process grants %#x",
		     g.to_raw);

	/* Done: the child checks that its region is unchanged. */
	cr_assert_eq(write_all(to_child, "d", 1), 0);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child: %s",
		  t_child_msg()[0] ? t_child_msg() : "killed");
	close(to_child);
	close(from_child);
	raw_close(&raw);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* Reads @n bytes of @src into @dst through @qp and checks they came. */
static void read_ok(struct rig_qp *qp, struct t_buf *src, struct t_buf *dst, size_t n)
{
	struct rig_completion c;
	int ret;

	memset(dst->mem, 0, n);
	ret = rig_qp_read(qp, src->r, 0, dst->r, 0, n);
	cr_assert_eq(ret, 0, "rig_qp_read: %d %s", ret, rig_errmsg());
	c = t_take(qp, RIG_SEND, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(c.bytes, n);
	cr_assert_arr_eq(dst->mem, src->mem, n);
}

/*
 * M4: the control. Queue pairs of one NIC handle, connected to each other
 * or to themselves, grant remote read and serve each other's reads.
 */
Test(access, M4_own_queue_pairs_serve_reads)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *a = t_qp(nic), *b = t_qp(nic), *self = t_qp(nic);
	struct t_buf src, dst;

	t_connect(a, b);
	t_connect(self, self);
	t_buf(&src, nic, LEN, 5);
	t_buf(&dst, nic, LEN, 6);
	cr_assert_eq(access_flags(a), IBV_ACCESS_REMOTE_READ);
	cr_assert_eq(access_flags(b), IBV_ACCESS_REMOTE_READ);
	cr_assert_eq(access_flags(self), IBV_ACCESS_REMOTE_READ);
	read_ok(a, &src, &dst, LEN);
	read_ok(b, &src, &dst, 100);
	read_ok(self, &src, &dst, LEN);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/*
 * M4: "the same NIC" is this NIC handle. Two handles of one device, even
 * in one process, are two NICs to each other: their queue pairs, though
 * connected and sharing the GID, grant nothing and refuse reads.
 */
Test(access, M4_another_handle_of_the_device_reads_nothing)
{
	struct rig_nic *n1 = t_nic_open(t_dev()), *n2 = t_nic_open(t_dev());
	struct rig_qp *a = t_qp(n1), *b = t_qp(n2);
	struct t_buf s1, d1, s2, d2;

	t_connect(a, b);
	t_buf(&s1, n1, LEN, 7);
	t_buf(&d1, n1, LEN, 8);
	t_buf(&s2, n2, LEN, 9);
	t_buf(&d2, n2, LEN, 10);
	cr_assert_eq(access_flags(a), 0);
	cr_assert_eq(access_flags(b), 0);
	cr_assert_eq(rig_qp_read(a, s1.r, 0, d1.r, 0, 64), -EINVAL);
	cr_assert_eq(rig_qp_read(b, s2.r, 0, d2.r, 0, 64), -EINVAL);
	cr_assert_eq(rig_qp_room(a, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_qp_room(b, RIG_SEND), RIG_RING_ENTRIES);
	cr_assert_eq(rig_nic_close(n1), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(n2), 0, "%s", rig_errmsg());
}

/*
 * M4, M5, C1 on a NIC that grants every queue pair remote access: a queue
 * pair of rig_qp_make connected to a peer that is not its NIC handle's (a
 * raw queue pair of the device, another handle's queue pair) reads back
 * what the NIC granted at INIT, and refuses to go on with -EOPNOTSUPP and
 * a message naming the cause; the queue pair is back in RESET, never
 * having served a packet: the raw peer's read of its region, with the
 * real address and rkey, gets no answer and no byte. On a NIC that
 * grants what it is asked, the same queue pair then connects (to the
 * other handle's) as before, granting nothing.
 */
Test(access, M4_M5_C1_connect_refused_when_the_NIC_grants_all, .timeout = 60)
{
	static struct raw raw;
	struct rig_nic *n1 = t_nic_open(t_dev()), *n2 = t_nic_open(t_dev());
	struct rig_qp *a = t_qp(n1), *b = t_qp(n2);
	struct rig_endpoint ea, eb, er;
	struct ibv_send_wr wr = { 0 }, *bad;
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr qa;
	struct ibv_sge sge;
	struct t_buf src;
	struct ibv_wc wc;
	int ret, i;

	t_buf(&src, n1, LEN, 11);
	raw_open(&raw);
	rig_qp_endpoint(a, &ea);
	rig_qp_endpoint(b, &eb);
	er = (struct rig_endpoint){ .qp = raw.qp->qp_num, .psn = RAW_PSN };
	memcpy(er.gid, raw.gid.raw, 16);

	__atomic_store_n(&grant_all, true, __ATOMIC_RELAXED);
	ret = rig_qp_connect(a, &er);
	cr_assert_eq(ret, -EOPNOTSUPP, "rig_qp_connect to a raw peer: %d (%s), expected -EOPNOTSUPP",
		     ret, rig_errmsg());
	cr_assert(strstr(rig_errmsg(), "grants every queue pair remote access (bnxt_re before Linux 6.13)") &&
		  strstr(rig_errmsg(), "connect by address"), "message: %s", rig_errmsg());
	cr_assert_eq(ibv_query_qp(a->ibqp, &qa, IBV_QP_STATE, &ia), 0);
	cr_assert_eq(qa.qp_state, IBV_QPS_RESET, "the refused queue pair is in state %d",
		     qa.qp_state);
	ret = rig_qp_connect(a, &eb);
	cr_assert_eq(ret, -EOPNOTSUPP, "rig_qp_connect to another handle's: %d (%s)", ret,
		     rig_errmsg());

	/* The raw peer reads: nobody answers, no byte comes. */
	t_raw_connect(raw.qp, raw.gid_index, raw.mtu, RAW_PSN, ea.qp, ea.psn, ea.gid);
	memset(raw.buf, 0x5c, LEN);
	sge = (struct ibv_sge){ (uintptr_t)raw.buf, LEN, raw.mr->lkey };
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.wr.rdma.remote_addr = (uintptr_t)src.r->addr;
	wr.wr.rdma.rkey = src.r->rkey;
	cr_assert_eq(ibv_post_send(raw.qp, &wr, &bad), 0);
	wc = raw_wc(&raw, 20000);
	for (i = 0; i < LEN; i++)
		cr_assert_eq(raw.buf[i], 0x5c, "the raw read brought byte %d (status %s)", i,
			     ibv_wc_status_str(wc.status));
	cr_assert_neq(wc.status, IBV_WC_SUCCESS, "the raw read of a refused queue pair succeeded");

	/* A NIC that grants what it is asked: connects as before (M5). */
	__atomic_store_n(&grant_all, false, __ATOMIC_RELAXED);
	ret = rig_qp_connect(a, &eb);
	cr_assert_eq(ret, 0, "rig_qp_connect after the refusal: %d %s", ret, rig_errmsg());
	cr_assert_eq(rig_qp_connect(b, &ea), 0, "%s", rig_errmsg());
	cr_assert_eq(access_flags(a), 0);
	cr_assert_eq(access_flags(b), 0);
	raw_close(&raw);
	cr_assert_eq(rig_nic_close(n1), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(n2), 0, "%s", rig_errmsg());
}

/* ---- P5: deregistered handles cost nothing ---------------------------- */

/*
 * P5: a deregistered region's handle stays safe to pass (a post naming it
 * is refused), yet register/deregister churn does not grow memory: 20000
 * rounds on one 4 KiB buffer, measured after a warm-up of 2000, grow the
 * resident set by less than 256 KiB (keeping every deregistered handle's
 * memory would grow it by about 1.4 MiB). The first handle, deregistered
 * 19999 rounds ago, is still refused.
 */
Test(region, churn_keeps_memory_flat_P5, .timeout = 300)
{
	enum { ROUNDS = 20000, WARM_UP = 2000 };
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *a = t_qp(nic), *b = t_qp(nic);
	struct rig_region *first = NULL, *r;
	long warm_kib = 0, end_kib;
	void *mem;
	int i, ret;

	t_connect(a, b);
	mem = aligned_alloc(4096, 4096);
	cr_assert_not_null(mem);
	memset(mem, 1, 4096);
	for (i = 0; i < ROUNDS; i++) {
		ret = rig_region_register(nic, mem, 4096, &r);
		cr_assert_eq(ret, 0, "round %d: rig_region_register: %d %s", i, ret, rig_errmsg());
		if (!first)
			first = r;
		ret = rig_region_deregister(r);
		cr_assert_eq(ret, 0, "round %d: rig_region_deregister: %d %s", i, ret,
			     rig_errmsg());
		if (i + 1 == WARM_UP)
			warm_kib = memory_kib();
	}
	end_kib = memory_kib();
	cr_log_info("%s after %d rounds: %ld KiB; after %d: %ld KiB; growth %ld KiB",
		    MEMORY, WARM_UP, warm_kib, ROUNDS, end_kib, end_kib - warm_kib);
	cr_assert_lt(end_kib - warm_kib, 256,
		     "%d register/deregister rounds grew %s by %ld KiB",
		     ROUNDS - WARM_UP, MEMORY, end_kib - warm_kib);

	ret = rig_qp_send(a, first, 0, 64);
	cr_assert_eq(ret, -EINVAL, "a send naming a long-deregistered region: %d", ret);
	cr_assert_eq(rig_qp_room(a, RIG_SEND), RIG_RING_ENTRIES, "the refused send took a slot");
	cr_assert_eq(rig_region_deregister(first), -EINVAL, "a second deregister");
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
	free(mem);
}
