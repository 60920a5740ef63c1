/* SPDX-License-Identifier: MIT */
/*
 * mute-listener: a rig listener that accepts and then never speaks. It
 * plays a server that hangs after its answer, for the test of a client's
 * own reply timer (tests/rig-echo-test): it posts a receive on each
 * connection it accepts, as rig-echo does, so the client's first message
 * lands and is acknowledged, and no reply, nor any failure, ever comes:
 * RC sends nothing more on an idle connection.
 *
 *	mute-listener DEV ADDR PORT N
 *
 * Accepts N connections in a loop (rig_loop_listen), printing "accepted:
 * I" after each, holds them until SIGTERM, and exits 0 then; 1 when a call
 * of rig's fails.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <rig/rig.h>

#define MAX_CONNS 64
#define SLOT 4096		/* a receive's bytes: rig-echo-load's largest */

static int fail(const char *call, int ret)
{
	fprintf(stderr, "%s: %s (%s)\n", call, strerror(-ret), rig_errmsg());
	return 1;
}

int main(int argc, char *argv[])
{
	static uint8_t buf[MAX_CONNS * SLOT];
	struct rig_ready ready[16];
	struct rig_completion c;
	struct rig_listener *l;
	struct rig_region *r;
	struct rig_loop *loop;
	struct rig_nic *nic;
	struct pollfd pfd[2];
	int i, k, n, got = 0, ret;
	sigset_t term;

	n = argc == 5 ? atoi(argv[4]) : 0;
	if (n < 1 || n > MAX_CONNS) {
		fprintf(stderr, "usage: mute-listener DEV ADDR PORT N (1 to %d)\n",
			MAX_CONNS);
		return 1;
	}
	/* SIGTERM is read from a signalfd, not taken by its default action */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = rig_nic_open(argv[1], &nic);
	if (ret)
		return fail("rig_nic_open", ret);
	ret = rig_region_register(nic, buf, sizeof(buf), &r);
	if (ret)
		return fail("rig_region_register", ret);
	ret = rig_loop_open(nic, &loop);
	if (!ret)
		ret = rig_loop_watch(loop);
	if (ret)
		return fail("rig_loop_open", ret);
	ret = rig_loop_listen(loop, argv[2], (uint16_t)atoi(argv[3]), 0, &l);
	if (ret)
		return fail("rig_loop_listen", ret);
	printf("listening\n");
	pfd[0] = (struct pollfd){ rig_loop_fd(loop), POLLIN, 0 };
	pfd[1] = (struct pollfd){ signalfd(-1, &term, SFD_CLOEXEC), POLLIN, 0 };
	if (pfd[1].fd < 0)
		return fail("signalfd", -errno);
	/* The loop runs on until SIGTERM: each answer goes at the call
	 * after its RIG_NEWS_ACCEPTED, and a client that leaves is news. */
	while (!(pfd[1].revents & POLLIN)) {
		if (poll(pfd, 2, -1) < 0 || !(pfd[0].revents & POLLIN))
			continue;
		k = rig_loop_handle(loop, ready, 16);
		if (k < 0)
			return fail("rig_loop_handle", k);
		for (i = 0; i < k; i++) {
			if (ready[i].news == RIG_NEWS_RING) {
				while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1)
					;	/* heard, never answered */
				continue;
			}
			if (ready[i].news != RIG_NEWS_ACCEPTED)
				continue;	/* a client left: it is closed below */
			if (got == n) {
				fprintf(stderr, "more than %d connections\n", n);
				return 1;
			}
			ret = rig_qp_receive(ready[i].qp, r, (size_t)got * SLOT, SLOT);
			if (ret)
				return fail("rig_qp_receive", ret);
			printf("accepted: %d\n", ++got);
		}
	}
	ret = rig_listener_close(l);
	ret |= rig_loop_close(loop);	/* and the queue pairs it accepted */
	ret |= rig_region_deregister(r);
	ret |= rig_nic_close(nic);
	return ret ? 1 : 0;
}
