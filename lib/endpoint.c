/* SPDX-License-Identifier: MIT */
/*
 * The endpoint's 30-byte wire form (rig(7) M2), and the rdma_cm private data
 * that carries it (a tag, then the wire form, then in the connections' own
 * forms the sender's MTU, and in "rig3" its sink for liveness probes).
 * Their input is untrusted; tests/fuzz_cm_parse.c fuzzes the parsers.
 */
#include <string.h>

#include "internal.h"

#define RIG_24BITS 0xffffffu

static const uint8_t cm_tag[4] = { 'r', 'i', 'g', '1' };
static const uint8_t cm_tag_mtu[4] = { 'r', 'i', 'g', '2' };
static const uint8_t cm_tag_sink[4] = { 'r', 'i', 'g', '3' };

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

static void put_be64(uint8_t *p, uint64_t v)
{
	put_be32(p, (uint32_t)(v >> 32));
	put_be32(p + 4, (uint32_t)v);
}

static uint64_t get_be64(const uint8_t *p)
{
	return (uint64_t)get_be32(p) << 32 | get_be32(p + 4);
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

RIG_EXPORT void rig_cm_pack(const struct rig_endpoint *e, uint8_t out[RIG_CM_PRIVATE])
{
	memcpy(out, cm_tag, sizeof(cm_tag));
	rig_endpoint_pack(e, out + sizeof(cm_tag));
}

RIG_EXPORT int rig_cm_parse(const void *data, size_t len, struct rig_endpoint *e)
{
	const uint8_t *p = data;
	struct rig_endpoint tmp;
	size_t i;

	if (!data || !e || len < RIG_CM_PRIVATE || memcmp(p, cm_tag, sizeof(cm_tag)))
		return rig__fail(EPROTO, "the peer's private data is not a rig endpoint");
	for (i = RIG_CM_PRIVATE; i < len; i++)
		if (p[i])
			return rig__fail(EPROTO, "the peer's private data has %zu bytes more than a rig endpoint",
					 len - RIG_CM_PRIVATE);
	if (rig_endpoint_unpack(p + sizeof(cm_tag), RIG_ENDPOINT_WIRE, &tmp))
		return rig__fail(EPROTO, "the peer's endpoint is malformed: %s", rig_errmsg());
	*e = tmp;
	return 0;
}

RIG_EXPORT void rig_cm_pack_mtu(const struct rig_endpoint *e, uint8_t mtu,
				 uint8_t out[RIG_CM_PRIVATE_MTU])
{
	memcpy(out, cm_tag_mtu, sizeof(cm_tag_mtu));
	rig_endpoint_pack(e, out + sizeof(cm_tag_mtu));
	out[RIG_CM_PRIVATE_MTU - 1] = mtu;
}

RIG_EXPORT int rig_cm_parse_mtu(const void *data, size_t len, struct rig_endpoint *e,
				uint8_t *mtu)
{
	const uint8_t *p = data;
	struct rig_endpoint tmp;
	uint8_t code;
	size_t i;

	if (!mtu)
		return rig__fail(EPROTO, "the peer's private data: NULL argument");
	if (data && len >= sizeof(cm_tag) && !memcmp(p, cm_tag, sizeof(cm_tag))) {
		if (rig_cm_parse(data, len, e))
			return -EPROTO;
		*mtu = 0;
		return 0;
	}
	if (!data || !e || len < RIG_CM_PRIVATE_MTU ||
	    memcmp(p, cm_tag_mtu, sizeof(cm_tag_mtu)))
		return rig__fail(EPROTO, "the peer's private data is not a rig endpoint");
	code = p[RIG_CM_PRIVATE_MTU - 1];
	if (code < IBV_MTU_256 || code > IBV_MTU_4096)
		return rig__fail(EPROTO, "the peer's private data gives MTU code %u, not 1 to 5",
				 code);
	for (i = RIG_CM_PRIVATE_MTU; i < len; i++)
		if (p[i])
			return rig__fail(EPROTO, "the peer's private data has %zu bytes more than a rig endpoint",
					 len - RIG_CM_PRIVATE_MTU);
	if (rig_endpoint_unpack(p + sizeof(cm_tag_mtu), RIG_ENDPOINT_WIRE, &tmp))
		return rig__fail(EPROTO, "the peer's endpoint is malformed: %s", rig_errmsg());
	*e = tmp;
	*mtu = code;
	return 0;
}

/* "rig3": "rig2"'s 35 bytes, then the sink's rkey and address. */
#define SINK_RKEY RIG_CM_PRIVATE_MTU
#define SINK_ADDR (RIG_CM_PRIVATE_MTU + 4)
_Static_assert(SINK_ADDR + 8 == RIG_CM_PRIVATE_SINK, "rig3 is rig2, rkey, address");

RIG_EXPORT void rig_cm_pack_sink(const struct rig_endpoint *e, uint8_t mtu,
				 const struct rig_cm_sink *sink,
				 uint8_t out[RIG_CM_PRIVATE_SINK])
{
	rig_cm_pack_mtu(e, mtu, out);
	memcpy(out, cm_tag_sink, sizeof(cm_tag_sink));
	put_be32(out + SINK_RKEY, sink->rkey);
	put_be64(out + SINK_ADDR, sink->addr);
}

RIG_EXPORT int rig_cm_parse_sink(const void *data, size_t len, struct rig_endpoint *e,
				 uint8_t *mtu, struct rig_cm_sink *sink)
{
	const uint8_t *p = data;
	uint8_t form[RIG_CM_PRIVATE_MTU];
	struct rig_endpoint tmp;
	uint8_t code;
	size_t i;

	if (!sink)
		return rig__fail(EPROTO, "the peer's private data: NULL argument");
	if (!data || len < sizeof(cm_tag_sink) || memcmp(p, cm_tag_sink, sizeof(cm_tag_sink))) {
		/* "rig1" or "rig2", or nothing rig reads */
		if (rig_cm_parse_mtu(data, len, e, mtu))
			return -EPROTO;
		*sink = (struct rig_cm_sink){ 0, 0 };
		return *mtu ? 2 : 1;
	}
	if (!e || !mtu || len < RIG_CM_PRIVATE_SINK)
		return rig__fail(EPROTO, "the peer's private data is not a rig endpoint");
	for (i = RIG_CM_PRIVATE_SINK; i < len; i++)
		if (p[i])
			return rig__fail(EPROTO, "the peer's private data has %zu bytes more than a rig endpoint",
					 len - RIG_CM_PRIVATE_SINK);
	/* The first 35 bytes are "rig2"'s but for the tag: its checks. */
	memcpy(form, p, sizeof(form));
	memcpy(form, cm_tag_mtu, sizeof(cm_tag_mtu));
	if (rig_cm_parse_mtu(form, sizeof(form), &tmp, &code))
		return -EPROTO;
	*e = tmp;
	*mtu = code;
	sink->rkey = get_be32(p + SINK_RKEY);
	sink->addr = get_be64(p + SINK_ADDR);
	return 3;
}
