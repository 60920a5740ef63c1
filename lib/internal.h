/* SPDX-License-Identifier: MIT */
#ifndef RIG_INTERNAL_H
#define RIG_INTERNAL_H
/*
 * What the library's files share and applications never see: the private
 * halves of the objects, and the error-message helpers.
 */
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <time.h>

#include <rig/rig.h>

struct rdma_event_channel;

#define RIG_EXPORT __attribute__((visibility("default")))
#define __cold __attribute__((cold, noinline))
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)

/* CLOCK_MONOTONIC in nanoseconds: every bound of the library. */
static inline int64_t rig__now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

#define container_of(ptr, type, member) \
	((type *)((char *)(ptr) - offsetof(type, member)))

/*
 * Gives a caller's structure of @out_size bytes, whose first field is its
 * uint32_t size, the first bytes of @all (@all_size, its size field set
 * by this call): an older, smaller structure gets what it knows, a newer,
 * bigger one learns from size what this library filled, and zeros past
 * it. rig_nic_query, rig_qp_stats and rig_qp_peer answer this way.
 */
static inline void rig__give_sized(void *out, uint32_t out_size, void *all,
				   uint32_t all_size)
{
	uint32_t size = out_size < all_size ? out_size : all_size;

	memcpy(all, &size, sizeof(size));
	memset((char *)out + size, 0, out_size - size);
	memcpy(out, all, size);
}

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

/*
 * The requests a queue pair's send queue holds beyond its ring, and the
 * entries its send CQ holds beyond it: a liveness probe's (qp.c says why
 * and what it costs). So a device must take RIG__QUEUE_DEPTH requests per
 * queue and CQEs per CQ (nic.c).
 */
#define RIG_PROBES_OUT 1
#define RIG__QUEUE_DEPTH (RIG_RING_ENTRIES + RIG_PROBES_OUT)

/* Soft-RoCE's vendor id (the kernel's RXE_VENDOR_ID). */
#define RIG_RXE_VENDOR_ID 0xffffff
/* The vendor ids mlx5 (Mellanox's OUI) and bnxt_re (Broadcom's PCI id) report. */
#define RIG_MLX5_VENDOR_ID 0x02c9
#define RIG_BNXT_RE_VENDOR_ID 0x14e4

/*
 * pinned.c: what one queue pair pins, from its provider's own sizing.
 * The depths and sizes it asks: ibv_qp_init_attr's cap (max_send_wr,
 * max_recv_wr, max_send_sge, max_recv_sge, max_inline_data) and the cqe
 * of ibv_create_cq for its send and its receive CQ.
 */
struct rig__qp_depths {
	uint32_t send_wr, recv_wr;
	uint32_t send_cqe, recv_cqe;
	uint32_t send_sge, recv_sge, inline_data;
};
enum rig__pin_provider { RIG__PIN_MLX5, RIG__PIN_BNXT_RE };
/* The stack whose sizing applies; the flags are bnxt_re's (pinned.c). */
struct rig__pin_stack {
	enum rig__pin_provider provider;
	bool pow2;		/* kernel < 6.8 or rdma-core < 50: depths rounded up */
	bool cq_double;		/* rdma-core >= 51: a CQ of twice the CQEs */
	bool msn;		/* a host MSN table (GenP7) */
	uint32_t page;		/* the kernel's page size */
};
/* The bytes pinned under stack @s: a pure function. */
int64_t rig__pinned(const struct rig__qp_depths *d, const struct rig__pin_stack *s);
/* The largest over every stack a kernel of @release (uname -r) may run
 * under: pure too. */
int64_t rig__pinned_bound(enum rig__pin_provider provider, const struct rig__qp_depths *d,
			  const char *release, uint32_t page);
/* A queue pair of rig (one gather and one scatter entry, no inline
 * data) with these depths on a NIC of @vendor_id, on the running kernel:
 * rig_nic_qp_pinned(3)'s figure. */
int64_t rig__qp_pinned(uint32_t vendor_id, uint32_t send_wr, uint32_t recv_wr,
		       uint32_t send_cqe, uint32_t recv_cqe);

struct rig_nic {
	struct ibv_context *ctx;
	/*
	 * Two protection domains (rig(7) M4). pd, the near one: each region
	 * is registered there with remote read, for queue pairs that may
	 * serve reads of a peer of this NIC handle. far_pd: each region is
	 * registered there again with no remote access at all, for the queue
	 * pairs of connections by address that face another host. A key of
	 * one domain is worth nothing on a queue pair of the other, so
	 * whatever access a provider grants a far queue pair (bnxt_re before
	 * Linux 6.13 grants every one remote read and write), no region of
	 * the far domain serves it.
	 */
	struct ibv_pd *pd;
	struct ibv_pd *far_pd;
	/* Opened by a program built against rig 0.3's headers or older
	 * (rig_nic_open@RIG_0.1, nic.c): its inline posts put each region's
	 * near key in every request, so every queue pair stays near. */
	bool near_only;
	char name[IBV_SYSFS_NAME_MAX];
	uint8_t port;
	uint8_t mac[6];
	uint32_t ifindex;		/* the netdev under the port's GID */
	uint32_t gid_index;
	union ibv_gid gid;
	uint32_t msg_max;		/* min(2^31, max_msg_sz) */
	uint8_t retry_cnt;		/* see rig__nic_retry_cnt() */
	uint8_t max_rd_atomic;		/* reads in flight, for local peers */
	bool soft_roce;
	uint32_t vendor_id;
	int64_t spin_ns;		/* rig_nic_set_spin(), any thread */
	/* rig_nic_set_depth() or RIG_QP_DEPTH, any thread: the depth of
	 * the NIC's queues under the rings of queue pairs made from then on
	 * (1..RIG_RING_ENTRIES; rig(7) Q4). */
	uint32_t depth;
	struct rig_loop *own;		/* rig_nic_loop(): rig_qp_make's */
	/* The kernel disassociated the context (the device was removed or
	 * reset): its async fd and channels give only EIO, and nobody reads
	 * them again (events.c). Set once, under the lock; read atomically. */
	bool dead;
	pthread_mutex_t lock;		/* the lists below */
	struct rig__list loops;
	unsigned loops_opened;		/* spreads loops over the vectors */
	struct rig__list qps;
	struct rig__list regions;	/* registered ones */
	struct rig__handles handles;
	/* The sink (region.c, rig__sink_register): 64 bytes of rig's own
	 * that its peers' liveness probes write, and its MR; from open to
	 * close. */
	void *sink;
	struct ibv_mr *sink_mr;		/* in pd */
	struct ibv_mr *far_sink_mr;	/* in far_pd */
};

/*
 * Consumers of news (events.c tells them; they never call it back under
 * its lock). libuv's watchers behind one poller are the model: the
 * demultiplexer knows each consumer only by these hooks.
 */
struct rig__qp;
struct rig__consumer {
	/* @qp's ring @side has news: a completion event or a failure. */
	void (*ring)(struct rig__consumer *self, struct rig__qp *qp, int side);
	/* A batch of news ended (rig_loop_fd's readiness may change). */
	void (*done)(struct rig__consumer *self);
	/* @qp comes (arm its rings if need be), or goes: forget it. */
	void (*add)(struct rig__consumer *self, struct rig__qp *qp);
	void (*forget)(struct rig__consumer *self, struct rig__qp *qp);
};

/*
 * What events.c hands the connection layer (conn.h, drive.c). The loop's own
 * thread (rig_loop_handle, rig_nic_events) takes each event of the loop's
 * rdma_cm channel as a step (@event), after the ones a wait kept and the
 * handshake messages owed for news handed out (@replay, run while
 * cm_owed is set), and the loop's timer when it expires (@tick). A thread in
 * rig_qp_wait only notes what it read (@note): a peer that left fails its
 * queue pair's record, and the event is kept for the loop, since a wait
 * sends the NIC no control request (rig(7) T3). @close ends everything
 * the connection layer has in a closing loop. All under cm_lock.
 */
struct rdma_cm_event;
struct rig__cm_consumer {
	void (*event)(struct rig_loop *loop, struct rdma_cm_event *ev);
	void (*note)(struct rig_loop *loop, struct rdma_cm_event *ev);
	void (*replay)(struct rig_loop *loop);
	void (*tick)(struct rig_loop *loop);
	void (*close)(struct rig_loop *loop);
	/* Each pass, after the loop's own channel: the requests of the
	 * listeners it shares with other loops (rig_loops_listen) and those
	 * other loops handed it, within the pass's budget (@end); true if
	 * some remain. */
	bool (*turn)(struct rig_loop *loop, int64_t end);
};

/* A piece of news queued for the application (loop.c), embedded in
 * whatever it is about: each ring of a queue pair, each connection. */
struct rig__news {
	struct rig__list link;		/* in loop->news, or alone */
	struct rig_ready what;
	/* Called once the news is handed out or its loop closes, if set: a
	 * failed dial's connection lives until then. */
	void (*handed)(struct rig__news *self);
};

/* Work a loop hands to its helper thread (loop.c): control calls too slow
 * for the loop's own thread, such as making a queue pair (the kernel
 * takes ~20 ms for one with 4095-entry rings on an emulated guest) or
 * destroying one (as long). A teardown waits in a queue of its own, so
 * that a storm of them cannot hold up handshakes; so does a job that
 * starts a handshake (a dial's queue pair), so that a storm of dials
 * cannot hold up the handshakes under way, whose peers wait with a
 * bound; a quick one (an rdma_cm id's destroy, under a millisecond once
 * its message went) waits behind none (see next_job). */
struct rig__job {
	struct rig__list link;		/* in loop->quick, jobs, starts or teardowns */
	void (*work)(struct rig__job *self);
	bool teardown;
	bool starts;
	bool quick;
};

/*
 * A loop: what one thread watches (include/rig/loop.h). Its own completion
 * channel takes the events of its queue pairs' CQs only, so the kernel
 * sorts events by loop.
 */
struct rig_loop {
	struct rig_nic *nic;
	struct ibv_comp_channel *channel;	/* O_NONBLOCK */
	struct rdma_event_channel *cm;		/* made on first use (drive.c) */
	int epfd;		/* rig_loop_fd: channel, async fd, cm, timer, ready */
	int timer_fd;		/* the handshakes' deadlines, on the loop's clock */
	int ready_efd;		/* readable while news waits (loop.c) */
	bool ready_signalled;
	pthread_mutex_t lock;	/* channel reads, acks, sleepers, the news */
	pthread_mutex_t cm_lock;	/* cm reads and the connections' steps */
	int64_t cm_ticked;		/* the last deadline pass, under cm_lock */
	struct rig__consumer *watcher;	/* loop.c's, from rig_loop_open */
	const struct rig__cm_consumer *cm_consumer;	/* drive.c's */
	/* loop.c, under the lock: someone watches the loop now
	 * (rig_loop_watch, or rig_uring_watch until its poll ends); its
	 * rings are armed and their news listed, from the first watch on. */
	bool watched;
	bool listing;
	struct rig__list news;
	/* The connection layer (conn.h), under cm_lock: its listeners, the
	 * handshakes it drives, the events a wait read and kept for it;
	 * cm_owed (atomic) is set while some are kept, a handshake owes its
	 * peer a message for news handed out, or some work of the layer
	 * waits for the loop's next pass (rig__loop_wake), and keeps
	 * rig_loop_fd readable. */
	struct rig__list listeners, handshakes, cm_kept;
	bool cm_owed;
	/* Dials under way and waiting their turn, under cm_lock; changed by
	 * conn.c's dial_queue, dial_start_turn and dial_leave alone. */
	unsigned dials, dials_queued;
	unsigned ids_dropping;		/* ids the helper has yet to destroy (atomic) */
	/* For the listeners it shares with other loops (rig_loops_listen):
	 * requests other loops handed it (under inbox_lock); and, read by
	 * other loops' threads (atomics): its connections (handshakes and
	 * requests handed to it included; conn.c's share_take and
	 * share_give alone), its passes, and the pass it was at when a
	 * request waited in its inbox too long (it is not picked until it
	 * makes another). */
	struct rig__list cm_inbox;
	pthread_mutex_t inbox_lock;
	unsigned cm_held;
	uint64_t cm_turns, cm_stalled;
	/* loop.c: the helper thread, started by the first job, and its
	 * queue, under job_lock */
	pthread_t helper;
	bool helper_started, helper_stop;
	pthread_mutex_t job_lock;
	pthread_cond_t job_cond;
	struct rig__list quick, jobs, starts, teardowns;
	bool took_teardown;		/* the helper's last job was one */
	struct rig__list link;		/* in nic->loops */
	uint64_t id;		/* never reused: wait.c's polls name the loop */
	/* qp.c's rig__qp_free, set when it makes the loop's first queue
	 * pair: the loop's close frees those left (loop.c sits below qp.c). */
	int (*free_qp)(struct rig__qp *qp);
	/* The completion vector of its CQs: the NIC's loops take the
	 * device's vectors in turn, so their interrupts land on as many
	 * vectors (and CPUs) as the device has, not all on vector 0. */
	int comp_vector;
	/* Liveness (loop.c, rig_loop_liveness): the interval between probes
	 * (0: off) and the next pass, under cm_lock; the queue pairs it
	 * probes, under live_lock (taken after cm_lock, before the NIC's).
	 * cm_deadline is the handshakes' next deadline: the timer takes the
	 * earlier of the two (events.c). live_tick is loop.c's pass, called
	 * by events.c when the timer fires, on the loop's thread, with no
	 * lock held. */
	int64_t live_ns, live_next, cm_deadline;
	/* The passes made, and the queue pairs that joined, each modulo
	 * the slices of an interval (loop.c, live_tick): a pass's slice is
	 * live_pass's, under cm_lock; a queue pair's is live_joined's when
	 * it joined, under live_lock. */
	unsigned live_pass, live_joined;
	/* What the timer is set for now (0: disarmed, -1: it fired and
	 * was read, or was never set), under cm_lock: a deadline that did
	 * not change costs no system call (events.c). */
	int64_t timer_at;
	pthread_mutex_t live_lock;
	struct rig__list live;
	void (*live_tick)(struct rig_loop *loop);
};

struct rig__region {
	struct rig_region pub;
	/* The far registration's local key (nic->far_pd), for the posts of
	 * far queue pairs: they read it at rig_qp.lkey_at, in the cache line
	 * of pub. */
	uint32_t far_lkey;
	struct ibv_mr *mr;		/* NULL once deregistered */
	struct ibv_mr *far_mr;		/* the same memory in nic->far_pd */
	struct rig_nic *nic;
	struct rig__list link;
};

enum rig__qp_state { RIG__RESET, RIG__HALF_CONNECTED, RIG__CONNECTED,
		     RIG__DESTROYED };

/* Bits of rig_qp.broken: anything nonzero sends posts and polls to the
 * slow paths; RIG__WAITING(side) (rig/qp.h: bits 5 and 6), those of its
 * own ring only: entries may wait in that ring beyond the NIC's depth
 * (ring.c), set and cleared by the owner. Bit 4 was rig 0.4's one bit
 * for both rings; it is never set. */
enum {
	RIG__UNCONNECTED = 1 << 0,
	RIG__FAILED = 1 << 1,	/* the failure record below is set */
	RIG__EVENT = 1 << 2,	/* an async event failed it: apply in poll */
	RIG__CLOSED = 1 << 3,	/* rig_qp_close: posts and polls are -EINVAL */
};
#define RIG__WAITING_ANY (RIG__WAITING(RIG_SEND) | RIG__WAITING(RIG_RECEIVE))

/* What the NIC needs of an entry that waits in its ring beyond the NIC's
 * depth (rig(7) Q4), by sequence number & RIG__MASK; its length and
 * cookie are in its slot. */
struct rig__waiting {
	uint64_t addr;		/* the local bytes: a send's, a receive's, a read's destination */
	uint64_t remote;	/* a read's source */
	uint32_t lkey;
	uint32_t rkey;		/* a read's source key */
	uint32_t op;		/* enum rig__op */
	uint32_t pad;
};

/* Where a failure came from. A flush and a refused post are failures
 * whose reason has not been seen: a reason found later replaces them
 * (F3). After the last three the library no longer trusts the NIC to
 * complete what is due, and completes it itself (F2, F6). */
enum rig__cause { RIG__CAUSE_NONE, RIG__CAUSE_ENTRY, RIG__CAUSE_FLUSH,
		  RIG__CAUSE_REFUSED, RIG__CAUSE_KIND, RIG__CAUSE_EVENT,
		  RIG__CAUSE_DEVICE };

/* Who owns a queue pair besides the application: a connection (conn.h)
 * releases its rdma_cm id when the queue pair goes. */
struct rig__qp_owner {
	void (*release)(struct rig__qp_owner *self);
	/* A liveness probe failed the queue pair with -@error: the peer's
	 * host is gone (loop.c, its timer pass, cm_lock held). */
	void (*lost)(struct rig__qp_owner *self, int error);
};

struct rig__qp {
	struct rig_qp pub;
	struct rig_nic *nic;
	struct rig_loop *loop;
	enum rig__qp_state state;
	struct rig_endpoint self;
	struct rig__list link;		/* in nic->qps */
	/* The failure record: the first failure, kept for every later
	 * completion of both rings (rig(7) F3). */
	enum rig__cause cause;
	int error;
	const char *why;
	int wc_status;			/* the verbs status behind it, or -1 */
	bool flushed;			/* a flush was reaped before any reason */
	uint8_t distrust;		/* 1 << side: drop that ring's CQEs */
	/* Per ring, under the loop's lock: completion events read but not
	 * yet acked (ibv_ack_cq_events takes a mutex: ack in batches), and
	 * the thread sleeping in rig_qp_wait, or NULL. */
	unsigned unacked[2];
	struct rig__consumer *sleeper[2];
	/* Its CQs are being destroyed (events_forget): whoever reads one of
	 * their events acks it at once and tells nobody. Under the lock. */
	bool forgotten;
	struct rig__news news[2];	/* loop.c: each ring's place in the news */
	/* wait.c: the rings a wait armed whose event nobody has read yet
	 * (1 << side; events.c clears a bit when it reads the event), each
	 * ring's tail when it was armed, and each ring's spin; but for the
	 * bits, only the owner's thread touches them (C3). */
	uint8_t armed;
	uint32_t armed_tail[2];
	struct rig__spin {
		int32_t mean_ns;	/* of the waits the spin caught */
		uint32_t misses;	/* spins in a row that caught nothing */
	} spin[2];
	/* Set before the queue pair is handed out (so read by its
	 * destroyer without a lock), cleared under the loop's cm_lock by
	 * the owner, which also takes the queue pair off the liveness
	 * list: the liveness pass reads it under cm_lock. */
	struct rig__qp_owner *owner;
	/* The connection's, under the NIC's lock: the rdma_cm ports (ours, the
	 * peer's; network order) of the connection it was made for, 0 when
	 * none: M4's proof that a peer naming it is its other end. */
	uint16_t cm_port[2];
	/* Made in nic->far_pd: a connection by address facing another host
	 * (rig(7) M4); its posts take each region's far_lkey. */
	bool far;
	/* Who the connect named (rig_qp_peer): set once, before the queue
	 * pair leaves RESET, and read by any thread after. */
	bool peer_known;		/* the fields below are set */
	uint32_t peer_qpn;
	uint8_t peer_gid[16];
	char peer[64];
	/* Set by events.c, from any thread, for the owner to apply:
	 * ENODEV for the device, ECONNRESET for a peer that left, any
	 * other error for an async queue-pair event. */
	int event_error;
	const char *event_why;
	bool event_taken;		/* the owner applied it (ring.c) */
	/* Set by events.c when the queue pair is listed: tells both rings'
	 * consumers of a failure that a poll or a post of the owner found
	 * (ring.c calls it once, on the first failure it records, and never
	 * for an event: events.c told of that). Any thread may wait on the
	 * other ring or on the loop's news for it. */
	void (*rings_failed)(struct rig__qp *qp);
	/* rig_qp_stats, counted on the slow paths only: per ring, by the
	 * owner's thread; async_events by any thread, atomically. */
	uint64_t full[2];
	uint64_t slept[2];
	uint64_t completed[2];
	uint64_t async_events;
	/* The application's (rig_qp_set_cookie), handed out with every
	 * piece of the loop's news of it; atomic: the loop's thread reads
	 * it, the owner's writes it. */
	uint64_t cookie;
	/* rig_qp_close was called (set atomically by the owner's thread):
	 * the loop lists and hands out no news of it any more. */
	bool closing;
	/* Liveness (rig(7) LIVENESS): its peer is a rig that takes probes
	 * (a connection by address), and its place in loop->live; a probe
	 * is on the wire or its CQE not yet read; the probe's CQE failed
	 * the queue pair; probes posted. Touched by the loop's thread and by
	 * the owner's reads of the send CQ, one thread (rig(7) LIVENESS).
	 * live and live_link change under the loop's cm_lock and live_lock
	 * both (rig__loop_live_add, rig__loop_live_del); live is read
	 * atomically without them. */
	bool live;
	struct rig__list live_link;
	unsigned live_slice;		/* the pass of the interval it is probed in */
	bool probe_out, probe_failed;
	int lost;			/* the pass's finding, for the owner */
	uint64_t probes;
	/* The peer's sink ("rig3"), which the probes write one byte of;
	 * without one ("rig2") they are zero-length writes with rkey 0
	 * (ring.c, rig__qp_probe). Set before the queue pair is listed. */
	bool probe_sink;
	uint32_t probe_rkey;
	uint64_t probe_addr;
	/* Rings deeper than the NIC's queues (rig(7) Q4; ring.c), set at
	 * make when pub.ring[].depth < RIG_RING_ENTRIES. While a ring's
	 * RIG__WAITING bit is set, its entries [fed, head) wait in it,
	 * their requests in waiting[] (made on first use); its posts and
	 * polls go to the slow paths, which take feed_lock, as the loop's
	 * thread does when it moves entries to the NIC (rig__qp_feed). */
	bool shallow;
	pthread_spinlock_t feed_lock;
	/* The queue pair's loop lists news, so its thread moves waiting
	 * entries too, reading the CQs (rig__qp_feed). Until then no thread
	 * but the owner reads them: the owner's inline poll takes the
	 * completions of a ring whose entries wait, and goes out of line
	 * only at refill_at (rig__ring_refill). Set by the owner under
	 * feed_lock, at a slow call's end (post.c, settle), for good. */
	bool loop_moves;
	uint32_t fed[2];
	struct rig__waiting *waiting[2];
	/* Bit 1 << side: that ring's CQ was found empty during the slow
	 * call under way (reset when feed_lock is taken), so a feed that
	 * finds the NIC's queue full reads it once per call, not once per
	 * step (post.c, reap_once). rig__ring_drained() sets it. */
	uint32_t drained;
	/* rig_qp_stats of the backlog, per ring: entries that waited (the
	 * owner's posts count them), and feeds that found the NIC's queue
	 * empty with entries waiting (post.c, feed_ring; the loop's thread
	 * feeds too, so atomic). */
	uint64_t waited[2];
	uint64_t ran_dry[2];
};

/* The wr_id of a liveness probe: no entry's (an entry's is its 32-bit
 * sequence number). */
#define RIG__PROBE_WR_ID UINT64_MAX

static inline struct rig__qp *rig__qp(struct rig_qp *qp)
{
	return container_of(qp, struct rig__qp, pub);
}

/* rig_qp.lkey_at of a queue pair in the far protection domain or not. */
static inline uint32_t rig__lkey_at(bool far)
{
	return far ? offsetof(struct rig__region, far_lkey)
		   : offsetof(struct rig_region, lkey);
}

/* region.c: gives back the handles of @nic's regions, once their MRs
 * are deregistered. */
void rig__regions_free(struct rig_nic *nic);
/* region.c: registers @nic's sink (made on the first call) in @pd, the
 * MR in *@mr (rig-wire(7) LIVENESS); 0 or -errno. rig__sink_free
 * deregisters and frees it. */
#define RIG__SINK_SIZE 64
int rig__sink_register(struct rig_nic *nic, struct ibv_pd *pd, struct ibv_mr **mr);
int rig__sink_free(struct rig_nic *nic);
/* The sink's registration in @qp's protection domain: its rkey goes to
 * the peer, its lkey is the source of @qp's probes. */
static inline struct ibv_mr *rig__sink_mr(const struct rig__qp *qp)
{
	return qp->far ? qp->nic->far_sink_mr : qp->nic->sink_mr;
}


/* ring.c: records @qp's first failure (rig(7) F3), and tells both rings'
 * consumers through @qp->rings_failed; later ones do neither. */
void rig__qp_failed(struct rig__qp *qp, enum rig__cause cause, int error,
		    const char *why, int wc_status);
/* post.c: moves entries waiting in @qp's rings to the NIC as far as its
 * depth allows (rig(7) Q4); any thread (the loop's, at a hand-out):
 * it takes the queue pair's feed_lock and does nothing unless the owner
 * has left entries waiting. */
void rig__qp_feed(struct rig__qp *qp);
/* The ring's counts (ring.c explains them; inline, for the slow paths
 * of a ring with entries waiting run on every post and poll). Whether
 * @qp failed: */
static inline bool rig__ring_failed(const struct rig__qp *qp)
{
	return qp->cause != RIG__CAUSE_NONE;
}

/* Whether entries may wait in ring @side beyond the NIC's depth
 * (rig(7) Q4), fed[side] then counting what went to the NIC: */
static inline bool rig__ring_backlog(const struct rig__qp *qp, int side)
{
	return __atomic_load_n(&qp->pub.broken, __ATOMIC_ACQUIRE) & RIG__WAITING(side);
}

/* The room a move of @side waits for: a chain of receives, a quarter
 * of the NIC's depth (at least one, at most RIG_BATCH_MAX / 4), or one
 * send (post.c, feed_ring; rig(7) Q4). */
static inline uint32_t rig__ring_move(const struct rig__ring *ring, int side)
{
	uint32_t k = ring->depth / 4;

	if (side == RIG_SEND)
		return 1;
	return k < 1 ? 1 : k > RIG_BATCH_MAX / 4 ? RIG_BATCH_MAX / 4 : k;
}

/*
 * refill_at[side], which the inline poll compares its tail with (rig/qp.h,
 * rig__qp_poll_out), from fed: for an owner alone (!loop_moves), the tail
 * at which one more completion taken gives the NIC's queue room for a
 * move (tail + depth - fed reaches the move less one), so that the poll
 * that takes it goes out of line and makes the move, as every poll of
 * the ring did before the inline poll took them; else fed - RIG__SLOTS,
 * a tail the ring has passed already (tail >= head - RIG_RING_ENTRIES),
 * so that every poll of the ring goes out of line, to take feed_lock
 * beside the loop's thread.
 */
static inline void rig__ring_refill(struct rig__qp *qp, int side)
{
	const struct rig__ring *ring = &qp->pub.ring[side];
	uint32_t behind = qp->loop_moves ? RIG__SLOTS
					 : ring->depth - rig__ring_move(ring, side) + 1;

	__atomic_store_n(&qp->pub.refill_at[side], qp->fed[side] - behind, __ATOMIC_RELAXED);
}

/*
 * fed[side] moves here and in rig__ring_begin_waiting() only, on every
 * thread (post.c's feeds and posts, ring.c's F6): @n more entries of @side,
 * from fed on, went to the NIC (a feed, or a post while the ring's bit
 * is set and nothing waits), or never will (F5, F6). Nothing while the
 * bit is clear: head is the count then. Stored whole: the owner reads fed
 * without feed_lock when it appends behind waiting entries (post.c).
 */
static inline void rig__ring_gave(struct rig__qp *qp, int side, uint32_t n)
{
	if (rig__ring_backlog(qp, side)) {
		__atomic_store_n(&qp->fed[side], qp->fed[side] + n, __ATOMIC_RELAXED);
		rig__ring_refill(qp, side);
	}
}

/* Entries of @side start to wait, from head on: fed stops at head, and
 * the ring's bit tells the inline code (the owner, feed_lock held). */
static inline void rig__ring_begin_waiting(struct rig__qp *qp, int side)
{
	__atomic_store_n(&qp->fed[side], qp->pub.ring[side].head, __ATOMIC_RELAXED);
	rig__ring_refill(qp, side);
	__atomic_or_fetch(&qp->pub.broken, RIG__WAITING(side), __ATOMIC_RELEASE);
}

/* The next entry of @side to go to the NIC: */
static inline uint32_t rig__ring_fed(const struct rig__qp *qp, int side)
{
	return rig__ring_backlog(qp, side) ? qp->fed[side] : qp->pub.ring[side].head;
}

/* Entries of @side the NIC holds whose CQEs the library has not read: */
static inline uint32_t rig__ring_at_nic(const struct rig__qp *qp, int side)
{
	const struct rig__ring *ring = &qp->pub.ring[side];

	return rig__ring_fed(qp, side) - ring->tail - ring->ahead;
}

/* Whether entries of @side wait beyond the NIC's depth: */
static inline bool rig__qp_waiting(const struct rig__qp *qp, int side)
{
	return rig__ring_backlog(qp, side) &&
	       qp->fed[side] != __atomic_load_n(&qp->pub.ring[side].head, __ATOMIC_ACQUIRE);
}

/*
 * feed_lock, taken when @qp is shallow, by every slow path of a ring
 * with entries waiting (each post and poll of it) and by the loop's
 * thread when it moves them. A spinlock, as rdma-core's providers guard
 * their queues (providers/rxe/rxe.c and mlx5's qp->sq.lock): held for
 * a few loads and stores, or the posts of what the NIC has room for, and
 * a mutex's lock and unlock (70 instructions, glibc) cost more than the
 * rest of a receive's slow path (callgrind, bench/ icount -r). It also
 * starts a slow call afresh: no CQ read yet (qp->drained).
 */
static inline void rig__ring_feed_lock(struct rig__qp *qp)
{
	if (qp->shallow) {
		pthread_spin_lock(&qp->feed_lock);
		__atomic_store_n(&qp->drained, 0, __ATOMIC_RELAXED);
	}
}

static inline void rig__ring_feed_unlock(struct rig__qp *qp)
{
	if (qp->shallow)
		pthread_spin_unlock(&qp->feed_lock);
}

/* Marks @side's CQ found empty in this slow call (qp->drained). The
 * loop's thread reads the send CQ of an idle ring for a probe's CQE
 * without feed_lock, so the word is read and written whole, not with a
 * locked read-modify-write (which the hot slow path would pay each
 * poll): a bit lost between the two threads costs one CQ read more. */
static inline void rig__ring_drained(struct rig__qp *qp, int side)
{
	__atomic_store_n(&qp->drained,
			 __atomic_load_n(&qp->drained, __ATOMIC_RELAXED) | 1u << side,
			 __ATOMIC_RELAXED);
}

/* ring.c's one way to change a ring's ahead: the owner's inline poll
 * reads it atomically (rig__ring_ahead) while the loop's thread may be
 * reaping the ring under feed_lock (rig(7) Q4). */
static inline void rig__ring_set_ahead(struct rig__ring *ring, uint32_t ahead)
{
	__atomic_store_n(&ring->ahead, ahead, __ATOMIC_RELAXED);
}

/* ring.c, for post.c (the slow posts above it): a CQE reaped, a ring
 * reaped; the slow poll. */
void rig__ring_reap_one(struct rig__qp *qp, enum rig_side side, const struct ibv_wc *wc);
void rig__ring_reap(struct rig__qp *qp, enum rig_side side);
int rig__ring_poll_slow(struct rig_qp *pub, enum rig_side side, const struct ibv_wc *wc,
			int n, bool drained, struct rig_completion *c);
/* ring.c: one liveness pass over @qp, on its loop's thread: reads the
 * CQE of its last probe if its send ring is idle, and posts the next
 * probe if none is out. Returns the -errno the probe's CQE failed @qp
 * with, once; else 0. */
int rig__qp_probe(struct rig__qp *qp);

/* events.c, the demultiplexer: */
/* makes @fd non-blocking; 0 or -errno, with @what in the message. */
int rig__set_nonblock(int fd, const char *what);
/* which of @loop's sources are readable now (RIG__SOURCE_*); CM is its
 * rdma_cm channel and the shared listeners' fds, TIMER its timer. */
enum { RIG__SOURCE_CHANNEL = 1, RIG__SOURCE_ASYNC = 2, RIG__SOURCE_CM = 4,
       RIG__SOURCE_NEWS = 8, RIG__SOURCE_TIMER = 16 };
unsigned rig__events_ready(struct rig_loop *loop);
/* makes @loop's channel and fd set; undoes it. */
int rig__events_open(struct rig_loop *loop);
void rig__events_close(struct rig_loop *loop);
/* reads @loop's pending completion events, acks, tells the consumers. */
void rig__events_take(struct rig_loop *loop);
/* the same with the loop's lock held; the caller tells the watcher done. */
void rig__events_take_locked(struct rig_loop *loop);
/* reads @loop's rdma_cm events and expired timer, for its cm consumer,
 * within a time budget; true if events remain. @sources (RIG__SOURCE_*):
 * which of the channel and the timer may be readable, the others are
 * not read. */
bool rig__events_take_cm(struct rig_loop *loop, unsigned sources);
/* reads @loop's rdma_cm events for a wait: notes them, takes no step. */
void rig__events_note_cm(struct rig_loop *loop);
/* reads the NIC's async events and fails their queue pairs; a NIC found
 * dead fails them all and is never read again. Returns how many events
 * it read, or -errno. */
int rig__events_async(struct rig_nic *nic);
/* takes a dead NIC's fds out of @loop's fd set; the NIC's lock is held. */
void rig__events_drop_dead(struct rig_loop *loop);
/* records a failure of @qp from outside its rings (an async event, the
 * peer leaving) and tells the consumers of both rings; any thread. */
void rig__events_fail_qp(struct rig__qp *qp, int error, const char *why);
/* tells @qp's loop of it (the loop arms it if watched); the caller
 * holds the NIC's lock, under which it listed @qp (see qp.c). */
void rig__events_add(struct rig__qp *qp);
/* before @qp goes (its QP destroyed, its
 * CQs not yet): drains and acks what its CQs owe, and tells the
 * consumers to forget it. The CQs are destroyed by @destroy_cqs under
 * the loop's lock, before any other thread can read an event for them. */
void rig__events_forget(struct rig__qp *qp, void (*destroy_cqs)(struct rig__qp *));
/* reads @loop's completion events, telling the consumers, until one for
 * @qp's ring @side or none is left; true if it read that one. */
bool rig__events_take_until(struct rig_loop *loop, struct rig__qp *qp, int side);
/* how many loops have closed so far (a thread's polls may name one). */
uint64_t rig__events_closed(void);
/* sets the consumer sleeping on @qp's ring @side, or NULL. */
void rig__events_set_sleeper(struct rig__qp *qp, int side, struct rig__consumer *c);
/* arms @loop's timer for @deadline_ns (CLOCK_MONOTONIC), 0 to disarm:
 * the handshakes' deadline; the timer fires at it or at the loop's next
 * liveness pass, the earlier. cm_lock held. */
void rig__events_set_timer(struct rig_loop *loop, int64_t deadline_ns);
/* re-arms @loop's timer after loop->live_next changed; cm_lock held. */
void rig__events_timer_update(struct rig_loop *loop);
/* adds @fd to @loop's fd set as one of its rdma_cm sources, or takes it
 * out (a shared listener's channel and timer); 0 or -errno. */
int rig__events_watch_cm_fd(struct rig_loop *loop, int fd);
void rig__events_unwatch_fd(struct rig_loop *loop, int fd);
/* a new non-blocking rdma_cm event channel; 0 or -errno. */
int rig__events_new_cm_channel(struct rdma_event_channel **out);
/* makes @loop's rdma_cm channel if it has none; 0 or -errno. */
int rig__events_cm_channel(struct rig_loop *loop,
			   const struct rig__cm_consumer *consumer);

/* qp.c: rig_qp_connect(), with M4's "same NIC" allowed only if
 * @may_be_local, and the route rdma_cm resolved (NULL: the NIC's GID,
 * traffic class 0, hop limit 64, the port's active MTU) with the MTU the
 * peer gave (enum ibv_mtu; 0 when it gave none): the path MTU is the
 * smaller of its and the port's. Destroys and frees a queue pair. */
struct rig__route {
	uint8_t sgid_index;
	uint8_t traffic_class;
	uint8_t hop_limit;
	uint32_t flow_label;
	uint8_t peer_mtu;
	/* The route's own MTU (enum ibv_mtu), from rdma_cm: its netdev's,
	 * which may be smaller than the port's (a VLAN's); 0: none given. */
	uint8_t path_mtu;
	/* The port's active MTU as the connection read it for its own
	 * endpoint (enum ibv_mtu); 0: read it now. */
	uint8_t port_mtu;
	char peer[64];			/* rdma_cm's peer address and port */
};
int rig__qp_connect(struct rig_qp *qp, const struct rig_endpoint *peer,
		    bool may_be_local, const struct rig__route *route);
/* qp.c: rig_qp_make_in(), in the NIC's far protection domain if @far
 * (rig(7) M4): for a connection by address whose peer is not this NIC. */
int rig__qp_make(struct rig_loop *loop, bool far, struct rig_qp **out);
int rig__qp_free(struct rig__qp *qp);
/* qp.c: rig__qp_free() but for the last free(): 0, and the NIC holds
 * nothing of @qp; or -errno, and it stays listed for rig_nic_close. */
int rig__qp_teardown(struct rig__qp *qp);

/* loop.c: queues @n for the application if it is not queued yet; runs
 * @job on the loop's helper thread (0, or -errno when no thread can take
 * it: run it yourself); rig_nic_open's and rig_nic_close's own loop. */
void rig__loop_post(struct rig_loop *loop, struct rig__news *n);
/* loop.c: withdraws @n if it is queued; true if it was still waiting,
 * false if it was handed out already (or never posted). */
bool rig__loop_unpost(struct rig_loop *loop, struct rig__news *n);
int rig__loop_defer(struct rig_loop *loop, struct rig__job *job);
/* loop.c: the loop of @qp, a connection's that is up, probes it from
 * its next liveness pass on; cm_lock held. */
void rig__loop_live_add(struct rig__qp *qp);
/* loop.c: @qp is probed no more; cm_lock held. */
void rig__loop_live_del(struct rig__qp *qp);
/* loop.c: the loop's next pass runs its connection layer's turn (news
 * pending keeps rig_loop_fd readable), wherever the work came from. */
void rig__loop_wake(struct rig_loop *loop);
/* loop.c: marks @qp closing, its rings' news withdrawn for good. */
void rig__loop_closing(struct rig__qp *qp);
int rig__loop_open(struct rig_nic *nic, struct rig_loop **out);
int rig__loop_free(struct rig_loop *loop);

/* errmsg.c: clear this thread's rig_errmsg(), after a call that
 * succeeded on a later try. */
void rig__clear_error(void);
/* errmsg.c: while held, this thread's rig_errmsg() is the caller's
 * again once the hold is released: a call that succeeds whatever the
 * work it did on the side found (a loop's pass over its connections)
 * leaves the message alone (rig(7) C1). Holds nest. */
void rig__errmsg_hold(void);
void rig__errmsg_release(void);
/* errmsg.c: set this thread's rig_errmsg() and return -err. */
int rig__fail(int err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int rig__fail_verbs(int err, const struct rig_nic *nic, const char *step);
/* errmsg.c: the log level in force (rig_set_log, else RIG_LOG); a line
 * for the log if @level is in force. Slow paths only. */
int rig__log_level(void);
void rig__log(enum rig_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

#endif
