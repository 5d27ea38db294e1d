# SPDX-License-Identifier: MIT
# Sourced by load.sh and crash.sh: one cofferd in a temp dir of its own.
# daemon_init makes the dir ($dir), points COFFER_SOCKET at its socket and
# removes the dir on exit unless the script failed or KEEP=1; daemon_start
# runs $COFFERD on $dir/cofferd.conf (log in $dir/cofferd.log) and waits
# until it answers a ping; daemon_until waits for an event with a deadline.
# The caller sets COFFERD and COFFER, and `failed=1` to keep the files.

# daemon_init NAME: $dir, $sock, the EXIT trap; NAME prefixes messages
daemon_init() {
	name=$1
	dir=$(mktemp -d "${TMPDIR:-/tmp}/coffer-$name.XXXXXX")
	sock=$dir/sock
	COFFER_SOCKET=$sock
	export COFFER_SOCKET
	pid=
	trap daemon_cleanup EXIT
	trap 'exit 1' INT TERM
}

daemon_cleanup() {
	rc=$?
	if [ -n "$pid" ]; then
		kill -9 "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null || true
	fi
	if [ "$rc" != 0 ] || [ "${KEEP:-0}" = 1 ] || [ "${failed:-0}" = 1 ]; then
		echo "$name: files kept in $dir" >&2
	else
		rm -rf "$dir"
	fi
	exit "$rc"
}

# daemon_conf [LINE...]: $dir/cofferd.conf with the socket, state and log, then LINEs
daemon_conf() {
	{
		printf '[cofferd]\nsocket = %s\nstate_dir = %s\nlog_level = info\n' "$sock" "$dir/state"
		printf 'log_target = stderr\n'
		for l in "$@"; do printf '%s\n' "$l"; done
	} >"$dir/cofferd.conf"
}

# daemon_start ASAN_OPTIONS: start cofferd (pid in $pid), wait up to START_WAIT
# seconds (default 10: an import of 100,000 datasets takes more) for a ping
daemon_start() {
	ASAN_OPTIONS=${ASAN_OPTIONS:-$1} "$COFFERD" -f -c "$dir/cofferd.conf" \
		>>"$dir/cofferd.log" 2>&1 &
	pid=$!
	i=0
	until "$COFFER" -S "$sock" ping >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -gt $((${START_WAIT:-10} * 20)) ] || ! kill -0 "$pid" 2>/dev/null; then
			failed=1
			echo "$name: cofferd did not start" >&2
			tail -n 30 "$dir/cofferd.log" >&2
			exit 1
		fi
		sleep 0.05
	done
}

# daemon_until SECONDS COMMAND...: run COMMAND every 0.05 s until it succeeds;
# fails once SECONDS have passed
daemon_until() {
	end=$(($(date +%s) + $1))
	shift
	until "$@"; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.05
	done
}
