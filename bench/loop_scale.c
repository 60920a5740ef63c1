/* SPDX-License-Identifier: MIT */
/*
 * The per-event cost of rig's io_uring loop integration: the time the
 * application spends in rig_uring_handle() and in polling the rings it
 * lists, per CQE of rig's, while messages go round queue pairs one at a
 * time per loop.
 *
 * - queue pairs: one pair against 512 pairs (1024 queue pairs) in the
 *   NIC's own loop. The CQ context naming the queue pair should make the
 *   two equal.
 * - loops: one thread with one loop against four threads with a loop
 *   each on the same NIC, the same queue pairs and messages in all. Each
 *   loop has its own completion channel, so an event should cost the
 *   same with four loops as with one. Here the figure is the median time
 *   per event: four threads on the test VM's two CPUs are now and then
 *   descheduled inside the timed section, and the mean counts the other
 *   threads' time then as this event's cost (the mean is printed too).
 *   The two are measured in turn, REPEATS times, the order swapped each
 *   time; the medians over repeats are kept.
 *
 *	loop_scale -d DEV [-n ROUNDS] [-r REPEATS] [-p PAIRS]
 *
 * -p measures only PAIRS pairs in the NIC's own loop, for a profiler
 * (strace -f -c, callgrind): its output is that case's row alone.
 *
 * stdout: loop_scale,CASE,NS_PER_EVENT (CASE: 1 and 1024 queue pairs,
 * means, and 1_median and 1024_median; loops1 and loops4, medians;
 * loops1_mean and loops4_mean);
 * stderr: one line per comparison, with its ratio.
 */
#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rig/rig.h>

#define TAG 0x7269670000000001ull
#define LOOPS_MAX 4
#define LOOP_PAIRS 8		/* queue pair pairs in all, loops case */
#define REPEATS_MAX 15

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

/* One loop's share: its pairs, its ring, its messages, what it spent. */
struct share {
	struct rig_loop *loop;
	struct rig_region *r;
	struct rig_qp **qp;	/* 2 * pairs; qp[2i] sends to qp[2i + 1] */
	int pairs, rounds;
	double spent;		/* ns in rig_uring_handle and the polls */
	long events;		/* rig's CQEs */
	double *each;		/* the time of each, up to max_events */
	long max_events;
	pthread_barrier_t *start;
	pthread_t tid;
};

/* Makes @pairs connected pairs in @loop. */
static struct rig_qp **make_pairs(struct rig_loop *loop, int pairs)
{
	struct rig_qp **qp = calloc(2 * pairs, sizeof(*qp));
	struct rig_endpoint ea, eb;
	int i, ret;

	if (!qp)
		die("calloc", -ENOMEM);
	for (i = 0; i < 2 * pairs; i++)
		if ((ret = rig_qp_make_in(loop, &qp[i])))
			die("rig_qp_make_in", ret);
	for (i = 0; i < 2 * pairs; i += 2) {
		rig_qp_endpoint(qp[i], &ea);
		rig_qp_endpoint(qp[i + 1], &eb);
		if ((ret = rig_qp_connect(qp[i], &eb)) || (ret = rig_qp_connect(qp[i + 1], &ea)))
			die("rig_qp_connect", ret);
	}
	return qp;
}

/* Runs s->rounds messages round s's pairs, one at a time, through the
 * loop; counts the time spent handling rig's CQEs. */
static void *run_share(void *arg)
{
	struct share *s = arg;
	struct rig_ready ready[64];
	struct rig_completion c;
	struct io_uring ring;
	struct io_uring_cqe *cqe;
	double t0;
	int i, k, n, ret;

	if ((ret = io_uring_queue_init(64, &ring, 0)))
		die("io_uring_queue_init", ret);
	if ((ret = rig_uring_watch(&ring, s->loop, TAG)))
		die("rig_uring_watch", ret);
	io_uring_submit(&ring);
	if (s->start)
		pthread_barrier_wait(s->start);

	for (k = 0; k < s->rounds; k++) {
		struct rig_qp *a = s->qp[2 * (k % s->pairs)], *b = s->qp[2 * (k % s->pairs) + 1];
		int taken = 0;

		if ((ret = rig_qp_receive(b, s->r, 0, 64)) || (ret = rig_qp_send(a, s->r, 64, 64)))
			die("post", ret);
		while (taken < 2) {
			if ((ret = io_uring_submit_and_wait(&ring, 1)) < 0)
				die("io_uring_submit_and_wait", ret);
			while (!io_uring_peek_cqe(&ring, &cqe)) {
				const struct io_uring_cqe *h = cqe;

				t0 = now_ns();
				do {
					n = rig_uring_handle(&ring, s->loop, h, ready, 64);
					if (n < 0)
						die("rig_uring_handle", n);
					for (i = 0; i < n; i++)
						while (rig_qp_poll(ready[i].qp, ready[i].side, &c) == 1)
							taken += !c.error;
					h = NULL;
				} while (n == 64);
				t0 = now_ns() - t0;
				s->spent += t0;
				if (s->events < s->max_events)
					s->each[s->events] = t0;
				s->events++;
				io_uring_cqe_seen(&ring, cqe);
			}
		}
	}
	io_uring_queue_exit(&ring);
	return NULL;
}

static double median(double *v, int n);

/* 1 against 1024 queue pairs: @pairs pairs in the NIC's own loop. Returns
 * the mean time per event; *med gets the median, which a vCPU thread
 * the host deschedules inside a timed section moves less. */
static double measure_pairs(const char *dev, int pairs, int rounds, double *med)
{
	struct share s = { 0 };
	struct rig_nic *nic;
	static char buf[4096];
	int ret;

	if ((ret = rig_nic_open(dev, &nic)))
		die("rig_nic_open", ret);
	if ((ret = rig_region_register(nic, buf, sizeof(buf), &s.r)))
		die("rig_region_register", ret);
	s.loop = rig_nic_loop(nic);
	s.qp = make_pairs(s.loop, pairs);
	s.pairs = pairs;
	s.rounds = rounds;
	/* two CQEs a message at most, but for a spurious wakeup */
	s.max_events = 4l * rounds;
	s.each = malloc(s.max_events * sizeof(double));
	if (!s.each)
		die("malloc", -ENOMEM);
	run_share(&s);
	rig_nic_close(nic);
	free(s.qp);
	*med = median(s.each, (int)(s.events < s.max_events ? s.events : s.max_events));
	free(s.each);
	return s.spent / s.events;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/*
 * One loop against several: @nloops threads, each with a loop of its own
 * on one NIC, share LOOP_PAIRS pairs and @rounds messages evenly, and
 * run at once. Returns the median time per event; *mean gets the mean.
 */
static double measure_loops(const char *dev, int nloops, int rounds, double *mean)
{
	struct share s[LOOPS_MAX] = { { 0 } };
	pthread_barrier_t start;
	struct rig_region *r;
	struct rig_nic *nic;
	static char buf[LOOPS_MAX][4096];
	double spent = 0, *all, med;
	long events = 0, n = 0;
	int i, ret;

	if ((ret = rig_nic_open(dev, &nic)))
		die("rig_nic_open", ret);
	pthread_barrier_init(&start, NULL, nloops);
	for (i = 0; i < nloops; i++) {
		if ((ret = rig_region_register(nic, buf[i], sizeof(buf[i]), &r)))
			die("rig_region_register", ret);
		if ((ret = rig_loop_open(nic, &s[i].loop)))
			die("rig_loop_open", ret);
		s[i].r = r;
		s[i].pairs = LOOP_PAIRS / nloops;
		s[i].qp = make_pairs(s[i].loop, s[i].pairs);
		s[i].rounds = rounds / nloops;
		s[i].start = &start;
		/* two CQEs a message at most, but for a spurious wakeup */
		s[i].max_events = 4l * s[i].rounds;
		s[i].each = malloc(s[i].max_events * sizeof(double));
		if (!s[i].each)
			die("malloc", -ENOMEM);
	}
	for (i = 0; i < nloops; i++)
		if ((ret = pthread_create(&s[i].tid, NULL, run_share, &s[i])))
			die("pthread_create", -ret);
	all = malloc(4l * rounds * sizeof(double));
	if (!all)
		die("malloc", -ENOMEM);
	for (i = 0; i < nloops; i++) {
		pthread_join(s[i].tid, NULL);
		spent += s[i].spent;
		events += s[i].events;
		memcpy(all + n, s[i].each,
		       (s[i].events < s[i].max_events ? s[i].events : s[i].max_events) * sizeof(double));
		n += s[i].events < s[i].max_events ? s[i].events : s[i].max_events;
		if ((ret = rig_loop_close(s[i].loop)))
			die("rig_loop_close", ret);
		free(s[i].qp);
		free(s[i].each);
	}
	pthread_barrier_destroy(&start);
	rig_nic_close(nic);
	*mean = spent / events;
	med = median(all, (int)n);
	free(all);
	return med;
}

int main(int argc, char *argv[])
{
	double one, many, l1[REPEATS_MAX], l4[REPEATS_MAX], ratio[REPEATS_MAX];
	double a1[REPEATS_MAX], a4[REPEATS_MAX], aratio[REPEATS_MAX];
	double m1, m4, mr, rmin, rmax, ma1, ma4, mar;
	const char *dev = NULL;
	int rounds = 4000, repeats = 3, only = 0, opt, i;

	while ((opt = getopt(argc, argv, "d:n:r:p:")) != -1) {
		if (opt == 'd')
			dev = optarg;
		else if (opt == 'n')
			rounds = atoi(optarg);
		else if (opt == 'r')
			repeats = atoi(optarg);
		else if (opt == 'p')
			only = atoi(optarg);
		else
			return 2;
	}
	if (rounds < LOOPS_MAX || repeats < 1 || repeats > REPEATS_MAX) {
		fprintf(stderr, "loop_scale: -n at least %d, -r 1 to %d\n", LOOPS_MAX,
			REPEATS_MAX);
		return 2;
	}
	if (only > 0) {
		double mean = measure_pairs(dev, only, rounds, &one);

		printf("loop_scale,%d,%.0f\nloop_scale,%d_median,%.0f\n", 2 * only, mean, 2 * only, one);
		return 0;
	}
	one = measure_pairs(dev, 1, rounds, &m1);
	many = measure_pairs(dev, 512, rounds, &m4);
	printf("loop_scale,1,%.0f\nloop_scale,1024,%.0f\n", one, many);
	printf("loop_scale,1_median,%.0f\nloop_scale,1024_median,%.0f\n", m1, m4);
	fprintf(stderr, "loop: %.0f ns per event with 2 queue pairs (1 pair), %.0f with 1024 queue pairs: %.2fx (target <= 1.25); medians %.0f, %.0f: %.2fx\n",
		one, many, many / one, m1, m4, m4 / m1);

	/* A slow stretch of the emulator hits both alike: each repeat runs
	 * both, in alternating order, and gives a ratio. */
	for (i = 0; i < repeats; i++) {
		if (i % 2) {
			l4[i] = measure_loops(dev, 4, rounds, &a4[i]);
			l1[i] = measure_loops(dev, 1, rounds, &a1[i]);
		} else {
			l1[i] = measure_loops(dev, 1, rounds, &a1[i]);
			l4[i] = measure_loops(dev, 4, rounds, &a4[i]);
		}
		ratio[i] = l4[i] / l1[i];
		aratio[i] = a4[i] / a1[i];
	}
	m1 = median(l1, repeats);
	m4 = median(l4, repeats);
	mr = median(ratio, repeats);
	rmin = ratio[0];
	rmax = ratio[repeats - 1];
	ma1 = median(a1, repeats);
	ma4 = median(a4, repeats);
	mar = median(aratio, repeats);
	printf("loop_scale,loops1,%.0f\nloop_scale,loops4,%.0f\n", m1, m4);
	printf("loop_scale,loops1_mean,%.0f\nloop_scale,loops4_mean,%.0f\n", ma1, ma4);
	fprintf(stderr, "loops: median %.0f ns per event with 1 loop, %.0f with 4 loops (4 threads, one NIC, same traffic): %.2fx [%.2f-%.2f over %d repeats] (target <= 1.25); means %.0f, %.0f: %.2fx (the 4 threads are descheduled at times on 2 CPUs)\n",
		m1, m4, mr, rmin, rmax, repeats, ma1, ma4, mar);
	return 0;
}
