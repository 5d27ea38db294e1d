# SPDX-License-Identifier: MIT
# Sources of `coffer bench`, linked into coffer; a stub until the load generator lands.
BENCH_SOURCES = %D%/bench_stub.c
