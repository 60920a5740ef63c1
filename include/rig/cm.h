/* SPDX-License-Identifier: MIT */
#ifndef RIG_CM_H
#define RIG_CM_H
/*
 * Connecting by address, with librdmacm. The two sides exchange their
 * endpoints (the 30-byte wire form, after a 4-byte tag "rig3", then the
 * MTU code of their port and their sink for the liveness probes) in the
 * connection manager's private data and connect as rig_qp_connect()
 * does, so the queue pairs follow exactly the rules of rig(7) M3 and M4,
 * with the smaller MTU of the two as their path MTU. They also accept
 * rig_cm_pack_mtu()'s and rig_cm_pack()'s forms, which give no sink or
 * no MTU (rig(7) CONNECTIONS BY ADDRESS), and a listener answers in the
 * request's form. The peer's private data is untrusted:
 * rig_cm_parse_sink() reads it.
 * rig-wire(7) is the protocol, for a peer that is not rig.
 *
 * A connection owns its queue pair: rig_qp_destroy() disconnects it.
 * While it lives, its loop watches it: when the peer leaves (its process
 * exits or is killed, it destroys its queue pair or closes its NIC), the
 * queue pair fails at once with -ECONNRESET, as an async event fails it
 * (rig(7) F1, F6), and the loop hands out RIG_NEWS_GONE. When the peer's
 * host vanishes without a word, the loop's liveness probes fail it with
 * -ETIMEDOUT, idle or not (rig_loop_liveness(), rig(7) L1). Queue pairs
 * connected by exchanging endpoints some other way learn it only from
 * the transport's retries, and only when they send.
 *
 * Two ways to drive the handshake, over the same steps:
 * - in a loop (loop.h): rig_loop_listen() and rig_loop_dial() never block
 *   for more than one control system call; accepted connections and each
 *   dial's outcome come out of rig_uring_handle() as news, and the
 *   bounds run on the loop's clock (a timer in rig_loop_fd());
 * - blocking, for programs without a loop: rig_listen() with rig_accept(),
 *   and rig_dial().
 * In a loop, each side gets its queue pair before the peer can send to
 * it: RIG_NEWS_ACCEPTED and RIG_NEWS_DIALED come out as soon as the queue
 * pair is at RTS, and the handshake's next message (the listener's
 * answer, the dialer's last one) goes out at the loop's next
 * rig_uring_handle() or rig_loop_handle() call after the news was handed
 * out. Receives posted while handling the news are in place before the
 * peer can send, so the dialer may speak the moment RIG_NEWS_DIALED
 * comes. A listener that sends on RIG_NEWS_ACCEPTED sends before the
 * dialer has the answer: the transport resends it until the dialer is
 * ready, each resend spending one of its retries; let the dialer speak
 * first. A handshake that fails after its news fails the queue pair, and
 * RIG_NEWS_GONE says so. rig_accept() and rig_dial() hand out queue pairs
 * that are up.
 * A handshake the peer leaves half-done is dropped RIG_CM_HALF_OPEN_MS
 * after rig's answer.
 * A listener keeps at most RIG_CM_HANDSHAKES under way. A loop's listener
 * lets up to RIG_CM_WAITING requests beyond them wait for a turn, oldest
 * first, while its handshakes come up; it rejects a request once none has
 * for RIG_CM_HALF_OPEN_MS since it came, and those beyond (the client's
 * dial ends with -ECONNREFUSED; it may try again). rig_listen's rejects every request beyond. So a
 * flood of requests costs a reject or a wait each, not a queue pair each.
 * Closing a listener drops its handshakes under way and rejects the
 * requests waiting.
 */
#include <stddef.h>
#include <stdint.h>

#include <rig/endpoint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rig_nic;
struct rig_qp;
struct rig_loop;
struct rig_listener;

/* rig_cm_pack()'s private data: the tag "rig1", then the endpoint. */
#define RIG_CM_PRIVATE 34
/* rig_cm_pack_mtu()'s: the tag "rig2", the endpoint, the MTU code. */
#define RIG_CM_PRIVATE_MTU 35
/* rig_cm_pack_sink()'s: "rig2"'s, tagged "rig3", then the sink's rkey
 * and address (rig-wire(7)). */
#define RIG_CM_PRIVATE_SINK 47
/* How long a handshake may wait for the peer's next step: from the
 * dialer's request until rig's answer is no part of it. */
#define RIG_CM_HALF_OPEN_MS 3000
/* Handshakes a listener keeps under way. */
#define RIG_CM_HANDSHAKES 64
/* Requests beyond them a loop's listener lets wait for a turn (above). */
#define RIG_CM_WAITING 256
/* rig_loops_listen: how long a request may wait for the member loop it
 * was handed to before another member takes it. */
#define RIG_CM_STALL_MS 250

/**
 * rig_loop_listen - listen on @addr, @port (as rig_listen()) in @loop:
 * each connection it accepts comes out of the loop as RIG_NEWS_ACCEPTED
 * with @cookie, before rig answers the request (above). Close it with
 * rig_listener_close().
 */
int rig_loop_listen(struct rig_loop *loop, const char *addr, uint16_t port,
		    uint64_t cookie, struct rig_listener **out);

/**
 * rig_loops_listen - rig_loop_listen() once, for @n loops of one NIC
 *
 * One listener on @addr, @port whose connections are served by the @n
 * loops @loops (distinct, of one NIC), one per thread: each request goes
 * to the loop with the fewest connections (handshakes under way
 * included; the next in turn among equals), and the connection is that
 * loop's for its life: its queue pair is made there, and its news
 * (RIG_NEWS_ACCEPTED with @cookie, its rings, RIG_NEWS_GONE) comes out of
 * that loop only. Any member that turns takes the requests; one handed to
 * a loop that has not turned for RIG_CM_STALL_MS (250 ms) goes to another.
 * RIG_CM_HANDSHAKES bounds the listener as a whole. rig_listener_close()
 * may be called from any thread; each member lets go of the listener on
 * its own next turn. A member loop that closes leaves the listener.
 *
 * Returns 0 and sets *out; -EINVAL for @n < 1, NULL loops, a loop given
 * twice or loops of two NICs (nothing listens then); or -errno as
 * rig_loop_listen().
 */
int rig_loops_listen(struct rig_loop *const *loops, int n, const char *addr,
		     uint16_t port, uint64_t cookie, struct rig_listener **out);

/**
 * rig_loop_dial - start connecting to @addr, @port from @loop
 *
 * Returns 0 once the dial is under way; its outcome comes out of the loop
 * as RIG_NEWS_DIALED with @cookie: the queue pair (made in @loop; the last
 * handshake message goes after the news, see above), or
 * -ETIMEDOUT after @us microseconds, -ECONNREFUSED, -EHOSTUNREACH,
 * -ENETUNREACH, -ENODEV or -EPROTO as for rig_dial(). Returns -errno, and
 * no news comes, when it cannot start.
 */
int rig_loop_dial(struct rig_loop *loop, const char *addr, uint16_t port,
		  int64_t us, uint64_t cookie);

/**
 * rig_listen - listen for connections on @addr (numeric IPv4 or IPv6),
 * @port, for rig_accept(); the address must belong to @nic's port. The
 * queue pairs it accepts are made in the NIC's own loop.
 *
 * Returns 0 and sets *out, or -errno (rig_errmsg() names the step).
 */
int rig_listen(struct rig_nic *nic, const char *addr, uint16_t port,
	       struct rig_listener **out);

/**
 * rig_listener_fd - readable when a connection request is pending; for
 * the application's io_uring or epoll loop
 */
int rig_listener_fd(const struct rig_listener *l);

/**
 * rig_accept - accept the next connection, waiting at most @us
 * microseconds for a request; sets *out to a connected queue pair
 *
 * Once it has a request, the handshake takes what it takes (bounded at
 * RIG_CM_HALF_OPEN_MS), so rig_accept(l, 0, &qp) after rig_listener_fd()
 * fired accepts without waiting for another request. Requests that come
 * meanwhile are taken too, and their connections kept for the next calls.
 *
 * Returns 0; -ETIMEDOUT when no request came in time; -EPROTO when the
 * peer's private data is not a rig endpoint (the request is rejected, the
 * listener goes on); or another -errno.
 */
int rig_accept(struct rig_listener *l, int64_t us, struct rig_qp **out);

/** rig_listener_close - stop listening; accepted queue pairs live on */
int rig_listener_close(struct rig_listener *l);

/**
 * rig_dial - connect to a listener at @addr, @port from @nic, waiting at
 * most @us microseconds for address and route resolution and the answer;
 * the queue pair is made in the NIC's own loop
 *
 * Returns 0 and sets *out to a connected queue pair; -ETIMEDOUT at the
 * bound; -ECONNREFUSED when nobody listens there; -EHOSTUNREACH or
 * -ENETUNREACH when the address does not resolve; -ENODEV when the route
 * leaves through another device than @nic; -EPROTO when the answer is
 * not a rig endpoint.
 */
int rig_dial(struct rig_nic *nic, const char *addr, uint16_t port, int64_t us,
	     struct rig_qp **out);

/** rig_cm_pack - the private data that carries @e */
void rig_cm_pack(const struct rig_endpoint *e, uint8_t out[RIG_CM_PRIVATE]);

/**
 * rig_cm_parse - read an endpoint from a peer's private data
 *
 * The transport pads private data with zeros, so @len may exceed
 * RIG_CM_PRIVATE; the padding must be zeros. Returns 0, or -EPROTO (and
 * leaves *e untouched) for anything else.
 */
int rig_cm_parse(const void *data, size_t len, struct rig_endpoint *e);

/**
 * rig_cm_pack_mtu - the private data the connections by address send:
 * "rig2", @e's wire form, then @mtu, the MTU code (enum ibv_mtu, 1 for
 * 256 bytes to 5 for 4096) of the sender's port (rig-wire(7))
 */
void rig_cm_pack_mtu(const struct rig_endpoint *e, uint8_t mtu,
		     uint8_t out[RIG_CM_PRIVATE_MTU]);

/**
 * rig_cm_parse_mtu - read a peer's private data in either form
 *
 * "rig2" (rig_cm_pack_mtu()) sets *mtu to its code, 1 to 5; "rig1"
 * (rig_cm_pack()), which gives no MTU, sets it to 0. Checked as strictly
 * as rig_cm_parse() checks its form, zero padding allowed. Returns 0, or
 * -EPROTO (and leaves *e and *mtu untouched) for anything else.
 */
int rig_cm_parse_mtu(const void *data, size_t len, struct rig_endpoint *e,
		     uint8_t *mtu);

/*
 * A sink: a small region of the sender's own that grants remote write,
 * where its peer's liveness probes write one byte (rig-wire(7) LIVENESS).
 * rig's is one per NIC, of 64 bytes, and holds nothing.
 */
struct rig_cm_sink {
	uint32_t rkey;
	uint64_t addr;
};

/**
 * rig_cm_pack_sink - the private data the connections by address send
 * since rig 0.4: "rig3", @e's wire form, @mtu (as rig_cm_pack_mtu()),
 * then @sink's rkey and address, big-endian (rig-wire(7))
 */
void rig_cm_pack_sink(const struct rig_endpoint *e, uint8_t mtu,
		      const struct rig_cm_sink *sink,
		      uint8_t out[RIG_CM_PRIVATE_SINK]);

/**
 * rig_cm_parse_sink - read a peer's private data in any of the three forms
 *
 * "rig3" (rig_cm_pack_sink()) sets *mtu and *sink; "rig2" sets *mtu and
 * zeroes *sink; "rig1" zeroes both. Checked as strictly as
 * rig_cm_parse_mtu(), zero padding allowed. Returns the form, 1, 2 or 3,
 * or -EPROTO (and leaves *e, *mtu and *sink untouched) for anything else.
 */
int rig_cm_parse_sink(const void *data, size_t len, struct rig_endpoint *e,
		      uint8_t *mtu, struct rig_cm_sink *sink);

#ifdef __cplusplus
}
#endif
#endif
