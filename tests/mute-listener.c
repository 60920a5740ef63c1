/* SPDX-License-Identifier: MIT */
/*
 * mute-listener: a rig listener that accepts and then never speaks. It
 * plays a server that hangs between its answer and its first message, for
 * the test of a client's own greeting timer (tests/rig-echo-test): the
 * client's queue pair is up, a receive of its waits, and no failure can
 * ever come, because RC sends nothing on an idle connection.
 *
 *	mute-listener DEV ADDR PORT N
 *
 * Accepts N connections, printing "accepted: I" after each, holds them
 * until SIGTERM, and exits 0 then; 1 when a call of rig's fails.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rig/rig.h>

#define ACCEPT_US 120000000	/* a busy emulated guest connects slowly */
#define MAX_CONNS 64

int main(int argc, char *argv[])
{
	struct rig_qp *qp[MAX_CONNS];
	struct rig_listener *l;
	struct rig_nic *nic;
	sigset_t term;
	int i, n, sig, ret, status = 0;

	n = argc == 5 ? atoi(argv[4]) : 0;
	if (n < 1 || n > MAX_CONNS) {
		fprintf(stderr, "usage: mute-listener DEV ADDR PORT N (1 to %d)\n",
			MAX_CONNS);
		return 1;
	}
	/* SIGTERM is taken by sigwait(), not by its default action */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	ret = rig_nic_open(argv[1], &nic);
	if (ret) {
		fprintf(stderr, "rig_nic_open: %s (%s)\n", strerror(-ret), rig_errmsg());
		return 1;
	}
	ret = rig_listen(nic, argv[2], (uint16_t)atoi(argv[3]), &l);
	if (ret) {
		fprintf(stderr, "rig_listen: %s (%s)\n", strerror(-ret), rig_errmsg());
		return 1;
	}
	printf("listening\n");
	for (i = 0; i < n; i++) {
		ret = rig_accept(l, ACCEPT_US, &qp[i]);
		if (ret) {
			fprintf(stderr, "rig_accept: %s (%s)\n", strerror(-ret),
				rig_errmsg());
			return 1;
		}
		printf("accepted: %d\n", i + 1);
	}
	sigwait(&term, &sig);
	for (i = 0; i < n; i++)
		status |= rig_qp_destroy(qp[i]);
	status |= rig_listener_close(l);
	status |= rig_nic_close(nic);
	return status ? 1 : 0;
}
