/* SPDX-License-Identifier: MIT */
#ifndef RIG_PROBES_H
#define RIG_PROBES_H
/*
 * USDT static probes (provider "rig"), for bpftrace, perf and SystemTap:
 * rig(7) PROBES lists each with its arguments, and tests/check-probes.sh
 * holds the library to that list. A probe is one nop and a note in the
 * ELF file; nothing runs unless a tracer attaches. None sits on the
 * inline hot path (include/rig/qp.h), which compiles into applications.
 *
 * configure defines RIG_WITH_PROBES when it found <sys/sdt.h> (Debian's
 * systemtap-sdt-dev) and --disable-probes was not given. Without it the
 * probes compile to nothing, and RIG_PROBES_ON lets a caller skip work
 * that only a probe would use.
 */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#if RIG_WITH_PROBES
#define SDT_USE_VARIADIC 1
#include <sys/sdt.h>
#define RIG_PROBES_ON 1
#define RIG_PROBE(name, ...) STAP_PROBEV(rig, name, __VA_ARGS__)
#else
#define RIG_PROBES_ON 0
/* Arguments are still evaluated, as a probe would, so that a variable
 * set only for a probe is not "unused". */
static inline void rig__probe_off(int unused, ...)
{
	(void)unused;
}
#define RIG_PROBE(name, ...) rig__probe_off(0, __VA_ARGS__)
#endif

#endif
