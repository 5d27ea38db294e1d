# SPDX-License-Identifier: MIT
# The example configuration (installed, and read by test_config) and its reference page.
coffersysconfdir = $(sysconfdir)/coffer
dist_coffersysconf_DATA = %D%/cofferd.conf
dist_man_MANS += %D%/cofferd.conf.5
