/* SPDX-License-Identifier: MIT */
/*
 * raw_pingpong: bench/pingpong.h's ping-pong on plain libibverbs calls,
 * the baseline rig is measured against.
 *
 * Everything is set up as rig sets it up (lib/nic.c, lib/qp.c): an RC queue
 * pair with 4095 send and 4095 receive entries of one SGE, every send
 * signaled (sq_sig_all), one CQ of 4095 entries per ring, one completion
 * channel per device for both CQs; RESET->INIT->RTR->RTS with the port's
 * active MTU, min RNR timer 12, ACK timeout 14, retry count 7 (6 on
 * Soft-RoCE, whose 7 means forever), RNR retry 7, hop limit 64, remote read
 * allowed with 16 reads in flight at most, a random 24-bit PSN. No inline
 * sends (rig posts none).
 *
 * Posting and polling are what a careful raw program does: a zeroed work
 * request per post, a poll of one completion that checks its status.
 * Sleeping is the classic event mode: poll; arm with ibv_req_notify_cq;
 * poll again; block in ibv_get_cq_event on the channel; the events are
 * acked in batches (ibv_ack_cq_events takes a mutex).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <infiniband/verbs.h>

#include "bench.h"

#define BE_NAME "raw"
#define RAW_ENTRIES 4095
#define RAW_RXE_VENDOR_ID 0xffffff
#define RAW_ACK_BATCH 64

struct be_nic {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_comp_channel *channel;
	uint8_t port;
	int gidx;
	union ibv_gid gid;
	enum ibv_mtu mtu;
	uint8_t retry_cnt;
	uint8_t max_rd_atomic;
};

struct be_qp {
	struct be_nic *nic;
	struct ibv_qp *qp;
	struct ibv_cq *cq[2];		/* [0] send ring, [1] receive ring */
	struct ibv_mr *mr;
	uint8_t *buf;
	uint32_t psn;
	int armed[2];
	unsigned int unacked[2];
};

static char raw_msg[160];

static const char *be_errmsg(void)
{
	return raw_msg;
}

static int raw_fail(int err, const char *what)
{
	snprintf(raw_msg, sizeof(raw_msg), "%s failed", what);
	return -(err ? err : EIO);
}

static int be_nic_open(struct be_nic *nic, const char *dev, int gidx)
{
	struct ibv_device **list;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	int i, n = 0, ret;

	memset(nic, 0, sizeof(*nic));
	list = ibv_get_device_list(&n);
	if (!list)
		return raw_fail(errno, "ibv_get_device_list");
	for (i = 0; i < n; i++)
		if (!dev || !strcmp(dev, ibv_get_device_name(list[i])))
			break;
	if (i == n) {
		ibv_free_device_list(list);
		return raw_fail(ENODEV, "finding the device");
	}
	nic->ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!nic->ctx)
		return raw_fail(errno, "ibv_open_device");
	nic->port = 1;
	nic->gidx = gidx < 0 ? 0 : gidx;
	ret = ibv_query_device(nic->ctx, &da);
	if (!ret)
		ret = ibv_query_port(nic->ctx, nic->port, &pa);
	if (!ret)
		ret = ibv_query_gid(nic->ctx, nic->port, nic->gidx, &nic->gid);
	if (ret) {
		ibv_close_device(nic->ctx);
		return raw_fail(ret, "querying the device");
	}
	nic->mtu = pa.active_mtu;
	nic->retry_cnt = da.vendor_id == RAW_RXE_VENDOR_ID ? 6 : 7;
	nic->max_rd_atomic = da.max_qp_init_rd_atom < 16 ?
				     (uint8_t)da.max_qp_init_rd_atom : 16;
	nic->pd = ibv_alloc_pd(nic->ctx);
	if (!nic->pd) {
		ibv_close_device(nic->ctx);
		return raw_fail(errno, "ibv_alloc_pd");
	}
	nic->channel = ibv_create_comp_channel(nic->ctx);
	if (!nic->channel) {
		ibv_dealloc_pd(nic->pd);
		ibv_close_device(nic->ctx);
		return raw_fail(errno, "ibv_create_comp_channel");
	}
	return 0;
}

static void be_nic_close(struct be_nic *nic)
{
	ibv_destroy_comp_channel(nic->channel);
	ibv_dealloc_pd(nic->pd);
	ibv_close_device(nic->ctx);
}

static int be_qp_make(struct be_nic *nic, struct be_qp *q, void *buf,
		      size_t len)
{
	struct ibv_qp_init_attr attr = { 0 };
	int i;

	memset(q, 0, sizeof(*q));
	q->nic = nic;
	q->buf = buf;
	q->mr = ibv_reg_mr(nic->pd, buf, len,
			   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!q->mr)
		return raw_fail(errno, "ibv_reg_mr");
	for (i = 0; i < 2; i++) {
		q->cq[i] = ibv_create_cq(nic->ctx, RAW_ENTRIES, q, nic->channel, 0);
		if (!q->cq[i])
			return raw_fail(errno, "ibv_create_cq");
	}
	attr.send_cq = q->cq[0];
	attr.recv_cq = q->cq[1];
	attr.cap.max_send_wr = RAW_ENTRIES;
	attr.cap.max_recv_wr = RAW_ENTRIES;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	q->qp = ibv_create_qp(nic->pd, &attr);
	if (!q->qp)
		return raw_fail(errno, "ibv_create_qp");
	if (getrandom(&q->psn, sizeof(q->psn), 0) != sizeof(q->psn))
		q->psn = (uint32_t)random();
	q->psn &= 0xffffff;
	return 0;
}

static void be_qp_endpoint(struct be_qp *q, struct bench_ep *ep)
{
	memset(ep, 0, sizeof(*ep));
	ep->qpn = q->qp->qp_num;
	ep->psn = q->psn;
	memcpy(ep->gid, q->nic->gid.raw, 16);
}

static int be_qp_connect(struct be_qp *q, const struct bench_ep *peer)
{
	struct be_nic *nic = q->nic;
	struct ibv_qp_attr a;
	int ret;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = nic->port;
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	ret = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				       IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	if (ret)
		return raw_fail(ret, "RESET->INIT");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = nic->mtu;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = nic->max_rd_atomic;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)nic->gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = nic->port;
	ret = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV |
				       IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER);
	if (ret)
		return raw_fail(ret, "INIT->RTR");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = nic->retry_cnt;
	a.rnr_retry = 7;
	a.sq_psn = q->psn;
	a.max_rd_atomic = nic->max_rd_atomic;
	ret = ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
				       IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	if (ret)
		return raw_fail(ret, "RTR->RTS");
	return 0;
}

static void be_qp_destroy(struct be_qp *q)
{
	int i;

	if (q->qp)
		ibv_destroy_qp(q->qp);
	for (i = 0; i < 2; i++) {
		if (!q->cq[i])
			continue;
		if (q->unacked[i])
			ibv_ack_cq_events(q->cq[i], q->unacked[i]);
		ibv_destroy_cq(q->cq[i]);
	}
	if (q->mr)
		ibv_dereg_mr(q->mr);
}

static inline __attribute__((always_inline)) int be_post_recv(struct be_qp *q, size_t at, size_t n)
{
	struct ibv_sge sge = { (uintptr_t)(q->buf + at), (uint32_t)n,
			       q->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;
	int ret = ibv_post_recv(q->qp, &wr, &bad);

	return ret ? raw_fail(ret, "ibv_post_recv") : 0;
}

static inline __attribute__((always_inline)) int be_post_send(struct be_qp *q, size_t at, size_t n)
{
	struct ibv_sge sge = { (uintptr_t)(q->buf + at), (uint32_t)n,
			       q->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND };
	struct ibv_send_wr *bad;
	int ret = ibv_post_send(q->qp, &wr, &bad);

	return ret ? raw_fail(ret, "ibv_post_send") : 0;
}

static inline __attribute__((always_inline)) int be_poll(struct be_qp *q, int side)
{
	struct ibv_wc wc;
	int n = ibv_poll_cq(q->cq[side], 1, &wc);

	if (n <= 0)
		return n < 0 ? raw_fail(EIO, "ibv_poll_cq") : 0;
	if (wc.status != IBV_WC_SUCCESS) {
		snprintf(raw_msg, sizeof(raw_msg), "completion: %s",
			 ibv_wc_status_str(wc.status));
		return -EIO;
	}
	return 1;
}

/* Poll, arm, poll, sleep: the classic event loop, with one channel for
 * both CQs (an event may be the other ring's: it disarms that one). */
static int be_wait(struct be_qp *q, int side)
{
	struct ibv_cq *cq;
	void *ctx;
	int ret, s;

	for (;;) {
		ret = be_poll(q, side);
		if (ret)
			return ret;
		if (!q->armed[side]) {
			if (ibv_req_notify_cq(q->cq[side], 0))
				return raw_fail(EIO, "ibv_req_notify_cq");
			q->armed[side] = 1;
			continue;	/* poll once more: nothing is lost */
		}
		if (ibv_get_cq_event(q->nic->channel, &cq, &ctx))
			return raw_fail(errno, "ibv_get_cq_event");
		s = cq == q->cq[1];
		q->armed[s] = 0;
		if (++q->unacked[s] >= RAW_ACK_BATCH) {
			ibv_ack_cq_events(cq, q->unacked[s]);
			q->unacked[s] = 0;
		}
	}
}

#include "pingpong.h"
