#!/bin/sh
# SPDX-License-Identifier: MIT
# In make check's list in place of tests/test_sustained when configure
# found no libuv: it is skipped, and says why.
echo "SKIP: libuv was not found at configure: tests/test_sustained (its libuv loop) is not built (apt-get install libuv1-dev, then configure again)"
exit 77
