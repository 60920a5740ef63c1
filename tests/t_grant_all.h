/* SPDX-License-Identifier: MIT */
/*
 * A NIC that grants every queue pair remote access (rig(7) M4), for the
 * suites that prove M4 holds on one: while grant_all is set, every
 * ibv_modify_qp of this process does what the kernel's bnxt_re before
 * Linux 6.13 does (drivers/infiniband/hw/bnxt_re/ib_verbs.c,
 * bnxt_re_modify_qp, "Temp: Set all params on QP as of now"): remote read
 * and write ORed into the access of a modify that carries
 * IBV_QP_ACCESS_FLAGS; and what some firmware does, serve reads at a
 * responder depth of 0: max_dest_rd_atomic 0 becomes 1. Soft-RoCE does
 * neither, so the test process does it at the verbs boundary. Included
 * by one file of a test program (it defines the interposer).
 */
#ifndef T_GRANT_ALL_H
#define T_GRANT_ALL_H

#include <stdbool.h>
#include <infiniband/verbs.h>

#include "t_device.h"

static bool grant_all;

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	__typeof__(&ibv_modify_qp) real = T_NEXT(ibv_modify_qp);
	struct ibv_qp_attr a;

	if (!__atomic_load_n(&grant_all, __ATOMIC_RELAXED))
		return real(qp, attr, mask);
	a = *attr;
	if (mask & IBV_QP_ACCESS_FLAGS)
		a.qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && !a.max_dest_rd_atomic)
		a.max_dest_rd_atomic = 1;
	return real(qp, &a, mask);
}

#endif
