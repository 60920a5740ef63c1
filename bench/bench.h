/* SPDX-License-Identifier: MIT */
/* What both backends of bench/pingpong.h share: see that file. */
#ifndef BENCH_BENCH_H
#define BENCH_BENCH_H

#include <stdint.h>

/* What one side sends the other to connect; the same for both backends. */
struct bench_ep {
	uint32_t qpn;
	uint32_t psn;
	uint8_t gid[16];
	uint8_t mac[6];		/* rig endpoints have it; raw sends zeros */
};

enum { SIDE_SEND = 0, SIDE_RECV = 1 };

#endif
