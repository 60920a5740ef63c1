/* SPDX-License-Identifier: MIT */
#ifndef RIG_ENDPOINT_H
#define RIG_ENDPOINT_H
/*
 * What a peer needs to connect to a queue pair: plain data, sent by any
 * means (TCP, rdma_cm private data, a file), in a fixed 30-byte wire form.
 */
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct rig_endpoint {
	uint32_t qp;		/* queue pair number (24 bits) */
	uint32_t psn;		/* first packet sequence number of its sends (24 bits) */
	uint8_t gid[16];
	uint8_t mac[6];		/* its netdev's MAC: for the record, never read
				 * from a peer's endpoint (rig(7) M2) */
};

/* qp and psn as big-endian u32, then gid, then mac */
#define RIG_ENDPOINT_WIRE 30

/** rig_endpoint_pack - write @e in its wire form */
void rig_endpoint_pack(const struct rig_endpoint *e,
		       uint8_t out[RIG_ENDPOINT_WIRE]);

/**
 * rig_endpoint_unpack - read an endpoint from untrusted bytes
 *
 * Returns 0, or -EINVAL (and leaves *e untouched) when @len is not
 * RIG_ENDPOINT_WIRE or qp or psn do not fit in 24 bits (rig(7) M2).
 */
int rig_endpoint_unpack(const void *buf, size_t len, struct rig_endpoint *e);

#ifdef __cplusplus
}
#endif
#endif
