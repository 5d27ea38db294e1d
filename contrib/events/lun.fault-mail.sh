#!/bin/sh
# SPDX-License-Identifier: MIT
#
# An event hook for cofferd (cofferd(8), Events): a mail to MAILTO when a
# LUN faults, with the pool's status. Copy it into event_hook_dir as it is
# ("lun.fault-" runs it for lun.fault), or as pool.state-mail.sh for the
# pool turning DEGRADED, and set MAILTO below (hooks see only the event's
# environment). Without mail(1) the message goes to syslog instead.
set -u
MAILTO=root

subject="coffer: pool $COFFER_EVENT_POOL: $COFFER_EVENT_CLASS ${COFFER_EVENT_LUN:-} ${COFFER_EVENT_STATE:-}"
body() {
	echo "event $COFFER_EVENT_EID $COFFER_EVENT_CLASS at $COFFER_EVENT_TIME_STRING"
	env | sed -n 's/^COFFER_EVENT_\([A-Z0-9_]*=\)/  \1/p' | sort
	echo
	coffer -S "$COFFER_SOCKET" pool status "$COFFER_EVENT_POOL" 2>&1
}
if command -v mail >/dev/null 2>&1; then
	body | mail -s "$subject" "$MAILTO"
else
	body | logger -t coffer-event -p daemon.warning
fi
