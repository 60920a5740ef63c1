/* SPDX-License-Identifier: MIT */
/*
 * rig-pingpong: ibv_rc_pingpong on rig's queue pairs, and a latency meter.
 *
 * Two processes exchange -n messages of -s bytes each way over one
 * reliable-connected queue pair: the client sends, the server answers,
 * the client sends the next once its send completed and the answer came.
 * The endpoints are exchanged over TCP in ibv_rc_pingpong's own format
 * (client first, server second, then the client's "done"), so either side
 * may be ibv_rc_pingpong itself (run it with -g set to the index of the
 * NIC's RoCE v2 GID, the one rig uses). With -e a side sleeps in
 * rig_qp_wait() instead of spinning on rig_qp_poll().
 *
 *	rig-pingpong [-d DEV] [-g GID_INDEX] [-s SIZE] [-n ITERS] [-p PORT] [-e]
 *		     [--out_json] [--out_json_file=FILE]
 *	rig-pingpong [same options] SERVER
 *
 * Beside ibv_rc_pingpong's throughput lines it prints ib_send_lat's
 * statistics of the half round trip (t_min, t_max, t_typical, t_avg,
 * t_stdev, 99% and 99.9% percentiles), measured per iteration after a
 * warm-up: the client times each send until its answer arrives, the
 * server each answer until the next message arrives. --out_json writes
 * them in perftest's JSON shape ("test_info", "results").
 *
 * Build:
 *	cc -O2 -o rig-pingpong rig-pingpong.c $(pkg-config --cflags --libs rig) -lm
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <rig/rig.h>

/* ibv_rc_pingpong's endpoint message: "LID:QPN:PSN:GID" in hex, NUL included */
#define PP_MSG_SIZE \
	sizeof("0000:000000:000000:00000000000000000000000000000000")
#define PP_DONE "done"
#define PP_RX_DEPTH 500		/* receives kept posted (ibv_rc_pingpong -r) */
#define PP_WARMUP_MAX 1000	/* iterations left out of the statistics */
#define PP_WAIT_US 1000000	/* one sleep of -e, repeated on timeout */
#define PP_EVENTS_EVERY 0xffff	/* empty polls between two rig_nic_events() */

struct pp_opts {
	const char *dev;
	const char *server;	/* NULL: be the server */
	unsigned int port;
	size_t size;
	unsigned int iters;
	int gidx;		/* -1: no -g */
	int use_event;
	const char *json;	/* --out_json's file, or NULL */
};

static void pp_usage(const char *argv0)
{
	printf("Usage:\n"
	       "  %s            start a server and wait for connection\n"
	       "  %s <host>     connect to server at <host>\n"
	       "\n"
	       "Options:\n"
	       "  -p, --port=<port>      listen on/connect to port <port> (default 18515)\n"
	       "  -d, --ib-dev=<dev>     use IB device <dev> (default first RoCE v2 device)\n"
	       "  -s, --size=<size>      size of message to exchange (default 4096)\n"
	       "  -n, --iters=<iters>    number of exchanges (default 1000)\n"
	       "  -e, --events           sleep in rig_qp_wait (default poll)\n"
	       "  -g, --gid-idx=<index>  check that rig's GID is at this index\n"
	       "      --out_json         write the latency as perftest's JSON to perftest_out.json\n"
	       "      --out_json_file=<file>  ... to <file>\n",
	       argv0, argv0);
}

/* Reports a failed rig call: what failed, its errno, and rig's words. */
static int pp_fail(const char *call, int ret)
{
	fprintf(stderr, "%s: %s (%s)\n", call, strerror(-ret), rig_errmsg());
	return 1;
}

static uint64_t pp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- GID indexes, for -g and for hints to ibv_rc_pingpong users ------- */

/*
 * rig does not take a GID index: it always uses its NIC's RoCE v2 GID.
 * Returns the index of @gid in the GID table of device @dev (any device
 * when NULL), or -1.
 */
static int pp_gid_index(const char *dev, const uint8_t gid[16])
{
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	union ibv_gid g;
	int i, j, n, found = -1;
	uint8_t port;

	list = ibv_get_device_list(&n);
	if (!list)
		return -1;
	for (i = 0; i < n && found < 0; i++) {
		if (dev && strcmp(dev, ibv_get_device_name(list[i])))
			continue;
		ctx = ibv_open_device(list[i]);
		if (!ctx)
			continue;
		for (port = 1; !ibv_query_device(ctx, &da) &&
			       port <= da.phys_port_cnt && found < 0; port++) {
			if (ibv_query_port(ctx, port, &pa))
				continue;
			for (j = 0; j < pa.gid_tbl_len && found < 0; j++)
				if (!ibv_query_gid(ctx, port, j, &g) &&
				    !memcmp(g.raw, gid, 16))
					found = j;
		}
		ibv_close_device(ctx);
	}
	ibv_free_device_list(list);
	return found;
}

/* ---- the ping-pong ----------------------------------------------------- */

struct pp_ctx {
	const char *dev;		/* -d, or NULL */
	char dev_name[64];		/* the device rig picked */
	uint8_t gid[16];		/* ours */
	struct rig_nic *nic;
	struct rig_qp *qp;
	struct rig_region *region;	/* send from 0, receive at size */
	void *buf;
	size_t size;
	unsigned int iters;
	unsigned int rx_posted;
	int use_event;
};

/* Keeps up to PP_RX_DEPTH receives posted, never more than the run needs. */
static int pp_post_receives(struct pp_ctx *ctx, unsigned int taken)
{
	int ret;

	while (ctx->rx_posted < ctx->iters &&
	       ctx->rx_posted - taken < PP_RX_DEPTH) {
		ret = rig_qp_receive(ctx->qp, ctx->region, ctx->size,
				     ctx->size);
		if (ret)
			return pp_fail("rig_qp_receive", ret);
		ctx->rx_posted++;
	}
	return 0;
}

/* Connects to the peer, then posts the receives its first send needs. */
static int pp_connect(struct pp_ctx *ctx, const struct rig_endpoint *peer)
{
	static const uint8_t zero[16];
	int ret;

	/* ibv_rc_pingpong without -g sends no GID, and RoCE needs one */
	if (!memcmp(peer->gid, zero, sizeof(zero))) {
		fprintf(stderr,
			"The peer sent no GID: run ibv_rc_pingpong with -g %d\n",
			pp_gid_index(ctx->dev, ctx->gid));
		return 1;
	}
	ret = rig_qp_connect(ctx->qp, peer);
	if (ret)
		return pp_fail("rig_qp_connect", ret);
	return pp_post_receives(ctx, 0);
}

/* ---- the endpoint exchange, in ibv_rc_pingpong's wire format ---------- */

static int pp_read_all(int fd, void *buf, size_t len)
{
	char *p = buf;
	ssize_t n;

	while (len) {
		n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int pp_write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	ssize_t n;

	while (len) {
		n = send(fd, p, len, MSG_NOSIGNAL);	/* no SIGPIPE */
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* LID 0 (RoCE has none), then the QPN, the PSN, and the GID's 16 bytes in
 * order as 32 hex digits. */
static void pp_format(const struct rig_endpoint *e, char msg[PP_MSG_SIZE])
{
	int i, n;

	n = snprintf(msg, PP_MSG_SIZE, "%04x:%06x:%06x:", 0, e->qp, e->psn);
	for (i = 0; i < 16; i++)
		n += snprintf(msg + n, PP_MSG_SIZE - (size_t)n, "%02x",
			      e->gid[i]);
}

static int pp_hex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Reads a peer's message (untrusted); the MAC is not on this wire, and
 * rig_qp_connect() does not need it. Returns 0 or -1. */
static int pp_parse(char msg[PP_MSG_SIZE], struct rig_endpoint *e,
		    unsigned int *lid)
{
	unsigned int qpn, psn;
	char gid[33];
	int i, hi, lo;

	msg[PP_MSG_SIZE - 1] = '\0';
	if (sscanf(msg, "%x:%x:%x:%32s", lid, &qpn, &psn, gid) != 4 ||
	    strlen(gid) != 32)
		return -1;
	memset(e, 0, sizeof(*e));
	e->qp = qpn;
	e->psn = psn;
	for (i = 0; i < 16; i++) {
		hi = pp_hex(gid[2 * i]);
		lo = pp_hex(gid[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -1;
		e->gid[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static int pp_client_socket(const char *host, unsigned int port)
{
	struct addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
	};
	struct addrinfo *res, *t;
	char service[8];
	int fd = -1, ret;

	snprintf(service, sizeof(service), "%u", port);
	ret = getaddrinfo(host, service, &hints, &res);
	if (ret) {
		fprintf(stderr, "%s for %s:%u\n", gai_strerror(ret), host,
			port);
		return -1;
	}
	for (t = res; t; t = t->ai_next) {
		fd = socket(t->ai_family, t->ai_socktype, t->ai_protocol);
		if (fd < 0)
			continue;
		if (!connect(fd, t->ai_addr, t->ai_addrlen))
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		fprintf(stderr, "Couldn't connect to %s:%u\n", host, port);
	return fd;
}

/* Listens on @port and takes one connection. */
static int pp_server_socket(unsigned int port)
{
	struct addrinfo hints = {
		.ai_flags = AI_PASSIVE,
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
	};
	struct addrinfo *res, *t;
	char service[8];
	int fd = -1, conn, one = 1, ret;

	snprintf(service, sizeof(service), "%u", port);
	ret = getaddrinfo(NULL, service, &hints, &res);
	if (ret) {
		fprintf(stderr, "%s for port %u\n", gai_strerror(ret), port);
		return -1;
	}
	for (t = res; t; t = t->ai_next) {
		fd = socket(t->ai_family, t->ai_socktype, t->ai_protocol);
		if (fd < 0)
			continue;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (!bind(fd, t->ai_addr, t->ai_addrlen) && !listen(fd, 1))
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0) {
		fprintf(stderr, "Couldn't listen to port %u\n", port);
		return -1;
	}
	conn = accept(fd, NULL, NULL);
	close(fd);
	if (conn < 0)
		perror("accept");
	return conn;
}

/*
 * The client sends its endpoint, reads the server's and says "done". It
 * connects afterwards, as ibv_rc_pingpong does: the server answers only
 * once the client's first message has come.
 */
static int pp_client_exchange(const struct pp_opts *o,
			      const struct rig_endpoint *self,
			      struct rig_endpoint *peer, unsigned int *lid)
{
	char msg[PP_MSG_SIZE];
	int fd, ret = -1;

	fd = pp_client_socket(o->server, o->port);
	if (fd < 0)
		return -1;
	pp_format(self, msg);
	if (pp_write_all(fd, msg, sizeof(msg)) ||
	    pp_read_all(fd, msg, sizeof(msg)) ||
	    pp_write_all(fd, PP_DONE, sizeof(PP_DONE))) {
		fprintf(stderr, "Couldn't exchange addresses with %s\n",
			o->server);
		goto out;
	}
	ret = pp_parse(msg, peer, lid);
	if (ret)
		fprintf(stderr, "Bad address from %s\n", o->server);
out:
	close(fd);
	return ret;
}

/*
 * The server reads the client's endpoint, connects and posts its receives
 * (the client sends as soon as it has the answer), answers, then waits
 * for the client's "done".
 */
static int pp_server_exchange(const struct pp_opts *o, struct pp_ctx *ctx,
			      const struct rig_endpoint *self,
			      struct rig_endpoint *peer, unsigned int *lid)
{
	char msg[PP_MSG_SIZE];
	char done[sizeof(PP_DONE)];
	int fd, ret = -1;

	fd = pp_server_socket(o->port);
	if (fd < 0)
		return -1;
	if (pp_read_all(fd, msg, sizeof(msg))) {
		fprintf(stderr, "Couldn't read remote address\n");
		goto out;
	}
	if (pp_parse(msg, peer, lid)) {
		fprintf(stderr, "Bad remote address\n");
		goto out;
	}
	if (pp_connect(ctx, peer))
		goto out;
	pp_format(self, msg);
	if (pp_write_all(fd, msg, sizeof(msg)) ||
	    pp_read_all(fd, done, sizeof(done)) ||
	    memcmp(done, PP_DONE, sizeof(PP_DONE))) {
		fprintf(stderr, "Couldn't send/recv local address\n");
		goto out;
	}
	ret = 0;
out:
	close(fd);
	return ret;
}

static void pp_print_address(const char *which, unsigned int lid,
			     const struct rig_endpoint *e)
{
	char gid[INET6_ADDRSTRLEN];

	inet_ntop(AF_INET6, e->gid, gid, sizeof(gid));
	printf("  %s LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n",
	       which, lid, e->qp, e->psn, gid);
}

/*
 * Takes the completion of the oldest entry of @side: spins on the inline
 * rig_qp_poll(), applying the NIC's async events now and then, or sleeps
 * in rig_qp_wait() with -e. Returns 0, or 1 once it said what failed.
 */
static int pp_take(struct pp_ctx *ctx, enum rig_side side)
{
	const char *call = ctx->use_event ? "rig_qp_wait" : "rig_qp_poll";
	struct rig_completion c;
	unsigned int spins = 0;
	int ret;

	for (;;) {
		if (ctx->use_event)
			ret = rig_qp_wait(ctx->qp, side, PP_WAIT_US, &c);
		else
			ret = rig_qp_poll(ctx->qp, side, &c);
		if (ret == 1)
			break;
		if (ret < 0)
			return pp_fail(call, ret);
		if (!ctx->use_event && !(++spins & PP_EVENTS_EVERY)) {
			ret = rig_nic_events(ctx->nic);
			if (ret < 0)
				return pp_fail("rig_nic_events", ret);
		}
	}
	if (c.error) {
		fprintf(stderr, "%s: %s failed: %s (%s)\n", call,
			side == RIG_SEND ? "send" : "receive",
			strerror(-c.error), c.why);
		return 1;
	}
	return 0;
}

/*
 * ibv_rc_pingpong's pattern: the client sends first; each side sends its
 * next message once its last send has completed and the peer's message
 * has come. @rtt gets each iteration's round trip in ns (0 if unmeasured).
 */
static int pp_run(struct pp_ctx *ctx, int client, uint64_t *rtt,
		  uint64_t *elapsed)
{
	uint64_t start, sent = 0, now;
	unsigned int i;
	int ret;

	/*
	 * Each side takes the completion of its own send only after the
	 * peer's next message: by then the send is long acknowledged, so a
	 * waiting side sleeps once per exchange, for the message, as
	 * ibv_rc_pingpong does on its one CQ.
	 */
	start = pp_now_ns();
	for (i = 0; i < ctx->iters; i++) {
		if (client) {
			sent = pp_now_ns();
			ret = rig_qp_send(ctx->qp, ctx->region, 0, ctx->size);
			if (ret)
				return pp_fail("rig_qp_send", ret);
		}
		if (pp_take(ctx, RIG_RECEIVE))
			return 1;
		now = pp_now_ns();
		rtt[i] = (client || i) ? now - sent : 0;
		if (pp_post_receives(ctx, i + 1))
			return 1;
		if (client || i) {
			if (pp_take(ctx, RIG_SEND))
				return 1;
		}
		if (!client) {
			sent = pp_now_ns();
			ret = rig_qp_send(ctx->qp, ctx->region, 0, ctx->size);
			if (ret)
				return pp_fail("rig_qp_send", ret);
		}
	}
	if (!client && pp_take(ctx, RIG_SEND))
		return 1;
	*elapsed = pp_now_ns() - start;
	return 0;
}

static int pp_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The nearest-rank percentile @permille of @n sorted values, in usec. */
static double pp_percentile(const uint64_t *v, size_t n, unsigned int permille)
{
	size_t k = (n * permille + 999) / 1000;

	return v[k ? k - 1 : 0] / 1000.0;
}

/* perftest's latency figures (ib_send_lat's columns and JSON keys), of
 * the half round trips, in usec. */
struct pp_lat {
	size_t n;
	double t_min, t_max, t_typical, t_avg, t_stdev, p99, p999;
};

static void pp_write_json(const struct pp_ctx *ctx, const char *path,
			  const struct pp_lat *l)
{
	FILE *f = fopen(path, "w");

	if (!f) {
		fprintf(stderr, "Couldn't open %s: %s\n", path, strerror(errno));
		return;
	}
	/* perftest's shape: "test_info", then "results" with its keys */
	fprintf(f, "{\n\"test_info\": {\n\"test\": \"Send_Latency_Test\",\n"
		"\"Dual_port\": \"OFF\",\n\"Device\": \"%s\",\n"
		"\"Number_of_qps\": 1,\n\"Transport_type\": \"IB\",\n"
		"\"Connection_type\": \"RC\",\n\"Using_SRQ\": \"OFF\",\n"
		"\"RX_depth\": %d,\n\"Implementation\": \"rig\"\n},\n",
		ctx->dev_name, PP_RX_DEPTH);
	fprintf(f, "\"results\": {\n\"MsgSize\": %zu,\n\"n_iterations\": %zu,\n"
		"\"t_min\": %.2f,\n\"t_max\": %.2f,\n\"t_typical\": %.2f,\n"
		"\"t_avg\": %.2f,\n\"t_stdev\": %.2f,\n\"percentile_99\": %.2f,\n"
		"\"percentile_99.9\": %.2f\n}\n}\n",
		ctx->size, l->n, l->t_min, l->t_max, l->t_typical, l->t_avg,
		l->t_stdev, l->p99, l->p999);
	if (fclose(f))
		fprintf(stderr, "Couldn't write %s: %s\n", path, strerror(errno));
}

/* Prints the half round trips of the iterations after the warm-up, in
 * ib_send_lat's columns; with --out_json, writes them as it does. */
static void pp_print_latency(const struct pp_ctx *ctx, uint64_t *rtt,
			     const char *json)
{
	unsigned int warmup = ctx->iters / 10, i;
	struct pp_lat l = { 0 };
	double sum = 0, var = 0;
	size_t n = 0;

	if (warmup > PP_WARMUP_MAX)
		warmup = PP_WARMUP_MAX;
	for (i = warmup; i < ctx->iters; i++)
		if (rtt[i])
			rtt[n++] = rtt[i] / 2;	/* half the round trip */
	if (!n)
		return;
	qsort(rtt, n, sizeof(*rtt), pp_cmp_u64);
	for (i = 0; i < n; i++)
		sum += rtt[i] / 1000.0;
	l.n = n;
	l.t_avg = sum / n;
	for (i = 0; i < n; i++)
		var += (rtt[i] / 1000.0 - l.t_avg) * (rtt[i] / 1000.0 - l.t_avg);
	l.t_stdev = sqrt(var / n);
	l.t_min = rtt[0] / 1000.0;
	l.t_max = rtt[n - 1] / 1000.0;
	l.t_typical = pp_percentile(rtt, n, 500);	/* perftest's median */
	l.p99 = pp_percentile(rtt, n, 990);
	l.p999 = pp_percentile(rtt, n, 999);
	printf("latency: half round trip, %u warm-up iterations left out\n",
	       warmup);
	printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec] \n");
	printf(" %-7zu %-11zu    %-11.2f    %-11.2f  %-15.2f    %-11.2f    %-13.2f   %-20.2f   %-.2f\n",
	       ctx->size, n, l.t_min, l.t_max, l.t_typical, l.t_avg, l.t_stdev,
	       l.p99, l.p999);
	if (json)
		pp_write_json(ctx, json, &l);
}

static int pp_parse_opts(int argc, char *argv[], struct pp_opts *o)
{
	static const struct option long_options[] = {
		{ .name = "port", .has_arg = 1, .val = 'p' },
		{ .name = "ib-dev", .has_arg = 1, .val = 'd' },
		{ .name = "size", .has_arg = 1, .val = 's' },
		{ .name = "iters", .has_arg = 1, .val = 'n' },
		{ .name = "events", .has_arg = 0, .val = 'e' },
		{ .name = "gid-idx", .has_arg = 1, .val = 'g' },
		{ .name = "out_json", .has_arg = 0, .val = 'J' },
		{ .name = "out_json_file", .has_arg = 1, .val = 'F' },
		{ 0 }
	};
	unsigned long long v;
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "p:d:s:n:eg:", long_options,
				NULL)) != -1) {
		if (c == 'd') {
			o->dev = optarg;
			continue;
		}
		if (c == 'e') {
			o->use_event = 1;
			continue;
		}
		/* perftest's: --out_json writes perftest_out.json, unless
		 * --out_json_file names another file */
		if (c == 'J' || c == 'F') {
			o->json = c == 'F' ? optarg : o->json ? o->json : "perftest_out.json";
			continue;
		}
		if (c != 'p' && c != 's' && c != 'n' && c != 'g')
			return -1;
		errno = 0;
		v = strtoull(optarg, &end, 0);
		if (errno || end == optarg || *end || optarg[0] == '-')
			return -1;
		if (c == 'p' && v <= 65535)
			o->port = (unsigned int)v;
		else if (c == 's' && v <= RIG_MESSAGE_MAX)
			o->size = (size_t)v;
		else if (c == 'n' && v >= 1 && v <= 1000000000)
			o->iters = (unsigned int)v;
		else if (c == 'g' && v <= 65535)
			o->gidx = (int)v;
		else
			return -1;
	}
	if (optind == argc - 1)
		o->server = argv[optind];
	else if (optind < argc)
		return -1;
	return 0;
}

int main(int argc, char *argv[])
{
	struct pp_opts o = {
		.port = 18515, .size = 4096, .iters = 1000, .gidx = -1,
	};
	struct pp_ctx ctx = { 0 };
	struct rig_endpoint self, peer;
	struct rig_nic_info info;
	unsigned int lid = 0;
	uint64_t *rtt, elapsed = 0;
	size_t page, len;
	double usec;
	int client, ret, status = 1;

	if (pp_parse_opts(argc, argv, &o)) {
		pp_usage(argv[0]);
		return 1;
	}
	/* the address lines come out before the waiting, even into a pipe */
	setvbuf(stdout, NULL, _IOLBF, 0);
	client = o.server != NULL;
	ctx.dev = o.dev;
	ctx.size = o.size;
	ctx.iters = o.iters;
	ctx.use_event = o.use_event;

	rtt = calloc(o.iters, sizeof(*rtt));
	page = (size_t)sysconf(_SC_PAGESIZE);
	len = o.size ? (2 * o.size + page - 1) / page * page : page;
	if (!rtt || posix_memalign(&ctx.buf, page, len)) {
		fprintf(stderr, "Couldn't allocate work buf.\n");
		goto out_free;
	}
	memset(ctx.buf, 0x7b, len);

	ret = rig_nic_open(o.dev, &ctx.nic);
	if (ret) {
		pp_fail("rig_nic_open", ret);
		goto out_free;
	}
	info.size = sizeof(info);
	if (!rig_nic_query(ctx.nic, &info))
		snprintf(ctx.dev_name, sizeof(ctx.dev_name), "%s", info.device);
	ret = rig_region_register(ctx.nic, ctx.buf, len, &ctx.region);
	if (ret) {
		pp_fail("rig_region_register", ret);
		goto out_close_nic;
	}
	ret = rig_qp_make(ctx.nic, &ctx.qp);
	if (ret) {
		pp_fail("rig_qp_make", ret);
		goto out_deregister;
	}
	rig_qp_endpoint(ctx.qp, &self);
	memcpy(ctx.gid, self.gid, sizeof(ctx.gid));
	if (o.gidx >= 0 && pp_gid_index(o.dev, self.gid) != o.gidx) {
		fprintf(stderr,
			"-g %d: rig uses the NIC's RoCE v2 GID, at index %d\n",
			o.gidx, pp_gid_index(o.dev, self.gid));
		goto out_destroy_qp;
	}
	pp_print_address("local address: ", 0, &self);

	if (client)
		ret = pp_client_exchange(&o, &self, &peer, &lid);
	else
		ret = pp_server_exchange(&o, &ctx, &self, &peer, &lid);
	if (ret)
		goto out_destroy_qp;
	pp_print_address("remote address:", lid, &peer);
	if (client && pp_connect(&ctx, &peer))
		goto out_destroy_qp;

	if (pp_run(&ctx, client, rtt, &elapsed))
		goto out_destroy_qp;

	usec = elapsed / 1000.0;
	printf("%llu bytes in %.2f seconds = %.2f Mbit/sec\n",
	       (unsigned long long)o.size * o.iters * 2, usec / 1000000.,
	       (double)o.size * o.iters * 2 * 8. / usec);
	printf("%u iters in %.2f seconds = %.2f usec/iter\n",
	       o.iters, usec / 1000000., usec / o.iters);
	pp_print_latency(&ctx, rtt, o.json);
	status = 0;

out_destroy_qp:
	ret = rig_qp_destroy(ctx.qp);
	if (ret)
		status = pp_fail("rig_qp_destroy", ret);
out_deregister:
	ret = rig_region_deregister(ctx.region);
	if (ret)
		status = pp_fail("rig_region_deregister", ret);
out_close_nic:
	ret = rig_nic_close(ctx.nic);
	if (ret)
		status = pp_fail("rig_nic_close", ret);
out_free:
	free(ctx.buf);
	free(rtt);
	return status;
}
