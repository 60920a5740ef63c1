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

# RIG_CHECK_PKG_FOR_TESTS(VARIABLE-PREFIX, PKG-CONFIG-MODULE, DEBIAN-PACKAGE, WHAT)
# ---------------------------------------------------------------------------------
# Finds a library only tests need. When it is missing, configure goes on
# and says which tests (WHAT) will not be built; make check reports them
# as skipped, naming the package. Sets the conditional HAVE_PREFIX.
AC_DEFUN([RIG_CHECK_PKG_FOR_TESTS], [
	PKG_CHECK_MODULES([$1], [$2], [rig_have_$1=yes],
		[rig_have_$1=no
		 AC_MSG_WARN([$2 not found, so $4: not built, and make check reports the skip (apt-get install $3)])])
	AM_CONDITIONAL([HAVE_$1], [test "$rig_have_$1" = yes])
])
