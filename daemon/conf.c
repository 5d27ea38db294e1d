/* SPDX-License-Identifier: MIT */
/*
 * cofferd configuration: the option table, embedded defaults, and the INI
 * reader built on libinih.
 *
 * Every option lives in opts[] below (name, type, place in struct config,
 * default, limits); parsing, defaults, config_set, config_dump and the tests
 * all walk that one table, and conf/cofferd.conf and cofferd.conf(5) list the
 * options in its order. Adding an option means one table row plus its docs.
 *
 * Errors name the file and line ("cofferd.conf:12: unknown option 'x'").
 * libinih only hands the line number to handlers when built with
 * INI_HANDLER_LINENO, which distribution builds are not, so the file is fed
 * through ini_parse_stream() with a reader that counts lines itself. The
 * reader also rejects what inih would silently accept: over-long lines (inih
 * would split them into two "lines"), sections other than [cofferd] even
 * when empty, and indented continuation lines.
 *
 * This file never logs; callers print the error text it returns.
 */

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <syslog.h>
#include <unistd.h>

#include <ini.h>

#include "conf.h"
#include "proto.h"
#include "sockpath.h"
#include "store.h"

#define SECTION "cofferd"

enum opt_type {
	OPT_STRING,    /* any text, "" allowed */
	OPT_PATH,      /* absolute path, at most .max bytes */
	OPT_MODE,      /* octal permission bits, at most .max */
	OPT_UINT,      /* decimal integer in [.min, .max] */
	OPT_AUTO,      /* "auto" (stored as 0: the daemon picks), or OPT_UINT */
	OPT_BYTES,     /* a size: stor_parse_size(), K/M/G/T/P/E suffixes (powers of 1024) */
	OPT_BOOL,      /* yes/no, true/false, on/off, 1/0 */
	OPT_LOGLEVEL,  /* err | warning | notice | info | debug */
	OPT_LOGTARGET, /* stderr | syslog | absolute path */
	OPT_PATHS,     /* absolute paths separated by ':', "" allowed, at most .max bytes */
	OPT_SOCKNAME,  /* "" (off), a file name beside the socket, or an absolute path (.max):
			* nbd_socket, pid_file */
	OPT_HOSTPORT,  /* "" (off), or HOST:PORT ([ADDR]:PORT for IPv6), port 0 to 65535 */
	OPT_LISTEN,    /* OPT_HOSTPORT, or an absolute path of a Unix socket (.max bytes) */
};

struct config_opt {
	const char *name;
	enum opt_type type;
	size_t offset; /* of the field in struct config */
	size_t size;   /* of that field: numbers are stored at their own width */
	const char *def_str;
	uint64_t def_num;
	uint64_t min, max;
};

#define FIELD(f) offsetof(struct config, f), sizeof(((struct config *)0)->f)

/* Table order is documentation order: keep conf/cofferd.conf and the man page in step. */
static const struct config_opt opts[] = {
	/* NULL def_str: computed per user in config_defaults_uid() */
	{ "socket", OPT_PATH, FIELD(socket), .def_str = NULL, .max = CONFIG_SOCKET_MAX },
	{ "socket_mode", OPT_MODE, FIELD(socket_mode), .def_num = 0660, .max = 0777 },
	{ "socket_group", OPT_STRING, FIELD(socket_group), .def_str = "" },
	{ "nbd_socket", OPT_SOCKNAME, FIELD(nbd_socket), .def_str = "nbd.sock",
	  .max = CONFIG_SOCKET_MAX },
	{ "pid_file", OPT_SOCKNAME, FIELD(pid_file), .def_str = "cofferd.pid", .max = PATH_MAX - 1 },
	{ "nbd_listen", OPT_HOSTPORT, FIELD(nbd_listen), .def_str = "", .max = CONFIG_HOSTPORT_MAX },
	{ "metrics_listen", OPT_LISTEN, FIELD(metrics_listen), .def_str = "",
	  .max = CONFIG_SOCKET_MAX },
	{ "metrics_allow_remote", OPT_BOOL, FIELD(metrics_allow_remote), .def_num = 0 },
	/* an OPT_PATH whose default is "" may be set "" again: not used */
	{ "nbd_tls_psk", OPT_PATH, FIELD(nbd_tls_psk), .def_str = "", .max = PATH_MAX - 1 },
	{ "nbd_tls_cert", OPT_PATH, FIELD(nbd_tls_cert), .def_str = "", .max = PATH_MAX - 1 },
	{ "nbd_tls_key", OPT_PATH, FIELD(nbd_tls_key), .def_str = "", .max = PATH_MAX - 1 },
	{ "nbd_tls_ca", OPT_PATH, FIELD(nbd_tls_ca), .def_str = "", .max = PATH_MAX - 1 },
	{ "admin_group", OPT_STRING, FIELD(admin_group), .def_str = "" },
	{ "key_https_ca", OPT_PATH, FIELD(key_https_ca), .def_str = "", .max = PATH_MAX - 1 },
	{ "encryption_roots", OPT_PATH, FIELD(encryption_roots), .def_str = "",
	  .max = PATH_MAX - 1 },
	{ "state_dir", OPT_PATH, FIELD(state_dir), .def_str = NULL, .max = PATH_MAX - 1 },
	{ "lun_search", OPT_PATHS, FIELD(lun_search), .def_str = CONFIG_LUN_SEARCH_DEFAULT,
	  .max = CONFIG_LUN_SEARCH_MAX },
	{ "cache_size", OPT_BYTES, FIELD(cache_size), .def_num = 0, .max = CONFIG_CACHE_SIZE_MAX },
	{ "txg_timeout", OPT_UINT, FIELD(txg_timeout), .def_num = CONFIG_TXG_TIMEOUT_DEFAULT,
	  .min = 1, .max = CONFIG_TXG_TIMEOUT_MAX },
	{ "scrub_rate", OPT_BYTES, FIELD(scrub_rate), .def_num = CONFIG_SCRUB_RATE_DEFAULT,
	  .max = CONFIG_SCRUB_RATE_MAX },
	{ "loops", OPT_AUTO, FIELD(loops), .def_num = 0, .min = 1, .max = CONFIG_LOOPS_MAX },
	{ "workers", OPT_UINT, FIELD(workers), .def_num = 0, .max = CONFIG_WORKERS_MAX },
	{ "max_events", OPT_UINT, FIELD(max_events), .def_num = CONFIG_MAX_EVENTS_DEFAULT,
	  .min = CONFIG_MAX_EVENTS_MIN, .max = CONFIG_MAX_EVENTS_MAX },
	{ "event_hook_dir", OPT_PATH, FIELD(event_hook_dir), .def_str = "", .max = PATH_MAX - 1 },
	{ "log_level", OPT_LOGLEVEL, FIELD(log_level), .def_num = LOG_INFO },
	{ "log_target", OPT_LOGTARGET, FIELD(log_target), .def_str = "stderr",
	  .max = PATH_MAX - 1 },
	{ "max_connections", OPT_UINT, FIELD(max_connections),
	  .def_num = CONFIG_MAX_CONNECTIONS_DEFAULT, .min = 1, .max = CONFIG_MAX_CONNECTIONS_MAX },
	{ "admin_connections", OPT_UINT, FIELD(admin_connections),
	  .def_num = CONFIG_ADMIN_CONNECTIONS_DEFAULT, .max = CONFIG_MAX_CONNECTIONS_MAX },
	{ "max_connections_per_uid", OPT_UINT, FIELD(max_connections_per_uid),
	  .def_num = CONFIG_CONNECTIONS_PER_UID_DEFAULT, .min = 1, .max = CONFIG_MAX_CONNECTIONS_MAX },
	{ "max_requests_per_uid", OPT_UINT, FIELD(max_requests_per_uid),
	  .def_num = CONFIG_REQUESTS_PER_UID_DEFAULT, .min = 1, .max = CONFIG_REQUESTS_PER_UID_MAX },
	{ "max_frame", OPT_BYTES, FIELD(max_frame), .def_num = PROTO_FRAME_DEFAULT,
	  .min = CONFIG_MAX_FRAME_MIN, .max = CONFIG_MAX_FRAME_MAX },
	{ "max_buffered", OPT_BYTES, FIELD(max_buffered), .def_num = CONFIG_MAX_BUFFERED_DEFAULT,
	  .min = CONFIG_MAX_BUFFERED_MIN, .max = CONFIG_MAX_BUFFERED_MAX },
	{ "hello_timeout", OPT_UINT, FIELD(hello_timeout), .def_num = CONFIG_HELLO_TIMEOUT_DEFAULT,
	  .min = 1, .max = CONFIG_HELLO_TIMEOUT_MAX },
	{ "tls_handshake_timeout", OPT_UINT, FIELD(tls_handshake_timeout),
	  .def_num = CONFIG_TLS_HANDSHAKE_TIMEOUT_DEFAULT, .min = 1,
	  .max = CONFIG_TLS_HANDSHAKE_TIMEOUT_MAX },
	{ "max_tls_handshakes", OPT_UINT, FIELD(max_tls_handshakes),
	  .def_num = CONFIG_TLS_HANDSHAKES_DEFAULT, .min = 1, .max = CONFIG_MAX_CONNECTIONS_MAX },
	{ "max_tls_handshakes_per_address", OPT_UINT, FIELD(max_tls_handshakes_per_address),
	  .def_num = CONFIG_TLS_HANDSHAKES_PER_ADDRESS_DEFAULT, .min = 1,
	  .max = CONFIG_MAX_CONNECTIONS_MAX },
	{ "idle_timeout", OPT_UINT, FIELD(idle_timeout), .def_num = CONFIG_IDLE_TIMEOUT_DEFAULT,
	  .max = CONFIG_IDLE_TIMEOUT_MAX },
	{ "direct_io", OPT_BOOL, FIELD(direct_io), .def_num = 0 },
	{ "io_inline", OPT_BOOL, FIELD(io_inline), .def_num = 0 },
	{ "lun_mmap", OPT_BOOL, FIELD(lun_mmap), .def_num = 1 },
	{ "allow_core_dumps", OPT_BOOL, FIELD(allow_core_dumps), .def_num = 0 },
	{ "ceph_conf", OPT_PATH, FIELD(ceph_conf), .def_str = "", .max = PATH_MAX - 1 },
	{ "ceph_user", OPT_STRING, FIELD(ceph_user), .def_str = "" },
	{ "ceph_keyring", OPT_PATH, FIELD(ceph_keyring), .def_str = "", .max = PATH_MAX - 1 },
	{ "ceph_lock_timeout", OPT_UINT, FIELD(ceph_lock_timeout),
	  .def_num = STOR_RADOS_LOCK_DEFAULT, .min = CONFIG_CEPH_LOCK_TIMEOUT_MIN,
	  .max = CONFIG_CEPH_LOCK_TIMEOUT_MAX },
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static const char *const level_names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert",   [LOG_CRIT] = "crit",
	[LOG_ERR] = "err",     [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
};

const char *config_option_name(size_t i)
{
	return i < NOPTS ? opts[i].name : NULL;
}

int config_log_level_parse(const char *name)
{
	/* only the levels the daemon logs at are settable */
	for (int p = LOG_ERR; p <= LOG_DEBUG; p++)
		if (strcmp(name, level_names[p]) == 0)
			return p;
	return -1;
}

const char *config_log_level_name(int prio)
{
	if (prio >= LOG_EMERG && prio <= LOG_DEBUG)
		return level_names[prio];
	return "unknown";
}

static char *xstrdup(const char *s)
{
	char *d = strdup(s);

	/* defaults are set once at startup; without memory there is nothing to run */
	if (!d) {
		fputs("cofferd: out of memory\n", stderr);
		abort();
	}
	return d;
}

static bool is_string(const struct config_opt *o)
{
	return o->type == OPT_STRING || o->type == OPT_PATH || o->type == OPT_LOGTARGET ||
	       o->type == OPT_PATHS || o->type == OPT_SOCKNAME || o->type == OPT_HOSTPORT ||
	       o->type == OPT_LISTEN;
}

static char **str_field(struct config *c, const struct config_opt *o)
{
	return (char **)((char *)c + o->offset);
}

static void set_num(struct config *c, const struct config_opt *o, uint64_t v)
{
	void *p = (char *)c + o->offset;

	if (o->size == sizeof(uint64_t)) {
		uint64_t v64 = v;

		memcpy(p, &v64, sizeof(v64));
	} else {
		uint32_t v32 = (uint32_t)v; /* every narrower field is 32-bit (int/unsigned) */

		memcpy(p, &v32, sizeof(v32));
	}
}

static uint64_t get_num(const struct config *c, const struct config_opt *o)
{
	const void *p = (const char *)c + o->offset;

	if (o->size == sizeof(uint64_t)) {
		uint64_t v64;

		memcpy(&v64, p, sizeof(v64));
		return v64;
	}
	uint32_t v32;

	memcpy(&v32, p, sizeof(v32));
	return v32;
}

/* An absolute XDG directory from the environment, else NULL (the spec says ignore relative ones). */
static const char *xdg_dir(const char *var)
{
	const char *v = getenv(var);

	return v && v[0] == '/' ? v : NULL;
}

/* Is @value longer than the option allows? Then *@why says so. */
static int too_long(const struct config_opt *o, const char *value, const char *what, char *why,
		    size_t whylen)
{
	if (strlen(value) <= o->max)
		return 0;
	snprintf(why, whylen, "%slonger than %llu bytes", what, (unsigned long long)o->max);
	return 1;
}

static char *default_state_dir(uid_t uid)
{
	const char *st = xdg_dir("XDG_STATE_HOME"), *home = getenv("HOME");
	struct passwd pw, *pwp = NULL;
	char pwbuf[4096], path[PATH_MAX];

	if (uid == 0)
		return xstrdup("/var/lib/coffer");
	if (st && (size_t)snprintf(path, sizeof(path), "%s/coffer", st) < sizeof(path))
		return xstrdup(path);
	if (!home || home[0] != '/') {
		/* no usable $HOME (cron, some service managers): ask the password database */
		if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &pwp) == 0 && pwp &&
		    pwp->pw_dir[0] == '/')
			home = pwp->pw_dir;
		else
			home = NULL;
	}
	if (home && (size_t)snprintf(path, sizeof(path), "%s/.local/state/coffer", home) <
			    sizeof(path))
		return xstrdup(path);
	snprintf(path, sizeof(path), "/tmp/coffer-%u/state", (unsigned)uid);
	return xstrdup(path);
}

void config_defaults_uid(struct config *c, uid_t uid)
{
	char sock[PATH_MAX];

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < NOPTS; i++) {
		const struct config_opt *o = &opts[i];

		switch (o->type) {
		case OPT_STRING:
		case OPT_PATH:
		case OPT_LOGTARGET:
		case OPT_PATHS:
		case OPT_SOCKNAME:
		case OPT_HOSTPORT:
		case OPT_LISTEN:
			if (o->def_str)
				*str_field(c, o) = xstrdup(o->def_str);
			break;
		default:
			set_num(c, o, o->def_num);
			break;
		}
	}
	sockpath_default_uid(uid, sock, sizeof(sock));
	c->socket = xstrdup(sock);
	c->state_dir = default_state_dir(uid);
}

void config_defaults(struct config *c)
{
	config_defaults_uid(c, geteuid());
}

void config_free(struct config *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < NOPTS; i++) {
		const struct config_opt *o = &opts[i];

		if (is_string(o)) {
			free(*str_field(c, o));
			*str_field(c, o) = NULL;
		}
	}
}

/* Deep copy, so that a failed load can leave the caller's config untouched. */
static void config_copy(struct config *dst, const struct config *src)
{
	*dst = *src;
	for (size_t i = 0; i < NOPTS; i++) {
		const struct config_opt *o = &opts[i];
		char **f = str_field(dst, o);

		if (is_string(o) && *f)
			*f = xstrdup(*f);
	}
}

/* Plain unsigned decimal: no sign, no spaces, no base prefixes, no overflow. */
static int parse_u64(const char *s, const char **end, uint64_t *out)
{
	uint64_t v = 0;

	if (*s < '0' || *s > '9')
		return -1;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*end = s;
	*out = v;
	return 0;
}

static int parse_bool(const char *s)
{
	static const char *const yes[] = { "yes", "true", "on", "1" };
	static const char *const no[] = { "no", "false", "off", "0" };

	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return 1;
		if (strcasecmp(s, no[i]) == 0)
			return 0;
	}
	return -1;
}

static void range_text(const struct config_opt *o, char *buf, size_t len)
{
	if (o->type == OPT_BYTES)
		snprintf(buf, len, "a size from %llu to %llu bytes (suffixes K, M, G, T, P, E)",
			 (unsigned long long)o->min, (unsigned long long)o->max);
	else
		snprintf(buf, len, "%sa whole number from %llu to %llu",
			 o->type == OPT_AUTO ? "auto or " : "", (unsigned long long)o->min,
			 (unsigned long long)o->max);
}

/*
 * Parse @value for @o into @c. On failure write the reason (without file,
 * line or option name) to @why and return -1; @c is untouched then.
 */
static int set_value(struct config *c, const struct config_opt *o, const char *value, char *why,
		     size_t whylen)
{
	char range[128];
	const char *end;
	uint64_t v;
	int n;

	switch (o->type) {
	case OPT_STRING:
		/* no comment characters: config_dump() must write what loads back */
		for (const char *s = value; *s; s++)
			if (*s == ';' || *s == '#' || iscntrl((unsigned char)*s)) {
				snprintf(why, whylen, "'%s' is not a group name", value);
				return -1;
			}
		break;
	case OPT_PATH:
	case OPT_LOGTARGET:
		if (!value[0] && o->def_str && !o->def_str[0])
			break; /* an optional file, back to none */
		/* a log target is a path too, or one of the two words */
		if (value[0] != '/' && (o->type == OPT_PATH || (strcmp(value, "stderr") != 0 &&
								 strcmp(value, "syslog") != 0))) {
			snprintf(why, whylen,
				 o->type == OPT_PATH
					 ? "'%s' is not an absolute path"
					 : "'%s' is not stderr, syslog or an absolute file path",
				 value);
			return -1;
		}
		if (too_long(o, value, "path is ", why, whylen))
			return -1;
		break;
	case OPT_PATHS:
		if (too_long(o, value, "", why, whylen))
			return -1;
		/* each one absolute, none empty, no comment character (config_dump) */
		for (const char *s = value; *s; s += strcspn(s, ":"), s += *s == ':') {
			if (*s != '/' || strcspn(s, ";#") < strcspn(s, ":")) {
				snprintf(why, whylen,
					 "'%s' is not a list of absolute directories separated by ':'",
					 value);
				return -1;
			}
		}
		break;
	case OPT_SOCKNAME:
		/* a bare name lives beside the control socket, wherever that is put */
		if (value[0] != '/' && (strchr(value, '/') || !strcmp(value, ".") ||
					!strcmp(value, "..") || strcspn(value, ";#") < strlen(value))) {
			snprintf(why, whylen,
				 "'%s' is not empty, a file name or an absolute path", value);
			return -1;
		}
		if (too_long(o, value, "path is ", why, whylen))
			return -1;
		break;
	case OPT_LISTEN:
		if (value[0] == '/') {
			if (too_long(o, value, "", why, whylen))
				return -1;
			break;
		}
		/* HOST:PORT */
		__attribute__((fallthrough));
	case OPT_HOSTPORT:
		if (value[0] && config_hostport_split(value, NULL, 0, NULL) < 0) {
			snprintf(why, whylen,
				 "'%s' is not HOST:PORT ([ADDRESS]:PORT for IPv6, a port up to 65535)%s",
				 value, o->type == OPT_LISTEN ? " or an absolute path" : "");
			return -1;
		}
		if (too_long(o, value, "", why, whylen))
			return -1;
		break;
	case OPT_MODE:
		v = 0;
		for (end = value; *end >= '0' && *end <= '7' && v <= o->max; end++)
			v = v * 8 + (uint64_t)(*end - '0');
		if (end == value || *end || v > o->max) {
			snprintf(why, whylen, "'%s' is not an octal mode from 0 to %llo", value,
				 (unsigned long long)o->max);
			return -1;
		}
		set_num(c, o, v);
		return 0;
	case OPT_AUTO:
		if (!strcmp(value, "auto")) {
			set_num(c, o, 0);
			return 0;
		}
		/* fall through */
	case OPT_UINT:
	case OPT_BYTES:
		if (o->type != OPT_BYTES)
			n = parse_u64(value, &end, &v) < 0 || *end ? -EINVAL : 0;
		else
			n = stor_parse_size(value, &v); /* -ERANGE: a size, just too large */
		if (n == -EINVAL) {
			range_text(o, range, sizeof(range));
			snprintf(why, whylen, "'%s' is not %s", value, range);
			return -1;
		}
		if (n < 0 || v < o->min || v > o->max) {
			range_text(o, range, sizeof(range));
			snprintf(why, whylen, "'%s' is out of range: expected %s", value, range);
			return -1;
		}
		set_num(c, o, v);
		return 0;
	case OPT_BOOL:
		n = parse_bool(value);
		if (n < 0) {
			snprintf(why, whylen, "'%s' is not yes or no", value);
			return -1;
		}
		set_num(c, o, (uint64_t)n);
		return 0;
	case OPT_LOGLEVEL:
		n = config_log_level_parse(value);
		if (n < 0) {
			snprintf(why, whylen,
				 "'%s' is not one of err, warning, notice, info, debug", value);
			return -1;
		}
		set_num(c, o, (uint64_t)n);
		return 0;
	}
	/* the string kinds: replace the old text */
	char *dup = strdup(value);

	if (!dup) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	free(*str_field(c, o));
	*str_field(c, o) = dup;
	return 0;
}

static const struct config_opt *find_opt(const char *name)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (strcmp(opts[i].name, name) == 0)
			return &opts[i];
	return NULL;
}

/* "cach_size", "cache-size" or "Cache_Size" for cache_size: a hint for the error (typo.c). */
static const struct config_opt *near_opt(const char *name)
{
	const struct config_opt *best = NULL;
	unsigned d, bestd = UINT_MAX;

	for (size_t i = 0; i < NOPTS; i++)
		if ((d = stor_typo_distance(name, opts[i].name)) < bestd) {
			bestd = d;
			best = &opts[i];
		}
	return best;
}

int config_set(struct config *c, const char *name, const char *value, char *err, size_t errlen)
{
	const struct config_opt *o = find_opt(name);
	char why[PATH_MAX + 128];

	if (!o) {
		snprintf(err, errlen, "unknown option '%s'", name);
		return -1;
	}
	if (set_value(c, o, value, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "%s: %s", name, why);
		return -1;
	}
	return 0;
}

/* ---- the file reader ---- */

struct load_ctx {
	struct config *c;
	const char *path;
	FILE *f;
	int line;            /* line of the text last handed to inih */
	bool at_line_start;  /* the previous chunk ended a line */
	int seen[NOPTS];     /* line each option was set on, 0 = not yet */
	int err_line;        /* first error found by us, 0 = none */
	char err[PATH_MAX + 256];
};

static void load_error(struct load_ctx *x, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void load_error(struct load_ctx *x, const char *fmt, ...)
{
	va_list ap;

	if (x->err_line)
		return; /* report the first problem; the rest are often its echoes */
	x->err_line = x->line;
	va_start(ap, fmt);
	vsnprintf(x->err, sizeof(x->err), fmt, ap);
	va_end(ap);
}

/*
 * fgets() for inih that counts lines, strips leading blanks (inih would take
 * an indented line as the continuation of the previous value), rejects
 * over-long lines instead of letting inih split them, and checks section
 * headers, which inih only reports through the keys under them.
 */
static char *reader(char *str, int num, void *stream)
{
	struct load_ctx *x = stream;
	size_t len, skip;

	if (!fgets(str, num, x->f))
		return NULL;
	x->line++;
	len = strlen(str);
	if (len && str[len - 1] != '\n' && !feof(x->f)) {
		int ch;

		load_error(x, "line is longer than %d bytes", num - 2);
		while ((ch = fgetc(x->f)) != EOF && ch != '\n')
			;
		str[0] = '\0';
		return str;
	}
	/* a UTF-8 byte order mark, as some editors write, is not part of line 1 */
	skip = x->line == 1 && strncmp(str, "\xef\xbb\xbf", 3) == 0 ? 3 : 0;
	skip += strspn(str + skip, " \t");
	memmove(str, str + skip, len - skip + 1);
	if (str[0] == '[') {
		size_t n = strcspn(str + 1, "]");

		if (str[1 + n] == ']' && (n != strlen(SECTION) || strncmp(str + 1, SECTION, n) != 0))
			load_error(x, "unknown section [%.*s], expected [" SECTION "]", (int)n,
				   str + 1);
	}
	return str;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
	struct load_ctx *x = user;
	const struct config_opt *o, *near;
	char why[PATH_MAX + 128];
	size_t i;

	if (strcmp(section, SECTION) != 0) {
		/* other sections were reported by the reader; this catches keys before any */
		if (section[0] == '\0')
			load_error(x, "option '%s' outside the [" SECTION "] section", name);
		return 0;
	}
	o = find_opt(name);
	if (!o) {
		near = near_opt(name);
		if (near)
			load_error(x, "unknown option '%s' (did you mean '%s'?)", name, near->name);
		else
			load_error(x, "unknown option '%s'", name);
		return 0;
	}
	i = (size_t)(o - opts);
	if (x->seen[i]) {
		load_error(x, "duplicate option '%s' (first set on line %d)", name, x->seen[i]);
		return 0;
	}
	x->seen[i] = x->line;
	if (set_value(x->c, o, value, why, sizeof(why)) < 0) {
		load_error(x, "bad value for '%s': %s", name, why);
		return 0;
	}
	return 1;
}

int config_load(struct config *c, const char *path, char *err, size_t errlen)
{
	struct config tmp;
	struct load_ctx *x = NULL;
	int ret = -1, r;

	config_copy(&tmp, c);
	x = calloc(1, sizeof(*x));
	if (!x) {
		snprintf(err, errlen, "%s: %s", path, strerror(ENOMEM));
		goto out;
	}
	x->c = &tmp;
	x->path = path;
	x->f = fopen(path, "re");
	if (!x->f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		goto out;
	}
	r = ini_parse_stream(reader, x, handler, x);
	if (ferror(x->f)) {
		snprintf(err, errlen, "%s: read error", path);
		goto out;
	}
	if (r < 0) {
		snprintf(err, errlen, "%s: %s", path, r == -2 ? strerror(ENOMEM) : "cannot parse");
		goto out;
	}
	/*
	 * inih returns the first line it disliked: ours (handler returned 0) or
	 * its own syntax errors, which it does not explain. Whichever came first wins.
	 */
	if (x->err_line && (r == 0 || x->err_line <= r)) {
		snprintf(err, errlen, "%s:%d: %s", path, x->err_line, x->err);
		goto out;
	}
	if (r > 0) {
		snprintf(err, errlen, "%s:%d: syntax error: expected 'name = value', "
			 "'[" SECTION "]' or a comment", path, r);
		goto out;
	}
	config_free(c);
	*c = tmp;
	memset(&tmp, 0, sizeof(tmp));
	ret = 0;
out:
	if (x && x->f)
		fclose(x->f);
	free(x);
	config_free(&tmp);
	return ret;
}

int config_dump(const struct config *c, FILE *f)
{
	for (size_t i = 0; i < NOPTS; i++) {
		const struct config_opt *o = &opts[i];
		const char *s;
		uint64_t v;
		int n;

		switch (o->type) {
		case OPT_STRING:
		case OPT_PATH:
		case OPT_LOGTARGET:
		case OPT_PATHS:
		case OPT_SOCKNAME:
		case OPT_HOSTPORT:
		case OPT_LISTEN:
			s = *(char *const *)((const char *)c + o->offset);
			/* no spaces: a value that loaded from a line of the longest
			 * length must fit on one line again */
			n = fprintf(f, "%s=%s\n", o->name, s ? s : "");
			break;
		case OPT_MODE:
			n = fprintf(f, "%s = %04llo\n", o->name,
				    (unsigned long long)get_num(c, o));
			break;
		case OPT_BOOL:
			n = fprintf(f, "%s = %s\n", o->name, get_num(c, o) ? "yes" : "no");
			break;
		case OPT_LOGLEVEL:
			n = fprintf(f, "%s = %s\n", o->name,
				    config_log_level_name((int)get_num(c, o)));
			break;
		case OPT_AUTO:
			if (get_num(c, o) == 0) {
				n = fprintf(f, "%s = auto\n", o->name);
				break;
			}
			/* fall through */
		default:
			v = get_num(c, o);
			n = fprintf(f, "%s = %llu\n", o->name, (unsigned long long)v);
			break;
		}
		if (n < 0)
			return -EIO;
	}
	return 0;
}

int config_hostport_split(const char *s, char *host, size_t hostlen, unsigned *port)
{
	const char *colon, *h = s;
	size_t hl;
	uint64_t p;
	const char *end;

	if (s[0] == '[') {
		/* [v6 address]:port */
		const char *rb = strchr(s, ']');

		if (!rb || rb[1] != ':')
			return -1;
		h = s + 1;
		hl = (size_t)(rb - h);
		colon = rb + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon || memchr(s, ':', (size_t)(colon - s)))
			return -1; /* a bare IPv6 address needs its brackets */
		hl = (size_t)(colon - s);
	}
	if (hl == 0 || strcspn(h, " \t;#[]") < hl)
		return -1;
	if (parse_u64(colon + 1, &end, &p) < 0 || *end || p > 65535)
		return -1;
	if (host) {
		if (hl >= hostlen)
			return -1;
		memcpy(host, h, hl);
		host[hl] = '\0';
	}
	if (port)
		*port = (unsigned)p;
	return 0;
}

/* An OPT_SOCKNAME value @n as a path of at most @max bytes: see config_nbd_socket(). */
static int beside_socket(const struct config *c, const char *n, size_t max, char *buf, size_t len)
{
	const char *slash;
	int w;

	if (!n || !n[0])
		return 0;
	slash = strrchr(c->socket, '/');
	if (n[0] == '/')
		w = snprintf(buf, len, "%s", n);
	else
		w = snprintf(buf, len, "%.*s/%s", slash ? (int)(slash - c->socket) : 1,
			     slash ? c->socket : ".", n);
	if (w < 0 || (size_t)w >= len || (size_t)w > max)
		return -ENAMETOOLONG;
	return 1;
}

int config_nbd_socket(const struct config *c, char *buf, size_t len)
{
	return beside_socket(c, c->nbd_socket, CONFIG_SOCKET_MAX, buf, len);
}

int config_pid_file(const struct config *c, char *buf, size_t len)
{
	return beside_socket(c, c->pid_file, PATH_MAX - 1, buf, len);
}
