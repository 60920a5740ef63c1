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

#ifdef __cplusplus
}
#endif
#endif
