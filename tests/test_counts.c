/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/*
 * What a loop counts for its connections by address (lib/conn.c), and
 * what a loop's turn leaves of the thread's rig_errmsg(): the dials under
 * way and those waiting their turn (rig(7) CONNECTIONS BY ADDRESS: "a
 * loop has at most 16 dials under way; the others wait their turn"), the
 * connections each loop holds, by which rig_loops_listen picks the loop
 * that serves a request, and a shared listener's references.
 *
 * Each test drives its loops from the test's thread, one turn after
 * another, so the order of the steps is the test's: where a defect
 * needs the application to act between two turns (a queue pair
 * destroyed on its DIALED news, before the turn that sends its RTU),
 * the test does exactly that, and no verdict rests on a timing window.
 * The bounds are a dial's (seconds, as rig's own), far from what a dial
 * takes in the emulated guest.
 *
 * The counts are rig's private ones (lib/internal.h): the tests read
 * them beside what the application sees, which is the verdict where it
 * shows (a dial that never comes up, a request sent to the wrong loop).
 *
 * Dialers use $RIG_TEST_DEV; listeners $RIG_TEST_PEER_DEV across two
 * hosts (t_other_dev), else the same device.
 *
 * This binary interposes rdma_listen (the executable's definition comes
 * before librdmacm's): while armed, the call waits for another thread to
 * close a member loop of the rig_loops_listen under way, the window
 * between the members' joining and the listener's references being set.
 * It interposes ibv_create_qp too: while the gate is shut, the server's
 * helper waits in it, so its handshakes stay under way (a queue pair
 * being made has no bound) for as long as a test needs.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

#include "internal.h"
#include "t_device.h"

/* A loop's dials under way at once (conn.c's RIG_CM_DIALS). */
#define LOOP_DIALS 16
/* A dial's bound: a dial takes 0.1-1 s in the emulated guest (a queue
 * pair made on each side), under ASan twice that. */
#define DIAL_US 10000000ll
/* What a busy two-core machine running an emulated guest may add to a
 * bound before its outcome is seen. */
#define MARGIN_MS 5000
/* Dials ended on their news: more than a loop's LOOP_DIALS. */
#define ROUNDS 21
#define SLOTS 128
#define BATCH 16

static const uint64_t LISTEN_COOKIE = 0xc0a7500000000001ull;

TestSuite(counts);

/* ---- the gate on the server's queue pairs ---------------------------- */

/* Shut, it holds the server's makes of queue pairs (the other device's);
 * open at first. */
static struct t_gate gate = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, true, 0 };

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	static __typeof__(&ibv_create_qp) real;

	if (!real)
		real = T_NEXT(ibv_create_qp);
	pthread_mutex_lock(&gate.lock);
	if (!gate.open && !strcmp(ibv_get_device_name(pd->context->device), t_other_dev()))
		t_gate_wait_locked(&gate);
	pthread_mutex_unlock(&gate.lock);
	return real(pd, attr);
}

static void gate_set(bool shut)
{
	if (!shut) {
		t_gate_open(&gate);
		return;
	}
	pthread_mutex_lock(&gate.lock);
	gate.open = false;
	pthread_mutex_unlock(&gate.lock);
}

static int gate_held(void)
{
	int n;

	pthread_mutex_lock(&gate.lock);
	n = gate.held;
	pthread_mutex_unlock(&gate.lock);
	return n;
}

/* ---- rig's counts ------------------------------------------------------ */

static void dial_counts(struct rig_loop *loop, unsigned *dials, unsigned *queued)
{
	pthread_mutex_lock(&loop->cm_lock);
	*dials = loop->dials;
	*queued = loop->dials_queued;
	pthread_mutex_unlock(&loop->cm_lock);
}

static unsigned cm_held(struct rig_loop *loop)
{
	return __atomic_load_n(&loop->cm_held, __ATOMIC_RELAXED);
}

/* ---- a listening side: one loop (rig_loop_listen) or two sharing one
 * listener (rig_loops_listen), driven by the test's thread ------------ */

struct srv {
	/* When set, every rig_loop_handle of the server leaves rig_errmsg()
	 * reading this (C1). */
	const char *errmsg;
	int gone;			/* GONE news taken */
	struct rig_nic *nic;
	struct rig_loop *loop[2];
	int n;
	struct rig_listener *l;
	struct rig_qp *qp[SLOTS];	/* accepted, not yet gone */
	int accepted[2];		/* by loop */
};

static void srv_open(struct srv *s, int n, uint16_t port)
{
	int i, ret;

	memset(s, 0, sizeof(*s));
	s->n = n;
	s->nic = t_nic_open(t_other_dev());
	for (i = 0; i < n; i++) {
		ret = rig_loop_open(s->nic, &s->loop[i]);
		cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
		ret = rig_loop_watch(s->loop[i]);
		cr_assert_eq(ret, 0, "rig_loop_watch: %d %s", ret, rig_errmsg());
	}
	if (n == 1)
		ret = rig_loop_listen(s->loop[0], t_other_ip(), port, LISTEN_COOKIE, &s->l);
	else
		ret = rig_loops_listen(s->loop, n, t_other_ip(), port, LISTEN_COOKIE, &s->l);
	cr_assert_eq(ret, 0, "listen on %s:%u: %d %s", t_other_ip(), port, ret, rig_errmsg());
}

static int srv_slot(struct srv *s, const struct rig_qp *qp)
{
	int i;

	for (i = 0; i < SLOTS; i++)
		if (s->qp[i] == qp)
			return i;
	return -1;
}

/* One turn of each of the server's loops: accepted queue pairs are kept
 * until their dialer leaves (GONE), then destroyed. */
static void srv_turn(struct srv *s)
{
	struct rig_ready ready[BATCH];
	struct rig_completion c;
	int k, i, n, slot, ret;

	for (k = 0; k < s->n; k++) {
		n = rig_loop_handle(s->loop[k], ready, BATCH);
		cr_assert_geq(n, 0, "the server's rig_loop_handle: %d %s", n, rig_errmsg());
		if (s->errmsg)
			cr_assert_str_eq(rig_errmsg(), s->errmsg,
					 "the server's rig_loop_handle returned %d, and rig_errmsg() "
					 "reads \"%s\", not \"%s\" as before it", n, rig_errmsg(),
					 s->errmsg);
		for (i = 0; i < n; i++) {
			struct rig_ready *r = &ready[i];

			switch (r->news) {
			case RIG_NEWS_ACCEPTED:
				cr_assert_eq(r->result, 0);
				cr_assert_eq(r->cookie, LISTEN_COOKIE);
				slot = srv_slot(s, NULL);
				cr_assert_geq(slot, 0, "more than %d connections at the server", SLOTS);
				s->qp[slot] = r->qp;
				s->accepted[k]++;
				break;
			case RIG_NEWS_GONE:
				slot = srv_slot(s, r->qp);
				cr_assert_geq(slot, 0, "GONE (%d) of no connection", r->result);
				s->qp[slot] = NULL;
				s->gone++;
				ret = rig_qp_destroy(r->qp);
				cr_assert_eq(ret, 0, "rig_qp_destroy: %d %s", ret, rig_errmsg());
				break;
			case RIG_NEWS_RING:
				if (srv_slot(s, r->qp) >= 0)
					while (rig_qp_poll(r->qp, r->side, &c) == 1)
						;
				break;
			default:
				cr_assert_fail("the server's loop: news %d (result %d)", r->news,
					       r->result);
			}
		}
	}
}

static void srv_close(struct srv *s)
{
	int i, ret;

	ret = rig_listener_close(s->l);
	cr_assert_eq(ret, 0, "rig_listener_close: %d %s", ret, rig_errmsg());
	for (i = 0; i < SLOTS; i++)
		if (s->qp[i]) {
			ret = rig_qp_destroy(s->qp[i]);
			cr_assert_eq(ret, 0, "rig_qp_destroy: %d %s", ret, rig_errmsg());
		}
	for (i = 0; i < s->n; i++) {
		ret = rig_loop_close(s->loop[i]);
		cr_assert_eq(ret, 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	}
	cr_assert_eq(rig_nic_close(s->nic), 0, "%s", rig_errmsg());
}

/* ---- the dialing side -------------------------------------------------- */

struct cli {
	struct rig_nic *nic;
	struct rig_loop *loop;
	int closed;		/* RIG_NEWS_CLOSED seen */
};

static void cli_open(struct cli *d)
{
	int ret;

	memset(d, 0, sizeof(*d));
	d->nic = t_nic_open(t_dev());
	ret = rig_loop_open(d->nic, &d->loop);
	cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	ret = rig_loop_watch(d->loop);
	cr_assert_eq(ret, 0, "rig_loop_watch: %d %s", ret, rig_errmsg());
}

static void cli_close(struct cli *d)
{
	int ret = rig_loop_close(d->loop);

	cr_assert_eq(ret, 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	cr_assert_eq(rig_nic_close(d->nic), 0, "%s", rig_errmsg());
}

/* Sleeps until one of the loops' fds (and @extra, if >= 0) is readable,
 * 10 ms at most: the turns that follow find what there is. */
static void wait_fds(struct cli *d, struct srv *s, int extra)
{
	struct pollfd p[4];
	int n = 0, i;

	if (d)
		p[n++] = (struct pollfd){ rig_loop_fd(d->loop), POLLIN, 0 };
	for (i = 0; s && i < s->n; i++)
		p[n++] = (struct pollfd){ rig_loop_fd(s->loop[i]), POLLIN, 0 };
	if (extra >= 0)
		p[n++] = (struct pollfd){ extra, POLLIN, 0 };
	poll(p, (nfds_t)n, 10);
}

/*
 * Turns the dialer's loop (and the server's, if any) until the DIALED
 * news of @cookie comes, and returns it; fails the test if it has not
 * come by @end_ms (t_now_ms). Ring news is polled dry; CLOSED news
 * counted; any other news fails the test.
 */
static struct rig_ready dialed(struct cli *d, struct srv *s, uint64_t cookie, double end_ms)
{
	struct rig_ready ready[BATCH], got = { 0 };
	struct rig_completion c;
	bool found = false;
	int i, n;

	for (;;) {
		n = rig_loop_handle(d->loop, ready, BATCH);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		for (i = 0; i < n; i++) {
			struct rig_ready *r = &ready[i];

			if (r->news == RIG_NEWS_RING) {
				while (rig_qp_poll(r->qp, r->side, &c) == 1)
					;
				continue;
			}
			if (r->news == RIG_NEWS_CLOSED) {
				cr_assert_eq(r->result, 0, "RIG_NEWS_CLOSED: %d", r->result);
				d->closed++;
				continue;
			}
			cr_assert_eq(r->news, RIG_NEWS_DIALED, "news %d (result %d)", r->news,
				     r->result);
			cr_assert_eq(r->cookie, cookie, "DIALED of cookie %#llx, not %#llx",
				     (unsigned long long)r->cookie, (unsigned long long)cookie);
			got = *r;
			found = true;
		}
		if (found)
			return got;
		cr_assert_lt(t_now_ms(), end_ms, "no DIALED news of the dial %#llx in time",
			     (unsigned long long)cookie);
		if (s)
			srv_turn(s);
		wait_fds(d, s, -1);
	}
}

/* ---- A loop's dials end on their news ---------------------------------- */

/*
 * @close: rig_qp_close, else rig_qp_destroy, of each dialed queue pair
 * on its DIALED news, before the loop's next turn (which would send the
 * dial's RTU): ROUNDS dials in turn, then one kept. Each dial must come
 * up within its bound, and the loop count no dial under way after
 * (and, closed, each close's RIG_NEWS_CLOSED come with 0).
 */
static void dials_ended_on_their_news(bool close, uint16_t port, uint64_t base)
{
	static struct srv s;
	static struct cli d;
	struct rig_ready r;
	unsigned dials = 0, queued = 0, held;
	double t0, end;
	bool done;
	int i, ret;

	srv_open(&s, 1, port);
	cli_open(&d);
	for (i = 0; i <= ROUNDS; i++) {
		held = cm_held(d.loop);
		t0 = t_now_ms();
		ret = rig_loop_dial(d.loop, t_other_ip(), port, DIAL_US, base + (uint64_t)i);
		cr_assert_eq(ret, 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
		r = dialed(&d, &s, base + (uint64_t)i, t0 + DIAL_US / 1000 + MARGIN_MS);
		dial_counts(d.loop, &dials, &queued);
		cr_assert_eq(r.result, 0,
			     "dial %d of %d, after %d ended on their news by %s: %d (%s) after "
			     "%.0f ms; the loop counts %u dials under way and %u waiting",
			     i + 1, ROUNDS + 1, i, close ? "rig_qp_close" : "rig_qp_destroy",
			     r.result, strerror(-r.result), t_now_ms() - t0, dials, queued);
		cr_assert_not_null(r.qp);
		if (i == ROUNDS)
			break;		/* the last one is kept */
		if (!close) {
			ret = rig_qp_destroy(r.qp);
			cr_assert_eq(ret, 0, "rig_qp_destroy: %d %s", ret, rig_errmsg());
			continue;
		}
		ret = rig_qp_close(r.qp, base + (uint64_t)i);
		cr_assert_eq(ret, 0, "rig_qp_close: %d %s", ret, rig_errmsg());
		/* The helper ends the connection (its id goes with the queue
		 * pair) before the loop's next turn: the application may come
		 * back to its loop any time after the close. */
		end = t_now_ms() + DIAL_US / 1000;
		while (cm_held(d.loop) != held) {
			cr_assert_lt(t_now_ms(), end, "the helper did not end the closed "
				     "connection in %lld ms", DIAL_US / 1000);
			srv_turn(&s);
			usleep(1000);
		}
	}
	/* The kept dial's RTU goes at the loop's next turn: then it is up,
	 * and no dial of the loop is under way or waiting. */
	end = t_now_ms() + DIAL_US / 1000;
	do {
		struct rig_ready more[BATCH];
		int n, k;

		cr_assert_lt(t_now_ms(), end, "the loop's dials never came back to none "
			     "(%u under way, %u waiting), or %d of %d closes' news came",
			     dials, queued, d.closed, close ? ROUNDS : 0);
		n = rig_loop_handle(d.loop, more, BATCH);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		for (k = 0; k < n; k++) {
			cr_assert_eq(more[k].news, RIG_NEWS_CLOSED, "news %d (result %d)",
				     more[k].news, more[k].result);
			cr_assert_eq(more[k].result, 0);
			d.closed++;
		}
		srv_turn(&s);
		dial_counts(d.loop, &dials, &queued);
		done = !dials && !queued && (!close || d.closed == ROUNDS);
		if (!done)
			wait_fds(&d, &s, -1);
	} while (!done);
	ret = rig_qp_destroy(r.qp);
	cr_assert_eq(ret, 0, "rig_qp_destroy: %d %s", ret, rig_errmsg());
	cli_close(&d);
	srv_close(&s);
}

/*
 * D1: a queue pair dialed by a loop and destroyed on its DIALED news
 * ends its dial: the loop's turns for dials come back, and the dials
 * after it (more than the 16 a loop has under way) come up.
 */
Test(counts, D1_dials_destroyed_on_their_news_give_back_their_turns, .timeout = 240)
{
	dials_ended_on_their_news(false, 19101, 0xd1d1000000000000ull);
}

/*
 * D3: the same with rig_qp_close, whose helper ends the connection
 * before the loop's next turn; each close's RIG_NEWS_CLOSED comes with 0.
 */
Test(counts, D3_dials_closed_on_their_news_give_back_their_turns, .timeout = 240)
{
	dials_ended_on_their_news(true, 19102, 0xd3d3000000000000ull);
}

/* ---- a raw rdma_cm listener that answers when the test says ---------- */

struct raw {
	struct rig_nic *nic;
	/* The endpoints the answers name, one queue pair each: the
	 * dialer's CM takes an answer naming a queue pair another
	 * connection to that host has for a stale one, and rejects it. */
	struct rig_qp *qp[SLOTS];
	int nqp;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *lid;
	struct rdma_cm_id *ids[SLOTS];
	int nids;
	int requests, established;
};

static void raw_open(struct raw *w, uint16_t port)
{
	struct sockaddr_in sin = { 0 };

	memset(w, 0, sizeof(*w));
	w->nic = t_nic_open(t_other_dev());
	w->ch = rdma_create_event_channel();
	cr_assert_not_null(w->ch);
	cr_assert_eq(fcntl(w->ch->fd, F_SETFL, O_NONBLOCK), 0);
	cr_assert_eq(rdma_create_id(w->ch, &w->lid, NULL, RDMA_PS_TCP), 0);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	cr_assert_eq(inet_pton(AF_INET, t_other_ip(), &sin.sin_addr), 1);
	cr_assert_eq(rdma_bind_addr(w->lid, (struct sockaddr *)&sin), 0, "%s", strerror(errno));
	cr_assert_eq(rdma_listen(w->lid, SLOTS), 0, "%s", strerror(errno));
}

static void raw_answer(struct raw *w, struct rdma_cm_id *id)
{
	uint8_t priv[RIG_CM_PRIVATE];
	struct rdma_conn_param p;
	struct rig_endpoint e;
	int ret;

	cr_assert_lt(w->nqp, SLOTS);
	ret = rig_qp_make(w->nic, &w->qp[w->nqp]);
	cr_assert_eq(ret, 0, "rig_qp_make: %d %s", ret, rig_errmsg());
	rig_qp_endpoint(w->qp[w->nqp++], &e);
	rig_cm_pack(&e, priv);
	t_raw_param(&p, priv, RIG_CM_PRIVATE, e.qp);
	cr_assert_eq(rdma_accept(id, &p), 0, "rdma_accept: %s", strerror(errno));
}

/* Takes the listener's events: requests are kept (@answer: answered at
 * once); ESTABLISHED (a dialer's RTU) counted; the rest acked. */
static void raw_take(struct raw *w, bool answer)
{
	struct rdma_cm_event *ev;

	while (!rdma_get_cm_event(w->ch, &ev)) {
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type type = ev->event;

		rdma_ack_cm_event(ev);
		if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			cr_assert_lt(w->nids, SLOTS);
			w->ids[w->nids++] = id;
			w->requests++;
			if (answer)
				raw_answer(w, id);
		} else if (type == RDMA_CM_EVENT_ESTABLISHED) {
			w->established++;
		}
	}
	cr_assert_eq(errno, EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
}

static void raw_close(struct raw *w)
{
	int i;

	raw_take(w, false);
	for (i = 0; i < w->nids; i++)
		rdma_destroy_id(w->ids[i]);
	rdma_destroy_id(w->lid);
	rdma_destroy_event_channel(w->ch);
	for (i = 0; i < w->nqp; i++)
		cr_assert_eq(rig_qp_destroy(w->qp[i]), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(w->nic), 0, "%s", rig_errmsg());
}

/* ---- a dial waiting its turn ------------------------------------------- */

/* The rdma_cm events a wait read and kept for @loop's next turn (T3). */
static int kept(struct rig_loop *loop)
{
	struct rig__list *l;
	int n = 0;

	pthread_mutex_lock(&loop->cm_lock);
	for (l = loop->cm_kept.next; l != &loop->cm_kept; l = l->next)
		n++;
	pthread_mutex_unlock(&loop->cm_lock);
	return n;
}

/* The DIALED news listed in @loop, not yet handed out. */
static int listed_dialed(struct rig_loop *loop)
{
	struct rig__list *l;
	int n = 0;

	pthread_mutex_lock(&loop->lock);
	for (l = loop->news.next; l != &loop->news; l = l->next)
		n += container_of(l, struct rig__news, link)->what.news == RIG_NEWS_DIALED;
	pthread_mutex_unlock(&loop->lock);
	return n;
}

/* One turn of @loop; its news is DIALED with result 0, one of the first
 * LOOP_DIALS dials, each once (@seen). Returns how many came. */
static int take_first_dials(struct rig_loop *loop, uint64_t base, struct rig_qp **qp)
{
	struct rig_ready ready[2 * LOOP_DIALS];
	int n, i, k;

	n = rig_loop_handle(loop, ready, 2 * LOOP_DIALS);
	cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
	for (i = 0; i < n; i++) {
		cr_assert_eq(ready[i].news, RIG_NEWS_DIALED, "news %d (result %d)",
			     ready[i].news, ready[i].result);
		k = (int)(ready[i].cookie - base);
		cr_assert(ready[i].cookie >= base && k < LOOP_DIALS && !qp[k],
			  "DIALED of cookie %#llx: not one of the dials under way, or twice",
			  (unsigned long long)ready[i].cookie);
		cr_assert_eq(ready[i].result, 0, "dial %d: %d", k, ready[i].result);
		qp[k] = ready[i].qp;
	}
	return n;
}

/*
 * A loop's dial that waits its turn (rig(7) CONNECTIONS BY ADDRESS: at
 * most 16 under way, the others wait theirs) starts once one of those
 * under way comes up, and comes up itself within its bound, in a loop
 * with nothing else to do.
 *
 * The listener is a raw rdma_cm one that answers when the test says: it
 * holds the 16 requests until all are in, then answers them at once. A
 * wait on a queue pair of the dialer's loop reads the 16 answers and
 * keeps them for the loop's next turn (T3), which takes all their steps;
 * the test hands out the 16 DIALED news once every one is listed, and
 * the turn after pays their RTUs: the 16 are up at once, after the last
 * rdma_cm event of the loop. Then the 17th dial must start, reach the
 * listener (which now answers at once), and come up.
 */
Test(counts, a_dial_waiting_its_turn_starts_when_those_under_way_come_up, .timeout = 240)
{
	const uint16_t port = 19103;
	const uint64_t base = 0x1717000000000000ull;
	static struct raw w;
	static struct cli d;
	static struct rig_qp *qp[LOOP_DIALS + 1];
	static struct t_buf buf;
	struct rig_endpoint self;
	struct rig_completion c;
	struct rig_ready ready[BATCH], last = { 0 };
	struct rig_qp *waiter;
	unsigned dials, queued;
	double t0, end;
	int i, n, got, ret;
	bool found = false;

	raw_open(&w, port);
	cli_open(&d);
	/* No liveness pass: its timer would take the loop's deadline pass
	 * (and any dial waiting) every interval. */
	ret = rig_loop_liveness(d.loop, 0);
	cr_assert_eq(ret, 0, "rig_loop_liveness: %d %s", ret, rig_errmsg());
	/* A queue pair of the dialer's loop with a receive that never
	 * completes, connected to itself: its waits read the loop's rdma_cm
	 * events. */
	ret = rig_qp_make_in(d.loop, &waiter);
	cr_assert_eq(ret, 0, "rig_qp_make_in: %d %s", ret, rig_errmsg());
	rig_qp_endpoint(waiter, &self);
	ret = rig_qp_connect(waiter, &self);
	cr_assert_eq(ret, 0, "rig_qp_connect: %d %s", ret, rig_errmsg());
	t_buf(&buf, d.nic, 64, 0);
	ret = rig_qp_receive(waiter, buf.r, 0, 64);
	cr_assert_eq(ret, 0, "rig_qp_receive: %d %s", ret, rig_errmsg());

	t0 = t_now_ms();
	for (i = 0; i <= LOOP_DIALS; i++) {
		ret = rig_loop_dial(d.loop, t_other_ip(), port, DIAL_US, base + (uint64_t)i);
		cr_assert_eq(ret, 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
	}
	/* The 16 under way reach the listener, which holds them. */
	end = t0 + DIAL_US / 1000;
	while (w.requests < LOOP_DIALS) {
		cr_assert_lt(t_now_ms(), end, "%d of the %d requests at the listener",
			     w.requests, LOOP_DIALS);
		n = rig_loop_handle(d.loop, ready, BATCH);
		cr_assert_eq(n, 0, "news %d (result %d) before any answer", ready[0].news,
			     ready[0].result);
		raw_take(&w, false);
		wait_fds(&d, NULL, w.ch->fd);
	}
	dial_counts(d.loop, &dials, &queued);
	cr_assert_eq(dials, LOOP_DIALS, "dials under way");
	cr_assert_eq(queued, 1, "dials waiting their turn");
	for (i = 0; i < w.nids; i++)
		raw_answer(&w, w.ids[i]);

	/* The answers, read by waits and kept for the loop's next turn. */
	while (kept(d.loop) < LOOP_DIALS) {
		cr_assert_lt(t_now_ms(), end, "%d of the %d answers came", kept(d.loop),
			     LOOP_DIALS);
		ret = rig_qp_wait(waiter, RIG_RECEIVE, 20000, &c);
		cr_assert_eq(ret, 0, "rig_qp_wait: %d %s", ret, rig_errmsg());
	}
	/* One turn takes their steps; the helper takes each queue pair to
	 * RTS and lists its DIALED news. */
	got = take_first_dials(d.loop, base, qp);
	while (got + listed_dialed(d.loop) < LOOP_DIALS) {
		cr_assert_lt(t_now_ms(), end, "%d of the %d dials at RTS",
			     got + listed_dialed(d.loop), LOOP_DIALS);
		usleep(1000);
	}
	/* All handed out; the next turn pays their RTUs, and all 16 are up
	 * at once. */
	while (got < LOOP_DIALS) {
		n = take_first_dials(d.loop, base, qp);
		cr_assert_gt(n, 0, "%d of %d DIALED news listed, none handed out", got,
			     LOOP_DIALS);
		got += n;
	}

	/* The 17th: its turn came; the listener answers at once now. */
	end = t0 + DIAL_US / 1000 + MARGIN_MS;
	while (!found) {
		raw_take(&w, true);
		n = rig_loop_handle(d.loop, ready, BATCH);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		for (i = 0; i < n; i++) {
			if (ready[i].news == RIG_NEWS_RING) {
				while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1)
					;
				continue;
			}
			cr_assert_eq(ready[i].news, RIG_NEWS_DIALED, "news %d (result %d)",
				     ready[i].news, ready[i].result);
			cr_assert_eq(ready[i].cookie, base + LOOP_DIALS, "DIALED of cookie %#llx",
				     (unsigned long long)ready[i].cookie);
			last = ready[i];
			found = true;
		}
		if (found)
			break;
		cr_assert_lt(t_now_ms(), end, "no news of the dial that waited its turn");
		wait_fds(&d, NULL, w.ch->fd);
	}
	dial_counts(d.loop, &dials, &queued);
	cr_assert_eq(last.result, 0,
		     "the dial that waited its turn: %d (%s) after %.0f ms, its request %s the "
		     "listener; the loop counts %u dials under way and %u waiting",
		     last.result, strerror(-last.result), t_now_ms() - t0,
		     w.requests > LOOP_DIALS ? "at" : "never at", dials, queued);
	cr_assert_not_null(last.qp);
	qp[LOOP_DIALS] = last.qp;
	/* Every RTU was sent: the listener's side of each is established. */
	while (w.established < LOOP_DIALS + 1) {
		cr_assert_lt(t_now_ms(), end, "%d of %d dials established at the listener",
			     w.established, LOOP_DIALS + 1);
		n = rig_loop_handle(d.loop, ready, BATCH);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		raw_take(&w, true);
		wait_fds(&d, NULL, w.ch->fd);
	}
	dial_counts(d.loop, &dials, &queued);
	cr_assert_eq(dials, 0, "dials under way once all are up");
	cr_assert_eq(queued, 0, "dials waiting once all are up");
	for (i = 0; i <= LOOP_DIALS; i++)
		cr_assert_eq(rig_qp_destroy(qp[i]), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_qp_destroy(waiter), 0, "%s", rig_errmsg());
	cli_close(&d);
	raw_close(&w);
}

/* ---- a dial that cannot start ----------------------------------------- */

/*
 * C2: rig_loop_dial to something that is not an address is the caller's
 * mistake: -EINVAL, and the loop is as it was, no news and no connection
 * counted. rig_loops_listen gives each request to the member loop with
 * the fewest connections (rig(7) CONNECTIONS BY ADDRESS): after such
 * dials on loop A, two connections to a listener of A and B go one to
 * each, as if A held none (which it does not).
 *
 * Each loop first makes one dial that fails (nobody listens on its
 * port): a loop that never turned counts as stalled, and is passed over
 * while another may be picked.
 */
Test(counts, C2_a_dial_that_cannot_start_leaves_its_loop_as_it_was, .timeout = 120)
{
	const uint16_t port = 19104, closed_port = 19105;
	const uint64_t base = 0xc2c2000000000000ull;
	static struct srv s;
	static struct cli d;
	struct rig_qp *kept_qp[2];
	struct rig_ready r;
	struct cli as;
	unsigned before, after;
	double end;
	int i, k, ret;

	srv_open(&s, 2, port);
	cli_open(&d);
	/* Each server loop turns: a dial of its own that fails (to the
	 * dialer's address: the server's own is on no route of rdma_cm's
	 * across two hosts). */
	for (k = 0; k < 2; k++) {
		as = (struct cli){ s.nic, s.loop[k], 0 };
		ret = rig_loop_dial(s.loop[k], getenv("RIG_TEST_IP"), closed_port, DIAL_US, base + 100 + k);
		cr_assert_eq(ret, 0, "rig_loop_dial: %d %s", ret, rig_errmsg());
		r = dialed(&as, NULL, base + 100 + (uint64_t)k,
			   t_now_ms() + DIAL_US / 1000 + MARGIN_MS);
		cr_assert_eq(r.result, -ECONNREFUSED, "a dial to a port nobody listens on: %d",
			     r.result);
	}
	before = cm_held(s.loop[0]);
	for (i = 0; i < 5; i++) {
		ret = rig_loop_dial(s.loop[0], "not-an-address", port, DIAL_US, base + 200 + i);
		cr_assert_eq(ret, -EINVAL, "rig_loop_dial to 'not-an-address': %d", ret);
	}
	after = cm_held(s.loop[0]);
	ret = rig_loop_handle(s.loop[0], &r, 1);
	cr_assert_eq(ret, 0, "news %d (result %d) of a dial that never started", r.news,
		     r.result);
	/* Two connections, one after the other. */
	for (i = 0; i < 2; i++) {
		ret = rig_loop_dial(d.loop, t_other_ip(), port, DIAL_US, base + (uint64_t)i);
		cr_assert_eq(ret, 0, "rig_loop_dial: %d %s", ret, rig_errmsg());
		r = dialed(&d, &s, base + (uint64_t)i, t_now_ms() + DIAL_US / 1000 + MARGIN_MS);
		cr_assert_eq(r.result, 0, "dial %d: %d", i, r.result);
		end = t_now_ms() + DIAL_US / 1000;
		while (s.accepted[0] + s.accepted[1] < i + 1) {
			cr_assert_lt(t_now_ms(), end, "the server accepted none");
			srv_turn(&s);
			wait_fds(&d, &s, -1);
		}
		kept_qp[i] = r.qp;
	}
	cr_assert_eq(s.accepted[0], 1,
		     "after 5 dials that could not start, loop A was given %d of the 2 "
		     "connections and loop B %d; loop A counts %u connections, loop B %u",
		     s.accepted[0], s.accepted[1], cm_held(s.loop[0]), cm_held(s.loop[1]));
	cr_assert_eq(s.accepted[1], 1);
	cr_assert_eq(after, before, "loop A counted %u connections before 5 dials that could "
		     "not start, %u after", before, after);
	for (i = 0; i < 2; i++)
		cr_assert_eq(rig_qp_destroy(kept_qp[i]), 0, "%s", rig_errmsg());
	cli_close(&d);
	srv_close(&s);
}

/* ---- rig_errmsg() across a loop's turns -------------------------------- */

/*
 * C1: rig_errmsg() is this thread's explanation of its last failed call,
 * and stays until the thread's next failing call: a rig_loop_handle that
 * succeeds leaves it alone, whatever the turn found. Here a dial fails
 * during the turns (its outcome is news: @want), after a failed call of
 * the thread's own set the message.
 */
static void errmsg_survives_a_failed_dial(uint16_t port, bool listening, int64_t us, int want)
{
	const uint64_t cookie = 0xc1c1000000000000ull + port;
	static struct raw w;
	static struct cli d;
	struct rig_ready r;
	char msg[256];
	double t0, end;
	int n, ret;

	if (listening)
		raw_open(&w, port);	/* it never answers */
	cli_open(&d);
	t0 = t_now_ms();
	ret = rig_loop_dial(d.loop, t_other_ip(), port, us, cookie);
	cr_assert_eq(ret, 0, "rig_loop_dial: %d %s", ret, rig_errmsg());
	ret = rig_qp_destroy(NULL);
	cr_assert_eq(ret, -EINVAL);
	snprintf(msg, sizeof(msg), "%s", rig_errmsg());
	end = t0 + us / 1000 + MARGIN_MS;
	for (;;) {
		n = rig_loop_handle(d.loop, &r, 1);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		cr_assert_str_eq(rig_errmsg(), msg,
				 "rig_loop_handle returned %d, and rig_errmsg() reads \"%s\", not "
				 "\"%s\" as before it", n, rig_errmsg(), msg);
		if (n)
			break;
		cr_assert_lt(t_now_ms(), end, "no news of the dial");
		if (listening)
			raw_take(&w, false);
		wait_fds(&d, NULL, listening ? w.ch->fd : -1);
	}
	cr_assert_eq(r.news, RIG_NEWS_DIALED, "news %d (result %d)", r.news, r.result);
	cr_assert_eq(r.cookie, cookie);
	cr_assert_eq(r.result, want, "the dial: %d, not %d", r.result, want);
	cli_close(&d);
	if (listening)
		raw_close(&w);
}

/* The dial's bound passes on the loop's timer (a listener that never
 * answers). */
Test(counts, C1_a_turn_that_times_a_dial_out_leaves_rig_errmsg_alone, .timeout = 60)
{
	errmsg_survives_a_failed_dial(19106, true, 300000, -ETIMEDOUT);
}

/* The dial is refused (nobody listens on the port): an rdma_cm event
 * ends it in the turn's step. */
Test(counts, C1_a_turn_that_finds_a_dial_refused_leaves_rig_errmsg_alone, .timeout = 60)
{
	errmsg_survives_a_failed_dial(19107, false, DIAL_US, -ECONNREFUSED);
}

/* ---- a shared listener's references ------------------------------------ */

static struct {
	bool armed;
	struct rig_loop *victim;	/* closed by the closer thread */
	sem_t go, done;
	int ret, waited;
} win;

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	static __typeof__(&rdma_listen) real;
	struct timespec until;

	if (!real)
		real = T_NEXT(rdma_listen);
	if (__atomic_exchange_n(&win.armed, false, __ATOMIC_ACQ_REL)) {
		sem_post(&win.go);
		/* Bounded: a rig that keeps a member's close out of this
		 * window (a lock held across it) has the close wait, and
		 * finish once rig_loops_listen is done. */
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 5;
		win.waited = sem_timedwait(&win.done, &until);
	}
	return real(id, backlog);
}

static void *closer_main(void *arg)
{
	(void)arg;
	sem_wait(&win.go);
	win.ret = rig_loop_close(win.victim);
	sem_post(&win.done);
	return NULL;
}

/* rig_loops_listen of two fresh loops and its close; with
 * @close_in_window, the second loop closes on another thread while the
 * listener's id is about to listen, its members joined. */
static void listen_cycle(struct rig_nic *nic, uint16_t port, bool close_in_window)
{
	struct rig_loop *loops[2];
	struct rig_listener *l;
	pthread_t closer;
	int i, ret;

	for (i = 0; i < 2; i++) {
		ret = rig_loop_open(nic, &loops[i]);
		cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	}
	if (close_in_window) {
		cr_assert_eq(sem_init(&win.go, 0, 0), 0);
		cr_assert_eq(sem_init(&win.done, 0, 0), 0);
		win.victim = loops[1];
		win.ret = -1;
		cr_assert_eq(pthread_create(&closer, NULL, closer_main, NULL), 0);
		__atomic_store_n(&win.armed, true, __ATOMIC_RELEASE);
	}
	ret = rig_loops_listen(loops, 2, t_other_ip(), port, LISTEN_COOKIE, &l);
	cr_assert_eq(ret, 0, "rig_loops_listen: %d %s", ret, rig_errmsg());
	if (close_in_window) {
		cr_assert(!__atomic_load_n(&win.armed, __ATOMIC_ACQUIRE),
			  "rig_loops_listen never called rdma_listen");
		cr_assert_eq(pthread_join(closer, NULL), 0);
		cr_assert_eq(win.ret, 0, "rig_loop_close of the member: %d", win.ret);
		cr_log_info("the member's close %s inside the window",
			    win.waited ? "waited, and ended after it" : "ended");
	}
	ret = rig_listener_close(l);
	cr_assert_eq(ret, 0, "rig_listener_close: %d %s", ret, rig_errmsg());
	for (i = 0; i < (close_in_window ? 1 : 2); i++) {
		ret = rig_loop_close(loops[i]);
		cr_assert_eq(ret, 0, "rig_loop_close: %d %s", ret, rig_errmsg());
	}
}

/*
 * rig_loops_listen(3): a member loop that closes leaves the listener,
 * and the listener goes with its close and its last member. One that
 * closes while rig_loops_listen is starting it (its members joined, the
 * id not yet listening) too: once the listener and the other member are
 * closed, nothing of it is left (its rdma_cm channel and its timer are
 * fds, counted here; LeakSanitizer counts its memory).
 */
Test(counts, a_member_loop_closed_as_rig_loops_listen_starts_leaves_nothing, .timeout = 60)
{
	struct rig_nic *nic = t_nic_open(t_other_dev());
	int fds, now;

	listen_cycle(nic, 19108, false);	/* librdmacm keeps fds from its first use */
	fds = t_fd_count();
	listen_cycle(nic, 19109, false);
	now = t_fd_count();
	cr_assert_eq(now, fds, "a listener opened and closed: %d fds, %d before", now, fds);
	listen_cycle(nic, 19110, true);
	now = t_fd_count();
	cr_assert_eq(now, fds, "%d fds left open by a listener whose member loop closed as it "
		     "started (its channel and timer are two), %d before", now - fds, fds);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
}

/* ---- rig_errmsg() across a listener's turns ---------------------------- */

/*
 * Raw rdma_cm dialers from $RIG_TEST_DEV that send rig's request (an
 * endpoint naming a queue-pair number of their own, none real) and never
 * finish the handshake.
 */
struct rawd {
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id[SLOTS];
	int n, sent, rejected;
	struct rig_endpoint e;
};

static void rawd_start(struct rawd *r, int n, uint16_t port)
{
	struct sockaddr_in sin = { 0 };
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *qp = t_qp(nic);
	int i;

	memset(r, 0, sizeof(*r));
	rig_qp_endpoint(qp, &r->e);	/* the dialers' GID and MAC */
	cr_assert_eq(rig_qp_destroy(qp), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
	r->n = n;
	r->ch = rdma_create_event_channel();
	cr_assert_not_null(r->ch);
	cr_assert_eq(fcntl(r->ch->fd, F_SETFL, O_NONBLOCK), 0);
	sin.sin_family = AF_INET;
	sin.sin_port = htons(port);
	cr_assert_eq(inet_pton(AF_INET, t_other_ip(), &sin.sin_addr), 1);
	for (i = 0; i < n; i++) {
		cr_assert_eq(rdma_create_id(r->ch, &r->id[i], (void *)(intptr_t)i, RDMA_PS_TCP), 0,
			     "rdma_create_id: %s", strerror(errno));
		cr_assert_eq(rdma_resolve_addr(r->id[i], NULL, (struct sockaddr *)&sin, 5000), 0,
			     "rdma_resolve_addr: %s", strerror(errno));
	}
}

/* Takes the dialers' events: each sends its request once its route is
 * resolved, with a queue-pair number of its own (the CM rejects a
 * second request naming one a connection from that host has). */
static void rawd_take(struct rawd *r)
{
	uint8_t priv[RIG_CM_PRIVATE];
	struct rdma_conn_param p;
	struct rdma_cm_event *ev;
	struct rig_endpoint e;

	while (!rdma_get_cm_event(r->ch, &ev)) {
		struct rdma_cm_id *id = ev->id;
		enum rdma_cm_event_type type = ev->event;
		int status = ev->status;

		rdma_ack_cm_event(ev);
		switch (type) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			cr_assert_eq(rdma_resolve_route(id, 5000), 0, "rdma_resolve_route: %s",
				     strerror(errno));
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			e = r->e;
			e.qp = 0x1000 + (uint32_t)(intptr_t)id->context;
			rig_cm_pack(&e, priv);
			t_raw_param(&p, priv, RIG_CM_PRIVATE, e.qp);
			cr_assert_eq(rdma_connect(id, &p), 0, "rdma_connect: %s", strerror(errno));
			r->sent++;
			break;
		case RDMA_CM_EVENT_REJECTED:
			r->rejected++;
			break;
		case RDMA_CM_EVENT_CONNECT_RESPONSE:
			break;		/* never finished */
		default:
			cr_assert_fail("a raw dialer: %s (status %d)", rdma_event_str(type), status);
		}
	}
	cr_assert_eq(errno, EAGAIN, "rdma_get_cm_event: %s", strerror(errno));
}

static void rawd_close(struct rawd *r)
{
	int i;

	rawd_take(r);
	for (i = 0; i < r->n; i++)
		rdma_destroy_id(r->id[i]);
	rdma_destroy_event_channel(r->ch);
}

/*
 * C1 at a listener: RIG_CM_HANDSHAKES dialers that never finish hold
 * every turn, and one more request waits. The gate holds the server's
 * helper in its first queue pair: no handshake is answered, none comes
 * up or ends, so RIG_CM_HALF_OPEN_MS after it came the waiting request
 * is rejected. Then the gate opens, and the half-done handshakes are
 * handed out, answered and dropped at their bound (GONE, -ETIMEDOUT).
 * Every turn of the server's loops returns >= 0, and leaves rig_errmsg()
 * as a failed call of the thread's own set it. @n loops: 1, a loop's
 * own listener (rig_loop_listen); 2, one shared (rig_loops_listen).
 */
static void errmsg_survives_a_refused_wait(int n, uint16_t port)
{
	static struct srv s;
	static struct rawd r;
	char msg[256];
	double end;
	int ret;

	srv_open(&s, n, port);
	rawd_start(&r, RIG_CM_HANDSHAKES + 1, port);	/* rig_nic_open clears it */
	ret = rig_qp_destroy(NULL);
	cr_assert_eq(ret, -EINVAL);
	snprintf(msg, sizeof(msg), "%s", rig_errmsg());
	s.errmsg = msg;
	gate_set(true);
	end = t_now_ms() + RIG_CM_HALF_OPEN_MS + 4 * MARGIN_MS;
	while (r.rejected < 1) {
		cr_assert_lt(t_now_ms(), end,
			     "%d of %d requests sent, none refused; the server's helper is %s",
			     r.sent, r.n, gate_held() ? "held" : "not held");
		rawd_take(&r);
		srv_turn(&s);
		wait_fds(NULL, &s, r.ch->fd);
	}
	cr_assert_eq(r.rejected, 1, "requests refused with every turn held: the waiting one only");
	cr_assert_eq(s.accepted[0] + s.accepted[1], 0, "handshakes handed out, the gate shut");
	gate_set(false);
	end = t_now_ms() + 2 * RIG_CM_HALF_OPEN_MS + 4 * MARGIN_MS;
	while (s.gone < RIG_CM_HANDSHAKES) {
		cr_assert_lt(t_now_ms(), end,
			     "%d of %d requests sent, %d refused; the server accepted %d, "
			     "dropped %d", r.sent, r.n, r.rejected, s.accepted[0] + s.accepted[1],
			     s.gone);
		rawd_take(&r);
		srv_turn(&s);
		wait_fds(NULL, &s, r.ch->fd);
	}
	cr_assert_eq(s.accepted[0] + s.accepted[1], RIG_CM_HANDSHAKES,
		     "handshakes handed out");
	s.errmsg = NULL;
	rawd_close(&r);
	srv_close(&s);
}

Test(counts, C1_a_loop_listener_that_refuses_a_waiting_request_leaves_rig_errmsg_alone,
     .timeout = 120)
{
	errmsg_survives_a_refused_wait(1, 19111);
}

Test(counts, C1_a_shared_listener_that_refuses_a_waiting_request_leaves_rig_errmsg_alone,
     .timeout = 120)
{
	errmsg_survives_a_refused_wait(2, 19112);
}
