/* SPDX-License-Identifier: MIT */
/*
 * Regions. A region's handle outlives its registration (SPEC P5): the
 * inline post code reads pub.nic, which deregister clears, so the memory
 * behind the handle must stay until the NIC closes.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

RIG_EXPORT __cold int rig_region_register(struct rig_nic *nic, void *addr,
					  size_t len, struct rig_region **out)
{
	struct rig__region *reg;
	int ret;

	if (!nic || !addr || !len || !out)
		return rig__fail(EINVAL, "rig_region_register: %s",
				 !len ? "empty range" : "NULL argument");
	reg = calloc(1, sizeof(*reg));
	if (!reg)
		return rig__fail(ENOMEM, "rig_region_register: out of memory");
	/* Remote read serves a local peer's reads (SPEC M4); queue pairs facing
	 * a remote peer grant no remote access, so it opens nothing to them. */
	reg->mr = ibv_reg_mr(nic->pd, addr, len,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!reg->mr) {
		ret = errno ? errno : ENOMEM;
		free(reg);
		return rig__fail(ret, "ibv_reg_mr of %zu bytes refused by %s: %s%s",
				 len, nic->name, strerror(ret),
				 ret == ENOMEM ? " (see RLIMIT_MEMLOCK)" : "");
	}
	reg->nic = nic;
	reg->pub.nic = nic;
	reg->pub.addr = addr;
	reg->pub.len = len;
	reg->pub.lkey = reg->mr->lkey;
	reg->pub.rkey = reg->mr->rkey;
	pthread_mutex_lock(&nic->lock);
	rig__list_add(&nic->regions, &reg->link);
	pthread_mutex_unlock(&nic->lock);
	*out = &reg->pub;
	return 0;
}

RIG_EXPORT __cold int rig_region_deregister(struct rig_region *r)
{
	struct rig__region *reg;
	int ret;

	if (!r || !r->nic)
		return rig__fail(EINVAL, "rig_region_deregister: %s",
				 r ? "already deregistered" : "NULL region");
	reg = container_of(r, struct rig__region, pub);
	ret = ibv_dereg_mr(reg->mr);
	if (ret)
		return rig__fail_verbs(ret, reg->nic, "ibv_dereg_mr");
	reg->mr = NULL;
	__atomic_store_n(&reg->pub.nic, NULL, __ATOMIC_RELAXED);
	return 0;
}
