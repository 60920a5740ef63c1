/* SPDX-License-Identifier: MIT */
#ifndef RIG_REGION_H
#define RIG_REGION_H
/*
 * Regions: memory of this process registered with a NIC. Sends, reads and
 * receives name a region and a byte range inside it.
 */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rig_nic;

/*
 * The library allocates every region; applications hold pointers only and
 * read nothing here. Inline post code checks a range against these fields.
 */
struct rig_region {
	/* read by inline code: ABI-frozen */
	const struct rig_nic *nic;	/* NULL once deregistered (P5) */
	uint8_t *addr;
	size_t len;
	uint32_t lkey;
	uint32_t rkey;
};

/**
 * rig_region_register - register [addr, addr + len) with a NIC
 *
 * Registers it twice, in the NIC's two protection domains (rig(7) M4):
 * with remote read for queue pairs that may serve a peer of this NIC
 * handle, with none for those facing another host. Returns 0 and sets
 * *out, -EINVAL for a NULL or empty range, or the -errno of ibv_reg_mr
 * (-ENOMEM: see RLIMIT_MEMLOCK, which counts the region twice).
 */
int rig_region_register(struct rig_nic *nic, void *addr, size_t len,
			struct rig_region **out);

/**
 * rig_region_deregister - deregister a region
 *
 * The handle stays safe to pass until its NIC closes: posts naming it are
 * refused with -EINVAL (rig(7) P5). A second deregister returns -EINVAL.
 */
int rig_region_deregister(struct rig_region *r);

#ifdef __cplusplus
}
#endif
#endif
