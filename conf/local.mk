# SPDX-License-Identifier: MIT
# The example configuration (installed, and read by test_config) and its reference page.
coffersysconfdir = $(sysconfdir)/coffer
dist_coffersysconf_DATA = %D%/cofferd.conf
dist_man_MANS += %D%/cofferd.conf.5

# Keys at boot: a oneshot after cofferd.service, its path substituted at make
# time as cofferd.service's are (daemon/local.mk)
systemdsystemunit_DATA += %D%/cofferd-load-key.service
EXTRA_DIST += %D%/cofferd-load-key.service.in
CLEANFILES += %D%/cofferd-load-key.service
%D%/cofferd-load-key.service: $(top_srcdir)/%D%/cofferd-load-key.service.in Makefile
	$(AM_V_GEN)$(MKDIR_P) %D% && \
	sed -e 's|@bindir[@]|$(bindir)|g' $(top_srcdir)/%D%/cofferd-load-key.service.in > $@
