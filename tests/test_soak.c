/* SPDX-License-Identifier: MIT */
/*
 * Soak across two hosts with the network misbehaving.
 *
 * 32 pairs of queue pairs, one end on $RIG_TEST_DEV (rxe0), the other on
 * $RIG_TEST_PEER_DEV (rxe1), so every packet crosses the veth pair. For the
 * whole run both ends of the veth carry a netem qdisc that loses 1% of the
 * packets, duplicates 1%, sends 1% ahead of those queued before them and
 * adds 0-2 ms of jitter (see NETEM below; $RIG_TEST_NETEM replaces it,
 * $RIG_TEST_INFLIGHT the depth, for measuring). Each run checks with
 * `tc -s` that netem did reorder packets. Every queue pair sends to its peer and receives
 * from it; its send ring is kept as full as the load limit allows (INFLIGHT sends) and its receive ring
 * holds RSLOTS receives, reposted as each completes.
 *
 * Each message carries its sequence number, its length and a checksum of
 * the rest. The rule checked: every message arrives once, in order and
 * intact, and no queue pair fails. Resident memory and the fd count stay
 * flat after warm-up: they are sampled once a tenth of the messages are
 * through, and again at the end.
 *
 * With RIG_TEST_LONG=1 the same soak then runs on plain raw verbs (same
 * queue pairs, sizes, in-flight depth and netem), and the log gives both
 * rates and their ratio (bench/ makes the performance claims).
 *
 * 10^5 messages; with RIG_TEST_LONG=1, 10^7. Run only in the two-host
 * topology (tests/rxe-vm --two-hosts): without a peer device it FAILS.
 * The test changes the VM's qdiscs, so it runs alone (CRITERION_JOBS=1).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>

#include "t_device.h"

/* ASan keeps freed memory in quarantine, so resident memory may grow with
 * no leak at all (it grew by 1-9 MB here while the heap in use stayed
 * flat to the kB): under ASan the test compares the heap in use, as the
 * allocator counts it, instead. */
#if T_ASAN
/* from ASan's runtime (sanitizer/allocator_interface.h, not installed) */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

/* A check for the per-message path: only a failure reaches Criterion's
 * assertion machinery, so the rate measured is the queue pairs'. */
#define CHECK(cond, ...)					\
	do {							\
		if (!(cond))					\
			cr_assert_fail(__VA_ARGS__);		\
	} while (0)

#define PAIRS 32		/* 64 queue pairs */
#define NQP (2 * PAIRS)
/*
 * The load limit: rxe in the emulated guest fails pairs with retries
 * exhausted when too much is in flight. 16 sends per queue pair over 64
 * loopback queue pairs runs clean; across the netem'd veth, on a busy
 * host, 16 failed a pair (rig's under ASan, raw verbs' in a plain run)
 * and 8 did not, and ran faster (fewer retransmissions).
 */
#define INFLIGHT_MAX 16
#define RSLOTS_MAX (2 * INFLIGHT_MAX)
static unsigned INFLIGHT = 8, RSLOTS = 16;	/* receives: twice the sends */
#define SLOT 1024		/* the longest message: one MTU of the veth */
#define HDR 16			/* struct hdr */
#define MESSAGES 100000ull
#define LONG_MESSAGES 10000000ull
#define STALL_MS 10000		/* no completion anywhere for this long: stuck */
/* Slack on resident memory between warm-up and the end: the allocator
 * and Criterion's logging may touch a few more pages; a leak of even a
 * byte per message is 100 KiB at 10^5 and 10 MB at 10^7. */
#define RSS_SLACK_KB 512

__attribute__((constructor)) static void run_serially(void)
{
	setenv("CRITERION_JOBS", "1", 1);
}

struct hdr {
	uint64_t seq;
	uint32_t len;		/* the whole message, header included */
	uint32_t sum;		/* of seq, len and the payload */
};

static uint32_t checksum(uint64_t seq, uint32_t len, const uint8_t *p, size_t n)
{
	uint32_t h = 2166136261u;
	size_t i;

	h = (h ^ (uint32_t)seq) * 16777619u;
	h = (h ^ (uint32_t)(seq >> 32)) * 16777619u;
	h = (h ^ len) * 16777619u;
	for (i = 0; i < n; i++)
		h = (h ^ p[i]) * 16777619u;
	return h;
}

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* ---- the wire ---------------------------------------------------------- */

static void wire_clean(void)
{
	char cmd[256];
	int ret;

	snprintf(cmd, sizeof(cmd), "tc qdisc del dev %s root 2>/dev/null; "
		 "tc qdisc del dev %s root 2>/dev/null", t_netdev(), t_peer_netdev());
	ret = system(cmd);
	(void)ret;
}

/*
 * Loss, duplication, reordering and 0-2 ms of jitter, on both directions.
 * "reorder 1%" sends one packet in a hundred at once, ahead of the packets
 * queued before it (netem counts each as a requeue, which
 * netem_reorders() reads back). "rate" keeps the jitter itself from
 * reordering: netem then times each packet from the one before it. More
 * reordering does not hold: rxe answers an out-of-order packet with a
 * sequence NAK and a go-back-N retry that counts against the retry budget
 * (6), and in the emulated guest a pair failed with retries exhausted
 * within seconds, rig's and raw verbs' alike, with free jitter (1 ms +- 1
 * ms without "rate") every run, and with "reorder 25% 50%" in 2 runs of 4.
 */
static const char *NETEM = "loss 1% duplicate 1% delay 1ms 1ms reorder 1% rate 10gbit";

/* The packets netem reordered on both ends so far: the requeues of
 * `tc -s qdisc show`. */
static long netem_reorders(void)
{
	const char *dev[2] = { t_netdev(), t_peer_netdev() };
	char cmd[128], line[256];
	long total = 0, n;
	int i, found;

	for (i = 0; i < 2; i++) {
		FILE *f;
		char *at;

		snprintf(cmd, sizeof(cmd), "tc -s qdisc show dev %s", dev[i]);
		f = popen(cmd, "r");
		cr_assert_not_null(f, "%s", cmd);
		found = 0;
		while (fgets(line, sizeof(line), f))
			if ((at = strstr(line, "requeues ")) && strstr(line, "dropped") &&
			    sscanf(at, "requeues %ld", &n) == 1 && !found++)
				total += n;
		cr_assert_eq(pclose(f), 0, "%s failed", cmd);
		cr_assert_eq(found, 1, "%s: no netem statistics", cmd);
	}
	return total;
}

static void setup(void)
{
	if (getenv("RIG_TEST_NETEM"))
		NETEM = getenv("RIG_TEST_NETEM");
	cr_assert_not_null(t_peer_dev(),
			   "RIG_TEST_PEER_DEV is unset: test_soak needs the two-host "
			   "topology (tests/rxe-vm --two-hosts)");
	cr_assert_not_null(t_dev(), "RIG_TEST_DEV is unset");
	cr_assert_not_null(getenv("RIG_TEST_NETDEV"), "RIG_TEST_NETDEV is unset");
	cr_assert_not_null(getenv("RIG_TEST_PEER_NETDEV"), "RIG_TEST_PEER_NETDEV is unset");
	cr_assert_not_null(getenv("RIG_TEST_GID_INDEX"), "RIG_TEST_GID_INDEX is unset");
	cr_assert_not_null(getenv("RIG_TEST_PEER_GID_INDEX"),
			   "RIG_TEST_PEER_GID_INDEX is unset");
	wire_clean();
	t_sh("tc qdisc add dev %s root netem %s", t_netdev(), NETEM);
	t_sh("tc qdisc add dev %s root netem %s", t_peer_netdev(), NETEM);
}

/* Fini runs after a failed assertion too; a crash leaves the qdisc to the
 * next setup, which removes it first. */
static void teardown(void)
{
	wire_clean();
}

TestSuite(soak, .init = setup, .fini = teardown);

/* ---- resources --------------------------------------------------------- */

/* Resident memory in kB; under ASan, the heap in use. */
#if T_ASAN
#define MEM_WHAT "heap in use"
#else
#define MEM_WHAT "resident memory"
#endif
static long mem_kb(void)
{
#if T_ASAN
	return (long)(__sanitizer_get_current_allocated_bytes() / 1024);
#else
	return t_resident_kib();
#endif
}

/* ---- one queue pair's traffic, either kind ----------------------------- */

enum kind { RIG, RAW };

struct raw_nic {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int gid_index;
	union ibv_gid gid;
	enum ibv_mtu mtu;
};

struct end {
	/* rig */
	struct rig_qp *qp;
	struct rig_region *r;
	/* raw */
	struct ibv_qp *ibqp;
	struct ibv_cq *scq, *rcq;
	struct ibv_mr *mr;
	uint32_t psn;

	uint8_t *mem;		/* INFLIGHT send slots, then RSLOTS receive slots */
	uint64_t rng;		/* message lengths and payloads */
	uint64_t to_send;	/* messages this end sends in all */
	uint64_t posted, sent;	/* sends posted, send completions taken */
	uint64_t rposted, got;	/* receives posted, receive completions taken */
	struct end *peer;
};

struct soak {
	enum kind kind;
	struct rig_nic *nic[2];
	struct raw_nic raw[2];
	struct end e[NQP];
	uint64_t total;
	char raw_failed[160];	/* why the raw baseline stopped, if it did */
};

static uint8_t *send_slot(struct end *e, uint64_t n)
{
	return e->mem + (n % INFLIGHT) * SLOT;
}

static uint8_t *recv_slot(struct end *e, uint64_t n)
{
	return e->mem + (INFLIGHT_MAX + n % RSLOTS) * SLOT;
}

static void raw_nic_open(struct raw_nic *r, const char *dev, const char *gi)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_port_attr pa;
	int i;

	cr_assert_not_null(list);
	for (i = 0; list[i] && !r->ctx; i++)
		if (!strcmp(dev, ibv_get_device_name(list[i])))
			r->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	cr_assert_not_null(r->ctx, "cannot open %s", dev);
	r->pd = ibv_alloc_pd(r->ctx);
	cr_assert_not_null(r->pd);
	r->gid_index = atoi(gi);
	cr_assert_eq(ibv_query_gid(r->ctx, 1, r->gid_index, &r->gid), 0);
	cr_assert_eq(ibv_query_port(r->ctx, 1, &pa), 0);
	r->mtu = pa.active_mtu;
}

static void raw_end_make(struct end *e, struct raw_nic *n)
{
	struct ibv_qp_init_attr ia = { 0 };

	e->scq = ibv_create_cq(n->ctx, INFLIGHT, NULL, NULL, 0);
	e->rcq = ibv_create_cq(n->ctx, RSLOTS, NULL, NULL, 0);
	cr_assert(e->scq && e->rcq);
	e->mr = ibv_reg_mr(n->pd, e->mem, (INFLIGHT_MAX + RSLOTS_MAX) * SLOT,
			   IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(e->mr);
	ia.send_cq = e->scq;
	ia.recv_cq = e->rcq;
	ia.cap.max_send_wr = INFLIGHT;
	ia.cap.max_recv_wr = RSLOTS;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 1;
	e->ibqp = ibv_create_qp(n->pd, &ia);
	cr_assert_not_null(e->ibqp);
	cr_assert_eq(getrandom(&e->psn, sizeof(e->psn), 0), sizeof(e->psn));
	e->psn &= 0xffffff;
}

static void soak_open(struct soak *s, enum kind kind, uint64_t total, uint64_t seed)
{
	int i;

	memset(s, 0, sizeof(*s));
	s->kind = kind;
	s->total = total;
	if (kind == RIG) {
		s->nic[0] = t_nic_open(t_dev());
		s->nic[1] = t_nic_open(t_peer_dev());
	} else {
		raw_nic_open(&s->raw[0], t_dev(), getenv("RIG_TEST_GID_INDEX"));
		raw_nic_open(&s->raw[1], t_peer_dev(), getenv("RIG_TEST_PEER_GID_INDEX"));
	}
	for (i = 0; i < NQP; i++) {
		struct end *e = &s->e[i];

		e->mem = aligned_alloc(4096, (INFLIGHT_MAX + RSLOTS_MAX) * SLOT);
		cr_assert_not_null(e->mem);
		memset(e->mem, 0, (INFLIGHT_MAX + RSLOTS_MAX) * SLOT);
		e->rng = seed * 2654435761u + i + 1;
		/* the first total % NQP ends send one more */
		e->to_send = total / NQP + ((uint64_t)i < total % NQP);
		e->peer = &s->e[i ^ 1];
		if (kind == RIG) {
			e->qp = t_qp(s->nic[i & 1]);
			cr_assert_eq(rig_region_register(s->nic[i & 1], e->mem,
							 (INFLIGHT_MAX + RSLOTS_MAX) * SLOT,
							 &e->r), 0, "%s", rig_errmsg());
		} else {
			raw_end_make(e, &s->raw[i & 1]);
		}
	}
	for (i = 0; i < NQP; i += 2) {
		struct end *a = &s->e[i], *b = &s->e[i + 1];

		if (kind == RIG) {
			t_connect(a->qp, b->qp);
			continue;
		}
		t_raw_connect(a->ibqp, s->raw[0].gid_index, s->raw[0].mtu, a->psn,
			      b->ibqp->qp_num, b->psn, s->raw[1].gid.raw);
		t_raw_connect(b->ibqp, s->raw[1].gid_index, s->raw[1].mtu, b->psn,
			      a->ibqp->qp_num, a->psn, s->raw[0].gid.raw);
	}
}

static void soak_close(struct soak *s)
{
	int i;

	if (s->kind == RIG) {
		cr_assert_eq(rig_nic_close(s->nic[0]), 0);
		cr_assert_eq(rig_nic_close(s->nic[1]), 0);
	} else {
		for (i = 0; i < NQP; i++) {
			cr_assert_eq(ibv_destroy_qp(s->e[i].ibqp), 0);
			cr_assert_eq(ibv_destroy_cq(s->e[i].scq), 0);
			cr_assert_eq(ibv_destroy_cq(s->e[i].rcq), 0);
			cr_assert_eq(ibv_dereg_mr(s->e[i].mr), 0);
		}
		for (i = 0; i < 2; i++) {
			cr_assert_eq(ibv_dealloc_pd(s->raw[i].pd), 0);
			cr_assert_eq(ibv_close_device(s->raw[i].ctx), 0);
		}
	}
	for (i = 0; i < NQP; i++)
		free(s->e[i].mem);
}

static void post_receive(struct soak *s, struct end *e)
{
	uint8_t *p = recv_slot(e, e->rposted);
	int ret;

	if (s->kind == RIG) {
		ret = rig_qp_receive(e->qp, e->r, p - e->mem, SLOT);
		CHECK(ret == 0, "rig_qp_receive: %d %s", ret, rig_errmsg());
	} else {
		struct ibv_sge sge = { (uintptr_t)p, SLOT, e->mr->lkey };
		struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

		ret = ibv_post_recv(e->ibqp, &wr, &bad);
		CHECK(ret == 0, "ibv_post_recv: %d", ret);
	}
	e->rposted++;
}

/* Writes message number e->posted into its slot and posts it. */
static void post_send(struct soak *s, struct end *e)
{
	uint8_t *p = send_slot(e, e->posted);
	uint32_t len = HDR + (uint32_t)(rng_next(&e->rng) % (SLOT - HDR + 1));
	struct hdr h = { .seq = e->posted, .len = len };
	uint64_t r = 0;
	uint32_t i;
	int ret;

	for (i = HDR; i < len; i++) {
		if (!((i - HDR) & 7))
			r = rng_next(&e->rng);
		p[i] = (uint8_t)(r >> (8 * ((i - HDR) & 7)));
	}
	h.sum = checksum(h.seq, len, p + HDR, len - HDR);
	memcpy(p, &h, HDR);
	if (s->kind == RIG) {
		ret = rig_qp_send(e->qp, e->r, p - e->mem, len);
		CHECK(ret == 0, "rig_qp_send: %d %s", ret, rig_errmsg());
	} else {
		struct ibv_sge sge = { (uintptr_t)p, len, e->mr->lkey };
		struct ibv_send_wr wr = { .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_SEND }, *bad;

		ret = ibv_post_send(e->ibqp, &wr, &bad);
		CHECK(ret == 0, "ibv_post_send: %d", ret);
	}
	e->posted++;
}

/* The next completion of a ring: 1 and its byte count, or 0. A failed
 * entry fails the test: no queue pair may fail under these settings. */
static int take(struct soak *s, struct end *e, enum rig_side side, uint32_t *bytes)
{
	int i = (int)(e - s->e);

	if (s->kind == RIG) {
		struct rig_completion c;
		int ret = rig_qp_poll(e->qp, side, &c);

		CHECK(ret >= 0, "rig_qp_poll: %d", ret);
		if (!ret)
			return 0;
		CHECK(c.error == 0, "queue pair %d (%s) failed after %llu sends, "
		      "%llu receives: %d %s; status %d", i, i & 1 ? "rxe1" : "rxe0",
		      (unsigned long long)e->sent, (unsigned long long)e->got,
		      c.error, c.why, (rig_qp_failure(e->qp, &ret), ret));
		*bytes = c.bytes;
		return 1;
	} else {
		struct ibv_wc wc;
		int n = ibv_poll_cq(side == RIG_SEND ? e->scq : e->rcq, 1, &wc);

		CHECK(n >= 0, "ibv_poll_cq: %d", n);
		if (!n)
			return 0;
		/* The baseline only measures: a pair the device fails there
		 * ends the baseline, not the test (rig's pairs may not fail). */
		if (wc.status != IBV_WC_SUCCESS) {
			snprintf(s->raw_failed, sizeof(s->raw_failed),
				 "raw queue pair %d failed after %llu sends, %llu "
				 "receives: %s", i, (unsigned long long)e->sent,
				 (unsigned long long)e->got,
				 ibv_wc_status_str(wc.status));
			return 0;
		}
		*bytes = wc.byte_len;
		return 1;
	}
}

static void check_message(struct soak *s, struct end *e, uint32_t bytes)
{
	const uint8_t *p = recv_slot(e, e->got);
	int i = (int)(e - s->e);
	struct hdr h;

	CHECK(bytes >= HDR, "queue pair %d: message %llu is %u bytes",
		      i, (unsigned long long)e->got, bytes);
	memcpy(&h, p, HDR);
	CHECK(h.seq == e->got, "queue pair %d: message %llu came as number %llu",
		     i, (unsigned long long)e->got, (unsigned long long)h.seq);
	CHECK(h.len == bytes, "queue pair %d: message %llu: %u bytes, header says %u",
		     i, (unsigned long long)e->got, bytes, h.len);
	CHECK(h.sum == checksum(h.seq, h.len, p + HDR, h.len - HDR),
		     "queue pair %d: message %llu corrupted", i,
		     (unsigned long long)e->got);
}

struct result {
	double ms;		/* from the first post to the last completion */
	long rss_warm, rss_end;
	int fds_warm, fds_end;
};

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23	/* Linux 5.14 */
#endif

/*
 * rig keeps a queue pair's two rings' slots (2 x RIG__SLOTS x 16 bytes)
 * in one mapping that becomes resident a page at a time as the rings
 * first advance (lib/qp.c), and 10^5 messages over these queue pairs do
 * not wrap them: fault it all in before the warm-up's sample, so that
 * what grows after it is a leak and not a ring's first pass. The pages
 * keep their contents.
 */
static void populate_rings(struct soak *s)
{
	int i;

	for (i = 0; i < NQP; i++)
		if (s->e[i].qp)
			madvise(s->e[i].qp->ring[RIG_SEND].slot,
				2 * RIG__SLOTS * sizeof(struct rig__slot), MADV_POPULATE_WRITE);
}

static void soak_run(struct soak *s, struct result *res)
{
	uint64_t done = 0, warm = s->total / 10;
	double start, last, now;
	bool sampled = false;
	uint32_t bytes;
	int i;
	unsigned k;

	for (i = 0; i < NQP; i++)
		while (s->e[i].rposted < RSLOTS)
			post_receive(s, &s->e[i]);
	start = last = t_now_ms();
	while (done < s->total) {
		bool moved = false;

		for (i = 0; i < NQP; i++) {
			struct end *e = &s->e[i];

			/* Post while fewer than INFLIGHT are in flight and the
			 * peer has a receive posted for each message not yet
			 * taken: no RNR wait, which rxe counts against the
			 * retry budget. */
			while (e->posted < e->to_send && e->posted - e->sent < INFLIGHT &&
			       e->posted - e->peer->got < RSLOTS)
				post_send(s, e);
			for (k = 0; k < INFLIGHT && take(s, e, RIG_SEND, &bytes); k++) {
				e->sent++;
				moved = true;
			}
			for (k = 0; k < RSLOTS && take(s, e, RIG_RECEIVE, &bytes); k++) {
				CHECK(e->got < e->peer->to_send,
					     "queue pair %d got more messages than sent", i);
				check_message(s, e, bytes);
				e->got++;
				done++;
				moved = true;
				post_receive(s, e);
			}
		}
		if (s->raw_failed[0])
			return;
		now = t_now_ms();
		if (moved)
			last = now;
		CHECK(now - last < STALL_MS,
			     "no completion on any ring for %d ms (%llu of %llu messages)",
			     STALL_MS, (unsigned long long)done,
			     (unsigned long long)s->total);
		if (!sampled && done >= warm) {
			populate_rings(s);
			res->rss_warm = mem_kb();
			res->fds_warm = t_fd_count();
			sampled = true;
		}
	}
	res->ms = t_now_ms() - start;
	for (i = 0; i < NQP; i++) {
		struct end *e = &s->e[i];

		/* every send's completion is in (the last ones may trail the
		 * peer's receive by an ACK) */
		while (e->sent < e->posted && !s->raw_failed[0]) {
			if (take(s, e, RIG_SEND, &bytes)) {
				e->sent++;
				last = t_now_ms();
			}
			CHECK(t_now_ms() - last < STALL_MS,
				     "queue pair %d: send completion missing", i);
		}
		if (s->raw_failed[0])
			return;
		CHECK(e->got == e->peer->to_send, "queue pair %d: %llu of %llu", i,
			     (unsigned long long)e->got,
			     (unsigned long long)e->peer->to_send);
	}
	res->rss_end = mem_kb();
	res->fds_end = t_fd_count();
}

Test(soak, netem_loss_dup_reorder_jitter_64_queue_pairs_in_order_intact_rig_vs_raw, .timeout = 0)
{
	bool long_run = t_long();
	uint64_t total = long_run ? LONG_MESSAGES : MESSAGES;
	struct result rig = { 0 }, raw = { 0 };
	static struct soak s;
	long reordered;
	uint64_t seed;

	cr_assert_eq(getrandom(&seed, sizeof(seed), 0), sizeof(seed));
	if (getenv("RIG_TEST_INFLIGHT")) {
		INFLIGHT = (unsigned)atoi(getenv("RIG_TEST_INFLIGHT"));
		cr_assert(INFLIGHT >= 1 && INFLIGHT <= INFLIGHT_MAX,
			  "RIG_TEST_INFLIGHT must be 1..%d", INFLIGHT_MAX);
		RSLOTS = 2 * INFLIGHT;
	}
	cr_log_info("seed %llu, %llu messages over %d queue pairs, %u in flight each; "
		    "netem %s", (unsigned long long)seed, (unsigned long long)total, NQP,
		    INFLIGHT, NETEM);

	reordered = netem_reorders();
	soak_open(&s, RIG, total, seed);
	soak_run(&s, &rig);
	soak_close(&s);
	reordered = netem_reorders() - reordered;
	if (strstr(NETEM, "reorder"))
		cr_assert_gt(reordered, 0, "netem reordered no packet of rig's run");
	cr_assert_leq(rig.rss_end, rig.rss_warm + RSS_SLACK_KB,
		      "%s grew from %ld kB after warm-up to %ld kB", MEM_WHAT,
		      rig.rss_warm, rig.rss_end);
	cr_assert_eq(rig.fds_end, rig.fds_warm, "fds: %d after warm-up, %d at the end",
		     rig.fds_warm, rig.fds_end);

	/* The raw-verbs baseline only measures (a rate is no verdict), so it
	 * runs in the long form only; under ASan the rate of rig's run says
	 * nothing of rig's cost, so never. */
	if (!long_run || T_ASAN) {
		cr_log_info("rig: %llu messages intact (%.0f ms, %ld packets reordered, "
			    "no raw-verbs baseline%s); %s %ld -> %ld kB, fds %d -> %d",
			    (unsigned long long)total, rig.ms, reordered,
			    T_ASAN ? ": ASan" : " but with RIG_TEST_LONG=1", MEM_WHAT,
			    rig.rss_warm, rig.rss_end, rig.fds_warm, rig.fds_end);
		return;
	}
	soak_open(&s, RAW, total, seed);
	soak_run(&s, &raw);
	soak_close(&s);

	if (s.raw_failed[0]) {
		cr_log_warn("rig: %.0f messages/s (%.0f ms); %s %ld -> %ld kB, fds %d -> %d; "
			    "no raw-verbs baseline: %s", total / rig.ms * 1e3, rig.ms, MEM_WHAT,
			    rig.rss_warm, rig.rss_end, rig.fds_warm, rig.fds_end,
			    s.raw_failed);
		return;
	}
	cr_log_info("rig: %.0f messages/s (%.0f ms, %ld packets reordered); raw "
		    "verbs: %.0f messages/s (%.0f ms); rig/raw %.2f; %s %ld -> %ld kB, "
		    "fds %d -> %d", total / rig.ms * 1e3, rig.ms, reordered,
		    total / raw.ms * 1e3, raw.ms, raw.ms / rig.ms, MEM_WHAT, rig.rss_warm,
		    rig.rss_end, rig.fds_warm, rig.fds_end);
}
