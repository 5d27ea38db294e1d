# SPDX-License-Identifier: MIT
# The fault-injection shim, preloaded into cofferd by tests/e2e/test_faults.
# A plain shared object built without libtool (the tree uses none); it is
# built without sanitizers: it only forwards calls, and runs inside an ASan
# cofferd with verify_asan_link_order=0.
check_DATA = %D%/faultinj.so
CLEANFILES += %D%/faultinj.so
EXTRA_DIST += %D%/faultinj.c

%D%/faultinj.so: %D%/faultinj.c
	$(AM_V_CC)$(MKDIR_P) $(@D) && \
	$(CC) -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -shared -fPIC -o $@ $(srcdir)/%D%/faultinj.c -ldl

AM_TESTS_ENVIRONMENT += COFFER_FAULTINJ=$(abs_top_builddir)/%D%/faultinj.so; export COFFER_FAULTINJ;
