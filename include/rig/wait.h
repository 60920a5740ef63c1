/* SPDX-License-Identifier: MIT */
#ifndef RIG_WAIT_H
#define RIG_WAIT_H
/*
 * Waiting for one ring: rig_qp_wait() spins briefly, then sleeps through
 * an io_uring of rig's own on the queue pair's loop (loop.h). For many
 * queue pairs in one thread, use a loop.
 */
#include <stdint.h>

#include <rig/qp.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * rig_qp_wait - rig_qp_poll() once the oldest due entry of @side has a
 * completion, waiting at most @us microseconds (rig(7) T2)
 *
 * Returns 1 with @c filled, 0 at the bound (the entry still due), or
 * -EINVAL if @us < 0 or no entry of @side is due.
 */
int rig_qp_wait(struct rig_qp *qp, enum rig_side side, int64_t us,
		struct rig_completion *c);

/* rig_nic_set_spin()'s two special values; any other is nanoseconds. */
#define RIG_SPIN_NEVER		0
#define RIG_SPIN_ADAPTIVE	(-1)
/* The longest spin: 1 ms, far past what any sleep costs. */
#define RIG_SPIN_MAX_NS		1000000

struct rig_nic;

/**
 * rig_nic_set_spin - how long rig_qp_wait() polls before it sleeps, for
 * every queue pair of @nic
 * @ns: RIG_SPIN_ADAPTIVE (the default): each ring of each queue pair
 *      learns how soon its completions come and spins only while that
 *      is cheaper than a sleep; RIG_SPIN_NEVER: sleep at once (a machine
 *      short of CPU); or a fixed spin of @ns nanoseconds, at most
 *      RIG_SPIN_MAX_NS
 *
 * Any thread may call it at any time; waits that start afterwards follow
 * it. Returns 0, or -EINVAL (and changes nothing) for a NULL @nic or an
 * @ns out of range. See rig_nic_set_spin(3).
 */
int rig_nic_set_spin(struct rig_nic *nic, int64_t ns);

#ifdef __cplusplus
}
#endif
#endif
