/* SPDX-License-Identifier: MIT */
/*
 * daemon/conf.c and daemon/log.c: every option parsed, every kind of bad
 * value reported with its line, defaults for root and other users, the
 * shipped example file and man page in step with the option table, and the
 * log targets (format, journald prefix, reopen after rotation, threads).
 */

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "common/sockpath.h"
#include "daemon/conf.h"
#include "daemon/log.h"

static char dir[4096];
static char path[4200];
static struct config c;
static char err[1024];

static void setup(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof(dir), "%s/coffer-config-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	cr_assert(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
	snprintf(path, sizeof(path), "%s/cofferd.conf", dir);
	/* fixed environment: per-user defaults must not depend on who runs the tests */
	setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
	setenv("XDG_STATE_HOME", "/home/u/.local/state", 1);
	setenv("HOME", "/home/u", 1);
	config_defaults_uid(&c, 1000);
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void teardown(void)
{
	config_free(&c);
	log_close();
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

TestSuite(config, .init = setup, .fini = teardown, .timeout = 240);
TestSuite(log, .init = setup, .fini = teardown, .timeout = 240);

static void write_file(const char *p, const char *text)
{
	FILE *f = fopen(p, "w");

	cr_assert(f, "%s: %s", p, strerror(errno));
	cr_assert_eq(fputs(text, f) >= 0, 1);
	cr_assert_eq(fclose(f), 0);
}

static int load(const char *text)
{
	write_file(path, text);
	err[0] = '\0';
	return config_load(&c, path, err, sizeof(err));
}

/* Every option of the loaded config c is as in @w (strings compared as strings). */
static void assert_config(const struct config *w)
{
	cr_assert_str_eq(c.socket, w->socket);
	cr_assert_str_eq(c.state_dir, w->state_dir);
	cr_assert_eq(c.socket_mode, w->socket_mode);
	cr_assert_str_eq(c.socket_group, w->socket_group);
	cr_assert_str_eq(c.nbd_socket, w->nbd_socket);
	cr_assert_str_eq(c.pid_file, w->pid_file);
	/* the TCP export's options: NULL in @w is their default, empty */
	cr_assert_str_eq(c.nbd_listen, w->nbd_listen ? w->nbd_listen : "");
	cr_assert_str_eq(c.nbd_tls_psk, w->nbd_tls_psk ? w->nbd_tls_psk : "");
	cr_assert_str_eq(c.nbd_tls_cert, w->nbd_tls_cert ? w->nbd_tls_cert : "");
	cr_assert_str_eq(c.nbd_tls_key, w->nbd_tls_key ? w->nbd_tls_key : "");
	cr_assert_str_eq(c.nbd_tls_ca, w->nbd_tls_ca ? w->nbd_tls_ca : "");
	cr_assert_str_eq(c.admin_group, w->admin_group);
	cr_assert_eq(c.cache_size, w->cache_size);
	cr_assert_eq(c.txg_timeout, w->txg_timeout);
	cr_assert_eq(c.scrub_rate, w->scrub_rate);
	cr_assert_eq(c.workers, w->workers);
	cr_assert_eq(c.log_level, w->log_level);
	cr_assert_str_eq(c.log_target, w->log_target);
	cr_assert_eq(c.max_connections, w->max_connections);
	cr_assert_eq(c.admin_connections, w->admin_connections);
	cr_assert_eq(c.max_connections_per_uid, w->max_connections_per_uid);
	cr_assert_eq(c.max_requests_per_uid, w->max_requests_per_uid);
	cr_assert_eq(c.max_frame, w->max_frame);
	cr_assert_eq(c.max_buffered, w->max_buffered);
	cr_assert_eq(c.hello_timeout, w->hello_timeout);
	cr_assert_eq(c.tls_handshake_timeout, w->tls_handshake_timeout);
	cr_assert_eq(c.max_tls_handshakes, w->max_tls_handshakes);
	cr_assert_eq(c.max_tls_handshakes_per_address, w->max_tls_handshakes_per_address);
	cr_assert_eq(c.idle_timeout, w->idle_timeout);
	cr_assert_eq(c.direct_io, w->direct_io);
	cr_assert_eq(c.io_inline, w->io_inline);
	cr_assert_eq(c.lun_mmap, w->lun_mmap);
	cr_assert_eq(c.allow_core_dumps, w->allow_core_dumps);
}

/* @text must fail with "PATH:LINE: MSG..." */
static void assert_load_error(const char *text, int line, const char *msg)
{
	char want[8192];

	cr_assert_eq(load(text), -1, "accepted:\n%s", text);
	snprintf(want, sizeof(want), "%s:%d: %s", path, line, msg);
	cr_assert_eq(strncmp(err, want, strlen(want)), 0, "got '%s'\nwant '%s...'", err, want);
}

Test(config, defaults_for_a_user_follow_xdg)
{
	assert_config(&(struct config){
		.socket = "/run/user/1000/coffer/cofferd.sock",
		.state_dir = "/home/u/.local/state/coffer",
		.socket_mode = 0660,
		.socket_group = "",
		.nbd_socket = "nbd.sock",
		.pid_file = "cofferd.pid",
		.admin_group = "",
		.cache_size = 0,
		.txg_timeout = 5,
		.scrub_rate = 64u << 20,
		.workers = 0,
		.log_level = LOG_INFO,
		.log_target = "stderr",
		.max_connections = 1024,
		.admin_connections = 16,
		.max_connections_per_uid = 256,
		.max_requests_per_uid = 4096,
		.max_frame = (16u << 20) + 16,
		.max_buffered = 1ull << 30,
		.hello_timeout = 10,
		.tls_handshake_timeout = 5,
		.max_tls_handshakes = 512,
		.max_tls_handshakes_per_address = 256,
		.idle_timeout = 600,
		.direct_io = 0,
		.io_inline = 0,
		.lun_mmap = 1,
		.allow_core_dumps = 0,
	});
}

Test(config, defaults_for_a_user_without_xdg)
{
	char longdir[200];

	config_free(&c);
	unsetenv("XDG_RUNTIME_DIR");
	unsetenv("XDG_STATE_HOME");
	setenv("HOME", "/home/x", 1);
	config_defaults_uid(&c, 1234);
	cr_assert_str_eq(c.socket, "/tmp/coffer-1234/cofferd.sock");
	cr_assert_str_eq(c.state_dir, "/home/x/.local/state/coffer");
	config_free(&c);

	/* relative XDG values are ignored, as the XDG spec asks */
	setenv("XDG_RUNTIME_DIR", "run", 1);
	setenv("XDG_STATE_HOME", "state", 1);
	config_defaults_uid(&c, 1234);
	cr_assert_str_eq(c.socket, "/tmp/coffer-1234/cofferd.sock");
	cr_assert_str_eq(c.state_dir, "/home/x/.local/state/coffer");
	config_free(&c);

	/* a runtime dir too deep for sun_path falls back to /tmp */
	memset(longdir, 'd', sizeof(longdir) - 1);
	longdir[0] = '/';
	longdir[sizeof(longdir) - 1] = '\0';
	setenv("XDG_RUNTIME_DIR", longdir, 1);
	config_defaults_uid(&c, 1234);
	cr_assert_str_eq(c.socket, "/tmp/coffer-1234/cofferd.sock");
}

Test(config, defaults_for_root_ignore_the_environment)
{
	config_free(&c);
	config_defaults_uid(&c, 0);
	cr_assert_str_eq(c.socket, "/run/coffer/cofferd.sock");
	cr_assert_str_eq(c.state_dir, "/var/lib/coffer");
	cr_assert_eq(c.txg_timeout, 5);
}

Test(config, defaults_and_default_socket_use_the_effective_uid)
{
	struct config d;

	config_free(&c);
	config_defaults(&c);
	config_defaults_uid(&d, geteuid());
	cr_assert_str_eq(c.socket, d.socket);
	cr_assert_str_eq(c.state_dir, d.state_dir);
	cr_assert_str_eq(sockpath_default(), d.socket);
	/* static storage, not a new string per call */
	cr_assert_eq(sockpath_default(), sockpath_default());
	config_free(&d);
}

Test(config, every_option_is_parsed)
{
	cr_assert_eq(load("# all of them\n"
			  "[cofferd]\n"
			  "socket = /srv/c.sock\n"
			  "socket_mode = 0600\n"
			  "socket_group = storage\n"
			  "nbd_socket = /srv/nbd.sock\n"
			  "pid_file = /srv/run/cofferd.pid\n"
			  "nbd_listen = [::1]:10809\n"
			  "nbd_tls_psk = /etc/coffer/nbd.psk\n"
			  "nbd_tls_cert = /etc/coffer/cert.pem\n"
			  "nbd_tls_key = /etc/coffer/key.pem\n"
			  "nbd_tls_ca = /etc/coffer/ca.pem\n"
			  "admin_group = wheel\n"
			  "state_dir = /srv/state\n"
			  "cache_size = 2G\n"
			  "txg_timeout = 300\n"
			  "scrub_rate = 1M\n"
			  "workers = 256\n"
			  "log_level = debug\n"
			  "log_target = /var/log/cofferd.log\n"
			  "max_connections = 7\n"
			  "admin_connections = 0\n"
			  "max_connections_per_uid = 3\n"
			  "max_requests_per_uid = 9\n"
			  "max_frame = 64K\n"
			  "max_buffered = 3M\n"
			  "hello_timeout = 2\n"
			  "tls_handshake_timeout = 3\n"
			  "max_tls_handshakes = 20\n"
			  "max_tls_handshakes_per_address = 4\n"
			  "idle_timeout = 0\n"
			  "direct_io = yes\n"
			  "io_inline = yes\n"
			  "lun_mmap = no\n"
			  "allow_core_dumps = yes\n"),
		     0, "%s", err);
	assert_config(&(struct config){
		.socket = "/srv/c.sock",
		.socket_mode = 0600,
		.socket_group = "storage",
		.nbd_socket = "/srv/nbd.sock",
		.pid_file = "/srv/run/cofferd.pid",
		.nbd_listen = "[::1]:10809",
		.nbd_tls_psk = "/etc/coffer/nbd.psk",
		.nbd_tls_cert = "/etc/coffer/cert.pem",
		.nbd_tls_key = "/etc/coffer/key.pem",
		.nbd_tls_ca = "/etc/coffer/ca.pem",
		.admin_group = "wheel",
		.state_dir = "/srv/state",
		.cache_size = 2ull << 30,
		.txg_timeout = 300,
		.scrub_rate = 1u << 20,
		.workers = 256,
		.log_level = LOG_DEBUG,
		.log_target = "/var/log/cofferd.log",
		.max_connections = 7,
		.admin_connections = 0,
		.max_connections_per_uid = 3,
		.max_requests_per_uid = 9,
		.max_frame = 64u << 10,
		.max_buffered = 3u << 20,
		.hello_timeout = 2,
		.tls_handshake_timeout = 3,
		.max_tls_handshakes = 20,
		.max_tls_handshakes_per_address = 4,
		.idle_timeout = 0,
		.direct_io = 1,
		.io_inline = 1,
		.lun_mmap = 0,
		.allow_core_dumps = 1,
	});
}

Test(config, value_spellings)
{
	static const struct {
		const char *line;
		uint64_t cache;
	} sizes[] = {
		{ "cache_size = 0", 0 },          { "cache_size = 512", 512 },
		{ "cache_size = 4k", 4096 },      { "cache_size = 4KiB", 4096 },
		{ "cache_size = 16MB", 16 << 20 }, { "cache_size = 3T", 3ull << 40 },
		{ "cache_size = 1024T", 1ull << 50 },
		/* the one size grammar (common/size.c), as coffer and zfs take it */
		{ "cache_size = 1.5G", 3ull << 29 }, { "cache_size = 1Gb", 1ull << 30 },
		{ "cache_size = 1P", 1ull << 50 },   { "cache_size = 0.5k", 512 },
	};
	char text[256];

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		snprintf(text, sizeof(text), "[cofferd]\n%s\n", sizes[i].line);
		cr_assert_eq(load(text), 0, "%s: %s", sizes[i].line, err);
		cr_assert_eq(c.cache_size, sizes[i].cache, "%s", sizes[i].line);
	}
	static const char *const bools[] = { "yes", "true", "on", "1", "YES", "True",
					     "no", "false", "off", "0", "No", "OFF" };
	for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++) {
		snprintf(text, sizeof(text), "[cofferd]\ndirect_io = %s\n", bools[i]);
		cr_assert_eq(load(text), 0, "%s: %s", bools[i], err);
		cr_assert_eq(c.direct_io, i < 6, "%s", bools[i]);
	}
	static const char *const levels[] = { "err", "warning", "notice", "info", "debug" };
	for (size_t i = 0; i < 5; i++) {
		snprintf(text, sizeof(text), "[cofferd]\nlog_level = %s\n", levels[i]);
		cr_assert_eq(load(text), 0, "%s: %s", levels[i], err);
		cr_assert_eq(c.log_level, LOG_ERR + (int)i);
	}
	cr_assert_eq(load("[cofferd]\nsocket_mode = 660\nlog_target = syslog\n"), 0, "%s", err);
	cr_assert_eq(c.socket_mode, 0660);
	cr_assert_str_eq(c.log_target, "syslog");
	/* groups may be emptied again */
	cr_assert_eq(load("[cofferd]\nsocket_group = a\n"), 0);
	cr_assert_eq(load("[cofferd]\nsocket_group =\n"), 0, "%s", err);
	cr_assert_str_eq(c.socket_group, "");
}

Test(config, bad_values_name_file_line_and_option)
{
	static const struct {
		const char *line, *msg;
	} bad[] = {
		{ "socket = run/c.sock", "bad value for 'socket': 'run/c.sock' is not an absolute path" },
		{ "socket =", "bad value for 'socket': '' is not an absolute path" },
		{ "socket = /xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
		  "bad value for 'socket': path is longer than 107 bytes" },
		{ "nbd_socket = run/nbd.sock", "bad value for 'nbd_socket': 'run/nbd.sock' is not "
					       "empty, a file name or an absolute path" },
		{ "nbd_socket = ..", "bad value for 'nbd_socket': '..' is not empty" },
		{ "nbd_socket = /xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
		  "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
		  "bad value for 'nbd_socket': path is longer than 107 bytes" },
		{ "pid_file = run/cofferd.pid", "bad value for 'pid_file': 'run/cofferd.pid' is not "
					      "empty, a file name or an absolute path" },
		{ "nbd_listen = 10809", "bad value for 'nbd_listen': '10809' is not HOST:PORT" },
		{ "nbd_listen = ::1:10809", "bad value for 'nbd_listen': '::1:10809' is not HOST:PORT" },
		{ "nbd_listen = [::1]10809", "bad value for 'nbd_listen': '[::1]10809' is not" },
		{ "nbd_listen = :10809", "bad value for 'nbd_listen': ':10809' is not HOST:PORT" },
		{ "nbd_listen = host:65536", "bad value for 'nbd_listen': 'host:65536' is not" },
		{ "nbd_listen = host:-1", "bad value for 'nbd_listen': 'host:-1' is not" },
		{ "nbd_listen = host:", "bad value for 'nbd_listen': 'host:' is not" },
		{ "nbd_tls_psk = keys.psk", "bad value for 'nbd_tls_psk': 'keys.psk' is not an absolute" },
		{ "nbd_tls_ca = ca.pem", "bad value for 'nbd_tls_ca': 'ca.pem' is not an absolute" },
		{ "socket_mode = 0778", "bad value for 'socket_mode': '0778' is not an octal mode" },
		{ "socket_mode = 1777", "bad value for 'socket_mode': '1777' is not an octal mode" },
		{ "socket_mode = rw", "bad value for 'socket_mode'" },
		{ "socket_mode =", "bad value for 'socket_mode'" },
		{ "state_dir = ~/state", "bad value for 'state_dir': '~/state' is not an absolute" },
		{ "cache_size = 12X", "bad value for 'cache_size': '12X' is not a size" },
		{ "cache_size = 1.1K", "bad value for 'cache_size': '1.1K' is not a size" },
		{ "cache_size = -1", "bad value for 'cache_size'" },
		{ "cache_size = 1 G", "bad value for 'cache_size'" },
		{ "cache_size = 2P", "bad value for 'cache_size': '2P' is out of range" },
		{ "cache_size = 1GBB", "bad value for 'cache_size'" },
		{ "cache_size = 1025T", "bad value for 'cache_size': '1025T' is out of range" },
		{ "cache_size = 99999999999999999999", "bad value for 'cache_size'" },
		{ "cache_size = 17179869184T", "bad value for 'cache_size'" },
		{ "txg_timeout = 0", "bad value for 'txg_timeout': '0' is out of range: expected a "
				     "whole number from 1 to 300" },
		{ "txg_timeout = 301", "bad value for 'txg_timeout': '301' is out of range" },
		{ "txg_timeout = 5s", "bad value for 'txg_timeout': '5s' is not a whole number" },
		{ "txg_timeout = 0x10", "bad value for 'txg_timeout'" },
		{ "txg_timeout = +5", "bad value for 'txg_timeout'" },
		{ "workers = 257", "bad value for 'workers': '257' is out of range" },
		{ "workers = -1", "bad value for 'workers'" },
		{ "workers = four", "bad value for 'workers'" },
		{ "workers = 4 # four", "bad value for 'workers': '4 # four'" },
		{ "log_level = verbose", "bad value for 'log_level': 'verbose' is not one of err" },
		{ "log_level = ERR", "bad value for 'log_level'" },
		{ "log_level = emerg", "bad value for 'log_level'" },
		{ "log_target = cofferd.log", "bad value for 'log_target': 'cofferd.log' is not "
					      "stderr, syslog or an absolute file path" },
		{ "log_target =", "bad value for 'log_target'" },
		{ "max_connections = 0", "bad value for 'max_connections': '0' is out of range" },
		{ "max_connections = 65537", "bad value for 'max_connections'" },
		{ "admin_connections = 65537", "bad value for 'admin_connections'" },
		{ "max_connections_per_uid = 0",
		  "bad value for 'max_connections_per_uid': '0' is out of range" },
		{ "max_requests_per_uid = 0", "bad value for 'max_requests_per_uid'" },
		{ "max_requests_per_uid = 1048577", "bad value for 'max_requests_per_uid'" },
		{ "max_buffered = 1023K", "bad value for 'max_buffered': '1023K' is out of range" },
		{ "max_buffered = 2T", "bad value for 'max_buffered'" },
		{ "hello_timeout = 0", "bad value for 'hello_timeout': '0' is out of range" },
		{ "hello_timeout = 3601", "bad value for 'hello_timeout'" },
		{ "tls_handshake_timeout = 0",
		  "bad value for 'tls_handshake_timeout': '0' is out of range" },
		{ "tls_handshake_timeout = 3601", "bad value for 'tls_handshake_timeout'" },
		{ "max_tls_handshakes = 0", "bad value for 'max_tls_handshakes': '0' is out of range" },
		{ "max_tls_handshakes_per_address = 65537",
		  "bad value for 'max_tls_handshakes_per_address'" },
		{ "idle_timeout = 604801", "bad value for 'idle_timeout'" },
		{ "idle_timeout = 10m", "bad value for 'idle_timeout': '10m' is not a whole number" },
		{ "max_frame = 65535", "bad value for 'max_frame': '65535' is out of range" },
		{ "max_frame = 257M", "bad value for 'max_frame': '257M' is out of range" },
		{ "max_frame = 4G", "bad value for 'max_frame'" },
		{ "direct_io = maybe", "bad value for 'direct_io': 'maybe' is not yes or no" },
		{ "direct_io =", "bad value for 'direct_io'" },
	};
	char text[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* the bad line is line 4, after a comment and a good option */
		snprintf(text, sizeof(text), "# test\n[cofferd]\nsocket_group = g\n%s\nworkers_x = 1\n",
			 bad[i].line);
		assert_load_error(text, 4, bad[i].msg);
	}
}

/*
 * @text loads, and @resolve (config_nbd_socket, config_pid_file) returns
 * @want for it: 1 with the path @where, 0 for off, or an error.
 */
static void assert_resolves(int (*resolve)(const struct config *, char *, size_t),
			    const char *text, int want, const char *where)
{
	char p[PATH_MAX];

	cr_assert_eq(load(text), 0, "%s", err);
	cr_assert_eq(resolve(&c, p, sizeof(p)), want, "%s", text);
	if (want == 1)
		cr_assert_str_eq(p, where, "%s", text);
}

/* A bare name is beside the control socket, wherever that is; "" is off. */
Test(config, nbd_socket_resolves_beside_the_control_socket)
{
	assert_resolves(config_nbd_socket, "[cofferd]\nsocket = /srv/x/c.sock\n", 1,
			"/srv/x/nbd.sock");
	assert_resolves(config_nbd_socket, "[cofferd]\nsocket = /c.sock\nnbd_socket = b.sock\n", 1,
			"/b.sock");
	assert_resolves(config_nbd_socket, "[cofferd]\nnbd_socket = /run/n.sock\n", 1,
			"/run/n.sock");
	assert_resolves(config_nbd_socket, "[cofferd]\nnbd_socket =\n", 0, NULL);
	/* a name that fits alone but not beside a long socket path */
	assert_resolves(config_nbd_socket,
			"[cofferd]\nsocket = /aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
			"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/c\n"
			"nbd_socket = nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn\n",
			-ENAMETOOLONG, NULL);
}

/* The pid file resolves as nbd_socket does, and may be longer than a socket's path. */
Test(config, pid_file_resolves_beside_the_control_socket)
{
	char p[PATH_MAX], longname[300];

	assert_resolves(config_pid_file, "[cofferd]\nsocket = /srv/x/c.sock\n", 1,
			"/srv/x/cofferd.pid");
	assert_resolves(config_pid_file, "[cofferd]\npid_file = /run/other.pid\n", 1,
			"/run/other.pid");
	assert_resolves(config_pid_file, "[cofferd]\npid_file =\n", 0, NULL);
	memset(longname, 'p', sizeof(longname) - 1);
	longname[0] = '/';
	longname[sizeof(longname) - 1] = '\0';
	cr_assert_eq(config_set(&c, "pid_file", longname, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_pid_file(&c, p, sizeof(p)), 1);
	cr_assert_str_eq(p, longname);
	cr_assert_eq(config_pid_file(&c, p, 100), -ENAMETOOLONG);
}

Test(config, nbd_listen_splits_into_host_and_port)
{
	char host[64];
	unsigned port;

	cr_assert_eq(config_hostport_split("127.0.0.1:10809", host, sizeof(host), &port), 0);
	cr_assert_str_eq(host, "127.0.0.1");
	cr_assert_eq(port, 10809);
	cr_assert_eq(config_hostport_split("[fe80::1]:0", host, sizeof(host), &port), 0);
	cr_assert_str_eq(host, "fe80::1");
	cr_assert_eq(port, 0);
	cr_assert_eq(config_hostport_split("nbd.example.org:65535", host, sizeof(host), &port), 0);
	cr_assert_str_eq(host, "nbd.example.org");
	cr_assert_eq(port, 65535);
	/* a host longer than the caller's buffer is refused, not cut */
	cr_assert_eq(config_hostport_split("nbd.example.org:1", host, 8, &port), -1);
	/* and set back to empty, the export is off */
	cr_assert_eq(load("[cofferd]\nnbd_listen = 0.0.0.0:10809\nnbd_listen_x = 1\n"), -1);
	cr_assert_eq(load("[cofferd]\nnbd_listen =\nnbd_tls_psk =\n"), 0, "%s", err);
	cr_assert_str_eq(c.nbd_listen, "");
	cr_assert_str_eq(c.nbd_tls_psk, "");
}

Test(config, unknown_option_is_reported_with_a_hint)
{
	/* cofferd.conf(5)'s example: one letter short */
	assert_load_error("[cofferd]\n\n\ncach_size = 1G\n", 4,
			  "unknown option 'cach_size' (did you mean 'cache_size'?)");
	assert_load_error("[cofferd]\nfrobnicate = 1\n", 2, "unknown option 'frobnicate'");
	cr_assert_str_eq(strrchr(err, ':') + 2, "unknown option 'frobnicate'");
	assert_load_error("[cofferd]\ncache-size = 1G\n", 2,
			  "unknown option 'cache-size' (did you mean 'cache_size'?)");
	assert_load_error("[cofferd]\nCache_Size = 1G\n", 2,
			  "unknown option 'Cache_Size' (did you mean 'cache_size'?)");
}

Test(config, duplicate_option_names_both_lines)
{
	assert_load_error("[cofferd]\nworkers = 2\ntxg_timeout = 3\nworkers = 2\n", 4,
			  "duplicate option 'workers' (first set on line 2)");
}

Test(config, sections_other_than_cofferd_are_rejected)
{
	assert_load_error("[cofferd]\nworkers = 2\n[cofferd2]\n", 3,
			  "unknown section [cofferd2], expected [cofferd]");
	assert_load_error("[cofferd]\nworkers = 2\n  [other]\nfoo = 1\n", 3,
			  "unknown section [other]");
	assert_load_error("workers = 2\n[cofferd]\n", 1,
			  "option 'workers' outside the [cofferd] section");
	/* the section may be repeated: it is the same section */
	cr_assert_eq(load("[cofferd]\nworkers = 2\n[cofferd]\ntxg_timeout = 9\n"), 0, "%s", err);
	cr_assert_eq(c.txg_timeout, 9);
}

Test(config, syntax_errors_and_long_lines_are_rejected)
{
	char text[600];

	assert_load_error("[cofferd]\nworkers = 2\nthis is not an option\n", 3, "syntax error");
	assert_load_error("[cofferd\nworkers = 2\n", 1, "syntax error");
	/* the first error wins, whatever its kind */
	assert_load_error("[cofferd]\ngarbage\nnope = 1\n", 2, "syntax error");
	assert_load_error("[cofferd]\nnope = 1\ngarbage\n", 2, "unknown option 'nope'");
	/* inih would split a long line in two and parse its tail as an option */
	memset(text, 0, sizeof(text));
	strcpy(text, "[cofferd]\nlog_target = /");
	memset(text + strlen(text), 'x', 400);
	strcat(text, "\nworkers = 1\n");
	assert_load_error(text, 2, "line is longer than");
}

Test(config, comments_blanks_bom_crlf_and_indentation)
{
	cr_assert_eq(load("\xef\xbb\xbf# comment\n"
			  "; another\n"
			  "\n"
			  "   [cofferd]\r\n"
			  "\tworkers = 3 ; inline comment\r\n"
			  "    txg_timeout=7\n"
			  "  # indented comment\n"
			  "socket_group = my group\n"
			  "max_connections = 10"), /* no newline at the end */
		     0, "%s", err);
	cr_assert_eq(c.workers, 3);
	/* an indented line is an option of its own, not a continuation of the one before */
	cr_assert_eq(c.txg_timeout, 7);
	cr_assert_str_eq(c.socket_group, "my group");
	cr_assert_eq(c.max_connections, 10);
}

Test(config, failed_load_leaves_the_config_untouched)
{
	cr_assert_eq(load("[cofferd]\nsocket = /a.sock\nworkers = 5\n"), 0, "%s", err);
	cr_assert_eq(load("[cofferd]\nsocket = /b.sock\nworkers = 6\ncache_size = lots\n"), -1);
	cr_assert_str_eq(c.socket, "/a.sock");
	cr_assert_eq(c.workers, 5);
	cr_assert_eq(c.cache_size, 0);
}

Test(config, missing_file_is_an_error)
{
	char p[4300];

	snprintf(p, sizeof(p), "%s/nope.conf", dir);
	cr_assert_eq(config_load(&c, p, err, sizeof(err)), -1);
	cr_assert(strstr(err, "nope.conf: No such file or directory"), "%s", err);
	/* an empty file is fine and changes nothing */
	cr_assert_eq(load(""), 0, "%s", err);
	cr_assert_eq(c.txg_timeout, 5);
	config_free(NULL);
}

Test(config, set_and_dump_round_trip)
{
	struct config d;
	char dump[4300], *buf = NULL;
	size_t len = 0;
	FILE *f;

	cr_assert_eq(config_set(&c, "cache_size", "1G", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_set(&c, "log_level", "notice", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_set(&c, "admin_group", "ops", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_set(&c, "direct_io", "on", err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(config_set(&c, "workers", "999", err, sizeof(err)), -1);
	cr_assert_str_eq(err, "workers: '999' is out of range: expected a whole number from 0 to 256");
	cr_assert_eq(c.workers, 0);
	cr_assert_eq(config_set(&c, "nope", "1", err, sizeof(err)), -1);
	cr_assert_str_eq(err, "unknown option 'nope'");

	f = open_memstream(&buf, &len);
	cr_assert(f);
	fputs("[cofferd]\n", f);
	cr_assert_eq(config_dump(&c, f), 0);
	fclose(f);
	cr_assert(strstr(buf, "socket_mode = 0660\n"), "%s", buf);
	cr_assert(strstr(buf, "log_level = notice\n"), "%s", buf);
	snprintf(dump, sizeof(dump), "%s/dump.conf", dir);
	write_file(dump, buf);
	free(buf);
	config_defaults_uid(&d, 0);
	cr_assert_eq(config_load(&d, dump, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(d.socket, c.socket);
	cr_assert_str_eq(d.state_dir, c.state_dir);
	cr_assert_str_eq(d.admin_group, "ops");
	cr_assert_eq(d.cache_size, 1ull << 30);
	cr_assert_eq(d.log_level, LOG_NOTICE);
	cr_assert_eq(d.direct_io, 1);
	cr_assert_eq(d.max_frame, c.max_frame);
	config_free(&d);
}

static char *slurp(const char *p)
{
	FILE *f = fopen(p, "r");
	char *buf;
	long n;

	cr_assert(f, "%s: %s", p, strerror(errno));
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = calloc(1, (size_t)n + 1);
	cr_assert(buf);
	cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

Test(config, shipped_example_parses_and_changes_nothing)
{
	char p[4300];
	struct config d;

	snprintf(p, sizeof(p), "%s/conf/cofferd.conf", SRCDIR);
	config_defaults_uid(&d, 1000);
	cr_assert_eq(config_load(&c, p, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(c.socket, d.socket);
	cr_assert_eq(c.txg_timeout, d.txg_timeout);
	cr_assert_eq(c.max_frame, d.max_frame);
	config_free(&d);
}

/*
 * The example documents every option, in table order, with its real default:
 * uncommenting every "# name = value" line must load and give root's defaults.
 */
Test(config, shipped_example_lists_every_option_with_its_default)
{
	char p[4300], out[4300], line[512];
	FILE *in, *o;
	size_t next = 0;
	struct config root, got;

	snprintf(p, sizeof(p), "%s/conf/cofferd.conf", SRCDIR);
	snprintf(out, sizeof(out), "%s/uncommented.conf", dir);
	in = fopen(p, "r");
	cr_assert(in, "%s: %s", p, strerror(errno));
	o = fopen(out, "w");
	cr_assert(o);
	while (fgets(line, sizeof(line), in)) {
		const char *name = config_option_name(next);

		if (name && strncmp(line, "# ", 2) == 0 && strncmp(line + 2, name, strlen(name)) == 0 &&
		    strncmp(line + 2 + strlen(name), " =", 2) == 0) {
			fputs(line + 2, o);
			next++;
		} else {
			fputs(line, o);
		}
	}
	fclose(in);
	fclose(o);
	cr_assert_null(config_option_name(next), "option '%s' missing or out of table order",
		       config_option_name(next));

	config_defaults_uid(&root, 0);
	config_defaults_uid(&got, 1000);
	cr_assert_eq(config_load(&got, out, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(got.socket, root.socket);
	cr_assert_str_eq(got.state_dir, root.state_dir);
	cr_assert_eq(got.socket_mode, root.socket_mode);
	cr_assert_str_eq(got.socket_group, root.socket_group);
	cr_assert_str_eq(got.nbd_socket, root.nbd_socket);
	cr_assert_str_eq(got.pid_file, root.pid_file);
	cr_assert_str_eq(got.admin_group, root.admin_group);
	cr_assert_eq(got.cache_size, root.cache_size);
	cr_assert_eq(got.txg_timeout, root.txg_timeout);
	cr_assert_eq(got.scrub_rate, root.scrub_rate);
	cr_assert_eq(got.workers, root.workers);
	cr_assert_eq(got.log_level, root.log_level);
	cr_assert_str_eq(got.log_target, root.log_target);
	cr_assert_eq(got.max_connections, root.max_connections);
	cr_assert_eq(got.admin_connections, root.admin_connections);
	cr_assert_eq(got.max_connections_per_uid, root.max_connections_per_uid);
	cr_assert_eq(got.max_requests_per_uid, root.max_requests_per_uid);
	cr_assert_eq(got.max_frame, root.max_frame);
	cr_assert_eq(got.max_buffered, root.max_buffered);
	cr_assert_eq(got.hello_timeout, root.hello_timeout);
	cr_assert_eq(got.tls_handshake_timeout, root.tls_handshake_timeout);
	cr_assert_eq(got.max_tls_handshakes, root.max_tls_handshakes);
	cr_assert_eq(got.max_tls_handshakes_per_address, root.max_tls_handshakes_per_address);
	cr_assert_eq(got.idle_timeout, root.idle_timeout);
	cr_assert_eq(got.direct_io, root.direct_io);
	cr_assert_eq(got.io_inline, root.io_inline);
	cr_assert_eq(got.lun_mmap, root.lun_mmap);
	config_free(&root);
	config_free(&got);
}

Test(config, man_page_has_one_item_per_option_in_table_order)
{
	char p[4300], want[128], *page, *at;
	size_t i;

	snprintf(p, sizeof(p), "%s/conf/cofferd.conf.5", SRCDIR);
	page = slurp(p);
	at = page;
	for (i = 0; config_option_name(i); i++) {
		snprintf(want, sizeof(want), "\n.It Cm %s Ns", config_option_name(i));
		at = strstr(at, want);
		cr_assert(at, "cofferd.conf.5: no '%s' after the previous option", want + 1);
	}
	free(page);
}

/* ---- log.c ---- */

static int evaluated;

static int side_effect(void)
{
	return ++evaluated;
}

static char *log_file(void)
{
	static char p[4300];

	snprintf(p, sizeof(p), "%s/cofferd.log", dir);
	return p;
}

static void assert_matches(const char *text, const char *re)
{
	regex_t rx;

	cr_assert_eq(regcomp(&rx, re, REG_EXTENDED | REG_NEWLINE | REG_NOSUB), 0);
	cr_assert_eq(regexec(&rx, text, 0, NULL, 0), 0, "'%s' does not match /%s/", text, re);
	regfree(&rx);
}

Test(log, file_lines_carry_timestamp_and_level)
{
	char *text;

	cr_assert_eq(log_open(log_file(), LOG_INFO), 0);
	log_info("pool %s: opened %d luns", "tank", 3);
	log_err("boom");
	log_debug("hidden %d", side_effect());
	log_close();
	cr_assert_eq(evaluated, 0, "arguments of a disabled level must not be evaluated");
	text = slurp(log_file());
	assert_matches(text, "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
			     "info: pool tank: opened 3 luns\n"
			     "[0-9T:.Z-]+ err: boom\n$");
	free(text);
	struct stat st;

	cr_assert_eq(stat(log_file(), &st), 0);
	cr_assert_eq(st.st_mode & 0777 & ~0640, 0, "mode %o", st.st_mode & 0777);
}

Test(log, levels_filter_by_priority)
{
	char *text;

	cr_assert_eq(log_open(log_file(), LOG_WARNING), 0);
	cr_assert_eq(log_level, LOG_WARNING);
	log_debug("d");
	log_info("i");
	log_warn("w");
	log_err("e");
	log_close();
	text = slurp(log_file());
	assert_matches(text, "^[^\n]* warning: w\n[^\n]* err: e\n$");
	free(text);
}

Test(log, a_message_is_one_line)
{
	char *text, big[6000];

	memset(big, 'y', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	cr_assert_eq(log_open(log_file(), LOG_DEBUG), 0);
	log_warn("ds %s: bad\nname\r", "a\nb");
	log_info("%s", big);
	log_close();
	text = slurp(log_file());
	assert_matches(text, "^[^\n]* warning: ds a b: bad name \n[^\n]* info: y+\\.\\.\\.\n$");
	cr_assert_leq(strlen(strchr(text, '\n') + 1), 4096);
	free(text);
}

Test(log, reopen_follows_a_rotated_file)
{
	char rotated[4400], *a, *b;

	snprintf(rotated, sizeof(rotated), "%s.1", log_file());
	cr_assert_eq(log_open(log_file(), LOG_INFO), 0);
	log_info("before");
	cr_assert_eq(rename(log_file(), rotated), 0);
	log_info("still old");
	cr_assert_eq(log_reopen(), 0);
	log_info("after");
	log_close();
	a = slurp(rotated);
	b = slurp(log_file());
	assert_matches(a, "^[^\n]* info: before\n[^\n]* info: still old\n$");
	assert_matches(b, "^[^\n]* info: after\n$");
	free(a);
	free(b);
}

static void redirect_stderr(const char *p)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	cr_assert_geq(fd, 0);
	cr_assert_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	close(fd);
}

Test(log, stderr_under_journald_uses_priority_prefixes)
{
	struct stat st;
	char js[64], *text;

	redirect_stderr(log_file());
	cr_assert_eq(fstat(STDERR_FILENO, &st), 0);
	snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
		 (unsigned long long)st.st_ino);
	setenv("JOURNAL_STREAM", js, 1);
	cr_assert_eq(log_open("stderr", LOG_DEBUG), 0);
	log_warn("disk %d slow", 2);
	log_debug("dbg");
	log_close();
	text = slurp(log_file());
	cr_assert_str_eq(text, "<4>disk 2 slow\n<7>dbg\n");
	free(text);
}

Test(log, stderr_elsewhere_gets_timestamps)
{
	char *text;

	redirect_stderr(log_file());
	/* inherited from a parent whose stderr was the journal: not ours */
	setenv("JOURNAL_STREAM", "1:1", 1);
	cr_assert_eq(log_open("stderr", LOG_INFO), 0);
	log_warn("x");
	log_close();
	text = slurp(log_file());
	assert_matches(text, "^[0-9]{4}-[^ ]+Z warning: x\n$");
	free(text);
}

Test(log, bad_targets_are_refused)
{
	char p[4400];

	cr_assert_eq(log_open("relative.log", LOG_INFO), -EINVAL);
	cr_assert_eq(log_open(NULL, LOG_INFO), -EINVAL);
	snprintf(p, sizeof(p), "%s/no/such/dir.log", dir);
	cr_assert_eq(log_open(p, LOG_INFO), -ENOENT);
	cr_assert_eq(log_reopen(), 0, "stderr needs no reopening");
	/* opens without writing: a test should not leave lines in the system log */
	cr_assert_eq(log_open("syslog", LOG_INFO), 0);
	cr_assert_eq(log_reopen(), 0);
}

Test(log, errno_survives_logging)
{
	cr_assert_eq(log_open(log_file(), LOG_INFO), 0);
	errno = EAGAIN;
	log_info("x");
	cr_assert_eq(errno, EAGAIN);
}

#define NTHREADS 4
#define PER_THREAD 2000

static void *writer(void *arg)
{
	long id = (long)arg;

	for (int i = 0; i < PER_THREAD; i++) {
		log_info("thread %ld message %d %s", id, i, "padding-padding-padding-padding");
		if (id == 0 && i % 500 == 0)
			log_reopen();
	}
	return NULL;
}

Test(log, threads_never_interleave_lines)
{
	pthread_t t[NTHREADS];
	char *text, *line, *save = NULL;
	int count = 0;
	regex_t rx;

	cr_assert_eq(log_open(log_file(), LOG_INFO), 0);
	for (long i = 0; i < NTHREADS; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, writer, (void *)i), 0);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(t[i], NULL);
	log_close();
	text = slurp(log_file());
	cr_assert_eq(regcomp(&rx, "^[0-9T:.Z-]+ info: thread [0-3] message [0-9]+ "
				  "padding-padding-padding-padding$",
			     REG_EXTENDED | REG_NOSUB),
		     0);
	for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		cr_assert_eq(regexec(&rx, line, 0, NULL, 0), 0, "torn line '%s'", line);
		count++;
	}
	cr_assert_eq(count, NTHREADS * PER_THREAD);
	regfree(&rx);
	free(text);
}

/* found by fuzz_config: "x =;g" is the value ";g", which a dump wrote back as
 * "x = ;g", a comment, so the dump did not load back the same */
Test(config, group_names_are_the_portable_set)
{
	assert_load_error("[cofferd]\nsocket_group =;coffer\n", 2,
			  "bad value for 'socket_group': ';coffer' is not a group name");
	assert_load_error("[cofferd]\nadmin_group = wheel#2\n", 2,
			  "bad value for 'admin_group'");
	cr_assert_eq(load("[cofferd]\nadmin_group = storage-admins_2.x\n"), 0, "%s", err);
	cr_assert_str_eq(c.admin_group, "storage-admins_2.x");
	cr_assert_eq(load("[cofferd]\nadmin_group = domain admins\n"), 0, "%s", err);
}

/* pool import scans the block devices unless told otherwise, as zpool import does */
Test(config, lun_search_scans_the_block_devices_by_default_and_empty_turns_it_off)
{
	config_free(&c);
	config_defaults_uid(&c, 0);
	cr_assert_str_eq(c.lun_search, "/dev/disk/by-id:/dev");
	config_free(&c);
	config_defaults_uid(&c, 1000);
	/* users too: what they cannot open is skipped */
	cr_assert_str_eq(c.lun_search, "/dev/disk/by-id:/dev");
	cr_assert_eq(load("[cofferd]\nlun_search =\n"), 0, "%s", err);
	cr_assert_str_eq(c.lun_search, "");
}
