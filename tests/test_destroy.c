/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
/*
 * D1: rig_qp_destroy never waits for ever, whatever another thread reads
 * meanwhile.
 *
 * ibv_destroy_cq waits until every completion event read from the channel
 * for the CQ has been acked. The channel is the NIC's, shared by every
 * queue pair, and the loop or a sleeper in another thread reads it. If
 * such a thread reads an event of a CQ that destroy is about to destroy,
 * after destroy's own last read of the channel, and lists the queue pair
 * rather than acking the event at once, ibv_destroy_cq hangs. Nor may the
 * reader wait for the destroy (a firmware command on bnxt_re and mlx5):
 * it reads on, acks that event at once and lists nothing of the queue
 * pair.
 *
 * On Soft-RoCE that window is microseconds wide: the event of a CQE that
 * landed before ibv_destroy_qp comes from a tasklet that has almost always
 * run by then, and no CQE comes after it. So this binary widens it at the
 * library boundary: it interposes ibv_destroy_qp and ibv_destroy_cq (this
 * executable's definitions come before libibverbs'), defers the real
 * destroy of one queue pair until rig destroys its first CQ, and there
 * makes a real completion event arrive for the other CQ, then lets a loop
 * thread try to read it before the real destroys go on. Every verbs call
 * still reaches the real device.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <liburing.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <time.h>

#include "t_device.h"

static struct {
	struct ibv_qp *defer_qp;	/* its real destroy waits for the CQ's */
	struct ibv_cq *hook_cq;		/* where the race is staged */
	struct ibv_cq *other_cq;	/* the CQ the staged event is for */
	struct rig_qp *sender;		/* sends the message that raises it */
	struct rig_region *tx;
	bool event_came;		/* the channel had the event */
	bool reader_done;		/* the loop thread read it, in time */
} stage;

static struct {
	pthread_t thread;
	sem_t go, done;
	struct rig_nic *nic;
	struct rig_ready ready[8];
	int n;
} reader;

int ibv_destroy_qp(struct ibv_qp *qp)
{
	__typeof__(&ibv_destroy_qp) real = T_NEXT(ibv_destroy_qp);

	if (qp == stage.defer_qp)
		return 0;
	return real(qp);
}

static void race(void)
{
	struct pollfd pfd = { stage.other_cq->channel->fd, POLLIN, 0 };
	struct timespec deadline;

	/* A real CQE on the queue pair rig has "destroyed": its armed
	 * receive CQ raises a real event, after rig's last channel read. */
	cr_assert_eq(rig_qp_send(stage.sender, stage.tx, 0, 64), 0);
	stage.event_came = poll(&pfd, 1, 5000) == 1;
	/* The loop thread reads the channel now, while the destroy is under
	 * way: it must neither wait for it nor keep the event unacked (the
	 * real destroys below would wait for ever). */
	sem_post(&reader.go);
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 10;
	stage.reader_done = !sem_timedwait(&reader.done, &deadline);
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	__typeof__(&ibv_destroy_cq) real_cq = T_NEXT(ibv_destroy_cq);
	__typeof__(&ibv_destroy_qp) real_qp = T_NEXT(ibv_destroy_qp);

	if (cq == stage.hook_cq) {
		stage.hook_cq = NULL;
		race();
		cr_assert_eq(real_qp(stage.defer_qp), 0);
		stage.defer_qp = NULL;
	}
	return real_cq(cq);
}

static void *read_events(void *unused)
{
	(void)unused;
	sem_wait(&reader.go);
	reader.n = rig_loop_handle(rig_nic_loop(reader.nic), reader.ready, 8);
	sem_post(&reader.done);
	return NULL;
}

/* D1: an event another thread reads between destroy's last look at the
 * channel and its ibv_destroy_cq. Once the loop thread read it, listed
 * the queue pair being freed, and ibv_destroy_cq waited for ever for its
 * ack (the test timed out); later the destroy held the loop's lock across
 * ibv_destroy_cq, and the loop thread waited for it. Now the loop thread
 * reads it during the destroy, acks it and lists nothing of it. */
Test(destroy, D1_event_read_by_the_loop_during_destroy, .timeout = 60)
{
	struct rig_nic *nic = t_nic_open(t_dev());
	struct rig_qp *a, *b;
	struct io_uring ring;
	struct rig_completion c;
	struct t_buf tx, rx;
	int i;

	t_buf(&tx, nic, 64, 1);
	t_buf(&rx, nic, 64, 2);
	/* Watching arms every ring: a CQE on them raises an event. */
	cr_assert_eq(io_uring_queue_init(4, &ring, 0), 0);
	cr_assert_eq(rig_uring_watch(&ring, rig_nic_loop(nic), 1), 0, "%s", rig_errmsg());
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
	cr_assert_eq(rig_qp_receive(a, rx.r, 0, 64), 0);

	sem_init(&reader.go, 0, 0);
	sem_init(&reader.done, 0, 0);
	reader.nic = nic;
	cr_assert_eq(pthread_create(&reader.thread, NULL, read_events, NULL), 0);
	stage.defer_qp = a->ibqp;
	stage.hook_cq = a->ring[RIG_SEND].cq;
	stage.other_cq = a->ring[RIG_RECEIVE].cq;
	stage.sender = b;
	stage.tx = tx.r;

	cr_assert_eq(rig_qp_destroy(a), 0, "%s", rig_errmsg());
	pthread_join(reader.thread, NULL);
	cr_assert(stage.event_came, "no completion event came for the staged CQE");
	cr_assert(stage.reader_done,
		  "the loop thread could not read the channel while a destroy was under way");
	cr_assert_geq(reader.n, 0, "%s", rig_errmsg());
	for (i = 0; i < reader.n; i++)
		cr_assert_neq(reader.ready[i].qp, a, "a destroyed queue pair was listed");
	/* The sender's message reached a live queue pair: it succeeded. */
	c = t_take(b, RIG_SEND, 5000);
	cr_assert_eq(c.error, 0, "%s", c.why);
	cr_assert_eq(rig_qp_destroy(b), 0, "%s", rig_errmsg());
	io_uring_queue_exit(&ring);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
	sem_destroy(&reader.go);
	sem_destroy(&reader.done);
}
