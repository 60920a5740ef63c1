/* SPDX-License-Identifier: MIT */
/*
 * Regions. A region's handle outlives its registration (rig(7) P5): the
 * inline post code reads pub.nic, which deregister clears, so the memory
 * behind a handle must stay readable until the NIC closes, and no handle
 * may be given out twice, or a stale one would name a live region.
 *
 * So handles come from an arena of address space the NIC reserves, in
 * order, and are never reused. Once every handle of a page is
 * deregistered, the page is given back to the kernel (MADV_DONTNEED): it
 * still reads, as zeros, which is a handle whose nic is NULL. Churn costs
 * address space (128 bytes a registration, 2^26 registrations per NIC
 * handle), not memory.
 *
 * Each region is registered twice (rig(7) M4): in the NIC's near
 * protection domain with remote read, for queue pairs that may serve a
 * peer of this NIC handle, and in its far one with no remote access, for
 * queue pairs that face another host. The second registration pins the
 * same pages, but the kernel counts them against RLIMIT_MEMLOCK again
 * (drivers/infiniband/core/umem.c, ib_umem_get adds every registration's
 * pages to pinned_vm), and the NIC holds a second translation of them.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#define RIG_HANDLE_SIZE 128
#define RIG_HANDLE_SPACE (1ull << 33)
/* Address space made writable at a time, as handles are needed. */
#define RIG_HANDLE_GROW (64 * 1024)

_Static_assert(sizeof(struct rig__region) <= RIG_HANDLE_SIZE,
	       "a region's handle fits its slot of the arena");

/* LeakSanitizer looks for pointers in the heap, stacks and globals, not in
 * memory the program maps itself: it is told that the arena holds some
 * (each live region's ibv_mr), when it is in the process. */
void __lsan_register_root_region(const void *p, size_t size) __attribute__((weak));
void __lsan_unregister_root_region(const void *p, size_t size) __attribute__((weak));

/* A new handle, under the NIC's lock; NULL with rig_errmsg() set. */
static struct rig__region *handle_new(struct rig_nic *nic)
{
	struct rig__handles *h = &nic->handles;
	size_t at = h->used * RIG_HANDLE_SIZE;

	if (!h->base) {
		h->base = mmap(NULL, RIG_HANDLE_SPACE, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (h->base == MAP_FAILED) {
			h->base = NULL;
			rig__fail(errno, "rig_region_register: mmap: %s", strerror(errno));
			return NULL;
		}
		/* Pages go back one by one (handle_dead): a huge page that
		 * khugepaged made of them would keep 2 MiB resident for one
		 * live handle, which churn showed (rig(7) P5). */
		madvise(h->base, RIG_HANDLE_SPACE, MADV_NOHUGEPAGE);
		if (__lsan_register_root_region)
			__lsan_register_root_region(h->base, RIG_HANDLE_SPACE);
	}
	if (at + RIG_HANDLE_SIZE > RIG_HANDLE_SPACE) {
		rig__fail(ENOMEM, "rig_region_register: %s has used all its %llu region handles; close and reopen it",
			  nic->name, RIG_HANDLE_SPACE / RIG_HANDLE_SIZE);
		return NULL;
	}
	if (at + RIG_HANDLE_SIZE > h->writable) {
		if (mprotect(h->base + h->writable, RIG_HANDLE_GROW,
			     PROT_READ | PROT_WRITE)) {
			rig__fail(errno, "rig_region_register: mprotect: %s", strerror(errno));
			return NULL;
		}
		h->writable += RIG_HANDLE_GROW;
	}
	h->used++;
	return (struct rig__region *)(h->base + at);
}

/* Gives back the page of @reg once all its handles are deregistered. */
static void handle_dead(struct rig_nic *nic, struct rig__region *reg)
{
	struct rig__handles *h = &nic->handles;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t *first = (uint8_t *)((uintptr_t)reg & ~(uintptr_t)(page - 1));
	size_t i;

	/* The page's last handles may not be given out yet. */
	if (first + page > h->base + h->used * RIG_HANDLE_SIZE)
		return;
	for (i = 0; i < page; i += RIG_HANDLE_SIZE)
		if (((struct rig__region *)(first + i))->mr ||
		    ((struct rig__region *)(first + i))->far_mr)
			return;
	madvise(first, page, MADV_DONTNEED);
}

void rig__regions_free(struct rig_nic *nic)
{
	if (!nic->handles.base)
		return;
	if (__lsan_unregister_root_region)
		__lsan_unregister_root_region(nic->handles.base, RIG_HANDLE_SPACE);
	munmap(nic->handles.base, RIG_HANDLE_SPACE);
}

RIG_EXPORT __cold int rig_region_register(struct rig_nic *nic, void *addr,
					  size_t len, struct rig_region **out)
{
	struct rig__region *reg;
	struct ibv_mr *mr, *far_mr;
	int ret;

	if (!nic || !addr || !len || !out)
		return rig__fail(EINVAL, "rig_region_register: %s",
				 !len ? "empty range" : "NULL argument");
	/* Remote read serves a local peer's reads (rig(7) M4), through the
	 * near queue pairs; the far registration grants nothing, so a far
	 * queue pair serves nobody, whatever access its provider gave it. */
	mr = ibv_reg_mr(nic->pd, addr, len,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr)
		goto refused;
	far_mr = ibv_reg_mr(nic->far_pd, addr, len, IBV_ACCESS_LOCAL_WRITE);
	if (!far_mr) {
		ret = errno;
		ibv_dereg_mr(mr);
		errno = ret;
		goto refused;
	}
	pthread_mutex_lock(&nic->lock);
	reg = handle_new(nic);
	if (reg) {
		reg->mr = mr;
		reg->far_mr = far_mr;
		reg->far_lkey = far_mr->lkey;
		reg->nic = nic;
		reg->pub.nic = nic;
		reg->pub.addr = addr;
		reg->pub.len = len;
		reg->pub.lkey = mr->lkey;
		reg->pub.rkey = mr->rkey;
		rig__list_add(&nic->regions, &reg->link);
	}
	pthread_mutex_unlock(&nic->lock);
	if (!reg) {
		ibv_dereg_mr(far_mr);
		ibv_dereg_mr(mr);
		return -ENOMEM;
	}
	*out = &reg->pub;
	return 0;

refused:
	ret = errno ? errno : ENOMEM;
	return rig__fail(ret, "ibv_reg_mr of %zu bytes refused by %s: %s%s",
			 len, nic->name, strerror(ret),
			 ret == ENOMEM ? " (see RLIMIT_MEMLOCK)" : "");
}

RIG_EXPORT __cold int rig_region_deregister(struct rig_region *r)
{
	struct rig__region *reg;
	struct rig_nic *nic;
	int ret;

	if (!r || !r->nic)
		return rig__fail(EINVAL, "rig_region_deregister: %s",
				 r ? "already deregistered" : "NULL region");
	reg = container_of(r, struct rig__region, pub);
	nic = reg->nic;
	/* The near registration first, the one that grants remote read: a
	 * refusal of it changes nothing. */
	ret = ibv_dereg_mr(reg->mr);
	if (ret)
		return rig__fail_verbs(ret, nic, "ibv_dereg_mr");
	pthread_mutex_lock(&nic->lock);
	reg->mr = NULL;
	pthread_mutex_unlock(&nic->lock);
	/* A refusal of the far one leaves the region deregistered for posts
	 * (P5) and listed, for rig_nic_close to try again. */
	ret = ibv_dereg_mr(reg->far_mr);
	pthread_mutex_lock(&nic->lock);
	__atomic_store_n(&reg->pub.nic, NULL, __ATOMIC_RELAXED);
	if (!ret) {
		reg->far_mr = NULL;
		rig__list_del(&reg->link);
		handle_dead(nic, reg);
	}
	pthread_mutex_unlock(&nic->lock);
	return ret ? rig__fail_verbs(ret, nic, "ibv_dereg_mr") : 0;
}

/*
 * The sink: RIG__SINK_SIZE bytes of the NIC's own, one cache line, that
 * grant remote write, so that a peer's liveness probes name a key the
 * responder checks (rig-wire(7) LIVENESS; ring.c, rig__qp_probe). Its
 * address and rkey travel in "rig3" private data (handshake.c). It holds
 * nothing: the probes' byte lands there and is never read, and rig's
 * own probes send their byte from it (its lkey, so no inline data is
 * needed). No region of the application's grants remote write (M4).
 *
 * Made at rig_nic_open rather than at a first connection by address:
 * the handshakes run on several loops' threads and the helper, which
 * would need a lock and a failure path each for it, while it costs one
 * registration and one pinned page per NIC, nothing next to a queue
 * pair (M1). Registered in both protection domains (M4): a queue pair's
 * probes send from, and its peer writes into, the registration of that
 * queue pair's own domain (rig__sink_mr).
 */
int rig__sink_register(struct rig_nic *nic, struct ibv_pd *pd, struct ibv_mr **mr)
{
	int ret;

	if (!nic->sink && !(nic->sink = aligned_alloc(RIG__SINK_SIZE, RIG__SINK_SIZE)))
		return rig__fail(ENOMEM, "rig_nic_open: out of memory");
	memset(nic->sink, 0, RIG__SINK_SIZE);
	*mr = ibv_reg_mr(pd, nic->sink, RIG__SINK_SIZE,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!*mr) {
		ret = errno ? errno : ENOMEM;
		return rig__fail(ret, "ibv_reg_mr of the %d-byte liveness sink refused by %s: %s%s",
				 RIG__SINK_SIZE, nic->name, strerror(ret),
				 ret == ENOMEM ? " (see RLIMIT_MEMLOCK)" : "");
	}
	return 0;
}

int rig__sink_free(struct rig_nic *nic)
{
	struct ibv_mr **mr[] = { &nic->sink_mr, &nic->far_sink_mr };
	int i, r, ret = 0;

	for (i = 0; i < 2; i++) {
		if (*mr[i] && (r = ibv_dereg_mr(*mr[i])) && !ret)
			ret = rig__fail_verbs(r, nic, "ibv_dereg_mr");
		*mr[i] = NULL;
	}
	free(nic->sink);
	nic->sink = NULL;
	return ret;
}
