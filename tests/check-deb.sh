#!/bin/bash
# SPDX-License-Identifier: MIT
# tests/check-deb.sh: the Debian packages. Builds them from the tracked
# files in a throw-away directory (dpkg-buildpackage -us -uc -b, the host
# suite left to make check), checks what each holds (dpkg -c), unpacks all
# three into a throw-away root (dpkg -x), builds a C and a C++ program
# there with pkg-config and runs them and rig-info against the unpacked
# library, and runs lintian, which must report no error. Needs no device
# (rig-info must then exit 1 in one line; with a device, 0). About 2
# minutes, most of it the build.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/lib.sh
ensure_packages "${BUILD_PACKAGES[@]}" "${DEB_PACKAGES[@]}"

t0=$SECONDS
tmp=$(mktemp -d /tmp/check-deb.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$tmp/src"
if ! (cd "$tmp/src" && DEB_BUILD_OPTIONS=nocheck dpkg-buildpackage -us -uc -b) \
	>"$tmp/build.log" 2>&1; then
	tail -40 "$tmp/build.log"
	echo "FAIL: dpkg-buildpackage"
	exit 1
fi
echo "ok: dpkg-buildpackage -us -uc -b ($((SECONDS - t0)) s)"

failed=0
fail() { echo "FAIL: $*"; failed=1; }
deb() { ls "$tmp"/"$1"_*.deb; }
# has PACKAGE PATH-REGEX...: each path is in the package
has() {
	local pkg=$1 list; shift
	list=$(dpkg -c "$(deb "$pkg")" | awk '{ print $6 }')
	for re in "$@"; do
		grep -Eq "^\./$re\$" <<<"$list" || fail "$pkg has no $re"
	done
}
for p in librig0 librig-dev rig-utils; do
	[[ -f $(deb $p) ]] || fail "no $p package"
done
((failed == 0)) || exit 1
lib='usr/lib/[^/]+-linux-gnu[^/]*'
has librig0 "$lib/librig\.so\.0" "$lib/librig\.so\.0\.[0-9.]+"
has librig-dev usr/include/rig/rig.h usr/include/rig/qp.h "$lib/librig\.so" \
	"$lib/pkgconfig/rig\.pc" usr/share/man/man7/rig\.7\.gz usr/share/man/man7/rig-wire\.7\.gz \
	usr/share/man/man3/rig_qp_poll\.3\.gz usr/share/man/man3/rig_nic_query\.3\.gz \
	usr/share/man/man3/rig_qp_stats\.3\.gz usr/share/man/man3/rig_set_log\.3\.gz
has rig-utils usr/bin/rig-info usr/bin/rig-pingpong usr/share/man/man1/rig-info\.1\.gz \
	usr/share/man/man1/rig-pingpong\.1\.gz
# The library package holds the library alone; the tools no header.
dpkg -c "$(deb librig0)" | awk '{ print $6 }' | grep -E '\.h$|/man|/bin/' &&
	fail "librig0 holds more than the library"
[[ $(dpkg -c "$(deb librig0)" | grep -c 'librig\.so$') == 0 ]] || fail "librig0 holds the .so link"

# Installed into a throw-away root: a C and a C++ program built against it
# with pkg-config, and rig-info, run on its library.
root=$tmp/root
for p in librig0 librig-dev rig-utils; do dpkg -x "$(deb $p)" "$root"; done
pc=$(dirname "$(find "$root" -name rig.pc)")
libdir=$(dirname "$(find "$root" -name 'librig.so.0')")
# The USDT probes of rig(7) PROBES, all of them, survive dh_strip.
mkdir -p "$tmp/probes/lib/.libs"
ln -s "$libdir/librig.so.0" "$tmp/probes/lib/.libs/librig.so"
top=$PWD
if (cd "$tmp/probes" && top_srcdir=$top "$top/tests/check-probes.sh") >"$tmp/probes.log" 2>&1; then
	echo "ok: librig0's library has every probe of rig(7) PROBES"
else
	cat "$tmp/probes.log"
	fail "librig0's library and rig(7) PROBES"
fi
cat >"$tmp/hello.c" <<'C'
#include <rig/rig.h>
#include <stdio.h>
int main(void)
{
	struct rig_nic_info info = { .size = sizeof(info) };
	struct rig_nic *nic;

	if (rig_nic_open(NULL, &nic)) {
		printf("no NIC: %s\n", rig_errmsg());
		return 0;
	}
	rig_nic_query(nic, &info);
	printf("%s\n", info.device);
	return rig_nic_close(nic);
}
C
cp "$tmp/hello.c" "$tmp/hello.cc"
# rig.pc names its paths from ${prefix}: point that at the unpacked /usr.
flags=$(PKG_CONFIG_PATH=$pc pkg-config --define-variable=prefix="$root/usr" --cflags --libs rig)
[[ $flags == *"-I$root/usr/include"* && $flags == *"-L$libdir"* ]] ||
	fail "pkg-config gives '$flags', not the unpacked paths"
# shellcheck disable=SC2086
if cc -Wall -Werror -o "$tmp/hello" "$tmp/hello.c" $flags &&
	c++ -Wall -Werror -o "$tmp/hello++" "$tmp/hello.cc" $flags &&
	LD_LIBRARY_PATH=$libdir "$tmp/hello" >/dev/null &&
	LD_LIBRARY_PATH=$libdir "$tmp/hello++" >/dev/null; then
	echo "ok: a C and a C++ program built with pkg-config against the packages"
else
	fail "a program against the packages"
fi
if [[ -z $(ls /sys/class/infiniband 2>/dev/null) ]]; then
	out=$(LD_LIBRARY_PATH=$libdir "$root/usr/bin/rig-info" 2>&1) && rc=0 || rc=$?
	[[ $rc == 1 && $out == "rig-info: no verbs device on this machine" ]] ||
		fail "rig-info without a device: exit $rc, '$out'"
fi

# lintian: no error (warnings and notes are listed, not fatal).
# Installed for real, as a user would: man finds the pages, rig-info and
# pkg-config work from the system's paths; then removed again. Skipped
# (and said) where rig is installed already, not to clobber it.
if dpkg-query -W -f='${Status}' librig0 2>/dev/null | grep -q 'ok installed'; then
	echo "note: librig0 is installed on this machine: the dpkg -i check is left out"
elif [[ $(id -u) == 0 ]]; then
	ensure_packages man-db
	if dpkg -i "$(deb librig0)" "$(deb librig-dev)" "$(deb rig-utils)" >"$tmp/install.log" 2>&1; then
		man -w rig_qp_poll >/dev/null || fail "man rig_qp_poll: no page after dpkg -i"
		man -w rig_qp_read >/dev/null || fail "man rig_qp_read: no alias after dpkg -i"
		man -w 7 rig >/dev/null || fail "man 7 rig: no page after dpkg -i"
		command -v rig-info >/dev/null || fail "rig-info is not on the PATH after dpkg -i"
		if [[ -z $(ls /sys/class/infiniband 2>/dev/null) ]]; then
			out=$(rig-info 2>&1) && rc=0 || rc=$?
			[[ $rc == 1 && $out == "rig-info: no verbs device on this machine" ]] ||
				fail "installed rig-info without a device: exit $rc, '$out'"
		fi
		cc -o "$tmp/hello-sys" "$tmp/hello.c" $(pkg-config --cflags --libs rig) &&
			"$tmp/hello-sys" >/dev/null || fail "cc hello.c \$(pkg-config --cflags --libs rig)"
		[[ $failed == 1 ]] || echo "ok: dpkg -i; man rig_qp_poll, man 7 rig, rig-info and pkg-config work"
	else
		cat "$tmp/install.log"
		fail "dpkg -i of the three packages"
	fi
	dpkg -r rig-utils librig-dev librig0 >/dev/null 2>&1 || fail "dpkg -r"
fi

if lintian --fail-on error --suppress-tags no-manual-page "$tmp"/rig_*.changes >"$tmp/lintian.log" 2>&1; then
	echo "ok: lintian reports no error ($(grep -c '^W:' "$tmp/lintian.log" || true) warnings)"
else
	fail "lintian"
fi
sed 's/^/    /' "$tmp/lintian.log"
echo "check-deb: $((SECONDS - t0)) s"
exit $failed
