# SPDX-License-Identifier: MIT
# Sources of `coffer bench` (the load generator), linked into coffer by client/local.mk.
BENCH_SOURCES = %D%/bench.c %D%/bench.h %D%/bench_run.c %D%/bench_report.c \
	%D%/bench_parse.c %D%/bench_parse.h \
	%D%/bench_verify.c %D%/bench_verify.h %D%/hist.c %D%/hist.h
BENCH_LIBS = $(XXHASH_LIBS) -lm
dist_man_MANS += %D%/coffer-bench.8
EXTRA_DIST += contrib/bench/encryption.sh contrib/bench/bench_plot.gp contrib/bench/snapshot.sh \
	contrib/bench/scale.sh contrib/bench/send.sh
