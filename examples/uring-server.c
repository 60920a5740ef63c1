/* SPDX-License-Identifier: MIT */
/*
 * uring-server: one io_uring loop, owned by the program, serves TCP
 * clients, a timer, a signal and two RDMA queue pairs together.
 *
 * A TCP client sends request lines. The server relays each line over a
 * reliable-connected queue pair (the relay) to an echo peer (a second
 * queue pair on the same NIC, connected to the first with
 * rig_qp_connect()), which sends it back uppercased; the server writes
 * the answer to the client that asked, answers in the order of its lines.
 * Each relayed message starts with a tag (the client's slot and the
 * generation of its connection), so answers find their client however
 * many clients talk at once.
 *
 * Nothing blocks and nothing else waits: the listening socket's accepts,
 * every client's receives and sends, a periodic timeout that counts ticks
 * and prints stats, a signalfd for SIGINT and SIGTERM, and the completions
 * of both queue pairs (rig_uring_watch() on the NIC's loop, rig_uring_handle()
 * on its CQEs, rig_qp_poll() on each ready ring) all complete in the one
 * io_uring. The program makes no verbs call. examples/rig-echo.c serves
 * peers on other hosts, with a loop per thread and connections made in
 * the loop (rig/cm.h).
 *
 * Flow control, so that no ring, buffer or peer ever overflows:
 *   - at most US_SLOTS requests are in flight over the queue pairs, and at
 *     most US_SLOTS relay sends are not yet completed; a client whose line
 *     finds no room waits, and the relay's completions wake it;
 *   - so each side keeps US_SLOTS receives posted and never meets a peer
 *     without one (receiver-not-ready waits count against the retry
 *     budget on Soft-RoCE);
 *   - a client's answers, sent or on the way, fit in its output buffer,
 *     or its lines wait: a client that does not read stops being read.
 *     A send that writes part of the buffer is continued with the rest.
 *
 *	uring-server [-d DEV] [-p PORT] [-t TICK_MS] [-n REQUESTS]
 *
 *	$ printf 'hello\nworld\n' | nc -N localhost 18600
 *	HELLO
 *	WORLD
 *
 * With -n it exits once it answered that many requests (all bytes of the
 * answers written), and on SIGINT or SIGTERM; either way it prints the
 * ticks it counted and the requests it served.
 *
 * Build:
 *	cc -O2 -o uring-server uring-server.c $(pkg-config --cflags --libs rig liburing)
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <liburing.h>
#include <rig/rig.h>

#define US_CLIENTS 64		/* connections served at once */
#define US_LINE_MAX 1024	/* a request line, its '\n' included */
#define US_OUT_SIZE 8192	/* a client's answers not yet written */
#ifndef US_SLOTS		/* -DUS_SLOTS=1 makes clients wait for room */
#define US_SLOTS 64		/* requests in flight over the queue pairs */
#endif
#define US_READY 64		/* rings taken per rig_uring_handle() */
#define US_URING_ENTRIES 256

/* A relayed message: the tag, then the line. */
struct us_tag {
	uint32_t client;	/* index in us_server.client */
	uint32_t gen;		/* that connection's generation */
};

/* an empty output buffer takes any line's answer */
_Static_assert(US_OUT_SIZE >= US_LINE_MAX, "US_OUT_SIZE < US_LINE_MAX");
/* slots are indexed by free-running 32-bit counters */
_Static_assert(US_SLOTS >= 1 && !(US_SLOTS & (US_SLOTS - 1)) &&
	       US_SLOTS <= RIG_RING_ENTRIES, "US_SLOTS: a power of two");

#define US_MSG_MAX (sizeof(struct us_tag) + US_LINE_MAX)
#define US_SLOT_SIZE ((US_MSG_MAX + 63) / 64 * 64)

/* The region holds four arrays of US_SLOTS message slots. */
enum us_area { US_RELAY_SEND, US_RELAY_RECV, US_ECHO_RECV, US_ECHO_SEND };
#define US_REGION_SIZE (4 * US_SLOTS * US_SLOT_SIZE)

/* user_data of each SQE: what completed, and for whom */
enum us_kind { US_ACCEPT = 1, US_RECV, US_SEND, US_TICK, US_SIGNAL, US_RIG };
#define US_DATA(kind, i) ((uint64_t)(kind) << 32 | (uint32_t)(i))
#define US_KIND(data) ((enum us_kind)((data) >> 32))
#define US_INDEX(data) ((uint32_t)(data))

struct us_client {
	int fd;			/* -1: the slot is free */
	uint32_t gen;
	char in[US_LINE_MAX];
	size_t in_start;	/* lines not yet relayed: [in_start, in_len) */
	size_t in_len;
	char out[US_OUT_SIZE];
	size_t out_len;		/* answers not yet written */
	size_t reserved;	/* room kept in out for answers on the way */
	bool recving;		/* a receive is in flight (into in + in_len) */
	bool sending;		/* a send is in flight (from out) */
	bool eof;		/* no more receives */
	bool dead;		/* failed: answers are dropped, then it closes */
	bool waiting;		/* a line waits for room on the queue pairs */
};

struct us_opts {
	const char *dev;
	unsigned int port;
	unsigned int tick_ms;
	unsigned long long limit;	/* -n; 0: none */
};

struct us_server {
	struct io_uring ring;
	bool ring_up;
	struct rig_nic *nic;
	struct rig_region *region;
	uint8_t *buf;
	struct rig_qp *relay;	/* the server's end */
	struct rig_qp *echo;	/* the peer's end */

	/* counters of entries; their differences are what is in flight */
	uint32_t relay_sent;		/* relay sends posted */
	uint32_t relay_sent_done;	/* their completions taken */
	uint32_t relay_answers;		/* relay receive completions taken */
	uint32_t echo_taken;		/* echo receive completions taken */
	uint32_t echo_answered;		/* echo sends posted */
	uint32_t echo_sent_done;	/* their completions taken */
	uint32_t echo_len[US_SLOTS];	/* bytes of each taken echo receive */

	int listen_fd;
	int signal_fd;
	bool accepting;
	bool stop;
	struct signalfd_siginfo siginfo;
	struct __kernel_timespec tick;

	unsigned long long limit;
	unsigned long long ticks, served, accepted, short_sends;
	unsigned long long shown;	/* served at the last stats line */
	int nclients;
	uint32_t next_gen;
	unsigned int wake_from;
	struct us_client client[US_CLIENTS];
};

/* Reports a failed rig call: what failed, its errno, and rig's words. */
static int us_fail(const char *call, int ret)
{
	fprintf(stderr, "%s: %s (%s)\n", call, strerror(-ret), rig_errmsg());
	return 1;
}

/* Reports a failed system or liburing call. */
static int us_fail_sys(const char *call, int err)
{
	fprintf(stderr, "%s: %s\n", call, strerror(err));
	return 1;
}

/* Where the message of entry @seq of an area's ring lies in the region. */
static size_t us_slot_at(enum us_area area, uint32_t seq)
{
	return ((size_t)area * US_SLOTS + seq % US_SLOTS) * US_SLOT_SIZE;
}

static uint8_t *us_slot(struct us_server *s, enum us_area area, uint32_t seq)
{
	return s->buf + us_slot_at(area, seq);
}

/* ---- the io_uring ------------------------------------------------------ */

/* A free SQE, flushing the queue to the kernel if it is full. */
static struct io_uring_sqe *us_sqe(struct us_server *s, uint64_t data)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&s->ring);

	if (!sqe) {
		io_uring_submit(&s->ring);
		sqe = io_uring_get_sqe(&s->ring);
		if (!sqe) {
			fprintf(stderr, "io_uring_get_sqe: the ring is full\n");
			exit(1);
		}
	}
	io_uring_sqe_set_data64(sqe, data);
	return sqe;
}

static void us_queue_tick(struct us_server *s)
{
	io_uring_prep_timeout(us_sqe(s, US_DATA(US_TICK, 0)), &s->tick, 0, 0);
}

static void us_queue_signal(struct us_server *s)
{
	io_uring_prep_read(us_sqe(s, US_DATA(US_SIGNAL, 0)), s->signal_fd,
			   &s->siginfo, sizeof(s->siginfo), 0);
}

/* One accept at a time, while a client slot is free. */
static void us_queue_accept(struct us_server *s)
{
	if (s->accepting || s->nclients == US_CLIENTS)
		return;
	io_uring_prep_accept(us_sqe(s, US_DATA(US_ACCEPT, 0)), s->listen_fd,
			     NULL, NULL, SOCK_CLOEXEC);
	s->accepting = true;
}

static uint32_t us_index(struct us_server *s, struct us_client *c)
{
	return (uint32_t)(c - s->client);
}

/* Receives into the free end of the input buffer, which stays put until
 * the receive completes. */
static void us_queue_recv(struct us_server *s, struct us_client *c)
{
	io_uring_prep_recv(us_sqe(s, US_DATA(US_RECV, us_index(s, c))), c->fd,
			   c->in + c->in_len, sizeof(c->in) - c->in_len, 0);
	c->recving = true;
}

/* Sends every answer written so far, if no send is in flight. */
static void us_flush(struct us_server *s, struct us_client *c)
{
	if (c->sending || c->dead || !c->out_len)
		return;
	io_uring_prep_send(us_sqe(s, US_DATA(US_SEND, us_index(s, c))), c->fd,
			   c->out, c->out_len, MSG_NOSIGNAL);
	c->sending = true;
}

/* ---- clients ----------------------------------------------------------- */

/* Drops a client's answers and ends its receive and send in flight; it
 * closes once its requests came back. */
static void us_kill(struct us_client *c, const char *why, int err)
{
	if (c->dead)
		return;
	if (err)
		fprintf(stderr, "client fd %d: %s: %s\n", c->fd, why,
			strerror(err));
	else
		fprintf(stderr, "client fd %d: %s\n", c->fd, why);
	c->dead = true;
	c->out_len = 0;
	shutdown(c->fd, SHUT_RDWR);
}

static bool us_has_line(const struct us_client *c)
{
	return memchr(c->in + c->in_start, '\n', c->in_len - c->in_start);
}

/* Closes @c once nothing of it is in flight and nothing is left to do. */
static void us_maybe_close(struct us_server *s, struct us_client *c)
{
	if (c->fd < 0 || c->recving || c->sending || c->reserved)
		return;
	if (!c->dead && !(c->eof && !c->out_len && !us_has_line(c)))
		return;
	close(c->fd);
	c->fd = -1;
	s->nclients--;
	us_queue_accept(s);
}

static bool us_room(const struct us_server *s)
{
	return s->relay_sent - s->relay_answers < US_SLOTS &&
	       s->relay_sent - s->relay_sent_done < US_SLOTS;
}

/* Relays one line of @c to the echo peer. */
static int us_relay(struct us_server *s, struct us_client *c,
		    const char *line, size_t len)
{
	struct us_tag tag = { us_index(s, c), c->gen };
	uint8_t *p = us_slot(s, US_RELAY_SEND, s->relay_sent);
	int ret;

	memcpy(p, &tag, sizeof(tag));
	memcpy(p + sizeof(tag), line, len);
	ret = rig_qp_send(s->relay, s->region,
			  us_slot_at(US_RELAY_SEND, s->relay_sent),
			  sizeof(tag) + len);
	if (ret)
		return us_fail("rig_qp_send", ret);
	s->relay_sent++;
	return 0;
}

/*
 * Relays the complete lines of @c while there is room for them, and keeps
 * a receive posted while the input buffer has room. Lines wait while the
 * client's answers would not fit in its output buffer (us_on_send resumes
 * them) or the queue pairs are full (us_wake does).
 */
static int us_pump(struct us_server *s, struct us_client *c)
{
	const char *line, *nl;
	size_t len;
	int ret;

	c->waiting = false;
	while (!c->dead) {
		line = c->in + c->in_start;
		nl = memchr(line, '\n', c->in_len - c->in_start);
		if (!nl)
			break;
		len = (size_t)(nl + 1 - line);
		if (c->out_len + c->reserved + len > sizeof(c->out))
			break;
		if (!us_room(s)) {
			c->waiting = true;
			break;
		}
		ret = us_relay(s, c, line, len);
		if (ret)
			return ret;
		c->reserved += len;
		c->in_start += len;
	}
	if (c->recving || c->eof || c->dead)
		return 0;
	/* No receive writes into the buffer now: move the rest to its start. */
	memmove(c->in, c->in + c->in_start, c->in_len - c->in_start);
	c->in_len -= c->in_start;
	c->in_start = 0;
	if (c->in_len < sizeof(c->in))
		us_queue_recv(s, c);
	else if (!us_has_line(c))
		us_kill(c, "line too long", 0);
	return 0;
}

/* Lets the clients that wait for room on the queue pairs go on, in turn. */
static int us_wake(struct us_server *s)
{
	struct us_client *c;
	unsigned int i;
	int ret;

	for (i = 0; i < US_CLIENTS && us_room(s); i++) {
		c = &s->client[(s->wake_from + i) % US_CLIENTS];
		if (c->fd < 0 || !c->waiting)
			continue;
		ret = us_pump(s, c);
		if (ret)
			return ret;
		us_maybe_close(s, c);
	}
	s->wake_from = (s->wake_from + 1) % US_CLIENTS;
	return 0;
}

static int us_on_accept(struct us_server *s, int res)
{
	struct us_client *c;
	int i;

	s->accepting = false;
	if (res < 0) {
		fprintf(stderr, "accept: %s\n", strerror(-res));
		if (res == -EBADF || res == -EINVAL || res == -ENOTSOCK)
			return 1;
		us_queue_accept(s);
		return 0;
	}
	for (i = 0; s->client[i].fd >= 0; i++)
		;	/* us_queue_accept() saw a free slot */
	c = &s->client[i];
	memset(c, 0, sizeof(*c));
	c->fd = res;
	c->gen = s->next_gen++;
	s->nclients++;
	s->accepted++;
	us_queue_accept(s);
	return us_pump(s, c);	/* queues its first receive */
}

static int us_on_recv(struct us_server *s, struct us_client *c, int res)
{
	int ret;

	c->recving = false;
	if (res > 0)
		c->in_len += (size_t)res;
	else if (res == 0)
		c->eof = true;	/* a partial last line is dropped */
	else
		us_kill(c, "recv", -res);
	ret = us_pump(s, c);
	us_maybe_close(s, c);
	return ret;
}

/* Every answer ends with its line's '\n': counts the answers in @p. */
static unsigned int us_count_lines(const char *p, size_t n)
{
	const char *end = p + n;
	unsigned int lines = 0;

	while ((p = memchr(p, '\n', (size_t)(end - p)))) {
		lines++;
		p++;
	}
	return lines;
}

static int us_on_send(struct us_server *s, struct us_client *c, int res)
{
	size_t n;
	int ret;

	c->sending = false;
	if (res <= 0) {
		us_kill(c, "send", res ? -res : EPIPE);
		us_maybe_close(s, c);
		return 0;
	}
	n = (size_t)res;
	if (c->dead) {		/* killed while the send was in flight */
		us_maybe_close(s, c);
		return 0;
	}
	if (n < c->out_len)
		s->short_sends++;
	s->served += us_count_lines(c->out, n);
	memmove(c->out, c->out + n, c->out_len - n);
	c->out_len -= n;
	if (s->limit && s->served >= s->limit)
		s->stop = true;
	us_flush(s, c);		/* the rest, and answers that came meanwhile */
	ret = us_pump(s, c);	/* lines that waited for room in out */
	us_maybe_close(s, c);
	return ret;
}

/* ---- the queue pairs --------------------------------------------------- */

/* An answer came back to the relay: give it to its client. */
static int us_on_answer(struct us_server *s, uint32_t bytes)
{
	uint32_t seq = s->relay_answers++;
	const uint8_t *p = us_slot(s, US_RELAY_RECV, seq);
	struct us_client *c = NULL;
	struct us_tag tag;
	size_t len = 0;
	int ret;

	if (bytes >= sizeof(tag)) {
		memcpy(&tag, p, sizeof(tag));
		len = bytes - sizeof(tag);
		if (tag.client < US_CLIENTS) {
			c = &s->client[tag.client];
			if (c->fd < 0 || c->gen != tag.gen || c->reserved < len)
				c = NULL;
		}
	}
	if (c) {
		c->reserved -= len;
		if (!c->dead) {
			memcpy(c->out + c->out_len, p + sizeof(tag), len);
			c->out_len += len;
			us_flush(s, c);
		}
	} else {
		fprintf(stderr, "an answer of %u bytes for nobody\n", bytes);
	}
	/* the same slot again: receives complete in the order of their posts */
	ret = rig_qp_receive(s->relay, s->region,
			     us_slot_at(US_RELAY_RECV, seq), US_MSG_MAX);
	if (ret)
		return us_fail("rig_qp_receive", ret);
	if (c)
		us_maybe_close(s, c);
	return us_wake(s);
}

/* The echo peer answers the requests it took, in order, while it has
 * room on its send ring, then gives each one's receive back. */
static int us_echo(struct us_server *s)
{
	uint32_t seq, len, i;
	const uint8_t *in;
	uint8_t *out;
	int ret;

	while (s->echo_answered != s->echo_taken &&
	       s->echo_answered - s->echo_sent_done < US_SLOTS) {
		seq = s->echo_answered;
		len = s->echo_len[seq % US_SLOTS];
		in = us_slot(s, US_ECHO_RECV, seq);
		out = us_slot(s, US_ECHO_SEND, seq);
		for (i = 0; i < len; i++)	/* the tag goes back as it came */
			out[i] = i < sizeof(struct us_tag) ? in[i]
							   : (uint8_t)toupper(in[i]);
		ret = rig_qp_send(s->echo, s->region,
				  us_slot_at(US_ECHO_SEND, seq), len);
		if (ret)
			return us_fail("rig_qp_send", ret);
		ret = rig_qp_receive(s->echo, s->region,
				     us_slot_at(US_ECHO_RECV, seq), US_MSG_MAX);
		if (ret)
			return us_fail("rig_qp_receive", ret);
		s->echo_answered++;
	}
	return 0;
}

static int us_on_completion(struct us_server *s, struct rig_qp *qp,
			    enum rig_side side, const struct rig_completion *c)
{
	if (c->error) {
		fprintf(stderr, "rig_qp_poll: %s %s failed: %s (%s)\n",
			qp == s->relay ? "relay" : "echo",
			side == RIG_SEND ? "send" : "receive",
			strerror(-c->error), c->why);
		return 1;
	}
	if (qp == s->relay && side == RIG_SEND) {
		s->relay_sent_done++;
		return us_wake(s);
	}
	if (qp == s->relay)
		return us_on_answer(s, c->bytes);
	if (side == RIG_SEND)
		s->echo_sent_done++;
	else
		s->echo_len[s->echo_taken++ % US_SLOTS] = c->bytes;
	return us_echo(s);
}

/* The NIC's fd was readable: take the completions of every ready ring. */
static int us_on_rig(struct us_server *s, const struct io_uring_cqe *cqe)
{
	struct rig_ready ready[US_READY];
	struct rig_completion c;
	int i, n, ret;

	do {
		n = rig_uring_handle(&s->ring, rig_nic_loop(s->nic), cqe, ready, US_READY);
		if (n < 0)
			return us_fail("rig_uring_handle", n);
		for (i = 0; i < n; i++) {
			while ((ret = rig_qp_poll(ready[i].qp, ready[i].side,
						  &c)) == 1) {
				ret = us_on_completion(s, ready[i].qp,
						       ready[i].side, &c);
				if (ret)
					return ret;
			}
			if (ret < 0)
				return us_fail("rig_qp_poll", ret);
		}
		cqe = NULL;	/* more than US_READY: ask for the rest */
	} while (n == US_READY);
	return 0;
}

/* ---- the loop ---------------------------------------------------------- */

static int us_on_tick(struct us_server *s, int res)
{
	if (res != -ETIME)
		return us_fail_sys("timeout", -res);
	s->ticks++;
	if (s->served != s->shown) {
		printf("tick %llu: %llu requests served, %d clients\n",
		       s->ticks, s->served, s->nclients);
		s->shown = s->served;
	}
	us_queue_tick(s);
	return 0;
}

static int us_dispatch(struct us_server *s, const struct io_uring_cqe *cqe)
{
	uint64_t data = io_uring_cqe_get_data64(cqe);
	struct us_client *c = &s->client[US_INDEX(data) % US_CLIENTS];

	switch (US_KIND(data)) {
	case US_ACCEPT:
		return us_on_accept(s, cqe->res);
	case US_RECV:
		return us_on_recv(s, c, cqe->res);
	case US_SEND:
		return us_on_send(s, c, cqe->res);
	case US_TICK:
		return us_on_tick(s, cqe->res);
	case US_SIGNAL:
		if (cqe->res == sizeof(s->siginfo))
			printf("caught %s\n", strsignal((int)s->siginfo.ssi_signo));
		s->stop = true;
		return 0;
	case US_RIG:
		return us_on_rig(s, cqe);
	}
	fprintf(stderr, "a CQE of unknown kind %#llx\n", (unsigned long long)data);
	return 1;
}

static int us_loop(struct us_server *s)
{
	struct io_uring_cqe *cqe;
	unsigned int head, seen;
	int ret = 0;

	while (!s->stop) {
		ret = io_uring_submit_and_wait(&s->ring, 1);
		if (ret < 0 && ret != -EINTR)
			return us_fail_sys("io_uring_submit_and_wait", -ret);
		seen = 0;
		io_uring_for_each_cqe(&s->ring, head, cqe) {
			seen++;
			ret = us_dispatch(s, cqe);
			if (ret)
				break;
		}
		io_uring_cq_advance(&s->ring, seen);
		if (ret)
			return ret;
	}
	return 0;
}

/* ---- setup ------------------------------------------------------------- */

static int us_listen(unsigned int port)
{
	struct sockaddr_in sin = {
		.sin_family = AF_INET,
		.sin_port = htons((uint16_t)port),
		.sin_addr.s_addr = htonl(INADDR_ANY),
	};
	int fd, one = 1;

	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		us_fail_sys("socket", errno);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) ||
	    listen(fd, 128)) {
		fprintf(stderr, "listen on port %u: %s\n", port,
			strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* SIGINT and SIGTERM come through a signalfd read in the loop. */
static int us_signals(void)
{
	sigset_t mask;
	int fd;

	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	if (sigprocmask(SIG_BLOCK, &mask, NULL)) {
		us_fail_sys("sigprocmask", errno);
		return -1;
	}
	fd = signalfd(-1, &mask, SFD_CLOEXEC);
	if (fd < 0)
		us_fail_sys("signalfd", errno);
	return fd;
}

/* Two queue pairs of the NIC, connected to each other, each with a
 * receive posted in every slot. */
static int us_make_pairs(struct us_server *s)
{
	struct rig_endpoint relay_end, echo_end;
	uint32_t i;
	int ret;

	ret = rig_qp_make(s->nic, &s->relay);
	if (ret)
		return us_fail("rig_qp_make", ret);
	ret = rig_qp_make(s->nic, &s->echo);
	if (ret)
		return us_fail("rig_qp_make", ret);
	rig_qp_endpoint(s->relay, &relay_end);
	rig_qp_endpoint(s->echo, &echo_end);
	ret = rig_qp_connect(s->relay, &echo_end);
	if (ret)
		return us_fail("rig_qp_connect", ret);
	ret = rig_qp_connect(s->echo, &relay_end);
	if (ret)
		return us_fail("rig_qp_connect", ret);
	for (i = 0; i < US_SLOTS; i++) {
		ret = rig_qp_receive(s->relay, s->region,
				     us_slot_at(US_RELAY_RECV, i), US_MSG_MAX);
		if (!ret)
			ret = rig_qp_receive(s->echo, s->region,
					     us_slot_at(US_ECHO_RECV, i),
					     US_MSG_MAX);
		if (ret)
			return us_fail("rig_qp_receive", ret);
	}
	printf("relay qp 0x%06x <-> echo qp 0x%06x\n", relay_end.qp,
	       echo_end.qp);
	return 0;
}

static int us_setup(struct us_server *s, const struct us_opts *o)
{
	int ret, i;

	for (i = 0; i < US_CLIENTS; i++)
		s->client[i].fd = -1;
	s->listen_fd = s->signal_fd = -1;
	s->limit = o->limit;
	s->tick.tv_sec = o->tick_ms / 1000;
	s->tick.tv_nsec = (long long)(o->tick_ms % 1000) * 1000000;

	ret = rig_nic_open(o->dev, &s->nic);
	if (ret)
		return us_fail("rig_nic_open", ret);
	s->buf = aligned_alloc(4096, US_REGION_SIZE);
	if (!s->buf)
		return us_fail_sys("aligned_alloc", ENOMEM);
	memset(s->buf, 0, US_REGION_SIZE);
	ret = rig_region_register(s->nic, s->buf, US_REGION_SIZE, &s->region);
	if (ret)
		return us_fail("rig_region_register", ret);
	if (us_make_pairs(s))
		return 1;

	ret = io_uring_queue_init(US_URING_ENTRIES, &s->ring, 0);
	if (ret)
		return us_fail_sys("io_uring_queue_init", -ret);
	s->ring_up = true;
	ret = rig_uring_watch(&s->ring, rig_nic_loop(s->nic), US_DATA(US_RIG, 0));
	if (ret)
		return us_fail("rig_uring_watch", ret);
	s->signal_fd = us_signals();
	if (s->signal_fd < 0)
		return 1;
	s->listen_fd = us_listen(o->port);
	if (s->listen_fd < 0)
		return 1;
	us_queue_signal(s);
	us_queue_tick(s);
	us_queue_accept(s);
	printf("listening on TCP port %u, tick %u ms\n", o->port, o->tick_ms);
	return 0;
}

/* Gives back what us_setup() took, as far as it got. */
static int us_teardown(struct us_server *s)
{
	int i, ret, status = 0;

	/* first what is in flight on the fds, the NIC's included */
	if (s->ring_up)
		io_uring_queue_exit(&s->ring);
	for (i = 0; i < US_CLIENTS; i++)
		if (s->client[i].fd >= 0)
			close(s->client[i].fd);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->signal_fd >= 0)
		close(s->signal_fd);
	if (s->echo && (ret = rig_qp_destroy(s->echo)))
		status = us_fail("rig_qp_destroy", ret);
	if (s->relay && (ret = rig_qp_destroy(s->relay)))
		status = us_fail("rig_qp_destroy", ret);
	if (s->region && (ret = rig_region_deregister(s->region)))
		status = us_fail("rig_region_deregister", ret);
	if (s->nic && (ret = rig_nic_close(s->nic)))
		status = us_fail("rig_nic_close", ret);
	free(s->buf);
	return status;
}

static void us_usage(const char *argv0)
{
	fprintf(stderr,
		"Usage: %s [-d DEV] [-p PORT] [-t TICK_MS] [-n REQUESTS]\n"
		"  -d DEV       RDMA device (default: the first RoCE v2 device)\n"
		"  -p PORT      TCP port to serve (default 18600)\n"
		"  -t TICK_MS   period of the stats tick (default 1000)\n"
		"  -n REQUESTS  exit once that many requests are answered\n",
		argv0);
}

static int us_parse_opts(int argc, char *argv[], struct us_opts *o)
{
	unsigned long long v;
	char *end;
	int c;

	while ((c = getopt(argc, argv, "d:p:t:n:")) != -1) {
		if (c == 'd') {
			o->dev = optarg;
			continue;
		}
		if (c != 'p' && c != 't' && c != 'n')
			return -1;
		errno = 0;
		v = strtoull(optarg, &end, 0);
		if (errno || end == optarg || *end || optarg[0] == '-')
			return -1;
		if (c == 'p' && v >= 1 && v <= 65535)
			o->port = (unsigned int)v;
		else if (c == 't' && v >= 1 && v <= 3600000)
			o->tick_ms = (unsigned int)v;
		else if (c == 'n' && v >= 1)
			o->limit = v;
		else
			return -1;
	}
	return optind == argc ? 0 : -1;
}

int main(int argc, char *argv[])
{
	struct us_opts o = { .port = 18600, .tick_ms = 1000 };
	struct us_server *s;
	int status;

	if (us_parse_opts(argc, argv, &o)) {
		us_usage(argv[0]);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	s = calloc(1, sizeof(*s));
	if (!s)
		return us_fail_sys("calloc", ENOMEM);
	status = us_setup(s, &o);
	if (!status) {
		status = us_loop(s);
		printf("%llu ticks, %llu requests served, %llu clients, %llu short sends\n",
		       s->ticks, s->served, s->accepted, s->short_sends);
	}
	if (us_teardown(s))
		status = 1;
	free(s);
	return status;
}
