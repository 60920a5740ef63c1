/* SPDX-License-Identifier: MIT */
/*
 * Connections established per second: rig's loop-driven handshake
 * (rig_loop_listen on a server loop, rig_loop_dial from a client loop,
 * both watched in one io_uring) against the same exchange written with
 * plain librdmacm and libibverbs calls (a listener and a client on two
 * non-blocking event channels, polled together), in one thread each, on
 * the same device, in alternating rounds.
 *
 * The exchange, both ways: the client resolves the address and route,
 * makes a queue pair (two CQs of 4095 entries on a completion channel,
 * armed; 4095 send and receive entries) and sends its endpoint (the tag
 * "rig1", then qp, psn, gid, mac: 34 bytes; rig sends "rig3" and 13
 * bytes more, its port's MTU and its sink's rkey and address) in the CM
 * private data; the
 * server, on the request, makes a queue pair likewise, takes it
 * RESET->INIT->RTR->RTS towards the client's endpoint and accepts with its
 * own; the client, on the response, takes its queue pair to RTS and calls
 * rdma_establish. A connection counts once both sides have it up (the
 * server's ESTABLISHED, the client's establish). Each round makes
 * CONNS connections, QUEUE at a time, and times the first dial to the
 * last connection up; teardown is not timed.
 *
 *	conn_rate -d DEV -g GID_INDEX -a ADDR [-c CONNS] [-q QUEUE] [-r ROUNDS] [-p PORT]
 *		  [-s SETTLE_MS] [-v] [-o rig|raw] [-l LIVENESS_MS]
 *
 * -l sets rig's loops' liveness interval (rig_loop_liveness; 0: off;
 * default rig's RIG_LIVENESS_MS): a round that lasts longer than it
 * probes the connections made so far, which plain librdmacm does not.
 *
 * -o runs only one of the two (a warm-up and ROUNDS rounds), for a
 * profiler: strace -f -c, or callgrind, sees one kind of connection.
 *
 * stdout: conn_rate,rig,PER_S / conn_rate,raw,PER_S / conn_rate,ratio,R,
 * then conn_cpu_us rows likewise: the CPU time (user and system) of the
 * process, per connection; stderr: a line for each
 * (medians over rounds; the ratio is the median of each round's ratio).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <rig/rig.h>

#define CONNS_MAX 1024
#define ROUNDS_MAX 15
#define TAG_SERVER 0x636f6e6e00000001ull
#define TAG_CLIENT 0x636f6e6e00000002ull
#define ENTRIES 4095
#define PRIV 34
#define RESOLVE_MS 2000
#define DIAL_US 10000000ll

static const char *dev, *addr;
static int gid_index = -1, conns = 64, queue = 8, settle_ms = 500, verbose, live_ms = -1;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The process's CPU time, user and system, in s: rig's loops hand the
 * making and destroying of queue pairs to helper threads, whose time
 * counts too. */
static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "conn_rate: %s: %s\n", what, strerror(err < 0 ? -err : err));
	exit(1);
}

static void die_rig(const char *what, int ret)
{
	fprintf(stderr, "conn_rate: %s: %s (%s)\n", what, strerror(-ret), rig_errmsg());
	exit(1);
}

/* ---- rig ---------------------------------------------------------------- */

static struct rig_nic *rig_nic;

static void rig_handle(struct io_uring *ring, struct rig_loop *loop,
		       const struct io_uring_cqe *cqe, struct rig_loop *client,
		       uint16_t port, int *started, int *dialed, int *accepted)
{
	struct rig_ready ready[64];
	int i, n, ret;

	do {
		n = rig_uring_handle(ring, loop, cqe, ready, 64);
		if (n < 0)
			die_rig("rig_uring_handle", n);
		for (i = 0; i < n; i++) {
			switch (ready[i].news) {
			case RIG_NEWS_ACCEPTED:
				(*accepted)++;
				break;
			case RIG_NEWS_DIALED:
				if (ready[i].result)
					die_rig("rig_loop_dial's outcome", ready[i].result);
				(*dialed)++;
				if (*started < conns) {
					ret = rig_loop_dial(client, addr, port, DIAL_US,
							    (uint64_t)(*started)++);
					if (ret)
						die_rig("rig_loop_dial", ret);
				}
				break;
			case RIG_NEWS_GONE:
				die_rig("a connection went", ready[i].result);
				break;
			case RIG_NEWS_RING:
				break;
			}
		}
		cqe = NULL;
	} while (n == 64);
}

/*
 * Teardown leaves the kernel work to do after the calls return (the
 * CM's disconnect exchange and time-wait, rxe's cleanup of its queue
 * pairs): it waits out before each timed round, so that no round pays
 * for the one before.
 */
static void settle(void)
{
	usleep((useconds_t)settle_ms * 1000);
}

/* One round: conns connections, queue in flight; returns the seconds
 * from the first dial to the last connection up, and sets *cpu to the
 * CPU seconds this thread spent meanwhile. */
static double rig_round(uint16_t port, double *cpu)
{
	struct rig_loop *server, *client;
	struct rig_listener *l;
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	int started = 0, dialed = 0, accepted = 0, ret;
	unsigned head, seen;
	double t0, c0, t;

	if ((ret = rig_loop_open(rig_nic, &server)) || (ret = rig_loop_open(rig_nic, &client)))
		die_rig("rig_loop_open", ret);
	if (live_ms >= 0 && ((ret = rig_loop_liveness(server, live_ms)) ||
			     (ret = rig_loop_liveness(client, live_ms))))
		die_rig("rig_loop_liveness", ret);
	if ((ret = io_uring_queue_init(64, &ring, 0)))
		die("io_uring_queue_init", ret);
	if ((ret = rig_uring_watch(&ring, server, TAG_SERVER)) ||
	    (ret = rig_uring_watch(&ring, client, TAG_CLIENT)))
		die_rig("rig_uring_watch", ret);
	if ((ret = rig_loop_listen(server, addr, port, 1, &l)))
		die_rig("rig_loop_listen", ret);
	io_uring_submit(&ring);
	settle();

	t0 = now_s();
	c0 = cpu_s();
	while (started < queue && started < conns)
		if ((ret = rig_loop_dial(client, addr, port, DIAL_US, (uint64_t)started++)))
			die_rig("rig_loop_dial", ret);
	while (dialed < conns || accepted < conns) {
		if ((ret = io_uring_submit_and_wait(&ring, 1)) < 0)
			die("io_uring_submit_and_wait", ret);
		seen = 0;
		io_uring_for_each_cqe(&ring, head, cqe) {
			seen++;
			rig_handle(&ring, cqe->user_data == TAG_SERVER ? server : client, cqe,
				   client, port, &started, &dialed, &accepted);
		}
		io_uring_cq_advance(&ring, seen);
	}
	t = now_s() - t0;
	*cpu = cpu_s() - c0;
	io_uring_queue_exit(&ring);
	if ((ret = rig_loop_close(client)) || (ret = rig_loop_close(server)))
		die_rig("rig_loop_close", ret);
	return t;
}

/* ---- plain librdmacm and libibverbs ------------------------------------- */

struct raw_conn {
	struct rdma_cm_id *id;
	struct ibv_cq *scq, *rcq;
	struct ibv_qp *qp;
	uint32_t psn;
};

struct raw {
	struct rdma_event_channel *sch, *cch;	/* server's, client's */
	struct rdma_cm_id *listener;
	struct ibv_context *ctx;		/* rdma_cm's, of the device */
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	union ibv_gid gid;
	enum ibv_mtu mtu;
	struct sockaddr_in dst;
	struct raw_conn conn[2 * CONNS_MAX];
	int nconn;
	int started, dialed, accepted;
};

static void nonblock(int fd)
{
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK))
		die("fcntl", errno);
}

/* The PD and completion channel, on the device context rdma_cm uses. */
static void raw_device(struct raw *x, struct ibv_context *ctx, uint8_t port)
{
	struct ibv_port_attr pa;

	if (x->ctx) {
		if (ctx != x->ctx)
			die("two device contexts", EINVAL);
		return;
	}
	x->ctx = ctx;
	if (strcmp(ibv_get_device_name(ctx->device), dev))
		die("the address is on another device", ENODEV);
	x->pd = ibv_alloc_pd(ctx);
	x->cc = ibv_create_comp_channel(ctx);
	if (!x->pd || !x->cc)
		die("ibv_alloc_pd/ibv_create_comp_channel", errno);
	nonblock(x->cc->fd);
	if (ibv_query_gid(ctx, port, gid_index, &x->gid) || ibv_query_port(ctx, port, &pa))
		die("ibv_query_gid/port", errno);
	x->mtu = pa.active_mtu;
}

static struct raw_conn *raw_make_qp(struct raw *x, struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr attr = { 0 };
	struct raw_conn *c = &x->conn[x->nconn++];

	raw_device(x, id->verbs, id->port_num);
	c->id = id;
	id->context = c;
	c->scq = ibv_create_cq(x->ctx, ENTRIES, c, x->cc, 0);
	c->rcq = ibv_create_cq(x->ctx, ENTRIES, c, x->cc, 0);
	if (!c->scq || !c->rcq)
		die("ibv_create_cq", errno);
	/* an event loop's queue pair: its CQs armed */
	if (ibv_req_notify_cq(c->scq, 0) || ibv_req_notify_cq(c->rcq, 0))
		die("ibv_req_notify_cq", errno);
	attr.qp_context = c;
	attr.send_cq = c->scq;
	attr.recv_cq = c->rcq;
	attr.cap.max_send_wr = ENTRIES;
	attr.cap.max_recv_wr = ENTRIES;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.qp_type = IBV_QPT_RC;
	attr.sq_sig_all = 1;
	c->qp = ibv_create_qp(x->pd, &attr);
	if (!c->qp)
		die("ibv_create_qp", errno);
	if (getrandom(&c->psn, sizeof(c->psn), 0) != sizeof(c->psn))
		die("getrandom", errno);
	c->psn &= 0xffffff;
	return c;
}

/* "rig1", qp and psn big-endian, gid, mac (none here) */
static void raw_pack(const struct raw *x, const struct raw_conn *c, uint8_t *p)
{
	uint32_t qpn = htonl(c->qp->qp_num), psn = htonl(c->psn);

	memset(p, 0, PRIV);
	memcpy(p, "rig1", 4);
	memcpy(p + 4, &qpn, 4);
	memcpy(p + 8, &psn, 4);
	memcpy(p + 12, x->gid.raw, 16);
}

struct peer {
	uint32_t qpn, psn;
	uint8_t gid[16];
};

static void raw_parse(const struct rdma_cm_event *ev, struct peer *p)
{
	const uint8_t *d = ev->param.conn.private_data;

	if (!d || ev->param.conn.private_data_len < PRIV || memcmp(d, "rig1", 4))
		die("the peer's private data", EPROTO);
	memcpy(&p->qpn, d + 4, 4);
	memcpy(&p->psn, d + 8, 4);
	memcpy(p->gid, d + 12, 16);
	p->qpn = ntohl(p->qpn);
	p->psn = ntohl(p->psn);
}

/* RESET->INIT->RTR->RTS with rig's values (lib/qp.c). */
static void raw_connect(struct raw *x, struct raw_conn *c, const struct peer *p)
{
	uint8_t port = c->id->port_num;
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = port;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		die("RESET->INIT", errno);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = x->mtu;
	a.dest_qp_num = p->qpn;
	a.rq_psn = p->psn;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, p->gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = port;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			  IBV_QP_MIN_RNR_TIMER))
		die("INIT->RTR", errno);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 6;
	a.rnr_retry = 7;
	a.sq_psn = c->psn;
	if (ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTR->RTS", errno);
}

static void raw_param(struct rdma_conn_param *p, const uint8_t *priv,
		      const struct raw_conn *c)
{
	memset(p, 0, sizeof(*p));
	p->private_data = priv;
	p->private_data_len = PRIV;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
	p->qp_num = c->qp->qp_num;
	p->responder_resources = 1;
	p->initiator_depth = 1;
}

static void raw_dial(struct raw *x)
{
	struct rdma_cm_id *id;

	if (rdma_create_id(x->cch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id", errno);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&x->dst, RESOLVE_MS))
		die("rdma_resolve_addr", errno);
	x->started++;
}

static void raw_client_event(struct raw *x, struct rdma_cm_event *ev)
{
	struct rdma_conn_param param;
	uint8_t priv[PRIV];
	struct raw_conn *c;
	struct peer p;

	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(ev->id, RESOLVE_MS))
			die("rdma_resolve_route", errno);
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		c = raw_make_qp(x, ev->id);
		raw_pack(x, c, priv);
		raw_param(&param, priv, c);
		if (rdma_connect(ev->id, &param))
			die("rdma_connect", errno);
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		c = ev->id->context;
		raw_parse(ev, &p);
		raw_connect(x, c, &p);
		if (rdma_establish(ev->id))
			die("rdma_establish", errno);
		x->dialed++;
		if (x->started < conns)
			raw_dial(x);
		break;
	default:
		fprintf(stderr, "conn_rate: client: %s (status %d)\n", rdma_event_str(ev->event),
			ev->status);
		exit(1);
	}
}

static void raw_server_event(struct raw *x, struct rdma_cm_event *ev)
{
	struct rdma_conn_param param;
	uint8_t priv[PRIV];
	struct raw_conn *c;
	struct peer p;

	switch (ev->event) {
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		raw_parse(ev, &p);
		c = raw_make_qp(x, ev->id);
		raw_connect(x, c, &p);
		raw_pack(x, c, priv);
		raw_param(&param, priv, c);
		if (rdma_accept(ev->id, &param))
			die("rdma_accept", errno);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		x->accepted++;
		break;
	default:
		fprintf(stderr, "conn_rate: server: %s (status %d)\n", rdma_event_str(ev->event),
			ev->status);
		exit(1);
	}
}

/* Takes every event waiting on @ch. */
static void raw_drain(struct raw *x, struct rdma_event_channel *ch, bool server)
{
	struct rdma_cm_event *ev;

	while (!rdma_get_cm_event(ch, &ev)) {
		if (server)
			raw_server_event(x, ev);
		else
			raw_client_event(x, ev);
		rdma_ack_cm_event(ev);
	}
	if (errno != EAGAIN)
		die("rdma_get_cm_event", errno);
}

static void raw_free(struct raw_conn *c)
{
	rdma_disconnect(c->id);
	ibv_destroy_qp(c->qp);
	ibv_destroy_cq(c->scq);
	ibv_destroy_cq(c->rcq);
	rdma_destroy_id(c->id);
}

static double raw_round(uint16_t port, double *cpu)
{
	struct raw *x = calloc(1, sizeof(*x));
	struct sockaddr_in src = { 0 };
	struct pollfd pfd[2];
	double t0, c0, t;
	int i;

	if (!x)
		die("calloc", ENOMEM);
	x->sch = rdma_create_event_channel();
	x->cch = rdma_create_event_channel();
	if (!x->sch || !x->cch)
		die("rdma_create_event_channel", errno);
	nonblock(x->sch->fd);
	nonblock(x->cch->fd);
	src.sin_family = AF_INET;
	src.sin_port = htons(port);
	if (inet_pton(AF_INET, addr, &src.sin_addr) != 1)
		die("inet_pton", EINVAL);
	x->dst = src;
	if (rdma_create_id(x->sch, &x->listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(x->listener, (struct sockaddr *)&src) ||
	    rdma_listen(x->listener, 1024))
		die("listening", errno);
	pfd[0] = (struct pollfd){ .fd = x->sch->fd, .events = POLLIN };
	pfd[1] = (struct pollfd){ .fd = x->cch->fd, .events = POLLIN };
	settle();

	t0 = now_s();
	c0 = cpu_s();
	while (x->started < queue && x->started < conns)
		raw_dial(x);
	while (x->dialed < conns || x->accepted < conns) {
		if (poll(pfd, 2, 10000) <= 0)
			die("poll: nothing for 10 s", ETIMEDOUT);
		if (pfd[0].revents)
			raw_drain(x, x->sch, true);
		if (pfd[1].revents)
			raw_drain(x, x->cch, false);
	}
	t = now_s() - t0;
	*cpu = cpu_s() - c0;

	for (i = 0; i < x->nconn; i++)
		raw_free(&x->conn[i]);
	rdma_destroy_id(x->listener);
	if (x->cc)
		ibv_destroy_comp_channel(x->cc);
	if (x->pd)
		ibv_dealloc_pd(x->pd);
	rdma_destroy_event_channel(x->sch);
	rdma_destroy_event_channel(x->cch);
	free(x);
	return t;
}

/* ---- the run ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char *argv[])
{
	double rig[ROUNDS_MAX], raw[ROUNDS_MAX], ratio[ROUNDS_MAX], mrig, mraw, mr;
	double crig[ROUNDS_MAX], craw[ROUNDS_MAX], cratio[ROUNDS_MAX], mcrig, mcraw, mcr, c;
	int rounds = 9, port = 18700, opt, r, ret;
	const char *only = NULL;

	while ((opt = getopt(argc, argv, "d:g:a:c:q:r:p:s:vo:l:")) != -1) {
		switch (opt) {
		case 'd': dev = optarg; break;
		case 'g': gid_index = atoi(optarg); break;
		case 'a': addr = optarg; break;
		case 'c': conns = atoi(optarg); break;
		case 'q': queue = atoi(optarg); break;
		case 'r': rounds = atoi(optarg); break;
		case 'p': port = atoi(optarg); break;
		case 's': settle_ms = atoi(optarg); break;
		case 'v': verbose = 1; break;
		case 'o': only = optarg; break;
		case 'l': live_ms = atoi(optarg); break;
		default: return 2;
		}
	}
	if (!dev || !addr || gid_index < 0 || settle_ms < 0 || conns < 1 || conns > CONNS_MAX || queue < 1 ||
	    rounds < 1 || rounds > ROUNDS_MAX || port < 1 || port + 2 * rounds + 2 > 65535 ||
	    (only && strcmp(only, "rig") && strcmp(only, "raw"))) {
		fprintf(stderr, "usage: conn_rate -d DEV -g GID_INDEX -a ADDR [-c CONNS (<= %d)] [-q QUEUE] [-r ROUNDS (<= %d)] [-p PORT] [-s SETTLE_MS] [-v] [-o rig|raw] [-l LIVENESS_MS]\n",
			CONNS_MAX, ROUNDS_MAX);
		return 2;
	}
	if ((ret = rig_nic_open(dev, &rig_nic)))
		die_rig("rig_nic_open", ret);
	if (only) {
		for (r = 0; r <= rounds; r++) {
			double t = !strcmp(only, "rig") ? rig_round((uint16_t)(port + r), &c)
							: raw_round((uint16_t)(port + r), &c);

			fprintf(stderr, "%s round %d: %.1f/s, CPU per connection %.0f us%s\n", only, r,
				conns / t, c * 1e6 / conns, r ? "" : " (warm-up)");
		}
		rig_nic_close(rig_nic);
		return 0;
	}
	/* A warm-up of each, untimed: the first connections pay for
	 * resolving the neighbour and opening the device in rdma_cm. */
	rig_round((uint16_t)port, &c);
	raw_round((uint16_t)(port + 1), &c);
	for (r = 0; r < rounds; r++) {
		uint16_t p = (uint16_t)(port + 2 + 2 * r);

		if (r % 2) {
			raw[r] = conns / raw_round(p, &craw[r]);
			rig[r] = conns / rig_round(p + 1, &crig[r]);
		} else {
			rig[r] = conns / rig_round(p, &crig[r]);
			raw[r] = conns / raw_round(p + 1, &craw[r]);
		}
		ratio[r] = rig[r] / raw[r];
		crig[r] *= 1e6 / conns;
		craw[r] *= 1e6 / conns;
		cratio[r] = crig[r] / craw[r];
		if (verbose)
			fprintf(stderr, "round %d: rig %.1f/s, raw %.1f/s: %.2fx; CPU per connection rig %.0f us, raw %.0f us\n",
				r, rig[r], raw[r], ratio[r], crig[r], craw[r]);
	}
	rig_nic_close(rig_nic);
	mrig = median(rig, rounds);
	mraw = median(raw, rounds);
	mr = median(ratio, rounds);
	mcrig = median(crig, rounds);
	mcraw = median(craw, rounds);
	mcr = median(cratio, rounds);
	printf("conn_rate,rig,%.1f\nconn_rate,raw,%.1f\nconn_rate,ratio,%.3f\n", mrig, mraw, mr);
	printf("conn_cpu_us,rig,%.0f\nconn_cpu_us,raw,%.0f\nconn_cpu_us,ratio,%.3f\n", mcrig, mcraw,
	       mcr);
	fprintf(stderr, "connections: rig %.0f/s, plain librdmacm %.0f/s (%d per round, %d in flight, median of %d rounds): %.2fx [%.2f-%.2f] (target >= 0.9)\n",
		mrig, mraw, conns, queue, rounds, mr, ratio[0], ratio[rounds - 1]);
	fprintf(stderr, "connections: CPU of the process per connection (both sides, helper threads included): rig %.0f us, plain librdmacm %.0f us: %.2fx\n",
		mcrig, mcraw, mcr);
	return 0;
}
