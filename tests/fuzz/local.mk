# SPDX-License-Identifier: MIT
# libFuzzer harnesses: built with clang by run.sh outside automake (they
# need -fsanitize=fuzzer); shipped so that a tarball can run them too.
EXTRA_DIST += %D%/run.sh %D%/corpus \
	%D%/fuzz_proto.c %D%/fuzz_config.c %D%/fuzz_bench_parse.c %D%/fuzz_handlers.c \
	%D%/fuzz_nbd.c %D%/fuzz_stream.c
