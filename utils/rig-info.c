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
 * for the port and GID it picked, or rig_errmsg() for why it refused. So
 * the tool never guesses rig's choice: it asks for it. Exits 0 when rig
 * can use the device asked for (with -d) or some device, else 1.
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
	struct ibv_port_attr port[8];	/* ports 1..8 shown */
	int nports;
	struct ibv_gid_entry *gid;
	ssize_t ngid;
	int usable;			/* rig_nic_open() took it */
	struct rig_nic_info info;	/* when usable */
	char why[1024];			/* when not */
};

static int json;

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
	rig_nic_close(nic);
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
		printf("  max_qp_wr %d, max_cqe %d (rig needs %d)\n", d->attr.max_qp_wr,
		       d->attr.max_cqe, RIG_RING_ENTRIES);
		printf("  vendor id 0x%x, %d port(s)\n", d->attr.vendor_id, d->attr.phys_port_cnt);
	}
	if (d->usable)
		printf("  message limit %u bytes (2^31 or the port's max_msg_sz), retry count %u%s\n",
		       d->info.msg_max, d->info.retry_cnt,
		       d->info.soft_roce ? " (Soft-RoCE retries forever at 7)" : "");
	for (p = 0; p < d->nports; p++) {
		const struct ibv_port_attr *pa = &d->port[p];

		printf("  port %d: %s, %s, max_msg_sz %u, gid_tbl_len %d\n", p + 1,
		       port_state(pa->state), link_layer(pa->link_layer),
		       pa->max_msg_sz, pa->gid_tbl_len);
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
		printf(",\n      \"vendor_id\": %u,\n      \"max_qp_wr\": %d,\n      \"max_cqe\": %d",
		       d->attr.vendor_id, d->attr.max_qp_wr, d->attr.max_cqe);
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
	printf(",\n      \"ports\": [");
	for (p = 0; p < d->nports; p++) {
		const struct ibv_port_attr *pa = &d->port[p];

		printf("%s\n        {\n          \"port\": %d,\n          \"state\": \"%s\",\n"
		       "          \"link_layer\": \"%s\",\n          \"max_msg_sz\": %u,\n"
		       "          \"gids\": [", p ? "," : "", p + 1,
		       port_state(pa->state), link_layer(pa->link_layer), pa->max_msg_sz);
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

static void memlock(char *out, size_t len, int quoted)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_MEMLOCK, &rl))
		snprintf(out, len, quoted ? "null" : "unknown");
	else if (rl.rlim_cur == RLIM_INFINITY)
		snprintf(out, len, quoted ? "\"unlimited\"" : "unlimited");
	else
		snprintf(out, len, "%llu", (unsigned long long)rl.rlim_cur);
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
	char ml[64], pick[1200];
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

	memlock(ml, sizeof(ml), json);
	if (json)
		printf("{\n  \"memlock\": %s,\n  \"devices\": [", ml);
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
		printf("RLIMIT_MEMLOCK: %s%s\n", ml, strcmp(ml, "unlimited") ?
		       " bytes (regions beyond it fail with ENOMEM; ulimit -l)" : "");
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
