/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus exposition through the real daemon: after real I/O, what
 * `coffer stats --prometheus` prints and what metrics_listen serves parse
 * with the reference parser (python3-prometheus-client, through
 * metrics_check.py), counters move by the I/O done and every histogram
 * holds; the listener answers GET /metrics only, and refuses an address
 * other than loopback unless metrics_allow_remote says yes.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

TDAEMON_FIXTURE("metrics_listen = 127.0.0.1:0\n")
static char out[1 << 18];

TestSuite(metrics, .init = setup, .fini = teardown, .timeout = 240);

#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* The port the daemon logged for metrics_listen's port 0. */
static unsigned metrics_port(void)
{
	const char *p = strstr(tdaemon_log(&td), "metrics on 127.0.0.1:0 (port ");
	unsigned port = 0;

	cr_assert(p && sscanf(p, "metrics on 127.0.0.1:0 (port %u)", &port) == 1 && port,
		  "no port logged:\n%s", tdaemon_log(&td));
	return port;
}

/* The checker under the system python, whose module the Debian package installs. */
static int check(const char *args)
{
	const char *script = getenv("COFFER_METRICS_CHECK");
	char cmd[8192];
	int st;

	cr_assert(script, "COFFER_METRICS_CHECK is not set (make check sets it)");
	snprintf(cmd, sizeof(cmd), "/usr/bin/python3 '%s' %s >'%s/check.out' 2>&1", script, args,
		 td.dir);
	st = system(cmd);
	st = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
	if (st == 77)
		tdaemon_skip(&td, "python3-prometheus-client is not installed (contrib/deps.sh)");
	return st;
}

static const char *check_out(void)
{
	static char buf[16384];
	char path[PATH_MAX];
	FILE *f;
	size_t n = 0;

	snprintf(path, sizeof(path), "%s/check.out", td.dir);
	f = fopen(path, "r");
	if (f) {
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
	}
	buf[n] = 0;
	return buf;
}

Test(metrics, counters_move_and_histograms_hold_over_both_paths)
{
	static char data[64 * 1024];
	char args[3 * sizeof(td.dir) + 64];
	const char *in;

	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (char)(i * 13);
	in = tdaemon_file(&td, "in", data, sizeof(data));
	COF_OK(NULL, "pool create -s 64M tank %s/l0 %s/l1", td.dir, td.dir);
	COF_OK(NULL, "create -V 1M tank/a");
	COF_OK(NULL, "stats --prometheus > %s/before.prom", td.dir);
	COF_OK(in, "write tank/a");
	for (int i = 0; i < 3; i++)
		COF_OK(NULL, "read -l 64K tank/a > /dev/null");
	COF_OK(NULL, "stats -P > %s/after.prom", td.dir);
	snprintf(args, sizeof(args), "'%s/before.prom' '%s/after.prom' 127.0.0.1:%u", td.dir,
		 td.dir, metrics_port());
	cr_assert_eq(check(args), 0, "metrics_check.py:\n%s", check_out());
}

Test(metrics, a_non_loopback_address_is_refused_unless_allowed)
{
	tdaemon_stop_ok(&td);
	tdaemon_write_conf(&td, NULL, "metrics_listen = 0.0.0.0:0\n");
	cr_assert_neq(tdaemon_start(&td), 0, "cofferd served metrics on 0.0.0.0");
	cr_assert(strstr(tdaemon_log(&td), "not a loopback address"), "log:\n%s",
		  tdaemon_log(&td));
	tdaemon_write_conf(&td, NULL, "metrics_listen = 0.0.0.0:0\nmetrics_allow_remote = yes\n");
	tdaemon_start_ok(&td);
}

Test(metrics, a_unix_socket_path_serves_get_metrics)
{
	char path[PATH_MAX];

	tdaemon_stop_ok(&td);
	snprintf(path, sizeof(path), "%s/metrics.sock", td.dir);
	tdaemon_write_conf(&td, NULL, "metrics_listen = %s\n", path);
	tdaemon_start_ok(&td);
	snprintf(out, sizeof(out),
		 "import socket, sys\n"
		 "s = socket.socket(socket.AF_UNIX)\n"
		 "s.connect(sys.argv[1])\n"
		 "s.sendall(b'GET /metrics HTTP/1.0\\r\\n\\r\\n')\n"
		 "r = b''\n"
		 "while True:\n"
		 "    b = s.recv(65536)\n"
		 "    if not b: break\n"
		 "    r += b\n"
		 "sys.exit(0 if r.split(b' ')[1] == b'200' and b'coffer_build_info' in r else 1)\n");
	tdaemon_file(&td, "get.py", out, strlen(out));
	snprintf(out, sizeof(out), "/usr/bin/python3 '%s/get.py' '%s'", td.dir, path);
	cr_assert_eq(system(out), 0, "GET /metrics over %s failed\n%s", path, tdaemon_log(&td));
}
