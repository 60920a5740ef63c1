/* SPDX-License-Identifier: MIT */
/*
 * rig-hello: a first program. Two queue pairs of one NIC, connected to
 * each other (loopback), send one message from a to b.
 *
 *	cc rig-hello.c $(pkg-config --cflags --libs rig)
 *	./a.out [DEVICE]
 *
 * Without DEVICE it takes the first device with an active RoCE v2 port
 * (Soft-RoCE: rdma link add rxe0 type rxe netdev eth0).
 */
#include <stdio.h>
#include <string.h>

#include <rig/rig.h>

#define SECOND 1000000	/* rig_qp_wait's bound, in microseconds */

static char buf[8192];	/* the region: a's message at 0, b's receive at 4096 */

static int fail(const char *step, int err)
{
	fprintf(stderr, "rig-hello: %s: %s (%s)\n", step, strerror(-err),
		rig_errmsg());
	return 1;
}

/*
 * An endpoint travels in its 30-byte wire form, by any means: TCP, a
 * file, rdma_cm. Here it only goes through a buffer.
 */
static int exchange(struct rig_qp *from, struct rig_endpoint *to)
{
	uint8_t wire[RIG_ENDPOINT_WIRE];
	struct rig_endpoint e;

	rig_qp_endpoint(from, &e);
	rig_endpoint_pack(&e, wire);
	return rig_endpoint_unpack(wire, sizeof(wire), to);
}

/* Waits up to a second for the completion of @qp's oldest entry of @side. */
static int take(struct rig_qp *qp, enum rig_side side, struct rig_completion *c)
{
	const char *what = side == RIG_SEND ? "send" : "receive";
	int ret = rig_qp_wait(qp, side, SECOND, c);

	if (ret < 0)
		return fail("rig_qp_wait", ret);
	if (ret == 0)
		fprintf(stderr, "rig-hello: the %s took over a second\n", what);
	else if (c->error)
		fprintf(stderr, "rig-hello: the %s failed: %s\n", what, c->why);
	return ret != 1 || c->error;
}

static int hello(struct rig_nic *nic)
{
	static const char msg[] = "hello, rig";
	struct rig_endpoint ea, eb;
	struct rig_completion c;
	struct rig_region *r;
	struct rig_qp *a, *b;
	int ret;

	if ((ret = rig_region_register(nic, buf, sizeof(buf), &r)))
		return fail("rig_region_register", ret);
	if ((ret = rig_qp_make(nic, &a)) || (ret = rig_qp_make(nic, &b)))
		return fail("rig_qp_make", ret);
	if ((ret = exchange(a, &ea)) || (ret = exchange(b, &eb)))
		return fail("rig_endpoint_unpack", ret);
	if ((ret = rig_qp_connect(a, &eb)) || (ret = rig_qp_connect(b, &ea)))
		return fail("rig_qp_connect", ret);

	/* The receive first: a send finds the oldest receive not filled. */
	memcpy(buf, msg, sizeof(msg));
	if ((ret = rig_qp_receive(b, r, 4096, 4096)))
		return fail("rig_qp_receive", ret);
	if ((ret = rig_qp_send(a, r, 0, sizeof(msg))))
		return fail("rig_qp_send", ret);

	/* Each entry gets one completion, in order; a failed one says why. */
	if (take(a, RIG_SEND, &c) || take(b, RIG_RECEIVE, &c))
		return 1;
	if (c.bytes != sizeof(msg) || memcmp(buf + 4096, msg, sizeof(msg))) {
		fprintf(stderr, "rig-hello: received %u bytes, not our %zu\n",
			c.bytes, sizeof(msg));
		return 1;
	}
	printf("rig-hello: \"%s\", %u bytes from one queue pair to another (rig %s)\n",
	       buf + 4096, c.bytes, rig_version());
	/* rig_nic_close() frees the queue pairs and the region with it. */
	return 0;
}

int main(int argc, char **argv)
{
	struct rig_nic *nic;
	int ret;

	if ((ret = rig_nic_open(argc > 1 ? argv[1] : NULL, &nic)))
		return fail("rig_nic_open", ret);
	ret = hello(nic);
	rig_nic_close(nic);
	return ret;
}
