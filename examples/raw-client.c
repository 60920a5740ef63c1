/* SPDX-License-Identifier: MIT */
/*
 * raw-client: a client of rig-echo in plain librdmacm and libibverbs,
 * with no header or library of rig, written from rig-wire(7) alone. It
 * dials rig-echo, sends MSGS messages one at a time, of sizes from 1 to
 * MAXSIZE bytes, and checks that each comes back the same, byte for byte.
 *
 *	raw-client -a ADDR -p PORT [-w rig1|rig2|rig3] [-n MSGS] [-s MAXSIZE]
 *		   [-i MS] [-t MS] [-R] [-K]
 *
 * The steps are rig-wire(7)'s WHO OWNS WHICH QUEUE PAIR, in order: the
 * queue pair is ours (ibv_create_qp, attached to no rdma_cm id, so that
 * rdma_cm stops at CONNECT_RESPONSE), our endpoint travels in the
 * request's private data in the form -w names, and we take the queue
 * pair to RTR and RTS ourselves from rig's endpoint, then establish.
 *
 * The "rig3" form (the default) opts into rig's liveness probes, RDMA
 * WRITEs of one byte into our sink (rig-wire(7) LIVENESS): the queue
 * pair grants remote write, and SINK bytes of ours, registered with
 * remote write and holding nothing, take the byte; their rkey and
 * address go in the request. The "rig2" form opts into rig 0.3's probes,
 * zero-length writes with rkey 0, and registers no memory that grants
 * remote write. -R leaves the queue pair's grant out, and -K sends the
 * sink's rkey changed, to show what each costs: rig's first probe of the
 * idle connection (-i gives it time to come) fails the queue pair. At
 * the end, "rig3" tells whether rig's probes wrote the sink (it starts
 * filled with 0xee; rig sends a byte of its own sink, zeros). -i MS
 * pauses after each reply; a
 * pause longer than rig-echo's probe interval (-L) lets probes come.
 * Each probe is one packet of rig's sequence, so at the end the client
 * counts how far its receive PSN went beyond the packets of the echoes
 * (as the device reports it: Soft-RoCE gives its current PSN).
 *
 * rig-echo takes messages of up to its MAXSIZE (-s, 4096 by default) and
 * keeps RECVS receives posted (-r, 16): one message in flight is within
 * both. Who speaks first: we do (rig-wire(7) WHO SPEAKS FIRST).
 *
 * Build:
 *	cc -O2 -o raw-client raw-client.c -lrdmacm -libverbs
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define RC_ENDPOINT 30		/* the endpoint's wire form */
#define RC_RIG1 34		/* "rig1" and the endpoint */
#define RC_RIG2 35		/* "rig2", the endpoint and the MTU code */
#define RC_RIG3 47		/* "rig2"'s, tagged "rig3", the sink's rkey and address */
#define RC_SINK 64		/* our sink's bytes */
#define RC_RECVS 4		/* receives kept posted */
#define RC_RESOLVE_MS 2000
#define RC_SOFT_ROCE 0xffffff	/* Soft-RoCE's vendor id: retry count 6 */

struct rc_opts {
	const char *addr;
	const char *port;
	int form;		/* 1 to 3: "rig1" to "rig3" */
	unsigned long msgs;
	unsigned long maxsize;
	unsigned long idle_ms;
	unsigned long wait_ms;
	bool no_write;		/* -R */
	bool bad_key;		/* -K */
};

struct rc_endpoint {
	uint32_t qp;
	uint32_t psn;
	uint8_t gid[16];
	uint8_t mac[6];
};

struct rc {
	struct rc_opts o;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;		/* RC_RECVS receive slots, then the send */
	uint8_t *sink;		/* "rig3": where rig's probes write */
	struct ibv_mr *sink_mr;
	uint32_t rig_sink_rkey;	/* rig's sink, from a "rig3" answer */
	uint64_t rig_sink_addr;
	struct rc_endpoint self, rig;
	enum ibv_mtu mtu;	/* the path MTU */
	uint64_t packets;	/* of the echoes rig sent us */
};

static int say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int say(const char *fmt, ...)
{
	va_list ap;

	fputs("raw-client: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return -1;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ll + ts.tv_nsec / 1000000;
}

/* ---- the wire forms (rig-wire(7) THE ENDPOINT, THE PRIVATE DATA) ---- */

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static const char *const form_tag[4] = { "", "rig1", "rig2", "rig3" };
static const size_t form_len[4] = { 0, RC_RIG1, RC_RIG2, RC_RIG3 };

/* Our private data in the chosen form; returns its length. */
static uint8_t pack(const struct rc *c, uint8_t *out)
{
	uint64_t addr = (uintptr_t)c->sink;
	uint32_t rkey;

	memcpy(out, form_tag[c->o.form], 4);
	put_be32(out + 4, c->self.qp);
	put_be32(out + 8, c->self.psn);
	memcpy(out + 12, c->self.gid, 16);
	memcpy(out + 28, c->self.mac, 6);
	if (c->o.form == 1)
		return RC_RIG1;
	out[34] = (uint8_t)c->mtu;	/* our port's active MTU, for now */
	if (c->o.form == 2)
		return RC_RIG2;
	rkey = c->sink_mr->rkey ^ (c->o.bad_key ? 0x5a : 0);
	put_be32(out + 35, rkey);
	put_be32(out + 39, (uint32_t)(addr >> 32));
	put_be32(out + 43, (uint32_t)addr);
	return RC_RIG3;
}

/* rig's answer: in the form we sent, zero padding, 24-bit qp and psn,
 * an MTU code of 1 to 5. Sets *mtu to rig's code, 0 for "rig1". */
static int parse(struct rc *c, const uint8_t *p, size_t len, enum ibv_mtu *mtu)
{
	size_t need = form_len[c->o.form], i;

	if (!p || len < need || memcmp(p, form_tag[c->o.form], 4))
		return say("the answer is not in the form we sent (%zu bytes)", p ? len : 0);
	for (i = need; i < len; i++)
		if (p[i])
			return say("the answer's padding is not zero at byte %zu", i);
	c->rig.qp = get_be32(p + 4);
	c->rig.psn = get_be32(p + 8);
	if (c->rig.qp > 0xffffff || c->rig.psn > 0xffffff)
		return say("the answer's qp %#x or psn %#x is over 24 bits", c->rig.qp, c->rig.psn);
	memcpy(c->rig.gid, p + 12, 16);
	memcpy(c->rig.mac, p + 28, 6);	/* sent, never needed */
	*mtu = 0;
	if (c->o.form >= 2) {
		if (p[34] < IBV_MTU_256 || p[34] > IBV_MTU_4096)
			return say("the answer's MTU code is %u, not 1 to 5", p[34]);
		*mtu = (enum ibv_mtu)p[34];
	}
	if (c->o.form == 3) {	/* for our own probes of rig, had we any */
		c->rig_sink_rkey = get_be32(p + 35);
		c->rig_sink_addr = (uint64_t)get_be32(p + 39) << 32 | get_be32(p + 43);
	}
	return 0;
}

/* ---- rdma_cm ------------------------------------------------------------ */

/*
 * Waits up to @ms for the id's next event; it must be @want. A
 * CONNECT_RESPONSE's private data is copied to @priv (up to 256 bytes).
 */
static int cm_wait(struct rc *c, enum rdma_cm_event_type want, int ms,
		   uint8_t *priv, size_t *priv_len)
{
	struct pollfd pfd = { .fd = c->ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int ret;

	ret = poll(&pfd, 1, ms);
	if (ret <= 0)
		return say("no %s within %d ms", rdma_event_str(want), ms);
	if (rdma_get_cm_event(c->ch, &ev))
		return say("rdma_get_cm_event: %s", strerror(errno));
	ret = 0;
	if (ev->event != want) {
		ret = say("%s (status %d), not %s%s", rdma_event_str(ev->event), ev->status,
			  rdma_event_str(want), ev->event == RDMA_CM_EVENT_REJECTED ?
			  ": the listener refused the request" : "");
	} else if (priv) {
		*priv_len = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
		if (*priv_len > 256)
			*priv_len = 256;
		if (*priv_len)
			memcpy(priv, ev->param.conn.private_data, *priv_len);
	}
	rdma_ack_cm_event(ev);
	return ret;
}

static int resolve(struct rc *c)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	int ret;

	ret = getaddrinfo(c->o.addr, c->o.port, &hints, &ai);
	if (ret)
		return say("%s port %s: %s", c->o.addr, c->o.port, gai_strerror(ret));
	ret = rdma_resolve_addr(c->id, NULL, ai->ai_addr, RC_RESOLVE_MS);
	freeaddrinfo(ai);
	if (ret)
		return say("rdma_resolve_addr: %s", strerror(errno));
	if (cm_wait(c, RDMA_CM_EVENT_ADDR_RESOLVED, RC_RESOLVE_MS + 1000, NULL, NULL))
		return -1;
	if (rdma_resolve_route(c->id, RC_RESOLVE_MS))
		return say("rdma_resolve_route: %s", strerror(errno));
	return cm_wait(c, RDMA_CM_EVENT_ROUTE_RESOLVED, RC_RESOLVE_MS + 1000, NULL, NULL);
}

/* ---- our queue pair ------------------------------------------------------ */

static int post_receive(struct rc *c, unsigned int slot)
{
	struct ibv_sge sge = { (uintptr_t)(c->buf + slot * c->o.maxsize),
			       (uint32_t)c->o.maxsize, c->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = slot, .sg_list = &sge, .num_sge = 1 }, *bad;
	int ret = ibv_post_recv(c->qp, &wr, &bad);

	return ret ? say("ibv_post_recv: %s", strerror(ret)) : 0;
}

/* Our queue pair, its CQ, our memory and our endpoint; the queue pair at
 * INIT with the receives posted. */
static int make_qp(struct rc *c)
{
	struct ibv_qp_init_attr init = { 0 };
	struct ibv_port_attr pattr;
	struct ibv_qp_attr a = { 0 };
	const struct sockaddr *sa;
	size_t len = (RC_RECVS + 1) * c->o.maxsize;
	unsigned int i;
	int ret;

	c->pd = ibv_alloc_pd(c->id->verbs);
	c->cc = ibv_create_comp_channel(c->id->verbs);
	if (!c->pd || !c->cc)
		return say("ibv_alloc_pd or ibv_create_comp_channel: %s", strerror(errno));
	c->cq = ibv_create_cq(c->id->verbs, RC_RECVS + 2, NULL, c->cc, 0);
	if (!c->cq)
		return say("ibv_create_cq: %s", strerror(errno));
	init.send_cq = c->cq;
	init.recv_cq = c->cq;
	init.qp_type = IBV_QPT_RC;
	init.sq_sig_all = 1;
	init.cap.max_send_wr = 1;
	init.cap.max_recv_wr = RC_RECVS;
	init.cap.max_send_sge = 1;
	init.cap.max_recv_sge = 1;
	c->qp = ibv_create_qp(c->pd, &init);	/* not rdma_create_qp: ours */
	if (!c->qp)
		return say("ibv_create_qp: %s", strerror(errno));
	c->buf = calloc(1, len);
	if (!c->buf)
		return say("no memory for %zu bytes", len);
	/* Local access only: rig never reads or writes our memory... */
	c->mr = ibv_reg_mr(c->pd, c->buf, len, IBV_ACCESS_LOCAL_WRITE);
	if (!c->mr)
		return say("ibv_reg_mr: %s", strerror(errno));
	/* ...but for the sink, where "rig3"'s probes write a byte. */
	if (c->o.form == 3) {
		c->sink = aligned_alloc(RC_SINK, RC_SINK);
		if (!c->sink)
			return say("no memory for the sink");
		memset(c->sink, 0xee, RC_SINK);
		c->sink_mr = ibv_reg_mr(c->pd, c->sink, RC_SINK,
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
		if (!c->sink_mr)
			return say("ibv_reg_mr of the sink: %s", strerror(errno));
	}

	ret = ibv_query_port(c->id->verbs, c->id->port_num, &pattr);
	if (ret)
		return say("ibv_query_port: %s", strerror(ret));
	c->mtu = pattr.active_mtu;

	/* Our endpoint: the queue pair, a random first PSN, the GID of the
	 * address rdma_cm uses on our side; the MAC rig never reads. */
	c->self.qp = c->qp->qp_num;
	if (getrandom(&c->self.psn, sizeof(c->self.psn), 0) != sizeof(c->self.psn))
		c->self.psn = (uint32_t)now_ms() * 2654435761u;
	c->self.psn &= 0xffffff;
	sa = rdma_get_local_addr(c->id);
	if (sa->sa_family == AF_INET) {
		c->self.gid[10] = c->self.gid[11] = 0xff;
		memcpy(c->self.gid + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
	} else {
		memcpy(c->self.gid, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
	}

	/* INIT: "rig2" and "rig3" take rig's probes, RDMA WRITEs. */
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = c->id->port_num;
	a.qp_access_flags = c->o.form >= 2 && !c->o.no_write ? IBV_ACCESS_REMOTE_WRITE : 0;
	ret = ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS);
	if (ret)
		return say("RESET->INIT: %s", strerror(ret));
	for (i = 0; i < RC_RECVS; i++)
		if (post_receive(c, i))
			return -1;
	return 0;
}

/* RTR and RTS from rig's endpoint, with the route rdma_cm resolved. */
static int connect_qp(struct rc *c, enum ibv_mtu rig_mtu)
{
	struct ibv_device_attr dattr;
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR };
	int mask = 0, ret;

	if (rig_mtu && rig_mtu < c->mtu)
		c->mtu = rig_mtu;	/* "rig2", "rig3": the smaller of the two */
	if (rdma_init_qp_attr(c->id, &a, &mask))
		return say("rdma_init_qp_attr: %s", strerror(errno));
	/* Keep the address vector's sgid_index, hop_limit, traffic_class
	 * and flow_label; the rest is rig's endpoint. */
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = c->mtu;
	a.dest_qp_num = c->rig.qp;
	a.rq_psn = c->rig.psn;
	a.max_dest_rd_atomic = 0;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, c->rig.gid, 16);
	a.ah_attr.port_num = c->id->port_num;
	ret = ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			    IBV_QP_MIN_RNR_TIMER);
	if (ret)
		return say("INIT->RTR: %s", strerror(ret));

	ret = ibv_query_device(c->id->verbs, &dattr);
	if (ret)
		return say("ibv_query_device: %s", strerror(ret));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = dattr.vendor_id == RC_SOFT_ROCE ? 6 : 7;
	a.rnr_retry = 7;
	a.sq_psn = c->self.psn;
	a.max_rd_atomic = 0;
	ret = ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
	return ret ? say("RTR->RTS: %s", strerror(ret)) : 0;
}

static int dial(struct rc *c)
{
	struct rdma_conn_param param = { 0 };
	uint8_t priv[RC_RIG3], answer[256];
	enum ibv_mtu rig_mtu;
	size_t answer_len = 0;
	char gid[INET6_ADDRSTRLEN];

	c->ch = rdma_create_event_channel();
	if (!c->ch || rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP))
		return say("rdma_create_id: %s", strerror(errno));
	if (resolve(c) || make_qp(c))
		return -1;

	param.private_data = priv;
	param.private_data_len = pack(c, priv);
	param.qp_num = c->self.qp;
	param.retry_count = 7;
	param.rnr_retry_count = 7;
	if (rdma_connect(c->id, &param))
		return say("rdma_connect: %s", strerror(errno));
	if (cm_wait(c, RDMA_CM_EVENT_CONNECT_RESPONSE, 10000, answer, &answer_len) ||
	    parse(c, answer, answer_len, &rig_mtu) || connect_qp(c, rig_mtu))
		return -1;
	/* At once: rig drops a handshake not established within 3 s. */
	if (rdma_establish(c->id))
		return say("rdma_establish: %s", strerror(errno));
	inet_ntop(AF_INET6, c->rig.gid, gid, sizeof(gid));
	printf("raw-client: %s form, connected: our qp 0x%06x psn 0x%06x, rig's qp 0x%06x "
	       "psn 0x%06x gid %s, path MTU %d bytes%s%s\n",
	       form_tag[c->o.form], c->self.qp, c->self.psn, c->rig.qp, c->rig.psn,
	       gid, 128 << c->mtu, c->o.form >= 2 && c->o.no_write ? ", no remote write (-R)" : "",
	       c->o.form == 3 && c->o.bad_key ? ", the sink's rkey sent wrong (-K)" : "");
	if (c->o.form == 3)
		printf("raw-client: our sink rkey 0x%08x at %p; rig's rkey 0x%08x at 0x%llx\n",
		       c->sink_mr->rkey, (void *)c->sink, c->rig_sink_rkey,
		       (unsigned long long)c->rig_sink_addr);
	return 0;
}

/* ---- the echo ------------------------------------------------------------ */

/* The next completion, waiting on the CQ's channel until @deadline:
 * 1, 0 at the deadline, -1 on failure. */
static int take(struct rc *c, struct ibv_wc *wc, int64_t deadline)
{
	struct pollfd pfd = { .fd = c->cc->fd, .events = POLLIN };
	struct ibv_cq *cq;
	void *ctx;
	int n;

	for (;;) {
		n = ibv_poll_cq(c->cq, 1, wc);
		if (n)
			return n < 0 ? say("ibv_poll_cq failed") : 1;
		if (ibv_req_notify_cq(c->cq, 0))
			return say("ibv_req_notify_cq failed");
		n = ibv_poll_cq(c->cq, 1, wc);	/* one that came before the arming */
		if (n)
			return n < 0 ? say("ibv_poll_cq failed") : 1;
		if (now_ms() >= deadline)
			return 0;
		n = poll(&pfd, 1, (int)(deadline - now_ms()));
		if (n < 0 && errno != EINTR)
			return say("poll: %s", strerror(errno));
		if (n > 0) {
			if (ibv_get_cq_event(c->cc, &cq, &ctx))
				return say("ibv_get_cq_event failed");
			ibv_ack_cq_events(cq, 1);
		}
	}
}

static uint8_t pattern(unsigned long i, size_t j)
{
	return (uint8_t)(i * 31 + j * 7 + (j >> 8));
}

/* Message @i: its size, from 1 to MAXSIZE, every fourth one MAXSIZE. */
static size_t size_of(const struct rc *c, unsigned long i)
{
	return i % 4 == 3 ? c->o.maxsize : 1 + (i * 997) % c->o.maxsize;
}

static int echo_one(struct rc *c, unsigned long i)
{
	uint8_t *out = c->buf + RC_RECVS * c->o.maxsize;
	size_t n = size_of(c, i), j;
	struct ibv_sge sge = { (uintptr_t)out, (uint32_t)n, c->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = UINT64_MAX, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND }, *bad;
	int64_t deadline = now_ms() + (int64_t)c->o.wait_ms;
	bool sent = false, back = false;
	struct ibv_wc wc;
	int ret;

	for (j = 0; j < n; j++)
		out[j] = pattern(i, j);
	ret = ibv_post_send(c->qp, &wr, &bad);
	if (ret)
		return say("message %lu: ibv_post_send: %s", i, strerror(ret));
	while (!sent || !back) {
		ret = take(c, &wc, deadline);
		if (ret <= 0)
			return ret ? -1 : say("message %lu: no %s within %lu ms", i,
					      sent ? "reply" : "send completion", c->o.wait_ms);
		if (wc.status != IBV_WC_SUCCESS)
			return say("message %lu (%zu bytes): the %s failed: %s (status %d)", i, n,
				   wc.wr_id == UINT64_MAX ? "send" : "receive",
				   ibv_wc_status_str(wc.status), wc.status);
		if (wc.wr_id == UINT64_MAX) {
			sent = true;
			continue;
		}
		back = true;
		if (wc.byte_len != n)
			return say("message %lu: %u bytes came back, not %zu", i, wc.byte_len, n);
		if (memcmp(c->buf + wc.wr_id * c->o.maxsize, out, n))
			return say("message %lu: the bytes that came back differ", i);
		if (post_receive(c, (unsigned int)wc.wr_id))
			return -1;
	}
	/* rig's reply took this many packets of its sequence. */
	c->packets += (n + (128u << c->mtu) - 1) / (128u << c->mtu);
	return 0;
}

/* How far the receive PSN went beyond the echoes' packets: rig's other
 * requests, its liveness probes. -1 when the device does not say. */
static long probes_seen(struct rc *c)
{
	struct ibv_qp_init_attr init;
	struct ibv_qp_attr a;
	uint32_t went;

	if (ibv_query_qp(c->qp, &a, IBV_QP_RQ_PSN, &init))
		return -1;
	went = (a.rq_psn - c->rig.psn) & 0xffffff;
	return went < c->packets ? -1 : (long)(went - c->packets);
}

static void hang_up(struct rc *c)
{
	if (c->id && c->qp && !rdma_disconnect(c->id))
		cm_wait(c, RDMA_CM_EVENT_DISCONNECTED, 2000, NULL, NULL);
	if (c->qp)
		ibv_destroy_qp(c->qp);
	if (c->mr)
		ibv_dereg_mr(c->mr);
	if (c->sink_mr)
		ibv_dereg_mr(c->sink_mr);
	free(c->sink);
	if (c->cq)
		ibv_destroy_cq(c->cq);
	if (c->cc)
		ibv_destroy_comp_channel(c->cc);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->ch)
		rdma_destroy_event_channel(c->ch);
	free(c->buf);
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"Usage: %s -a ADDR -p PORT [-w rig1|rig2|rig3] [-n MSGS] [-s MAXSIZE]\n"
		"          [-i MS] [-t MS] [-R] [-K]\n"
		"  -a ADDR     rig-echo's address\n"
		"  -p PORT     its port\n"
		"  -w FORM     the wire form, rig1, rig2 or rig3 (default rig3: with the\n"
		"              MTU, a sink, and rig's liveness probes into it; rig2: the\n"
		"              MTU and rig 0.3's zero-length probes)\n"
		"  -n MSGS     messages to echo (default 10)\n"
		"  -s MAXSIZE  the longest message, at most rig-echo's -s (default 4096)\n"
		"  -i MS       pause after each reply (default 0)\n"
		"  -t MS       wait at most this for each reply (default 5000)\n"
		"  -R          rig2 or rig3 without remote write: rig's probes fail it\n"
		"  -K          rig3 with the sink's rkey sent wrong: rig's probes fail it\n",
		argv0);
}

static int number(const char *arg, unsigned long min, unsigned long max, unsigned long *v)
{
	char *end;

	errno = 0;
	*v = strtoul(arg, &end, 0);
	return errno || end == arg || *end || arg[0] == '-' || *v < min || *v > max ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct rc c = { .o = { .form = 3, .msgs = 10, .maxsize = 4096, .wait_ms = 5000 } };
	unsigned long i, bytes = 0;
	long probes;
	int opt, ret = 1;

	while ((opt = getopt(argc, argv, "a:p:w:n:s:i:t:RK")) != -1) {
		switch (opt) {
		case 'a': c.o.addr = optarg; break;
		case 'p': c.o.port = optarg; break;
		case 'w':
			if (strcmp(optarg, "rig1") && strcmp(optarg, "rig2") &&
			    strcmp(optarg, "rig3"))
				goto bad;
			c.o.form = optarg[3] - '0';
			break;
		case 'n': if (number(optarg, 1, 100000000, &c.o.msgs)) goto bad; break;
		case 's': if (number(optarg, 1, 1ul << 24, &c.o.maxsize)) goto bad; break;
		case 'i': if (number(optarg, 0, 3600000, &c.o.idle_ms)) goto bad; break;
		case 't': if (number(optarg, 1, 3600000, &c.o.wait_ms)) goto bad; break;
		case 'R': c.o.no_write = true; break;
		case 'K': c.o.bad_key = true; break;
		default: goto bad;
		}
	}
	if (optind != argc || !c.o.addr || !c.o.port)
		goto bad;
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (dial(&c))
		goto out;
	for (i = 0; i < c.o.msgs; i++) {
		if (echo_one(&c, i))
			goto out;
		bytes += size_of(&c, i);
		if (c.o.idle_ms)
			usleep((useconds_t)c.o.idle_ms * 1000);
	}
	probes = probes_seen(&c);
	printf("raw-client: %lu messages echoed (%lu bytes), every byte checked; ", i, bytes);
	if (probes < 0)
		printf("the device does not report its receive PSN\n");
	else
		printf("rig's requests beyond the echoes: %ld (liveness probes)\n", probes);
	if (c.o.form == 3)
		printf("raw-client: our sink's first byte is 0x%02x: %s\n", c.sink[0],
		       c.sink[0] == 0xee ? "rig's probes never wrote it" : "rig's probes wrote it");
	ret = 0;
out:
	hang_up(&c);
	return ret;
bad:
	usage(argv[0]);
	return 2;
}
