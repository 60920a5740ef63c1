/* SPDX-License-Identifier: MIT */
/*
 * Message rate with batched posts: 64-byte sends from one queue pair to
 * another on the same NIC, posted and taken in batches of 32 (one
 * doorbell, one ibv_poll_cq per batch), receives kept posted in batches.
 * Compare with ib_send_bw -s 64 on the same device.
 *
 *	msg_rate -d DEV [-n MESSAGES]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rig/rig.h>

#define BATCH 32
#define SIZE 64

static void die(const char *call, int ret)
{
	fprintf(stderr, "%s: %s (%s)\n", call, strerror(-ret), rig_errmsg());
	exit(1);
}

int main(int argc, char *argv[])
{
	static char buf[BATCH * SIZE * 2];
	struct rig_post tx[BATCH], rx[BATCH];
	struct rig_completion c[BATCH];
	struct rig_endpoint ea, eb;
	struct rig_region *r;
	struct rig_nic *nic;
	struct rig_qp *a, *b;
	struct timespec t0, t1;
	const char *dev = NULL;
	long total = 200000, sent = 0, received = 0;
	int i, n, ret, opt;
	double s;

	while ((opt = getopt(argc, argv, "d:n:")) != -1) {
		if (opt == 'd')
			dev = optarg;
		else if (opt == 'n')
			total = atol(optarg);
		else
			return 2;
	}
	if ((ret = rig_nic_open(dev, &nic)) || (ret = rig_region_register(nic, buf, sizeof(buf), &r)) ||
	    (ret = rig_qp_make(nic, &a)) || (ret = rig_qp_make(nic, &b)))
		die("setup", ret);
	rig_qp_endpoint(a, &ea);
	rig_qp_endpoint(b, &eb);
	if ((ret = rig_qp_connect(a, &eb)) || (ret = rig_qp_connect(b, &ea)))
		die("rig_qp_connect", ret);
	for (i = 0; i < BATCH; i++) {
		tx[i] = (struct rig_post){ r, (size_t)i * SIZE, SIZE, (uint64_t)i };
		rx[i] = (struct rig_post){ r, (size_t)(BATCH + i) * SIZE, SIZE, (uint64_t)i };
	}
	/* Receives first, as many as the ring takes. */
	while (rig_qp_room(b, RIG_RECEIVE) >= BATCH)
		if ((ret = rig_qp_receive_batch(b, rx, BATCH)) < 0)
			die("rig_qp_receive_batch", ret);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while (received < total) {
		if (sent < total && rig_qp_room(a, RIG_SEND) >= BATCH) {
			if ((ret = rig_qp_send_batch(a, tx, BATCH)) < 0)
				die("rig_qp_send_batch", ret);
			sent += ret;
		}
		while ((n = rig_qp_poll_batch(a, RIG_SEND, c, NULL, BATCH)) > 0)
			for (i = 0; i < n; i++)
				if (c[i].error)
					die("send", c[i].error);
		while ((n = rig_qp_poll_batch(b, RIG_RECEIVE, c, NULL, BATCH)) > 0) {
			for (i = 0; i < n; i++)
				if (c[i].error)
					die("receive", c[i].error);
			received += n;
		}
		while (rig_qp_room(b, RIG_RECEIVE) >= BATCH)
			if ((ret = rig_qp_receive_batch(b, rx, BATCH)) < 0)
				die("rig_qp_receive_batch", ret);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	s = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("msg_rate,rig,%d,%.6f\n", SIZE, received / s / 1e6);
	rig_nic_close(nic);
	return 0;
}
