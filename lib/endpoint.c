/* SPDX-License-Identifier: MIT */
/* The endpoint's 30-byte wire form (SPEC M2). Its input is untrusted. */
#include <string.h>

#include "internal.h"

#define RIG_24BITS 0xffffffu

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

RIG_EXPORT void rig_endpoint_pack(const struct rig_endpoint *e,
				  uint8_t out[RIG_ENDPOINT_WIRE])
{
	put_be32(out, e->qp);
	put_be32(out + 4, e->psn);
	memcpy(out + 8, e->gid, 16);
	memcpy(out + 24, e->mac, 6);
}

RIG_EXPORT int rig_endpoint_unpack(const void *buf, size_t len,
				   struct rig_endpoint *e)
{
	const uint8_t *p = buf;
	uint32_t qp, psn;

	if (!buf || !e)
		return rig__fail(EINVAL, "endpoint: NULL argument");
	if (len != RIG_ENDPOINT_WIRE)
		return rig__fail(EINVAL, "endpoint: %zu bytes, the wire form has %d",
				 len, RIG_ENDPOINT_WIRE);
	qp = get_be32(p);
	psn = get_be32(p + 4);
	if (qp > RIG_24BITS || psn > RIG_24BITS)
		return rig__fail(EINVAL, "endpoint: qp %#x or psn %#x over 24 bits",
				 qp, psn);
	e->qp = qp;
	e->psn = psn;
	memcpy(e->gid, p + 8, 16);
	memcpy(e->mac, p + 24, 6);
	return 0;
}
