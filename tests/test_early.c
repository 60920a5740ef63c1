/* SPDX-License-Identifier: MIT */
/*
 * Who may speak first on a loop's connection by address (rig(7)
 * CONNECTIONS BY ADDRESS): the listener's application has its queue pair
 * (RIG_NEWS_ACCEPTED) before the dialer can send to it, and the dialer's
 * (RIG_NEWS_DIALED) before the listener learns that the dialer is ready.
 * So a dialer's message sent the moment RIG_NEWS_DIALED comes finds the
 * receive the listener posted on RIG_NEWS_ACCEPTED, and a listener's sent
 * once its side is established finds the one the dialer posted on
 * RIG_NEWS_DIALED, however slowly the receiving side's loop turns: none
 * waits on an empty ring, which on Soft-RoCE fails it after ~470 ms
 * (rig(7) SOFT-ROCE).
 *
 * The server is a thread that drives rig_loop_listen's loop, or, when it
 * speaks first, calls rig_accept(); the clients dial it from a loop of
 * their own in the test's thread. On two hosts the
 * server has $RIG_TEST_PEER_DEV and the clients $RIG_TEST_DEV, so every
 * packet crosses the veth; on one, both use $RIG_TEST_DEV.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "t_device.h"

/* Under ASan half: the same paths, and the plain pass has the 200. */
#define CLIENTS (T_ASAN ? 100 : 200)
#define MSG 64
#define SLOTS 256		/* connections the server holds at once */
#define BATCH 64		/* news per rig_loop_handle call */
/* Dials under way at once from the clients' loop: a loop makes a queue
 * pair per dial (~20 ms in the emulated guest, twice that under ASan) and
 * answers replies in turn behind them, so with all 200 under way a reply
 * would wait seconds, past the server's RIG_CM_HALF_OPEN_MS. The busy
 * clients' loop (SERVER_FIRST) takes a turn per handshake step: more of
 * them at once keep the round short. */
#define WINDOW(first) ((first) == SERVER_FIRST ? 32 : 16)
/* A dial the listener shed (-ECONNREFUSED: RIG_CM_HANDSHAKES under way)
 * is made again this much later, as cm.h says. */
#define RETRY_MS 100
#define DIAL_US 20000000
/* The whole round's bound: 200 connections take ~10-25 s in the guest. */
#define ROUND_MS 90000
/* A busy loop's other work per turn: longer than the ~470 ms an RNR
 * wait lasts on Soft-RoCE, so a message that reached a queue pair with
 * no receive before that loop's turn would fail. */
#define BUSY_MS 600

static const uint64_t LISTEN_COOKIE = 0xea51e00000000001ull;
static const uint64_t DIAL_BASE = 0xd1a1ea0000000000ull;

/*
 * Who sends the one message of each connection. CLIENT_FIRST: a busy
 * loop listens and posts its receive on RIG_NEWS_ACCEPTED; the clients'
 * loop sends on RIG_NEWS_DIALED. SERVER_FIRST: rig_listen's thread sends
 * the moment rig_accept() hands a connection out (established: the
 * dialer's last handshake message came); the clients' loop, busy, posts
 * its receive on RIG_NEWS_DIALED.
 */
enum first { CLIENT_FIRST, SERVER_FIRST };

/* Message @k: its number, then bytes that follow from it. */
static void msg_fill(uint8_t *m, uint32_t k)
{
	int i;

	memcpy(m, &k, sizeof(k));
	for (i = sizeof(k); i < MSG; i++)
		m[i] = (uint8_t)(k * 131 + i * 7 + 1);
}

/* The number of message @m, or -1 if its bytes are not message k's. */
static int msg_check(const uint8_t *m)
{
	uint8_t want[MSG];
	uint32_t k;

	memcpy(&k, m, sizeof(k));
	if (k >= SLOTS * 4)
		return -1;
	msg_fill(want, k);
	return memcmp(want, m, MSG) ? -1 : (int)k;
}

/* ---- the server -------------------------------------------------------- */

struct srv {
	enum first first;
	struct rig_nic *nic;
	struct rig_loop *loop;
	struct rig_listener *l;
	uint16_t port;
	int stop;		/* eventfd */
	pthread_t thread;
	struct t_buf buf;	/* a message slot per connection */
	struct rig_qp *qp[SLOTS];
	bool got[SLOTS];	/* CLIENT_FIRST: slot i's message came */
	unsigned sent_no;	/* SERVER_FIRST: numbers of the messages sent */
	bool seen[SLOTS * 4];	/* CLIENT_FIRST: numbers received */
	int accepted, done, gone;	/* atomics */
	struct t_fail fail;
};

#define srv_fail(s, ...) t_fail_say(&(s)->fail, __VA_ARGS__)
#define srv_slot(s, q) t_qp_index((s)->qp, SLOTS, (q))

static void srv_accepted(struct srv *s, const struct rig_ready *r)
{
	int i = srv_slot(s, NULL), ret;

	if (r->cookie != LISTEN_COOKIE || r->result || !r->qp) {
		srv_fail(s, "ACCEPTED with cookie %#llx, result %d, qp %p",
			 (unsigned long long)r->cookie, r->result, (void *)r->qp);
		return;
	}
	if (i < 0) {
		srv_fail(s, "more than %d connections at once", SLOTS);
		return;
	}
	s->qp[i] = r->qp;
	s->got[i] = false;
	__atomic_add_fetch(&s->accepted, 1, __ATOMIC_RELAXED);
	if (s->first == CLIENT_FIRST) {
		ret = rig_qp_receive(r->qp, s->buf.r, (size_t)i * MSG, MSG);
		if (ret)
			srv_fail(s, "rig_qp_receive: %d %s", ret, rig_errmsg());
		return;
	}
	msg_fill(s->buf.mem + (size_t)i * MSG, s->sent_no++);
	ret = rig_qp_send(r->qp, s->buf.r, (size_t)i * MSG, MSG);
	if (ret)
		srv_fail(s, "rig_qp_send: %d %s", ret, rig_errmsg());
}

/* The sender leaves once its message is acknowledged, the receiver once
 * the sender left (GONE): so no message is flushed by its peer leaving
 * before its sender heard of its delivery. */
static void srv_leave(struct srv *s, int i)
{
	int ret = rig_qp_destroy(s->qp[i]);

	if (ret)
		srv_fail(s, "rig_qp_destroy: %d %s", ret, rig_errmsg());
	s->qp[i] = NULL;
	__atomic_add_fetch(&s->gone, 1, __ATOMIC_RELAXED);
}

static void srv_ring(struct srv *s, struct rig_qp *qp, enum rig_side side)
{
	struct rig_completion c;
	int i = srv_slot(s, qp), k, ret;

	if (i < 0)
		return;		/* destroyed since */
	while ((ret = rig_qp_poll(qp, side, &c)) == 1) {
		if (c.error) {
			srv_fail(s, "connection %d, %s: %d (%s)", i,
				 side == RIG_SEND ? "send" : "receive", c.error, c.why);
			continue;
		}
		if (side == RIG_SEND) {
			__atomic_add_fetch(&s->done, 1, __ATOMIC_RELAXED);
			srv_leave(s, i);
			return;
		}
		k = c.bytes == MSG ? msg_check(s->buf.mem + (size_t)i * MSG) : -1;
		if (k < 0 || s->seen[k]) {
			srv_fail(s, "connection %d: a message of %u bytes, number %d%s", i,
				 c.bytes, k, k >= 0 ? " twice" : "");
			continue;
		}
		s->seen[k] = true;
		s->got[i] = true;
		__atomic_add_fetch(&s->done, 1, __ATOMIC_RELAXED);
	}
	if (ret < 0)
		srv_fail(s, "rig_qp_poll: %d %s", ret, rig_errmsg());
}

static void srv_news(struct srv *s, const struct rig_ready *r)
{
	int i;

	switch (r->news) {
	case RIG_NEWS_ACCEPTED:
		srv_accepted(s, r);
		return;
	case RIG_NEWS_RING:
		srv_ring(s, r->qp, r->side);
		return;
	case RIG_NEWS_GONE:
		/* The client sent, was acknowledged and left: its message
		 * is in the receive ring, ahead of the failure. */
		i = srv_slot(s, r->qp);
		if (i < 0 || r->result != -ECONNRESET || s->first != CLIENT_FIRST) {
			srv_fail(s, "GONE for %s connection, result %d", i < 0 ? "no" : "a",
				 r->result);
			return;
		}
		srv_ring(s, r->qp, RIG_RECEIVE);
		if (!s->got[i])
			srv_fail(s, "connection %d: the client left, its message never came", i);
		srv_leave(s, i);
		return;
	default:
		srv_fail(s, "news %d (result %d) on a loop that only listens", r->news, r->result);
	}
}

static void *srv_main(void *arg)
{
	struct srv *s = arg;
	struct pollfd pfd[2] = { { rig_loop_fd(s->loop), POLLIN, 0 }, { s->stop, POLLIN, 0 } };
	struct rig_ready ready[BATCH];
	int n, i;

	while (!(pfd[1].revents & POLLIN)) {
		if (poll(pfd, 2, -1) < 0 || !(pfd[0].revents & POLLIN))
			continue;
		/* A turn of the loop: everything rig has, as long as its fd
		 * stays readable. */
		do {
			n = rig_loop_handle(s->loop, ready, BATCH);
			if (n < 0) {
				srv_fail(s, "rig_loop_handle: %d %s", n, rig_errmsg());
				return NULL;
			}
			for (i = 0; i < n; i++)
				srv_news(s, &ready[i]);
		} while (poll(pfd, 1, 0) == 1);
		/* A loop with other work: its next turn comes this much
		 * later, whatever rig has for it meanwhile. */
		usleep(BUSY_MS * 1000);
	}
	return NULL;
}

/* SERVER_FIRST: rig_accept() in a loop of the server's thread; each
 * connection it hands out sends at once, and leaves once its message is
 * acknowledged. */
static void *srv_blocking_main(void *arg)
{
	struct pollfd stop = { 0, POLLIN, 0 };
	struct srv *s = arg;
	struct rig_completion c;
	struct rig_qp *qp;
	int i, ret;

	stop.fd = s->stop;
	while (poll(&stop, 1, 0) == 0) {
		ret = rig_accept(s->l, 20000, &qp);
		if (ret && ret != -ETIMEDOUT) {
			srv_fail(s, "rig_accept: %d %s", ret, rig_errmsg());
			return NULL;
		}
		if (!ret)
			srv_accepted(s, &(struct rig_ready){ .qp = qp, .news = RIG_NEWS_ACCEPTED,
							    .cookie = LISTEN_COOKIE });
		for (i = 0; i < SLOTS; i++) {
			if (!s->qp[i])
				continue;
			ret = rig_qp_poll(s->qp[i], RIG_SEND, &c);
			if (ret < 0)
				srv_fail(s, "rig_qp_poll: %d %s", ret, rig_errmsg());
			if (ret != 1)
				continue;
			if (c.error)
				srv_fail(s, "connection %d, send: %d (%s)", i, c.error, c.why);
			__atomic_add_fetch(&s->done, 1, __ATOMIC_RELAXED);
			srv_leave(s, i);
		}
	}
	return NULL;
}

static void srv_start(struct srv *s, enum first first, uint16_t port)
{
	int ret;

	memset(s, 0, sizeof(*s));
	s->first = first;
	s->port = port;
	s->nic = t_nic_open(t_other_dev());
	if (first == SERVER_FIRST) {
		ret = rig_listen(s->nic, t_other_ip(), port, &s->l);
		cr_assert_eq(ret, 0, "rig_listen(%s:%u): %d %s", t_other_ip(), port, ret,
			     rig_errmsg());
	} else {
		ret = rig_loop_open(s->nic, &s->loop);
		cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
		ret = rig_loop_watch(s->loop);
		cr_assert_eq(ret, 0, "rig_loop_watch: %d %s", ret, rig_errmsg());
		ret = rig_loop_listen(s->loop, t_other_ip(), port, LISTEN_COOKIE, &s->l);
		cr_assert_eq(ret, 0, "rig_loop_listen(%s:%u): %d %s", t_other_ip(), port, ret,
			     rig_errmsg());
	}
	t_buf(&s->buf, s->nic, SLOTS * MSG, 0);
	s->stop = eventfd(0, EFD_CLOEXEC);
	cr_assert_geq(s->stop, 0);
	cr_assert_eq(pthread_create(&s->thread, NULL,
				    first == SERVER_FIRST ? srv_blocking_main : srv_main, s), 0);
}

static void srv_end(struct srv *s)
{
	int ret;

	cr_assert_eq(eventfd_write(s->stop, 1), 0);
	cr_assert_eq(pthread_join(s->thread, NULL), 0);
	cr_assert(!s->fail.failed, "the server: %s", s->fail.err);
	ret = rig_listener_close(s->l);
	cr_assert_eq(ret, 0, "rig_listener_close: %d %s", ret, rig_errmsg());
	if (s->loop) {
		ret = rig_loop_close(s->loop);
		cr_assert_eq(ret, 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	}
	close(s->stop);
	cr_assert_eq(rig_nic_close(s->nic), 0, "%s", rig_errmsg());
}

/* ---- the clients ------------------------------------------------------- */

enum { C_WAITING, C_DIALING, C_TALKING, C_DONE };

struct cli {
	struct rig_nic *nic;
	struct rig_loop *loop;
	struct t_buf buf;		/* client i's message at i * MSG */
	struct {
		struct rig_qp *qp;
		int state;
		bool got;	/* SERVER_FIRST: the server's message came */
		double retry_at;
	} c[CLIENTS];
	bool seen[SLOTS * 4];		/* SERVER_FIRST: numbers received */
	int refused;
};

static void cli_dial(struct cli *h, uint16_t port, int i)
{
	int ret = rig_loop_dial(h->loop, t_other_ip(), port, DIAL_US, DIAL_BASE + i);

	cr_assert_eq(ret, 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
	h->c[i].state = C_DIALING;
	h->c[i].retry_at = 0;
}

static int cli_find(struct cli *h, const struct rig_qp *qp)
{
	int i;

	for (i = 0; i < CLIENTS; i++)
		if (h->c[i].qp == qp && h->c[i].state == C_TALKING)
			return i;
	return -1;
}

/* Client @i's queue pair is up: it speaks at once, or listens. */
static void cli_dialed(struct cli *h, enum first first, const struct rig_ready *r)
{
	int i = (int)(r->cookie - DIAL_BASE), ret;

	cr_assert(r->cookie >= DIAL_BASE && i >= 0 && i < CLIENTS &&
		  h->c[i].state == C_DIALING && !h->c[i].retry_at,
		  "DIALED with cookie %#llx: not one of ours, or twice",
		  (unsigned long long)r->cookie);
	if (r->result == -ECONNREFUSED) {
		h->c[i].retry_at = t_now_ms() + RETRY_MS;
		h->refused++;
		return;
	}
	cr_assert_eq(r->result, 0, "dial %d: %d (%s)", i, r->result, rig_errmsg());
	cr_assert_not_null(r->qp);
	h->c[i].qp = r->qp;
	h->c[i].state = C_TALKING;
	if (first == CLIENT_FIRST) {
		msg_fill(h->buf.mem + (size_t)i * MSG, (uint32_t)i);
		ret = rig_qp_send(r->qp, h->buf.r, (size_t)i * MSG, MSG);
		cr_assert_eq(ret, 0, "rig_qp_send: %d %s", ret, rig_errmsg());
	} else {
		ret = rig_qp_receive(r->qp, h->buf.r, (size_t)i * MSG, MSG);
		cr_assert_eq(ret, 0, "rig_qp_receive: %d %s", ret, rig_errmsg());
	}
}

/* Client @i leaves: the sender once its message is acknowledged, the
 * receiver once the server left. */
static void cli_leave(struct cli *h, int i, int *left)
{
	int ret = rig_qp_destroy(h->c[i].qp);

	cr_assert_eq(ret, 0, "rig_qp_destroy: %d %s", ret, rig_errmsg());
	h->c[i].state = C_DONE;
	(*left)--;
}

static void cli_ring(struct cli *h, struct rig_qp *qp, enum rig_side side, int *left)
{
	struct rig_completion c;
	int i = cli_find(h, qp), k, ret;

	if (i < 0)
		return;
	while ((ret = rig_qp_poll(qp, side, &c)) == 1) {
		cr_assert_eq(c.error, 0, "client %d, %s: %d (%s)", i,
			     side == RIG_SEND ? "send" : "receive", c.error, c.why);
		if (side == RIG_SEND) {
			cli_leave(h, i, left);
			return;
		}
		cr_assert_eq(c.bytes, MSG);
		k = msg_check(h->buf.mem + (size_t)i * MSG);
		cr_assert(k >= 0 && !h->seen[k],
			  "client %d: not one of the server's messages, or one twice (%d)", i, k);
		h->seen[k] = true;
		h->c[i].got = true;
	}
	cr_assert_geq(ret, 0, "rig_qp_poll: %d %s", ret, rig_errmsg());
}

/*
 * CLIENTS dials, WINDOW(first) under way at a time, each of whose queue pairs
 * sends its message the moment its news comes (CLIENT_FIRST), or posts
 * its receive then (SERVER_FIRST), to a server that posts its receive, or
 * sends, the moment its own news comes. Every message must be delivered,
 * bytes and all, and no completion fail. Returns the round's time in ms.
 */
static double round_trip(enum first first, uint16_t port)
{
	struct rig_ready ready[BATCH];
	struct pollfd pfd;
	struct srv s;
	struct cli h;
	double t0, end;
	int i, k, n, left = CLIENTS, going = 0, ret;

	srv_start(&s, first, port);
	memset(&h, 0, sizeof(h));
	h.nic = t_nic_open(t_dev());
	ret = rig_loop_open(h.nic, &h.loop);
	cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	ret = rig_loop_watch(h.loop);
	cr_assert_eq(ret, 0, "rig_loop_watch: %d %s", ret, rig_errmsg());
	t_buf(&h.buf, h.nic, CLIENTS * MSG, 0);
	pfd = (struct pollfd){ rig_loop_fd(h.loop), POLLIN, 0 };
	t0 = t_now_ms();
	end = t0 + ROUND_MS;
	while (left) {
		cr_assert(!__atomic_load_n(&s.fail.failed, __ATOMIC_ACQUIRE), "the server: %s",
			  s.fail.err);
		cr_assert_lt(t_now_ms(), end, "%d of %d connections not through in %d ms",
			     left, CLIENTS, ROUND_MS);
		for (i = 0; i < CLIENTS && going < WINDOW(first); i++)
			if (h.c[i].state == C_WAITING) {
				cli_dial(&h, port, i);
				going++;
			}
		for (i = 0; i < CLIENTS; i++)
			if (h.c[i].retry_at && t_now_ms() >= h.c[i].retry_at)
				cli_dial(&h, port, i);
		if (poll(&pfd, 1, 20) <= 0)
			continue;
		/* A turn of the loop: everything rig has, as long as its fd
		 * stays readable; with SERVER_FIRST, BUSY_MS of other work
		 * after it. */
		do {
			n = rig_loop_handle(h.loop, ready, BATCH);
			cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
			for (k = 0; k < n; k++) {
				switch (ready[k].news) {
				case RIG_NEWS_DIALED:
					cli_dialed(&h, first, &ready[k]);
					break;
				case RIG_NEWS_RING:
					i = left;
					cli_ring(&h, ready[k].qp, ready[k].side, &left);
					going -= i - left;
					break;
				case RIG_NEWS_GONE:
					/* The server sent, was acknowledged and left. */
					i = cli_find(&h, ready[k].qp);
					cr_assert(i >= 0 && first == SERVER_FIRST &&
						  ready[k].result == -ECONNRESET,
						  "client: GONE for %s connection, result %d",
						  i < 0 ? "no" : "a", ready[k].result);
					cli_ring(&h, ready[k].qp, RIG_RECEIVE, &left);
					cr_assert(h.c[i].got,
						  "client %d: the server left, its message never came", i);
					cli_leave(&h, i, &left);
					going--;
					break;
				default:
					cr_assert_fail("client: news %d, result %d", ready[k].news,
						       ready[k].result);
				}
			}
		} while (poll(&pfd, 1, 0) == 1);
		if (first == SERVER_FIRST)
			usleep(BUSY_MS * 1000);
	}
	t0 = t_now_ms() - t0;
	/* Every connection's GONE reached the server: its counts are final. */
	while (__atomic_load_n(&s.gone, __ATOMIC_RELAXED) < CLIENTS) {
		cr_assert(!__atomic_load_n(&s.fail.failed, __ATOMIC_ACQUIRE), "the server: %s",
			  s.fail.err);
		cr_assert_lt(t_now_ms(), end, "the server saw %d of %d clients leave",
			     __atomic_load_n(&s.gone, __ATOMIC_RELAXED), CLIENTS);
		usleep(10000);	/* polling a count; the verdict is the bound */
	}
	srv_end(&s);
	cr_assert_eq(s.accepted, CLIENTS, "the server accepted %d connections", s.accepted);
	cr_assert_eq(s.done, CLIENTS, "the server completed %d of %d messages", s.done, CLIENTS);
	if (first == CLIENT_FIRST)
		for (i = 0; i < CLIENTS; i++)
			cr_assert(s.seen[i], "client %d's message never reached the server", i);
	else
		for (i = 0; i < CLIENTS; i++)
			cr_assert(h.seen[i], "the server's message %d reached no client", i);
	ret = rig_loop_close(h.loop);
	cr_assert_eq(ret, 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	cr_assert_eq(rig_nic_close(h.nic), 0, "%s", rig_errmsg());
	cr_log_info("%s: %d connections in %.0f ms (%d dials shed and made again)",
		    first == CLIENT_FIRST ? "clients first, to a busy loop" :
					    "server first, to a busy loop",
		    CLIENTS, t0, h.refused);
	return t0;
}

TestSuite(early, .timeout = 240);

/*
 * The clients speak the moment RIG_NEWS_DIALED comes, to a listener whose
 * loop turns every BUSY_MS: its receive, posted on RIG_NEWS_ACCEPTED, is
 * in place before the dialer hears the answer.
 */
Test(early, clients_send_at_dialed_to_a_busy_listener_every_message_lands)
{
	round_trip(CLIENT_FIRST, 18801);
}

/*
 * The mirror: rig_accept's thread sends the moment it has a connection,
 * to clients whose loop turns every BUSY_MS: their receive, posted on
 * RIG_NEWS_DIALED, is in place before the listener's side is established.
 */
Test(early, server_sends_at_established_to_busy_dialers_every_message_lands)
{
	round_trip(SERVER_FIRST, 18802);
}
