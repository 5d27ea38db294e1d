# SPDX-License-Identifier: MIT
# The client library (shared by coffer, coffer bench and the e2e tests) and the coffer CLI.
include %D%/bench.mk

noinst_LIBRARIES += %D%/libcoffer.a
%C%_libcoffer_a_SOURCES = %D%/client.h %D%/conn.c
%C%_libcoffer_a_CPPFLAGS = $(AM_CPPFLAGS) $(PROTO_INC)
%C%_libcoffer_a_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
# libstore.a for its shared rules only (sizes, names, error texts): a static
# link takes just those objects, not the engine or its libraries
CLIENT_LIBS = %D%/libcoffer.a daemon/libproto.a libstore/libstore.a $(JANSSON_LIBS) $(PTHREAD_LIBS)

bin_PROGRAMS += %D%/coffer
%C%_coffer_SOURCES = %D%/coffer.c %D%/bench.h $(BENCH_SOURCES)
%C%_coffer_CPPFLAGS = $(AM_CPPFLAGS) $(PROTO_INC) $(STORE_INC)
%C%_coffer_CFLAGS = $(AM_CFLAGS) $(JANSSON_CFLAGS)
%C%_coffer_LDADD = $(CLIENT_LIBS) $(BENCH_LIBS)

dist_man_MANS += %D%/coffer.8

bashcompletiondir = $(datadir)/bash-completion/completions
dist_bashcompletion_DATA = contrib/bash-completion/coffer
