# SPDX-License-Identifier: MIT
# The client library (shared by coffer, coffer bench and the e2e tests) and the coffer CLI.
include %D%/bench.mk

# installed with client.h and coffer.pc, so other programs link it: it
# carries the wire format, the default socket path and libstore's shared
# rules it needs (names, error texts) in itself
lib_LIBRARIES = %D%/libcoffer.a
%C%_libcoffer_a_SOURCES = %D%/client.h %D%/conn.c %D%/sendrecv.c common/proto.c common/sockpath.c \
	common/errors.c common/name.c common/resume_token.c common/hex.c
%C%_libcoffer_a_CPPFLAGS = $(AM_CPPFLAGS) $(STORE_INC)
%C%_libcoffer_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
include_HEADERS = %D%/client.h
pkgconfigdir = $(libdir)/pkgconfig
pkgconfig_DATA = %D%/coffer.pc
EXTRA_DIST += %D%/coffer.pc.in
CLEANFILES += %D%/coffer.pc
%D%/coffer.pc: $(top_srcdir)/%D%/coffer.pc.in Makefile
	$(AM_V_GEN)$(MKDIR_P) %D% && \
	sed -e 's|@prefix[@]|$(prefix)|g' -e 's|@libdir[@]|$(libdir)|g' \
	    -e 's|@includedir[@]|$(includedir)|g' -e 's|@VERSION[@]|$(VERSION)|g' \
	    $(top_srcdir)/%D%/coffer.pc.in > $@
# libcommon.a for the rest of the shared rules (sizes, typos, properties)
CLIENT_LIBS = %D%/libcoffer.a common/libcommon.a $(JANSSON_LIBS) $(PTHREAD_LIBS)

bin_PROGRAMS += %D%/coffer
# keysource.c: keys from a key server (libcurl, opened at the first fetch,
# unless --without-curl) or a password agent
%C%_coffer_SOURCES = %D%/coffer.c %D%/iostat.c %D%/iostat.h %D%/pool_health.c %D%/pool_health.h %D%/jsonout.c %D%/jsonout.h %D%/bench.h %D%/keysource.h \
	%D%/keysource.c $(BENCH_SOURCES)
%C%_coffer_CPPFLAGS = $(AM_CPPFLAGS) $(STORE_INC)
%C%_coffer_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS) $(CURL_CFLAGS)
%C%_coffer_LDADD = $(CLIENT_LIBS) $(BENCH_LIBS) $(DL_LIBS)

dist_man_MANS += %D%/coffer.8

bashcompletiondir = $(datadir)/bash-completion/completions
dist_bashcompletion_DATA = contrib/bash-completion/coffer
