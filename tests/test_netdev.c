/* SPDX-License-Identifier: MIT */
/*
 * The real device loses its netdev (rig(7) F1, F6). On Soft-RoCE,
 * `ip link del` of the netdev under rxe0 blocks until every context on
 * the device is closed, and raises no DEVICE_FATAL: the only signs are a
 * GID_CHANGE event and the next send failing at once with a local error.
 * That send fails its queue pair, and every due entry of both rings
 * completes with its error. The test takes the netdev away for good, so
 * tests/guest-suite runs it last, once.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t_device.h"

Test(netdev, F1_deleted_netdev_fails_the_next_send, .timeout = 60)
{
	const char *netdev = getenv("RIG_TEST_NETDEV");
	struct rig_nic *nic;
	struct rig_qp *a, *b;
	struct rig_completion c;
	struct t_buf buf;
	int status, events = 0;
	double end;
	pid_t pid;

	cr_assert_not_null(netdev, "RIG_TEST_NETDEV unset");
	nic = t_nic_open(t_dev());
	a = t_qp(nic);
	b = t_qp(nic);
	t_connect(a, b);
	t_buf(&buf, nic, 4096, 5);
	cr_assert_eq(rig_qp_receive(a, buf.r, 0, 64), 0);
	cr_assert_eq(rig_qp_receive(b, buf.r, 64, 64), 0);

	/* ip link del waits for our context: run it beside us. */
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		execlp("ip", "ip", "link", "del", netdev, (char *)NULL);
		_exit(127);
	}
	/* Its GID_CHANGE event says the netdev is going. */
	for (end = t_now_ms() + 10000; !events; usleep(5000)) {
		events = rig_nic_events(nic);
		cr_assert_geq(events, 0, "%s", rig_errmsg());
		cr_assert_lt(t_now_ms(), end, "no event within 10 s of ip link del");
	}
	cr_assert_eq(rig_qp_send(a, buf.r, 128, 64), 0);
	c = t_take(a, RIG_SEND, 5000);
	cr_assert_eq(c.error, -EIO, "the send after the netdev went: %d %s", c.error,
		     c.why ? c.why : "");
	c = t_take(a, RIG_RECEIVE, 5000);
	cr_assert_eq(c.error, -EIO, "a's due receive: %d", c.error);
	cr_assert_eq(rig_nic_close(nic), 0, "%s", rig_errmsg());
	/* Closing the context lets ip link del finish. */
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "ip link del failed");
}
