/* SPDX-License-Identifier: MIT */
/* rig_errmsg(): one message per thread for its last failed call (rig(7) C1). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static __thread char errmsg[256];

int rig__fail(int err, const char *fmt, ...)
{
	char msg[sizeof(errmsg)];
	va_list ap;

	/* Through a copy: a caller may pass rig_errmsg() itself, to add to
	 * the reason a deeper call gave. */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	memcpy(errmsg, msg, sizeof(errmsg));
	return -err;
}

void rig__clear_error(void)
{
	errmsg[0] = 0;
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
