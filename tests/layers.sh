#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The layer check: a file of libstore includes only headers of its own
# layer and of the layers before it, in the order of LAYERS; common/
# includes nothing of libstore or daemon. Includes name the layer
# ("dev/lun.h"), so the rule reads off the include lines. The two
# headers at libstore's top may be included from anywhere: the public
# manual (store.h) and the core structs (pool_impl.h: struct stor_pool and
# struct stor_ds); what pool_impl.h itself includes is checked as if it
# were in base, so the members it embeds from higher layers are listed.
#
# The includes that break the rule today are listed in tests/layers.allow,
# one "file: header" a line; the check fails on any other, and on a line of
# the list that no longer breaks it (take it out), so the list only shrinks.
#
# The calls are checked as well, from the objects when a build is at hand
# (make check runs in it): no object of a layer may need a symbol that an
# object of a higher layer defines (nm), whatever the includes say.
#
# usage: layers.sh  (from make check, or with srcdir set to the top)
set -eu
build=$(pwd)
top=$(cd "${srcdir:-$(dirname "$0")/..}" && pwd)
cd "$top"
LAYERS="common base crypt kv dev txg ds io pool send"

rank() { # layer -> its place in LAYERS; the two top headers: 0
	case $1 in
	store) echo 0; return ;;
	pool_impl) set -- dev ;;
	esac
	i=0
	for l in $LAYERS; do
		[ "$l" = "$1" ] && { echo $i; return; }
		i=$((i + 1))
	done
	echo -1
}

found=$(mktemp)
calls=$(mktemp)
trap 'rm -f "$found" "$calls"' EXIT
for f in common/*.[ch] libstore/*.h libstore/*/*.[ch]; do
	case $f in
	common/*) mine=common ;;
	libstore/store.h) mine=store ;;
	libstore/pool_impl.h) mine=dev ;;
	libstore/*/*) mine=${f#libstore/}; mine=${mine%%/*} ;;
	esac
	[ "$(rank "$mine")" -ge 0 ] || { echo "layers: $f: folder $mine is in no layer" >&2; exit 1; }
	sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
		case $h in
		*/*) theirs=${h%%/*} ;;
		store.h) theirs=store ;;
		pool_impl.h) theirs=pool_impl ;;
		config.h) continue ;;
		*) # a header beside the file, or one of common/
			if [ -f "$(dirname "$f")/$h" ]; then continue; fi
			if [ -f "common/$h" ]; then theirs=common; else theirs=daemon; fi ;;
		esac
		r=$(rank "$theirs")
		if [ "$mine" = common ] && [ "$theirs" != common ]; then
			echo "$f: $h"
		elif [ "$r" -lt 0 ] || [ "$r" -gt "$(rank "$mine")" ]; then
			echo "$f: $h"
		fi
	done
done | sort > "$found"

# The calls: each object's layer is its folder; "symbol layer object" for
# every definition, then every undefined symbol looked up in that list.
for o in "$build"/common/libcommon_a-*.o "$build"/libstore/*/*.o; do
	[ -f "$o" ] || continue
	case $o in
	"$build"/common/*) l=common ;;
	*) l=${o#"$build"/libstore/}; l=${l%%/*} ;;
	esac
	nm -g --defined-only "$o" | awk -v l="$(rank "$l")" -v o="${o#"$build"/}" \
		'NF == 3 { print "D", $3, l, o }'
	nm -u "$o" | awk -v l="$(rank "$l")" -v o="${o#"$build"/}" '{ print "U", $2, l, o }'
done | awk '$1 == "D" { layer[$2] = $3; at[$2] = $4; next }
	{ use[NR] = $0 }
	END { for (i in use) { split(use[i], f, " ")
		if ((f[2] in layer) && layer[f[2]] + 0 > f[3] + 0)
			print f[4] " calls " f[2] " of " at[f[2]] } }' | sort > "$calls"

rc=0
if [ -s "$calls" ]; then
	echo "layers: calls into a higher layer:" >&2
	sed 's/^/  /' "$calls" >&2
	rc=1
fi
new=$(comm -23 "$found" tests/layers.allow)
gone=$(comm -13 "$found" tests/layers.allow)
if [ -n "$new" ]; then
	echo "layers: includes of a higher layer (or of libstore/daemon from common/):" >&2
	echo "$new" | sed 's/^/  /' >&2
	rc=1
fi
if [ -n "$gone" ]; then
	echo "layers: no longer break the rule; take them out of tests/layers.allow:" >&2
	echo "$gone" | sed 's/^/  /' >&2
	rc=1
fi
[ $rc = 0 ] && echo "layers: $(wc -l < tests/layers.allow) known exceptions, no new one;" \
	"$(ls "$build"/common/libcommon_a-*.o "$build"/libstore/*/*.o 2>/dev/null | wc -l)" \
	"objects call no higher layer"
exit $rc
