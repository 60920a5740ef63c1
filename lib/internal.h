/* SPDX-License-Identifier: MIT */
#ifndef RIG_INTERNAL_H
#define RIG_INTERNAL_H
/*
 * What the library's files share and applications never see: the private
 * halves of the objects, and the error-message helpers.
 */
#include <pthread.h>
#include <stdbool.h>

#include <rig/rig.h>

struct rdma_cm_id;
struct rdma_event_channel;

#define RIG_EXPORT __attribute__((visibility("default")))
#define __cold __attribute__((cold, noinline))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/* A doubly linked list, enough for the NIC's queue pairs and regions. */
struct rig__list {
	struct rig__list *next, *prev;
};

static inline void rig__list_init(struct rig__list *l)
{
	l->next = l->prev = l;
}

static inline void rig__list_add(struct rig__list *l, struct rig__list *e)
{
	e->next = l->next;
	e->prev = l;
	l->next->prev = e;
	l->next = e;
}

static inline void rig__list_del(struct rig__list *e)
{
	e->prev->next = e->next;
	e->next->prev = e->prev;
	rig__list_init(e);
}

/* The arena of region handles (region.c): reserved address space, the
 * part made writable, and the handles given out, never reused. */
struct rig__handles {
	uint8_t *base;
	size_t writable;
	size_t used;
};

struct rig_nic {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[IBV_SYSFS_NAME_MAX];
	uint8_t port;
	uint8_t mac[6];
	uint32_t gid_index;
	union ibv_gid gid;
	uint32_t msg_max;		/* min(2^31, max_msg_sz) */
	uint8_t retry_cnt;		/* see rig__nic_retry_cnt() */
	uint8_t max_rd_atomic;		/* reads in flight, for local peers */
	struct ibv_comp_channel *channel;	/* of every CQ, O_NONBLOCK */
	int epfd;			/* rig_nic_fd: the channel and async fds */
	/* The loop integration (loop.c), under the lock: whether every ring
	 * is armed and reported, and the rings ready but not yet handed out. */
	bool watched;
	struct rig_ready *pending;	/* room for both rings of every QP */
	unsigned npending, pending_cap;
	unsigned nqps;
	int ready_efd;			/* in epfd: readable while npending */
	bool ready_signalled;
	pthread_mutex_t lock;		/* the lists, sleepers, unacked events */
	struct rig__list qps;
	struct rig__list regions;	/* registered ones */
	struct rig__handles handles;
	struct rig__list listeners;
};

struct rig__region {
	struct rig_region pub;
	struct ibv_mr *mr;		/* NULL once deregistered */
	struct rig_nic *nic;
	struct rig__list link;
};

enum rig__qp_state { RIG__RESET, RIG__HALF_CONNECTED, RIG__CONNECTED,
		     RIG__DESTROYED };

/* Bits of rig_qp.broken: anything nonzero sends posts and polls to the
 * slow paths. */
enum {
	RIG__UNCONNECTED = 1 << 0,
	RIG__FAILED = 1 << 1,	/* the failure record below is set */
	RIG__EVENT = 1 << 2,	/* an async event failed it: apply in poll */
};

/* Where a failure came from. After the last three the library no longer
 * trusts the NIC to complete what is due, and completes it itself (F2, F6). */
enum rig__cause { RIG__CAUSE_NONE, RIG__CAUSE_ENTRY, RIG__CAUSE_FLUSH,
		  RIG__CAUSE_KIND, RIG__CAUSE_EVENT, RIG__CAUSE_DEVICE };

struct rig__qp {
	struct rig_qp pub;
	struct rig_nic *nic;
	enum rig__qp_state state;
	struct rig_endpoint self;
	struct rig__list link;
	/* The failure record: the first failure, kept for every later
	 * completion of both rings (SPEC F3). */
	enum rig__cause cause;
	int error;
	const char *why;
	int wc_status;			/* the verbs status behind it, or -1 */
	bool flushed;			/* a flush was reaped before any reason */
	uint8_t distrust;		/* 1 << side: drop that ring's CQEs */
	/* Per ring, under the NIC's lock: completion events read but not
	 * yet acked (ibv_ack_cq_events takes a mutex: ack in batches), and
	 * the eventfd of the thread sleeping in rig_qp_wait, or -1. */
	unsigned unacked[2];
	int sleeper[2];
	uint8_t pending;		/* 1 << side: listed in nic->pending */
	/* rig_dial and rig_accept's connection, destroyed with the QP. */
	struct rdma_cm_id *cm_id;
	struct rdma_event_channel *cm_ch;
	/* Set by rig_nic_events, from any thread, for the owner to apply. */
	int event_error;
	const char *event_why;
};

static inline struct rig__qp *rig__qp(struct rig_qp *qp)
{
	return container_of(qp, struct rig__qp, pub);
}

/* region.c: gives back the handles of @nic's regions, once their MRs
 * are deregistered. */
void rig__regions_free(struct rig_nic *nic);

/* nic.c: makes @fd non-blocking; 0 or -errno, with @what in the message. */
int rig__set_nonblock(int fd, const char *what);

/* qp.c: destroys and frees a queue pair the NIC still lists. */
int rig__qp_free(struct rig__qp *qp);

/* ring.c: records @qp's first failure (SPEC F3); later ones change nothing. */
void rig__qp_failed(struct rig__qp *qp, enum rig__cause cause, int error,
		    const char *why, int wc_status);

/* wait.c: reads the NIC's pending completion events and wakes whoever
 * sleeps on their rings; the NIC's lock must be held. */
void rig__nic_take_completion_events(struct rig_nic *nic);
/* wait.c: acks what @qp's rings still owe, before their CQs go. */
void rig__qp_ack_events(struct rig__qp *qp);

/* loop.c, under the NIC's lock: arms both rings of @qp when its NIC is
 * watched; makes the ready list room for @nqps queue pairs; lists a ring
 * of @qp as ready; makes rig_nic_fd readable while rings are listed (call
 * it after listing); forgets @qp before it goes. */
void rig__loop_arm(struct rig__qp *qp);
int rig__loop_reserve(struct rig_nic *nic, unsigned nqps);
void rig__loop_ready(struct rig__qp *qp, enum rig_side side);
void rig__loop_signal(struct rig_nic *nic);
void rig__loop_forget(struct rig__qp *qp);

/* cm.c: ends @qp's rdma_cm connection, if it has one; closes the
 * listener whose link in its NIC's list is @link. */
void rig__qp_cm_free(struct rig__qp *qp);
void rig__listener_free(struct rig__list *link);

/* errmsg.c: clear this thread's rig_errmsg(), after a call that
 * succeeded on a later try. */
void rig__clear_error(void);
/* errmsg.c: set this thread's rig_errmsg() and return -err. */
int rig__fail(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int rig__fail_verbs(int err, const struct rig_nic *nic, const char *step);

#endif
