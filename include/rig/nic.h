/* SPDX-License-Identifier: MIT */
#ifndef RIG_NIC_H
#define RIG_NIC_H
/*
 * A NIC: one verbs device, one active port, one RoCE v2 GID.
 */
#ifdef __cplusplus
extern "C" {
#endif

struct rig_nic;

/**
 * rig_nic_open - open a verbs device for rig
 * @name: device name ("rxe0", "bnxt_re0"), or NULL for the first device
 *        with an active RoCE v2 port
 * @out:  set to the new NIC on success, untouched on failure
 *
 * Returns 0, or -ENODEV when no such device has an active RoCE v2 port, or
 * another -errno from the verbs call rig_errmsg() names.
 */
int rig_nic_open(const char *name, struct rig_nic **out);

/**
 * rig_nic_close - close a NIC and free everything it still holds
 *
 * Listeners still open are closed, queue pairs still alive destroyed and
 * regions still registered deregistered first; every handle of the NIC,
 * deregistered regions' included, is invalid afterwards. Returns 0 or the
 * first -errno met on the way; the NIC is gone either way.
 */
int rig_nic_close(struct rig_nic *nic);

/**
 * rig_nic_events - apply the NIC's pending async events, without blocking
 *
 * QP_FATAL, QP_REQ_ERR and QP_ACCESS_ERR fail their queue pair; DEVICE_FATAL
 * fails every queue pair of the NIC (rig(7) F1, F6). rig_qp_wait and the loop
 * integration call it; an application that only polls calls it from time
 * to time. Returns how many events it took, or -errno.
 */
int rig_nic_events(struct rig_nic *nic);

/**
 * rig_errmsg - this thread's message for its last failed rig call
 *
 * Names the step and the verbs call that failed ("INIT->RTR refused by rxe0:
 * Invalid argument"). The string stays valid until this thread's next
 * failing rig call.
 */
const char *rig_errmsg(void);

#ifdef __cplusplus
}
#endif
#endif
