# SPDX-License-Identifier: MIT
# Reference benchmarks; built with `make`, run by hand (they are not tests).

# crypt_bench: ns per record to seal/open per suite, backend and batch size
noinst_PROGRAMS += %D%/crypt_bench
%C%_crypt_bench_SOURCES = %D%/crypt_bench.c
%C%_crypt_bench_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS) $(XXHASH_CFLAGS)
%C%_crypt_bench_LDADD = $(STORE_LIBS)
