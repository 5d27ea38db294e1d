#!/bin/sh
# SPDX-License-Identifier: MIT
# make check's share of contrib/soak/soak.py: two fixed seeds and one random
# seed (printed), OPS operations each, about two minutes in all. Each run
# line is printed as it starts, so that a failure names the command that
# replays it.
#
# Environment: COFFERD, COFFER (set by make check), COFFER_SOAK_SEEDS (the
# fixed seeds), COFFER_SOAK_OPS (operations per seed), COFFER_SOAK_WITHOUT
# (operation and disruption kinds to leave out, comma-separated),
# COFFER_SOAK_ARGS (more options for soak.py).
top=$(cd "${srcdir:-$(dirname "$0")/../..}" && pwd)
[ -x "${COFFERD:-}" ] && [ -x "${COFFER:-}" ] || { echo "COFFERD/COFFER not set"; exit 77; }
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3) || { echo "soak_short: no python3"; exit 77; }
seeds=${COFFER_SOAK_SEEDS:-"1001 1002"}
random=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
ops=${COFFER_SOAK_OPS:-45}
without=${COFFER_SOAK_WITHOUT:-}
rc=0
for s in $seeds $random; do
	set -- --seed "$s" --ops "$ops" --quiet
	[ -n "$without" ] && set -- "$@" --without "$without"
	# shellcheck disable=SC2086 # COFFER_SOAK_ARGS is a list of options
	set -- "$@" ${COFFER_SOAK_ARGS:-}
	echo "soak_short: $py contrib/soak/soak.py $*"
	"$py" "$top/contrib/soak/soak.py" "$@" || rc=1
done
exit $rc
