#!/bin/sh
# SPDX-License-Identifier: MIT
# make check's share of contrib/bench/load.sh: 64 validating clients at
# queue depth 32 for 10 s, a refused bench past max_connections, a clean stop.
top=$(cd "${srcdir:-$(dirname "$0")/../..}" && pwd)
[ -x "${COFFERD:-}" ] && [ -x "${COFFER:-}" ] || { echo "COFFERD/COFFER not set"; exit 77; }
exec sh "$top/contrib/bench/load.sh" "${COFFER_LOAD_SECONDS:-10}"
