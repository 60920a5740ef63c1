/* SPDX-License-Identifier: MIT */
#ifndef RIG_CONN_H
#define RIG_CONN_H
/*
 * The connection layer (include/rig/cm.h): connections by address, what
 * its files share. rdma_cm carries the endpoints and resolves addresses;
 * the queue pair is rig's own, connected by rig_qp_connect, so its
 * timeouts and access rules are the same as for an endpoint exchanged
 * any other way. Its files, each calling only those below it:
 *
 *	listen_shared.c  rig_loops_listen: one listener, many loops
 *	listen.c         a loop's own listener and rig_listen: admission,
 *	                 requests waiting for a turn, rig_accept
 *	dial.c           rig_loop_dial and rig_dial
 *	drive.c          what drives the steps: a loop's pass (the consumer
 *	                 events.c calls), or a blocking call's pump
 *	handshake.c      the steps, one per rdma_cm event, and the deadlines
 *	conn.c           a connection's life, and the counts it holds
 *	ids.c            rdma_cm ids: destroyed off the loop, events kept
 *	route.c          addresses, routes and M4's local peer
 *
 * A listener of either kind is reached through its ops (as libuv's
 * handles through their type), so that the lower files never name the
 * higher ones.
 */
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <rdma/rdma_cma.h>

#include "internal.h"

/* Address and route resolution: rdma_cm wants a bound of its own; the
 * caller's bound applies too. */
#define RIG_CM_RESOLVE_MS 2000
#define RIG_CM_BACKLOG 1024
/* A loop's dials under way at once; the rest wait their turn
 * (CONN_QUEUED) with an id and nothing more. Each under way costs a
 * queue pair made ahead of its answer: more would only wait on the
 * helper, and would take more of a listener's RIG_CM_HANDSHAKES. */
#define RIG_CM_DIALS 16
/* The loop's time one pass of the deadlines may take. */
#define RIG_CM_TICK_BUDGET_NS 5000000

/* What an rdma_cm id's context points to. */
enum cm_kind { CM_LISTENER, CM_CONN };

enum conn_state {
	CONN_QUEUED,
	CONN_RESOLVING_ADDR,
	CONN_RESOLVING_ROUTE,
	CONN_MAKING,
	CONN_CONNECTING,
	CONN_ESTABLISHING,
	CONN_ACCEPTING,
	CONN_OWING,
	CONN_UP,
	CONN_DONE,
};

/*
 * Where a connection is (conn.home), all under its loop's cm_lock:
 *	HANDSHAKE  in loop->handshakes: a loop's handshake under way
 *	HALF_OPEN  in its listener's half_open: rig_listen's, under way
 *	ACCEPTED   in its listener's accepted: up, not yet taken by rig_accept
 *	NONE       on no list: up and the application's (its queue pair's
 *	           release hook ends it), rig_dial's until it returns, or
 *	           the helper's until it finishes a step that failed
 *	NEWS       on no list: a loop's dial that failed, all it held given
 *	           back; its DIALED news frees it when handed out
 */
enum conn_home { HOME_NONE, HOME_HANDSHAKE, HOME_HALF_OPEN, HOME_ACCEPTED,
		 HOME_NEWS };

/* Where a loop's dial is in the loop's count of dials (conn.c owns it). */
enum dial_place { DIAL_NONE, DIAL_QUEUED, DIAL_UNDER_WAY };

/* What a step needs of an event, copied so the event can be acked first
 * (rdma_destroy_id waits for the acks of its events). The id's context
 * is copied too: once the event is acked, a connection's id may be
 * destroyed by the helper (release) and must not be read. */
struct cm_ev {
	enum rdma_cm_event_type type;
	int status;
	struct rdma_cm_id *id, *listen_id;
	void *context;
	uint8_t priv[64];
	size_t priv_len;
};

struct rig_listener;

/* What a listener does, by its kind: a loop's own or rig_listen's
 * (listen.c), or rig_loops_listen's and its parts (listen_shared.c). */
struct listener_ops {
	/* A request read from the listener's id (@l's loop's cm_lock held). */
	void (*request)(struct rig_listener *l, const struct cm_ev *ev);
	/* Each pass of @l's loop (cm_lock held); true if work remains. */
	bool (*turn)(struct rig_listener *l, int64_t end);
	/* @l's loop closes: @l and what it holds go (cm_lock held). */
	void (*drop)(struct rig_listener *l);
	/* rig_listener_close(@l); no lock held. */
	int (*close)(struct rig_listener *l);
	/* A turn came free at @head while requests wait there: whoever
	 * admits them must look (a loop's cm_lock held). */
	void (*turn_freed)(struct rig_listener *head);
};

struct shared;

struct rig_listener {
	enum cm_kind kind;
	const struct listener_ops *ops;
	/* The listener whose turns its handshakes take and where requests
	 * wait: itself, or a part's shared listener (set once). */
	struct rig_listener *head;
	struct rig_loop *loop;		/* NULL for a shared one's head */
	struct rdma_cm_id *id;
	struct rdma_event_channel *ch;	/* rig_listen's own, the loop's, or shared */
	bool blocking;			/* rig_listen: rig_accept takes them */
	uint64_t cookie;
	struct rig__list link;		/* in loop->listeners, under cm_lock */
	/* rig_listen's, under cm_lock: handshakes under way, and connections
	 * up that rig_accept has not handed out yet; -EPROTO once a request
	 * with garbage was rejected. */
	struct rig__list half_open, accepted;
	int rejected;
	/* A head's turns: handshakes under way, at most RIG_CM_HANDSHAKES
	 * (atomic; taken and given back by conn.c alone). */
	unsigned handshakes;
	/* A head of a loop's listener or of a shared one: requests beyond
	 * RIG_CM_HANDSHAKES waiting their turn, oldest first (a loop's under
	 * cm_lock, a shared one's under its lock; the count atomic), and
	 * when a handshake of it last came up (atomic): the waiting go once
	 * none has for RIG_CM_HALF_OPEN_MS. */
	struct rig__list waiting;
	unsigned n_waiting;
	int64_t last_up;
	/* rig_loops_listen: the listener this is a member loop's part of
	 * (in that loop's listeners, no id of its own), or whose head it is;
	 * a part is leaving (atomic) once the listener is closed, and its
	 * loop drops it on its next pass. */
	struct shared *group;
	bool leaving;
};

struct answer;

/* A connection, by address; all its fields under its loop's cm_lock but
 * where said. */
struct conn {
	enum cm_kind kind;
	struct rig_loop *loop;
	struct rdma_cm_id *id;
	/* The accepting side's listener while its handshake holds one of
	 * the head's turns (conn.c: turn_take, turn_give). */
	struct rig_listener *listener;
	bool accepting;
	bool blocking;			/* rig_dial's or rig_listen's */
	enum dial_place dial;		/* conn.c: dial_queue, dial_start_turn */
	bool counted;			/* holds a share of loop->cm_held */
	struct sockaddr_storage dst;	/* a dial's, for its start */
	enum conn_state state;
	enum conn_home home;
	struct rig__list link;		/* in the list home names, if any */
	int result;			/* once CONN_DONE or CONN_UP */
	int64_t started;		/* for conn_done's probe; 0 once told */
	int64_t deadline;		/* while half-open */
	uint64_t cookie;
	struct rig__qp *qp;
	struct rig_endpoint peer;
	uint8_t peer_mtu;		/* its port's (enum ibv_mtu), 0: not given */
	/* The form the peer spoke, 1 to 3 ("rig1" to "rig3"), and the
	 * sink its "rig3" gave (else zeros), for the liveness probes. */
	uint8_t peer_form;
	struct rig_cm_sink peer_sink;
	uint8_t path_mtu;		/* our route's (route_resolved), 0: not read */
	uint8_t port_mtu;		/* our port's (route_port_mtu), 0: not read */
	/* The endpoint's GID is the address rdma_cm connected to, so the
	 * peer may be one of our own queue pairs (M4). */
	bool may_be_local;
	struct rig__qp_owner qp_owner;
	struct rig__news up, gone;	/* ACCEPTED or DIALED, then GONE */
	/* A loop's: its news went out before the handshake's end (OWING),
	 * and was handed out (set atomically under the loop's lock by its
	 * thread); the answer it owes. */
	bool early;
	bool handed;
	/* Our private data: the answer owed, in the form the request came
	 * in ("rig1" to a peer that gave no MTU), and its length. */
	uint8_t priv[RIG_CM_PRIVATE_SINK];
	uint8_t priv_len;
	bool established;		/* up() came: a disconnect ends it */
	/* The accepting side's answer went: its REP waits for the RTU,
	 * resent until the CM's retries run out. Only the id's destroy
	 * cancels it; after rdma_reject, the destroy waits for those
	 * retries (tens of seconds). */
	bool replied;
	/* A step's slow part and what follows it; while in_job, the helper
	 * thread runs them and owns qp. */
	struct rig__job job;
	bool in_job;
	/* The departed peer's answer, while the helper owes it (ids.c): the
	 * id is the answer's to destroy if the connection ends first. */
	struct answer *answer;
	int (*slow)(struct conn *c);
	void (*then)(struct conn *c, int ret);
};

/* A request waiting its turn at a listener, or handed from the loop that
 * read it to the one that serves it (rig_loops_listen). A shared
 * listener's request holds one of the head's turns from its reading on
 * (turn), and one of the serving loop's shares while in its inbox. */
struct handoff {
	struct rig__list link;		/* in a head's waiting, or a cm_inbox */
	struct rig_listener *part;	/* the serving loop's part */
	struct cm_ev ev;
	int64_t at;			/* when it came to wait, or was handed */
	bool turn;
};

/* An event a wait read, kept for the loop (in loop->cm_kept). */
struct kept {
	struct rig__list link;
	struct cm_ev ev;
};

/* The name a failure's message gives the call that drove @c. */
static inline const char *step_name(const struct conn *c)
{
	if (c->accepting)
		return c->blocking ? "rig_accept" : "rig_loop_listen";
	return c->blocking ? "rig_dial" : "rig_loop_dial";
}

/* route.c: addresses and what rdma_cm resolved */
int route_sockaddr(const char *addr, uint16_t port, struct sockaddr_storage *ss);
bool route_wildcard(const struct sockaddr_storage *ss);
int route_same_device(const struct rig_nic *nic, const struct rdma_cm_id *id,
		      const char *step);
bool route_gid_of_address(const struct sockaddr *sa, uint8_t gid[16]);
bool route_peer_may_be_local(struct conn *c);
bool route_peer_is_self(struct conn *c);
bool route_peer_ip(struct rdma_cm_id *id, char ip[INET6_ADDRSTRLEN]);
int route_resolved(struct conn *c, struct rig__route *r);
uint8_t route_mtu(const struct conn *c, enum ibv_mtu active);
int route_port_mtu(struct conn *c, uint8_t *mtu);
void route_conn_param(struct rdma_conn_param *p, const uint8_t *priv, uint8_t len,
		      const struct rig__qp *qp);
int64_t route_deadline_after(int64_t us);

/* ids.c: rdma_cm ids, all with cm_lock held */
void id_drop(struct rig_loop *loop, struct rdma_cm_id *id, bool reject);
void id_refuse(struct rig_loop *loop, struct rdma_cm_id *id);
void id_forget_kept(struct rig_loop *loop, const struct rdma_cm_id *id);
void id_answer(struct conn *c);
struct rdma_cm_id *id_take(struct conn *c);

/* conn.c: a connection's life and its counts */
struct conn *conn_new(struct rig_loop *loop, bool blocking, uint64_t cookie);
void conn_set_home(struct conn *c, enum conn_home home, struct rig__list *list);
void conn_end(struct conn *c, int result);
void conn_discard(struct conn *c, int result);
void conn_fail(struct conn *c, int err);
void conn_finish(struct conn *c);
void conn_up(struct conn *c);
void conn_hand_early(struct conn *c);
void conn_lose(struct conn *c, int err, const char *why);
void share_take(struct rig_loop *loop);
void share_give(struct rig_loop *loop);
bool turn_take(struct rig_listener *head);
void turn_give(struct rig_listener *head);
void dial_queue(struct conn *c);
bool dial_start_turn(struct conn *c);
int64_t wait_end_of(const struct rig_listener *head, int64_t at);
int64_t wait_end(const struct rig_listener *head);
bool requests_wait(const struct rig_listener *head);

/* handshake.c: the steps */
void handshake_off_loop(struct conn *c, enum conn_state state, int (*slow)(struct conn *),
			void (*then)(struct conn *, int));
int handshake_make_and_connect(struct conn *c);
void handshake_accept_answer(struct conn *c, int ret);
int handshake_dial_start(struct conn *c, const char *addr, struct sockaddr_storage *ss);
void handshake_step(const struct cm_ev *ev);
void handshake_take_event(struct rdma_cm_event *raw, struct cm_ev *ev);
void handshake_pay_owed(struct rig_loop *loop);
void handshake_deadlines(struct rig_loop *loop);
void handshake_dials_next(struct rig_loop *loop);
void handshake_rearm(struct rig_loop *loop);
bool handshake_departure(enum rdma_cm_event_type type);
int handshake_departure_err(enum rdma_cm_event_type type);
const char *handshake_departure_why(enum rdma_cm_event_type type);

/* drive.c: what takes the steps */
int drive_channel(struct rig_loop *loop);
int drive_pump(struct rig_loop *loop, struct rdma_event_channel *ch, int64_t deadline,
	       const char *step_name);
int drive_move_to_loop(struct conn *c);

/* listen.c: a loop's own listener and rig_listen */
void listen_request(struct rig_listener *l, const struct cm_ev *ev);
void listen_turn_away(struct rig_listener *head);
void listen_init(struct rig_listener *l, const struct listener_ops *ops,
		 struct rig_loop *loop, uint64_t cookie);

#endif
