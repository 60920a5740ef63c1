#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The FFI twins (lib/ffi.c, RIG_FFI_0.2) from Python's ctypes, in the test VM.

    tests/ffi-test.py BUILD_DIR

Loads BUILD_DIR/lib/.libs/librig.so.0 and, through nothing but its
exported symbols, connects two queue pairs of $RIG_TEST_DEV to each other,
posts a receive, a send and a read with rig_qp_receive, rig_qp_send and
rig_qp_read, and takes their completions with rig_qp_poll: the functions a
C program gets inline. Checks the bytes moved, the room, a refused post's
-EINVAL and rig_qp_stats' counts. Exits 0 on success, 1 with the failed
check, 2 when misused.
"""
import ctypes
import errno
import os
import sys
import time

if len(sys.argv) != 2:
    print("usage: ffi-test.py BUILD_DIR", file=sys.stderr)
    sys.exit(2)
if os.environ.get("RIG_GUEST") != "1":
    print("ffi-test.py: run me through tests/rxe-vm", file=sys.stderr)
    sys.exit(2)

lib = ctypes.CDLL(os.path.join(sys.argv[1], "lib/.libs/librig.so.0"))
P = ctypes.c_void_p
RIG_SEND, RIG_RECEIVE = 0, 1


class Endpoint(ctypes.Structure):
    _fields_ = [("qp", ctypes.c_uint32), ("psn", ctypes.c_uint32),
                ("gid", ctypes.c_uint8 * 16), ("mac", ctypes.c_uint8 * 6)]


class Completion(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_uint32), ("error", ctypes.c_int),
                ("why", ctypes.c_char_p)]


class Stats(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("posted", ctypes.c_uint32),
                ("taken", ctypes.c_uint32), ("due", ctypes.c_uint32),
                ("full", ctypes.c_uint64), ("slept", ctypes.c_uint64),
                ("completed", ctypes.c_uint64), ("async_events", ctypes.c_uint64)]


def fn(name, res, *args):
    f = getattr(lib, name)
    f.restype, f.argtypes = res, list(args)
    return f


I, SZ = ctypes.c_int, ctypes.c_size_t
nic_open = fn("rig_nic_open", I, ctypes.c_char_p, ctypes.POINTER(P))
nic_close = fn("rig_nic_close", I, P)
errmsg = fn("rig_errmsg", ctypes.c_char_p)
region_register = fn("rig_region_register", I, P, P, SZ, ctypes.POINTER(P))
region_deregister = fn("rig_region_deregister", I, P)
qp_make = fn("rig_qp_make", I, P, ctypes.POINTER(P))
qp_endpoint = fn("rig_qp_endpoint", None, P, ctypes.POINTER(Endpoint))
qp_connect = fn("rig_qp_connect", I, P, ctypes.POINTER(Endpoint))
qp_destroy = fn("rig_qp_destroy", I, P)
qp_stats = fn("rig_qp_stats", I, P, I, ctypes.POINTER(Stats))
# The twins of the inline hot path.
qp_room = fn("rig_qp_room", I, P, I)
qp_send = fn("rig_qp_send", I, P, P, SZ, SZ)
qp_read = fn("rig_qp_read", I, P, P, SZ, P, SZ, SZ)
qp_receive = fn("rig_qp_receive", I, P, P, SZ, SZ)
qp_poll = fn("rig_qp_poll", I, P, I, ctypes.POINTER(Completion))


def check(cond, what):
    if not cond:
        print("FAIL: %s (%s)" % (what, errmsg().decode()))
        sys.exit(1)


def take(qp, side):
    """Polls until a completion comes; 10 s is a bound, not a verdict."""
    c = Completion()
    end = time.monotonic() + 10
    while time.monotonic() < end:
        ret = qp_poll(qp, side, ctypes.byref(c))
        check(ret in (0, 1), "rig_qp_poll gave %d" % ret)
        if ret == 1:
            return c
    check(False, "no completion in 10 s")


dev = os.environ["RIG_TEST_DEV"].encode()
nic, region, a, b = P(), P(), P(), P()
check(nic_open(dev, ctypes.byref(nic)) == 0, "rig_nic_open")
size = 16384
buf = ctypes.create_string_buffer(size)
check(region_register(nic, ctypes.addressof(buf), size, ctypes.byref(region)) == 0,
      "rig_region_register")
check(qp_make(nic, ctypes.byref(a)) == 0 and qp_make(nic, ctypes.byref(b)) == 0, "rig_qp_make")
ea, eb = Endpoint(), Endpoint()
qp_endpoint(a, ctypes.byref(ea))
qp_endpoint(b, ctypes.byref(eb))
check(qp_connect(a, ctypes.byref(eb)) == 0 and qp_connect(b, ctypes.byref(ea)) == 0,
      "rig_qp_connect")

msg = bytes((i * 7 + 3) & 0xff for i in range(100))
ctypes.memmove(buf, msg, len(msg))
check(qp_room(b, RIG_RECEIVE) == 4095, "room before")
check(qp_receive(b, region, 4096, 128) == 0, "rig_qp_receive")
check(qp_room(b, RIG_RECEIVE) == 4094, "room after a receive")
check(qp_send(a, region, 0, 100) == 0, "rig_qp_send")
c = take(b, RIG_RECEIVE)
check(c.error == 0 and c.bytes == 100, "receive: error %d, %d bytes" % (c.error, c.bytes))
check(buf.raw[4096:4196] == msg, "the bytes received")
c = take(a, RIG_SEND)
check(c.error == 0 and c.bytes == 100, "send: error %d, %d bytes" % (c.error, c.bytes))

# a and b are queue pairs of one NIC handle: a may read through b.
check(qp_read(a, region, 0, region, 8192, 100) == 0, "rig_qp_read")
c = take(a, RIG_SEND)
check(c.error == 0 and c.bytes == 100, "read: error %d, %d bytes" % (c.error, c.bytes))
check(buf.raw[8192:8292] == msg, "the bytes read")

# A bad post through a twin: refused, as inline.
check(qp_send(a, region, size - 10, 64) == -errno.EINVAL, "a send past the region")
check(qp_room(a, 2) == -errno.EINVAL, "room of side 2")
check(qp_poll(a, RIG_SEND, ctypes.byref(Completion())) == 0, "nothing due")

s = Stats(size=ctypes.sizeof(Stats))
check(qp_stats(a, RIG_SEND, ctypes.byref(s)) == 0, "rig_qp_stats")
check((s.posted, s.taken, s.due, s.full, s.completed) == (2, 2, 0, 0, 0),
      "send stats %r" % ((s.posted, s.taken, s.due, s.full, s.completed),))

check(qp_destroy(a) == 0 and qp_destroy(b) == 0, "rig_qp_destroy")
check(region_deregister(region) == 0, "rig_region_deregister")
check(nic_close(nic) == 0, "rig_nic_close")
print("PASS ffi-test.py: send, receive and read through ctypes")
