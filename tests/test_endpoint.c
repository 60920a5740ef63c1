/* SPDX-License-Identifier: MIT */
/* The endpoint's 30-byte wire form (rig(7) M2). Needs no device. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include <rig/rig.h>

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
