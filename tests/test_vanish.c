/* SPDX-License-Identifier: MIT */
/*
 * Peers that vanish (include/rig/cm.h). On a connection made by address,
 * when the peer leaves, rdma_cm's DISCONNECTED fails the queue pair at
 * once, as an async event does (rig(7) F1, F6): every due entry of both
 * rings completes with -ECONNRESET, in ring order; rig_qp_failure() gives
 * -ECONNRESET; the loop hands out RIG_NEWS_GONE with -ECONNRESET, with no
 * poll by the application. A queue pair with only receives posted learns
 * it too: no transport retry would ever tell it, for it sends nothing.
 *
 * The peer is another process: a child forked from the test that opens
 * its own NIC ($RIG_TEST_PEER_DEV on two hosts, so its packets cross the
 * veth; else $RIG_TEST_DEV) and dials or accepts with the blocking calls,
 * while the test's side dials or listens in a loop. Each way of leaving
 * is timed from the act (stamped by whoever acts, on the monotonic clock
 * all processes share) to the news, and the times are printed as a table
 * on stderr.
 *
 * The tests run one at a time (a constructor sets CRITERION_JOBS=1): one
 * of them takes the peer's link down, and the times mean more alone.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <errno.h>
#include <liburing.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_device.h"

/*
 * How soon the survivor must know when the peer leaves by any act of its
 * own (destroy, NIC close, exit, SIGKILL): the peer's kernel sends a CM
 * disconnect request at once, and it crosses the wire in one packet. The
 * transport could only tell a queue pair that sends, after its retries:
 * 7 tries of 67 ms, ~470 ms on Soft-RoCE (retry count 6, README), and an
 * RNR wait gives up after as long. Measured in the emulated guest: 4-40
 * ms, up to ~170 ms on a host loaded four times over. 300 ms leaves room
 * for a busy machine and stays well under the retries, so a notice in
 * time cannot have come from them (nor can its -ECONNRESET: theirs is
 * -ETIMEDOUT). The sends of the tests are posted just before the act, so
 * they are still due (waiting for the peer's receives) when the notice
 * comes.
 *
 * A process that exits or is killed first tears down its memory, then
 * closes its files, its rdma_cm file among them: only then can anyone
 * know. The teardown is the dying process's, not rig's, and takes from
 * ~10 ms to over 200 ms under AddressSanitizer (its shadow memory) in the
 * guest; so for those two the bound runs from the close of its files
 * (EOF on its pipe, closed in the same pass), and the table shows both.
 */
#define NOTICE_MAX_MS 300
/* Each bound here also allows what the machine stalled a thread during the
 * test (t_stall_max_ms(): the suites start the meter), for a busy host
 * delays the dying process, the kernel's work and the test's own thread
 * alike, and that is not rig's. */
/*
 * A cut link tells nobody but the transport: a send fails with -ETIMEDOUT
 * once its retries run out, ~470 ms after it was posted. Not before
 * 300 ms (no retransmit timer is pending at the post: nothing was sent on
 * that queue pair before) nor after 3 s, as in test_death.
 */
#define CUT_MIN_MS 300
#define CUT_MAX_MS 3000
/* How long the queue pairs that must learn nothing are watched: three
 * times the notice bound, and twice the transport's retry bound. */
#define QUIET_MS 1000
/* Every other bound: a missing notice fails here, not at the timeout. */
#define LONG_MS 10000

#define NRECV 5			/* receives posted on each queue pair */
#define NSEND 3			/* sends posted where the queue pair sends */
#define RECV_COOKIE 0x100
#define SEND_COOKIE 0x200
#define MSG 64
#define TAG 0x76a9		/* the loop's user_data in the io_uring */

__attribute__((constructor)) static void run_serially(void)
{
	setenv("CRITERION_JOBS", "1", 1);
}

#if defined(__SANITIZE_ADDRESS__)
/*
 * Under AddressSanitizer, exit() scans the whole heap for leaks before the
 * process ends (~200 ms in the emulated guest), and the peer that exits
 * leaves all of rig open on purpose: the scan would be timed as rig's
 * notice, and its report would make the exit status 23. The leak checks
 * that count (RIG_TEST_LSAN=1, t_device.c) are explicit calls, which this
 * does not turn off.
 */
const char *__lsan_default_options(void);
const char *__lsan_default_options(void)
{
	return "leak_check_at_exit=0";
}
#endif

/* ---- addresses, devices, the table ------------------------------------ */

static const char *my_ip(void)
{
	return getenv("RIG_TEST_IP");
}

static const char *topology(void)
{
	return t_peer_dev() ? "two hosts" : "one host";
}

/* The table: a header from the runner, one row per measure from each
 * test (they run one at a time, so the rows follow it). */
ReportHook(PRE_ALL)(struct criterion_test_set *set)
{
	(void)set;
	fprintf(stderr, "test_vanish: ms from the peer's act (and from the close of its "
		"files, when it dies) to the survivor's notice\n"
		"  %-66s | %-9s | %8s | %8s\n", "case", "topology", "act", "files");
}

/* A row; @files is NAN unless the peer died. */
static void row(const char *what, double act, double files)
{
	if (isnan(files))
		fprintf(stderr, "  %-66s | %-9s | %8.1f | %8s\n", what, topology(), act, "-");
	else
		fprintf(stderr, "  %-66s | %-9s | %8.1f | %8.1f\n", what, topology(), act,
			files);
}

/* ---- the peer process, without Criterion ------------------------------ */

enum act {
	ACT_DESTROY,		/* rig_qp_destroy each queue pair, live on */
	ACT_NIC_CLOSE,		/* rig_nic_close, live on */
	ACT_EXIT,		/* exit(0), nothing closed */
	ACT_SIGKILL,		/* the test kills it */
	ACT_NONE,		/* stays until told to go (the link is cut) */
};

static const char *const act_name[] = {
	[ACT_DESTROY] = "peer destroys its queue pairs",
	[ACT_NIC_CLOSE] = "peer closes its NIC",
	[ACT_EXIT] = "peer process exits",
	[ACT_SIGKILL] = "peer process SIGKILLed",
	[ACT_NONE] = "peer's link cut",
};

struct peer {
	pid_t pid;
	int to, from;		/* pipes to and from the child */
	int accepts;		/* connections the child accepts on @port */
	int dials;		/* connections it then dials to the test's @port + 1 */
	uint16_t port;
	enum act act;
	pthread_t watcher;	/* reads @from to EOF: the child's files closed */
	bool watched;
	double closed_at;
};

/* What the child stamps when it acts; shared with the test. */
static volatile double *act_at;

static void xwrite(int fd, char b)
{
	T_CHILD_CHECK(write(fd, &b, 1) == 1, "write to pipe: %s", strerror(errno));
}

static void xread(int fd, char want)
{
	char b = 0;

	T_CHILD_CHECK(read(fd, &b, 1) == 1 && b == want, "no '%c' from the test", want);
}

/*
 * The child: opens its NIC, listens on @port and accepts @accepts
 * connections (after saying 'L'), dials @dials to the test's @port + 1
 * (once told 'D'), says 'R', then on 'G' acts, stamping the time first.
 * It posts nothing: the test's sends wait for receives that never come.
 */
static void peer_main(const struct peer *p, int in, int out)
{
	struct rig_nic *nic = NULL;
	struct rig_listener *l = NULL;
	struct rig_qp *q[4] = { NULL };
	int i, n = 0, ret;
	char b;

	alarm(60);	/* a hang ends in SIGALRM, not a stalled suite */
	ret = rig_nic_open(t_other_dev(), &nic);
	T_CHILD_CHECK(ret == 0, "rig_nic_open(%s): %d %s", t_other_dev(), ret, rig_errmsg());
	if (p->accepts) {
		ret = rig_listen(nic, t_other_ip(), p->port, &l);
		T_CHILD_CHECK(ret == 0, "rig_listen: %d %s", ret, rig_errmsg());
		xwrite(out, 'L');
		for (i = 0; i < p->accepts; i++, n++) {
			ret = rig_accept(l, LONG_MS * 1000ll, &q[n]);
			T_CHILD_CHECK(ret == 0, "rig_accept %d: %d %s", i, ret, rig_errmsg());
		}
	}
	if (p->dials) {
		xread(in, 'D');
		for (i = 0; i < p->dials; i++, n++) {
			ret = rig_dial(nic, my_ip(), p->port + 1, LONG_MS * 1000ll, &q[n]);
			T_CHILD_CHECK(ret == 0, "rig_dial %d: %d %s", i, ret, rig_errmsg());
		}
	}
	xwrite(out, 'R');
	if (p->act == ACT_SIGKILL)
		for (;;)
			pause();
	if (p->act != ACT_NONE) {
		xread(in, 'G');
		*act_at = t_now_ms();
	}
	switch (p->act) {
	case ACT_DESTROY:
		for (i = 0; i < n; i++) {
			ret = rig_qp_destroy(q[i]);
			T_CHILD_CHECK(ret == 0, "rig_qp_destroy: %d %s", ret, rig_errmsg());
		}
		break;
	case ACT_NIC_CLOSE:
		ret = rig_nic_close(nic);
		T_CHILD_CHECK(ret == 0, "rig_nic_close: %d %s", ret, rig_errmsg());
		break;
	case ACT_EXIT:
		exit(0);	/* atexit handlers run; rig's objects are left open */
	default:
		break;
	}
	/* Live on until the test is done: it must learn of the act, not of
	 * this process's end. EOF (the test failed) ends it too. */
	ret = (int)read(in, &b, 1);
	_exit(0);
}

static void peer_start(struct peer *p)
{
	if (!act_at) {
		act_at = mmap(NULL, sizeof(*act_at), PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		cr_assert_neq((void *)act_at, MAP_FAILED);
	}
	*act_at = 0;
	t_child_report();
	/* a peer that died early fails a write to it, not the test process */
	signal(SIGPIPE, SIG_IGN);
	fflush(NULL);	/* nothing buffered for the child's exit() to print */
	p->pid = t_fork_piped(&p->to, &p->from, 0);
	if (p->pid == 0)
		peer_main(p, p->from, p->to);
}

static void peer_say(struct peer *p, char b)
{
	cr_assert_eq(write(p->to, &b, 1), 1, "the peer is gone: %s", t_child_msg());
}

static void peer_expect(struct peer *p, char want)
{
	char b = 0;

	cr_assert(read(p->from, &b, 1) == 1 && b == want,
		  "the peer did not say '%c': %s", want, t_child_msg());
}

static void *watch_peer(void *arg)
{
	struct peer *p = arg;
	char b;

	while (read(p->from, &b, 1) > 0)
		;
	p->closed_at = t_now_ms();
	return NULL;
}

/* Once the child said 'R': a thread waits for EOF on its pipe, which
 * comes when the child's files close. Its stamp is this thread's wakeup,
 * which may trail the notice by a few ms (a negative "files" time). */
static void peer_watch(struct peer *p)
{
	cr_assert_eq(pthread_create(&p->watcher, NULL, watch_peer, p), 0);
	p->watched = true;
}

/* When the child's files closed; for a child that dies. */
static double peer_closed_at(struct peer *p)
{
	if (p->watched) {
		cr_assert_eq(pthread_join(p->watcher, NULL), 0);
		p->watched = false;
	}
	cr_assert_gt(p->closed_at, 0, "the peer's pipe was not watched");
	return p->closed_at;
}

/* Lets the peer go (if it still lives) and checks how it ended. */
static void peer_end(struct peer *p)
{
	int status;

	if (p->act != ACT_SIGKILL && p->act != ACT_EXIT)
		peer_say(p, 'B');
	close(p->to);
	if (p->watched)
		cr_assert_eq(pthread_join(p->watcher, NULL), 0);
	cr_assert_eq(waitpid(p->pid, &status, 0), p->pid);
	close(p->from);
	if (p->act == ACT_SIGKILL)
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
			  "the peer ended otherwise: status %#x %s", status, t_child_msg());
	else
		cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
			  "the peer ended with status %#x: %s", status, t_child_msg());
}

/* Tells @p to act, or kills it, stamping the time just before. */
static void peer_act(struct peer *p)
{
	if (p->act == ACT_SIGKILL) {
		*act_at = t_now_ms();
		cr_assert_eq(kill(p->pid, SIGKILL), 0);
	} else {
		peer_say(p, 'G');
	}
}

/* When the peer acted (the child stamps it before it acts). */
static double acted_at(void)
{
	cr_assert_gt(*act_at, 0, "the peer did not act: %s", t_child_msg());
	return *act_at;
}

/* ---- the test's side: a loop in an io_uring --------------------------- */

struct side {
	struct rig_nic *nic;
	struct rig_loop *loop;
	struct io_uring ring;
	struct rig_ready news[64];
	int n, next;		/* news handed out, and taken by next_news */
	bool more;		/* the last handle filled all 64 */
	struct rig_listener *l;
};

static void side_open(struct side *s)
{
	int ret;

	memset(s, 0, sizeof(*s));
	s->nic = t_nic_open(t_dev());
	ret = rig_loop_open(s->nic, &s->loop);
	cr_assert_eq(ret, 0, "rig_loop_open: %d %s", ret, rig_errmsg());
	cr_assert_eq(io_uring_queue_init(8, &s->ring, 0), 0);
	ret = rig_uring_watch(&s->ring, s->loop, TAG);
	cr_assert_eq(ret, 0, "rig_uring_watch: %d %s", ret, rig_errmsg());
	cr_assert_geq(io_uring_submit(&s->ring), 0);
}

static void side_close(struct side *s)
{
	if (s->l)
		cr_assert_eq(rig_listener_close(s->l), 0);
	cr_assert_eq(rig_loop_close(s->loop), 0, "rig_loop_close: %s", rig_errmsg());
	io_uring_queue_exit(&s->ring);
	cr_assert_eq(rig_nic_close(s->nic), 0, "rig_nic_close: %s", rig_errmsg());
}

/* The next piece of news, waiting in the io_uring until @end (t_now_ms);
 * false at @end. The application's part only: no poll of any ring. */
static bool next_news(struct side *s, double end, struct rig_ready *out)
{
	struct __kernel_timespec ts;
	struct io_uring_cqe *cqe;
	double left;
	int ret;

	while (s->next == s->n) {
		if (s->more) {
			s->n = rig_uring_handle(&s->ring, s->loop, NULL, s->news, 64);
		} else {
			left = end - t_now_ms();
			if (left <= 0)
				return false;
			ts.tv_sec = (long long)left / 1000;
			ts.tv_nsec = ((long long)(left * 1e6)) % 1000000000;
			ret = io_uring_wait_cqe_timeout(&s->ring, &cqe, &ts);
			if (ret == -ETIME || ret == -EINTR)
				continue;
			cr_assert_eq(ret, 0, "io_uring_wait_cqe_timeout: %d", ret);
			cr_assert_eq(cqe->user_data, TAG, "a CQE of nobody's: %llu",
				     (unsigned long long)cqe->user_data);
			s->n = rig_uring_handle(&s->ring, s->loop, cqe, s->news, 64);
			io_uring_cqe_seen(&s->ring, cqe);
			cr_assert_geq(io_uring_submit(&s->ring), 0);
		}
		cr_assert_geq(s->n, 0, "rig_uring_handle: %d %s", s->n, rig_errmsg());
		s->more = s->n == 64;
		s->next = 0;
	}
	*out = s->news[s->next++];
	return true;
}

/* One connection of the test's side, and what the loop said of it. */
struct conn {
	struct rig_qp *qp;
	int recvs, sends;	/* entries posted */
	int gone;		/* RIG_NEWS_GONE handed out */
	int gone_result;
	double gone_at;
	unsigned listed;	/* 1 << side: its ring was handed out */
};

/* The rings of @k with entries due, as in conn.listed. */
static unsigned due_rings(const struct conn *k)
{
	return (k->recvs ? 1u << RIG_RECEIVE : 0) | (k->sends ? 1u << RIG_SEND : 0);
}

/* The loop has told all there is to tell of @k's end. */
static bool told(const struct conn *k)
{
	return k->gone && (k->listed & due_rings(k)) == due_rings(k);
}

static struct conn *conn_of(struct conn *c, int n, const struct rig_qp *qp)
{
	int i;

	for (i = 0; i < n; i++)
		if (c[i].qp == qp)
			return &c[i];
	return NULL;
}

/* Records news of @c's queue pairs; fails on news of any other. */
static void note(struct conn *c, int n, const struct rig_ready *r)
{
	struct conn *k = conn_of(c, n, r->qp);

	cr_assert_not_null(k, "news %d of a queue pair the test does not have", r->news);
	if (r->news == RIG_NEWS_RING) {
		k->listed |= 1u << r->side;
	} else {
		cr_assert_eq(r->news, RIG_NEWS_GONE, "news %d of a connected queue pair",
			     r->news);
		cr_assert_eq(k->gone, 0, "RIG_NEWS_GONE handed out twice for one queue pair");
		k->gone = 1;
		k->gone_result = r->result;
		k->gone_at = t_now_ms();
	}
}

/* Connects @n queue pairs to the peer through the loop: the test dials
 * the peer's listener, or listens for the peer's dials. */
static void side_connect(struct side *s, struct peer *p, bool dial, struct conn *c, int n)
{
	struct rig_ready r;
	double end;
	int i, got = 0, ret;

	memset(c, 0, n * sizeof(*c));
	if (dial) {
		peer_expect(p, 'L');
		for (i = 0; i < n; i++) {
			ret = rig_loop_dial(s->loop, t_other_ip(), p->port, LONG_MS * 1000ll,
					    (uint64_t)i + 1);
			cr_assert_eq(ret, 0, "rig_loop_dial %d: %d %s", i, ret, rig_errmsg());
		}
	} else {
		ret = rig_loop_listen(s->loop, my_ip(), p->port + 1, 77, &s->l);
		cr_assert_eq(ret, 0, "rig_loop_listen: %d %s", ret, rig_errmsg());
		peer_say(p, 'D');
	}
	end = t_now_ms() + LONG_MS;
	while (got < n) {
		cr_assert(next_news(s, end, &r), "%d of %d connections made in %d ms",
			  got, n, LONG_MS);
		if (r.news == RIG_NEWS_RING)
			continue;	/* nothing is posted yet: a spurious listing */
		if (dial) {
			cr_assert_eq(r.news, RIG_NEWS_DIALED, "news %d, not DIALED", r.news);
			cr_assert(r.cookie >= 1 && r.cookie <= (uint64_t)n && !c[r.cookie - 1].qp,
				  "DIALED with cookie %llu", (unsigned long long)r.cookie);
			cr_assert_eq(r.result, 0, "dial %llu: %d", (unsigned long long)r.cookie,
				     r.result);
			cr_assert_not_null(r.qp);
			c[r.cookie - 1].qp = r.qp;
		} else {
			cr_assert_eq(r.news, RIG_NEWS_ACCEPTED, "news %d, not ACCEPTED", r.news);
			cr_assert_eq(r.cookie, 77);
			cr_assert_not_null(r.qp);
			c[got].qp = r.qp;
		}
		got++;
	}
	/* The peer's rig_accept or rig_dial returns once its handshake ends,
	 * and this side's last message of each goes at the loop's next turn
	 * (rig(7)): the loop turns until the peer says it is ready. Nothing
	 * is posted yet, so no news but a spurious listing may come. */
	end = t_now_ms() + LONG_MS;
	while (poll(&(struct pollfd){ .fd = p->from, .events = POLLIN }, 1, 0) == 0) {
		cr_assert_lt(t_now_ms(), end, "the peer not ready in %d ms", LONG_MS);
		if (next_news(s, t_now_ms() + 20, &r))
			cr_assert_eq(r.news, RIG_NEWS_RING, "news %d before the peer was ready",
				     r.news);
	}
	peer_expect(p, 'R');
}

/* Posts @recvs receives, then @sends sends, each batch with cookies in
 * order: RECV_COOKIE + i, SEND_COOKIE + i. */
static void post(struct conn *c, struct t_buf *b, int recvs, int sends)
{
	struct rig_post e[NRECV + NSEND];
	int i, ret;

	for (i = 0; i < recvs; i++)
		e[i] = (struct rig_post){ b->r, (size_t)i * MSG, MSG, RECV_COOKIE + i };
	if (recvs) {
		ret = rig_qp_receive_batch(c->qp, e, recvs);
		cr_assert_eq(ret, recvs, "rig_qp_receive_batch: %d %s", ret, rig_errmsg());
	}
	for (i = 0; i < sends; i++)
		e[i] = (struct rig_post){ b->r, (size_t)i * MSG, MSG, SEND_COOKIE + i };
	if (sends) {
		ret = rig_qp_send_batch(c->qp, e, sends);
		cr_assert_eq(ret, sends, "rig_qp_send_batch: %d %s", ret, rig_errmsg());
	}
	c->recvs += recvs;
	c->sends += sends;
}

/* The next completion of @side with its cookie, polled for up to @ms: the
 * NIC's flush of a failed queue pair may still be on its way. */
static struct rig_completion take(struct rig_qp *qp, enum rig_side side,
				  uint64_t *cookie, int ms)
{
	double end = t_now_ms() + ms;
	struct rig_completion c;
	int n;

	for (;;) {
		n = rig_qp_poll_batch(qp, side, &c, cookie, 1);
		cr_assert_geq(n, 0, "rig_qp_poll_batch: %d %s", n, rig_errmsg());
		if (n == 1)
			return c;
		cr_assert_lt(t_now_ms(), end, "no completion on the %s ring in %d ms",
			     side == RIG_SEND ? "send" : "receive", ms);
	}
}

/* Takes the @n due entries of @side (cookies @base + i): each fails with
 * @error and a reason with @word in it, in ring order; then none is due. */
static void expect_failed(struct rig_qp *qp, enum rig_side side, int n, uint64_t base,
			  int error, const char *word, const char *what)
{
	const char *ring = side == RIG_SEND ? "send" : "receive";
	struct rig_completion c;
	uint64_t cookie;
	int i;

	for (i = 0; i < n; i++) {
		c = take(qp, side, &cookie, 2000);
		cr_assert_eq(c.error, error, "%s: %s %d: error %d (%s), want %d", what, ring,
			     i, c.error, c.why ? c.why : "no reason", error);
		cr_assert_eq(cookie, base + i, "%s: %s %d completed out of order: cookie %#llx",
			     what, ring, i, (unsigned long long)cookie);
		cr_assert(c.why && strstr(c.why, word), "%s: %s %d: the reason '%s' lacks '%s'",
			  what, ring, i, c.why ? c.why : "(null)", word);
	}
	cr_assert_eq(rig_qp_poll(qp, side, &c), 0, "%s: more %s completions than entries",
		     what, ring);
	cr_assert_eq(rig_qp_room(qp, side), RIG_RING_ENTRIES);
}

/* ---- 1-4: the peer leaves; the loop tells at once --------------------- */

TestSuite(vanish, .timeout = 60, .init = t_stall_start);

/*
 * F1, F6: two connections to one peer process; one with only receives
 * posted (R), one that also sends (S). The peer leaves by @act. Both
 * hear RIG_NEWS_GONE with -ECONNRESET from the loop, within
 * NOTICE_MAX_MS of the act, while the test polls no ring; both their
 * rings with entries due are handed out too; then every due entry
 * completes with -ECONNRESET and the reason naming DISCONNECTED, in
 * order, and a later post fails the same way (F5).
 */
static void leave(enum act act, bool dial, uint16_t port)
{
	struct peer p = { .accepts = dial ? 2 : 0, .dials = dial ? 0 : 2, .port = port,
			  .act = act };
	struct side s;
	struct conn c[2];	/* R, S */
	struct t_buf b;
	struct rig_ready r;
	struct rig_completion x;
	double t0, tc, from, end;
	char what[96];
	bool dies;
	int i, st;

	peer_start(&p);
	side_open(&s);
	t_buf(&b, s.nic, (NRECV + NSEND) * MSG, 7);
	side_connect(&s, &p, dial, c, 2);
	peer_watch(&p);

	post(&c[0], &b, NRECV, 0);
	post(&c[1], &b, NRECV, NSEND);
	peer_act(&p);
	end = t_now_ms() + LONG_MS;
	while (!(told(&c[0]) && told(&c[1])) && next_news(&s, end, &r))
		note(c, 2, &r);
	t0 = acted_at();
	dies = act == ACT_EXIT || act == ACT_SIGKILL;
	tc = dies ? peer_closed_at(&p) : NAN;

	for (i = 0; i < 2; i++) {
		snprintf(what, sizeof(what), "%s (%s), %s", act_name[act],
			 dial ? "rig_loop_dial" : "rig_loop_listen",
			 i ? "sends too" : "receives only");
		cr_assert(c[i].gone, "%s: no RIG_NEWS_GONE in %d ms", what, LONG_MS);
		row(what, c[i].gone_at - t0, c[i].gone_at - tc);
		cr_assert_geq(c[i].gone_at, t0, "%s: gone before the act", what);
		from = dies ? tc : t0;
		cr_assert_leq(c[i].gone_at - from, NOTICE_MAX_MS + t_stall_max_ms(),
			      "%s: RIG_NEWS_GONE %.1f ms after the %s, over %d ms + %.1f ms "
			      "stalled", what, c[i].gone_at - from,
			      dies ? "close of its files" : "act", NOTICE_MAX_MS,
			      t_stall_max_ms());
		cr_assert_eq(c[i].gone_result, -ECONNRESET, "%s: GONE with %d", what,
			     c[i].gone_result);
		cr_assert_eq(c[i].listed & due_rings(&c[i]), due_rings(&c[i]),
			     "%s: of the rings with entries due (%#x), only %#x handed out",
			     what, due_rings(&c[i]), c[i].listed);
	}
	/* R: its receives; S: the send ring first, then the receives */
	expect_failed(c[0].qp, RIG_RECEIVE, NRECV, RECV_COOKIE, -ECONNRESET, "DISCONNECTED",
		      "receives only");
	expect_failed(c[1].qp, RIG_SEND, NSEND, SEND_COOKIE, -ECONNRESET, "DISCONNECTED",
		      "sends too");
	expect_failed(c[1].qp, RIG_RECEIVE, NRECV, RECV_COOKIE, -ECONNRESET, "DISCONNECTED",
		      "sends too");
	for (i = 0; i < 2; i++) {
		cr_assert_eq(rig_qp_failure(c[i].qp, &st), -ECONNRESET);
		cr_assert_eq(st, -1, "wc status %d: the failure came from rdma_cm, not a "
			     "completion", st);
	}
	/* F5: a post to the failed queue pair is taken and fails alike. */
	post(&c[1], &b, 1, 1);
	expect_failed(c[1].qp, RIG_SEND, 1, SEND_COOKIE, -ECONNRESET, "DISCONNECTED", "F5");
	expect_failed(c[1].qp, RIG_RECEIVE, 1, RECV_COOKIE, -ECONNRESET, "DISCONNECTED", "F5");
	cr_assert_eq(rig_qp_poll(c[0].qp, RIG_SEND, &x), 0);

	for (i = 0; i < 2; i++)
		cr_assert_eq(rig_qp_destroy(c[i].qp), 0, "rig_qp_destroy: %s", rig_errmsg());
	peer_end(&p);
	side_close(&s);
}

Test(vanish, F1_F6_peer_destroys_its_qps_ECONNRESET_at_once)
{
	leave(ACT_DESTROY, true, 18710);
}

Test(vanish, F1_F6_peer_closes_its_nic_ECONNRESET_at_once)
{
	leave(ACT_NIC_CLOSE, false, 18720);
}

Test(vanish, F1_F6_peer_process_exits_ECONNRESET_at_once)
{
	leave(ACT_EXIT, true, 18730);
}

Test(vanish, F1_F6_peer_process_SIGKILL_ECONNRESET_at_once)
{
	leave(ACT_SIGKILL, false, 18740);
}

/* ---- rig_qp_wait, no loop watching ------------------------------------ */

struct waiter {
	struct rig_qp *qp;
	int ret;
	struct rig_completion c;
	double done;
	char msg[256];
};

static void *wait_receive(void *arg)
{
	struct waiter *w = arg;

	w->ret = rig_qp_wait(w->qp, RIG_RECEIVE, LONG_MS * 1000ll, &w->c);
	w->done = t_now_ms();
	snprintf(w->msg, sizeof(w->msg), "%s", rig_errmsg());
	return NULL;
}

struct blocking_accept {
	struct rig_listener *l;
	int ret;
	struct rig_qp *qp;
};

static void *accept_one(void *arg)
{
	struct blocking_accept *a = arg;

	a->ret = rig_accept(a->l, LONG_MS * 1000ll, &a->qp);
	return NULL;
}

/*
 * F1, T2: queue pairs connected with the blocking calls, one dialed
 * (rig_dial) and one accepted (rig_listen, rig_accept), are in the NIC's
 * own loop, which nothing watches. Two threads sleep in rig_qp_wait on
 * their receives; the peer is killed 100 ms later (far past the wait's
 * 50 us spin: the waits sleep by then; were they slower, they would find
 * the failure all the same). Both wake within NOTICE_MAX_MS (of the
 * close of the peer's files) with -ECONNRESET, and the receive behind
 * each fails alike.
 */
Test(vanish, F1_T2_sleeping_waits_woken_when_peer_is_killed)
{
	struct peer p = { .accepts = 1, .dials = 1, .port = 18750, .act = ACT_SIGKILL };
	struct blocking_accept a = { NULL, -1, NULL };
	struct waiter w[2];
	struct rig_nic *nic;
	struct t_buf b;
	pthread_t t[2];
	double t0, tc;
	char what[96];
	int i, ret, st;

	peer_start(&p);
	nic = t_nic_open(t_dev());
	t_buf(&b, nic, 4 * MSG, 9);
	ret = rig_listen(nic, my_ip(), p.port + 1, &a.l);
	cr_assert_eq(ret, 0, "rig_listen: %d %s", ret, rig_errmsg());
	cr_assert_eq(pthread_create(&t[0], NULL, accept_one, &a), 0);
	peer_expect(&p, 'L');
	memset(w, 0, sizeof(w));
	ret = rig_dial(nic, t_other_ip(), p.port, LONG_MS * 1000ll, &w[0].qp);
	cr_assert_eq(ret, 0, "rig_dial: %d %s", ret, rig_errmsg());
	peer_say(&p, 'D');
	cr_assert_eq(pthread_join(t[0], NULL), 0);
	cr_assert_eq(a.ret, 0, "rig_accept: %d", a.ret);
	w[1].qp = a.qp;
	peer_expect(&p, 'R');
	peer_watch(&p);

	for (i = 0; i < 2; i++) {
		cr_assert_eq(rig_qp_receive(w[i].qp, b.r, 0, MSG), 0, "%s", rig_errmsg());
		cr_assert_eq(rig_qp_receive(w[i].qp, b.r, MSG, MSG), 0, "%s", rig_errmsg());
		cr_assert_eq(pthread_create(&t[i], NULL, wait_receive, &w[i]), 0);
	}
	usleep(100 * 1000);
	peer_act(&p);
	for (i = 0; i < 2; i++)
		cr_assert_eq(pthread_join(t[i], NULL), 0);
	t0 = acted_at();
	tc = peer_closed_at(&p);

	for (i = 0; i < 2; i++) {
		snprintf(what, sizeof(what), "%s (%s), rig_qp_wait on a receive",
			 act_name[ACT_SIGKILL], i ? "rig_accept" : "rig_dial");
		cr_assert_eq(w[i].ret, 1, "%s: returned %d (%s)", what, w[i].ret, w[i].msg);
		row(what, w[i].done - t0, w[i].done - tc);
		cr_assert_geq(w[i].done, t0, "%s: woke before the act", what);
		cr_assert_leq(w[i].done - tc, NOTICE_MAX_MS + t_stall_max_ms(),
			      "%s: woke %.1f ms after the close of the peer's files, over "
			      "%d ms + %.1f ms stalled", what, w[i].done - tc, NOTICE_MAX_MS,
			      t_stall_max_ms());
		cr_assert_eq(w[i].c.error, -ECONNRESET, "%s: error %d (%s)", what, w[i].c.error,
			     w[i].c.why ? w[i].c.why : "no reason");
		cr_assert(w[i].c.why && strstr(w[i].c.why, "DISCONNECTED"), "%s: reason '%s'",
			  what, w[i].c.why ? w[i].c.why : "(null)");
		cr_assert_eq(rig_qp_failure(w[i].qp, &st), -ECONNRESET);
		cr_assert_eq(st, -1);
		/* F3: the receive behind it, and nothing more */
		expect_failed(w[i].qp, RIG_RECEIVE, 1, 0, -ECONNRESET, "DISCONNECTED", what);
		cr_assert_eq(rig_qp_destroy(w[i].qp), 0, "%s", rig_errmsg());
	}
	peer_end(&p);
	cr_assert_eq(rig_listener_close(a.l), 0);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* The state of @qp's QP, as the NIC has it. */
static enum ibv_qp_state qp_state(struct rig_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	memset(&a, 0, sizeof(a));
	cr_assert_eq(ibv_query_qp(qp->ibqp, &a, IBV_QP_STATE, &ia), 0);
	return a.qp_state;
}

/*
 * T3, F1: a wait that learns its peer left changes nothing of the queue
 * pair. A dialed queue pair (in the NIC's own loop, which nothing watches)
 * has a receive posted and a thread waiting on it; the peer, an accepted
 * queue pair of another NIC handle, is destroyed. The wait returns the
 * receive failed with -ECONNRESET, and the QP is still in RTS: no state
 * change came from the waiting thread. The NIC's loop then hands out
 * RIG_NEWS_GONE for it, once, with -ECONNRESET, and only that takes the
 * QP to ERR (F2).
 */
Test(vanish, T3_F1_a_wait_that_hears_the_peer_left_changes_no_qp_state)
{
	const uint16_t port = 18760;
	struct blocking_accept a = { NULL, -1, NULL };
	struct rig_nic *nic, *pn;
	struct waiter w;
	struct rig_ready r[8];
	struct t_buf b;
	enum ibv_qp_state st;
	pthread_t t;
	double end;
	int i, n, gone = 0, ret;

	nic = t_nic_open(t_dev());
	pn = t_nic_open(t_other_dev());
	t_buf(&b, nic, MSG, 9);
	ret = rig_listen(pn, t_other_ip(), port, &a.l);
	cr_assert_eq(ret, 0, "rig_listen: %d %s", ret, rig_errmsg());
	cr_assert_eq(pthread_create(&t, NULL, accept_one, &a), 0);
	memset(&w, 0, sizeof(w));
	ret = rig_dial(nic, t_other_ip(), port, LONG_MS * 1000ll, &w.qp);
	cr_assert_eq(ret, 0, "rig_dial: %d %s", ret, rig_errmsg());
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(a.ret, 0, "rig_accept: %d", a.ret);

	cr_assert_eq(rig_qp_receive(w.qp, b.r, 0, MSG), 0, "%s", rig_errmsg());
	cr_assert_eq(pthread_create(&t, NULL, wait_receive, &w), 0);
	cr_assert_eq(rig_qp_destroy(a.qp), 0, "%s", rig_errmsg());
	cr_assert_eq(pthread_join(t, NULL), 0);
	cr_assert_eq(w.ret, 1, "rig_qp_wait: %d (%s)", w.ret, w.msg);
	cr_assert_eq(w.c.error, -ECONNRESET, "the receive: %d (%s)", w.c.error,
		     w.c.why ? w.c.why : "no reason");
	st = qp_state(w.qp);
	cr_assert_eq(st, IBV_QPS_RTS, "the wait changed the QP's state to %d (T3)", st);

	/* The loop applies it: GONE once, then the QP is in ERR. */
	end = t_now_ms() + LONG_MS;
	while (!gone) {
		cr_assert_lt(t_now_ms(), end, "no RIG_NEWS_GONE in %d ms", LONG_MS);
		n = rig_loop_handle(rig_nic_loop(nic), r, 8);
		cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
		for (i = 0; i < n; i++) {
			cr_assert_eq(r[i].qp, w.qp, "news %d of another queue pair", r[i].news);
			if (r[i].news != RIG_NEWS_GONE)
				continue;
			cr_assert_eq(r[i].result, -ECONNRESET, "GONE with %d", r[i].result);
			gone++;
		}
		if (!n)
			usleep(1000);	/* polling the loop; the verdict is the bound */
	}
	cr_assert_eq(gone, 1, "RIG_NEWS_GONE handed out %d times", gone);
	n = rig_loop_handle(rig_nic_loop(nic), r, 8);
	cr_assert_geq(n, 0, "rig_loop_handle: %d %s", n, rig_errmsg());
	for (i = 0; i < n; i++)
		cr_assert_neq(r[i].news, RIG_NEWS_GONE, "RIG_NEWS_GONE handed out twice");
	st = qp_state(w.qp);
	cr_assert_eq(st, IBV_QPS_ERR, "after the loop's news the QP is in state %d", st);

	cr_assert_eq(rig_qp_destroy(w.qp), 0, "%s", rig_errmsg());
	cr_assert_eq(rig_listener_close(a.l), 0);
	cr_assert_eq(rig_nic_close(pn), 0);
	cr_assert_eq(rig_nic_close(nic), 0);
}

/* ---- the control: endpoints exchanged without rdma_cm ----------------- */

/*
 * cm.h: a queue pair connected by exchanging endpoints some other way
 * (rig_qp_connect) learns that its peer left only from the transport's
 * retries, and only when it sends. Its peer is destroyed; with receives
 * only posted, it hears nothing in QUIET_MS (three times the bound in which
 * a connection made by address hears it), and has not failed. Then it
 * sends: the send fails with -ETIMEDOUT after the retries
 * (IBV_WC_RETRY_EXC_ERR), and the receives with it (F3).
 */
Test(vanish, control_endpoints_exchanged_receive_only_learns_nothing)
{
	struct rig_nic *peer_nic = t_nic_open(t_other_dev());
	struct rig_qp *qb = t_qp(peer_nic);
	struct conn c = { 0 };
	struct rig_completion x;
	struct rig_ready r;
	struct side s;
	struct t_buf b;
	double t0, tp, tf, end;
	int ret, st;

	side_open(&s);
	ret = rig_qp_make_in(s.loop, &c.qp);
	cr_assert_eq(ret, 0, "rig_qp_make_in: %d %s", ret, rig_errmsg());
	t_connect(c.qp, qb);
	t_buf(&b, s.nic, (NRECV + NSEND) * MSG, 11);
	post(&c, &b, NRECV, 0);
	t0 = t_now_ms();
	cr_assert_eq(rig_qp_destroy(qb), 0, "%s", rig_errmsg());
	end = t0 + QUIET_MS;
	while (next_news(&s, end, &r))
		note(&c, 1, &r);
	cr_assert_eq(c.gone, 0, "RIG_NEWS_GONE for a queue pair without rdma_cm");
	cr_assert_eq(c.listed, 0, "its rings were handed out: a completion came");
	cr_assert_eq(rig_qp_poll(c.qp, RIG_RECEIVE, &x), 0, "a receive completed: %d %s",
		     x.error, x.why);
	cr_assert_eq(rig_qp_failure(c.qp, NULL), 0, "it failed without a completion");
	row("control: rig_qp_connect, peer destroyed, receives only: nothing in", QUIET_MS,
	    NAN);

	/* Now it sends: the transport tells, after its retries. */
	tp = t_now_ms();
	post(&c, &b, 0, 1);
	end = tp + LONG_MS;
	while (!(c.listed & (1u << RIG_SEND)) && next_news(&s, end, &r))
		note(&c, 1, &r);
	cr_assert(c.listed & (1u << RIG_SEND), "the send ring was not handed out in %d ms",
		  LONG_MS);
	x = take(c.qp, RIG_SEND, NULL, LONG_MS);
	tf = t_now_ms();
	row("control: then it sends: failed after", tf - tp, NAN);
	cr_assert_eq(x.error, -ETIMEDOUT, "the send: %d %s", x.error, x.why);
	cr_assert_geq(tf - tp, CUT_MIN_MS, "failed before the retries ran out");
	cr_assert_leq(tf - tp, CUT_MAX_MS + t_stall_max_ms(), "failed %.1f ms after the "
		      "post, over %d ms + %.1f ms stalled", tf - tp, CUT_MAX_MS,
		      t_stall_max_ms());
	cr_assert_eq(rig_qp_failure(c.qp, &st), -ETIMEDOUT);
	cr_assert_eq(st, IBV_WC_RETRY_EXC_ERR, "wc status %d", st);
	expect_failed(c.qp, RIG_RECEIVE, NRECV, RECV_COOKIE, -ETIMEDOUT, "retries",
		      "control, F3");
	cr_assert_eq(rig_qp_destroy(c.qp), 0);
	side_close(&s);
	cr_assert_eq(rig_nic_close(peer_nic), 0);
}

/* ---- 5: the peer's link is cut (two hosts) ---------------------------- */

/* The state of port 1 of @dev, by raw verbs. */
static enum ibv_port_state port_state(const char *dev)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = NULL;
	struct ibv_port_attr pa = { 0 };
	int i;

	cr_assert_not_null(list);
	for (i = 0; list[i] && !ctx; i++)
		if (!strcmp(dev, ibv_get_device_name(list[i])))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	cr_assert_not_null(ctx, "cannot open %s", dev);
	cr_assert_eq(ibv_query_port(ctx, 1, &pa), 0);
	ibv_close_device(ctx);
	return pa.state;
}

/*
 * The routes through the peer's netdev that the kernel does not make
 * itself: taking a link down drops every route through it, and bringing
 * it up again restores only the kernel's own. The two-host topology
 * routes between its two local addresses by policy (tests/rxe-vm), and
 * without those routes the peer's side could no longer dial ours.
 */
static char routes[16][256];
static int nroutes;

static void routes_save(void)
{
	char cmd[128], line[256];
	FILE *f;

	snprintf(cmd, sizeof(cmd), "ip route show table all dev %s", t_peer_netdev());
	f = popen(cmd, "r");
	cr_assert_not_null(f, "%s: %s", cmd, strerror(errno));
	nroutes = 0;
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (strstr(line, "proto kernel") || !line[0])
			continue;
		cr_assert_lt(nroutes, 16, "too many routes through %s", t_peer_netdev());
		snprintf(routes[nroutes++], sizeof(routes[0]), "%s", line);
	}
	cr_assert_eq(pclose(f), 0, "%s failed", cmd);
}

/* The peer's link up, its routes back, both ports active again, for the
 * tests after: also the suite's fini, after a failed assertion. */
static void link_restore(void)
{
	double end = t_now_ms() + LONG_MS;
	char cmd[512];
	int i, ret;

	if (!t_peer_dev())
		return;
	snprintf(cmd, sizeof(cmd), "ip link set %s up", t_peer_netdev());
	ret = system(cmd);
	for (i = 0; i < nroutes; i++) {
		snprintf(cmd, sizeof(cmd), "ip route replace %.255s dev %s", routes[i],
			 t_peer_netdev());
		ret = system(cmd);
	}
	(void)ret;
	while (port_state(t_dev()) != IBV_PORT_ACTIVE ||
	       port_state(t_peer_dev()) != IBV_PORT_ACTIVE) {
		cr_assert_lt(t_now_ms(), end, "the ports are not active %d ms after the "
			     "link came back", LONG_MS);
		usleep(10 * 1000);
	}
}

/* The suite runs after "vanish" (suites run in the order of their names). */
TestSuite(vanish_link, .timeout = 60, .init = t_stall_start, .fini = link_restore);

/*
 * M3, F3: the peer's link goes down (ip link set DEV down on its netdev).
 * No packet tells anyone: no disconnect request can cross, so only the
 * transport's retries can tell, and only a queue pair that sends (with
 * the loop's liveness probes off; with them on, R learns too: L1). Of two
 * connections to the peer, S posts receives and sends after the cut: its
 * send fails with -ETIMEDOUT (IBV_WC_RETRY_EXC_ERR) within the retry
 * bound, its other entries alike, in order. R, with only receives
 * posted, learns nothing, in QUIET_MS and whatever longer: it would learn
 * only when the link came back and the peer left.
 */
Test(vanish_link, M3_F3_link_cut_only_a_sender_learns_by_retries)
{
	struct peer p = { .accepts = 2, .port = 18760, .act = ACT_NONE };
	struct side s;
	struct conn c[2];	/* R, S */
	struct t_buf b;
	struct rig_ready r;
	struct rig_completion x;
	double t0, tf = 0, end;
	char cmd[256];
	uint64_t cookie;
	int st;

	if (!t_peer_dev())
		cr_skip_test("the link cut needs the two-host topology");
	peer_start(&p);
	side_open(&s);
	/* The transport's own rule (M3): the loop's liveness probes, which
	 * would tell R too (L1, test_live), are off. */
	cr_assert_eq(rig_loop_liveness(s.loop, 0), 0);
	t_buf(&b, s.nic, (NRECV + NSEND) * MSG, 13);
	side_connect(&s, &p, true, c, 2);
	post(&c[0], &b, NRECV, 0);

	routes_save();
	/* The cut is timed from when ip returns, the link down: the command
	 * itself takes from 0.4 s to seconds in the guest (a fork of an
	 * AddressSanitizer process is slow). */
	t_sh("ip link set %s down", t_peer_netdev());
	t0 = t_now_ms();
	post(&c[1], &b, NRECV, NSEND);
	/* S's first send fails by the retries; R hears nothing meanwhile,
	 * nor until QUIET_MS after the cut. */
	end = t0 + LONG_MS;
	while (!tf || t_now_ms() < t0 + QUIET_MS) {
		if (!next_news(&s, tf ? t0 + QUIET_MS : end, &r)) {
			cr_assert(tf, "the send ring was not handed out in %d ms", LONG_MS);
			continue;
		}
		note(c, 2, &r);
		if (!tf && r.qp == c[1].qp && r.side == RIG_SEND && r.news == RIG_NEWS_RING) {
			x = take(c[1].qp, RIG_SEND, &cookie, LONG_MS);
			tf = t_now_ms();
			cr_assert_eq(x.error, -ETIMEDOUT, "the send over the cut link: %d %s",
				     x.error, x.why);
			cr_assert_eq(cookie, SEND_COOKIE);
		}
		cr_assert_eq(c[0].gone, 0, "receives only: RIG_NEWS_GONE with %d",
			     c[0].gone_result);
		cr_assert_eq(c[0].listed, 0, "receives only: its ring was handed out");
	}
	row("peer's link cut, sends: first send failed (-ETIMEDOUT)", tf - t0, NAN);
	row("peer's link cut, receives only: nothing in", t_now_ms() - t0, NAN);
	cr_assert_geq(tf - t0, CUT_MIN_MS, "failed %.1f ms after the post, before the "
		      "retries ran out", tf - t0);
	cr_assert_leq(tf - t0, CUT_MAX_MS + t_stall_max_ms(), "failed %.1f ms after the "
		      "post, over %d ms + %.1f ms stalled", tf - t0, CUT_MAX_MS,
		      t_stall_max_ms());
	cr_assert_eq(rig_qp_failure(c[1].qp, &st), -ETIMEDOUT);
	cr_assert_eq(st, IBV_WC_RETRY_EXC_ERR, "wc status %d", st);
	expect_failed(c[1].qp, RIG_SEND, NSEND - 1, SEND_COOKIE + 1, -ETIMEDOUT, "retries",
		      "sends over the cut link, F3");
	expect_failed(c[1].qp, RIG_RECEIVE, NRECV, RECV_COOKIE, -ETIMEDOUT, "retries",
		      "receives of the sender, F3");
	cr_assert_eq(rig_qp_poll(c[0].qp, RIG_RECEIVE, &x), 0, "receives only: completed "
		     "with %d %s", x.error, x.why);
	cr_assert_eq(rig_qp_failure(c[0].qp, NULL), 0, "receives only: failed");

	link_restore();
	/* and the routes are back: the peer's side reaches ours */
	snprintf(cmd, sizeof(cmd), "ip route get %s from %s | grep -q 'dev %s'", my_ip(),
		 t_other_ip(), t_peer_netdev());
	t_sh("%s", cmd);
	cr_assert_eq(rig_qp_destroy(c[0].qp), 0);
	cr_assert_eq(rig_qp_destroy(c[1].qp), 0);
	peer_end(&p);
	side_close(&s);
}
