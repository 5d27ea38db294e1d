# SPDX-License-Identifier: MIT
# cofferd (the wire protocol it shares with the client is common/'s).

sbin_PROGRAMS += %D%/cofferd
%C%_cofferd_SOURCES = \
	%D%/main.c %D%/conf.h %D%/conf.c %D%/log.h %D%/log.c %D%/counters.h %D%/peer.h \
	%D%/rpc.h %D%/rpc.c %D%/sendring.h %D%/sendring.c %D%/dispatch.h %D%/dispatch.c %D%/handlers.h %D%/handlers.c %D%/sendrecv.c \
	%D%/registry.h %D%/registry.c %D%/loops.h %D%/loops.c %D%/plainbuf.h %D%/plainbuf.c %D%/roots.h %D%/roots.c %D%/work.h %D%/work.c \
	%D%/events.h %D%/events.c \
	%D%/nbd.h %D%/nbd.c %D%/nbd_proto.h %D%/nbd_proto.c %D%/tls.h %D%/tls.c \
	%D%/metrics.h %D%/metrics.c %D%/metrics_http.c %D%/pidfile.h %D%/pidfile.c
%C%_cofferd_CPPFLAGS = $(AM_CPPFLAGS) $(STORE_INC)
%C%_cofferd_CFLAGS = $(AM_CFLAGS) $(INIH_CFLAGS) $(UV_CFLAGS) $(JANSSON_CFLAGS) $(SYSTEMD_CFLAGS) \
	$(SSL_CFLAGS) $(MHD_CFLAGS)
%C%_cofferd_LDADD = $(SSL_LIBS) $(STORE_LIBS) $(INIH_LIBS) $(UV_LIBS) \
	$(JANSSON_LIBS) $(SYSTEMD_LIBS) $(MHD_LIBS) $(PTHREAD_LIBS)

dist_man_MANS += %D%/cofferd.8
# a Grafana dashboard of the metrics (metrics.c names them)
EXTRA_DIST += contrib/grafana-coffer.json

# The systemd unit, with paths substituted at make time (not by configure, so
# `make prefix=...` is honoured).
systemdsystemunit_DATA = conf/cofferd.service
EXTRA_DIST += conf/cofferd.service.in
CLEANFILES += conf/cofferd.service
conf/cofferd.service: $(top_srcdir)/conf/cofferd.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) conf && \
	sed -e 's|@sbindir[@]|$(sbindir)|g' -e 's|@sysconfdir[@]|$(sysconfdir)|g' \
	    -e 's|@localstatedir[@]|$(localstatedir)|g' $(top_srcdir)/conf/cofferd.service.in > $@
