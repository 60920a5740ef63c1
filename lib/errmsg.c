/* SPDX-License-Identifier: MIT */
/*
 * The library's words: rig_errmsg(), one message per thread for its last
 * failed call (rig(7) C1), and the log (rig_set_log, RIG_LOG), which the
 * slow paths of every layer write to. Both sit at the bottom, beside
 * ring.c, so that any file may use them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Room for rig_nic_open's reason per device on a machine with several. */
static __thread char errmsg[1024];
/* rig__errmsg_hold(): its depth, and the message the holder's caller
 * had, saved by the first failure under the hold (none: nothing to
 * restore, and a hold costs nothing). */
static __thread int held;
static __thread bool saved;
static __thread char kept[sizeof(errmsg)];

static void keep(void)
{
	if (held && !saved) {
		memcpy(kept, errmsg, sizeof(errmsg));
		saved = true;
	}
}

void rig__errmsg_hold(void)
{
	held++;
}

void rig__errmsg_release(void)
{
	if (--held == 0 && saved) {
		memcpy(errmsg, kept, sizeof(errmsg));
		saved = false;
	}
}

int rig__fail(int err, const char *fmt, ...)
{
	char msg[sizeof(errmsg)];
	va_list ap;

	/* Through a copy: a caller may pass rig_errmsg() itself, to add to
	 * the reason a deeper call gave. */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	keep();
	memcpy(errmsg, msg, sizeof(errmsg));
	return -err;
}

void rig__clear_error(void)
{
	keep();
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

/*
 * The log. Its level and callback are read by any thread without a lock:
 * a line racing with rig_set_log goes to the old or the new callback,
 * which is all a log needs. Until rig_set_log is called, RIG_LOG decides,
 * read once.
 */
static rig_log_fn *log_fn;
static int log_level = -1;	/* -1: RIG_LOG not read yet */
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static const char *const level_names[] = { "off", "warn", "info", "debug" };

static void log_from_env(void)
{
	const char *v = getenv("RIG_LOG");
	int level = RIG_LOG_OFF, unset = -1, i;

	for (i = 0; v && i <= RIG_LOG_DEBUG; i++)
		if (!strcmp(v, level_names[i]))
			break;
	if (v && *v && i > RIG_LOG_DEBUG)
		fprintf(stderr, "rig: RIG_LOG=%s is none of off, warn, info, debug: no log\n", v);
	else if (v)
		level = i;
	/* A rig_set_log that came first wins. */
	__atomic_compare_exchange_n(&log_level, &unset, level, false,
				    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

int rig__log_level(void)
{
	int level = __atomic_load_n(&log_level, __ATOMIC_RELAXED);

	if (level < 0) {
		pthread_once(&log_once, log_from_env);
		level = __atomic_load_n(&log_level, __ATOMIC_RELAXED);
	}
	return level;
}

void rig__log(enum rig_log_level level, const char *fmt, ...)
{
	rig_log_fn *fn;
	char line[512];
	va_list ap;

	if ((int)level > rig__log_level())
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fn = __atomic_load_n(&log_fn, __ATOMIC_ACQUIRE);
	if (fn)
		fn(level, line);
	else
		fprintf(stderr, "rig: %s: %s\n", level_names[level], line);
}

RIG_EXPORT int rig_set_log(rig_log_fn *fn, enum rig_log_level level)
{
	if ((unsigned)level > RIG_LOG_DEBUG)
		return rig__fail(EINVAL, "rig_set_log: level %d is not RIG_LOG_OFF..RIG_LOG_DEBUG",
				 (int)level);
	__atomic_store_n(&log_fn, fn, __ATOMIC_RELEASE);
	__atomic_store_n(&log_level, (int)level, __ATOMIC_RELAXED);
	return 0;
}
