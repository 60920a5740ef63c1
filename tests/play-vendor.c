/* SPDX-License-Identifier: MIT */
/*
 * play-vendor.so: preloaded by tests/rig-info-test so that a Soft-RoCE
 * device passes for hardware that pins its queues. ibv_query_device
 * reports the vendor id $RIG_PLAY_VENDOR names (0x14e4: bnxt_re, 0x02c9:
 * mlx5), and rig, which knows a provider by its vendor id, then counts
 * the memory each queue pair pins as on that hardware.
 *
 *	RIG_PLAY_VENDOR=0x14e4 LD_PRELOAD=.../play-vendor.so rig-info
 */
#include <dlfcn.h>
#include <stdlib.h>

#include <infiniband/verbs.h>

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	int (*real)(struct ibv_context *, struct ibv_device_attr *) =
		(int (*)(struct ibv_context *, struct ibv_device_attr *))
		dlsym(RTLD_NEXT, "ibv_query_device");
	const char *vendor = getenv("RIG_PLAY_VENDOR");
	int ret = real(ctx, attr);

	if (!ret && vendor)
		attr->vendor_id = (uint32_t)strtoul(vendor, NULL, 0);
	return ret;
}
