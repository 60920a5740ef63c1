/* SPDX-License-Identifier: MIT */
/*
 * Opening and closing a NIC, and the device quirks rig works around. A NIC
 * owns its loops (loop.c), its own loop first made here, and its regions;
 * closing it closes them.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

/*
 * rig's queue pair as the NIC makes it now (qp.c): a send queue and send
 * CQ of the depth and a liveness probe's request (RIG_PROBES_OUT), a
 * receive queue and receive CQ of the depth; RIG__QUEUE_DEPTH and
 * RIG_RING_ENTRIES at the full depth. pinned.c says what each provider
 * pins for them.
 */
RIG_EXPORT int64_t rig_nic_qp_pinned(const struct rig_nic *nic)
{
	uint32_t depth;

	if (!nic)
		return rig__fail(EINVAL, "rig_nic_qp_pinned: NULL argument");
	depth = __atomic_load_n(&nic->depth, __ATOMIC_RELAXED);
	return rig__qp_pinned(nic->vendor_id, depth + RIG_PROBES_OUT, depth,
			      depth + RIG_PROBES_OUT, depth);
}

/*
 * The one place that handles a device quirk of rig(7) M3. The IBTA makes
 * retry count 7 mean seven retries; Soft-RoCE (Linux 6.1, rxe_comp.c) never
 * decrements a count of 7, so a send to a dead peer would hang forever.
 * There 6 gives a failure after 7 x 67 ms. Soft-RoCE also counts RNR waits
 * against this budget, which caps them at the same ~470 ms.
 */
static uint8_t rig__nic_retry_cnt(const struct ibv_device_attr *attr)
{
	return attr->vendor_id == RIG_RXE_VENDOR_ID ? 6 : 7;
}

/*
 * The reads a queue pair of a local peer (rig(7) M4) has in flight, as
 * initiator (max_rd_atomic, RTS) and as responder (max_dest_rd_atomic,
 * RTR): one figure for both, the smaller of the device's two limits and
 * 16. The drivers do not agree on which limit bounds which side:
 *
 * - bnxt_re (Linux, drivers/infiniband/hw/bnxt_re/ib_verbs.c,
 *   bnxt_re_modify_qp) refuses a max_dest_rd_atomic over
 *   max_qp_init_rd_atom with -EINVAL, and caps max_rd_atomic at
 *   max_qp_rd_atom;
 * - mlx5 (Linux, drivers/infiniband/hw/mlx5/qp.c, mlx5_ib_modify_qp's
 *   rd-atomic check) refuses a max_rd_atomic over 1 << log_max_ra_res_qp
 *   and a max_dest_rd_atomic over 1 << log_max_ra_req_qp, which
 *   mlx5_ib_query_device (main.c) reports as max_qp_init_rd_atom and
 *   max_qp_rd_atom: the responder's depth against max_qp_rd_atom.
 *
 * Under the smaller of both, no driver refuses either side.
 */
static uint8_t read_depth(const struct ibv_device_attr *attr)
{
	int depth = 16;

	if (attr->max_qp_init_rd_atom < depth)
		depth = attr->max_qp_init_rd_atom;
	if (attr->max_qp_rd_atom < depth)
		depth = attr->max_qp_rd_atom;
	return (uint8_t)(depth < 0 ? 0 : depth);
}

static int is_ipv4_mapped(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = { [10] = 0xff, [11] = 0xff };

	return !memcmp(gid->raw, prefix, sizeof(prefix));
}

/* Of @n entries of the GID table, @port's RoCE v2 GID, an IPv4-mapped one
 * first (rdma_cm speaks IPv4), else the lowest index; NULL if none. */
static const struct ibv_gid_entry *pick_gid(const struct ibv_gid_entry *tbl,
					    int n, uint8_t port)
{
	const struct ibv_gid_entry *best = NULL;
	int i;

	for (i = 0; i < n; i++) {
		const struct ibv_gid_entry *e = &tbl[i];

		if (e->port_num != port || e->gid_type != IBV_GID_TYPE_ROCE_V2)
			continue;
		if (!best || (is_ipv4_mapped(&e->gid) && !is_ipv4_mapped(&best->gid)) ||
		    (is_ipv4_mapped(&e->gid) == is_ipv4_mapped(&best->gid) &&
		     e->gid_index < best->gid_index))
			best = e;
	}
	return best;
}

static void read_mac(uint32_t ifindex, uint8_t mac[6])
{
	struct ifreq ifr = { 0 };
	int fd;

	memset(mac, 0, 6);
	if (!if_indextoname(ifindex, ifr.ifr_name))
		return;
	fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return;
	if (!ioctl(fd, SIOCGIFHWADDR, &ifr))
		memcpy(mac, ifr.ifr_hwaddr.sa_data, 6);
	close(fd);
}

static const char *port_state(enum ibv_port_state state)
{
	switch (state) {
	case IBV_PORT_DOWN: return "DOWN";
	case IBV_PORT_INIT: return "INIT";
	case IBV_PORT_ARMED: return "ARMED";
	case IBV_PORT_ACTIVE: return "ACTIVE";
	case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
	default: return "in no known state";
	}
}

/*
 * Picks @nic's port and GID: the first port that is active on Ethernet
 * with a RoCE v2 GID. Reads every port's GIDs with one call. Returns 0, or
 * -ENODEV with each port's reason in rig_errmsg() ("port 1 is DOWN").
 */
static int pick_port(struct rig_nic *nic, const struct ibv_device_attr *attr,
		     struct ibv_port_attr *pattr, struct ibv_gid_entry *gid)
{
	const struct ibv_gid_entry *e = NULL;
	struct ibv_gid_entry *tbl = NULL;
	char why[512] = "";
	size_t len = 0, at = 0;
	ssize_t n = 0;
	uint8_t port;

	for (port = 1; port <= attr->phys_port_cnt; port++)
		if (!ibv_query_port(nic->ctx, port, pattr))
			len += pattr->gid_tbl_len;
	if (len) {
		tbl = calloc(len, sizeof(*tbl));
		if (!tbl)
			return rig__fail(ENOMEM, "rig_nic_open: out of memory");
		n = ibv_query_gid_table(nic->ctx, tbl, len, 0);
	}
	for (port = 1; port <= attr->phys_port_cnt; port++) {
		const char *sep = at ? ", " : "";
		int ret = ibv_query_port(nic->ctx, port, pattr);

		if (ret)
			at += snprintf(why + at, sizeof(why) - at, "%sport %u: ibv_query_port: %s",
				       sep, port, strerror(ret));
		else if (pattr->state != IBV_PORT_ACTIVE)
			at += snprintf(why + at, sizeof(why) - at, "%sport %u is %s", sep,
				       port, port_state(pattr->state));
		else if (pattr->link_layer != IBV_LINK_LAYER_ETHERNET)
			at += snprintf(why + at, sizeof(why) - at,
				       "%sport %u is InfiniBand, not Ethernet", sep, port);
		else if (n < 0)
			at += snprintf(why + at, sizeof(why) - at,
				       "%sibv_query_gid_table: %s", sep, strerror((int)-n));
		else if (!(e = pick_gid(tbl, (int)n, port)))
			at += snprintf(why + at, sizeof(why) - at,
				       "%sport %u has no RoCE v2 GID", sep, port);
		else
			break;
		if (at >= sizeof(why))
			at = sizeof(why) - 1;
	}
	if (e)
		*gid = *e;
	free(tbl);
	if (port > attr->phys_port_cnt)
		return rig__fail(ENODEV, "%s", at ? why : "no port");
	return 0;
}

/* Takes the device if it has an active RoCE v2 port; 0 or -errno, with
 * the reason in rig_errmsg(), after the device's name. */
static int nic_init(struct rig_nic *nic, struct ibv_device *dev)
{
	struct ibv_device_attr attr;
	struct ibv_port_attr pattr;
	struct ibv_gid_entry gid = { 0 };
	uint64_t msg_max;
	int ret;

	snprintf(nic->name, sizeof(nic->name), "%s", ibv_get_device_name(dev));
	nic->ctx = ibv_open_device(dev);
	if (!nic->ctx)
		return rig__fail(errno ? errno : ENODEV, "%s: ibv_open_device: %s",
				 nic->name, strerror(errno));
	ret = ibv_query_device(nic->ctx, &attr);
	if (ret) {
		ret = rig__fail_verbs(ret, nic, "ibv_query_device");
		goto out_close;
	}
	ret = pick_port(nic, &attr, &pattr, &gid);
	if (ret) {
		ret = rig__fail(-ret, "%s: %s", nic->name, rig_errmsg());
		goto out_close;
	}
	/* A queue pair's send queue and send CQ hold RIG__QUEUE_DEPTH, its
	 * ring's and a liveness probe's (qp.c): a device that takes fewer
	 * would open and then refuse every make. */
	if (attr.max_qp_wr < RIG__QUEUE_DEPTH) {
		ret = rig__fail(ENODEV, "%s: takes %d work requests per queue (max_qp_wr), rig needs %d",
				nic->name, attr.max_qp_wr, RIG__QUEUE_DEPTH);
		goto out_close;
	}
	if (attr.max_cqe < RIG__QUEUE_DEPTH) {
		ret = rig__fail(ENODEV, "%s: takes %d completions per CQ (max_cqe), rig needs %d",
				nic->name, attr.max_cqe, RIG__QUEUE_DEPTH);
		goto out_close;
	}
	nic->port = gid.port_num;
	nic->gid_index = gid.gid_index;
	nic->gid = gid.gid;
	nic->ifindex = gid.ndev_ifindex;
	read_mac(gid.ndev_ifindex, nic->mac);
	msg_max = pattr.max_msg_sz < RIG_MESSAGE_MAX ? pattr.max_msg_sz
						       : RIG_MESSAGE_MAX;
	nic->msg_max = (uint32_t)msg_max;
	nic->vendor_id = attr.vendor_id;
	nic->soft_roce = attr.vendor_id == RIG_RXE_VENDOR_ID;
	nic->retry_cnt = rig__nic_retry_cnt(&attr);
	nic->max_rd_atomic = read_depth(&attr);

	/* rig_nic_events must never block. */
	ret = rig__set_nonblock(nic->ctx->async_fd, "async_fd");
	if (ret)
		goto out_close;
	nic->pd = ibv_alloc_pd(nic->ctx);
	if (!nic->pd) {
		ret = rig__fail_verbs(errno ? errno : ENOMEM, nic, "ibv_alloc_pd");
		goto out_close;
	}
	/* The far domain (internal.h, rig(7) M4). */
	nic->far_pd = ibv_alloc_pd(nic->ctx);
	if (!nic->far_pd) {
		ret = rig__fail_verbs(errno ? errno : ENOMEM, nic, "ibv_alloc_pd");
		ibv_dealloc_pd(nic->pd);
		goto out_close;
	}
	return 0;

out_close:
	ibv_close_device(nic->ctx);
	return ret;
}

/* The log lines of a NIC that opened: what was picked, the quirks. */
static void log_opened(const struct rig_nic *nic)
{
	char gid[INET6_ADDRSTRLEN] = "?";

	if (rig__log_level() < RIG_LOG_INFO)
		return;
	inet_ntop(AF_INET6, nic->gid.raw, gid, sizeof(gid));
	rig__log(RIG_LOG_DEBUG, "%s: port %u, GID index %u (%s), message limit %u",
		 nic->name, nic->port, nic->gid_index, gid, nic->msg_max);
	if (nic->soft_roce)
		rig__log(RIG_LOG_INFO, "%s: Soft-RoCE quirk: transport retry count %u, not 7 (its 7 retries forever; RNR waits count against it too)",
			 nic->name, nic->retry_cnt);
}

RIG_EXPORT int rig_nic_query(const struct rig_nic *nic, struct rig_nic_info *info)
{
	struct rig_nic_info all = { .size = sizeof(all) };

	if (!nic || !info || info->size < 8)
		return rig__fail(EINVAL, "rig_nic_query: %s", !nic || !info ? "NULL argument" :
				 "size is not set to sizeof(struct rig_nic_info)");
	all.port = nic->port;
	snprintf(all.device, sizeof(all.device), "%s", nic->name);
	all.gid_index = nic->gid_index;
	all.msg_max = nic->msg_max;
	memcpy(all.gid, nic->gid.raw, sizeof(all.gid));
	memcpy(all.mac, nic->mac, sizeof(all.mac));
	all.retry_cnt = nic->retry_cnt;
	all.soft_roce = nic->soft_roce;
	all.vendor_id = nic->vendor_id;
	all.max_rd_atomic = nic->max_rd_atomic;
	all.depth = __atomic_load_n(&nic->depth, __ATOMIC_RELAXED);
	rig__give_sized(info, info->size, &all, sizeof(all));
	return 0;
}

/*
 * RIG_QP_DEPTH=N, 1 <= N <= RIG_RING_ENTRIES: the depth of the NIC's
 * queues under the rings, for any program without a rebuild (rig(7) Q4,
 * rig_nic_set_depth(3)). Anything else is ignored, and said in the log.
 */
static uint32_t env_depth(const struct rig_nic *nic)
{
	const char *v = getenv("RIG_QP_DEPTH");
	char *end;
	long n;

	if (!v || !*v)
		return RIG_RING_ENTRIES;
	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || *end || n < 1 || n > RIG_RING_ENTRIES) {
		rig__log(RIG_LOG_WARN, "%s: RIG_QP_DEPTH=%s ignored: not a number from 1 to %d",
			 nic->name, v, RIG_RING_ENTRIES);
		return RIG_RING_ENTRIES;
	}
	if (n < RIG_RING_ENTRIES)
		rig__log(RIG_LOG_INFO, "%s: RIG_QP_DEPTH=%ld: the NIC's queues hold %ld entries of each ring",
			 nic->name, n, n);
	return (uint32_t)n;
}

RIG_EXPORT int rig_nic_set_depth(struct rig_nic *nic, int depth)
{
	if (!nic || depth < 1 || depth > RIG_RING_ENTRIES)
		return rig__fail(EINVAL, "rig_nic_set_depth: %s",
				 !nic ? "nic is NULL" : "the depth is not from 1 to 4095");
	__atomic_store_n(&nic->depth, (uint32_t)depth, __ATOMIC_RELAXED);
	return 0;
}

static int nic_open(const char *name, bool near_only, struct rig_nic **out)
{
	struct ibv_device **list;
	struct rig_nic *nic;
	int n = 0, i, ret = -ENODEV;
	char why[768] = "";
	size_t at = 0;

	if (!out)
		return rig__fail(EINVAL, "rig_nic_open: out is NULL");
	nic = calloc(1, sizeof(*nic));
	if (!nic)
		return rig__fail(ENOMEM, "rig_nic_open: out of memory");
	/* A machine without RDMA has no list at all: that is no device too. */
	list = ibv_get_device_list(&n);
	for (i = 0; i < n; i++) {
		if (name && strcmp(name, ibv_get_device_name(list[i])))
			continue;
		ret = nic_init(nic, list[i]);
		if (!ret || name)
			break;
		/* Each device passed over, and why: rig_errmsg() lists them. */
		rig__log(RIG_LOG_INFO, "rig_nic_open: passed over %s", rig_errmsg());
		at += snprintf(why + at, sizeof(why) - at, "%s%s", at ? "; " : "", rig_errmsg());
		if (at >= sizeof(why))
			at = sizeof(why) - 1;
	}
	if (!name && ret)
		ret = rig__fail(ENODEV, "no verbs device with an active RoCE v2 port%s%s",
				at ? ": " : "", why);
	else if (name && i == n)
		rig__fail(ENODEV, "no verbs device named %s", name);
	else if (name && ret)
		rig__log(RIG_LOG_INFO, "rig_nic_open: %s", rig_errmsg());
	if (list)
		ibv_free_device_list(list);
	if (ret)
		goto out_free;
	pthread_mutex_init(&nic->lock, NULL);
	rig__list_init(&nic->loops);
	rig__list_init(&nic->qps);
	rig__list_init(&nic->regions);
	nic->spin_ns = RIG_SPIN_ADAPTIVE;
	nic->depth = env_depth(nic);
	nic->near_only = near_only;
	ret = rig__sink_register(nic, nic->pd, &nic->sink_mr);
	if (!ret)
		ret = rig__sink_register(nic, nic->far_pd, &nic->far_sink_mr);
	if (ret)
		goto out_device;
	ret = rig__loop_open(nic, &nic->own);
	if (ret)
		goto out_device;
	log_opened(nic);
	/* Devices rejected on the way leave no message behind. */
	rig__clear_error();
	*out = nic;
	return 0;

out_device:
	rig__sink_free(nic);
	pthread_mutex_destroy(&nic->lock);
	ibv_dealloc_pd(nic->far_pd);
	ibv_dealloc_pd(nic->pd);
	ibv_close_device(nic->ctx);
out_free:
	free(nic);
	return ret;
}

/*
 * rig_nic_open comes in two versions (rig(7) Versions and compatibility).
 * A program built against rig 0.4's headers or later binds the default,
 * RIG_0.4: its inline posts take the local key of each queue pair's
 * protection domain (rig__qp_lkey), so a connection by address that
 * faces another host gets a far queue pair (M4). A program built against
 * an older release bound RIG_0.1, and its inline posts put a region's
 * near key (rig_region.lkey) in every request, which a far queue pair
 * refuses: its NIC makes near queue pairs only, as rig 0.3 did, and M4
 * holds for it by the access rig asks and the read-back of what the NIC
 * granted (qp.c, rig__qp_connect).
 */
int rig_nic_open_0_4(const char *name, struct rig_nic **out);
int rig_nic_open_0_1(const char *name, struct rig_nic **out);

RIG_EXPORT __cold __attribute__((symver("rig_nic_open@@RIG_0.4")))
int rig_nic_open_0_4(const char *name, struct rig_nic **out)
{
	return nic_open(name, false, out);
}

RIG_EXPORT __cold __attribute__((symver("rig_nic_open@RIG_0.1")))
int rig_nic_open_0_1(const char *name, struct rig_nic **out)
{
	return nic_open(name, true, out);
}

RIG_EXPORT __cold int rig_nic_close(struct rig_nic *nic)
{
	int ret = 0, r;

	if (!nic)
		return rig__fail(EINVAL, "rig_nic_close: nic is NULL");
	/* The loops with their listeners, connections and queue pairs, each
	 * only what is its own: connections never change loops. Newest
	 * first, so the NIC's own, opened with it, goes last. */
	while (nic->loops.next != &nic->loops) {
		struct rig_loop *loop = container_of(nic->loops.next, struct rig_loop, link);

		r = rig__loop_free(loop);
		if (r && !ret)
			ret = r;
	}
	while (nic->regions.next != &nic->regions) {
		struct rig__region *reg = container_of(nic->regions.next,
						       struct rig__region, link);

		if (reg->mr && (r = ibv_dereg_mr(reg->mr)) && !ret)
			ret = rig__fail_verbs(r, nic, "ibv_dereg_mr");
		if ((r = ibv_dereg_mr(reg->far_mr)) && !ret)
			ret = rig__fail_verbs(r, nic, "ibv_dereg_mr");
		rig__list_del(&reg->link);
	}
	rig__regions_free(nic);
	/* After the loops: no queue pair of ours probes from it any more. */
	r = rig__sink_free(nic);
	if (r && !ret)
		ret = r;
	r = ibv_dealloc_pd(nic->far_pd);
	if (r && !ret)
		ret = rig__fail_verbs(r, nic, "ibv_dealloc_pd");
	r = ibv_dealloc_pd(nic->pd);
	if (r && !ret)
		ret = rig__fail_verbs(r, nic, "ibv_dealloc_pd");
	r = ibv_close_device(nic->ctx);
	if (r && !ret)
		ret = rig__fail(errno, "ibv_close_device(%s): %s", nic->name,
				strerror(errno));
	pthread_mutex_destroy(&nic->lock);
	free(nic);
	return ret;
}
