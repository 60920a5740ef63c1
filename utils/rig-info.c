/* SPDX-License-Identifier: MIT */
/*
 * rig-info: which verbs devices and ports this machine has, which rig
 * would use and why (rig-info(1)).
 *
 *	rig-info [-d DEV] [--json]
 *
 * What the devices offer comes from libibverbs (ibv_query_device,
 * ibv_query_port, ibv_query_gid_table); what rig makes of them comes from
 * the library itself: rig_nic_open() of each device, then rig_nic_query()
 * for the port and GID it picked, or rig_errmsg() for why it refused, and
 * rig_nic_qp_pinned() for what each of its queue pairs pins. So the tool
 * never guesses rig's choice: it asks for it. Exits 0 when rig can use
 * the device asked for (with -d) or some device, else 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <infiniband/verbs.h>
#include <rig/rig.h>

struct dev {
	const char *name;
	struct ibv_device_attr attr;
	int attr_ok;
	int comp_vectors;		/* the context's num_comp_vectors */
	struct ibv_port_attr port[8];	/* ports 1..8 shown */
	int nports;
	struct ibv_gid_entry *gid;
	ssize_t ngid;
	int usable;			/* rig_nic_open() took it */
	struct rig_nic_info info;	/* when usable */
	int64_t pinned;			/* when usable: rig_nic_qp_pinned() at the full depth */
	int64_t pinned_depth;		/* and at the NIC's depth (info.depth) */
	char why[1024];			/* when not */
};

static int json;
static struct rlimit memlock;	/* RLIMIT_MEMLOCK; both RLIM_INFINITY if unknown */

static void gid_str(const uint8_t raw[16], char *out, size_t len)
{
	if (!inet_ntop(AF_INET6, raw, out, (socklen_t)len))
		snprintf(out, len, "?");
}

static const char *gid_type(uint32_t type)
{
	switch (type) {
	case IBV_GID_TYPE_IB: return "IB";
	case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
	case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
	default: return "?";
	}
}

/* An MTU in bytes, as ibv_devinfo says it; 0 for none. */
static int mtu_bytes(enum ibv_mtu mtu)
{
	return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128 << mtu : 0;
}

/* As rig_nic_open's reasons say it. */
static const char *port_state(enum ibv_port_state state)
{
	switch (state) {
	case IBV_PORT_DOWN: return "DOWN";
	case IBV_PORT_INIT: return "INIT";
	case IBV_PORT_ARMED: return "ARMED";
	case IBV_PORT_ACTIVE: return "ACTIVE";
	case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
	default: return "?";
	}
}

static const char *link_layer(uint8_t ll)
{
	switch (ll) {
	case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
	case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
	default: return "unspecified";
	}
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

/* What libibverbs says of @d, and what rig makes of it. */
static void probe(struct ibv_device *ibdev, struct dev *d)
{
	struct ibv_context *ctx;
	struct rig_nic *nic;
	size_t len = 0;
	int p, ret;

	d->name = ibv_get_device_name(ibdev);
	ctx = ibv_open_device(ibdev);
	if (ctx) {
		d->attr_ok = !ibv_query_device(ctx, &d->attr);
		d->comp_vectors = ctx->num_comp_vectors;
		d->nports = d->attr_ok ? d->attr.phys_port_cnt : 0;
		if (d->nports > 8)
			d->nports = 8;
		for (p = 0; p < d->nports; p++) {
			if (ibv_query_port(ctx, p + 1, &d->port[p]))
				memset(&d->port[p], 0, sizeof(d->port[p]));
			len += d->port[p].gid_tbl_len;
		}
		if (len && (d->gid = calloc(len, sizeof(*d->gid))))
			d->ngid = ibv_query_gid_table(ctx, d->gid, len, 0);
		if (d->ngid < 0)
			d->ngid = 0;
		ibv_close_device(ctx);
	}
	ret = rig_nic_open(d->name, &nic);
	if (ret) {
		const char *why = rig_errmsg();
		size_t len = strlen(d->name);

		/* "rxe0: port 1 is DOWN": the name is said already */
		if (!strncmp(why, d->name, len) && !strncmp(why + len, ": ", 2))
			why += len + 2;
		snprintf(d->why, sizeof(d->why), "%s", why);
		return;
	}
	d->info.size = sizeof(d->info);
	if (!rig_nic_query(nic, &d->info))
		d->usable = 1;
	else
		snprintf(d->why, sizeof(d->why), "%s", rig_errmsg());
	if (!d->info.depth)
		d->info.depth = RIG_RING_ENTRIES;
	/* What a queue pair pins at the NIC's depth (RIG_QP_DEPTH), and at
	 * the full depth: the NIC set to it for the asking. */
	d->pinned = d->pinned_depth = rig_nic_qp_pinned(nic);
	if (d->info.depth != RIG_RING_ENTRIES && !rig_nic_set_depth(nic, RIG_RING_ENTRIES))
		d->pinned = rig_nic_qp_pinned(nic);
	rig_nic_close(nic);
}

/*
 * How many of rig's queue pairs @d takes: max_qp, or fewer where each
 * pins its queues and RLIMIT_MEMLOCK's soft limit allows fewer (then
 * *by_memlock is set). Regions pinned by the same program count against
 * that limit too.
 */
static long long qp_room(const struct dev *d, int64_t pinned, int *by_memlock)
{
	unsigned long long n;

	*by_memlock = 0;
	if (pinned <= 0 || memlock.rlim_cur == RLIM_INFINITY)
		return d->attr.max_qp;
	n = (unsigned long long)memlock.rlim_cur / (unsigned long long)pinned;
	if (n >= (unsigned long long)d->attr.max_qp)
		return d->attr.max_qp;
	*by_memlock = 1;
	return (long long)n;
}

/* One line of what @pinned bytes a queue pair allow, under @label. */
static void print_room(const struct dev *d, const char *label, int64_t pinned)
{
	int by_memlock;
	long long n = qp_room(d, pinned, &by_memlock);

	if (!pinned)
		printf("  %s: %s pins no queue memory, so RLIMIT_MEMLOCK does not bound them; max_qp does: %lld\n",
		       label, d->info.soft_roce ? "Soft-RoCE" : "the device", n);
	else if (by_memlock)
		printf("  %s: each pins about %lld KiB, so RLIMIT_MEMLOCK (%llu KiB) allows %lld, fewer with regions\n",
		       label, (long long)pinned / 1024,
		       (unsigned long long)memlock.rlim_cur / 1024, n);
	else
		printf("  %s: each pins about %lld KiB; RLIMIT_MEMLOCK allows more than max_qp, which bounds them: %lld\n",
		       label, (long long)pinned / 1024, n);
}

static void print_text(const struct dev *d)
{
	char gid[INET6_ADDRSTRLEN], ifname[IF_NAMESIZE];
	const struct ibv_gid_entry *e;
	int p;
	ssize_t i;

	if (d->usable)
		printf("%s: rig uses port %u, GID index %u%s\n", d->name, d->info.port,
		       d->info.gid_index, d->info.soft_roce ? " (Soft-RoCE)" : "");
	else
		printf("%s: rig does not use it: %s\n", d->name, d->why);
	if (d->attr_ok) {
		/* A queue pair's send queue and send CQ: its ring's entries
		 * and a liveness probe's (rig_nic_open(3)). */
		printf("  max_qp_wr %d, max_cqe %d (rig needs %d)\n", d->attr.max_qp_wr,
		       d->attr.max_cqe, RIG_RING_ENTRIES + 1);
		printf("  max_qp %d, max_cq %d, max_mr %d, %d completion vector(s)\n",
		       d->attr.max_qp, d->attr.max_cq, d->attr.max_mr, d->comp_vectors);
		printf("  vendor id 0x%x, %d port(s)\n", d->attr.vendor_id, d->attr.phys_port_cnt);
	}
	if (d->usable)
		printf("  message limit %u bytes (2^31 or the port's max_msg_sz), retry count %u%s\n",
		       d->info.msg_max, d->info.retry_cnt,
		       d->info.soft_roce ? " (Soft-RoCE retries forever at 7)" : "");
	if (d->usable && d->attr_ok) {
		char label[96];

		/* A NIC set shallower (RIG_QP_DEPTH, rig(7) Q4) pins less
		 * per queue pair: both figures, unless it pins none. */
		if (d->info.depth == RIG_RING_ENTRIES || !d->pinned) {
			print_room(d, "queue pairs", d->pinned);
		} else {
			snprintf(label, sizeof(label), "queue pairs at the full depth, %d",
				 RIG_RING_ENTRIES);
			print_room(d, label, d->pinned);
			snprintf(label, sizeof(label), "queue pairs at depth %u (RIG_QP_DEPTH)",
				 d->info.depth);
			print_room(d, label, d->pinned_depth);
		}
	}
	for (p = 0; p < d->nports; p++) {
		const struct ibv_port_attr *pa = &d->port[p];

		printf("  port %d: %s, %s, max_msg_sz %u, gid_tbl_len %d\n", p + 1,
		       port_state(pa->state), link_layer(pa->link_layer),
		       pa->max_msg_sz, pa->gid_tbl_len);
		printf("    active MTU %d, max MTU %d: rig's queue pairs send in packets of the active MTU, what this host offers; a peer whose link carries a smaller MTU drops the larger packets, and messages above it fail\n",
		       mtu_bytes(pa->active_mtu), mtu_bytes(pa->max_mtu));
		for (i = 0; i < d->ngid; i++) {
			e = &d->gid[i];
			if (e->port_num != (uint32_t)p + 1)
				continue;
			gid_str(e->gid.raw, gid, sizeof(gid));
			if (!if_indextoname(e->ndev_ifindex, ifname))
				snprintf(ifname, sizeof(ifname), "-");
			printf("    GID %-3u %-40s %-8s %s%s\n", e->gid_index, gid,
			       gid_type(e->gid_type), ifname,
			       d->usable && d->info.port == (uint32_t)p + 1 &&
			       d->info.gid_index == e->gid_index ? "  <- rig" : "");
		}
	}
}

static void print_json(const struct dev *d)
{
	char gid[INET6_ADDRSTRLEN], ifname[IF_NAMESIZE];
	const struct ibv_gid_entry *e;
	int p, first;
	ssize_t i;

	printf("    {\n      \"name\": ");
	json_str(d->name);
	printf(",\n      \"usable\": %s,\n      \"reason\": ", d->usable ? "true" : "false");
	if (d->usable)
		printf("null");
	else
		json_str(d->why);
	if (d->attr_ok)
		printf(",\n      \"vendor_id\": %u,\n      \"max_qp_wr\": %d,\n      \"max_cqe\": %d,\n"
		       "      \"max_qp\": %d,\n      \"max_cq\": %d,\n      \"max_mr\": %d,\n"
		       "      \"num_comp_vectors\": %d",
		       d->attr.vendor_id, d->attr.max_qp_wr, d->attr.max_cqe, d->attr.max_qp,
		       d->attr.max_cq, d->attr.max_mr, d->comp_vectors);
	printf(",\n      \"rig_ring_entries\": %d", RIG_RING_ENTRIES);
	if (d->usable) {
		gid_str(d->info.gid, gid, sizeof(gid));
		printf(",\n      \"port\": %u,\n      \"gid_index\": %u,\n      \"gid\": \"%s\",\n"
		       "      \"mac\": \"%02x:%02x:%02x:%02x:%02x:%02x\",\n"
		       "      \"msg_max\": %u,\n      \"retry_cnt\": %u,\n      \"soft_roce\": %s",
		       d->info.port, d->info.gid_index, gid, d->info.mac[0], d->info.mac[1],
		       d->info.mac[2], d->info.mac[3], d->info.mac[4], d->info.mac[5],
		       d->info.msg_max, d->info.retry_cnt, d->info.soft_roce ? "true" : "false");
	}
	if (d->usable && d->attr_ok) {
		int by_memlock, at_memlock;
		long long n = qp_room(d, d->pinned, &by_memlock);
		long long at = qp_room(d, d->pinned_depth, &at_memlock);

		printf(",\n      \"qp_pinned\": %lld,\n      \"qps\": %lld,\n      \"qps_bound\": \"%s\"",
		       (long long)d->pinned, n, by_memlock ? "memlock" : "max_qp");
		printf(",\n      \"depth\": %u,\n      \"qp_pinned_at_depth\": %lld,\n"
		       "      \"qps_at_depth\": %lld,\n      \"qps_at_depth_bound\": \"%s\"",
		       d->info.depth, (long long)d->pinned_depth, at,
		       at_memlock ? "memlock" : "max_qp");
	}
	printf(",\n      \"ports\": [");
	for (p = 0; p < d->nports; p++) {
		const struct ibv_port_attr *pa = &d->port[p];

		printf("%s\n        {\n          \"port\": %d,\n          \"state\": \"%s\",\n"
		       "          \"link_layer\": \"%s\",\n          \"max_msg_sz\": %u,\n"
		       "          \"active_mtu\": %d,\n          \"max_mtu\": %d,\n"
		       "          \"gids\": [", p ? "," : "", p + 1,
		       port_state(pa->state), link_layer(pa->link_layer), pa->max_msg_sz,
		       mtu_bytes(pa->active_mtu), mtu_bytes(pa->max_mtu));
		first = 1;
		for (i = 0; i < d->ngid; i++) {
			e = &d->gid[i];
			if (e->port_num != (uint32_t)p + 1)
				continue;
			gid_str(e->gid.raw, gid, sizeof(gid));
			if (!if_indextoname(e->ndev_ifindex, ifname))
				ifname[0] = 0;
			printf("%s\n            { \"index\": %u, \"gid\": \"%s\", \"type\": \"%s\", "
			       "\"netdev\": ", first ? "" : ",", e->gid_index, gid,
			       gid_type(e->gid_type));
			json_str(ifname);
			printf(", \"rig\": %s }",
			       d->usable && d->info.port == (uint32_t)p + 1 &&
			       d->info.gid_index == e->gid_index ? "true" : "false");
			first = 0;
		}
		printf("%s]\n        }", first ? "" : "\n          ");
	}
	printf("%s]\n    }", d->nports ? "\n      " : "");
}

/* A limit of RLIMIT_MEMLOCK: bytes, or unlimited. */
static void limit_str(rlim_t v, char *out, size_t len)
{
	if (v == RLIM_INFINITY)
		snprintf(out, len, json ? "\"unlimited\"" : "unlimited");
	else
		snprintf(out, len, json ? "%llu" : "%llu bytes", (unsigned long long)v);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: rig-info [-d DEV] [--json]\n"
		"  -d, --ib-dev=DEV  only this device\n"
		"  -j, --json        JSON on stdout\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "ib-dev", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 }
	};
	struct ibv_device **list;
	const char *only = NULL;
	struct rig_nic_info info = { .size = sizeof(info) };
	struct rig_nic *nic;
	char soft[64], hard[64], pick[1200];
	int n = 0, i, c, shown = 0, usable = 0, ret;
	struct dev *devs;

	while ((c = getopt_long(argc, argv, "d:jh", opts, NULL)) != -1) {
		switch (c) {
		case 'd': only = optarg; break;
		case 'j': json = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return 2;
	}
	/* getrlimit fails only for an unknown resource: never here. */
	if (getrlimit(RLIMIT_MEMLOCK, &memlock))
		memlock.rlim_cur = memlock.rlim_max = RLIM_INFINITY;
	list = ibv_get_device_list(&n);
	if (!list || !n) {
		fprintf(stderr, "rig-info: no verbs device on this machine\n");
		return 1;
	}
	devs = calloc((size_t)n, sizeof(*devs));
	if (!devs) {
		fprintf(stderr, "rig-info: out of memory\n");
		return 1;
	}
	for (i = 0; i < n; i++) {
		if (only && strcmp(only, ibv_get_device_name(list[i])))
			continue;
		probe(list[i], &devs[i]);
		usable += devs[i].usable;
	}
	/* What rig_nic_open(NULL) would pick, or why it picks nothing. */
	ret = only ? 0 : rig_nic_open(NULL, &nic);
	if (!only && !ret && !rig_nic_query(nic, &info))
		snprintf(pick, sizeof(pick), "%s port %u GID index %u", info.device,
			 info.port, info.gid_index);
	else if (!only)
		snprintf(pick, sizeof(pick), "%s", rig_errmsg());
	if (!only && !ret)
		rig_nic_close(nic);

	limit_str(memlock.rlim_cur, soft, sizeof(soft));
	limit_str(memlock.rlim_max, hard, sizeof(hard));
	if (json)
		printf("{\n  \"memlock\": %s,\n  \"memlock_hard\": %s,\n  \"devices\": [",
		       soft, hard);
	for (i = 0; i < n; i++) {
		if (!devs[i].name)
			continue;
		if (json) {
			printf("%s\n", shown ? "," : "");
			print_json(&devs[i]);
		} else {
			print_text(&devs[i]);
		}
		shown++;
	}
	if (json) {
		printf("%s]", shown ? "\n  " : "");
		if (!only) {
			printf(",\n  \"default\": ");
			if (!ret)
				printf("{ \"device\": \"%s\", \"port\": %u, \"gid_index\": %u }",
				       info.device, info.port, info.gid_index);
			else
				printf("null");
			printf(",\n  \"default_reason\": ");
			if (ret)
				json_str(pick);
			else
				printf("null");
		}
		printf("\n}\n");
	} else {
		if (!only)
			printf("rig_nic_open(NULL): %s\n", pick);
		printf("RLIMIT_MEMLOCK: soft %s, hard %s%s\n", soft, hard,
		       memlock.rlim_cur != RLIM_INFINITY ?
		       " (regions, and on hardware queue pairs, beyond the soft limit fail with ENOMEM; ulimit -l)" : "");
	}
	if (only && !shown) {
		fprintf(stderr, "rig-info: no verbs device named %s\n", only);
		return 1;
	}
	for (i = 0; i < n; i++)
		free(devs[i].gid);
	free(devs);
	ibv_free_device_list(list);
	return usable ? 0 : 1;
}
