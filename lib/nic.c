/* SPDX-License-Identifier: MIT */
/*
 * Opening and closing a NIC, and the device quirks rig works around. A NIC
 * owns its loops (loop.c), its own loop first made here, and its regions;
 * closing it closes them.
 */
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

/* Soft-RoCE's vendor id (the kernel's RXE_VENDOR_ID). */
#define RIG_RXE_VENDOR_ID 0xffffff

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

static int is_ipv4_mapped(const union ibv_gid *gid)
{
	static const uint8_t prefix[12] = { [10] = 0xff, [11] = 0xff };

	return !memcmp(gid->raw, prefix, sizeof(prefix));
}

/* The port's RoCE v2 GID, an IPv4-mapped one first (rdma_cm speaks IPv4). */
static int find_gid(struct ibv_context *ctx, uint8_t port, int tbl_len,
		    struct ibv_gid_entry *out)
{
	struct ibv_gid_entry e;
	int found = 0, i;

	for (i = 0; i < tbl_len; i++) {
		if (ibv_query_gid_ex(ctx, port, i, &e, 0) ||
		    e.gid_type != IBV_GID_TYPE_ROCE_V2)
			continue;
		if (!found || (is_ipv4_mapped(&e.gid) &&
			       !is_ipv4_mapped(&out->gid)))
			*out = e;
		found = 1;
	}
	return found;
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

int rig__set_nonblock(int fd, const char *what)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK))
		return rig__fail(errno, "fcntl(%s, O_NONBLOCK): %s", what,
				 strerror(errno));
	return 0;
}

/* Takes the device if it has an active RoCE v2 port; 0 or -errno. */
static int nic_init(struct rig_nic *nic, struct ibv_device *dev)
{
	struct ibv_device_attr attr;
	struct ibv_port_attr pattr;
	struct ibv_gid_entry gid;
	uint64_t msg_max;
	int ret;
	uint8_t port;

	nic->ctx = ibv_open_device(dev);
	if (!nic->ctx)
		return rig__fail(errno ? errno : ENODEV, "ibv_open_device(%s): %s",
				 ibv_get_device_name(dev), strerror(errno));
	snprintf(nic->name, sizeof(nic->name), "%s", ibv_get_device_name(dev));
	ret = ibv_query_device(nic->ctx, &attr);
	if (ret) {
		ret = rig__fail_verbs(ret, nic, "ibv_query_device");
		goto out_close;
	}
	for (port = 1; port <= attr.phys_port_cnt; port++) {
		if (ibv_query_port(nic->ctx, port, &pattr) ||
		    pattr.state != IBV_PORT_ACTIVE ||
		    pattr.link_layer != IBV_LINK_LAYER_ETHERNET)
			continue;
		if (find_gid(nic->ctx, port, pattr.gid_tbl_len, &gid))
			break;
	}
	if (port > attr.phys_port_cnt) {
		ret = rig__fail(ENODEV, "%s has no active port with a RoCE v2 GID",
				nic->name);
		goto out_close;
	}
	if (attr.max_qp_wr < RIG_RING_ENTRIES || attr.max_cqe < RIG_RING_ENTRIES) {
		ret = rig__fail(ENODEV, "%s takes %d work requests per queue, rig needs %d",
				nic->name, attr.max_qp_wr, RIG_RING_ENTRIES);
		goto out_close;
	}
	nic->port = port;
	nic->gid_index = gid.gid_index;
	nic->gid = gid.gid;
	read_mac(gid.ndev_ifindex, nic->mac);
	msg_max = pattr.max_msg_sz < RIG_MESSAGE_MAX ? pattr.max_msg_sz
						       : RIG_MESSAGE_MAX;
	nic->msg_max = (uint32_t)msg_max;
	nic->retry_cnt = rig__nic_retry_cnt(&attr);
	nic->max_rd_atomic = attr.max_qp_init_rd_atom < 16 ? attr.max_qp_init_rd_atom : 16;

	/* rig_nic_events must never block. */
	ret = rig__set_nonblock(nic->ctx->async_fd, "async_fd");
	if (ret)
		goto out_close;
	nic->pd = ibv_alloc_pd(nic->ctx);
	if (!nic->pd) {
		ret = rig__fail_verbs(errno ? errno : ENOMEM, nic, "ibv_alloc_pd");
		goto out_close;
	}
	return 0;

out_close:
	ibv_close_device(nic->ctx);
	return ret;
}

RIG_EXPORT __cold int rig_nic_open(const char *name, struct rig_nic **out)
{
	struct ibv_device **list;
	struct rig_nic *nic;
	int n = 0, i, ret = -ENODEV;

	if (!out)
		return rig__fail(EINVAL, "rig_nic_open: out is NULL");
	nic = calloc(1, sizeof(*nic));
	if (!nic)
		return rig__fail(ENOMEM, "rig_nic_open: out of memory");
	/* A machine without RDMA has no list at all: that is no device too. */
	list = ibv_get_device_list(&n);
	rig__fail(ENODEV, "no verbs device %s%s", name ? "named " : "with an active RoCE v2 port",
		  name ? name : "");
	for (i = 0; i < n; i++) {
		if (name && strcmp(name, ibv_get_device_name(list[i])))
			continue;
		ret = nic_init(nic, list[i]);
		if (!ret || name)
			break;
	}
	if (list)
		ibv_free_device_list(list);
	if (ret)
		goto out_free;
	pthread_mutex_init(&nic->lock, NULL);
	rig__list_init(&nic->loops);
	rig__list_init(&nic->qps);
	rig__list_init(&nic->regions);
	nic->spin_ns = RIG_SPIN_ADAPTIVE;
	ret = rig__loop_open(nic, &nic->own);
	if (ret)
		goto out_device;
	/* Devices rejected on the way leave no message behind. */
	rig__clear_error();
	*out = nic;
	return 0;

out_device:
	pthread_mutex_destroy(&nic->lock);
	ibv_dealloc_pd(nic->pd);
	ibv_close_device(nic->ctx);
out_free:
	free(nic);
	return ret;
}

RIG_EXPORT __cold int rig_nic_close(struct rig_nic *nic)
{
	int ret = 0, r;

	if (!nic)
		return rig__fail(EINVAL, "rig_nic_close: nic is NULL");
	/* The loops with their listeners, connections and queue pairs; the
	 * NIC's own last, as others' connections may have moved to it. */
	while (nic->loops.next != &nic->loops) {
		struct rig_loop *loop = container_of(nic->loops.next, struct rig_loop, link);

		if (loop == nic->own && loop->link.next != &nic->loops)
			loop = container_of(loop->link.next, struct rig_loop, link);
		r = rig__loop_free(loop);
		if (r && !ret)
			ret = r;
	}
	while (nic->regions.next != &nic->regions) {
		struct rig__region *reg = container_of(nic->regions.next,
						       struct rig__region, link);

		if ((r = ibv_dereg_mr(reg->mr)) && !ret)
			ret = rig__fail_verbs(r, nic, "ibv_dereg_mr");
		rig__list_del(&reg->link);
	}
	rig__regions_free(nic);
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
