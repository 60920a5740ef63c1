/* SPDX-License-Identifier: MIT */
/*
 * dial_storm: CONNS dials to one listener from one thread's loop, at
 * most QUEUE of them under way, and the time from the first dial to the
 * last connection up. bench/storm runs it against rig-echo across the test
 * VM's two hosts: all at once (QUEUE = CONNS: rig's loop starts 16 at a
 * time itself and keeps the rest waiting their turn), one after another
 * (QUEUE = 1), and from several processes at once, beside rdma-core's
 * cmtime on the same two devices.
 *
 *	dial_storm -d DEV -a ADDR -p PORT -c CONNS [-q QUEUE] [-b BOUND_S]
 *		   [-m MAX_MS]
 *
 * A dial the listener refused (RIG_CM_HANDSHAKES under way and
 * RIG_CM_WAITING waiting, or no turn for RIG_CM_HALF_OPEN_MS) is tried
 * again after a pause that doubles from 20 ms up to MAX_MS (-m,
 * 1000 by default), plus up to half again at random so that dials
 * refused together do not come back together, as rig-echo-load does;
 * all within the dial's bound (-b, 300 s from its first try: an emulated
 * guest connects slowly, and a storm's verdict is its rate, not a
 * deadline). Any other failure ends the run with exit 1. No connection
 * is closed before all are up, so the listener holds CONNS at the end;
 * their teardown, at the process's exit, is not timed.
 *
 * stdout, once all are up:
 * dial_storm,CONNS,QUEUE,START_NS,END_NS,REFUSED,CPU_S:
 * START_NS and END_NS by CLOCK_REALTIME at the first dial and at the last
 * connection's news, so that bench/storm can take the span of several
 * processes; REFUSED counts the dials tried again; CPU_S is the process's
 * CPU time (user and system, the loop's helper thread included).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <rig/rig.h>

#define CONNS_MAX 4096
#define REDIAL_MS 20
#define REDIAL_MAX_MS 1000
#define NEWS 64

struct dial {
	int64_t first_ns;	/* CLOCK_MONOTONIC, the first try */
	int64_t again_ns;	/* the next try of a refused dial, or 0 */
	unsigned int refused;
	struct rig_qp *qp;
};

static int64_t now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void die(const char *what, int ret)
{
	fprintf(stderr, "dial_storm: %s: %s (%s)\n", what, strerror(ret < 0 ? -ret : ret),
		rig_errmsg());
	exit(1);
}

static void usage(void)
{
	fprintf(stderr, "usage: dial_storm -d DEV -a ADDR -p PORT -c CONNS [-q QUEUE] [-b BOUND_S] "
		"[-m MAX_MS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *dev = NULL, *addr = NULL;
	int conns = 0, queue = 0, port = 0, bound_s = 300, redial_max_ms = REDIAL_MAX_MS;
	unsigned int seed = (unsigned int)getpid();
	int started = 0, under = 0, up = 0, c, i, n, ret;
	unsigned long long refused = 0;
	int64_t start_wall = 0, bound_ns;
	struct rig_ready ready[NEWS];
	struct rig_loop *loop;
	struct rig_nic *nic;
	struct rusage ru;
	struct dial *d;

	while ((c = getopt(argc, argv, "d:a:p:c:q:b:m:")) != -1) {
		switch (c) {
		case 'd': dev = optarg; break;
		case 'a': addr = optarg; break;
		case 'p': port = atoi(optarg); break;
		case 'c': conns = atoi(optarg); break;
		case 'q': queue = atoi(optarg); break;
		case 'b': bound_s = atoi(optarg); break;
		case 'm': redial_max_ms = atoi(optarg); break;
		default: usage();
		}
	}
	if (!dev || !addr || port <= 0 || port > 65535 || conns < 1 || conns > CONNS_MAX ||
	    queue < 0 || bound_s < 1 || redial_max_ms < REDIAL_MS)
		usage();
	if (!queue || queue > conns)
		queue = conns;
	bound_ns = bound_s * 1000000000ll;
	d = calloc(conns, sizeof(*d));
	if (!d)
		die("calloc", -ENOMEM);
	if ((ret = rig_nic_open(dev, &nic)) || (ret = rig_loop_open(nic, &loop)) ||
	    (ret = rig_loop_watch(loop)))
		die("setting up", ret);

	while (up < conns) {
		int64_t now = now_ns(CLOCK_MONOTONIC), wake = -1;
		struct pollfd p = { .fd = rig_loop_fd(loop), .events = POLLIN };

		/* new dials while fewer than QUEUE are under way */
		for (; started < conns && under < queue; started++, under++) {
			if (!started)
				start_wall = now_ns(CLOCK_REALTIME);
			d[started].first_ns = now;
			d[started].again_ns = 1;	/* due now */
		}
		/* the due tries, first and again; the next one's time */
		for (i = 0; i < started; i++) {
			if (!d[i].again_ns)
				continue;
			if (d[i].again_ns > now) {
				if (wake < 0 || d[i].again_ns < wake)
					wake = d[i].again_ns;
				continue;
			}
			d[i].again_ns = 0;
			ret = rig_loop_dial(loop, addr, (uint16_t)port,
					    (d[i].first_ns + bound_ns - now) / 1000, (uint64_t)i);
			if (ret)
				die("rig_loop_dial", ret);
		}
		if (poll(&p, 1, wake < 0 ? -1 : (int)((wake - now) / 1000000 + 1)) < 0)
			die("poll", -errno);
		do {
			n = rig_loop_handle(loop, ready, NEWS);
			if (n < 0)
				die("rig_loop_handle", n);
			for (i = 0; i < n; i++) {
				struct rig_ready *r = &ready[i];
				struct dial *x = &d[r->cookie];

				if (r->news != RIG_NEWS_DIALED) {
					fprintf(stderr, "dial_storm: connection %llu: news %d, result %d (%s)\n",
						(unsigned long long)r->cookie, r->news, r->result,
						strerror(-r->result));
					exit(1);
				}
				now = now_ns(CLOCK_MONOTONIC);
				if (r->result == -ECONNREFUSED) {
					int64_t ms = REDIAL_MS << (x->refused < 10 ? x->refused : 10);

					if (ms > redial_max_ms)
						ms = redial_max_ms;
					ms += rand_r(&seed) % (ms / 2 + 1);
					if (now + ms * 1000000 < x->first_ns + bound_ns) {
						x->refused++;
						refused++;
						x->again_ns = now + ms * 1000000;
						continue;
					}
				}
				if (r->result) {
					fprintf(stderr, "dial_storm: dial %llu, %u refused before: ",
						(unsigned long long)r->cookie, x->refused);
					die("its outcome", r->result);
				}
				x->qp = r->qp;
				up++;
				under--;
			}
		} while (n == NEWS);
	}
	getrusage(RUSAGE_SELF, &ru);
	printf("dial_storm,%d,%d,%lld,%lld,%llu,%.2f\n", conns, queue, (long long)start_wall,
	       (long long)now_ns(CLOCK_REALTIME), refused,
	       ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	fflush(stdout);
	return 0;
}
