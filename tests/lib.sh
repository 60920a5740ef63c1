# SPDX-License-Identifier: MIT
# Shared by tests/run-all and tests/run-main: installs what the build
# needs from Debian's packages, then builds a tree.

# systemtap-sdt-dev has sys/sdt.h, for the USDT probes (rig(7) PROBES);
# bpftrace attaches to them in the guest (tests/probes-test), which runs
# the host's binaries.
BUILD_PACKAGES=(autoconf automake libtool pkg-config make gcc g++
	libibverbs-dev librdmacm-dev liburing-dev libcriterion-dev libuv1-dev
	pandoc abigail-tools systemtap-sdt-dev bpftrace)
# tests/check-deb.sh builds and lints the Debian packages with these;
# tests/fuzz builds its libFuzzer target with these (Debian 12: clang 14).
DEB_PACKAGES=(debhelper lintian pandoc dpkg-dev fakeroot man-db)
FUZZ_PACKAGES=(clang libclang-rt-14-dev pkg-config libibverbs-dev)

# Installs the Debian packages of "$@" that are missing.
ensure_packages() {
	local missing=() p
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' ||
			missing+=("$p")
	done
	((${#missing[@]})) || return 0
	echo "installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
		{ apt-get update -q >&2 &&
		  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; }
}

# build DIR [CONFIGURE ARGS...]: configures and builds the project in DIR,
# a tree beside the sources, with the tests built too.
build() {
	local dir=$1; shift
	[[ -x configure ]] || ./autogen.sh >/dev/null
	mkdir -p "$dir"
	(cd "$dir" && { [[ -f Makefile ]] || ../configure -q "$@"; } &&
		make -j"$(nproc)" -s >/dev/null && make -j"$(nproc)" -s check TESTS= >/dev/null)
}
