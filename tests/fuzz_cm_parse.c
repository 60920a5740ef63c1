/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the parsers of untrusted bytes: rig_cm_parse (a
 * peer's rdma_cm private data: "rig1", the endpoint's 30-byte wire form,
 * zero padding), rig_cm_parse_mtu (the connections' own form, "rig2",
 * the wire form, an MTU code 1 to 5, zero padding; or rig_cm_parse's, as
 * code 0), rig_cm_parse_sink (rig 0.4's "rig3": "rig2"'s bytes, then a
 * sink's rkey and address; or either older form, as its form number) and
 * rig_endpoint_unpack (the wire form alone).
 *
 * For every input each parser must return 0 or its one error code, and:
 *   - accept exactly what include/rig/cm.h and endpoint.h say it accepts
 *     (checked against a reference written from those headers);
 *   - on success give a qp and a psn that fit in 24 bits, and pack back to
 *     the input's bytes (rig_cm_pack, rig_endpoint_pack);
 *   - on failure leave the output untouched (it is filled with a canary);
 *   - never read outside the input (libFuzzer hands over a heap copy of
 *     exactly @size bytes, so AddressSanitizer sees any over-read).
 * A broken invariant aborts, which libFuzzer reports as a crash.
 *
 * Built and run by tests/fuzz.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rig/cm.h>
#include <rig/endpoint.h>
#include <rig/nic.h>

/* lib/endpoint.c and lib/errmsg.c are built in (tests/fuzz) */

#define CANARY 0xa5
#define MAX24 0xffffffu

#define CHECK(cond, ...)                                                   \
	do {                                                               \
		if (!(cond)) {                                             \
			fprintf(stderr, "fuzz_cm_parse: %s:%d: %s: ",      \
				__FILE__, __LINE__, #cond);                \
			fprintf(stderr, __VA_ARGS__);                      \
			fprintf(stderr, "\n");                             \
			abort();                                           \
		}                                                          \
	} while (0)

static uint32_t be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

/* The reference: is @p, @len a valid wire form? */
static int ref_endpoint_ok(const uint8_t *p, size_t len)
{
	return len == RIG_ENDPOINT_WIRE && be32(p) <= MAX24 &&
	       be32(p + 4) <= MAX24;
}

/* The reference: is @p, @len valid private data? */
static int ref_cm_ok(const uint8_t *p, size_t len)
{
	size_t i;

	if (len < RIG_CM_PRIVATE || memcmp(p, "rig1", 4))
		return 0;
	for (i = RIG_CM_PRIVATE; i < len; i++)
		if (p[i])
			return 0;
	return ref_endpoint_ok(p + 4, RIG_ENDPOINT_WIRE);
}

/* The reference: is @p, @len the connections' own form? */
static int ref_cm_mtu_ok(const uint8_t *p, size_t len)
{
	size_t i;

	if (len < RIG_CM_PRIVATE_MTU || memcmp(p, "rig2", 4))
		return 0;
	if (p[34] < 1 || p[34] > 5)
		return 0;
	for (i = RIG_CM_PRIVATE_MTU; i < len; i++)
		if (p[i])
			return 0;
	return ref_endpoint_ok(p + 4, RIG_ENDPOINT_WIRE);
}

/* The reference: is @p, @len rig 0.4's form, "rig3"? */
static int ref_cm_sink_ok(const uint8_t *p, size_t len)
{
	size_t i;

	if (len < RIG_CM_PRIVATE_SINK || memcmp(p, "rig3", 4))
		return 0;
	if (p[34] < 1 || p[34] > 5)
		return 0;
	for (i = RIG_CM_PRIVATE_SINK; i < len; i++)
		if (p[i])
			return 0;
	return ref_endpoint_ok(p + 4, RIG_ENDPOINT_WIRE);
}

static void fill_canary(struct rig_endpoint *e)
{
	memset(e, CANARY, sizeof(*e));
}

static int is_canary(const struct rig_endpoint *e)
{
	const uint8_t *p = (const uint8_t *)e;
	size_t i;

	for (i = 0; i < sizeof(*e); i++)
		if (p[i] != CANARY)
			return 0;
	return 1;
}

/* A failed call must leave a message, a string within its 256 bytes. */
static void check_errmsg(void)
{
	const char *m = rig_errmsg();

	CHECK(m != NULL, "rig_errmsg() is NULL");
	CHECK(memchr(m, 0, 256) != NULL, "rig_errmsg() is not terminated");
}

static void fuzz_cm(const uint8_t *data, size_t size)
{
	struct rig_endpoint e;
	uint8_t out[RIG_CM_PRIVATE];
	int ret, want = ref_cm_ok(data, size);

	fill_canary(&e);
	ret = rig_cm_parse(data, size, &e);
	CHECK(ret == 0 || ret == -EPROTO, "rig_cm_parse returned %d", ret);
	CHECK((ret == 0) == want, "rig_cm_parse returned %d on %zu bytes, the reference %s them",
	      ret, size, want ? "accepts" : "rejects");
	if (ret) {
		CHECK(is_canary(&e), "rig_cm_parse failed but wrote its output");
		check_errmsg();
		return;
	}
	CHECK(e.qp <= MAX24, "qp %#x over 24 bits", e.qp);
	CHECK(e.psn <= MAX24, "psn %#x over 24 bits", e.psn);
	memset(out, 0, sizeof(out));
	rig_cm_pack(&e, out);
	CHECK(!memcmp(out, data, RIG_CM_PRIVATE), "rig_cm_pack does not give back the input");
}

static void fuzz_cm_mtu(const uint8_t *data, size_t size)
{
	struct rig_endpoint e;
	uint8_t out[RIG_CM_PRIVATE_MTU], mtu = CANARY;
	int ret, old = ref_cm_ok(data, size), want = old || ref_cm_mtu_ok(data, size);

	fill_canary(&e);
	ret = rig_cm_parse_mtu(data, size, &e, &mtu);
	CHECK(ret == 0 || ret == -EPROTO, "rig_cm_parse_mtu returned %d", ret);
	CHECK((ret == 0) == want, "rig_cm_parse_mtu returned %d on %zu bytes, the reference %s them",
	      ret, size, want ? "accepts" : "rejects");
	if (ret) {
		CHECK(is_canary(&e) && mtu == CANARY, "rig_cm_parse_mtu failed but wrote its output");
		check_errmsg();
		return;
	}
	CHECK(e.qp <= MAX24, "qp %#x over 24 bits", e.qp);
	CHECK(e.psn <= MAX24, "psn %#x over 24 bits", e.psn);
	if (old) {
		CHECK(mtu == 0, "the old form gave MTU code %u", mtu);
		return;
	}
	CHECK(mtu >= 1 && mtu <= 5, "MTU code %u", mtu);
	memset(out, 0, sizeof(out));
	rig_cm_pack_mtu(&e, mtu, out);
	CHECK(!memcmp(out, data, RIG_CM_PRIVATE_MTU), "rig_cm_pack_mtu does not give back the input");
}

static void fuzz_cm_sink(const uint8_t *data, size_t size)
{
	struct rig_endpoint e;
	struct rig_cm_sink sink, canary;
	uint8_t out[RIG_CM_PRIVATE_SINK], mtu = CANARY;
	int ret, want = ref_cm_ok(data, size) ? 1 : ref_cm_mtu_ok(data, size) ? 2 :
			ref_cm_sink_ok(data, size) ? 3 : -EPROTO;

	fill_canary(&e);
	memset(&canary, CANARY, sizeof(canary));
	sink = canary;
	ret = rig_cm_parse_sink(data, size, &e, &mtu, &sink);
	CHECK(ret == want, "rig_cm_parse_sink returned %d on %zu bytes, the reference %d",
	      ret, size, want);
	if (ret < 0) {
		CHECK(is_canary(&e) && mtu == CANARY && !memcmp(&sink, &canary, sizeof(sink)),
		      "rig_cm_parse_sink failed but wrote its output");
		check_errmsg();
		return;
	}
	CHECK(e.qp <= MAX24, "qp %#x over 24 bits", e.qp);
	CHECK(e.psn <= MAX24, "psn %#x over 24 bits", e.psn);
	if (ret < 3) {
		CHECK(sink.rkey == 0 && sink.addr == 0, "form %d gave a sink", ret);
		CHECK((ret == 1) == (mtu == 0), "form %d gave MTU code %u", ret, mtu);
		return;
	}
	CHECK(mtu >= 1 && mtu <= 5, "MTU code %u", mtu);
	memset(out, 0, sizeof(out));
	rig_cm_pack_sink(&e, mtu, &sink, out);
	CHECK(!memcmp(out, data, RIG_CM_PRIVATE_SINK), "rig_cm_pack_sink does not give back the input");
}

static void fuzz_endpoint(const uint8_t *data, size_t size)
{
	struct rig_endpoint e;
	uint8_t out[RIG_ENDPOINT_WIRE];
	int ret, want = ref_endpoint_ok(data, size);

	fill_canary(&e);
	ret = rig_endpoint_unpack(data, size, &e);
	CHECK(ret == 0 || ret == -EINVAL, "rig_endpoint_unpack returned %d", ret);
	CHECK((ret == 0) == want, "rig_endpoint_unpack returned %d on %zu bytes, the reference %s them",
	      ret, size, want ? "accepts" : "rejects");
	if (ret) {
		CHECK(is_canary(&e), "rig_endpoint_unpack failed but wrote its output");
		check_errmsg();
		return;
	}
	CHECK(e.qp <= MAX24, "qp %#x over 24 bits", e.qp);
	CHECK(e.psn <= MAX24, "psn %#x over 24 bits", e.psn);
	memset(out, 0, sizeof(out));
	rig_endpoint_pack(&e, out);
	CHECK(!memcmp(out, data, RIG_ENDPOINT_WIRE), "rig_endpoint_pack does not give back the input");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rig_endpoint e;
	uint8_t mtu = CANARY;

	fuzz_cm(data, size);
	fuzz_cm_mtu(data, size);
	fuzz_cm_sink(data, size);
	fuzz_endpoint(data, size);
	/* The same bytes after a tag: makes every 34-byte input that
	 * rig_cm_parse reads also a wire form for rig_endpoint_unpack. */
	if (size >= 4)
		fuzz_endpoint(data + 4, size - 4);

	/* NULL arguments are refused, not dereferenced. */
	fill_canary(&e);
	CHECK(rig_cm_parse(NULL, size, &e) == -EPROTO && is_canary(&e), "rig_cm_parse(NULL data)");
	CHECK(rig_cm_parse(data, size, NULL) == -EPROTO, "rig_cm_parse(NULL endpoint)");
	CHECK(rig_cm_parse_mtu(NULL, size, &e, &mtu) == -EPROTO && is_canary(&e) &&
	      mtu == CANARY, "rig_cm_parse_mtu(NULL data)");
	CHECK(rig_cm_parse_mtu(data, size, NULL, &mtu) == -EPROTO && mtu == CANARY,
	      "rig_cm_parse_mtu(NULL endpoint)");
	CHECK(rig_cm_parse_mtu(data, size, &e, NULL) == -EPROTO && is_canary(&e),
	      "rig_cm_parse_mtu(NULL MTU)");
	CHECK(rig_cm_parse_sink(data, size, &e, &mtu, NULL) == -EPROTO && is_canary(&e) &&
	      mtu == CANARY, "rig_cm_parse_sink(NULL sink)");
	CHECK(rig_endpoint_unpack(NULL, size, &e) == -EINVAL && is_canary(&e),
	      "rig_endpoint_unpack(NULL buf)");
	CHECK(rig_endpoint_unpack(data, size, NULL) == -EINVAL, "rig_endpoint_unpack(NULL endpoint)");
	return 0;
}
