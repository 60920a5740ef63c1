/* SPDX-License-Identifier: MIT */
/*
 * probe-fail: a helper of tests/probes-test. Two queue pairs of one NIC,
 * connected to each other; a sends 64 bytes into b's 16-byte receive, so
 * the NIC fails both (rig(7) P4). Prints, for each, the line a tracer of
 * the qp_failed probe must match:
 *
 *	a QPN ERROR WC_STATUS
 *	b QPN ERROR WC_STATUS
 *
 * (QPN in decimal, ERROR as rig_qp_failure returns it). Exits 0 once both
 * completions came back failed, else 1.
 *
 *	probe-fail DEVICE
 */
#include <stdio.h>
#include <string.h>

#include <rig/rig.h>

#define SECOND 1000000

static char buf[8192];

static int fail(const char *step, int err)
{
	fprintf(stderr, "probe-fail: %s: %s (%s)\n", step, strerror(-err), rig_errmsg());
	return 1;
}

static int connect_pair(struct rig_qp *a, struct rig_qp *b)
{
	struct rig_endpoint ea, eb;
	int ret;

	rig_qp_endpoint(a, &ea);
	rig_qp_endpoint(b, &eb);
	if ((ret = rig_qp_connect(a, &eb)) || (ret = rig_qp_connect(b, &ea)))
		return fail("rig_qp_connect", ret);
	return 0;
}

/* Takes @qp's one entry of @side, which must fail, and prints its line. */
static int report(const char *name, struct rig_qp *qp, enum rig_side side)
{
	struct rig_completion c;
	struct rig_endpoint e;
	int ret = rig_qp_wait(qp, side, 5 * SECOND, &c), status, error;

	if (ret != 1)
		return ret < 0 ? fail("rig_qp_wait", ret) :
			(fprintf(stderr, "probe-fail: %s: no completion in 5 s\n", name), 1);
	if (!c.error) {
		fprintf(stderr, "probe-fail: %s: the entry did not fail\n", name);
		return 1;
	}
	rig_qp_endpoint(qp, &e);
	error = rig_qp_failure(qp, &status);
	printf("%s %u %d %d\n", name, e.qp, error, status);
	return 0;
}

int main(int argc, char **argv)
{
	struct rig_region *r;
	struct rig_qp *a, *b;
	struct rig_nic *nic;
	int ret;

	if (argc != 2) {
		fprintf(stderr, "usage: probe-fail DEVICE\n");
		return 2;
	}
	if ((ret = rig_nic_open(argv[1], &nic)))
		return fail("rig_nic_open", ret);
	if ((ret = rig_region_register(nic, buf, sizeof(buf), &r)))
		return fail("rig_region_register", ret);
	if ((ret = rig_qp_make(nic, &a)) || (ret = rig_qp_make(nic, &b)))
		return fail("rig_qp_make", ret);
	if (connect_pair(a, b))
		return 1;
	if ((ret = rig_qp_receive(b, r, 4096, 16)))
		return fail("rig_qp_receive", ret);
	if ((ret = rig_qp_send(a, r, 0, 64)))
		return fail("rig_qp_send", ret);
	ret = report("a", a, RIG_SEND) | report("b", b, RIG_RECEIVE);
	rig_nic_close(nic);
	return ret;
}
