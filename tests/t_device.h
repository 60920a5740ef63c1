/* SPDX-License-Identifier: MIT */
/* Helpers of the device tests: the NIC under test, connected pairs. */
#ifndef T_DEVICE_H
#define T_DEVICE_H
#include <stdint.h>
#include <rig/rig.h>

/* The device under test ($RIG_TEST_DEV, else the first), and in the
 * two-host topology the other one ($RIG_TEST_PEER_DEV). */
const char *t_dev(void);
const char *t_peer_dev(void);

/* Opens a NIC; fails the test if it cannot. */
struct rig_nic *t_nic_open(const char *name);

/* A queue pair, and two connected to each other. */
struct rig_qp *t_qp(struct rig_nic *nic);
void t_connect(struct rig_qp *a, struct rig_qp *b);

/* A registered buffer of n bytes filled with a pattern from seed. */
struct t_buf {
	uint8_t *mem;
	size_t len;
	struct rig_region *r;
};
void t_buf(struct t_buf *b, struct rig_nic *nic, size_t len, unsigned seed);

/* Polls @side until a completion comes or @ms pass; fails the test at
 * the bound. Returns the completion. */
struct rig_completion t_take(struct rig_qp *qp, enum rig_side side, int ms);

/* Takes a raw-verbs RC queue pair RESET->INIT->RTR->RTS towards a peer,
 * as any verbs program would: it may read, write and send, and grants
 * nothing itself. Retry count 6: Soft-RoCE's 7 means forever. */
void t_raw_connect(struct ibv_qp *qp, int sgid_index, enum ibv_mtu mtu,
		   uint32_t psn, uint32_t peer_qpn, uint32_t peer_psn,
		   const uint8_t peer_gid[16]);

/* Monotonic milliseconds. */
double t_now_ms(void);

/* Runs a shell command in the test VM (ip, tc); fails the test if it
 * fails. */
void t_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
