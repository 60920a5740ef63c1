/* SPDX-License-Identifier: MIT */
/*
 * What a queue pair pins (lib/pinned.c), against figures worked out by
 * hand from the providers' sizing code, per provider and stack. No
 * device: the function is pure.
 *
 * The stacks of bnxt_re (lib/pinned.c says where each comes from):
 *   R    rounded, no doubling: rdma-core < 50 on any kernel, or < 51 on
 *        Linux < 6.8
 *   RD   rounded, CQs doubled: rdma-core >= 51 on Linux < 6.8
 *   U    unrounded, no doubling: rdma-core 50 on Linux >= 6.8
 *   UD   unrounded, CQs doubled: rdma-core >= 51 on Linux >= 6.8
 *   UDM  UD with a host MSN table (GenP7)
 *
 * Worked by hand, 4 KiB pages, one gather and one scatter entry, no
 * inline data, all four depths n:
 *
 * mlx5 (send_ops_flags SEND, RDMA_WRITE, RDMA_READ: lib/qp.c), n = 4096:
 *   send WQE 32 + 16 = 48, aligned to 64; send queue pow2(4096 x 64) =
 *   256 KiB; receive queue pow2(4096) x 16 = 64 KiB; each CQ pow2(4097)
 *   = 8192 CQEs x 64 = 512 KiB. 256 + 64 + 512 + 512 = 1344 KiB. (A
 *   plain create's WQE of 192 + 16, 256 bytes, made it 2112.)
 * mlx5, n = 64: send queue 64 x 64 = 4 KiB, receive queue 64 x 16 =
 *   1 KiB, one buffer of 5 KiB: 2 pages, 8 KiB; each CQ pow2(65) =
 *   128 x 64 = 8 KiB. 8 + 8 + 8 = 24 KiB.
 * mlx5, n = 1: send queue 64 B and receive queue max(16, 64) = 64 B in
 *   one page; each CQ pow2(2) x 64 = 128 B, a page. 12 KiB.
 * bnxt_re RD, n = 4096: send queue pow2(4096 + 129) = 8192 WQEs of 128
 *   and 8192 PSN entries of 16: 1152 KiB; receive queue pow2(4097) =
 *   8192 x 128 = 1024 KiB; each CQ 2 x 4096 = 8192 asked, pow2(8193) =
 *   16384 x 32 = 512 KiB. 1152 + 1024 + 512 + 512 = 3200 KiB.
 * bnxt_re UD, n = 4096: send queue 4225 x (128 + 16) = 608400 B, 149
 *   pages: 596 KiB; receive queue 4097 x 128 = 524416 B, 129 pages:
 *   516 KiB; each CQ 8193 x 32 = 262176 B, 65 pages: 260 KiB.
 *   596 + 516 + 260 + 260 = 1632 KiB.
 * bnxt_re RD, n = 64: send queue pow2(193) = 256 x 144 = 36 KiB;
 *   receive queue pow2(65) = 128 x 128 = 16 KiB; each CQ pow2(129) =
 *   256 x 32 = 8 KiB. 36 + 16 + 8 + 8 = 68 KiB.
 * bnxt_re UD, n = 64: send queue 193 x 144 = 27792 B, 7 pages: 28 KiB;
 *   receive queue 65 x 128 = 8320 B, 3 pages: 12 KiB; each CQ 129 x 32
 *   = 4128 B, 2 pages: 8 KiB. 28 + 12 + 8 + 8 = 56 KiB.
 * bnxt_re UDM, n = 4096: as UD but pow2(4225) = 8192 PSN entries: 4225
 *   x 128 + 8192 x 16 = 671872 B, 165 pages: 660 KiB. 1696 KiB.
 *
 * rig's own queue pair (lib/qp.c): send queue and send CQ 4096, receive
 * queue and receive CQ 4095:
 * mlx5: 256 + pow2(4095) x 16 = 64 + 512 + pow2(4096) x 64 = 256:
 *   1088 KiB (1856 with 256-byte WQEs).
 * bnxt_re RD: send queue 1152 KiB; receive queue pow2(4096) x 128 =
 *   512 KiB; send CQ 512 KiB; receive CQ pow2(8191) = 8192 x 32 =
 *   256 KiB. 2432 KiB. R: CQs pow2(4097) = 8192 x 32 = 256 KiB and
 *   pow2(4096) x 32 = 128 KiB: 2048 KiB.
 * bnxt_re UD: 596 + 4096 x 128 = 512 + 65 pages 260 + 8191 x 32 =
 *   262112 B, 64 pages, 256: 1624 KiB.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <unistd.h>

#include <rig/rig.h>

#include "internal.h"

#define KiB 1024

enum stack { MLX5, R, RD, U, UD, UDM, NSTACKS };

static int64_t pinned(enum stack st, uint32_t sw, uint32_t rw, uint32_t sc, uint32_t rc)
{
	const struct rig__qp_depths d = {
		.send_wr = sw, .recv_wr = rw, .send_cqe = sc, .recv_cqe = rc,
		.send_sge = 1, .recv_sge = 1,
	};
	struct rig__pin_stack s = { .provider = RIG__PIN_BNXT_RE, .page = 4096 };

	switch (st) {
	case MLX5:
		s.provider = RIG__PIN_MLX5;
		s.pow2 = true;
		break;
	case R:
		s.pow2 = true;
		break;
	case RD:
		s.pow2 = true;
		s.cq_double = true;
		break;
	case U:
		break;
	case UD:
		s.cq_double = true;
		break;
	case UDM:
		s.cq_double = true;
		s.msn = true;
		break;
	default:
		break;
	}
	return rig__pinned(&d, &s);
}

static const char *const names[NSTACKS] = { "mlx5", "bnxt_re R", "bnxt_re RD", "bnxt_re U",
					    "bnxt_re UD", "bnxt_re UDM" };

/* KiB pinned with all four depths n, per stack. */
static const struct {
	uint32_t n;
	int64_t kib[NSTACKS];
} all_equal[] = {
	/*  n      mlx5    R     RD     U     UD    UDM */
	{ 1,    { 12,   48,   48,   32,   32,   36 } },
	{ 2,    { 12,   48,   48,   32,   32,   36 } },
	{ 8,    { 12,   48,   48,   32,   32,   36 } },
	{ 63,   { 16,   52,   52,   44,   44,   44 } },
	{ 64,   { 24,   60,   68,   48,   56,   60 } },
	{ 256,  { 84,   168,  200,  116,  132,  136 } },
	{ 4095, { 832,  1920, 2176, 1364, 1620, 1680 } },
	{ 4096, { 1344, 2688, 3200, 1376, 1632, 1696 } },
};

Test(pinned, all_depths_equal)
{
	for (size_t i = 0; i < sizeof(all_equal) / sizeof(all_equal[0]); i++) {
		uint32_t n = all_equal[i].n;

		for (int st = 0; st < NSTACKS; st++)
			cr_expect_eq(pinned(st, n, n, n, n), all_equal[i].kib[st] * KiB,
				     "%s, depth %u: %lld KiB, not %lld", names[st], n,
				     (long long)pinned(st, n, n, n, n) / KiB,
				     (long long)all_equal[i].kib[st]);
	}
}

/* rig's queue pair: send 4096, receive 4095 (and at depth 64: 64, 63). */
Test(pinned, rigs_queue_pair)
{
	static const int64_t kib[NSTACKS] = { 1088, 2048, 2432, 1368, 1624, 1688 };
	static const int64_t kib64[NSTACKS] = { 20, 52, 56, 44, 48, 52 };

	for (int st = 0; st < NSTACKS; st++) {
		cr_expect_eq(pinned(st, 4096, 4095, 4096, 4095), kib[st] * KiB, "%s", names[st]);
		cr_expect_eq(pinned(st, 64, 63, 64, 63), kib64[st] * KiB, "%s", names[st]);
	}
}

/* Each side on its own: the queues and CQs are sized apart. */
Test(pinned, sides_apart)
{
	/* mlx5: a send queue of 256 alone: 16 KiB; a receive CQ alone of 4095:
	 * 4096 x 64 = 256 KiB. */
	cr_expect_eq(pinned(MLX5, 256, 0, 0, 0), 16 * KiB);
	cr_expect_eq(pinned(MLX5, 0, 0, 0, 4095), 256 * KiB);
	/* bnxt_re RD: the receive queue of 1 still has pow2(2) x 128 = 256 B,
	 * a page; a send queue of 1 pow2(130) = 256 x 144 = 36 KiB. */
	cr_expect_eq(pinned(RD, 1, 0, 0, 0), 36 * KiB + 4 * KiB);
	/* bnxt_re U: a send CQ of 4096 undoubled: 4097 x 32 = 131104 B, 33
	 * pages. */
	cr_expect_eq(pinned(U, 0, 0, 4096, 0) - pinned(U, 0, 0, 0, 0), 132 * KiB);
}

/* mlx5 with inline data: 64 bytes make a send WQE of 32 + align(4 + 64,
 * 16) = 112, aligned to 128; 64 of them 8 KiB, and the receive queue's
 * 1 KiB: 3 pages, 12 KiB; CQs 8 KiB each. */
Test(pinned, mlx5_inline)
{
	const struct rig__qp_depths d = { 64, 64, 64, 64, 1, 1, 64 };
	const struct rig__pin_stack s = { .provider = RIG__PIN_MLX5, .page = 4096 };

	cr_expect_eq(rig__pinned(&d, &s), 28 * KiB);
}

/* 64 KiB pages: each of the three buffers of an mlx5 queue pair of
 * depth 1 takes a page. */
Test(pinned, large_pages)
{
	const struct rig__qp_depths d = { 1, 1, 1, 1, 1, 1, 0 };
	const struct rig__pin_stack s = { .provider = RIG__PIN_MLX5, .page = 65536 };

	cr_expect_eq(rig__pinned(&d, &s), 3 * 64 * KiB);
}

/* The run-time bound: the largest over the stacks a kernel allows. */
Test(pinned, bound_by_kernel)
{
	const struct rig__qp_depths d = { 4096, 4095, 4096, 4095, 1, 1, 0 };

	cr_expect_eq(rig__pinned_bound(RIG__PIN_BNXT_RE, &d, "6.1.0-18-amd64", 4096), 2432 * KiB);
	cr_expect_eq(rig__pinned_bound(RIG__PIN_BNXT_RE, &d, "6.7.12", 4096), 2432 * KiB);
	/* >= 6.8: rdma-core < 50 (R, 2048) outweighs UD and UDM. */
	cr_expect_eq(rig__pinned_bound(RIG__PIN_BNXT_RE, &d, "6.8.0-31-generic", 4096), 2048 * KiB);
	cr_expect_eq(rig__pinned_bound(RIG__PIN_BNXT_RE, &d, "6.10.3", 4096), 2048 * KiB);
	cr_expect_eq(rig__pinned_bound(RIG__PIN_BNXT_RE, &d, "7.0", 4096), 2048 * KiB);
	/* Unreadable: as an older kernel, the larger figure. */
	cr_expect_eq(rig__pinned_bound(RIG__PIN_BNXT_RE, &d, "linux", 4096), 2432 * KiB);
	cr_expect_eq(rig__pinned_bound(RIG__PIN_BNXT_RE, &d, NULL, 4096), 2432 * KiB);
	cr_expect_eq(rig__pinned_bound(RIG__PIN_MLX5, &d, "6.1.0", 4096), 1088 * KiB);
	cr_expect_eq(rig__pinned_bound(RIG__PIN_MLX5, &d, "6.8.0", 4096), 1088 * KiB);
}

/* What rig_nic_qp_pinned reports, by vendor, on this host's kernel. */
Test(pinned, by_vendor)
{
	int64_t bnxt = rig__qp_pinned(RIG_BNXT_RE_VENDOR_ID, 4096, 4095, 4096, 4095);

	cr_expect_eq(rig__qp_pinned(RIG_RXE_VENDOR_ID, 4096, 4095, 4096, 4095), 0);
	if (sysconf(_SC_PAGESIZE) != 4096)
		return;
	cr_expect_eq(rig__qp_pinned(RIG_MLX5_VENDOR_ID, 4096, 4095, 4096, 4095), 1088 * KiB);
	cr_expect(bnxt == 2432 * KiB || bnxt == 2048 * KiB, "bnxt_re: %lld", (long long)bnxt);
	cr_expect_eq(rig__qp_pinned(0x1234, 4096, 4095, 4096, 4095), bnxt);
}
