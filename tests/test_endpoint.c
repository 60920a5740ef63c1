/* SPDX-License-Identifier: MIT */
/*
 * The endpoint's 30-byte wire form (rig(7) M2), and the rdma_cm private
 * data that carries it. Needs no device: lib/endpoint.c is built in.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <rig/rig.h>

#include "internal.h"

static const struct rig_endpoint sample = {
	.qp = 0xabcdef,
	.psn = 0x123456,
	.gid = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1 },
	.mac = { 0x02, 0x11, 0x22, 0x33, 0x44, 0x55 },
};

/* M2: qp and psn big-endian, then gid, then mac: 30 bytes. */
Test(endpoint, M2_pack_layout)
{
	uint8_t w[RIG_ENDPOINT_WIRE + 1];
	const uint8_t head[8] = { 0x00, 0xab, 0xcd, 0xef, 0x00, 0x12, 0x34, 0x56 };

	memset(w, 0xee, sizeof(w));
	rig_endpoint_pack(&sample, w);
	cr_assert_eq(RIG_ENDPOINT_WIRE, 30);
	cr_assert_arr_eq(w, head, 8);
	cr_assert_arr_eq(w + 8, sample.gid, 16);
	cr_assert_arr_eq(w + 24, sample.mac, 6);
	cr_assert_eq(w[30], 0xee, "pack wrote past 30 bytes");
}

Test(endpoint, M2_round_trip)
{
	uint8_t w[RIG_ENDPOINT_WIRE];
	struct rig_endpoint e;

	rig_endpoint_pack(&sample, w);
	cr_assert_eq(rig_endpoint_unpack(w, sizeof(w), &e), 0);
	cr_assert_eq(e.qp, sample.qp);
	cr_assert_eq(e.psn, sample.psn);
	cr_assert_arr_eq(e.gid, sample.gid, 16);
	cr_assert_arr_eq(e.mac, sample.mac, 6);
}

/* M2: any other length is refused, and *e is left untouched. */
Test(endpoint, M2_wrong_length)
{
	uint8_t w[64] = { 0 };
	struct rig_endpoint e, before;
	size_t lens[] = { 0, 1, 29, 31, 64 };
	size_t i;

	memset(&e, 0x5a, sizeof(e));
	before = e;
	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		cr_assert_eq(rig_endpoint_unpack(w, lens[i], &e), -EINVAL,
			     "length %zu", lens[i]);
		cr_assert_arr_eq(&e, &before, sizeof(e));
	}
	cr_assert_str_neq(rig_errmsg(), "no error");
}

/* M2: a qp or psn over 24 bits is refused. */
Test(endpoint, M2_over_24_bits)
{
	uint8_t w[RIG_ENDPOINT_WIRE];
	struct rig_endpoint e = sample, out, before;

	memset(&out, 0x5a, sizeof(out));
	before = out;
	e.qp = 0x1000000;
	rig_endpoint_pack(&e, w);
	cr_assert_eq(rig_endpoint_unpack(w, sizeof(w), &out), -EINVAL);
	e.qp = 0xffffff;
	e.psn = 0x1000000;
	rig_endpoint_pack(&e, w);
	cr_assert_eq(rig_endpoint_unpack(w, sizeof(w), &out), -EINVAL);
	w[0] = 0x80;	/* a top bit set on the wire */
	cr_assert_eq(rig_endpoint_unpack(w, sizeof(w), &out), -EINVAL);
	cr_assert_arr_eq(&out, &before, sizeof(out));
	e.psn = 0xffffff;
	rig_endpoint_pack(&e, w);
	cr_assert_eq(rig_endpoint_unpack(w, sizeof(w), &out), 0);
	cr_assert_eq(out.qp, 0xffffff);
	cr_assert_eq(out.psn, 0xffffff);
}

Test(endpoint, C2_null_arguments)
{
	uint8_t w[RIG_ENDPOINT_WIRE] = { 0 };
	struct rig_endpoint e;

	cr_assert_eq(rig_endpoint_unpack(NULL, sizeof(w), &e), -EINVAL);
	cr_assert_eq(rig_endpoint_unpack(w, sizeof(w), NULL), -EINVAL);
}

/* ---- the private data of a connection by address ------------------------ */

/* rig_dial's and rig_listen's form: "rig2", the wire form, the MTU code
 * of the sender's port (enum ibv_mtu), 35 bytes in all. */
static const uint8_t sample_cm_mtu[RIG_CM_PRIVATE_MTU] = {
	'r', 'i', 'g', '2',
	0x00, 0xab, 0xcd, 0xef, 0x00, 0x12, 0x34, 0x56,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1,
	0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
	IBV_MTU_1024,
};

Test(cm_mtu, pack_layout)
{
	uint8_t w[RIG_CM_PRIVATE_MTU + 1];

	cr_assert_eq(RIG_CM_PRIVATE_MTU, 35);
	memset(w, 0xee, sizeof(w));
	rig_cm_pack_mtu(&sample, IBV_MTU_1024, w);
	cr_assert_arr_eq(w, sample_cm_mtu, sizeof(sample_cm_mtu));
	cr_assert_eq(w[35], 0xee, "pack wrote past 35 bytes");
}

/* @e is sample, field by field (a struct's padding is anybody's). */
static void expect_sample(const struct rig_endpoint *e)
{
	cr_assert_eq(e->qp, sample.qp);
	cr_assert_eq(e->psn, sample.psn);
	cr_assert_arr_eq(e->gid, sample.gid, 16);
	cr_assert_arr_eq(e->mac, sample.mac, 6);
}

/* What the parser gives for @len bytes of @p: 0 with the endpoint and
 * the code, or -EPROTO with both left as they were. */
static int parse(const uint8_t *p, size_t len, struct rig_endpoint *e, uint8_t *mtu)
{
	struct rig_endpoint before;
	int ret;

	memset(e, 0x5a, sizeof(*e));
	before = *e;
	*mtu = 0x77;
	ret = rig_cm_parse_mtu(p, len, e, mtu);
	if (ret) {
		cr_assert_eq(ret, -EPROTO, "%d", ret);
		cr_assert_arr_eq(e, &before, sizeof(*e), "a failed parse wrote the endpoint");
		cr_assert_eq(*mtu, 0x77, "a failed parse wrote the MTU");
		cr_assert_str_neq(rig_errmsg(), "no error");
	}
	return ret;
}

/* The form parses back, with zero padding as the transport adds it (up
 * to 56 bytes in a request, 196 in an answer), for every MTU code. */
Test(cm_mtu, round_trip_padded_every_code)
{
	uint8_t w[196] = { 0 }, mtu;
	const size_t lens[] = { 35, 56, 196 };
	struct rig_endpoint e;
	size_t i;
	int code;

	for (code = IBV_MTU_256; code <= IBV_MTU_4096; code++) {
		for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			rig_cm_pack_mtu(&sample, (uint8_t)code, w);
			cr_assert_eq(parse(w, lens[i], &e, &mtu), 0, "code %d, %zu bytes: %s",
				     code, lens[i], rig_errmsg());
			cr_assert_eq(mtu, code);
			expect_sample(&e);
		}
	}
}

/*
 * Every byte is checked: each of the 35 bytes and a byte of padding set
 * to each of its 256 values is accepted exactly when the form allows it:
 * the tag only as "rig2" (not even "rig1": then the MTU code is padding
 * that is not zero), the top bytes of qp and psn only 0, the MTU code
 * only 1 to 5, padding only 0; the rest of qp and psn, the GID and the
 * MAC take any value.
 */
Test(cm_mtu, each_byte_each_value)
{
	uint8_t w[RIG_CM_PRIVATE_MTU + 1], mtu;
	struct rig_endpoint e;
	size_t i;
	int v, ok, rejected = 0;

	for (i = 0; i < sizeof(w); i++) {
		for (v = 0; v < 256; v++) {
			memcpy(w, sample_cm_mtu, RIG_CM_PRIVATE_MTU);
			w[RIG_CM_PRIVATE_MTU] = 0;
			w[i] = (uint8_t)v;
			if (i < 4)
				ok = v == "rig2"[i];
			else if (i == 4 || i == 8)
				ok = v == 0;
			else if (i == RIG_CM_PRIVATE_MTU - 1)
				ok = v >= IBV_MTU_256 && v <= IBV_MTU_4096;
			else if (i == RIG_CM_PRIVATE_MTU)
				ok = v == 0;
			else
				ok = 1;
			cr_assert_eq(parse(w, sizeof(w), &e, &mtu), ok ? 0 : -EPROTO,
				     "byte %zu = %#x", i, v);
			rejected += !ok;
		}
	}
	/* 4 x 255 tag, 2 x 255 qp and psn, 256 - 5 MTU, 255 padding */
	cr_assert_eq(rejected, 4 * 255 + 2 * 255 + 251 + 255);
}

/* Cut short anywhere, it is refused; so are NULL arguments. */
Test(cm_mtu, short_or_null_is_EPROTO)
{
	struct rig_endpoint e;
	uint8_t mtu;
	size_t len;

	for (len = 0; len < RIG_CM_PRIVATE_MTU; len++)
		cr_assert_eq(parse(sample_cm_mtu, len, &e, &mtu), -EPROTO, "%zu bytes", len);
	cr_assert_eq(rig_cm_parse_mtu(NULL, RIG_CM_PRIVATE_MTU, &e, &mtu), -EPROTO);
	cr_assert_eq(rig_cm_parse_mtu(sample_cm_mtu, RIG_CM_PRIVATE_MTU, NULL, &mtu), -EPROTO);
	cr_assert_eq(rig_cm_parse_mtu(sample_cm_mtu, RIG_CM_PRIVATE_MTU, &e, NULL), -EPROTO);
}

/* rig_cm_pack's form ("rig1", 34 bytes) from a peer that gives no MTU is
 * read as before, with code 0; its padding is checked as before, the byte
 * where the new form has its code included. */
Test(cm_mtu, the_old_form_gives_code_0)
{
	uint8_t w[56] = { 0 }, mtu;
	struct rig_endpoint e;

	rig_cm_pack(&sample, w);
	cr_assert_eq(parse(w, RIG_CM_PRIVATE, &e, &mtu), 0, "%s", rig_errmsg());
	cr_assert_eq(mtu, 0);
	expect_sample(&e);
	cr_assert_eq(parse(w, sizeof(w), &e, &mtu), 0, "%s", rig_errmsg());
	cr_assert_eq(mtu, 0);
	w[RIG_CM_PRIVATE] = IBV_MTU_1024;
	cr_assert_eq(parse(w, sizeof(w), &e, &mtu), -EPROTO);
	w[RIG_CM_PRIVATE] = 0;
	w[4] = 1;	/* a qp over 24 bits */
	cr_assert_eq(parse(w, sizeof(w), &e, &mtu), -EPROTO);
}

/* The public calls keep their form: rig_cm_pack writes 34 bytes, and
 * rig_cm_parse refuses the new form. */
Test(cm_mtu, rig_cm_pack_and_parse_unchanged)
{
	uint8_t w[RIG_CM_PRIVATE + 1];
	struct rig_endpoint e, before;

	cr_assert_eq(RIG_CM_PRIVATE, 34);
	memset(w, 0xee, sizeof(w));
	rig_cm_pack(&sample, w);
	cr_assert_arr_eq(w, "rig1", 4);
	cr_assert_arr_eq(w + 4, sample_cm_mtu + 4, RIG_ENDPOINT_WIRE);
	cr_assert_eq(w[RIG_CM_PRIVATE], 0xee, "rig_cm_pack wrote past 34 bytes");
	memset(&e, 0x5a, sizeof(e));
	before = e;
	cr_assert_eq(rig_cm_parse(sample_cm_mtu, sizeof(sample_cm_mtu), &e), -EPROTO);
	cr_assert_arr_eq(&e, &before, sizeof(e));
}

/* ---- "rig3": "rig2" and the sink of the liveness probes ------------------ */

/* rig 0.4's form: "rig3", the wire form, the MTU code, then the sink's
 * rkey (be32) and address (be64), 47 bytes in all. */
static const struct rig_cm_sink sample_sink = { 0x8badf00d, 0x00007f0123456780ull };
static const uint8_t sample_cm_sink[RIG_CM_PRIVATE_SINK] = {
	'r', 'i', 'g', '3',
	0x00, 0xab, 0xcd, 0xef, 0x00, 0x12, 0x34, 0x56,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 0, 1,
	0x02, 0x11, 0x22, 0x33, 0x44, 0x55,
	IBV_MTU_1024,
	0x8b, 0xad, 0xf0, 0x0d,
	0x00, 0x00, 0x7f, 0x01, 0x23, 0x45, 0x67, 0x80,
};

/* M2: the layout, byte by byte; 47 bytes fit a request's 56. */
Test(cm_sink, M2_pack_layout)
{
	uint8_t w[RIG_CM_PRIVATE_SINK + 1];

	cr_assert_eq(RIG_CM_PRIVATE_SINK, 47);
	memset(w, 0xee, sizeof(w));
	rig_cm_pack_sink(&sample, IBV_MTU_1024, &sample_sink, w);
	cr_assert_arr_eq(w, sample_cm_sink, sizeof(sample_cm_sink));
	cr_assert_eq(w[RIG_CM_PRIVATE_SINK], 0xee, "pack wrote past 47 bytes");
}

/* What rig_cm_parse_sink gives for @len bytes of @p: the form with the
 * outputs, or -EPROTO with all three left as they were. */
static int parse_sink(const uint8_t *p, size_t len, struct rig_endpoint *e, uint8_t *mtu,
		      struct rig_cm_sink *sink)
{
	struct rig_endpoint before;
	int ret;

	memset(e, 0x5a, sizeof(*e));
	before = *e;
	*mtu = 0x77;
	*sink = (struct rig_cm_sink){ 0x77777777, 0x7777777777777777ull };
	ret = rig_cm_parse_sink(p, len, e, mtu, sink);
	if (ret < 0) {
		cr_assert_eq(ret, -EPROTO, "%d", ret);
		cr_assert_arr_eq(e, &before, sizeof(*e), "a failed parse wrote the endpoint");
		cr_assert_eq(*mtu, 0x77, "a failed parse wrote the MTU");
		cr_assert(sink->rkey == 0x77777777 && sink->addr == 0x7777777777777777ull,
			  "a failed parse wrote the sink");
		cr_assert_str_neq(rig_errmsg(), "no error");
	}
	return ret;
}

/* M2, M3: each form parses back as itself, padded as the transport pads
 * it (56 bytes in a request, 196 in an answer): "rig3" with its code and
 * sink, "rig2" with its code and no sink, "rig1" with neither. */
Test(cm_sink, M2_M3_round_trip_every_form_padded)
{
	const size_t lens[] = { 0, 56, 196 };
	uint8_t w[196], mtu;
	struct rig_cm_sink sink;
	struct rig_endpoint e;
	size_t i;
	int code;

	for (i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		for (code = IBV_MTU_256; code <= IBV_MTU_4096; code++) {
			memset(w, 0, sizeof(w));
			rig_cm_pack_sink(&sample, (uint8_t)code, &sample_sink, w);
			cr_assert_eq(parse_sink(w, lens[i] ? lens[i] : RIG_CM_PRIVATE_SINK, &e,
						&mtu, &sink), 3, "code %d: %s", code, rig_errmsg());
			cr_assert_eq(mtu, code);
			cr_assert_eq(sink.rkey, sample_sink.rkey);
			cr_assert_eq(sink.addr, sample_sink.addr);
			expect_sample(&e);
		}
		memset(w, 0, sizeof(w));
		rig_cm_pack_mtu(&sample, IBV_MTU_4096, w);
		cr_assert_eq(parse_sink(w, lens[i] ? lens[i] : RIG_CM_PRIVATE_MTU, &e, &mtu,
					&sink), 2, "%s", rig_errmsg());
		cr_assert(mtu == IBV_MTU_4096 && sink.rkey == 0 && sink.addr == 0);
		expect_sample(&e);
		memset(w, 0, sizeof(w));
		rig_cm_pack(&sample, w);
		cr_assert_eq(parse_sink(w, lens[i] ? lens[i] : RIG_CM_PRIVATE, &e, &mtu, &sink),
			     1, "%s", rig_errmsg());
		cr_assert(mtu == 0 && sink.rkey == 0 && sink.addr == 0);
		expect_sample(&e);
	}
}

/*
 * M2, M3: every byte is checked: each of the 47 bytes and a byte of
 * padding set to each of its 256 values is accepted exactly when the
 * form allows it: the tag "rig3" (or "rig2" with every byte after the
 * code zero: not this sample's), the top bytes of qp and psn only 0, the
 * MTU code only 1 to 5, padding only 0; the rest of qp and psn, the GID,
 * the MAC, the rkey and the address take any value.
 */
Test(cm_sink, M2_M3_each_byte_each_value)
{
	uint8_t w[RIG_CM_PRIVATE_SINK + 1], mtu;
	struct rig_cm_sink sink;
	struct rig_endpoint e;
	size_t i;
	int v, ok, rejected = 0;

	for (i = 0; i < sizeof(w); i++) {
		for (v = 0; v < 256; v++) {
			memcpy(w, sample_cm_sink, RIG_CM_PRIVATE_SINK);
			w[RIG_CM_PRIVATE_SINK] = 0;
			w[i] = (uint8_t)v;
			if (i < 4)
				ok = v == "rig3"[i];
			else if (i == 4 || i == 8)
				ok = v == 0;
			else if (i == RIG_CM_PRIVATE_MTU - 1)
				ok = v >= IBV_MTU_256 && v <= IBV_MTU_4096;
			else if (i == RIG_CM_PRIVATE_SINK)
				ok = v == 0;
			else
				ok = 1;
			cr_assert_eq(parse_sink(w, sizeof(w), &e, &mtu, &sink), ok ? 3 : -EPROTO,
				     "byte %zu = %#x", i, v);
			rejected += !ok;
		}
	}
	/* 4 x 255 tag, 2 x 255 qp and psn, 256 - 5 MTU, 255 padding */
	cr_assert_eq(rejected, 4 * 255 + 2 * 255 + 251 + 255);
}

/* M2, M3: cut short anywhere, it is refused (no shorter form has its
 * tag); so are NULL arguments; and "rig2" with a sink after it is "rig2"
 * with padding that is not zero. */
Test(cm_sink, M2_M3_short_null_or_rig2_tagged_is_EPROTO)
{
	uint8_t w[56] = { 0 }, mtu;
	struct rig_cm_sink sink;
	struct rig_endpoint e;
	size_t len;

	for (len = 0; len < RIG_CM_PRIVATE_SINK; len++)
		cr_assert_eq(parse_sink(sample_cm_sink, len, &e, &mtu, &sink), -EPROTO,
			     "%zu bytes", len);
	cr_assert_eq(rig_cm_parse_sink(NULL, 56, &e, &mtu, &sink), -EPROTO);
	cr_assert_eq(rig_cm_parse_sink(sample_cm_sink, 47, NULL, &mtu, &sink), -EPROTO);
	cr_assert_eq(rig_cm_parse_sink(sample_cm_sink, 47, &e, NULL, &sink), -EPROTO);
	cr_assert_eq(rig_cm_parse_sink(sample_cm_sink, 47, &e, &mtu, NULL), -EPROTO);
	memcpy(w, sample_cm_sink, RIG_CM_PRIVATE_SINK);
	memcpy(w, "rig2", 4);
	cr_assert_eq(parse_sink(w, sizeof(w), &e, &mtu, &sink), -EPROTO);
	memcpy(w, "rig4", 4);
	cr_assert_eq(parse_sink(w, sizeof(w), &e, &mtu, &sink), -EPROTO);
}

/* M3: the older parsers keep their forms: rig_cm_parse_mtu and
 * rig_cm_parse refuse "rig3", as rig 0.3's listener does. */
Test(cm_sink, M3_rig_cm_parse_mtu_refuses_rig3)
{
	struct rig_endpoint e;
	uint8_t mtu;

	cr_assert_eq(parse(sample_cm_sink, sizeof(sample_cm_sink), &e, &mtu), -EPROTO);
	cr_assert_eq(rig_cm_parse(sample_cm_sink, sizeof(sample_cm_sink), &e), -EPROTO);
}
