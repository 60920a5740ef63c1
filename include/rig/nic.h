/* SPDX-License-Identifier: MIT */
#ifndef RIG_NIC_H
#define RIG_NIC_H
/*
 * A NIC: one verbs device, one active port, one RoCE v2 GID.
 */
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rig_nic;

/**
 * rig_nic_open - open a verbs device for rig
 * @name: device name ("rxe0", "bnxt_re0"), or NULL for the first device
 *        with an active RoCE v2 port
 * @out:  set to the new NIC on success, untouched on failure
 *
 * A device is used when a port is active on Ethernet with a RoCE v2 GID
 * (an IPv4-mapped one first) and it takes 4096 work requests per queue
 * and completions per CQ (a ring's 4095 and a liveness probe's).
 * Returns 0, or -ENODEV when no such device qualifies: rig_errmsg() then
 * gives the reason of each device it rejected ("rxe0: port 1 is DOWN"),
 * and so does the log (rig_set_log) at RIG_LOG_INFO. Or another -errno
 * from the verbs call rig_errmsg() names.
 */
int rig_nic_open(const char *name, struct rig_nic **out);

/**
 * rig_nic_close - close a NIC and free everything it still holds
 *
 * Listeners still open are closed, queue pairs still alive destroyed and
 * regions still registered deregistered first; every handle of the NIC,
 * deregistered regions' included, is invalid afterwards. Returns 0 or the
 * first -errno met on the way; the NIC is gone either way.
 */
int rig_nic_close(struct rig_nic *nic);

/**
 * rig_nic_events - apply the NIC's pending async events, without blocking
 *
 * QP_FATAL, QP_REQ_ERR and QP_ACCESS_ERR fail their queue pair; DEVICE_FATAL
 * fails every queue pair of the NIC (rig(7) F1, F6). rig_qp_wait and the loop
 * integration call it; an application that only polls calls it from time
 * to time. Returns how many events it took, or -errno.
 */
int rig_nic_events(struct rig_nic *nic);

/**
 * rig_errmsg - this thread's message for its last failed rig call
 *
 * Names the step and the verbs call that failed ("INIT->RTR refused by rxe0:
 * Invalid argument"). The string stays valid until this thread's next
 * failing rig call.
 */
const char *rig_errmsg(void);

/*
 * What rig_nic_query() reports. The caller sets @size to sizeof(struct
 * rig_nic_info) and the library fills that many bytes at most, so the
 * structure can grow at its end: a program built against an older header
 * passes a smaller size and gets the fields it knows; one built against a
 * newer header, run with an older library, finds in @size how much was
 * filled (the rest is zeroed). Initialise it as
 *	struct rig_nic_info info = { .size = sizeof(info) };
 */
struct rig_nic_info {
	uint32_t size;		/* in: the structure's size; out: bytes filled */
	uint32_t port;		/* the port rig uses, from 1 */
	char device[64];	/* "rxe0", "bnxt_re0" */
	uint32_t gid_index;	/* its RoCE v2 GID's index in the port's table */
	uint32_t msg_max;	/* the message limit: min(2^31, max_msg_sz) */
	uint8_t gid[16];
	uint8_t mac[6];		/* the MAC of the GID's netdev */
	uint8_t retry_cnt;	/* transport retries of its queue pairs (rig(7) M3) */
	uint8_t soft_roce;	/* 1: Soft-RoCE (rdma_rxe), whose quirks rig applies */
	uint32_t vendor_id;	/* from ibv_query_device */
	uint32_t max_rd_atomic;	/* reads in flight per queue pair, for local peers */
	uint32_t depth;		/* the NIC's queue under each ring of the queue
				 * pairs it makes now (rig(7) Q4) */
};

/**
 * rig_nic_query - what rig chose for @nic, and why
 *
 * Fills @info (see struct rig_nic_info) with the device, port and GID
 * rig_nic_open() picked and what the device's limits and quirks made of
 * rig's settings. Makes no verbs call. Returns 0, or -EINVAL if @nic or
 * @info is NULL or @info->size is below 8; @info is untouched then.
 */
int rig_nic_query(const struct rig_nic *nic, struct rig_nic_info *info);

/**
 * rig_nic_qp_pinned - the memory each of rig's queue pairs pins on @nic
 *
 * The bytes of its queues and CQs that the kernel counts against
 * RLIMIT_MEMLOCK, as the device's provider sizes them for the NIC's depth
 * now (rig_nic_set_depth): megabytes on bnxt_re and mlx5 at the full
 * depth, kilobytes at a depth of a few (rig_nic_query(3) gives each figure); 0
 * on Soft-RoCE, which pins no queue memory. An estimate, rounded up: RLIMIT_MEMLOCK divided by it is
 * about how many queue pairs a program may make, fewer for the regions it
 * registers. Makes no verbs call. Returns the bytes, or -EINVAL if @nic
 * is NULL.
 */
int64_t rig_nic_qp_pinned(const struct rig_nic *nic);

/**
 * rig_nic_set_depth - how many entries of each ring the NIC's queues hold,
 * for the queue pairs @nic makes from then on (rig(7) Q4)
 *
 * @depth: 1 to RIG_RING_ENTRIES (the default, or RIG_QP_DEPTH=N in the
 * environment when the NIC opened). A ring keeps its RIG_RING_ENTRIES
 * entries (Q1) at any depth: entries beyond it wait in the ring, in
 * order, and go to the NIC as its completions free room. Queue pairs made
 * before keep theirs. Any thread may call it. Returns 0, or -EINVAL for a
 * NULL @nic or a depth out of range (the setting is unchanged).
 */
int rig_nic_set_depth(struct rig_nic *nic, int depth);

/* How much rig tells of what it does; see rig_set_log(). */
enum rig_log_level {
	RIG_LOG_OFF = 0,
	RIG_LOG_WARN = 1,	/* a queue pair failed, an async event failed some */
	RIG_LOG_INFO = 2,	/* a device rejected and why, a quirk applied, other async events */
	RIG_LOG_DEBUG = 3,	/* the device, port and GID picked */
};

/* Receives each line (no newline) of level <= the level set. */
typedef void rig_log_fn(enum rig_log_level level, const char *line);

/**
 * rig_set_log - where rig's log lines go, and how many
 * @fn:    the callback, or NULL for stderr ("rig: " and the line)
 * @level: RIG_LOG_OFF..RIG_LOG_DEBUG
 *
 * Without a call, the environment decides: RIG_LOG=warn, info or debug
 * sends those levels to stderr; unset, rig logs nothing. A call
 * overrides the environment. Each event is logged once, when rig learns
 * of it, from the thread that learns of it, never on the hot path; @fn
 * must not call rig. Returns 0, or -EINVAL for a level out of range
 * (nothing changes).
 */
int rig_set_log(rig_log_fn *fn, enum rig_log_level level);

#ifdef __cplusplus
}
#endif
#endif
