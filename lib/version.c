/* SPDX-License-Identifier: MIT */
/* rig_version(): the library's own version, fixed when it was built. */
#include "internal.h"

RIG_EXPORT const char *rig_version(void)
{
	return RIG_VERSION_STRING;
}
