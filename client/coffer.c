// SPDX-License-Identifier: MIT
/*
 * coffer: the command-line client of cofferd, shaped like zfs(8) and
 * zpool(8). One table of subcommands {name, fn, usage} drives dispatch and
 * the help text; `pool` has a table of its own.
 *
 * Conventions: a usage error prints the verb's usage and exits 2; any other
 * error is one line on stderr naming the object, the cause and what to do,
 * and exits 1. Key material is read here, never by the daemon: from the
 * terminal without echo, from stdin when it is not a terminal, or from the
 * file of keylocation=file://, and sent hex-encoded over the socket, so a
 * daemon with another filesystem view still gets the key.
 */
#include <config.h> /* the autoconf header: _GNU_SOURCE, PACKAGE_VERSION */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "client.h"
#include "proto.h"
#include "store.h"

#define IO_CHUNK (128u << 10)
#define IO_DEPTH 16u
#define KEY_MAX 4096

struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *usage;
	const char *help; /* what it does, then one line per option; for coffer help VERB */
};

static const char *opt_socket;
static int opt_json;
static const struct cmd *cur_cmd;
static const char *cur_prefix = "";

/* ---- output and errors ---- */

static void wipe(void *p, size_t n)
{
	explicit_bzero(p, n);
}

static void usage_exit(void)
{
	fprintf(stderr, "usage: coffer %s%s %s\n", cur_prefix, cur_cmd->name, cur_cmd->usage);
	exit(2);
}

static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	va_list ap;

	fputs("coffer: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* What to do about @status, for the end of an error line. */
static const char *hint(int status, const char *obj, int no_pool, char *buf, size_t len)
{
	switch (status) {
	case STOR_ENOKEY:
		if (!strcmp(cur_cmd->name, "unload-key"))
			return "; nothing to unload";
		snprintf(buf, len, "; run 'coffer load-key %s'", obj);
		return buf;
	case STOR_EBADKEY:
		return "; check the passphrase or key file and try again";
	case -EPERM:
		return "; run as root, as the daemon's user or as a member of its admin_group";
	case -EEXIST:
		if (!strcmp(cur_cmd->name, "load-key"))
			return "";
		return "; choose another name or destroy the existing one first";
	case -EBUSY:
		if (!strcmp(cur_cmd->name, "labelclear") ||
		    (!strcmp(cur_prefix, "pool ") &&
		     (!strcmp(cur_cmd->name, "create") || !strcmp(cur_cmd->name, "add"))))
			return "; export that pool, or stop the program using the LUN";
		if (!strcmp(cur_cmd->name, "destroy") && !cur_prefix[0])
			return "; close its users first or give -f to close their handles; -r for "
			       "children";
		return "; close its users first, or give -f to close their handles";
	case STOR_EBADNAME:
		return "; names are letters, digits, '_-.:' and '/' between components";
	case STOR_EBADPROP:
		return "; see 'coffer get all DATASET' for properties and values";
	case STOR_EFAULTED:
		return "; see 'coffer pool status' and fix the LUN, then 'coffer pool import'";
	case STOR_ENOSPC:
		/* a reservation the pool cannot guarantee: the daemon's text says what to do */
		if (!cur_prefix[0] && (!strcmp(cur_cmd->name, "create") || !strcmp(cur_cmd->name, "set")))
			return "";
		return "; add a LUN with 'coffer pool add' or free space";
	case STOR_ERANGE:
		return "; stay within the dataset's volsize";
	case -ENOENT:
		if (!strcmp(cur_prefix, "pool ") &&
		    (!strcmp(cur_cmd->name, "create") || !strcmp(cur_cmd->name, "add")))
			return "; check the LUN paths, or give -s SIZE to create missing LUN files";
		if (strchr(obj, '/') && !no_pool)
			return "; see 'coffer list' for the datasets there are";
		return "; see 'coffer pool list', or 'coffer pool import' for exported pools";
	case -EUSERS:
		return "; try again later or raise max_connections";
	default:
		return "";
	}
}

static void __attribute__((noreturn)) die_call(int status, const char *obj, const char *err)
{
	char buf[512];

	/* the daemon's reason for a refused value says what is allowed: no generic hint */
	if ((status == STOR_EBADPROP || status == -EINVAL) && err && err[0] &&
	    !strstr(err, proto_strerror(status))) {
		fprintf(stderr, "coffer: %s\n", err);
		exit(1);
	}
	fprintf(stderr, "coffer: %s%s\n", err && err[0] ? err : proto_strerror(status),
		hint(status, obj ? obj : "DATASET", err && strstr(err, "no such pool") != NULL, buf,
		     sizeof(buf)));
	exit(1);
}

static struct coffer_conn *conn_open(void)
{
	struct coffer_conn *c;
	const char *path = coffer_socket_path(opt_socket);
	char why[512];
	int ret = coffer_connect_err(opt_socket, &c, why, sizeof(why));

	if (ret == -ENOENT || ret == -ECONNREFUSED)
		die("cofferd is not running at %s; start it with 'cofferd' or point -S / COFFER_SOCKET "
		    "at its socket",
		    path);
	if (ret == -EUSERS)
		die("%s: cofferd has max_connections clients already; try again later or raise "
		    "max_connections",
		    path);
	if (ret == -EACCES)
		die("%s: permission denied; join the socket's group or run as root", path);
	if (why[0])
		die("%s", why); /* the server's uid was refused: nothing was sent */
	if (ret < 0)
		die("%s: connect: %s", path, proto_strerror(ret));
	return c;
}

/* Call @cmd; on failure print one line about @obj and exit 1. Steals @args. */
static json_t *call(struct coffer_conn *c, const char *cmd, json_t *args, const char *obj)
{
	json_t *reply = NULL;
	char err[512];
	int ret = coffer_call(c, cmd, args, &reply, err, sizeof(err));
	const char *k = json_string_value(json_object_get(args, "key_hex"));

	if (k)
		wipe((char *)k, strlen(k));
	json_decref(args);
	if (ret < 0)
		die_call(ret, obj, err);
	return reply;
}

static void json_print(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	if (s)
		puts(s);
	free(s);
}

/* @cmd with the one optional name argument: no name, every pool. */
static json_t *call_optional_name(struct coffer_conn *c, const char *cmd, int argc, char **argv)
{
	return call(c, cmd, optind < argc ? json_pack("{s:s}", "name", argv[optind]) : NULL,
		    optind < argc ? argv[optind] : NULL);
}

/* The options of a verb whose only flag is @flag (-f or -j): was it given? */
static int only_flag(int argc, char **argv, char flag)
{
	const char optstring[] = { flag, '\0' };
	int opt, given = 0;

	while ((opt = getopt(argc, argv, optstring)) != -1) {
		if (opt != flag)
			usage_exit();
		given = 1;
	}
	return given;
}

/* -H, -p and -j, which every listing takes: 1 if @opt was one of them. */
static int listing_flag(int opt, int *noheader, int *parsable)
{
	switch (opt) {
	case 'H':
		*noheader = 1;
		return 1;
	case 'p':
		*parsable = 1;
		return 1;
	case 'j':
		opt_json = 1;
		return 1;
	}
	return 0;
}

/* ---- sizes ---- */

/* A size of stor_parse_size()'s grammar that the wire can carry (a JSON integer). */
static uint64_t size_arg(const char *s, const char *what)
{
	uint64_t v;
	int ret = stor_parse_size(s, &v);

	if (ret == 0 && v > (uint64_t)INT64_MAX)
		ret = -ERANGE;
	if (ret == -ERANGE) {
		fprintf(stderr, "coffer: %s '%s': too large (at most 8E - 1 bytes)\n", what, s);
		usage_exit();
	}
	if (ret < 0) {
		fprintf(stderr,
			"coffer: %s '%s': not a size (use a number with K, M, G, T, P or E)\n",
			what, s);
		usage_exit();
	}
	return v;
}

static void human(uint64_t v, char *buf, size_t len)
{
	stor_format_size(v, buf, len);
}

/* human() of the integer member @key of @o */
static void human_field(json_t *o, const char *key, char *buf, size_t len)
{
	human((uint64_t)json_integer_value(json_object_get(o, key)), buf, len);
}

static int is_size_prop(const char *p)
{
	static const char *const sz[] = { "used",	    "volsize",	      "recordsize",
					  "size",	    "free",	      "available",
					  "avail",	    "logicalused",    "referenced",
					  "refer",	    "usedbydataset",  "usedbychildren",
					  "usedbyrefreservation", "refreservation", "reservation",
					  NULL };

	for (int i = 0; sz[i]; i++)
		if (!strcmp(p, sz[i]))
			return 1;
	return 0;
}

/* @value as shown: sizes humanized unless @parsable. */
static const char *show(const char *prop, const char *value, int parsable, char *buf, size_t len)
{
	char *end;
	unsigned long long v;

	if (parsable || !is_size_prop(prop) || !value[0])
		return value;
	v = strtoull(value, &end, 10);
	if (*end)
		return value;
	human(v, buf, len);
	return buf;
}

/* ---- key material ---- */

static size_t read_fd_all(int fd, uint8_t *buf, size_t cap)
{
	size_t n = 0;

	while (n < cap) {
		ssize_t r = read(fd, buf + n, cap - n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	return n;
}

static size_t prompt_tty(const char *prompt, char *buf, size_t cap)
{
	struct termios old, noecho;
	int fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
	FILE *f;
	size_t n;

	if (fd < 0)
		die("no terminal to ask the passphrase on; pipe it to stdin or use keylocation=file://");
	f = fdopen(fd, "r+");
	fputs(prompt, f);
	fflush(f);
	tcgetattr(fd, &old);
	noecho = old;
	noecho.c_lflag &= ~(tcflag_t)ECHO;
	tcsetattr(fd, TCSAFLUSH, &noecho);
	if (!fgets(buf, (int)cap, f))
		buf[0] = '\0';
	tcsetattr(fd, TCSAFLUSH, &old);
	fputc('\n', f);
	fclose(f);
	n = strcspn(buf, "\n");
	buf[n] = '\0';
	return n;
}

/*
 * Read the key for @ds in @format from @location into @buf (KEY_MAX bytes).
 * Passphrases from a terminal are asked twice when @confirm.
 */
static size_t key_read(const char *ds, const char *format, const char *location, int confirm,
		       uint8_t *buf)
{
	size_t n;

	if (location && !strncmp(location, "file://", 7)) {
		int fd = open(location + 7, O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			die("%s: keylocation %s: %s; fix the path or use -L prompt", ds, location,
			    strerror(errno));
		n = read_fd_all(fd, buf, KEY_MAX);
		close(fd);
	} else if (location && strcmp(location, "prompt")) {
		die("%s: keylocation '%s' is not supported; use prompt or file:///path", ds,
		    location);
	} else if (isatty(STDIN_FILENO)) {
		char prompt[STOR_NAME_MAX + 64], again[KEY_MAX];

		snprintf(prompt, sizeof(prompt), "Enter %s for '%s': ",
			 !strcmp(format, "passphrase") ? "passphrase" : "key", ds);
		n = prompt_tty(prompt, (char *)buf, KEY_MAX);
		if (confirm) {
			snprintf(prompt, sizeof(prompt), "Re-enter %s for '%s': ",
				 !strcmp(format, "passphrase") ? "passphrase" : "key", ds);
			prompt_tty(prompt, again, sizeof(again));
			if (strcmp(again, (char *)buf)) {
				wipe(again, sizeof(again));
				wipe(buf, KEY_MAX);
				die("%s: the two entries do not match; try again", ds);
			}
			wipe(again, sizeof(again));
		}
	} else if (!strcmp(format, "raw")) {
		n = read_fd_all(STDIN_FILENO, buf, 32);
	} else {
		/* one line per key, so `load-key -a` can take several from a pipe */
		n = 0;
		while (n < KEY_MAX && read(STDIN_FILENO, buf + n, 1) == 1 && buf[n] != '\n')
			n++;
	}
	/* text formats end at the first newline; raw keys are exactly 32 bytes */
	if (strcmp(format, "raw")) {
		size_t l = 0;

		while (l < n && buf[l] != '\n' && buf[l] != '\r')
			l++;
		n = l;
	} else if (n > 32) {
		n = 32;
	}
	if (n == 0)
		die("%s: empty key; give a %s", ds, format);
	return n;
}

static void key_attach(json_t *args, const uint8_t *key, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	char *s = malloc(2 * n + 1);

	if (!s)
		die("out of memory");
	for (size_t i = 0; i < n; i++) {
		s[2 * i] = hex[key[i] >> 4];
		s[2 * i + 1] = hex[key[i] & 15];
	}
	s[2 * n] = '\0';
	json_object_set_new(args, "key_hex", json_string(s));
	wipe(s, 2 * n);
	free(s);
}

/* The value of prop @name among "-o name=value" strings, or NULL. */
static const char *prop_in(json_t *props, const char *name)
{
	size_t n = strlen(name), i;
	json_t *v;

	json_array_foreach(props, i, v) {
		const char *s = json_string_value(v);

		if (!strncmp(s, name, n) && s[n] == '=')
			return s + n + 1;
	}
	return NULL;
}

static json_t *ds_props(struct coffer_conn *c, const char *ds, const char *const *names)
{
	json_t *a = json_array(), *reply, *out = json_object(), *v;
	size_t i;

	for (i = 0; names[i]; i++)
		json_array_append_new(a, json_string(names[i]));
	reply = call(c, "ds_get", json_pack("{s:s, s:o}", "name", ds, "props", a), ds);
	json_array_foreach(json_object_get(reply, "props"), i, v)
		json_object_set(out, json_string_value(json_object_get(v, "property")),
				json_object_get(v, "value"));
	json_decref(reply);
	return out;
}

/* ---- pool verbs ---- */

static char *abs_path(const char *p)
{
	char cwd[PATH_MAX], *out;

	if (p[0] == '/')
		return strdup(p);
	if (!getcwd(cwd, sizeof(cwd)))
		die("getcwd: %s", strerror(errno));
	if (asprintf(&out, "%s/%s", cwd, p) < 0)
		die("out of memory");
	return out;
}

/*
 * A LUN named on the command line, as zpool takes it: an absolute path, or
 * a name under /dev ("sdb", "disk/by-id/..."). A relative path is refused:
 * taken from the working directory it would quietly make a file there.
 */
static char *lun_path(const char *p)
{
	char *out;

	if (p[0] == '/')
		return strdup(p);
	if (asprintf(&out, "/dev/%s", p) < 0)
		die("out of memory");
	if (strncmp(p, "./", 2) && strncmp(p, "../", 3) && access(out, F_OK) == 0)
		return out;
	free(out);
	die("LUN '%s': give an absolute path for a file, or a device name under /dev", p);
}

/*
 * The vdevs of create and add, as zpool writes them: LUN paths, each a vdev
 * of its own, then "mirror" followed by the paths of its sides, as many
 * times as there are mirrors. Each vdev goes into @vdevs as an array of
 * absolute paths.
 */
static void parse_vdevs(int argc, char **argv, json_t *vdevs)
{
	json_t *mirror = NULL;

	for (int i = 0; i < argc; i++) {
		char *p;

		if (!strcmp(argv[i], "mirror")) {
			if (mirror && json_array_size(mirror) < 2)
				die("mirror: give 2 to %u LUNs", STOR_MIRROR_MAX);
			mirror = json_array();
			json_array_append_new(vdevs, mirror);
			continue;
		}
		p = lun_path(argv[i]);
		if (mirror) {
			if (json_array_size(mirror) == STOR_MIRROR_MAX)
				die("mirror: give 2 to %u LUNs", STOR_MIRROR_MAX);
			json_array_append_new(mirror, json_string(p));
		} else {
			json_array_append_new(vdevs, json_pack("[s]", p));
		}
		free(p);
	}
	if (mirror && json_array_size(mirror) < 2)
		die("mirror: give 2 to %u LUNs", STOR_MIRROR_MAX);
	if (!json_array_size(vdevs))
		usage_exit();
}

static int pool_create(int argc, char **argv)
{
	json_t *luns = json_array(), *props = json_array(), *vdevs = json_array(),
	       *sides = json_array(), *v;
	uint64_t size = 0;
	struct coffer_conn *c;
	int opt, force = 0, mirrors = 0;
	size_t i;

	while ((opt = getopt(argc, argv, "fo:s:")) != -1) {
		switch (opt) {
		case 'f':
			force = 1;
			break;
		case 'o':
			json_array_append_new(props, json_string(optarg));
			break;
		case 's':
			size = size_arg(optarg, "-s");
			if (!size)
				die("-s 0: a LUN size must be positive");
			break;
		default:
			usage_exit();
		}
	}
	if (argc - optind < 2)
		usage_exit();
	parse_vdevs(argc - optind - 1, argv + optind + 1, vdevs);
	json_array_foreach(vdevs, i, v) {
		json_array_extend(luns, v);
		json_array_append_new(sides, json_integer((json_int_t)json_array_size(v)));
		mirrors |= json_array_size(v) > 1;
	}
	json_decref(vdevs);
	c = conn_open();
	{
		json_t *args = json_pack("{s:s, s:o, s:o, s:b}", "name", argv[optind], "luns", luns,
					 "props", props, "force", force);

		/* only a pool with mirrors says how the LUNs group */
		if (mirrors)
			json_object_set_new(args, "sides", sides);
		else
			json_decref(sides);

		/* only a size given: without one, existing LUNs keep theirs */
		if (size)
			json_object_set_new(args, "lun_size", json_integer((json_int_t)size));
		json_decref(call(c, "pool_create", args, argv[optind]));
	}
	coffer_close(c);
	return 0;
}

static int pool_add(int argc, char **argv)
{
	json_t *vdevs = json_array(), *v;
	uint64_t size = 0;
	struct coffer_conn *c;
	int opt, force = 0;
	size_t i;

	while ((opt = getopt(argc, argv, "fs:")) != -1) {
		if (opt == 'f')
			force = 1;
		else if (opt == 's' && (size = size_arg(optarg, "-s")) == 0)
			die("-s 0: a LUN size must be positive");
		else if (opt != 's')
			usage_exit();
	}
	if (argc - optind < 2)
		usage_exit();
	parse_vdevs(argc - optind - 1, argv + optind + 1, vdevs);
	c = conn_open();
	/* one vdev per call: each joins whole or not at all */
	json_array_foreach(vdevs, i, v) {
		json_t *args = json_pack("{s:s, s:b}", "name", argv[optind], "force", force);

		if (json_array_size(v) > 1)
			json_object_set(args, "mirror", v);
		else
			json_object_set(args, "lun", json_array_get(v, 0));
		if (size)
			json_object_set_new(args, "size", json_integer((json_int_t)size));
		json_decref(call(c, "pool_add", args, argv[optind]));
	}
	json_decref(vdevs);
	coffer_close(c);
	return 0;
}

/* One line of `pool list`: aligned columns, or tab-separated with -H. */
static void pool_row(int tabs, const char *const col[7])
{
	if (tabs)
		printf("%s\t%s\t%s\t%s\t%s\t%s\t%s\n", col[0], col[1], col[2], col[3], col[4],
		       col[5], col[6]);
	else
		printf("%-20s %8s %8s %8s %5s %8s  %s\n", col[0], col[1], col[2], col[3], col[4],
		       col[5], col[6]);
}

static int pool_list(int argc, char **argv)
{
	int opt, noheader = 0, parsable = 0;
	struct coffer_conn *c;
	json_t *reply, *p;
	size_t i;

	while ((opt = getopt(argc, argv, "Hpj")) != -1)
		if (!listing_flag(opt, &noheader, &parsable))
			usage_exit();
	if (argc - optind > 1)
		usage_exit();
	c = conn_open();
	reply = call_optional_name(c, "pool_list", argc, argv);
	if (opt_json) {
		json_print(reply);
	} else {
		if (!noheader)
			pool_row(0, (const char *[]){ "NAME", "SIZE", "USED", "FREE", "LUNS",
						      "DATASETS", "STATE" });
		json_array_foreach(json_object_get(reply, "pools"), i, p) {
			char sz[32], us[32], fr[32], nl[16], nd[16];
			uint64_t s = (uint64_t)json_integer_value(json_object_get(p, "size"));
			uint64_t u = (uint64_t)json_integer_value(json_object_get(p, "used"));
			int online = json_object_get(p, "size") != NULL;

			if (parsable) {
				snprintf(sz, sizeof(sz), "%llu", (unsigned long long)s);
				snprintf(us, sizeof(us), "%llu", (unsigned long long)u);
				snprintf(fr, sizeof(fr), "%llu", (unsigned long long)(s - u));
			} else {
				human(s, sz, sizeof(sz));
				human(u, us, sizeof(us));
				human(s - u, fr, sizeof(fr));
			}
			snprintf(nl, sizeof(nl), "%lld",
				 (long long)json_integer_value(json_object_get(p, "nluns")));
			snprintf(nd, sizeof(nd), "%lld",
				 (long long)json_integer_value(json_object_get(p, "datasets")));
			pool_row(noheader,
				 (const char *[]){ json_string_value(json_object_get(p, "name")),
						   online ? sz : "-", online ? us : "-",
						   online ? fr : "-", online ? nl : "-",
						   online ? nd : "-",
						   json_string_value(json_object_get(p, "state")) });
		}
	}
	json_decref(reply);
	coffer_close(c);
	return 0;
}

/* What pool status says under a LUN's line besides the counters. */
static void lun_notes(json_t *l)
{
	json_int_t nospc = json_integer_value(json_object_get(l, "nospace_errors"));
	json_t *dmg = json_object_get(l, "label_damaged"), *rep = json_object_get(l, "label_repaired");
	char d[32] = "", r[32] = "";
	size_t i;
	json_t *v;

	if (nospc)
		printf("\t  %lld writes found the file system full (not counted as errors; free "
		       "space, then 'coffer pool clear')\n",
		       (long long)nospc);
	json_array_foreach(dmg, i, v)
		snprintf(d + strlen(d), sizeof(d) - strlen(d), "%s%s", i ? " and " : "",
			 json_string_value(v));
	json_array_foreach(rep, i, v)
		snprintf(r + strlen(r), sizeof(r) - strlen(r), "%s%s", i ? " and " : "",
			 json_string_value(v));
	if (d[0])
		printf("\t  label: %s copy damaged at import; %s\n", d,
		       r[0] ? "rewritten from the sound copy" : "could not be rewritten");
}

/* A LUN's row of the status tree, indented by @depth. */
static void lun_row(json_t *l, int depth)
{
	char sz[32], us[32];
	long long fixed = (long long)json_integer_value(json_object_get(l, "repaired"));

	human_field(l, "size", sz, sizeof(sz));
	human_field(l, "used", us, sizeof(us));
	printf("\t%*s%-*s %-8s %8s %8s %6lld %6lld %6lld\n", depth, "", 40 - depth,
	       json_string_value(json_object_get(l, "path")),
	       json_string_value(json_object_get(l, "state")), sz, us,
	       (long long)json_integer_value(json_object_get(l, "read_errors")),
	       (long long)json_integer_value(json_object_get(l, "write_errors")),
	       (long long)json_integer_value(json_object_get(l, "cksum_errors")));
	if (fixed)
		printf("\t  %lld bad copies rewritten from another side\n", fixed);
	if (json_object_get(l, "absent"))
		printf("\t  cannot open: %s\n", json_string_value(json_object_get(l, "absent")));
	if (json_object_get(l, "missing_since"))
		printf("\t  out of service: lacks the writes since txg %lld\n",
		       (long long)json_integer_value(json_object_get(l, "missing_since")));
	lun_notes(l);
}

/* The scan line of zpool status: a scrub running, paused, done or stopped. */
static void scan_line(json_t *scan)
{
	const char *state = json_string_value(json_object_get(scan, "state"));
	long long errors = (long long)json_integer_value(json_object_get(scan, "errors"));
	uint64_t total = (uint64_t)json_integer_value(json_object_get(scan, "total"));
	uint64_t done = (uint64_t)json_integer_value(json_object_get(scan, "examined"));
	uint64_t rate = (uint64_t)json_integer_value(json_object_get(scan, "rate"));
	time_t start = (time_t)json_integer_value(json_object_get(scan, "start"));
	time_t end = (time_t)json_integer_value(json_object_get(scan, "end"));
	char ex[32], tot[32], fix[32], rt[32], when[64];
	const char *fn = json_string_value(json_object_get(scan, "function"));
	int going, resilver;

	if (!state || !strcmp(state, "none"))
		return;
	fn = fn ? fn : "scrub";
	resilver = !strcmp(fn, "resilver");
	going = !strcmp(state, "scanning") || !strcmp(state, "paused");
	human_field(scan, "examined", ex, sizeof(ex));
	human_field(scan, "total", tot, sizeof(tot));
	human_field(scan, "repaired", fix, sizeof(fix));
	human(rate, rt, sizeof(rt));
	strftime(when, sizeof(when), "%F %T", localtime(going ? &start : &end));
	if (!strcmp(state, "scanning")) {
		printf("  scan: %s in progress since %s\n\t%s of %s examined at %s/s, %s "
		       "%s, %lld errors",
		       fn, when, ex, tot, rt, fix, resilver ? "resilvered" : "repaired", errors);
		if (rate && total > done)
			printf(", %llu s to go", (unsigned long long)((total - done) / rate));
		printf("\n");
	} else if (!strcmp(state, "paused")) {
		printf("  scan: scrub paused, started %s\n\t%s of %s examined, %s repaired, %lld "
		       "errors\n",
		       when, ex, tot, fix, errors);
	} else {
		printf("  scan: %s %s %s: %s examined, %s %s, %lld errors\n", fn, state, when, ex,
		       fix, resilver ? "resilvered" : "repaired", errors);
	}
}

/* The errors line of zpool status, and with -v the records it names. */
static void errors_lines(json_t *p, int verbose)
{
	long long n = (long long)json_integer_value(json_object_get(p, "data_errors"));
	json_t *e;
	size_t i;

	if (!json_object_get(p, "data_errors"))
		return;
	if (!n) {
		printf("errors: No known data errors\n");
		return;
	}
	if (!verbose) {
		printf("errors: %lld records with unrecoverable errors, use '-v' for a list\n", n);
		return;
	}
	printf("errors: Permanent errors have been detected in the following records:\n\n");
	json_array_foreach(json_object_get(p, "error_records"), i, e)
		printf("\t%s record %lld (offset %lld)\n",
		       json_string_value(json_object_get(e, "dataset")),
		       (long long)json_integer_value(json_object_get(e, "record")),
		       (long long)json_integer_value(json_object_get(e, "offset")));
	if ((long long)json_array_size(json_object_get(p, "error_records")) < n)
		printf("\t... and %lld more\n",
		       n - (long long)json_array_size(json_object_get(p, "error_records")));
}

static int pool_status(int argc, char **argv)
{
	struct coffer_conn *c;
	json_t *reply, *p, *l, *v;
	size_t i, j;
	int opt, verbose = 0;

	while ((opt = getopt(argc, argv, "jv")) != -1) {
		if (opt == 'j')
			opt_json = 1;
		else if (opt == 'v')
			verbose = 1;
		else
			usage_exit();
	}
	if (argc - optind > 1)
		usage_exit();
	c = conn_open();
	reply = call_optional_name(c, "pool_status", argc, argv);
	if (opt_json) {
		json_print(reply);
		goto out;
	}
	if (json_array_size(json_object_get(reply, "pools")) == 0)
		printf("no pools\n");
	json_array_foreach(json_object_get(reply, "pools"), i, p) {
		const char *err = json_string_value(json_object_get(p, "error"));

		if (i)
			putchar('\n');
		printf("  pool: %s\n state: %s\n", json_string_value(json_object_get(p, "name")),
		       json_string_value(json_object_get(p, "state")));
		if (err && !strcmp(json_string_value(json_object_get(p, "state")), "SUSPENDED"))
			printf(" error: %s\n", err); /* it says what to do */
		else if (err)
			printf(" error: %s\naction: fix or restore the LUN, then run 'coffer pool "
			       "import %s'\n",
			       err, json_string_value(json_object_get(p, "name")));
		if (json_object_get(p, "key_file"))
			printf("  keys: %s\n", json_string_value(json_object_get(p, "key_file")));
		if (json_object_get(p, "metadata"))
			printf("  metadata: %s\n", json_string_value(json_object_get(p, "metadata")));
		if (json_object_get(p, "txg"))
			printf("   txg: %lld\n",
			       (long long)json_integer_value(json_object_get(p, "txg")));
		if (!json_object_get(p, "luns"))
			continue;
		scan_line(json_object_get(p, "scan"));
		printf("config:\n\t%-40s %-8s %8s %8s %6s %6s %6s\n", "NAME", "STATE", "SIZE", "USED",
		       "READ", "WRITE", "CKSUM");
		printf("\t%-40s %-8s\n", json_string_value(json_object_get(p, "name")),
		       json_string_value(json_object_get(p, "state")));
		json_array_foreach(json_object_get(p, "vdevs"), j, v) {
			json_t *luns = json_object_get(p, "luns"), *k;
			const char *name = json_string_value(json_object_get(v, "name"));
			size_t x;

			/* a mirror is a row of its own, its sides under it (zpool status) */
			if (name)
				printf("\t  %-38s %-8s\n", name,
				       json_string_value(json_object_get(v, "state")));
			json_array_foreach(json_object_get(v, "luns"), x, k) {
				l = json_array_get(luns, (size_t)json_integer_value(k));
				if (l)
					lun_row(l, name ? 4 : 2);
			}
		}
		errors_lines(p, verbose);
	}
out:
	json_decref(reply);
	coffer_close(c);
	return 0;
}

/* export, destroy: -f closes the handles other clients hold on the pool */
static int pool_simple(int argc, char **argv, const char *cmd)
{
	struct coffer_conn *c;
	int force = only_flag(argc, argv, 'f');

	if (argc - optind != 1)
		usage_exit();
	c = conn_open();
	json_decref(call(c, cmd, json_pack("{s:s,s:b}", "name", argv[optind], "force", force),
			 argv[optind]));
	coffer_close(c);
	return 0;
}

static int pool_export(int argc, char **argv)
{
	return pool_simple(argc, argv, "pool_export");
}

static int pool_destroy(int argc, char **argv)
{
	return pool_simple(argc, argv, "pool_destroy");
}

static int pool_check(int argc, char **argv)
{
	static const char *const fields[] = { "nonce_repeats", "cksum_errors", "extent_errors",
					      "space_errors", "bad_frees" };
	struct coffer_conn *c;
	json_t *reply;
	int bad = 0;

	if (only_flag(argc, argv, 'j'))
		opt_json = 1;
	if (argc - optind != 1)
		usage_exit();
	c = conn_open();
	reply = call(c, "pool_check", json_pack("{s:s}", "name", argv[optind]), argv[optind]);
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
		bad |= json_integer_value(json_object_get(reply, fields[i])) != 0;
	if (opt_json) {
		json_print(reply);
	} else {
		printf("pool: %s\nrecords: %lld (%lld encrypted, %lld held by snapshots only)\n",
		       argv[optind], (long long)json_integer_value(json_object_get(reply, "records")),
		       (long long)json_integer_value(json_object_get(reply, "encrypted")),
		       (long long)json_integer_value(json_object_get(reply, "kept")));
		for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
			printf("%s: %lld\n", fields[i],
			       (long long)json_integer_value(json_object_get(reply, fields[i])));
		printf("%s\n", bad ? "errors found" : "no errors");
	}
	json_decref(reply);
	coffer_close(c);
	return bad ? 1 : 0;
}

/* One pool found by scanning LUN labels, as zpool import lists it. */
static void print_found(json_t *p)
{
	json_t *v;
	size_t i;
	long long nluns = (long long)json_integer_value(json_object_get(p, "nluns"));
	const char *state = json_string_value(json_object_get(p, "state"));
	int complete = json_is_true(json_object_get(p, "complete"));

	printf("   pool: %s\n   guid: %s\n", json_string_value(json_object_get(p, "name")),
	       json_string_value(json_object_get(p, "guid")));
	if (!strcmp(state, "ACTIVE") && !json_is_true(json_object_get(p, "this_host")))
		printf("  state: ACTIVE on host %s (not exported; import with -f only if that "
		       "host no longer uses it)\n",
		       json_string_value(json_object_get(p, "hostid")));
	else
		printf("  state: %s\n", state);
	printf("   luns: %lld of %lld found%s\n",
	       (long long)json_integer_value(json_object_get(p, "found")), nluns,
	       complete ? ""
	       : json_is_true(json_object_get(p, "degraded"))
		       ? "; the missing may be mirror sides: imports DEGRADED if so"
		       : "; cannot import");
	json_array_foreach(json_object_get(p, "luns"), i, v)
		printf("\t%lld  %s\n", (long long)json_integer_value(json_object_get(v, "index")),
		       json_string_value(json_object_get(v, "path")));
	json_array_foreach(json_object_get(p, "missing"), i, v)
		printf("\t%lld  missing\n", (long long)json_integer_value(v));
	if (!json_is_true(json_object_get(p, "metadata")))
		printf("   note: no metadata for it in the daemon's state directory\n");
}

/* A 16-digit hex argument is a pool GUID, as the listing prints it. */
static int is_guid(const char *s)
{
	return strlen(s) == 16 && strspn(s, "0123456789abcdefABCDEF") == 16;
}

/* What an import did to the metadata, when it did anything: the rebuild
 * or replay from the LUNs with its size and time, and what it repaired. */
static void print_import(const json_t *reply)
{
	const json_t *r = json_object_get(reply, "replayed");
	const char *note = json_string_value(json_object_get(reply, "metadata"));
	char b[32];

	if (r) {
		human((uint64_t)json_integer_value(json_object_get(r, "bytes")), b, sizeof(b));
		printf("%s: %lld log records (%s) in %.1f s\n",
		       json_is_true(json_object_get(r, "rebuild")) ? "rebuilt from the LUNs"
								  : "replayed from the LUNs",
		       (long long)json_integer_value(json_object_get(r, "records")), b,
		       json_real_value(json_object_get(r, "seconds")));
	}
	if (note)
		printf("metadata: %s\n", note);
}

/*
 * While an import runs, a terminal shows how far its rebuild (or replay)
 * of the pool's LMDB file from the LUNs is: a second connection asks the
 * daemon every half second (import_progress takes no pool lock, which the
 * import holds) and one line on stderr is rewritten in place.
 */
struct import_watch {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stop, shown;
};

static void *import_watch_main(void *arg)
{
	struct import_watch *w = arg;
	struct coffer_conn *c = NULL;
	int stop = 0;

	if (coffer_connect(opt_socket, &c) < 0)
		return NULL;
	while (!stop) {
		struct timespec ts;
		json_t *args = json_object(), *r = NULL;
		char err[256], b[32], t[32];
		int ret = coffer_call(c, "import_progress", args, &r, err, sizeof(err));

		json_decref(args);
		if (ret < 0)
			break; /* an older daemon: no progress to show */
		if (json_is_true(json_object_get(r, "running"))) {
			human((uint64_t)json_integer_value(json_object_get(r, "bytes")), b, sizeof(b));
			human((uint64_t)json_integer_value(json_object_get(r, "bytes_total")), t,
			      sizeof(t));
			fprintf(stderr, "\r%s: %s the LUNs: %lld of %lld log records, %s of %s, %.0f s ",
				json_string_value(json_object_get(r, "pool")),
				json_is_true(json_object_get(r, "rebuild")) ? "rebuilding from"
									   : "replaying from",
				(long long)json_integer_value(json_object_get(r, "records")),
				(long long)json_integer_value(json_object_get(r, "records_total")), b,
				t, json_real_value(json_object_get(r, "seconds")));
			w->shown = 1;
		}
		json_decref(r);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 500000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&w->lock);
		if (!w->stop)
			pthread_cond_timedwait(&w->cond, &w->lock, &ts);
		stop = w->stop;
		pthread_mutex_unlock(&w->lock);
	}
	coffer_close(c);
	return NULL;
}

/* Watch the import on a terminal (stderr); @return 0 if not watching. */
static int import_watch_start(struct import_watch *w)
{
	*w = (struct import_watch){ .stop = 0 };
	if (opt_json || !isatty(STDERR_FILENO))
		return 0;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	return pthread_create(&w->thread, NULL, import_watch_main, w) == 0;
}

static void import_watch_stop(struct import_watch *w, int watching)
{
	if (!watching)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	if (w->shown)
		fputc('\n', stderr);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
}

static int pool_import(int argc, char **argv)
{
	json_t *args = json_object(), *dirs = NULL, *reply, *v;
	struct coffer_conn *c;
	struct import_watch watch;
	int opt, force = 0, watching;
	size_t i, n = 0;

	while ((opt = getopt(argc, argv, "d:f")) != -1) {
		if (opt == 'f') {
			force = 1;
		} else if (opt == 'd') {
			char *p = abs_path(optarg);

			if (!dirs)
				dirs = json_array();
			json_array_append_new(dirs, json_string(p));
			free(p);
		} else {
			usage_exit();
		}
	}
	if (argc - optind > 2)
		usage_exit();
	if (dirs)
		json_object_set_new(args, "dirs", dirs);
	if (argc - optind == 2)
		json_object_set_new(args, "new_name", json_string(argv[optind + 1]));
	c = conn_open();
	if (optind < argc) {
		const char *target = argv[optind];

		json_object_set_new(args, is_guid(target) ? "guid" : "name", json_string(target));
		json_object_set_new(args, "force", json_boolean(force));
		watching = import_watch_start(&watch);
		{
			json_t *r = NULL;
			char err[512];
			int ret = coffer_call(c, "pool_import", args, &r, err, sizeof(err));

			json_decref(args);
			import_watch_stop(&watch, watching);
			if (ret < 0)
				die_call(ret, is_guid(target) ? NULL : target, err);
			reply = r;
		}
		if (!opt_json && (is_guid(target) || argc - optind == 2))
			printf("imported %s as %s\n", target,
			       json_string_value(json_object_get(reply, "name")));
		if (opt_json)
			json_print(reply);
		else
			print_import(reply);
		json_decref(reply);
	} else {
		reply = call(c, "pool_import", args, NULL);
		n = json_array_size(json_object_get(reply, "importable")) +
		    json_array_size(json_object_get(reply, "found"));
		if (opt_json)
			json_print(reply);
		else if (n == 0)
			printf("no pools available to import\n");
		json_array_foreach(json_object_get(reply, "importable"), i, v)
			if (!opt_json)
				printf("   pool: %s\n  state: EXPORTED (metadata in the state "
				       "directory)\n\n",
				       json_string_value(v));
		json_array_foreach(json_object_get(reply, "found"), i, v)
			if (!opt_json) {
				print_found(v);
				printf("\n");
			}
		json_decref(reply);
	}
	coffer_close(c);
	return 0;
}

static char *lun_arg(const char *lun);

static int pool_clear(int argc, char **argv)
{
	struct coffer_conn *c;
	json_t *args;

	if (getopt(argc, argv, "") != -1)
		usage_exit();
	if (argc - optind < 1 || argc - optind > 2)
		usage_exit();
	args = json_pack("{s:s}", "name", argv[optind]);
	if (argc - optind == 2) {
		/* a path names the LUN as pool status shows it; a number is its index */
		const char *lun = argv[optind + 1];
		char *p = lun_arg(lun);

		json_object_set_new(args, "lun", json_string(p));
		free(p);
	}
	c = conn_open();
	json_decref(call(c, "pool_clear", args, argv[optind]));
	coffer_close(c);
	return 0;
}

/* A LUN named on the command line: a path as pool status shows it (made
 * absolute), or its index. */
static char *lun_arg(const char *lun)
{
	return strspn(lun, "0123456789") == strlen(lun) ? strdup(lun) : abs_path(lun);
}

/* offline, online, detach POOL LUN */
static int pool_side(int argc, char **argv, const char *cmd)
{
	struct coffer_conn *c;
	char *lun;

	if (getopt(argc, argv, "") != -1 || argc - optind != 2)
		usage_exit();
	lun = lun_arg(argv[optind + 1]);
	c = conn_open();
	json_decref(call(c, cmd, json_pack("{s:s, s:s}", "name", argv[optind], "lun", lun),
			 argv[optind]));
	free(lun);
	coffer_close(c);
	return 0;
}

static int pool_offline(int argc, char **argv)
{
	return pool_side(argc, argv, "pool_offline");
}

static int pool_online(int argc, char **argv)
{
	return pool_side(argc, argv, "pool_online");
}

static int pool_detach(int argc, char **argv)
{
	return pool_side(argc, argv, "pool_detach");
}

/* replace, attach [-f] POOL LUN NEW: the new LUN is made at the mirror's size if missing */
static int pool_new_side(int argc, char **argv, const char *cmd)
{
	struct coffer_conn *c;
	int opt, force = 0;
	char *lun, *new_lun;

	while ((opt = getopt(argc, argv, "f")) != -1) {
		if (opt != 'f')
			usage_exit();
		force = 1;
	}
	if (argc - optind != 3)
		usage_exit();
	lun = lun_arg(argv[optind + 1]);
	new_lun = lun_path(argv[optind + 2]);
	c = conn_open();
	json_decref(call(c, cmd,
			 json_pack("{s:s, s:s, s:s, s:b}", "name", argv[optind], "lun", lun, "new",
				   new_lun, "force", force),
			 argv[optind]));
	free(lun);
	free(new_lun);
	coffer_close(c);
	return 0;
}

static int pool_replace(int argc, char **argv)
{
	return pool_new_side(argc, argv, "pool_replace");
}

static int pool_attach(int argc, char **argv)
{
	return pool_new_side(argc, argv, "pool_attach");
}

/* scrub POOL: start or resume; -p pauses, -s stops */
static int pool_scrub(int argc, char **argv)
{
	struct coffer_conn *c;
	int opt, pause = 0, stop = 0;

	while ((opt = getopt(argc, argv, "ps")) != -1) {
		if (opt == 'p')
			pause = 1;
		else if (opt == 's')
			stop = 1;
		else
			usage_exit();
	}
	if (argc - optind != 1 || (pause && stop))
		usage_exit();
	c = conn_open();
	json_decref(call(c, "pool_scrub",
			 json_pack("{s:s, s:b, s:b}", "name", argv[optind], "pause", pause, "stop",
				   stop),
			 argv[optind]));
	coffer_close(c);
	return 0;
}

static const struct cmd pool_cmds[] = {
	{ "create", pool_create, "[-f] [-o prop=val]... [-s SIZE] POOL VDEV...",
	  "Create pool POOL of the VDEVs: LUNs (absolute paths, or names under /dev), each a "
	  "vdev, and 'mirror L0 L1 [L2]' for mirrors.\n"
	  "  -f       take LUNs that hold data or links\n"
	  "  -o P=V   set property P of the pool's root dataset\n"
	  "  -s SIZE  create missing or empty LUN files of SIZE" },
	{ "add", pool_add, "[-f] [-s SIZE] POOL VDEV...",
	  "Add VDEVs (LUNs, or 'mirror L0 L1') to POOL.\n"
	  "  -f       take LUNs that hold data or links\n"
	  "  -s SIZE  create missing or empty LUN files of SIZE" },
	{ "list", pool_list, "[-H] [-p] [-j] [POOL]",
	  "List pools with their size, allocation and health.\n"
	  "  -H  no header, tabs between fields\n"
	  "  -p  exact numbers\n"
	  "  -j  JSON" },
	{ "status", pool_status, "[-j] [-v] [POOL]",
	  "Show the vdev tree, the state and error counts of each LUN, and the scan line.\n"
	  "  -j  JSON\n"
	  "  -v  list the records that no copy holds sound" },
	{ "check", pool_check, "[-j] POOL",
	  "Check POOL offline: every block pointer against the allocation and the LUNs.\n"
	  "  -j  JSON" },
	{ "export", pool_export, "[-f] POOL",
	  "Close POOL and mark its LUNs exported, for another host or a later import.\n"
	  "  -f  close the handles of its users" },
	{ "import", pool_import, "[-d DIR]... [-f] [POOL|GUID [NEWNAME]]",
	  "Import pools found on the LUNs (no name: list them).\n"
	  "  -d DIR  look for LUNs in DIR (repeatable)\n"
	  "  -f      import a pool last used by another host" },
	{ "destroy", pool_destroy, "[-f] POOL",
	  "Destroy POOL and every dataset in it; its LUNs are freed.\n"
	  "  -f  close the handles of its users" },
	{ "clear", pool_clear, "POOL [LUN]",
	  "Reset the error counts of POOL, or of one LUN." },
	{ "scrub", pool_scrub, "[-p | -s] POOL",
	  "Verify every copy of every record in the background and repair what it can; no key "
	  "needed.\n"
	  "  -p  pause\n"
	  "  -s  stop" },
	{ "offline", pool_offline, "POOL LUN",
	  "Take a side of a mirror out of service; it misses writes until it is back." },
	{ "online", pool_online, "POOL LUN",
	  "Put a side back in service: it is resilvered with what it missed." },
	{ "replace", pool_replace, "[-f] POOL LUN NEW",
	  "Replace a side of a mirror with NEW (made at the mirror's size if missing) and\n"
	  "resilver it.\n"
	  "  -f  take a NEW that holds data or is a link" },
	{ "attach", pool_attach, "[-f] POOL LUN NEW",
	  "Add NEW as a side of LUN's vdev (a LUN alone becomes a mirror) and resilver it.\n"
	  "  -f  take a NEW that holds data or is a link" },
	{ "detach", pool_detach, "POOL LUN",
	  "Take a side out of its mirror for good (refused for the only side holding every\n"
	  "write)." },
	{ NULL, NULL, NULL, NULL },
};

static int dispatch(const struct cmd *table, const char *prefix, int argc, char **argv);

static int cmd_pool(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: coffer pool VERB ...; verbs:\n");
		for (const struct cmd *t = pool_cmds; t->name; t++)
			fprintf(stderr, "  coffer pool %s %s\n", t->name, t->usage);
		exit(2);
	}
	return dispatch(pool_cmds, "pool ", argc - 1, argv + 1);
}

/* ---- dataset verbs ---- */

static int cmd_create(int argc, char **argv)
{
	json_t *props = json_array(), *args;
	uint64_t volsize = 0, recsize = 0;
	int have_volsize = 0, have_recsize = 0;
	const char *enc, *fmt, *loc;
	struct coffer_conn *c;
	uint8_t key[KEY_MAX];
	int opt;

	while ((opt = getopt(argc, argv, "sV:b:o:")) != -1) {
		switch (opt) {
		case 's':
			/* sparse, as zfs create -s: no refreservation */
			json_array_append_new(props, json_string("refreservation=none"));
			break;
		case 'V':
			volsize = size_arg(optarg, "-V");
			have_volsize = 1;
			break;
		case 'b':
			recsize = size_arg(optarg, "-b");
			have_recsize = 1;
			break;
		case 'o':
			if (!strchr(optarg, '=')) {
				fprintf(stderr, "coffer: -o %s: give prop=value\n", optarg);
				usage_exit();
			}
			if (!strncmp(optarg, "volsize=", 8)) {
				volsize = size_arg(optarg + 8, "volsize");
				have_volsize = 1;
			} else if (!strncmp(optarg, "recordsize=", 11)) {
				recsize = size_arg(optarg + 11, "recordsize");
				have_recsize = 1;
			} else {
				json_array_append_new(props, json_string(optarg));
			}
			break;
		default:
			usage_exit();
		}
	}
	if (argc - optind != 1)
		usage_exit();
	/* sizes not given are left out: the daemon's defaults; a given 0 is refused there */
	args = json_pack("{s:s, s:o}", "name", argv[optind], "props", props);
	if (have_volsize)
		json_object_set_new(args, "volsize", json_integer((json_int_t)volsize));
	if (have_recsize)
		json_object_set_new(args, "recordsize", json_integer((json_int_t)recsize));
	enc = prop_in(props, "encryption");
	fmt = prop_in(props, "keyformat");
	loc = prop_in(props, "keylocation");
	/* a new encryption root needs its key now; ZFS defaults keyformat to passphrase */
	if ((enc && strcmp(enc, "off")) || fmt) {
		size_t n;

		if (!fmt) {
			fmt = "passphrase";
			json_array_append_new(props, json_string("keyformat=passphrase"));
		}
		n = key_read(argv[optind], fmt, loc, 1, key);
		key_attach(args, key, n);
		wipe(key, sizeof(key));
	}
	c = conn_open();
	json_decref(call(c, "ds_create", args, argv[optind]));
	coffer_close(c);
	return 0;
}

static int cmd_destroy(int argc, char **argv)
{
	struct coffer_conn *c;
	int opt, rec = 0, force = 0, clones = 0;

	while ((opt = getopt(argc, argv, "rRf")) != -1) {
		if (opt == 'r')
			rec = 1;
		else if (opt == 'R')
			clones = 1;
		else if (opt == 'f')
			force = 1;
		else
			usage_exit();
	}
	if (argc - optind != 1)
		usage_exit();
	c = conn_open();
	json_decref(call(c, "ds_destroy",
			 json_pack("{s:s, s:b, s:b, s:b}", "name", argv[optind], "recursive", rec,
				   "force", force, "clones", clones),
			 argv[optind]));
	coffer_close(c);
	return 0;
}

static int cmd_clone(int argc, char **argv)
{
	json_t *props = json_array();
	struct coffer_conn *c;
	int opt;

	while ((opt = getopt(argc, argv, "o:")) != -1) {
		if (opt != 'o' || !strchr(optarg, '=')) {
			if (opt == 'o')
				fprintf(stderr, "coffer: -o %s: give prop=value\n", optarg);
			usage_exit();
		}
		json_array_append_new(props, json_string(optarg));
	}
	if (argc - optind != 2)
		usage_exit();
	if (!strchr(argv[optind], '@'))
		die("clone: '%s' is no snapshot; give DATASET@SNAP", argv[optind]);
	c = conn_open();
	json_decref(call(c, "clone",
			 json_pack("{s:s, s:s, s:o}", "name", argv[optind + 1], "origin",
				   argv[optind], "props", props),
			 argv[optind + 1]));
	coffer_close(c);
	return 0;
}

static int cmd_promote(int argc, char **argv)
{
	struct coffer_conn *c;

	if (getopt(argc, argv, "") != -1 || argc - optind != 1)
		usage_exit();
	c = conn_open();
	json_decref(call(c, "promote", json_pack("{s:s}", "name", argv[optind]), argv[optind]));
	coffer_close(c);
	return 0;
}

static int cmd_snapshot(int argc, char **argv)
{
	json_t *more = json_array();
	struct coffer_conn *c;
	int opt, rec = 0;

	while ((opt = getopt(argc, argv, "r")) != -1) {
		if (opt == 'r')
			rec = 1;
		else
			usage_exit();
	}
	if (argc - optind < 1)
		usage_exit();
	for (int i = optind + 1; i < argc; i++)
		json_array_append_new(more, json_string(argv[i]));
	c = conn_open();
	json_decref(call(c, "snapshot",
			 json_pack("{s:s, s:o, s:b}", "name", argv[optind], "more", more,
				   "recursive", rec),
			 argv[optind]));
	coffer_close(c);
	return 0;
}

static int cmd_rollback(int argc, char **argv)
{
	struct coffer_conn *c;
	int opt, rec = 0;

	while ((opt = getopt(argc, argv, "r")) != -1) {
		if (opt == 'r')
			rec = 1;
		else
			usage_exit();
	}
	if (argc - optind != 1)
		usage_exit();
	c = conn_open();
	json_decref(call(c, "rollback",
			 json_pack("{s:s, s:b}", "name", argv[optind], "recursive", rec),
			 argv[optind]));
	coffer_close(c);
	return 0;
}

/* The property a `list` column names: zfs list's short names too. */
static const char *long_name(const char *f)
{
	return !strcmp(f, "avail") ? "available" : !strcmp(f, "refer") ? "referenced" : f;
}

/* Column @f of dataset @d as `list` shows it: "-" where it has no value. */
static const char *list_field(json_t *d, const char *f, int parsable, char *buf, size_t len)
{
	const char *v =
		!strcmp(f, "name")
			? json_string_value(json_object_get(d, "name"))
			: json_string_value(json_object_get(json_object_get(d, "props"), long_name(f)));

	return show(f, v ? v : "-", parsable, buf, len);
}

/*
 * A field of list -o: name, a property (libstore's table) or zfs's short
 * names; anything else is refused, with the field it is a typo of.
 */
static void check_field(const char *f)
{
	const char *name, *values, *near = NULL;
	unsigned d, best = UINT_MAX;
	enum stor_prop_when w;

	if (!strcmp(f, "name") || strcmp(long_name(f), f))
		return;
	for (size_t i = 0; (name = stor_prop_describe(i, &values, &w)); i++) {
		if (!strcmp(name, f))
			return;
		if ((d = stor_typo_distance(f, name)) < best) {
			best = d;
			near = name;
		}
	}
	if (near)
		die("list -o: unknown field '%s' (did you mean '%s'?)", f, near);
	die("list -o: unknown field '%s'; the fields are name and the properties ('coffer help get')",
	    f);
}

static int cmd_list(int argc, char **argv)
{
	const char *fields = "name,used,avail,refer,volsize,recordsize,encryption,keystatus";
	const char *type = "volume";
	int opt, rec = 0, noheader = 0, parsable = 0, own_fields = 0;
	json_t *props = json_array(), *args, *reply, *d;
	char *fcopy, *tok, *save = NULL;
	struct coffer_conn *c;
	const char *f[64];
	size_t nf = 0, i;

	while ((opt = getopt(argc, argv, "rHpo:jt:")) != -1) {
		if (opt == 'r')
			rec = 1;
		else if (opt == 'o')
			fields = optarg, own_fields = 1;
		else if (opt == 't')
			type = optarg;
		else if (!listing_flag(opt, &noheader, &parsable))
			usage_exit();
	}
	if (argc - optind > 1)
		usage_exit();
	if (strcmp(type, "volume") && strcmp(type, "snapshot") && strcmp(type, "all"))
		die("list: -t takes volume, snapshot or all, not '%s'", type);
	if (!own_fields && !strcmp(type, "snapshot"))
		fields = "name,createtxg,volsize,encryption,keystatus";
	fcopy = strdup(fields);
	for (tok = strtok_r(fcopy, ",", &save); tok && nf < 64; tok = strtok_r(NULL, ",", &save)) {
		const char *name, *values;
		enum stor_prop_when w;

		if (strcmp(tok, "all")) {
			check_field(tok);
			f[nf++] = tok;
			if (strcmp(tok, "name"))
				json_array_append_new(props, json_string(long_name(tok)));
			continue;
		}
		/* -o all: the name and every property, as zfs list -o all */
		f[nf++] = "name";
		for (size_t k = 0; (name = stor_prop_describe(k, &values, &w)) && nf < 64; k++) {
			f[nf++] = name;
			json_array_append_new(props, json_string(name));
		}
	}
	args = json_pack("{s:o, s:b, s:s}", "props", props, "recursive", rec, "type", type);
	if (optind < argc)
		json_object_set_new(args, "name", json_string(argv[optind]));
	c = conn_open();
	reply = call(c, "ds_list", args, optind < argc ? argv[optind] : NULL);
	if (opt_json) {
		json_print(reply);
		goto out;
	}
	/* column widths from the data, like zfs list */
	size_t w[64];

	for (i = 0; i < nf; i++)
		w[i] = strlen(f[i]);
	json_array_foreach(json_object_get(reply, "datasets"), i, d) {
		for (size_t k = 0; k < nf; k++) {
			char buf[64];
			const char *v = list_field(d, f[k], parsable, buf, sizeof(buf));

			if (strlen(v) > w[k])
				w[k] = strlen(v);
		}
	}
	if (!noheader) {
		for (i = 0; i < nf; i++) {
			for (const char *p = f[i]; *p; p++)
				putchar(toupper((unsigned char)*p));
			if (i + 1 < nf)
				printf("%*s", (int)(w[i] - strlen(f[i]) + 2), "");
		}
		putchar('\n');
	}
	json_array_foreach(json_object_get(reply, "datasets"), i, d) {
		for (size_t k = 0; k < nf; k++) {
			char buf[64];
			const char *v = list_field(d, f[k], parsable, buf, sizeof(buf));

			if (noheader)
				printf("%s%s", v, k + 1 < nf ? "\t" : "");
			else
				printf("%s%*s", v, k + 1 < nf ? (int)(w[k] - strlen(v) + 2) : 0, "");
		}
		putchar('\n');
	}
out:
	free(fcopy);
	json_decref(reply);
	coffer_close(c);
	return 0;
}

/* One row of get: the columns in @cols, tab-separated with -H, else aligned. */
static void get_row(unsigned cols, int noheader, const char *name, const char *prop,
		    const char *value, const char *source)
{
	const char *cell[] = { name, prop, value, source };
	static const int width[] = { 24, 16, 24, 0 };
	int first = 1, last = 3;

	while (last > 0 && !(cols & (1u << last)))
		last--;
	for (int k = 0; k < 4; k++) {
		if (!(cols & (1u << k)))
			continue;
		if (!first)
			fputs(noheader ? "\t" : " ", stdout);
		if (noheader || k == last)
			fputs(cell[k], stdout);
		else
			printf("%-*s", width[k], cell[k]);
		first = 0;
	}
	putchar('\n');
}

/*
 * zfs get's -o (columns of name, property, value, source; "all") and -s
 * (sources to show: local, default, inherited, none) into bit sets.
 */
enum { GET_NAME = 1, GET_PROPERTY = 2, GET_VALUE = 4, GET_SOURCE = 8 };

static unsigned get_columns(const char *list)
{
	static const char *const cols[] = { "name", "property", "value", "source" };
	char *copy = strdup(list), *save = NULL;
	unsigned set = 0;

	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t k = 0;

		if (!strcmp(t, "all")) {
			set |= GET_NAME | GET_PROPERTY | GET_VALUE | GET_SOURCE;
			continue;
		}
		while (k < 4 && strcmp(t, cols[k]))
			k++;
		if (k == 4)
			die("get -o: unknown field '%s'; the fields are name, property, value, "
			    "source or all",
			    t);
		set |= 1u << k;
	}
	free(copy);
	return set;
}

/* The sources of -s, as the daemon names them; ZFS's "none" (read-only values) is "fixed". */
static const char *const get_srcs[] = { "local", "default", "inherited", "fixed", NULL };

static unsigned source_bit(const char *src)
{
	for (unsigned k = 0; get_srcs[k]; k++)
		if (!strcmp(src, get_srcs[k]))
			return 1u << k;
	return !strcmp(src, "none") || !strcmp(src, "-") ? 1u << 3 : 0;
}

/* The -s list into a bit set, once; ZFS's temporary and received are taken and match nothing. */
static unsigned get_sources(const char *list)
{
	char *copy = strdup(list), *save = NULL;
	unsigned set = 0, b;

	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		b = source_bit(t);
		if (!b && strcmp(t, "temporary") && strcmp(t, "received"))
			die("get -s: unknown source '%s'; the sources are local, default, "
			    "inherited, fixed or none",
			    t);
		set |= b;
	}
	free(copy);
	return set;
}

static int cmd_get(int argc, char **argv)
{
	int opt, noheader = 0, parsable = 0;
	unsigned cols = GET_NAME | GET_PROPERTY | GET_VALUE | GET_SOURCE;
	unsigned sources = ~0u; /* every source, without -s */
	json_t *args, *reply, *v;
	struct coffer_conn *c;
	size_t i;

	while ((opt = getopt(argc, argv, "Hpjo:s:")) != -1) {
		if (opt == 'o')
			cols = get_columns(optarg);
		else if (opt == 's')
			sources = get_sources(optarg);
		else if (!listing_flag(opt, &noheader, &parsable))
			usage_exit();
	}
	if (argc - optind < 2)
		usage_exit();
	c = conn_open();
	for (int k = optind + 1; k < argc; k++) {
		args = json_pack("{s:s}", "name", argv[k]);
		if (strcmp(argv[optind], "all")) {
			json_t *props = json_array();
			char *copy = strdup(argv[optind]), *save = NULL;

			for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
				json_array_append_new(props, json_string(t));
			free(copy);
			json_object_set_new(args, "props", props);
		}
		reply = call(c, "ds_get", args, argv[k]);
		if (!noheader && !opt_json && k == optind + 1)
			get_row(cols, noheader, "NAME", "PROPERTY", "VALUE", "SOURCE");
		if (opt_json) {
			json_print(reply);
			json_decref(reply);
			continue;
		}
		json_array_foreach(json_object_get(reply, "props"), i, v) {
			const char *p = json_string_value(json_object_get(v, "property"));
			const char *src = json_string_value(json_object_get(v, "source"));
			const char *from = json_string_value(json_object_get(v, "inherited_from"));
			char buf[64], sbuf[STOR_NAME_MAX + 32];

			if (sources != ~0u && !(sources & source_bit(src)))
				continue;
			if (!strcmp(src, "inherited") && from && from[0])
				snprintf(sbuf, sizeof(sbuf), "inherited from %s", from);
			else
				snprintf(sbuf, sizeof(sbuf), "%s", src);
			get_row(cols, noheader, argv[k], p,
				show(p, json_string_value(json_object_get(v, "value")), parsable, buf,
				     sizeof(buf)),
				sbuf);
		}
		json_decref(reply);
	}
	coffer_close(c);
	return 0;
}

static int cmd_set(int argc, char **argv)
{
	struct coffer_conn *c;
	char *eq, *prop;

	if (getopt(argc, argv, "") != -1 || argc - optind != 2)
		usage_exit();
	prop = strdup(argv[optind]);
	eq = strchr(prop, '=');
	if (!eq || eq == prop)
		usage_exit();
	*eq = '\0';
	c = conn_open();
	json_decref(call(c, "ds_set",
			 json_pack("{s:s, s:s, s:s}", "name", argv[optind + 1], "prop", prop,
				   "value", eq + 1),
			 argv[optind + 1]));
	free(prop);
	coffer_close(c);
	return 0;
}

/* inherit [-r] PROP DATASET: with -r, DATASET and every dataset under it, as zfs inherit -r */
static int cmd_inherit(int argc, char **argv)
{
	struct coffer_conn *c;
	json_t *reply, *d;
	int opt, rec = 0;
	size_t i;

	while ((opt = getopt(argc, argv, "r")) != -1) {
		if (opt != 'r')
			usage_exit();
		rec = 1;
	}
	if (argc - optind != 2)
		usage_exit();
	c = conn_open();
	if (!rec) {
		json_decref(call(c, "ds_inherit",
				 json_pack("{s:s, s:s}", "name", argv[optind + 1], "prop",
					   argv[optind]),
				 argv[optind + 1]));
		coffer_close(c);
		return 0;
	}
	reply = call(c, "ds_list",
		     json_pack("{s:s, s:b, s:[]}", "name", argv[optind + 1], "recursive", 1, "props"),
		     argv[optind + 1]);
	json_array_foreach(json_object_get(reply, "datasets"), i, d) {
		const char *n = json_string_value(json_object_get(d, "name"));

		json_decref(call(c, "ds_inherit",
				 json_pack("{s:s, s:s}", "name", n, "prop", argv[optind]), n));
	}
	json_decref(reply);
	coffer_close(c);
	return 0;
}

/* Load the key of encryption root @ds. @return 0, or the status when @soft */
static int load_one(struct coffer_conn *c, const char *ds, const char *loc, int noop, int soft)
{
	static const char *const names[] = { "keyformat", "keylocation", "keystatus",
					     "encryptionroot", NULL };
	json_t *p = ds_props(c, ds, names), *args, *reply = NULL;
	const char *fmt = json_string_value(json_object_get(p, "keyformat"));
	const char *ks = json_string_value(json_object_get(p, "keystatus"));
	const char *root = json_string_value(json_object_get(p, "encryptionroot"));
	uint8_t key[KEY_MAX];
	char err[512];
	size_t n;
	int ret;

	/* before any prompt: nobody types a passphrase for a load that will fail */
	if (!fmt || !strcmp(fmt, "none") || !strcmp(fmt, "-"))
		die("%s: dataset is not encrypted; nothing to load", ds);
	if (root && strcmp(root, ds) && strcmp(root, "-"))
		die("%s: the key is its encryption root's; run 'coffer load-key %s'", ds, root);
	if (ks && !strcmp(ks, "available") && !noop)
		die("%s: key already loaded", ds);
	if (!loc)
		loc = json_string_value(json_object_get(p, "keylocation"));
	n = key_read(ds, fmt, loc, 0, key);
	args = json_pack("{s:s, s:b}", "name", ds, "noop", noop);
	key_attach(args, key, n);
	wipe(key, sizeof(key));
	json_decref(p);
	ret = coffer_call(c, "key_load", args, &reply, err, sizeof(err));
	wipe((char *)json_string_value(json_object_get(args, "key_hex")),
	     strlen(json_string_value(json_object_get(args, "key_hex"))));
	json_decref(args);
	json_decref(reply);
	if (ret < 0 && !soft)
		die_call(ret, ds, err);
	if (ret < 0)
		fprintf(stderr, "coffer: %s\n", err);
	return ret;
}

/* Encryption roots (encryptionroot == own name), optionally only those with @keystatus. */
static json_t *enc_roots(struct coffer_conn *c, const char *keystatus)
{
	json_t *reply = call(c, "ds_list",
			     json_pack("{s:[s,s,s]}", "props", "encryptionroot", "keystatus",
				       "keylocation"),
			     NULL);
	json_t *out = json_array(), *d;
	size_t i;

	json_array_foreach(json_object_get(reply, "datasets"), i, d) {
		const char *name = json_string_value(json_object_get(d, "name"));
		json_t *p = json_object_get(d, "props");
		const char *root = json_string_value(json_object_get(p, "encryptionroot"));
		const char *ks = json_string_value(json_object_get(p, "keystatus"));

		if (!root || strcmp(root, name))
			continue;
		if (keystatus && (!ks || strcmp(ks, keystatus)))
			continue;
		json_array_append(out, d);
	}
	json_decref(reply);
	return out;
}

static int cmd_load_key(int argc, char **argv)
{
	const char *loc = NULL;
	int opt, all = 0, noop = 0, failed = 0;
	struct coffer_conn *c;

	while ((opt = getopt(argc, argv, "anL:")) != -1) {
		switch (opt) {
		case 'a':
			all = 1;
			break;
		case 'n':
			noop = 1;
			break;
		case 'L':
			loc = optarg;
			break;
		default:
			usage_exit();
		}
	}
	if (all ? argc - optind != 0 : argc - optind != 1)
		usage_exit();
	c = conn_open();
	if (all) {
		json_t *roots = enc_roots(c, "unavailable"), *d;
		size_t i;

		json_array_foreach(roots, i, d)
			failed |= load_one(c, json_string_value(json_object_get(d, "name")), loc,
					   noop, 1) < 0;
		printf("%zu / %zu keys successfully loaded\n",
		       json_array_size(roots) - (size_t)failed, json_array_size(roots));
		json_decref(roots);
	} else {
		load_one(c, argv[optind], loc, noop, 0);
	}
	coffer_close(c);
	return failed ? 1 : 0;
}

static int cmd_unload_key(int argc, char **argv)
{
	struct coffer_conn *c;
	int opt, all = 0, force = 0;

	while ((opt = getopt(argc, argv, "af")) != -1) {
		if (opt == 'a')
			all = 1;
		else if (opt == 'f')
			force = 1; /* close the handles of whoever has its datasets open */
		else
			usage_exit();
	}
	if (all ? argc - optind != 0 : argc - optind != 1)
		usage_exit();
	c = conn_open();
	if (all) {
		json_t *roots = enc_roots(c, "available"), *d;
		size_t i;

		json_array_foreach(roots, i, d) {
			const char *n = json_string_value(json_object_get(d, "name"));

			json_decref(call(c, "key_unload",
					 json_pack("{s:s, s:b}", "name", n, "force", force), n));
		}
		json_decref(roots);
	} else {
		json_decref(call(c, "key_unload",
				 json_pack("{s:s, s:b}", "name", argv[optind], "force", force),
				 argv[optind]));
	}
	coffer_close(c);
	return 0;
}

static int cmd_change_key(int argc, char **argv)
{
	static const char *const names[] = { "keyformat", "keylocation", NULL };
	json_t *props = json_array(), *args, *cur;
	const char *fmt, *loc;
	struct coffer_conn *c;
	uint8_t key[KEY_MAX];
	int opt, inherit = 0;
	size_t n;

	while ((opt = getopt(argc, argv, "io:")) != -1) {
		switch (opt) {
		case 'i':
			inherit = 1;
			break;
		case 'o':
			if (strncmp(optarg, "keyformat=", 10) && strncmp(optarg, "keylocation=", 12) &&
			    strncmp(optarg, "pbkdf2iters=", 12)) {
				fprintf(stderr, "coffer: change-key: -o %s: only keyformat, "
						"keylocation and pbkdf2iters\n",
					optarg);
				usage_exit();
			}
			json_array_append_new(props, json_string(optarg));
			break;
		default:
			usage_exit();
		}
	}
	if (argc - optind != 1)
		usage_exit();
	if (inherit)
		die("%s: change-key -i is not supported yet; keys stay with this root",
		    argv[optind]);
	c = conn_open();
	cur = ds_props(c, argv[optind], names);
	fmt = prop_in(props, "keyformat");
	loc = prop_in(props, "keylocation");
	if (!fmt)
		fmt = json_string_value(json_object_get(cur, "keyformat"));
	if (!loc)
		loc = json_string_value(json_object_get(cur, "keylocation"));
	if (!fmt || !strcmp(fmt, "none"))
		die("%s: dataset is not encrypted; create it with -o encryption=on", argv[optind]);
	n = key_read(argv[optind], fmt, loc, 1, key);
	args = json_pack("{s:s, s:o}", "name", argv[optind], "props", props);
	key_attach(args, key, n);
	wipe(key, sizeof(key));
	json_decref(cur);
	json_decref(call(c, "key_change", args, argv[optind]));
	coffer_close(c);
	return 0;
}

/* ---- data verbs ---- */

static int ds_open_or_die(struct coffer_conn *c, const char *ds, uint64_t *volsize)
{
	uint32_t rs;
	int h = coffer_ds_open(c, ds, volsize, &rs);

	if (h < 0) {
		char err[512];

		/* the message of ds_open is worth having: ask again through call() */
		json_decref(call(c, "ds_open", json_pack("{s:s}", "name", ds), ds));
		snprintf(err, sizeof(err), "%s: open: %s", ds, proto_strerror(h));
		die_call(h, ds, err);
	}
	return h;
}

static void io_fail(const char *ds, const char *what, uint64_t off, int status)
{
	char err[512];

	snprintf(err, sizeof(err), "%s: %s at offset %llu: %s", ds, what, (unsigned long long)off,
		 proto_strerror(status));
	die_call(status, ds, err);
}

static int cmd_write(int argc, char **argv)
{
	uint8_t *bufs[IO_DEPTH];
	uint64_t offs[IO_DEPTH];
	uint64_t off = 0, volsize, total = 0;
	struct coffer_conn *c;
	unsigned inflight = 0, free_slots[IO_DEPTH], nfree = IO_DEPTH;
	int opt, h, eof = 0;
	size_t chunk;

	while ((opt = getopt(argc, argv, "o:")) != -1) {
		if (opt != 'o')
			usage_exit();
		off = size_arg(optarg, "-o");
	}
	if (argc - optind != 1)
		usage_exit();
	if (isatty(STDIN_FILENO))
		die("write: stdin is a terminal; redirect a file into it");
	c = conn_open();
	h = ds_open_or_die(c, argv[optind], &volsize);
	chunk = coffer_max_io(c) < IO_CHUNK ? coffer_max_io(c) : IO_CHUNK;
	for (unsigned i = 0; i < IO_DEPTH; i++) {
		bufs[i] = malloc(IO_CHUNK);
		if (!bufs[i])
			die("out of memory");
		free_slots[i] = i;
	}
	/* keep IO_DEPTH chunks in flight; completions free their slot */
	while (!eof || inflight) {
		while (!eof && nfree) {
			unsigned s = free_slots[--nfree];
			size_t n = read_fd_all(STDIN_FILENO, bufs[s], chunk);
			int ret;

			if (n == 0) {
				eof = 1;
				free_slots[nfree++] = s;
				break;
			}
			if (n < chunk)
				eof = 1;
			offs[s] = off;
			ret = coffer_submit(c, s, COFFER_WRITE, h, off, (uint32_t)n, bufs[s]);
			if (ret < 0)
				io_fail(argv[optind], "write", off, ret);
			off += n;
			total += n;
			inflight++;
		}
		if (coffer_flush_out(c) < 0)
			die("%s: connection to cofferd lost", argv[optind]);
		if (inflight) {
			struct coffer_completion cc[IO_DEPTH];
			int n = coffer_reap(c, cc, IO_DEPTH, -1);

			if (n < 0)
				die("%s: connection to cofferd lost: %s", argv[optind],
				    proto_strerror(n));
			for (int i = 0; i < n; i++) {
				if (cc[i].status < 0)
					io_fail(argv[optind], "write", offs[cc[i].id], cc[i].status);
				free_slots[nfree++] = cc[i].id;
				inflight--;
			}
		}
	}
	{
		int ret = coffer_ds_flush(c, h);

		if (ret < 0)
			io_fail(argv[optind], "flush", off, ret);
	}
	for (unsigned i = 0; i < IO_DEPTH; i++)
		free(bufs[i]);
	coffer_close(c);
	(void)total;
	return 0;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int cmd_read(int argc, char **argv)
{
	uint8_t *bufs[IO_DEPTH];
	uint32_t lens[IO_DEPTH];
	uint64_t soff[IO_DEPTH];
	int done[IO_DEPTH] = { 0 };
	uint64_t off = 0, len = UINT64_MAX, volsize, next_off, end;
	uint64_t seq_sub = 0, seq_out = 0;
	struct coffer_conn *c;
	uint32_t chunk;
	int opt, h;

	while ((opt = getopt(argc, argv, "o:l:")) != -1) {
		if (opt == 'o')
			off = size_arg(optarg, "-o");
		else if (opt == 'l')
			len = size_arg(optarg, "-l");
		else
			usage_exit();
	}
	if (argc - optind != 1)
		usage_exit();
	if (isatty(STDOUT_FILENO))
		die("%s: read: standard output is a terminal; redirect it to a file or a pipe",
		    argv[optind]);
	c = conn_open();
	h = ds_open_or_die(c, argv[optind], &volsize);
	chunk = coffer_max_io(c) < IO_CHUNK ? coffer_max_io(c) : IO_CHUNK;
	if (off > volsize)
		io_fail(argv[optind], "read", off, STOR_ERANGE);
	end = len == UINT64_MAX || off + len > volsize ? volsize : off + len;
	if (len != UINT64_MAX && off + len > volsize)
		io_fail(argv[optind], "read", off, STOR_ERANGE);
	for (unsigned i = 0; i < IO_DEPTH; i++) {
		bufs[i] = malloc(IO_CHUNK);
		if (!bufs[i])
			die("out of memory");
	}
	/* the ring keeps output in order while replies come in any order */
	next_off = off;
	while (seq_out < seq_sub || next_off < end) {
		while (next_off < end && seq_sub - seq_out < IO_DEPTH) {
			unsigned s = seq_sub % IO_DEPTH;
			uint32_t n = end - next_off < chunk ? (uint32_t)(end - next_off) : chunk;
			int ret = coffer_submit(c, s, COFFER_READ, h, next_off, n, bufs[s]);

			if (ret < 0)
				io_fail(argv[optind], "read", next_off, ret);
			lens[s] = n;
			soff[s] = next_off;
			done[s] = 0;
			next_off += n;
			seq_sub++;
		}
		if (coffer_flush_out(c) < 0)
			die("%s: connection to cofferd lost", argv[optind]);
		struct coffer_completion cc[IO_DEPTH];
		int n = coffer_reap(c, cc, IO_DEPTH, -1);

		if (n < 0)
			die("%s: connection to cofferd lost: %s", argv[optind], proto_strerror(n));
		for (int i = 0; i < n; i++) {
			if (cc[i].status < 0)
				io_fail(argv[optind], "read", soff[cc[i].id], cc[i].status);
			done[cc[i].id] = 1;
		}
		while (seq_out < seq_sub && done[seq_out % IO_DEPTH]) {
			unsigned s = seq_out % IO_DEPTH;

			if (write_all(STDOUT_FILENO, bufs[s], lens[s]) < 0)
				die("read: stdout: %s", strerror(errno));
			done[s] = 0;
			seq_out++;
		}
	}
	for (unsigned i = 0; i < IO_DEPTH; i++)
		free(bufs[i]);
	coffer_close(c);
	return 0;
}

static int cmd_flush(int argc, char **argv)
{
	struct coffer_conn *c;
	int h, ret;

	if (getopt(argc, argv, "") != -1 || argc - optind != 1)
		usage_exit();
	c = conn_open();
	h = ds_open_or_die(c, argv[optind], NULL);
	ret = coffer_ds_flush(c, h);
	if (ret < 0)
		io_fail(argv[optind], "flush", 0, ret);
	coffer_close(c);
	return 0;
}

/* discard DATASET [-o OFFSET] [-l LENGTH]: as blkdiscard does, to the end by default */
static int cmd_discard(int argc, char **argv)
{
	uint64_t off = 0, len = UINT64_MAX, volsize, end;
	const uint64_t step = 1ull << 30; /* per request; a multiple of every recordsize */
	struct coffer_conn *c;
	int opt, h, ret;

	while ((opt = getopt(argc, argv, "o:l:")) != -1) {
		if (opt == 'o')
			off = size_arg(optarg, "-o");
		else if (opt == 'l')
			len = size_arg(optarg, "-l");
		else
			usage_exit();
	}
	if (argc - optind != 1)
		usage_exit();
	c = conn_open();
	h = ds_open_or_die(c, argv[optind], &volsize);
	if (off > volsize || (len != UINT64_MAX && len > volsize - off))
		io_fail(argv[optind], "discard", off, STOR_ERANGE);
	end = len == UINT64_MAX ? volsize : off + len;
	for (uint64_t at = off; at < end; at += step) {
		uint64_t n = end - at < step ? end - at : step;

		ret = coffer_discard(c, h, at, (uint32_t)n);
		if (ret < 0)
			io_fail(argv[optind], "discard", at, ret);
	}
	coffer_close(c);
	return 0;
}

/* ---- service verbs ---- */

static long long io_stat(json_t *r, const char *k)
{
	return (long long)json_integer_value(json_object_get(json_object_get(r, "io"), k));
}

/* The engine's counters of a pool or dataset, indented under it. */
static void engine_stats(json_t *io)
{
	long long sealed, opened;

	if (!io)
		return;
	sealed = (long long)json_integer_value(json_object_get(io, "sealed"));
	opened = (long long)json_integer_value(json_object_get(io, "opened"));
	printf("  requests  %lld reads, %lld writes, %lld errors; latency p50 %.1f us, "
	       "p99 %.1f us\n",
	       (long long)json_integer_value(json_object_get(io, "reads")),
	       (long long)json_integer_value(json_object_get(io, "writes")),
	       (long long)json_integer_value(json_object_get(io, "errors")),
	       (double)json_integer_value(json_object_get(io, "lat_p50_ns")) / 1e3,
	       (double)json_integer_value(json_object_get(io, "lat_p99_ns")) / 1e3);
	printf("  records   %lld sealed (%.2f us each), %lld opened (%.2f us each), "
	       "%lld cksum / %lld auth errors\n",
	       sealed,
	       sealed ? (double)json_integer_value(json_object_get(io, "seal_ns")) / 1e3 /
				(double)sealed
		      : 0.0,
	       opened,
	       opened ? (double)json_integer_value(json_object_get(io, "open_ns")) / 1e3 /
				(double)opened
		      : 0.0,
	       (long long)json_integer_value(json_object_get(io, "cksum_errors")),
	       (long long)json_integer_value(json_object_get(io, "auth_errors")));
	printf("  cache     %lld hits, %lld misses\n",
	       (long long)json_integer_value(json_object_get(io, "cache_hits")),
	       (long long)json_integer_value(json_object_get(io, "cache_misses")));
}

static long long ioval(json_t *io, const char *key)
{
	return (long long)json_integer_value(json_object_get(io, key));
}

static json_t *by_name(json_t *arr, const char *name)
{
	json_t *e;
	size_t i;

	json_array_foreach(arr, i, e) {
		const char *n = json_string_value(json_object_get(e, "name"));
		if (n && !strcmp(n, name))
			return e;
	}
	return NULL;
}

/* One row of the iostat-like table: rates over the interval of @d seconds. */
static void stats_row(const char *name, json_t *io, json_t *pio, double d)
{
	long long hits, misses;
	char hit[16] = "-";

	if (!io)
		return;
#define DELTA(k) (ioval(io, k) - (pio ? ioval(pio, k) : 0))
	hits = DELTA("cache_hits");
	misses = DELTA("cache_misses");
	if (hits + misses)
		snprintf(hit, sizeof(hit), "%.1f", 100.0 * (double)hits / (double)(hits + misses));
	printf("%-24s %9.0f %9.0f %8.1f %8.1f %6s %8.1f %7lld\n", name,
	       (double)DELTA("reads") / d, (double)DELTA("writes") / d,
	       (double)DELTA("read_bytes") / d / 1e6, (double)DELTA("write_bytes") / d / 1e6, hit,
	       (double)ioval(io, "lat_p99_ns") / 1e3, DELTA("errors"));
#undef DELTA
}

/* `coffer stats INTERVAL`: a table per pool and dataset, like iostat -x. */
/* One interval of stats: every pool and its datasets, or with @ds that dataset's row only. */
static void stats_table(json_t *cur, json_t *prev, double d, const char *ds)
{
	json_t *p;
	size_t i;

	printf("%-24s %9s %9s %8s %8s %6s %8s %7s\n", "pool/dataset", "read/s", "write/s",
	       "rMB/s", "wMB/s", "hit%", "p99 us", "errors");
	if (ds) {
		stats_row(ds, json_object_get(cur, "dataset"), json_object_get(prev, "dataset"), d);
		putchar('\n');
		return;
	}
	json_array_foreach(json_object_get(cur, "pools"), i, p) {
		const char *pn = json_string_value(json_object_get(p, "name"));
		json_t *pp = by_name(json_object_get(prev, "pools"), pn), *dsj;
		size_t j;

		if (!json_object_get(p, "io")) {
			printf("%-24s %s\n", pn, json_string_value(json_object_get(p, "state")));
			continue;
		}
		stats_row(pn, json_object_get(p, "io"), pp ? json_object_get(pp, "io") : NULL, d);
		json_array_foreach(json_object_get(p, "datasets_io"), j, dsj) {
			const char *dn = json_string_value(json_object_get(dsj, "name"));
			json_t *pd = pp ? by_name(json_object_get(pp, "datasets_io"), dn) : NULL;
			char label[64];

			if (!strcmp(dn, pn))
				continue; /* the root holds no data */
			snprintf(label, sizeof(label), "  %s", dn);
			stats_row(label, dsj, pd, d);
		}
	}
	putchar('\n');
}

static int cmd_stats(int argc, char **argv)
{
	long interval = 0, count = -1;
	const char *ds = NULL;
	struct coffer_conn *c;
	json_t *prev = NULL, *cur;
	int opt;

	while ((opt = getopt(argc, argv, "jd:")) != -1) {
		if (opt == 'j')
			opt_json = 1;
		else if (opt == 'd')
			ds = optarg;
		else
			usage_exit();
	}
	if (argc - optind > 2)
		usage_exit();
	if (optind < argc) {
		char *end;

		interval = strtol(argv[optind], &end, 10);
		if (*end || interval <= 0)
			usage_exit();
		if (optind + 1 < argc) {
			count = strtol(argv[optind + 1], &end, 10);
			if (*end || count <= 0)
				usage_exit();
		}
	}
	c = conn_open();
	for (long i = 0;; i++) {
		cur = call(c, "stats",
			   ds ? json_pack("{s:s}", "name", ds)
			      : interval ? json_pack("{s:b}", "datasets", 1) : NULL,
			   ds);
		if (opt_json) {
			char *s = json_dumps(cur, JSON_COMPACT);

			puts(s);
			free(s);
		} else if (!interval) {
			const char *keys[] = { "reads",	  "writes",	 "flushes",   "discards",
					       "read_bytes", "write_bytes", "io_errors", "admin_calls",
					       "eperm",	  "bad_frames",	 "connections_total",
					       "connections_open", "batches", "batched_ios",
					       "inflight_peak", NULL };

			json_t *p;
			size_t j;

			for (int k = 0; keys[k]; k++)
				printf("%-18s %lld\n", keys[k], io_stat(cur, keys[k]));
			json_array_foreach(json_object_get(cur, "pools"), j, p) {
				char us[32], sz[32];

				human_field(p, "used", us, sizeof(us));
				human_field(p, "size", sz, sizeof(sz));
				printf("pool %-13s %s, %s of %s used, txg %lld, %lld open handles\n",
				       json_string_value(json_object_get(p, "name")),
				       json_string_value(json_object_get(p, "state")), us, sz,
				       (long long)json_integer_value(json_object_get(p, "txg")),
				       (long long)json_integer_value(json_object_get(p, "handles")));
				engine_stats(json_object_get(p, "io"));
			}
			if (ds) {
				printf("dataset %s\n", ds);
				engine_stats(json_object_get(cur, "dataset"));
			}
		} else if (prev) {
			stats_table(cur, prev, (double)interval, ds);
		}
		fflush(stdout);
		json_decref(prev);
		prev = cur;
		/* COUNT lines of rates take COUNT + 1 samples */
		if (!interval || opt_json ? (count > 0 && i + 1 >= count) || !interval
					  : (count > 0 && i >= count))
			break;
		sleep((unsigned)interval);
	}
	json_decref(prev);
	coffer_close(c);
	return 0;
}

static int cmd_version(int argc, char **argv)
{
	struct coffer_conn *c;
	json_t *r;

	if (getopt(argc, argv, "") != -1 || argc != optind)
		usage_exit();
	printf("coffer %s (protocol %u)\n", PACKAGE_VERSION, PROTO_VERSION);
	c = conn_open();
	r = call(c, "version", NULL, NULL);
	printf("cofferd %s (protocol %lld)\n", json_string_value(json_object_get(r, "version")),
	       (long long)json_integer_value(json_object_get(r, "protocol")));
	json_decref(r);
	coffer_close(c);
	return 0;
}

static int cmd_ping(int argc, char **argv)
{
	struct coffer_conn *c;

	if (getopt(argc, argv, "") != -1 || argc != optind)
		usage_exit();
	c = conn_open();
	json_decref(call(c, "ping", NULL, NULL));
	printf("cofferd is alive at %s\n", coffer_socket_path(opt_socket));
	coffer_close(c);
	return 0;
}

static int cmd_labelclear(int argc, char **argv)
{
	struct coffer_conn *c;
	int force = only_flag(argc, argv, 'f');

	if (argc - optind < 1)
		usage_exit();
	c = conn_open();
	for (int i = optind; i < argc; i++) {
		char *p = abs_path(argv[i]);

		json_decref(call(c, "labelclear", json_pack("{s:s, s:b}", "lun", p, "force", force),
				 p));
		free(p);
	}
	coffer_close(c);
	return 0;
}

static int cmd_bench(int argc, char **argv)
{
	/* coffer -S SOCKET bench ...: the bench's own --socket still wins */
	if (opt_socket && setenv("COFFER_SOCKET", opt_socket, 1) < 0)
		die("setenv: %s", strerror(errno));
	return bench_main(argc, argv);
}

static int cmd_help(int argc, char **argv);
static int unknown_verb(const struct cmd *table, const char *prefix, const char *verb);

static const struct cmd cmds[] = {
	{ "pool", cmd_pool, "create|add|list|status|check|clear|scrub|offline|online|replace|"
			    "attach|detach|export|import|destroy ...",
	  "Pools: run 'coffer help pool VERB' for one of create, add, list, status, check, "
	  "clear, scrub, offline, online, replace, attach, detach, export, import, destroy." },
	{ "create", cmd_create, "[-s] [-V SIZE] [-b RECORDSIZE] [-o prop=val]... POOL/NAME",
	  "Create volume POOL/NAME.\n"
	  "  -s          sparse: no refreservation\n"
	  "  -V SIZE     volume size (a multiple of the recordsize)\n"
	  "  -b SIZE     recordsize, a power of 2 from 512 to 1M\n"
	  "  -o P=V      set property P (see PROPERTIES below)" },
	{ "destroy", cmd_destroy, "[-rR] [-f] DATASET | DATASET@SNAP[%SNAP]",
	  "Destroy DATASET, or snapshots (@a%b: from a to b; @a% and @%b open ends).\n"
	  "  -r  its children (or their snapshots of that name) too\n"
	  "  -R  the clones of what goes too (and theirs); implies -r\n"
	  "  -f  close the handles of its users" },
	{ "clone", cmd_clone, "[-o prop=val]... DATASET@SNAP POOL/NAME",
	  "Make POOL/NAME from the snapshot, in constant time: it reads the snapshot's\n"
	  "data until it writes its own, and shares its encryption root and key.\n"
	  "  -o P=V  set property P (not volsize, recordsize nor the key's)" },
	{ "promote", cmd_promote, "CLONE",
	  "Make CLONE the owner of its origin's snapshots up to its origin; the old\n"
	  "origin becomes a clone of that snapshot. Both read as before." },
	{ "snapshot", cmd_snapshot, "[-r] DATASET@SNAP...",
	  "Snapshot the datasets named, all in one txg, in constant time.\n"
	  "  -r  every dataset under each one too" },
	{ "rollback", cmd_rollback, "[-r] DATASET@SNAP",
	  "Bring DATASET back to its snapshot, freeing what was written since.\n"
	  "  -r  destroy the newer snapshots (refused without it)" },
	{ "list", cmd_list,
	  "[-r] [-H] [-p] [-t volume|snapshot|all] [-o field[,field]...] [-j] [DATASET]",
	  "List datasets.\n"
	  "  -r        recursively under DATASET\n"
	  "  -t TYPE   volume (default), snapshot or all\n"
	  "  -H        no header, tabs between fields\n"
	  "  -p        exact numbers\n"
	  "  -o F,...  fields: name and properties (an unknown one is refused), or all\n"
	  "  -j        JSON" },
	{ "get", cmd_get,
	  "[-H] [-p] [-j] [-o FIELD[,FIELD]...] [-s SOURCE[,SOURCE]...] PROP[,PROP]...|all "
	  "DATASET...",
	  "Show properties of datasets; 'all' for every one.\n"
	  "  -H         no header, tabs between fields\n"
	  "  -p         exact numbers\n"
	  "  -j         JSON\n"
	  "  -o FIELDS  columns: name, property, value, source, or all\n"
	  "  -s SOURCES rows whose source is local, default, inherited or none" },
	{ "set", cmd_set, "PROP=VALUE DATASET",
	  "Set property PROP of DATASET (see PROPERTIES below)." },
	{ "inherit", cmd_inherit, "[-r] PROP DATASET",
	  "Drop the local value of PROP: DATASET inherits it again.\n"
	  "  -r  and every dataset under DATASET" },
	{ "load-key", cmd_load_key, "[-n] [-L LOCATION] -a | DATASET",
	  "Load the key of encryption root DATASET from its keylocation.\n"
	  "  -a    every root whose key is not loaded\n"
	  "  -n    check the key only\n"
	  "  -L L  read it from L (prompt or file:///path) this once" },
	{ "unload-key", cmd_unload_key, "[-f] -a | DATASET",
	  "Wipe the key of encryption root DATASET from memory.\n"
	  "  -a  every root whose key is loaded\n"
	  "  -f  close the handles of its datasets' users" },
	{ "change-key", cmd_change_key,
	  "[-o keyformat=FMT] [-o keylocation=LOC] [-o pbkdf2iters=N] DATASET",
	  "Wrap the key of encryption root DATASET anew (its data keys stay).\n"
	  "  -o keyformat=raw|hex|passphrase\n"
	  "  -o keylocation=prompt|file:///path\n"
	  "  -o pbkdf2iters=N" },
	{ "write", cmd_write, "DATASET [-o OFFSET] < FILE",
	  "Write standard input to DATASET.\n  -o OFFSET  from byte OFFSET" },
	{ "read", cmd_read, "DATASET[@SNAP] [-o OFFSET] [-l LENGTH] > FILE",
	  "Write DATASET to standard output (refused on a terminal).\n"
	  "  -o OFFSET  from byte OFFSET\n"
	  "  -l LENGTH  that many bytes" },
	{ "discard", cmd_discard, "DATASET [-o OFFSET] [-l LENGTH]",
	  "Discard bytes of DATASET, to the end by default: they read back as zeros and the "
	  "records\nthey cover whole are freed.\n"
	  "  -o OFFSET  from byte OFFSET\n"
	  "  -l LENGTH  that many bytes" },
	{ "flush", cmd_flush, "DATASET",
	  "Make every write to DATASET durable." },
	{ "labelclear", cmd_labelclear, "[-f] LUN...",
	  "Wipe the coffer labels of LUNs no pool uses.\n  -f  of an exported pool's LUN too" },
	{ "stats", cmd_stats, "[-j] [-d DATASET] [INTERVAL [COUNT]]",
	  "Show I/O counters, every INTERVAL seconds, COUNT times.\n"
	  "  -j          JSON\n"
	  "  -d DATASET  that dataset's rows" },
	{ "bench", cmd_bench, "[options] [PARAMFILE] (see coffer-bench(8))",
	  "Run a vdbench-style load test; see coffer-bench(8)." },
	{ "ping", cmd_ping, "",
	  "Check that the daemon answers." },
	{ "version", cmd_version, "",
	  "Show the client's and the daemon's versions." },
	{ "help", cmd_help, "[VERB]",
	  "Show the verbs, or what VERB does and takes." },
	{ NULL, NULL, NULL, NULL },
};

static void help(FILE *f)
{
	fprintf(f, "usage: coffer [-S SOCKET] [-j] VERB [ARGS]\n\nverbs:\n");
	for (const struct cmd *t = cmds; t->name; t++) {
		if (t->fn == cmd_pool) {
			for (const struct cmd *p = pool_cmds; p->name; p++)
				fprintf(f, "  pool %-10s %s\n", p->name, p->usage);
			continue;
		}
		fprintf(f, "  %-15s %s\n", t->name, t->usage);
	}
	fprintf(f, "\nSizes take K, M, G, T, P or E (1.5G, 8KiB). The socket is -S, else "
		   "$COFFER_SOCKET, else the default of cofferd.\n");
}

/* coffer help VERB, coffer VERB --help: what it does, its options, the properties it takes */
static void verb_help(const struct cmd *t, const char *prefix)
{
	static const char *const when[] = { "read-only", "at create", "" };
	const char *name, *values;
	enum stor_prop_when w;

	printf("usage: coffer %s%s %s\n", prefix, t->name, t->usage);
	if (t->help)
		printf("\n%s\n", t->help);
	if (prefix[0] || (strcmp(t->name, "create") && strcmp(t->name, "set") &&
			  strcmp(t->name, "get") && strcmp(t->name, "inherit")))
		return;
	printf("\nPROPERTIES\n");
	for (size_t i = 0; (name = stor_prop_describe(i, &values, &w)); i++)
		if (w != STOR_PROP_READONLY || !strcmp(t->name, "get"))
			printf("  %-22s %s%s%s%s\n", name, values, w != STOR_PROP_SETTABLE ? " (" : "",
			       w != STOR_PROP_SETTABLE ? when[w] : "",
			       w != STOR_PROP_SETTABLE ? ")" : "");
}

static int cmd_help(int argc, char **argv)
{
	if (argc > 1) {
		const struct cmd *table = cmds;
		const char *prefix = "", *verb = argv[1];

		if (!strcmp(argv[1], "pool") && argc > 2) {
			table = pool_cmds;
			prefix = "pool ";
			verb = argv[2];
		}
		for (const struct cmd *t = table; t->name; t++) {
			if (!strcmp(t->name, verb)) {
				verb_help(t, prefix);
				return 0;
			}
		}
		return unknown_verb(table, prefix, verb);
	}
	help(stdout);
	return 0;
}

/* "unknown verb", with the verb of @table it is a typo of (typo.c) */
static int unknown_verb(const struct cmd *table, const char *prefix, const char *verb)
{
	const struct cmd *near = NULL;
	unsigned d, best = UINT_MAX;

	for (const struct cmd *t = table; t->name; t++)
		if ((d = stor_typo_distance(verb, t->name)) < best) {
			best = d;
			near = t;
		}
	if (near)
		fprintf(stderr, "coffer: unknown verb '%s%s' (did you mean '%s%s'?)\n", prefix, verb,
			prefix, near->name);
	else
		fprintf(stderr, "coffer: unknown verb '%s%s'; run 'coffer help'\n", prefix, verb);
	return 2;
}

static int dispatch(const struct cmd *table, const char *prefix, int argc, char **argv)
{
	for (const struct cmd *t = table; t->name; t++) {
		if (strcmp(t->name, argv[0]))
			continue;
		cur_cmd = t;
		cur_prefix = prefix;
		if (argc > 1 && !strcmp(argv[1], "--help") && t->fn != cmd_bench) {
			verb_help(t, prefix);
			return 0;
		}
		/* 0, not 1: glibc re-initialises, so options may follow operands again */
		optind = 0;
		return t->fn(argc, argv);
	}
	return unknown_verb(table, prefix, argv[0]);
}

int main(int argc, char **argv)
{
	int opt;

	static const struct option longs[] = {
		{ "socket", required_argument, NULL, 'S' }, { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },	    { "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};

	/* global options stop at the verb; '+' keeps getopt from permuting past it */
	while ((opt = getopt_long(argc, argv, "+S:jhV", longs, NULL)) != -1) {
		switch (opt) {
		case 'S':
			opt_socket = optarg;
			break;
		case 'j':
			opt_json = 1;
			break;
		case 'h':
			help(stdout);
			return 0;
		case 'V':
			printf("coffer %s (protocol %u)\n", PACKAGE_VERSION, PROTO_VERSION);
			return 0;
		default:
			help(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		help(stderr);
		return 2;
	}
	return dispatch(cmds, "", argc - optind, argv + optind);
}
