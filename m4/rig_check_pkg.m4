# SPDX-License-Identifier: MIT
# RIG_CHECK_PKG(VARIABLE-PREFIX, PKG-CONFIG-MODULE, DEBIAN-PACKAGE)
# ------------------------------------------------------------------
# Finds a required library through pkg-config, setting PREFIX_CFLAGS and
# PREFIX_LIBS. When it is missing, configure stops and names the Debian
# package that provides it.
AC_DEFUN([RIG_CHECK_PKG], [
	PKG_CHECK_MODULES([$1], [$2], [],
		[AC_MSG_ERROR([$2 not found: install it with 'apt-get install $3'])])
])
