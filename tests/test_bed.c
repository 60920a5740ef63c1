/* SPDX-License-Identifier: MIT */
/*
 * The test bed itself, with raw libibverbs and no rig code: two RC queue
 * pairs connect over the device (in the two-host topology, one on each
 * device, so the packets cross the veth) and a message arrives intact.
 * Then the first rig call on the bed: opening the device under test.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "t_device.h"

struct side {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t buf[4096];
	int gid_index;
	union ibv_gid gid;
};

static struct ibv_context *open_dev(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	int i;

	cr_assert_not_null(list);
	for (i = 0; list[i]; i++)
		if (!name || !strcmp(name, ibv_get_device_name(list[i]))) {
			ctx = ibv_open_device(list[i]);
			break;
		}
	ibv_free_device_list(list);
	cr_assert_not_null(ctx, "cannot open %s", name ? name : "a device");
	return ctx;
}

static void side_init(struct side *s, const char *dev, const char *gid_index)
{
	struct ibv_qp_init_attr ia = { 0 };

	s->ctx = open_dev(dev);
	s->pd = ibv_alloc_pd(s->ctx);
	cr_assert_not_null(s->pd);
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	cr_assert_not_null(s->cq);
	s->mr = ibv_reg_mr(s->pd, s->buf, sizeof(s->buf), IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(s->mr);
	ia.send_cq = ia.recv_cq = s->cq;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	ia.qp_type = IBV_QPT_RC;
	ia.sq_sig_all = 1;
	s->qp = ibv_create_qp(s->pd, &ia);
	cr_assert_not_null(s->qp);
	s->gid_index = gid_index ? atoi(gid_index) : 1;
	cr_assert_eq(ibv_query_gid(s->ctx, 1, s->gid_index, &s->gid), 0);
}

static void side_connect(struct side *s, const struct side *peer)
{
	t_raw_connect(s->qp, s->gid_index, IBV_MTU_1024, 7, peer->qp->qp_num, 7,
		      peer->gid.raw);
}

static struct ibv_wc wait_wc(struct side *s)
{
	struct ibv_wc wc;
	double end = t_now_ms() + 5000;
	int n;

	while ((n = ibv_poll_cq(s->cq, 1, &wc)) == 0)
		cr_assert_lt(t_now_ms(), end, "no completion in 5 s");
	cr_assert_eq(n, 1);
	cr_assert_eq(wc.status, IBV_WC_SUCCESS, "status %s",
		     ibv_wc_status_str(wc.status));
	return wc;
}

/* One host: both on the device under test. Two hosts: the receiver is on
 * the peer device, so the message crosses the veth. */
Test(bed, raw_verbs_send_arrives_intact)
{
	static struct side a, b;
	const char *peer = t_peer_dev();
	struct ibv_sge sge;
	struct ibv_send_wr swr = { 0 }, *bad_s;
	struct ibv_recv_wr rwr = { 0 }, *bad_r;
	struct ibv_wc wc;
	size_t i;

	side_init(&a, t_dev(), getenv("RIG_TEST_GID_INDEX"));
	side_init(&b, peer ? peer : t_dev(),
		  getenv(peer ? "RIG_TEST_PEER_GID_INDEX" : "RIG_TEST_GID_INDEX"));
	side_connect(&a, &b);
	side_connect(&b, &a);

	sge = (struct ibv_sge){ (uintptr_t)b.buf, sizeof(b.buf), b.mr->lkey };
	rwr.sg_list = &sge;
	rwr.num_sge = 1;
	cr_assert_eq(ibv_post_recv(b.qp, &rwr, &bad_r), 0);

	for (i = 0; i < 3000; i++)
		a.buf[i] = (uint8_t)(i * 7 + 3);
	sge = (struct ibv_sge){ (uintptr_t)a.buf, 3000, a.mr->lkey };
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	cr_assert_eq(ibv_post_send(a.qp, &swr, &bad_s), 0);

	wc = wait_wc(&a);
	cr_assert_eq(wc.opcode, IBV_WC_SEND);
	wc = wait_wc(&b);
	cr_assert_eq(wc.opcode, IBV_WC_RECV);
	cr_assert_eq(wc.byte_len, 3000);
	cr_assert_arr_eq(b.buf, a.buf, 3000);
}

/*
 * C1: rig_errmsg() is the message of this thread's last failed rig call,
 * so a rig_nic_open that succeeds (the first rig call of this process)
 * leaves none behind, whatever it met on the way.
 */
Test(bed, C1_nic_open_leaves_no_message)
{
	struct rig_nic *nic = NULL;
	int ret;

	ret = rig_nic_open(t_dev(), &nic);
	cr_assert_eq(ret, 0, "rig_nic_open(%s): %d %s", t_dev() ? t_dev() : "NULL", ret,
		     rig_errmsg());
	cr_assert_str_eq(rig_errmsg(), "no error");
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}
