/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/*
 * What rig makes of a device's limits, and of a provider's refusals, for
 * devices Soft-RoCE does not imitate: rig(7) M1 (make), C1 (the message),
 * M4 (the reads a queue pair of the same NIC serves).
 *
 * This binary interposes ibv_query_device, ibv_create_cq, ibv_create_qp
 * and ibv_modify_qp (the executable exports them, -rdynamic, and its
 * definitions come before libibverbs'). Every call still reaches the real
 * device, except a refusal the test asks for:
 *
 * - ibv_query_device reports the limits play.attr sets (max_qp_wr,
 *   max_cqe, max_qp_rd_atom, max_qp_init_rd_atom, vendor_id) over the
 *   device's own;
 * - ibv_create_cq, after a real create that succeeded, leaves errno set
 *   to play.stale_errno, as a successful call may (C says a success may
 *   change errno); the play.refuse_cq'th create from then on returns NULL
 *   and touches errno no more, as bnxt_re's __bnxt_re_create_qp does
 *   when its bnxt_re_check_qp_limits refuses (rdma-core,
 *   providers/bnxt_re/verbs.c: it returns EINVAL to its caller, which
 *   returns NULL and sets no errno);
 * - ibv_create_qp does the same when play.refuse_qp is set;
 * - ibv_modify_qp records the max_dest_rd_atomic of each modify that sets
 *   it (RTR) and the max_rd_atomic of each that sets that (RTS).
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "t_device.h"

#define NO_CHANGE (-1)

static struct {
	struct {
		int max_qp_wr, max_cqe, max_qp_rd_atom, max_qp_init_rd_atom;
		int64_t vendor_id;
	} attr;
	int stale_errno;	/* what a successful create_cq leaves in errno */
	int refuse_cq;		/* the n-th create_cq from now refuses, 0: none */
	bool refuse_qp;		/* create_qp refuses */
	int cq_calls, qp_calls;
	/* What the modifies asked for: -1 if none set it. */
	int dest_rd_atomic[8], rd_atomic[8];
	int ndest, nrd;
} play;

static void play_reset(void)
{
	memset(&play, 0, sizeof(play));
	play.attr.max_qp_wr = play.attr.max_cqe = NO_CHANGE;
	play.attr.max_qp_rd_atom = play.attr.max_qp_init_rd_atom = NO_CHANGE;
	play.attr.vendor_id = NO_CHANGE;
}

TestSuite(nicdev, .init = play_reset);

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	__typeof__(&ibv_query_device) real = T_NEXT(ibv_query_device);
	int ret = real(ctx, attr);

	if (ret)
		return ret;
	if (play.attr.max_qp_wr != NO_CHANGE)
		attr->max_qp_wr = play.attr.max_qp_wr;
	if (play.attr.max_cqe != NO_CHANGE)
		attr->max_cqe = play.attr.max_cqe;
	if (play.attr.max_qp_rd_atom != NO_CHANGE)
		attr->max_qp_rd_atom = play.attr.max_qp_rd_atom;
	if (play.attr.max_qp_init_rd_atom != NO_CHANGE)
		attr->max_qp_init_rd_atom = play.attr.max_qp_init_rd_atom;
	if (play.attr.vendor_id != NO_CHANGE)
		attr->vendor_id = (uint32_t)play.attr.vendor_id;
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	__typeof__(&ibv_create_cq) real = T_NEXT(ibv_create_cq);
	struct ibv_cq *cq;

	if (++play.cq_calls == play.refuse_cq)
		return NULL;	/* errno untouched */
	cq = real(ctx, cqe, cq_context, channel, comp_vector);
	if (cq && play.stale_errno)
		errno = play.stale_errno;
	return cq;
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	__typeof__(&ibv_create_qp) real = T_NEXT(ibv_create_qp);

	play.qp_calls++;
	if (play.refuse_qp)
		return NULL;	/* errno untouched */
	return real(pd, attr);
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	__typeof__(&ibv_modify_qp) real = T_NEXT(ibv_modify_qp);

	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && play.ndest < 8)
		play.dest_rd_atomic[play.ndest++] = attr->max_dest_rd_atomic;
	if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && play.nrd < 8)
		play.rd_atomic[play.nrd++] = attr->max_rd_atomic;
	return real(qp, attr, mask);
}

/* ------------------------------------------------ B4: the device's depths */

/* rig_nic_open(t_dev()) with the limits play.attr sets: its return, the
 * NIC in *nic when it opened. */
static int open_played(struct rig_nic **nic)
{
	*nic = NULL;
	return rig_nic_open(t_dev(), nic);
}

static void refused_at_open(const char *limit)
{
	struct rig_nic *nic;
	int ret = open_played(&nic);
	const char *msg = rig_errmsg();

	if (!ret)
		rig_nic_close(nic);
	cr_assert_eq(ret, -ENODEV, "a device of %s 4095 opened: %d (%s)", limit, ret,
		     ret ? msg : "no error");
	cr_assert_null(nic, "a refused open set its out-pointer");
	cr_assert_not_null(strstr(msg, limit), "the message names %s: %s", limit, msg);
	cr_assert_not_null(strstr(msg, "4095"), "the message gives the device's 4095: %s", msg);
	cr_assert_not_null(strstr(msg, "4096"), "the message gives rig's 4096: %s", msg);
}

/* M1: a queue pair's send queue holds 4096 requests (its ring's 4095 and
 * a liveness probe's): a device that takes 4095 could open, then refuse
 * every make. rig_nic_open refuses it, naming the limit. */
Test(nicdev, M1_device_of_4095_requests_per_queue_is_refused)
{
	play.attr.max_qp_wr = 4095;
	refused_at_open("max_qp_wr");
}

/* M1: and its send CQ holds 4096 entries, the probe's one of them. */
Test(nicdev, M1_device_of_4095_cqes_is_refused)
{
	play.attr.max_cqe = 4095;
	refused_at_open("max_cqe");
}

/* M1: a device of exactly 4096 of both opens, and makes queue pairs. */
Test(nicdev, M1_device_of_4096_opens_and_makes)
{
	struct rig_nic *nic;
	struct rig_qp *a, *b;
	int ret;

	play.attr.max_qp_wr = 4096;
	play.attr.max_cqe = 4096;
	ret = open_played(&nic);
	cr_assert_eq(ret, 0, "rig_nic_open: %d %s", ret, rig_errmsg());
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
	cr_assert_eq(rig_qp_destroy(a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(b), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* --------------------------------- B3: a refusal that sets no errno */

/*
 * A NIC that pins queue memory (bnxt_re's vendor id: the ENOMEM message
 * there names RLIMIT_MEMLOCK), and a make whose @what the provider
 * refuses with errno untouched, while errno holds the ENOMEM a successful
 * ibv_create_cq left behind. rig_qp_make returns -EIO and says the
 * provider gave no reason; it does not blame the limit. The make gives
 * back what it took: the next one, refused no more, succeeds.
 */
static void refused_without_errno(const char *what, bool cq)
{
	struct rig_nic *nic;
	struct rig_qp *qp = NULL;
	const char *msg;
	int ret;

	play.attr.vendor_id = 0x14e4;
	nic = t_nic_open(t_dev());
	cr_assert_gt(rig_nic_qp_pinned(nic), 0, "the NIC passes for one that pins queues");
	play.stale_errno = ENOMEM;
	if (cq)
		play.refuse_cq = play.cq_calls + 2;	/* the receive ring's */
	else
		play.refuse_qp = true;
	errno = ENOMEM;
	ret = rig_qp_make(nic, &qp);
	msg = rig_errmsg();
	cr_assert_eq(ret, -EIO, "%s refused without errno: rig_qp_make gave %d (%s), not -EIO",
		     what, ret, msg);
	cr_assert_null(qp, "a failed make set its out-pointer");
	cr_assert_not_null(strstr(msg, what), "the message names %s: %s", what, msg);
	cr_assert_not_null(strstr(msg, "without a reason"),
			   "the message says the provider gave no reason: %s", msg);
	cr_assert_null(strstr(msg, "ulimit"), "the message blames the limit: %s", msg);
	cr_assert_null(strstr(msg, "RLIMIT_MEMLOCK"), "the message blames the limit: %s", msg);
	cr_assert_null(strstr(msg, strerror(ENOMEM)), "the message gives a stale errno: %s", msg);

	play.refuse_cq = 0;
	play.refuse_qp = false;
	qp = t_qp(nic);
	cr_assert_eq(rig_qp_destroy(qp), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* M1, C1: ibv_create_qp refused, both CQs made. */
Test(nicdev, M1_C1_qp_refused_without_errno_is_said_so)
{
	refused_without_errno("ibv_create_qp", false);
	cr_assert_eq(play.qp_calls, 2, "ibv_create_qp ran %d times", play.qp_calls);
}

/* M1, C1: the receive ring's CQ refused, the send ring's made. */
Test(nicdev, M1_C1_cq_refused_without_errno_is_said_so)
{
	refused_without_errno("ibv_create_cq", true);
	cr_assert_eq(play.qp_calls, 1, "ibv_create_qp ran %d times", play.qp_calls);
}

/* ---------------------------------------------- B5: the read depths */

/*
 * M4: two queue pairs of one NIC serve each other's reads, as many at
 * once as both of the device's read limits allow: a responder's depth
 * (max_dest_rd_atomic, RTR) over max_qp_init_rd_atom is refused by
 * bnxt_re, over max_qp_rd_atom by mlx5 (nic.c says where). With
 * max_qp_rd_atom 4 and max_qp_init_rd_atom 16, or the other way round,
 * every modify asks for 4, and rig_nic_query says 4.
 */
static void read_depths(int rd_atom, int init_rd_atom)
{
	struct rig_nic_info info = { .size = sizeof(info) };
	struct rig_nic *nic;
	struct rig_qp *a, *b;
	int i;

	play.attr.max_qp_rd_atom = rd_atom;
	play.attr.max_qp_init_rd_atom = init_rd_atom;
	nic = t_nic_open(t_dev());
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
	cr_assert_eq(play.ndest, 2, "%d modifies set max_dest_rd_atomic", play.ndest);
	cr_assert_eq(play.nrd, 2, "%d modifies set max_rd_atomic", play.nrd);
	for (i = 0; i < 2; i++) {
		cr_assert_eq(play.dest_rd_atomic[i], 4, "RTR %d: max_dest_rd_atomic %d, not 4",
			     i, play.dest_rd_atomic[i]);
		cr_assert_eq(play.rd_atomic[i], 4, "RTS %d: max_rd_atomic %d, not 4", i,
			     play.rd_atomic[i]);
	}
	cr_assert_eq(rig_nic_query(nic, &info), 0);
	cr_assert_eq(info.max_rd_atomic, 4, "rig_nic_query: max_rd_atomic %u, not 4",
		     info.max_rd_atomic);
	cr_assert_eq(rig_qp_destroy(a), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(b), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

Test(nicdev, M4_read_depth_is_max_qp_rd_atom_when_smaller)
{
	read_depths(4, 16);
}

Test(nicdev, M4_read_depth_is_max_qp_init_rd_atom_when_smaller)
{
	read_depths(16, 4);
}
