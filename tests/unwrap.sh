# SPDX-License-Identifier: MIT
# Sourced by the scripts that run the tree's programs in the test VM.
#
#   unwrap VAR...
#
# Each VAR names the path of a program of a make build tree (examples/,
# utils/). libtool leaves a wrapper script there, which sets the library
# path and runs the program in .libs/: bash takes about a second to run
# one in the emulated guest, and a test starts dozens. So the path becomes
# .libs/'s program, and LD_LIBRARY_PATH leads with the tree's librig, as
# the wrapper would have it. A path that is no script (a program linked
# -no-install, or an installed one) stays as it is: a .libs/ beside it is
# another build's.
unwrap() {
	local var path lib line
	for var; do
		path=${!var}
		lib=${path%/*}/../lib/.libs
		line=
		IFS= read -r line <"$path" 2>/dev/null || true
		[[ $line == '#!'* && -x ${path%/*}/.libs/${path##*/} ]] || continue
		lib=$(cd "$lib" 2>/dev/null && pwd) || continue
		printf -v "$var" %s "${path%/*}/.libs/${path##*/}"
		[[ :${LD_LIBRARY_PATH:-}: == *:$lib:* ]] ||
			export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	done
}
