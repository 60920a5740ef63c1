/* SPDX-License-Identifier: MIT */
/*
 * bench/wakeup: the floor under any sleeping wait, in the same VM as the
 * ping-pong. Two threads, pinned to CPU 0 and CPU 1 as the ping-pong's
 * client and server are (-P), pass a token back and forth through two
 * eventfds, each blocked in read() until the other's write() wakes it:
 * one operating-system wakeup per half round trip and nothing else.
 * A sleeping ping-pong pays the same wakeup on top of its busy-poll
 * latency, so "rig sleeping p50 / (rig busy p50 + wakeup p50)" says how
 * much of the sleeping wait is rig's own.
 *
 *   wakeup [-n ITERS] [-w WARMUP]
 *
 * Prints one CSV line: wakeup,iters,t_min,t_p50,t_p99 (usec of half a
 * round trip).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static int ping_fd, pong_fd;
static unsigned int total;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	/* A guest with one CPU runs both threads on it: still one wakeup. */
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

/* Blocks until the eventfd holds a count, and takes it. */
static int take(int fd)
{
	uint64_t v;

	while (read(fd, &v, sizeof(v)) != sizeof(v))
		if (errno != EINTR)
			return -1;
	return 0;
}

static int give(int fd)
{
	uint64_t v = 1;

	return write(fd, &v, sizeof(v)) == sizeof(v) ? 0 : -1;
}

static void *server(void *arg)
{
	unsigned int i;

	(void)arg;
	pin(1);
	for (i = 0; i < total; i++)
		if (take(ping_fd) || give(pong_fd))
			return (void *)1;
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char *argv[])
{
	unsigned int iters = 2000, warmup = 200, i;
	uint64_t *rtt, t;
	pthread_t th;
	void *ret;
	int c;

	while ((c = getopt(argc, argv, "n:w:")) != -1) {
		switch (c) {
		case 'n': iters = (unsigned int)strtoul(optarg, NULL, 0); break;
		case 'w': warmup = (unsigned int)strtoul(optarg, NULL, 0); break;
		default:
			fprintf(stderr, "usage: %s [-n ITERS] [-w WARMUP]\n", argv[0]);
			return 2;
		}
	}
	if (!iters)
		return 2;
	total = warmup + iters;
	rtt = calloc(iters, sizeof(*rtt));
	ping_fd = eventfd(0, EFD_CLOEXEC);
	pong_fd = eventfd(0, EFD_CLOEXEC);
	if (!rtt || ping_fd < 0 || pong_fd < 0) {
		perror("wakeup");
		return 1;
	}
	pin(0);
	if (pthread_create(&th, NULL, server, NULL)) {
		fprintf(stderr, "wakeup: no thread\n");
		return 1;
	}
	for (i = 0; i < total; i++) {
		t = now_ns();
		if (give(ping_fd) || take(pong_fd)) {
			perror("wakeup");
			return 1;
		}
		if (i >= warmup)
			rtt[i - warmup] = now_ns() - t;
	}
	if (pthread_join(th, &ret) || ret) {
		fprintf(stderr, "wakeup: the other thread failed\n");
		return 1;
	}
	qsort(rtt, iters, sizeof(*rtt), cmp);
	printf("wakeup,%u,%.2f,%.2f,%.2f\n", iters, rtt[0] / 2e3,
	       rtt[iters / 2] / 2e3, rtt[(size_t)iters * 99 / 100] / 2e3);
	free(rtt);
	return 0;
}
