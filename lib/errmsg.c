/* SPDX-License-Identifier: MIT */
/* rig_errmsg(): one message per thread for its last failed call (SPEC C1). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static __thread char errmsg[256];

int rig__fail(int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof(errmsg), fmt, ap);
	va_end(ap);
	return -err;
}

/* For a verbs call the NIC refused: "INIT->RTR refused by rxe0: Invalid
 * argument". */
int rig__fail_verbs(int err, const struct rig_nic *nic, const char *step)
{
	return rig__fail(err, "%s refused by %s: %s", step, nic->name,
			 strerror(err));
}

RIG_EXPORT const char *rig_errmsg(void)
{
	return errmsg[0] ? errmsg : "no error";
}
