/* SPDX-License-Identifier: MIT */
/*
 * The per-event cost of rig's io_uring loop integration with one queue
 * pair and with 1024 on one NIC: the time the application spends in
 * rig_uring_handle() and in polling the rings it lists, per CQE of rig's,
 * while one message at a time goes round the pairs. The NIC's one fd and
 * the CQ context naming the queue pair should make the two equal.
 *
 *	loop_scale -d DEV [-n ROUNDS]
 */
#include <errno.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rig/rig.h>

#define TAG 0x7269670000000001ull

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void die(const char *call, int ret)
{
	fprintf(stderr, "%s: %s (%s)\n", call, strerror(-ret), rig_errmsg());
	exit(1);
}

/* Runs @rounds messages round @pairs pairs; returns ns per rig CQE. */
static double measure(const char *dev, int pairs, int rounds)
{
	struct rig_nic *nic;
	struct rig_qp **qp = calloc(2 * pairs, sizeof(*qp));
	struct rig_region *r;
	struct rig_ready ready[64];
	struct rig_completion c;
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	struct rig_endpoint ea, eb;
	static char buf[4096];
	double spent = 0, t0;
	long events = 0;
	int i, k, n, ret;

	if ((ret = rig_nic_open(dev, &nic)))
		die("rig_nic_open", ret);
	if ((ret = rig_region_register(nic, buf, sizeof(buf), &r)))
		die("rig_region_register", ret);
	for (i = 0; i < 2 * pairs; i++)
		if ((ret = rig_qp_make(nic, &qp[i])))
			die("rig_qp_make", ret);
	for (i = 0; i < 2 * pairs; i += 2) {
		rig_qp_endpoint(qp[i], &ea);
		rig_qp_endpoint(qp[i + 1], &eb);
		if ((ret = rig_qp_connect(qp[i], &eb)) || (ret = rig_qp_connect(qp[i + 1], &ea)))
			die("rig_qp_connect", ret);
	}
	if ((ret = io_uring_queue_init(64, &ring, 0)))
		die("io_uring_queue_init", ret);
	if ((ret = rig_uring_watch(&ring, nic, TAG)))
		die("rig_uring_watch", ret);
	io_uring_submit(&ring);

	for (k = 0; k < rounds; k++) {
		struct rig_qp *a = qp[2 * (k % pairs)], *b = qp[2 * (k % pairs) + 1];
		int taken = 0;

		if ((ret = rig_qp_receive(b, r, 0, 64)) || (ret = rig_qp_send(a, r, 64, 64)))
			die("post", ret);
		while (taken < 2) {
			if ((ret = io_uring_submit_and_wait(&ring, 1)) < 0)
				die("io_uring_submit_and_wait", ret);
			while (!io_uring_peek_cqe(&ring, &cqe)) {
				const struct io_uring_cqe *h = cqe;

				t0 = now_ns();
				do {
					n = rig_uring_handle(&ring, nic, h, ready, 64);
					if (n < 0)
						die("rig_uring_handle", n);
					for (i = 0; i < n; i++)
						while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1)
							taken += !c.error;
					h = NULL;
				} while (n == 64);
				spent += now_ns() - t0;
				events++;
				io_uring_cqe_seen(&ring, cqe);
			}
		}
	}
	io_uring_queue_exit(&ring);
	rig_nic_close(nic);
	free(qp);
	return spent / events;
}

int main(int argc, char *argv[])
{
	const char *dev = NULL;
	int rounds = 4000, opt;
	double one, many;

	while ((opt = getopt(argc, argv, "d:n:")) != -1) {
		if (opt == 'd')
			dev = optarg;
		else if (opt == 'n')
			rounds = atoi(optarg);
		else
			return 2;
	}
	one = measure(dev, 1, rounds);
	many = measure(dev, 512, rounds);
	printf("loop_scale,1,%.0f\nloop_scale,1024,%.0f\n", one, many);
	fprintf(stderr, "loop: %.0f ns per event with 2 queue pairs (1 pair), %.0f with 1024 queue pairs: %.2fx (target <= 1.25)\n",
		one, many, many / one);
	return 0;
}
