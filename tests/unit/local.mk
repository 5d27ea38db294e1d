# SPDX-License-Identifier: MIT
# One Criterion binary per libstore module; fixture.c makes temp pools.
UNIT_CFLAGS = $(AM_CFLAGS) $(CRITERION_CFLAGS)
UNIT_LDADD = $(STORE_LIBS) $(CRITERION_LIBS)
UNIT_FIXTURE = %D%/fixture.c %D%/fixture.h

check_PROGRAMS += %D%/test_crypt
%C%_test_crypt_SOURCES = %D%/test_crypt.c
%C%_test_crypt_CFLAGS = $(UNIT_CFLAGS) $(CRYPTO_CFLAGS)
%C%_test_crypt_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_keys
%C%_test_keys_SOURCES = %D%/test_keys.c
%C%_test_keys_CFLAGS = $(UNIT_CFLAGS)
%C%_test_keys_LDADD = $(UNIT_LDADD)

check_PROGRAMS += %D%/test_hist
%C%_test_hist_SOURCES = %D%/test_hist.c client/hist.c client/hist.h
%C%_test_hist_CFLAGS = $(UNIT_CFLAGS)
%C%_test_hist_LDADD = $(CRITERION_LIBS) -lm

TESTS += $(check_PROGRAMS)
