#!/bin/sh
# SPDX-License-Identifier: MIT
# make check's share of contrib/bench/crash.sh: five SIGKILLs of cofferd
# under an encrypted coffer bench -v load, each followed by a restart,
# load-key and a full read-back of the journal.
top=$(cd "${srcdir:-$(dirname "$0")/../..}" && pwd)
[ -x "${COFFERD:-}" ] && [ -x "${COFFER:-}" ] || { echo "COFFERD/COFFER not set"; exit 77; }
exec sh "$top/contrib/bench/crash.sh" "${COFFER_CRASH_CYCLES:-5}"
