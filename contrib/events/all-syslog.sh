#!/bin/sh
# SPDX-License-Identifier: MIT
#
# An event hook for cofferd (cofferd(8), Events): every event, one line to
# syslog, as ZED's all-syslog.sh. Copy it into event_hook_dir (cofferd.conf)
# and make it executable; "all-" runs it for every class.
#
# The line names the event and its fields: COFFER_EVENT_EID, _CLASS, _POOL,
# then each COFFER_EVENT_<FIELD> the event carries.
set -u
fields=$(env | sed -n 's/^COFFER_EVENT_\([A-Z0-9_]*\)=\(.*\)$/\1=\2/p' |
	grep -v -e '^EID=' -e '^CLASS=' -e '^POOL=' -e '^TIME' | tr '\n' ' ')
exec logger -t coffer-event -p daemon.notice -- \
	"eid=$COFFER_EVENT_EID class=$COFFER_EVENT_CLASS pool=$COFFER_EVENT_POOL $fields"
