#!/bin/sh
# SPDX-License-Identifier: MIT
# Every rule tag cited in the project is defined in man/rig.7.md, rig(7).
#
# A tag is defined by a line of the page that begins with it in bold:
# "**F3** ...". A tag is cited wherever one of the rule letters and a
# number stand as a word of their own or as one segment of an identifier:
# "rig(7) F3", "(F1, F6)", "F1/F6", "M1-M5" (a range: M1 to M5 are all
# cited), test names such as F1_F3_late_event_replaces_bare_flush or
# churn_keeps_memory_flat_P5, and M3_MIN_MS. A group named on its own,
# "rig(7) Q", must be a letter the page defines tags of.
#
# The rule letters are C D F M P Q T, and any other letter the page
# defines tags of. What the pattern leaves out, and why:
#   - a letter after a letter or digit: hex (0x1F3, 0xD2), shellcheck
#     codes (SC2046), AF_INET6, IPv4 are not citations;
#   - other letters: -O1/-O2/-O3 (compiler flags), x86/X86, RoCE v2/V2;
#   - a letter with no number: IORING_CQE_F_MORE;
#   - C89, C90, C99, C11, C17, C23: the C standards, not rules (so the
#     C group must never grow to C11);
#   - files that are not sources (binaries, objects, logs, libtool
#     wrapper scripts of an in-tree build) and hidden directories.
# Underscores do not bound a word here, so an identifier such as RIG_C1
# would count as a citation of C1; the project has none.
set -e
top=${top_srcdir:-.}
page=$top/man/rig.7.md
[ -f "$page" ] || { echo "FAIL: no $page"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0

sed -n 's/^\*\*\([A-Z][0-9][0-9]*\)\*\*.*/\1/p' "$page" | sort >"$tmp/defs"
[ -s "$tmp/defs" ] || { echo "FAIL: $page defines no tag"; exit 1; }
dups=$(uniq -d "$tmp/defs" | tr '\n' ' ')
if [ -n "$dups" ]; then
	echo "FAIL: $page defines twice: $dups"; status=1
fi
letters=CDFMPQT$(cut -c1 "$tmp/defs" | sort -u | tr -d '\n')

# The sources: README, the page itself, the other man pages (rig-wire(7)
# too), and the
# text files of include/, lib/, tests/, examples/ (by name, or scripts
# by their "#!").
{
	echo "$top/README"
	echo "$page"
	find "$top/man" -name '*.[0-9].md' ! -name rig.7.md
	find "$top/include" "$top/lib" "$top/tests" "$top/examples" \
		-name '.*' -prune -o -type f -print
} | sort | while IFS= read -r f; do
	case ${f##*/} in
	*.c | *.h | *.md | *.map | *.sh | *.supp | README) echo "$f" ;;
	*.*) ;;
	*)
		if [ "$(head -c 2 "$f")" = '#!' ] &&
		   ! head -n 3 "$f" | grep -q 'wrapper script'; then
			echo "$f"
		fi
		;;
	esac
done >"$tmp/files"

# file:line:tag for each citation.
: >"$tmp/raw"
while IFS= read -r f; do
	awk -v L="$letters" -v F="${f#"$top"/}" '
	BEGIN {
		tag = "[" L "][0-9]+"
		re = "(^|[^A-Za-z0-9])" tag "([^A-Za-z0-9]|$)"
		split("C89 C90 C99 C11 C17 C23", cstd, " ")
		for (i in cstd)
			std[cstd[i]] = 1
	}
	function cite(t) {
		if (!(t in std))
			print F ":" FNR ":" t
	}
	{
		s = $0
		while (match(s, re)) {
			m = substr(s, RSTART, RLENGTH)
			lead = (m ~ /^[A-Z]/) ? 0 : 1
			t = substr(m, lead + 1)
			sub(/[^A-Za-z0-9]$/, "", t)
			cite(t)
			# From just after the tag: the next may share its separator.
			s = substr(s, RSTART + lead + length(t))
			# A range, "M1-M5" or "M1-5": the tags between are cited too.
			if (match(s, "^-" substr(t, 1, 1) "?[0-9]+([^A-Za-z0-9]|$)")) {
				r = substr(s, 2, RLENGTH - 1)
				sub(/^[A-Z]/, "", r)
				sub(/[^0-9]$/, "", r)
				for (n = substr(t, 2) + 1; n <= r + 0 && n < 100; n++)
					cite(substr(t, 1, 1) n)
			}
		}
		# After "rig(7) " or "SPEC ", any letter: a group with no number
		# ("rig(7) Q"), or a tag even of a letter no rule group uses.
		g = $0
		while (match(g, /(rig\(7\)|SPEC) [A-Z][0-9]*([^A-Za-z0-9]|$)/)) {
			m = substr(g, RSTART, RLENGTH)
			g = substr(g, RSTART + RLENGTH - 1)
			sub(/^(rig\(7\)|SPEC) /, "", m)
			sub(/[^A-Za-z0-9]$/, "", m)
			if (m !~ /[0-9]/)
				print F ":" FNR ":" m " (group)"
			else if (index(L, substr(m, 1, 1)) == 0)
				cite(m)
		}
	}' "$f" >>"$tmp/raw" || { echo "FAIL: cannot read $f"; exit 1; }
done <"$tmp/files"
sort -t: -k1,1 -k2,2n -k3 -u "$tmp/raw" >"$tmp/cited"
# No citation at all means the pattern, not the project, is broken.
[ -s "$tmp/cited" ] || { echo "FAIL: no tag cited anywhere"; exit 1; }

while IFS=: read -r file line tag; do
	case $tag in
	*' (group)')
		grep -q "^${tag%% *}" "$tmp/defs" && continue ;;
	*)
		grep -qx "$tag" "$tmp/defs" && continue ;;
	esac
	echo "FAIL: $file:$line: $tag is not defined in man/rig.7.md"
done <"$tmp/cited" >"$tmp/fails"
if [ -s "$tmp/fails" ]; then
	cat "$tmp/fails"; status=1
fi
[ $status -ne 0 ] || echo "ok: $(wc -l <"$tmp/defs") tags, $(wc -l <"$tmp/cited") citations in $(wc -l <"$tmp/files") files"
exit $status
