/* SPDX-License-Identifier: MIT */
/*
 * The FFI twins: the inline functions of include/rig/qp.h compiled once
 * more as exported functions of the same names, for programs that cannot
 * compile C inlines (Python's ctypes, Rust's bindgen, Go's cgo without
 * the headers' code). One source of truth: RIG_INLINE, defined here before
 * the header is read, turns each inline body into an ordinary definition,
 * as liburing's ffi.c does with IOURINGINLINE. They live in librig.so
 * itself, in the version node RIG_FFI_0.1, so an FFI user loads one
 * library (ctypes.CDLL("librig.so.0")) and finds rig_qp_send beside
 * rig_nic_open. The rig__ helpers come out as functions too, but the
 * version script keeps them local. C programs keep the inline versions:
 * their static definitions take precedence in their own units.
 */
#define RIG_INLINE __attribute__((visibility("default")))

/* The definitions are their own declarations. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

#include <rig/rig.h>
