/* SPDX-License-Identifier: MIT */
/*
 * The one ping-pong both benchmark programs run: bench/raw_pingpong.c (plain
 * libibverbs) and bench/rig_pingpong_bench.c (rig) each define the same
 * small set of static inline "be_" functions over their API and then
 * include this file, so the loop, the timing, the statistics and the output
 * are the same code, compiled the same way, in both: the only difference
 * between the two programs is rig against raw verbs.
 *
 * What a backend defines, after including bench.h and before this file:
 *
 *	BE_NAME			"raw" or "rig"
 *	struct be_nic		one opened device
 *	struct be_qp		one queue pair with its two CQs (one per ring)
 *				and one registered buffer
 *	be_nic_open(nic, dev, gidx)		0 or -errno
 *	be_nic_close(nic)
 *	be_qp_make(nic, qp, buf, len)		0 or -errno; registers buf
 *	be_qp_endpoint(qp, ep)			fills a struct bench_ep
 *	be_qp_connect(qp, peer_ep)		0 or -errno
 *	be_qp_destroy(qp)
 *	be_post_recv(qp, at, n)			0 or -errno
 *	be_post_send(qp, at, n)			0 or -errno
 *	be_poll(qp, side)			1 taken, 0 none yet, < 0 error
 *	be_wait(qp, side)			1 taken (sleeping), < 0 error
 *	be_errmsg()				words for the last failure
 *
 * Modes:
 *
 *   pingpong [-e] -s SIZE -n ITERS -w WARMUP [-P]
 *	forks a server and a client process; each opens the device, makes
 *	one queue pair and they exchange endpoints over a socketpair (the
 *	same exchange for both backends), connect, keep RX_DEPTH receives
 *	posted and run examples/rig-pingpong's pattern: the client sends,
 *	the server answers once the message came, each side sends its next
 *	message once its last send completed and the peer's message came,
 *	and reposts one receive per message taken. The client times each
 *	iteration from its send to the arrival of the answer; after WARMUP
 *	iterations ITERS are kept (perftest's half round trip: rtt / 2).
 *	-e takes completions sleeping (be_wait) instead of busy-polling.
 *	Each process measures getrusage(RUSAGE_SELF) user+sys over the kept
 *	iterations and divides by their wall time. -P pins the client to CPU
 *	0 and the server to CPU 1.
 *	Prints one CSV line:
 *	  impl,mode,size,iters,t_min,t_p50,t_p99,t_avg,t_max,
 *	  cpu_client,cpu_server,cpu_us_client,cpu_us_server
 *	(times in usec of half a round trip; cpu_* as a fraction of one CPU,
 *	cpu_us_* as CPU usec per round trip).
 *
 *   icount -n ITERS -w WARMUP [-r RECEIVES]
 *	one process, two connected queue pairs A and B on the device. -r:
 *	B keeps RECEIVES more receives posted (beyond a shallow NIC's depth,
 *	RIG_QP_DEPTH, they wait in the ring: rig(7) Q4). Each
 *	iteration is bench_post() (B posts a receive, A sends 64 bytes),
 *	an uncounted sleep until the completions are surely there, then
 *	bench_take() (one poll takes A's send completion, one B's receive
 *	completion; a poll that finds nothing is retried after another
 *	sleep and counted in empty_polls). Run it under
 *	  valgrind --tool=callgrind --collect-atstart=no \
 *	    --toggle-collect=bench_post --toggle-collect=bench_take
 *	The counters are zeroed after the warm-up (CALLGRIND_ZERO_STATS), so
 *	the total callgrind reports is ITERS iterations' worth, PLT binding
 *	and first-touch paths left out. Prints a CSV line
 *	  impl,icount,64,iters,empty_polls
 *	empty_polls counts polls that found nothing (they would add to the
 *	count; the sleep makes them 0 in practice).
 *
 *   empty -n ITERS -w WARMUP [-r RECEIVES]
 *	the same two queue pairs; B posts one receive that nothing will
 *	fill, and each of ITERS calls of bench_empty() polls B's receive
 *	ring once and finds nothing: what a thread spinning on a quiet ring
 *	pays per poll. Run it under callgrind with
 *	--toggle-collect=bench_empty. Prints a CSV line
 *	  impl,empty,0,iters,taken
 *	(taken: polls that found a completion; must be 0).
 */
#ifndef BENCH_PINGPONG_H
#define BENCH_PINGPONG_H

#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <valgrind/callgrind.h>

#include "bench.h"

#define RX_DEPTH 500		/* receives kept posted, as rig-pingpong -r */
#define ICOUNT_SIZE 64
#define ICOUNT_SETTLE_US 2000	/* after bench_post: far more than a round trip */

static uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t bench_cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
		       1000000000u +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) *
		       1000u;
}

static int bench_fail(const char *what, int ret)
{
	fprintf(stderr, "%s: %s: %s (%s)\n", BE_NAME, what, strerror(-ret),
		be_errmsg());
	return 1;
}

static int bench_io(int fd, void *buf, size_t len, int out)
{
	char *p = buf;
	ssize_t n;

	while (len) {
		n = out ? write(fd, p, len) : read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Takes the completion of the oldest entry of @side: spinning or sleeping. */
static inline int bench_take_one(struct be_qp *qp, int side, int sleep)
{
	int ret;

	if (sleep)
		return be_wait(qp, side);
	while (!(ret = be_poll(qp, side)))
		;
	return ret;
}

struct bench_opts {
	const char *dev;
	int gidx;
	size_t size;
	unsigned int iters, warmup;
	int sleep, pin, icount;
	unsigned int backlog;	/* icount, empty: receives kept posted on B */
};

/* ------------------------------------------------------------ ping-pong */

struct bench_result {
	uint64_t cpu_ns, wall_ns;
	int status;
};

/*
 * The loop: examples/rig-pingpong's pp_run, with the statistics kept from
 * iteration @warmup on. @rtt (client only) gets each kept round trip.
 */
static int bench_loop(struct be_qp *qp, const struct bench_opts *o, int client,
		      uint64_t *rtt, struct bench_result *res)
{
	unsigned int i, total = o->warmup + o->iters;
	uint64_t sent = 0, now, cpu0 = 0, wall0 = 0;
	int ret;

	for (i = 0; i < total; i++) {
		if (i == o->warmup) {
			cpu0 = bench_cpu_ns();
			wall0 = bench_now_ns();
		}
		if (client) {
			sent = bench_now_ns();
			ret = be_post_send(qp, 0, o->size);
			if (ret)
				return bench_fail("post send", ret);
		}
		ret = bench_take_one(qp, SIDE_RECV, o->sleep);
		if (ret < 0)
			return bench_fail("take receive", ret);
		if (client && i >= o->warmup) {
			now = bench_now_ns();
			rtt[i - o->warmup] = now - sent;
		}
		ret = be_post_recv(qp, o->size, o->size);
		if (ret)
			return bench_fail("post receive", ret);
		if (!client) {
			ret = be_post_send(qp, 0, o->size);
			if (ret)
				return bench_fail("post send", ret);
		}
		ret = bench_take_one(qp, SIDE_SEND, o->sleep);
		if (ret < 0)
			return bench_fail("take send", ret);
	}
	res->wall_ns = bench_now_ns() - wall0;
	res->cpu_ns = bench_cpu_ns() - cpu0;
	return 0;
}

static void bench_pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);	/* best effort */
}

/* One side of the ping-pong; @fd is its end of the socketpair. */
static int bench_side(const struct bench_opts *o, int client, int fd,
		      uint64_t *rtt, struct bench_result *res)
{
	struct be_nic nic;
	struct be_qp qp;
	struct bench_ep self, peer;
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len;
	unsigned int i;
	void *buf;
	char go = 'g';
	int ret, status = 1;

	if (o->pin)
		bench_pin(client ? 0 : 1);
	len = (2 * (o->size ? o->size : 1) + page - 1) / page * page;
	if (posix_memalign(&buf, page, len))
		return 1;
	memset(buf, 0x7b, len);
	ret = be_nic_open(&nic, o->dev, o->gidx);
	if (ret) {
		free(buf);
		return bench_fail("open", ret);
	}
	ret = be_qp_make(&nic, &qp, buf, len);
	if (ret) {
		bench_fail("make qp", ret);
		goto out_nic;
	}
	be_qp_endpoint(&qp, &self);
	if (bench_io(fd, &self, sizeof(self), 1) ||
	    bench_io(fd, &peer, sizeof(peer), 0)) {
		fprintf(stderr, "%s: endpoint exchange failed\n", BE_NAME);
		goto out_qp;
	}
	ret = be_qp_connect(&qp, &peer);
	if (ret) {
		bench_fail("connect", ret);
		goto out_qp;
	}
	for (i = 0; i < RX_DEPTH; i++) {
		ret = be_post_recv(&qp, o->size, o->size);
		if (ret) {
			bench_fail("post receive", ret);
			goto out_qp;
		}
	}
	/* Both sides connected with receives posted: no RNR wait at start. */
	if (bench_io(fd, &go, 1, 1) || bench_io(fd, &go, 1, 0))
		goto out_qp;
	status = bench_loop(&qp, o, client, rtt, res);
out_qp:
	be_qp_destroy(&qp);
out_nic:
	be_nic_close(&nic);
	free(buf);
	return status;
}

static int bench_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile, in usec of half the round trip. */
static double bench_pct(const uint64_t *v, size_t n, unsigned int permille)
{
	size_t k = (n * permille + 999) / 1000;

	return v[k ? k - 1 : 0] / 2000.0;
}

static int bench_pingpong(const struct bench_opts *o)
{
	struct bench_result mine = { 0 }, server = { 0 };
	uint64_t *rtt, sum = 0;
	int sv[2], status, wst;
	unsigned int i;
	pid_t pid;

	rtt = calloc(o->iters, sizeof(*rtt));
	if (!rtt || socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 1;
	fflush(NULL);
	pid = fork();
	if (pid < 0)
		return 1;
	if (!pid) {	/* the server: sends its result to the client */
		close(sv[0]);
		server.status = bench_side(o, 0, sv[1], NULL, &server);
		bench_io(sv[1], &server, sizeof(server), 1);
		_exit(server.status);
	}
	close(sv[1]);
	status = bench_side(o, 1, sv[0], rtt, &mine);
	if (bench_io(sv[0], &server, sizeof(server), 0))
		server.status = 1;
	close(sv[0]);
	if (waitpid(pid, &wst, 0) != pid || !WIFEXITED(wst) ||
	    WEXITSTATUS(wst))
		server.status = 1;
	if (status || server.status) {
		fprintf(stderr, "%s: ping-pong failed (client %d, server %d)\n",
			BE_NAME, status, server.status);
		free(rtt);
		return 1;
	}
	qsort(rtt, o->iters, sizeof(*rtt), bench_cmp_u64);
	for (i = 0; i < o->iters; i++)
		sum += rtt[i];
	printf("%s,%s,%zu,%u,%.2f,%.2f,%.2f,%.2f,%.2f,%.4f,%.4f,%.2f,%.2f\n",
	       BE_NAME, o->sleep ? "sleep" : "busy", o->size, o->iters,
	       rtt[0] / 2000.0, bench_pct(rtt, o->iters, 500),
	       bench_pct(rtt, o->iters, 990),
	       (double)sum / o->iters / 2000.0, rtt[o->iters - 1] / 2000.0,
	       (double)mine.cpu_ns / (double)mine.wall_ns,
	       (double)server.cpu_ns / (double)server.wall_ns,
	       (double)mine.cpu_ns / o->iters / 1000.0,
	       (double)server.cpu_ns / o->iters / 1000.0);
	free(rtt);
	return 0;
}

/* ------------------------------------------------- instruction counting */

/* Counted by callgrind: one receive posted on @b, one send posted on @a. */
__attribute__((noinline)) int bench_post(struct be_qp *a, struct be_qp *b);
__attribute__((noinline)) int bench_post(struct be_qp *a, struct be_qp *b)
{
	int ret = be_post_recv(b, ICOUNT_SIZE, ICOUNT_SIZE);

	return ret ? ret : be_post_send(a, 0, ICOUNT_SIZE);
}

/* Counted by callgrind: a poll of @a's send ring and one of @b's receive
 * ring, those of them that @need (bit 0: send, bit 1: receive) names.
 * Returns the bits of the completions it took, or a negative error. */
__attribute__((noinline)) int bench_take(struct be_qp *a, struct be_qp *b,
					 int need);
__attribute__((noinline)) int bench_take(struct be_qp *a, struct be_qp *b,
					 int need)
{
	int got = 0, r;

	if (need & 1) {
		r = be_poll(a, SIDE_SEND);
		if (r < 0)
			return r;
		got |= r;
	}
	if (need & 2) {
		r = be_poll(b, SIDE_RECV);
		if (r < 0)
			return r;
		got |= r << 1;
	}
	return got;
}

/* Counted by callgrind: one poll of @b's receive ring, which is empty. */
__attribute__((noinline)) int bench_empty(struct be_qp *b);
__attribute__((noinline)) int bench_empty(struct be_qp *b)
{
	return be_poll(b, SIDE_RECV);
}

/* The empty mode, on connected A and B: see the head of this file. */
static int bench_empty_polls(const struct bench_opts *o, struct be_qp *b)
{
	unsigned int i, taken = 0;
	int ret;

	ret = be_post_recv(b, ICOUNT_SIZE, ICOUNT_SIZE);
	if (ret)
		return bench_fail("post", ret);
	for (i = 0; i < o->warmup + o->iters; i++) {
		if (i == o->warmup)
			CALLGRIND_ZERO_STATS;
		ret = bench_empty(b);
		if (ret < 0)
			return bench_fail("poll", ret);
		taken += (unsigned int)ret;
	}
	printf("%s,empty,0,%u,%u\n", BE_NAME, o->iters, taken);
	return taken != 0;
}

static int bench_icount(const struct bench_opts *o, int empty_mode)
{
	struct be_nic nic;
	struct be_qp a, b;
	struct bench_ep ea, eb;
	struct timespec settle = { 0, ICOUNT_SETTLE_US * 1000 };
	unsigned int i, empty = 0;
	int ret, need, status = 1;
	void *buf;

	if (posix_memalign(&buf, 4096, 8192))
		return 1;
	memset(buf, 0x7b, 8192);
	ret = be_nic_open(&nic, o->dev, o->gidx);
	if (ret) {
		free(buf);
		return bench_fail("open", ret);
	}
	ret = be_qp_make(&nic, &a, buf, 4096);
	if (ret) {
		bench_fail("make qp", ret);
		goto out_nic;
	}
	ret = be_qp_make(&nic, &b, (char *)buf + 4096, 4096);
	if (ret) {
		bench_fail("make qp", ret);
		goto out_a;
	}
	be_qp_endpoint(&a, &ea);
	be_qp_endpoint(&b, &eb);
	ret = be_qp_connect(&a, &eb);
	if (!ret)
		ret = be_qp_connect(&b, &ea);
	if (ret) {
		bench_fail("connect", ret);
		goto out_b;
	}
	/* -r: more receives kept posted than a shallow NIC queue holds,
	 * so that the counts are those of a ring with entries waiting. */
	for (i = 0; i < o->backlog; i++) {
		ret = be_post_recv(&b, ICOUNT_SIZE, ICOUNT_SIZE);
		if (ret) {
			bench_fail("post receive", ret);
			goto out_b;
		}
	}
	if (empty_mode) {
		status = bench_empty_polls(o, &b);
		goto out_b;
	}
	for (i = 0; i < o->warmup + o->iters; i++) {
		if (i == o->warmup)
			CALLGRIND_ZERO_STATS;
		ret = bench_post(&a, &b);
		if (ret) {
			bench_fail("post", ret);
			goto out_b;
		}
		for (need = 3; need; need &= ~ret) {
			nanosleep(&settle, NULL);
			ret = bench_take(&a, &b, need);
			if (ret < 0) {
				bench_fail("take", ret);
				goto out_b;
			}
			if (ret != need && i >= o->warmup)
				empty++;
		}
	}
	printf("%s,icount,%d,%u,%u\n", BE_NAME, ICOUNT_SIZE, o->iters, empty);
	status = 0;
out_b:
	be_qp_destroy(&b);
out_a:
	be_qp_destroy(&a);
out_nic:
	be_nic_close(&nic);
	free(buf);
	return status;
}

/* ------------------------------------------------------------------ main */

static void bench_usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s -m pingpong|icount|empty [-d DEV] [-g GID_INDEX] [-s SIZE]\n"
		"          [-n ITERS] [-w WARMUP] [-r RECEIVES] [-e] [-P]\n",
		argv0);
}

int main(int argc, char *argv[])
{
	struct bench_opts o = { .gidx = -1, .size = 64, .iters = 1000,
				.warmup = 100 };
	const char *mode = "pingpong";
	int c;

	while ((c = getopt(argc, argv, "m:d:g:s:n:w:r:eP")) != -1) {
		switch (c) {
		case 'm': mode = optarg; break;
		case 'd': o.dev = optarg; break;
		case 'g': o.gidx = atoi(optarg); break;
		case 's': o.size = strtoull(optarg, NULL, 0); break;
		case 'n': o.iters = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'w': o.warmup = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'r': o.backlog = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'e': o.sleep = 1; break;
		case 'P': o.pin = 1; break;
		default: bench_usage(argv[0]); return 2;
		}
	}
	if (optind != argc || !o.iters) {
		bench_usage(argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "pingpong"))
		return bench_pingpong(&o);
	if (!strcmp(mode, "icount"))
		return bench_icount(&o, 0);
	if (!strcmp(mode, "empty"))
		return bench_icount(&o, 1);
	bench_usage(argv[0]);
	return 2;
}

#endif
