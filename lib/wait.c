/* SPDX-License-Identifier: MIT */
/* Waiting for completions (SPEC T2). */
#include "internal.h"

RIG_EXPORT int rig_qp_wait(struct rig_qp *qp, enum rig_side side, int64_t us,
			   struct rig_completion *c)
{
	(void)qp;
	(void)side;
	(void)us;
	(void)c;
	return rig__fail(ENOSYS, "rig_qp_wait: not implemented yet");
}
