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
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "client.h"
#include "iostat.h"
#include "jsonout.h"
#include "keysource.h"
#include "pool_health.h"
#include "prop_names.h"
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
		/* the daemon names the busy datasets or the side, and says what to do;
		 * so does libstore's reason for rekey (one runs; snapshots, clones,
		 * children), and for snapshot and change-key (a rekey or receive runs) */
		if (!strcmp(cur_prefix, "pool ") || !strcmp(cur_cmd->name, "rekey") ||
		    !strcmp(cur_cmd->name, "snapshot") || !strcmp(cur_cmd->name, "change-key"))
			return "";
		if (!strcmp(cur_cmd->name, "destroy") && !cur_prefix[0])
			return "; close its users first or give -f to close their handles; -r for "
			       "children";
		/* only a verb that has -f is told to give it */
		if (strstr(cur_cmd->usage, "-f"))
			return "; close its users first, or give -f to close their handles";
		return "; close its users first ('coffer stats' and the daemon's log show the "
		       "handles)";
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
		if (strchr(obj, '@') && !no_pool)
			return "; see 'coffer list -t snapshot' for the snapshots there are";
		if (strchr(obj, '/') && !no_pool)
			return "; see 'coffer list' for the datasets there are";
		return "; see 'coffer pool list', or 'coffer pool import' for exported pools";
	case -EUSERS:
		return "; try again later or raise max_connections";
	default:
		return "";
	}
}

/* The line on stderr for a call about @obj that failed with @status, @err. */
static void report_call(int status, const char *obj, const char *err)
{
	char buf[512];

	/* the daemon's reason for a refused value says what is allowed: no generic
	 * hint; nor does a reason that names the command to run need a second one */
	if (((status == STOR_EBADPROP || status == -EINVAL) && err && err[0] &&
	     !strstr(err, proto_strerror(status))) ||
	    (err && strstr(err, "; run 'coffer "))) {
		fprintf(stderr, "coffer: %s\n", err);
		return;
	}
	fprintf(stderr, "coffer: %s%s\n", err && err[0] ? err : proto_strerror(status),
		hint(status, obj ? obj : "DATASET", err && strstr(err, "no such pool") != NULL, buf,
		     sizeof(buf)));
}

static void __attribute__((noreturn)) die_call(int status, const char *obj, const char *err)
{
	report_call(status, obj, err);
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

/* Call @cmd about @obj; on failure print its line and @return -1 (a verb
 * over several datasets goes on with the next, as zfs does). Steals @args. */
static int call_each(struct coffer_conn *c, const char *cmd, json_t *args, const char *obj)
{
	char err[512];
	int ret = coffer_call(c, cmd, args, NULL, err, sizeof(err));

	json_decref(args);
	if (ret < 0)
		report_call(ret, obj, err);
	return ret < 0 ? -1 : 0;
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

/* A time property: seconds since the epoch on the wire and with -p, a date otherwise. */
static int is_time_prop(const char *p)
{
	return !strcmp(p, "creation");
}

/* Shown other than as sent: sizes and times, unless -p. */
static int is_shown_prop(const char *p)
{
	return is_size_prop(p) || is_time_prop(p);
}

/* @value as shown: sizes humanized and times as dates (zfs's "%a %b %e %k:%M %Y") unless
 * @parsable. */
static const char *show(const char *prop, const char *value, int parsable, char *buf, size_t len)
{
	char *end;
	unsigned long long v;

	if (parsable || !is_shown_prop(prop) || !value[0])
		return value;
	v = strtoull(value, &end, 10);
	if (*end)
		return value;
	if (is_time_prop(prop)) {
		time_t t = (time_t)v;
		struct tm tm;

		if (!localtime_r(&t, &tm) || !strftime(buf, len, "%a %b %e %k:%M %Y", &tm))
			return value;
		return buf;
	}
	human(v, buf, len);
	return buf;
}

/* ---- key material ---- */

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

/* How key_get() asks, and what it may skip. */
#define KEY_CONFIRM 0x1u /* a new key: a passphrase is asked twice */
#define KEY_NEW 0x2u     /* the prompts say "new" (change-key) */
#define KEY_BATCH 0x4u   /* load-key -a/-r: a prompt with no terminal and an empty stdin skips */
#define KEY_SKIPPED (-2)

/* Text formats end at the first newline; a raw key is all its bytes (key_get
 * refuses one that is not 32: cut short, a hex key file by mistake would
 * load as its first 32 characters). */
static size_t key_trim(const char *format, const uint8_t *buf, size_t n)
{
	size_t l = 0;

	if (!strcmp(format, "raw"))
		return n;
	while (l < n && buf[l] != '\n' && buf[l] != '\r')
		l++;
	return l;
}

/* The password agent of $COFFER_ASKPASS, or NULL: then prompts go to the terminal. */
static const char *askpass(void)
{
	const char *a = getenv("COFFER_ASKPASS");

	return a && a[0] ? a : NULL;
}

/* One prompt, on the agent or the terminal. @return bytes, or -1 with @why */
static ssize_t ask_once(const char *ds, const char *prompt, uint8_t *buf, size_t cap, char *why,
			size_t whylen)
{
	char e[512];
	ssize_t n;

	if (!askpass())
		return (ssize_t)prompt_tty(prompt, (char *)buf, cap);
	n = keysource_askpass(askpass(), prompt, buf, cap, e, sizeof(e));
	if (n < 0)
		snprintf(why, whylen, "%s: %s", ds, e);
	return n;
}

/* Ask for the key of @ds, twice with KEY_CONFIRM. @return bytes, or -1 with @why */
static ssize_t ask(const char *ds, const char *format, unsigned how, uint8_t *buf, char *why,
		   size_t whylen)
{
	const char *what = !strcmp(format, "passphrase") ? "passphrase" : "key";
	const char *new = how & KEY_NEW ? "new " : "";
	char prompt[STOR_NAME_MAX + 64];
	uint8_t again[KEY_MAX];
	ssize_t n, m;

	snprintf(prompt, sizeof(prompt), "Enter %s%s for '%s': ", new, what, ds);
	n = ask_once(ds, prompt, buf, KEY_MAX, why, whylen);
	if (n < 0 || !(how & KEY_CONFIRM))
		return n;
	snprintf(prompt, sizeof(prompt), "Re-enter %s%s for '%s': ", new, what, ds);
	m = ask_once(ds, prompt, again, sizeof(again), why, whylen);
	if (m >= 0 && (key_trim(format, buf, (size_t)n) != key_trim(format, again, (size_t)m) ||
		       memcmp(buf, again, key_trim(format, buf, (size_t)n)))) {
		snprintf(why, whylen, "%s: the two entries do not match; try again", ds);
		m = -1;
	}
	wipe(again, sizeof(again));
	if (m < 0) {
		wipe(buf, KEY_MAX);
		return -1;
	}
	return n;
}

/* The CA certificates of the daemon's key_https_ca into *@pem (NULL: the system's). */
static int https_ca(struct coffer_conn *c, const char *ds, char **pem, char *why, size_t whylen)
{
	json_t *reply = NULL;
	char err[512];
	const char *s;
	int ret = coffer_call(c, "key_https_ca", NULL, &reply, err, sizeof(err));

	*pem = NULL;
	if (ret < 0) {
		snprintf(why, whylen, "%s: the CA certificates for its key server: %s", ds, err);
		return -1;
	}
	s = json_string_value(json_object_get(reply, "pem"));
	if (s && !(*pem = strdup(s)))
		die("out of memory");
	json_decref(reply);
	return 0;
}

/*
 * Read the key for @ds in @format from @location into @buf (KEY_MAX bytes):
 * a file, a key server (its CA certificates from the daemon's config, asked
 * through @c), or a prompt: $COFFER_ASKPASS when set, else the terminal,
 * else a line (a raw key: 32 bytes) of stdin, so that `load-key -a` can take
 * several from a pipe. With KEY_BATCH a prompt that finds no terminal, no
 * agent and nothing on stdin gives KEY_SKIPPED: that root waits for a person.
 * @return the key's length, KEY_SKIPPED, or -1 with one line in @why
 */
static ssize_t key_get(struct coffer_conn *c, const char *ds, const char *format,
		       const char *location, unsigned how, uint8_t *buf, char *why, size_t whylen)
{
	int prompt = !location || !strcmp(location, "prompt");
	char e[512];
	ssize_t n;

	if (location && !strncmp(location, "file://", 7)) {
		int fd = open(location + 7, O_RDONLY | O_CLOEXEC);
		struct stat st;

		if (fd < 0) {
			snprintf(why, whylen, "%s: keylocation %s: %s; fix the path or use %s", ds,
				 location, strerror(errno),
				 how & KEY_CONFIRM ? "-o keylocation=prompt" : "-L prompt");
			return -1;
		}
		/* as ssh warns of a private key others can read */
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0044))
			fprintf(stderr,
				"coffer: warning: %s: key file %s: mode %04o lets others read the "
				"key; chmod 600 it\n",
				ds, location + 7, (unsigned)(st.st_mode & 07777));
		n = coffer_read_full(fd, buf, KEY_MAX);
		close(fd);
		if (n < 0) {
			snprintf(why, whylen, "%s: keylocation %s: %s", ds, location, strerror((int)-n));
			return -1;
		}
	} else if (location &&
		   (!strncmp(location, "https://", 8) || !strncmp(location, "http://", 7))) {
		char *ca = NULL;

		if (!keysource_url_supported()) {
			keysource_url(location, NULL, buf, KEY_MAX, e, sizeof(e));
			snprintf(why, whylen, "%s: keylocation %s: %s", ds, location, e);
			return -1;
		}
		if (https_ca(c, ds, &ca, why, whylen) < 0)
			return -1;
		n = keysource_url(location, ca, buf, KEY_MAX, e, sizeof(e));
		free(ca);
		if (n < 0) {
			snprintf(why, whylen, "%s: keylocation %s: %s", ds, location, e);
			return -1;
		}
	} else if (!prompt) {
		snprintf(why, whylen,
			 "%s: keylocation '%s' is not supported; use prompt, file:///path or "
			 "https://URL",
			 ds, location);
		return -1;
	} else if (askpass() || isatty(STDIN_FILENO)) {
		n = ask(ds, format, how, buf, why, whylen);
		if (n < 0)
			return -1;
	} else if (!strcmp(format, "raw")) {
		n = coffer_read_full(STDIN_FILENO, buf, 32);
		if (n < 0) {
			snprintf(why, whylen, "%s: reading the key from standard input: %s", ds,
				 strerror((int)-n));
			return -1;
		}
	} else {
		/* one line per key, so `load-key -a` can take several from a pipe */
		n = 0;
		while (n < KEY_MAX && read(STDIN_FILENO, buf + n, 1) == 1 && buf[n] != '\n')
			n++;
	}
	if (n == 0 && prompt && (how & KEY_BATCH) && !askpass() && !isatty(STDIN_FILENO)) {
		snprintf(why, whylen,
			 "%s: keylocation=prompt and no terminal: skipped (run 'coffer load-key %s' "
			 "on a terminal, pipe the key in, or set COFFER_ASKPASS)",
			 ds, ds);
		return KEY_SKIPPED;
	}
	n = (ssize_t)key_trim(format, buf, (size_t)n);
	if (n == 0) {
		snprintf(why, whylen, "%s: empty key; give a %s", ds, format);
		return -1;
	}
	if (!strcmp(format, "raw") && n != 32) {
		snprintf(why, whylen,
			 "%s: a raw key is exactly 32 bytes, this one is %zd%s", ds, n,
			 n == 64 || n == 65 ? " (64 hex digits are keyformat=hex)" : "");
		wipe(buf, KEY_MAX);
		return -1;
	}
	return n;
}

/* key_get(), and on failure the one line and exit 1. */
static size_t key_read(struct coffer_conn *c, const char *ds, const char *format,
		       const char *location, unsigned how, uint8_t *buf)
{
	char why[1024];
	ssize_t n = key_get(c, ds, format, location, how, buf, why, sizeof(why));

	if (n < 0)
		die("%s", why);
	return (size_t)n;
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

	/* rados:POOL/PREFIX (a LUN) and rados:POOL (where import -d looks) stay */
	if (stor_lun_path_ok(p) || stor_search_dir_ok(p))
		return strdup(p);
	if (!getcwd(cwd, sizeof(cwd)))
		die("getcwd: %s", strerror(errno));
	if (asprintf(&out, "%s/%s", cwd, p) < 0)
		die("out of memory");
	return out;
}

/*
 * A LUN named on the command line, as zpool takes it: an absolute path, or
 * a name under /dev ("sdb", "disk/by-id/..."), or a RADOS LUN
 * ("rados:POOL/PREFIX"). A relative path is refused:
 * taken from the working directory it would quietly make a file there.
 */
static char *lun_path(const char *p)
{
	char *out;

	if (stor_lun_path_ok(p))
		return strdup(p);
	if (asprintf(&out, "/dev/%s", p) < 0)
		die("out of memory");
	if (strncmp(p, "./", 2) && strncmp(p, "../", 3) && access(out, F_OK) == 0)
		return out;
	free(out);
	die("LUN '%s': give an absolute path for a file, a device name under /dev, or "
	    "rados:POOL/PREFIX",
	    p);
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

/*
 * The properties of a pool, as pool list -o and pool get name them: zpool's
 * names, with coffer's older column names (used, state) and zpool's short
 * ones (alloc, cap) as aliases. Each is read from the pool_list reply; all
 * are read-only (pool create -o sets the root dataset's properties).
 */
static const struct pool_prop {
	const char *name, *alias[2];
	const char *key; /* in the reply; NULL: computed (capacity) */
	int size;        /* humanized unless -p */
} pool_props[] = {
	{ "name", { NULL, NULL }, "name", 0 },
	{ "size", { NULL, NULL }, "size", 1 },
	{ "allocated", { "alloc", "used" }, "used", 1 },
	{ "free", { NULL, NULL }, "free", 1 },
	{ "capacity", { "cap", NULL }, NULL, 0 },
	{ "health", { "state", NULL }, "state", 0 },
	{ "guid", { NULL, NULL }, "guid", 0 },
	{ "txg", { NULL, NULL }, "txg", 0 },
	{ "luns", { NULL, NULL }, "nluns", 0 },
	{ "datasets", { NULL, NULL }, "datasets", 0 },
	{ "metadata_used", { NULL, NULL }, "metadata_used", 1 },
	{ "logicalused", { NULL, NULL }, "logical_used", 1 },
	{ "handles", { NULL, NULL }, "handles", 0 },
};
#define NPOOL_PROPS (sizeof(pool_props) / sizeof(pool_props[0]))

/* The pool property @f names, or die naming the one it is a typo of. */
static const struct pool_prop *pool_prop_find(const char *f, const char *what)
{
	const char *near = NULL;
	unsigned d, best = UINT_MAX;

	for (size_t i = 0; i < NPOOL_PROPS; i++) {
		const struct pool_prop *pp = &pool_props[i];

		if (!strcmp(f, pp->name) || (pp->alias[0] && !strcmp(f, pp->alias[0])) ||
		    (pp->alias[1] && !strcmp(f, pp->alias[1])))
			return pp;
		if ((d = stor_typo_distance(f, pp->name)) < best) {
			best = d;
			near = pp->name;
		}
	}
	if (near)
		die("%s: unknown pool property '%s' (did you mean '%s'?)", what, f, near);
	die("%s: unknown pool property '%s'; run 'coffer help pool get'", what, f);
}

/*
 * Property @pp of pool @p as shown into @buf, and its exact digits into
 * @exact ("" when it is no number). A pool that did not open has only a
 * name and a health.
 */
static const char *pool_value(json_t *p, const struct pool_prop *pp, int parsable, char *buf,
			      size_t len, char *exact, size_t elen)
{
	json_t *v;

	exact[0] = '\0';
	if (!pp->key) { /* capacity: allocated of size, in percent */
		uint64_t s = (uint64_t)json_integer_value(json_object_get(p, "size"));
		uint64_t u = (uint64_t)json_integer_value(json_object_get(p, "used"));

		if (!json_object_get(p, "size") || !s)
			return "-";
		snprintf(exact, elen, "%llu", (unsigned long long)(u * 100 / s));
		snprintf(buf, len, parsable ? "%s" : "%s%%", exact);
		return buf;
	}
	v = json_object_get(p, pp->key);
	if (json_is_string(v))
		return json_string_value(v);
	if (!json_is_integer(v))
		return "-";
	snprintf(exact, elen, "%lld", (long long)json_integer_value(v));
	if (pp->size && !parsable)
		human((uint64_t)json_integer_value(v), buf, len);
	else
		snprintf(buf, len, "%s", exact);
	return buf;
}

/* The property names of a comma list (or "all") into @out; @return how many. */
static size_t pool_props_arg(const char *list, const struct pool_prop **out, size_t cap,
			     const char *what)
{
	char *copy = strdup(list), *save = NULL;
	size_t n = 0;

	for (char *t = strtok_r(copy, ",", &save); t && n < cap; t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "all")) {
			for (size_t i = 0; i < NPOOL_PROPS && n < cap; i++)
				out[n++] = &pool_props[i];
			continue;
		}
		out[n++] = pool_prop_find(t, what);
	}
	free(copy);
	if (!n)
		die("%s: give one or more pool properties", what);
	return n;
}

/* A pool of the pool_list reply as pool list -j and pool get -j print it (zpool list -j). */
static json_t *pool_entry_json(json_t *p, const struct pool_prop *const *props, size_t n,
			       int parsable)
{
	json_t *o = json_pack("{s:s, s:s, s:s}", "name", json_string_value(json_object_get(p, "name")),
			      "type", "POOL", "state",
			      json_string_value(json_object_get(p, "state"))),
	       *jp = json_object();

	if (json_object_get(p, "guid"))
		json_object_set(o, "pool_guid", json_object_get(p, "guid"));
	if (json_object_get(p, "txg"))
		json_object_set_new(o, "txg",
				    jout_uint((unsigned long long)json_integer_value(
					    json_object_get(p, "txg"))));
	if (json_object_get(p, "error"))
		json_object_set(o, "error", json_object_get(p, "error"));
	for (size_t k = 0; k < n; k++) {
		char buf[64], exact[32];
		const char *v = pool_value(p, props[k], parsable, buf, sizeof(buf), exact,
					   sizeof(exact));

		if (strcmp(props[k]->name, "name"))
			json_object_set_new(jp, props[k]->name,
					    jout_prop(props[k]->name, v, exact, "-", NULL));
	}
	json_object_set_new(o, "properties", jp);
	return o;
}

/* A column's header, as zpool list has them: ALLOC and CAP for the long names. */
static const char *pool_header(const struct pool_prop *pp)
{
	return pp->key && strcmp(pp->name, "allocated") ? pp->name : pp->alias[0];
}

static int pool_list(int argc, char **argv)
{
	const struct pool_prop *cols[NPOOL_PROPS * 2];
	const char *fields = "name,size,alloc,free,cap,luns,datasets,health";
	int opt, noheader = 0, parsable = 0;
	struct coffer_conn *c;
	json_t *reply, *p, *rows;
	size_t i, n, w[NPOOL_PROPS * 2];

	while ((opt = getopt(argc, argv, "Hpjo:")) != -1) {
		if (opt == 'o')
			fields = optarg;
		else if (!listing_flag(opt, &noheader, &parsable))
			usage_exit();
	}
	if (argc - optind > 1)
		usage_exit();
	n = pool_props_arg(fields, cols, NPOOL_PROPS * 2, "pool list -o");
	c = conn_open();
	reply = call_optional_name(c, "pool_list", argc, argv);
	rows = json_object_get(reply, "pools");
	if (opt_json) {
		json_t *doc = jout_doc("coffer pool list", "pools");

		json_array_foreach(rows, i, p)
			jout_add(doc, "pools", json_string_value(json_object_get(p, "name")),
				 pool_entry_json(p, cols, n, parsable));
		jout_print(doc);
		goto out;
	}
	/* column widths from the data, like zpool list */
	for (size_t k = 0; k < n; k++) {
		w[k] = strlen(pool_header(cols[k]));
		json_array_foreach(rows, i, p) {
			char buf[64], exact[32];
			size_t l = strlen(pool_value(p, cols[k], parsable, buf, sizeof(buf), exact,
						     sizeof(exact)));

			w[k] = l > w[k] ? l : w[k];
		}
	}
	if (!noheader) {
		for (size_t k = 0; k < n; k++) {
			const char *h = pool_header(cols[k]);

			for (const char *q = h; *q; q++)
				putchar(toupper((unsigned char)*q));
			if (k + 1 < n)
				printf("%*s", (int)(w[k] - strlen(h) + 2), "");
		}
		putchar('\n');
	}
	json_array_foreach(rows, i, p) {
		for (size_t k = 0; k < n; k++) {
			char buf[64], exact[32];
			const char *v = pool_value(p, cols[k], parsable, buf, sizeof(buf), exact,
						   sizeof(exact));

			if (noheader)
				printf("%s%s", v, k + 1 < n ? "\t" : "");
			else
				printf("%s%*s", v, k + 1 < n ? (int)(w[k] - strlen(v) + 2) : 0, "");
		}
		putchar('\n');
	}
out:
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
	if (json_object_get(l, "truncated_from")) {
		char was[32];

		human_field(l, "truncated_from", was, sizeof(was));
		printf("\t  truncated: %s of %s data space left; the records past its end are "
		       "lost ('coffer pool status -v' names them)\n",
		       sz, was);
	}
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

/* The counts a vdev of zpool status -j's tree sums over what it holds. */
static const char *const vdev_counts[] = { "read_errors", "write_errors", "checksum_errors",
					   "total_space", "alloc_space" };

/* A vdev of the tree, its counts zero, its children in "vdevs". */
static json_t *vdev_node(const char *name, const char *type, json_t *state)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:O}", "name", name, "vdev_type", type, "class",
			      "normal", "state", state);

	for (size_t i = 0; i < sizeof(vdev_counts) / sizeof(vdev_counts[0]); i++)
		json_object_set_new(o, vdev_counts[i], json_integer(0));
	json_object_set_new(o, "vdevs", json_object());
	return o;
}

/* Add @from's counts to @to's: its errors, and with @space its space. */
static void vdev_add(json_t *to, json_t *from, int space)
{
	for (size_t i = 0; i < sizeof(vdev_counts) / sizeof(vdev_counts[0]); i++) {
		const char *k = vdev_counts[i];

		if (space || !strstr(k, "_space"))
			json_object_set_new(to, k,
					    json_integer(json_integer_value(json_object_get(to, k)) +
							 json_integer_value(json_object_get(from, k))));
	}
}

/* LUN @l of a status reply as a leaf of the tree: zpool's names for its
 * space and errors, its index, which names it in pool clear, offline and
 * online, then the rest of what the daemon says of it. */
static json_t *lun_leaf(json_t *l, size_t index)
{
	json_t *o = json_pack("{s:O, s:s, s:O, s:s, s:O, s:I, s:O, s:O, s:O, s:O, s:O}", "name",
			      json_object_get(l, "path"), "vdev_type", "file", "path",
			      json_object_get(l, "path"), "class", "normal", "state",
			      json_object_get(l, "state"), "index", (json_int_t)index,
			      "read_errors", json_object_get(l, "read_errors"), "write_errors",
			      json_object_get(l, "write_errors"), "checksum_errors",
			      json_object_get(l, "cksum_errors"), "total_space",
			      json_object_get(l, "size"), "alloc_space", json_object_get(l, "used"));
	json_t *rest = json_deep_copy(l);

	json_object_del(rest, "vdev");
	json_object_del(rest, "cksum_errors");
	json_object_del(rest, "size");
	json_object_del(rest, "used");
	json_object_update_missing(o, rest);
	json_decref(rest);
	return o;
}

/*
 * The "vdevs" and "luns" lists of a status reply as zpool status -j's tree:
 * the root vdev named after the pool, under it each vdev keyed by name (a
 * mirror "mirror-N", a LUN of its own its path, as zpool names a file
 * vdev), a mirror's sides under it the same way. A mirror's space is one
 * side's (each holds all of it), its errors those of all sides. A detached
 * side is in no vdev, as in zpool's config.
 */
static json_t *vdev_tree(json_t *p)
{
	const char *pool = json_string_value(json_object_get(p, "name"));
	json_t *luns = json_object_get(p, "luns"), *v, *k;
	json_t *root = vdev_node(pool, "root", json_object_get(p, "state"));
	size_t i, x;

	json_array_foreach(json_object_get(p, "vdevs"), i, v) {
		const char *name = json_string_value(json_object_get(v, "name"));
		json_t *mirror = name ? vdev_node(name, "mirror", json_object_get(v, "state")) : NULL;

		json_array_foreach(json_object_get(v, "luns"), x, k) {
			size_t index = (size_t)json_integer_value(k);
			json_t *l = json_array_get(luns, index), *leaf;

			if (!l)
				continue;
			leaf = lun_leaf(l, index);
			vdev_add(mirror ? mirror : root, leaf, !mirror || x == 0);
			json_object_set_new(json_object_get(mirror ? mirror : root, "vdevs"),
					    json_string_value(json_object_get(l, "path")), leaf);
		}
		if (mirror) {
			vdev_add(root, mirror, 1);
			json_object_set_new(json_object_get(root, "vdevs"), name, mirror);
		}
	}
	return json_pack("{s:o}", pool, root);
}

/*
 * A pool of a reply as -j prints it: its GUID as "pool_guid" (zpool status
 * -j's name), every number in the document's form, and its vdevs and LUNs,
 * when it has them, as zpool status -j's tree keyed by name (vdev_tree).
 */
static json_t *pool_doc_entry(json_t *p)
{
	json_t *o = json_deep_copy(p), *g = json_object_get(o, "guid");

	if (g) {
		json_object_set(o, "pool_guid", g);
		json_object_del(o, "guid");
	}
	if (json_is_array(json_object_get(p, "vdevs")) && json_is_array(json_object_get(p, "luns"))) {
		json_object_set_new(o, "vdevs", vdev_tree(p));
		json_object_del(o, "luns");
	}
	return jout_numbers(o);
}

/* -x: only the pools that need their operator (zpool status -x). */
static void keep_unhealthy(json_t *pools)
{
	struct pool_health h;

	for (size_t i = json_array_size(pools); i-- > 0;)
		if (!pool_health(json_array_get(pools, i), &h))
			json_array_remove(pools, i);
}

static int pool_status(int argc, char **argv)
{
	struct coffer_conn *c;
	json_t *reply, *p, *l, *v;
	struct pool_health h;
	size_t i, j;
	int opt, verbose = 0, unhealthy = 0;

	while ((opt = getopt(argc, argv, "jvx")) != -1) {
		if (opt == 'j')
			opt_json = 1;
		else if (opt == 'v')
			verbose = 1;
		else if (opt == 'x')
			unhealthy = 1;
		else
			usage_exit();
	}
	if (argc - optind > 1)
		usage_exit();
	c = conn_open();
	reply = call_optional_name(c, "pool_status", argc, argv);
	if (unhealthy)
		keep_unhealthy(json_object_get(reply, "pools"));
	if (opt_json) {
		json_t *doc = jout_doc("coffer pool status", "pools");

		json_array_foreach(json_object_get(reply, "pools"), i, p)
			jout_add(doc, "pools", json_string_value(json_object_get(p, "name")),
				 pool_doc_entry(p));
		jout_print(doc);
		goto out;
	}
	if (json_array_size(json_object_get(reply, "pools")) == 0)
		printf(unhealthy ? "all pools are healthy\n" : "no pools\n");
	json_array_foreach(json_object_get(reply, "pools"), i, p) {
		const char *err = json_string_value(json_object_get(p, "error"));

		if (i)
			putchar('\n');
		printf("  pool: %s\n state: %s\n", json_string_value(json_object_get(p, "name")),
		       json_string_value(json_object_get(p, "state")));
		if (pool_health(p, &h))
			printf("status: %s\naction: %s\n", h.status, h.action);
		if (err && !json_object_get(p, "suspended"))
			printf(" error: %s\n", err);
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
		json_array_foreach(json_object_get(p, "rekeys"), j, v)
			printf(" rekey: %s: %s\n", json_string_value(json_object_get(v, "dataset")),
			       json_string_value(json_object_get(v, "status")));
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

/* What pool check found of the MAC trees, one line each: failures, then tables unverified. */
static void print_mac_findings(json_t *reply)
{
	json_t *a = json_object_get(reply, "mac_failures"), *f;
	long long errors = (long long)json_integer_value(json_object_get(reply, "mac_errors"));
	long long unver = (long long)json_integer_value(json_object_get(reply, "mac_unverified"));
	size_t i, shown = json_array_size(a);

	json_array_foreach(a, i, f) {
		const char *name = json_string_value(json_object_get(f, "name"));

		if (!strcmp(json_string_value(json_object_get(f, "what")) ?: "", "root"))
			printf("%s: MAC root does not verify\n", name);
		else
			printf("%s: records %lld-%lld: block pointer MACs do not verify\n", name,
			       (long long)json_integer_value(json_object_get(f, "first")),
			       (long long)json_integer_value(json_object_get(f, "last")));
	}
	a = json_object_get(reply, "mac_not_verified");
	json_array_foreach(a, i, f)
		printf("%s: MACs not verified: %s\n", json_string_value(json_object_get(f, "name")),
		       json_string_value(json_object_get(f, "reason")));
	shown += json_array_size(a);
	if ((long long)shown < errors + unver)
		printf("(%lld more not listed)\n", errors + unver - (long long)shown);
}

static int pool_check(int argc, char **argv)
{
	static const char *const fields[] = { "nonce_repeats", "old_keys", "cksum_errors",
					      "extent_errors", "space_errors", "bad_frees",
					      "mac_errors" };
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
		json_t *doc = jout_doc("coffer pool check", "pools");

		json_object_set_new(reply, "name", json_string(argv[optind]));
		jout_add(doc, "pools", argv[optind], jout_numbers(json_incref(reply)));
		json_object_set_new(doc, "errors_found", json_boolean(bad));
		jout_print(doc);
	} else {
		printf("pool: %s\nrecords: %lld (%lld encrypted, %lld held by snapshots only)\n",
		       argv[optind], (long long)json_integer_value(json_object_get(reply, "records")),
		       (long long)json_integer_value(json_object_get(reply, "encrypted")),
		       (long long)json_integer_value(json_object_get(reply, "kept")));
		for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
			printf("%s: %lld\n", fields[i],
			       (long long)json_integer_value(json_object_get(reply, fields[i])));
		printf("mac_verified: %lld tables, mac_unverified: %lld tables\n",
		       (long long)json_integer_value(json_object_get(reply, "mac_verified")),
		       (long long)json_integer_value(json_object_get(reply, "mac_unverified")));
		print_mac_findings(reply);
		if (!bad && json_integer_value(json_object_get(reply, "mac_unverified")))
			printf("no errors (MACs of %lld tables not verified)\n",
			       (long long)json_integer_value(json_object_get(reply, "mac_unverified")));
		else
			printf("%s\n", bad ? "errors found" : "no errors");
	}
	json_decref(reply);
	coffer_close(c);
	return bad ? 1 : 0;
}

/* One pool found by searching LUN labels, as zpool import lists it. */
static void print_found(json_t *p)
{
	json_t *v;
	size_t i;
	long long nluns = (long long)json_integer_value(json_object_get(p, "nluns"));
	const char *state = json_string_value(json_object_get(p, "state"));
	int complete = json_is_true(json_object_get(p, "complete"));
	/* a detached LUN's index stays taken, but it is no LUN to look for */
	long long ndet = (long long)json_array_size(json_object_get(p, "detached"));

	printf("   pool: %s\n   guid: %s\n", json_string_value(json_object_get(p, "name")),
	       json_string_value(json_object_get(p, "guid")));
	if (!strcmp(state, "ACTIVE") && !json_is_true(json_object_get(p, "this_host")))
		printf("  state: ACTIVE on host %s (not exported; import with -f only if that "
		       "host no longer uses it)\n",
		       json_string_value(json_object_get(p, "hostid")));
	else
		printf("  state: %s\n", state);
	printf("   luns: %lld of %lld found%s\n",
	       (long long)json_integer_value(json_object_get(p, "found")), nluns - ndet,
	       complete ? ""
	       : json_is_true(json_object_get(p, "degraded"))
		       ? "; the missing may be mirror sides: imports DEGRADED if so"
		       : "; cannot import");
	json_array_foreach(json_object_get(p, "luns"), i, v)
		printf("\t%lld  %s\n", (long long)json_integer_value(json_object_get(v, "index")),
		       json_string_value(json_object_get(v, "path")));
	json_array_foreach(json_object_get(p, "detached"), i, v)
		printf("\t%lld  detached\n", (long long)json_integer_value(v));
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

/*
 * pool import -j without a pool: the pools it could import, keyed by name;
 * a second pool of a name already listed is keyed by its GUID, which
 * imports it.
 */
static void import_list_json(json_t *reply)
{
	json_t *doc = jout_doc("coffer pool import", "pools"), *pools = json_object_get(doc, "pools");
	json_t *v;
	size_t i;

	json_array_foreach(json_object_get(reply, "importable"), i, v)
		jout_add(doc, "pools", json_string_value(v),
			 json_pack("{s:s, s:s, s:s}", "name", json_string_value(v), "state",
				   "EXPORTED", "found_in", "state directory"));
	json_array_foreach(json_object_get(reply, "found"), i, v) {
		const char *name = json_string_value(json_object_get(v, "name"));
		json_t *o = pool_doc_entry(v);

		if (json_object_get(pools, name))
			jout_add(doc, "pools", json_string_value(json_object_get(o, "pool_guid")), o);
		else
			jout_add(doc, "pools", name, o);
	}
	jout_print(doc);
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
		if (opt_json) {
			json_t *doc = jout_doc("coffer pool import", "pools");

			jout_add(doc, "pools", json_string_value(json_object_get(reply, "name")),
				 pool_doc_entry(reply));
			jout_print(doc);
		} else {
			print_import(reply);
		}
		json_decref(reply);
	} else {
		reply = call(c, "pool_import", args, NULL);
		n = json_array_size(json_object_get(reply, "importable")) +
		    json_array_size(json_object_get(reply, "found"));
		if (opt_json)
			import_list_json(reply);
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

/* online [-e] [-s SIZE] POOL LUN: -e grows it to what backs it, -s to SIZE */
static int pool_online(int argc, char **argv)
{
	struct coffer_conn *c;
	json_t *args;
	uint64_t size = 0;
	int opt, expand = 0;
	char *lun;

	while ((opt = getopt(argc, argv, "es:")) != -1) {
		if (opt == 'e')
			expand = 1;
		else if (opt == 's')
			size = size_arg(optarg, "-s");
		else
			usage_exit();
	}
	if (argc - optind != 2)
		usage_exit();
	lun = lun_arg(argv[optind + 1]);
	args = json_pack("{s:s, s:s}", "name", argv[optind], "lun", lun);
	if (expand || size)
		json_object_set_new(args, "expand", json_true());
	if (size)
		json_object_set_new(args, "size", json_integer((json_int_t)size));
	c = conn_open();
	json_decref(call(c, "pool_online", args, argv[optind]));
	free(lun);
	coffer_close(c);
	return 0;
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

/* Does @s look like a number (an INTERVAL or COUNT rather than a POOL)? */
static int numeric(const char *s)
{
	return s[0] && strspn(s, "0123456789.") == strlen(s);
}

/*
 * iostat [-H] [-l] [-p] [-q] [-v] [-w] [POOL] [INTERVAL [COUNT]], as zpool
 * iostat: the first report covers the time since import, each later one
 * the INTERVAL before it; COUNT reports, or until interrupted. Reports
 * keep to the clock (each due INTERVAL after the one before it was due),
 * so a slow reply does not make the next report late. The arithmetic and
 * the printing are iostat.c's.
 */
static int pool_iostat(int argc, char **argv)
{
	struct iostat_opts o = { 0 };
	const char *pool = NULL;
	double interval = 0;
	unsigned long count = 0;
	struct coffer_conn *c;
	struct timespec due;
	json_t *prev = NULL;
	char **args;
	int opt, n;

	while ((opt = getopt(argc, argv, "Hlpqvw")) != -1) {
		if (opt == 'H')
			o.scripted = 1;
		else if (opt == 'l')
			o.latency = 1;
		else if (opt == 'p')
			o.parsable = 1;
		else if (opt == 'q')
			o.queue = 1;
		else if (opt == 'v')
			o.verbose = 1;
		else if (opt == 'w')
			o.hist = 1;
		else
			usage_exit();
	}
	if (o.hist && (o.latency || o.queue)) {
		fprintf(stderr, "coffer: pool iostat: -w prints histograms, not columns: give it "
				"without -l and -q\n");
		usage_exit();
	}
	args = argv + optind;
	n = argc - optind;
	/* a pool name begins with a letter: a first argument that is a number is INTERVAL */
	if (n && !numeric(args[0])) {
		pool = args[0];
		args++;
		n--;
	}
	if (n > 2)
		usage_exit();
	if (n >= 1) {
		char *end;

		errno = 0;
		interval = strtod(args[0], &end);
		if (!numeric(args[0]) || *end || errno || !(interval > 0) || interval > 86400 * 365) {
			fprintf(stderr,
				"coffer: pool iostat: interval '%s': give a number of seconds greater "
				"than 0 (the time between reports)\n",
				args[0]);
			usage_exit();
		}
	}
	if (n == 2) {
		char *end;

		errno = 0;
		count = strtoul(args[1], &end, 10);
		if (!isdigit((unsigned char)args[1][0]) || *end || errno || count == 0) {
			fprintf(stderr,
				"coffer: pool iostat: count '%s': give a whole number of reports, 1 "
				"or more\n",
				args[1]);
			usage_exit();
		}
	}
	c = conn_open();
	clock_gettime(CLOCK_MONOTONIC, &due);
	for (unsigned long k = 1;; k++) {
		json_t *reply = call(c, "pool_iostat", pool ? json_pack("{s:s}", "name", pool) : NULL,
				     pool);

		iostat_report(&o, reply, prev);
		json_decref(prev);
		prev = reply;
		if (interval <= 0 || (count && k >= count))
			break;
		due.tv_sec += (time_t)interval;
		due.tv_nsec += (long)((interval - (double)(time_t)interval) * 1e9);
		if (due.tv_nsec >= 1000000000L) {
			due.tv_sec++;
			due.tv_nsec -= 1000000000L;
		}
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
			;
	}
	json_decref(prev);
	coffer_close(c);
	return 0;
}

/* One field's value of an event as text. */
static void event_value(json_t *v, char *buf, size_t len)
{
	if (json_is_string(v))
		snprintf(buf, len, "%s", json_string_value(v));
	else
		snprintf(buf, len, "%lld", (long long)json_integer_value(v));
}

/* An event as events prints it: a line (time, class, pool), with -v its fields under it. */
static void event_print(json_t *e, int verbose)
{
	time_t t = (time_t)json_integer_value(json_object_get(e, "time"));
	const char *key;
	char when[64], val[1024];
	struct tm tm;
	json_t *v;

	localtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
	printf("%s.%03lld %-6lld %-18s %s\n", when,
	       (long long)json_integer_value(json_object_get(e, "time_ns")) / 1000000,
	       (long long)json_integer_value(json_object_get(e, "eid")),
	       json_string_value(json_object_get(e, "class")),
	       json_string_value(json_object_get(e, "pool")));
	if (!verbose)
		return;
	json_object_foreach(json_object_get(e, "fields"), key, v) {
		event_value(v, val, sizeof(val));
		printf("        %-14s %s\n", key, val);
	}
	putchar('\n');
}

/* How often events -f asks for what is new (ms): cheap for the daemon, soon enough for a person. */
#define EVENTS_POLL_MS 250

/*
 * events [-f] [-j] [-v] [POOL]: the daemon's list of events (zpool events),
 * oldest first; -f then prints each new one as it comes, by asking for the
 * events after the last one seen every EVENTS_POLL_MS. With -j the list is
 * a document; with -f -j each event is a line of its own (JSON lines), so a
 * reader can act on each as it comes.
 */
static int pool_events(int argc, char **argv)
{
	struct coffer_conn *c;
	json_t *doc = NULL, *e;
	long long since = 0, lost;
	int opt, follow = 0, verbose = 0, first = 1, more;
	size_t i;

	while ((opt = getopt(argc, argv, "fjv")) != -1) {
		if (opt == 'f')
			follow = 1;
		else if (opt == 'j')
			opt_json = 1;
		else if (opt == 'v')
			verbose = 1;
		else
			usage_exit();
	}
	if (argc - optind > 1)
		usage_exit();
	if (opt_json && !follow) {
		doc = jout_doc("coffer pool events", NULL);
		json_object_set_new(doc, "events", json_array());
	}
	c = conn_open();
	for (;;) {
		json_t *args = json_pack("{s:I}", "since", (json_int_t)since), *reply;

		if (optind < argc)
			json_object_set_new(args, "name", json_string(argv[optind]));
		reply = call(c, "pool_events", args, optind < argc ? argv[optind] : NULL);
		lost = (long long)json_integer_value(json_object_get(reply, "lost"));
		/* the first reply's losses are only the list's bound: older events left it */
		if (lost && !first)
			fprintf(stderr, "coffer: %lld events left the daemon's list before they were "
					"read (max_events)\n", lost);
		if (first && !opt_json)
			printf("%-23s %-6s %-18s %s\n", "TIME", "EID", "CLASS", "POOL");
		json_array_foreach(json_object_get(reply, "events"), i, e) {
			if (doc)
				json_array_append(json_object_get(doc, "events"), jout_numbers(e));
			else if (opt_json) {
				char *line = json_dumps(jout_numbers(e), JSON_COMPACT);

				printf("%s\n", line ? line : "{}");
				free(line);
			} else
				event_print(e, verbose);
		}
		since = (long long)json_integer_value(json_object_get(reply, "next"));
		more = json_is_true(json_object_get(reply, "more"));
		json_decref(reply);
		first = 0;
		if (more)
			continue; /* a reply holds EVENTS_REPLY_MAX: the rest at once */
		if (!follow)
			break;
		fflush(stdout);
		nanosleep(&(struct timespec){ 0, EVENTS_POLL_MS * 1000000L }, NULL);
	}
	coffer_close(c);
	if (doc)
		jout_print(doc);
	return 0;
}

static int pool_get(int argc, char **argv);

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
	{ "list", pool_list, "[-H] [-p] [-j] [-o PROP[,PROP]...] [POOL]",
	  "List pools with their size, allocation and health.\n"
	  "  -H        no header, tabs between fields\n"
	  "  -p        exact numbers\n"
	  "  -o P,...  columns: name and the pool properties ('coffer help pool get'), or all\n"
	  "  -j        JSON" },
	{ "get", pool_get, "[-H] [-p] [-j] [-o FIELD[,FIELD]...] all|PROP[,PROP]... [POOL]...",
	  "Show properties of pools (every pool if none is named); all are read-only.\n"
	  "  -H         no header, tabs between fields\n"
	  "  -p         exact numbers\n"
	  "  -j         JSON\n"
	  "  -o FIELDS  columns: name, property, value, source, or all\n"
	  "PROPERTIES\n"
	  "  name, size, allocated (alloc, used), free, capacity (cap), health (state), guid,\n"
	  "  txg, luns, datasets, metadata_used, logicalused, handles" },
	{ "status", pool_status, "[-j] [-v] [-x] [POOL]",
	  "Show the vdev tree, the state and error counts of each LUN, and the scan line;\n"
	  "what needs doing, if anything, on the status: and action: lines.\n"
	  "  -j  JSON\n"
	  "  -v  list the records that no copy holds sound\n"
	  "  -x  only the pools that need their operator (\"all pools are healthy\" if none)" },
	{ "iostat", pool_iostat, "[-H] [-l] [-p] [-q] [-v] [-w] [POOL] [INTERVAL [COUNT]]",
	  "Show the I/O of pools as their LUNs see it: capacity, then reads and writes per\n"
	  "second, in operations and bytes. The first report covers the time since import;\n"
	  "with INTERVAL, one follows every INTERVAL seconds covering that interval, COUNT\n"
	  "times or until interrupted.\n"
	  "  -H  no headers, tabs between fields\n"
	  "  -l  average waits: total_wait (issue to completion), disk_wait (the LUN alone)\n"
	  "  -p  exact numbers (bytes, nanoseconds)\n"
	  "  -q  extents in flight now, reads and writes\n"
	  "  -v  a row per vdev and LUN, a mirror's sides under it\n"
	  "  -w  latency histograms (power-of-two buckets of nanoseconds), not rates" },
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
	{ "online", pool_online, "[-e] [-s SIZE] POOL LUN",
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
	{ "events", pool_events, "[-f] [-j] [-v] [POOL]",
	  "List the daemon's recent events (faults, repairs, lost records, scans, state\n"
	  "changes, keys, administrative changes), oldest first; of POOL only if given.\n"
	  "  -f  follow: print new events as they come, until interrupted\n"
	  "  -j  JSON (with -f, one event per line)\n"
	  "  -v  every field of each event" },
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

/*
 * create -p: each missing dataset above @name, top first, as zfs create -p;
 * sparse (they reserve nothing) and with every property inherited. One that
 * appears meanwhile is taken as made.
 */
static void create_parents(struct coffer_conn *c, const char *name)
{
	char part[STOR_NAME_MAX + 1], err[512];

	for (const char *s = strchr(name, '/'); s && (s = strchr(s + 1, '/'));) {
		json_t *reply = NULL, *args;
		int ret;

		snprintf(part, sizeof(part), "%.*s", (int)(s - name), name);
		/* coffer_call() borrows its arguments */
		args = json_pack("{s:s, s:[s]}", "name", part, "props", "type");
		ret = coffer_call(c, "ds_get", args, &reply, err, sizeof(err));
		json_decref(args);
		json_decref(reply);
		if (ret == 0)
			continue;
		if (ret != -ENOENT)
			die_call(ret, part, err);
		reply = NULL;
		args = json_pack("{s:s, s:[s]}", "name", part, "props", "refreservation=none");
		ret = coffer_call(c, "ds_create", args, &reply, err, sizeof(err));
		json_decref(args);
		json_decref(reply);
		if (ret < 0 && ret != -EEXIST)
			die_call(ret, part, err);
	}
}

static int cmd_create(int argc, char **argv)
{
	json_t *props = json_array(), *args;
	uint64_t volsize = 0, recsize = 0;
	int have_volsize = 0, have_recsize = 0, parents = 0;
	const char *enc, *fmt, *loc;
	struct coffer_conn *c;
	uint8_t key[KEY_MAX];
	int opt;

	while ((opt = getopt(argc, argv, "psV:b:o:")) != -1) {
		switch (opt) {
		case 'p':
			parents = 1;
			break;
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
	c = conn_open(); /* a key server's CA certificates come from the daemon */
	/* a new encryption root needs its key now; ZFS defaults keyformat to passphrase */
	if ((enc && strcmp(enc, "off")) || fmt) {
		size_t n;

		if (!fmt) {
			fmt = "passphrase";
			json_array_append_new(props, json_string("keyformat=passphrase"));
		}
		n = key_read(c, argv[optind], fmt, loc, KEY_CONFIRM, key);
		key_attach(args, key, n);
		wipe(key, sizeof(key));
	}
	if (parents)
		create_parents(c, argv[optind]);
	json_decref(call(c, "ds_create", args, argv[optind]));
	coffer_close(c);
	return 0;
}

static int cmd_destroy(int argc, char **argv)
{
	struct coffer_conn *c;
	int opt, rec = 0, force = 0, clones = 0, dry = 0, verbose = 0, parsable = 0;

	while ((opt = getopt(argc, argv, "rRfnvp")) != -1) {
		if (opt == 'r')
			rec = 1;
		else if (opt == 'R')
			clones = 1;
		else if (opt == 'f')
			force = 1;
		else if (opt == 'n')
			dry = 1;
		else if (opt == 'v')
			verbose = 1;
		else if (opt == 'p')
			parsable = verbose = 1; /* as zfs destroy -p: the -v lines, parsable */
		else
			usage_exit();
	}
	if (argc - optind != 1)
		usage_exit();
	c = conn_open();
	/* -n, and -v before a destroy: the daemon's plan, made by the
	 * destroy's own collector, with the destroy's refusals */
	if (dry || verbose) {
		json_t *plan = call(c, "ds_destroy",
				    json_pack("{s:s, s:b, s:b, s:b, s:b}", "name", argv[optind],
					      "recursive", rec, "force", force, "clones", clones,
					      "dryrun", 1),
				    argv[optind]);
		json_t *n;
		json_int_t bytes = json_integer_value(json_object_get(plan, "reclaim"));
		const char *would = dry ? "would" : "will";
		char sz[32];
		size_t i;

		json_array_foreach(json_object_get(plan, "destroy"), i, n) {
			if (parsable)
				printf("destroy\t%s\n", json_string_value(n));
			else if (verbose)
				printf("%s destroy %s\n", would, json_string_value(n));
		}
		stor_format_size(bytes > 0 ? (uint64_t)bytes : 0, sz, sizeof(sz));
		if (parsable)
			printf("reclaim\t%lld\n", (long long)bytes);
		else if (verbose)
			printf("%s reclaim %s\n", would, sz);
		json_decref(plan);
		fflush(stdout);
	}
	if (!dry)
		json_decref(call(c, "ds_destroy",
				 json_pack("{s:s, s:b, s:b, s:b}", "name", argv[optind], "recursive",
					   rec, "force", force, "clones", clones),
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

/*
 * rename, as zfs rename: a dataset (its descendants and snapshots follow),
 * or a snapshot, whose new name may be given short: "@NEW" or "NEW" for
 * DATASET@NEW of the same dataset.
 */
static int cmd_rename(int argc, char **argv)
{
	int opt, rec = 0, parents = 0, force = 0;
	char to[STOR_NAME_MAX + 2];
	const char *from, *at;
	struct coffer_conn *c;

	while ((opt = getopt(argc, argv, "rpf")) != -1) {
		if (opt == 'r')
			rec = 1;
		else if (opt == 'p')
			parents = 1;
		else if (opt == 'f')
			force = 1;
		else
			usage_exit();
	}
	if (argc - optind != 2)
		usage_exit();
	from = argv[optind];
	at = strchr(from, '@');
	if (rec && !at)
		die("rename: -r renames snapshots (DATASET@SNAP @NEW); the descendants of a "
		    "dataset follow it anyway");
	if (at && (argv[optind + 1][0] == '@' || !strpbrk(argv[optind + 1], "/@")))
		snprintf(to, sizeof(to), "%.*s@%s", (int)(at - from), from,
			 argv[optind + 1] + (argv[optind + 1][0] == '@'));
	else
		snprintf(to, sizeof(to), "%s", argv[optind + 1]);
	c = conn_open();
	json_decref(call(c, "ds_rename",
			 json_pack("{s:s, s:s, s:b, s:b, s:b}", "name", from, "to", to,
				   "recursive", rec, "parents", parents, "force", force),
			 from));
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

/* send -n/-v/-P: what the estimate lines go to and how they look */
struct send_est {
	FILE *to;
	int parsable, raw;
	uint64_t total;
};

/* One line of zfs send -v (or -P) for the stream @from (NULL: full) to @snap. */
static int send_est_step(struct coffer_conn *c, const char *snap, const char *from, void *ctx,
			 char *err, size_t errlen)
{
	struct send_est *e = ctx;
	uint64_t bytes;
	char sz[32];
	int ret = coffer_send_estimate(c, snap, from, e->raw, &bytes, err, errlen);

	if (ret < 0)
		return ret;
	e->total += bytes;
	stor_format_size(bytes, sz, sizeof(sz));
	if (e->parsable && from)
		fprintf(e->to, "incremental\t%s\t%s\t%llu\n", strchr(from, '@'), snap,
			(unsigned long long)bytes);
	else if (e->parsable)
		fprintf(e->to, "full\t%s\t%llu\n", snap, (unsigned long long)bytes);
	else if (from)
		fprintf(e->to, "incremental send of %s to %s estimated size is %s\n", from, snap, sz);
	else
		fprintf(e->to, "full send of %s estimated size is %s\n", snap, sz);
	return 0;
}

/* send and receive: the stream moves in chunks (client/sendrecv.c) */
static int cmd_send(int argc, char **argv)
{
	struct coffer_conn *c;
	struct send_est est = { .to = stdout };
	char err[1024], from[512];
	const char *fromarg = NULL, *token = NULL;
	int opt, raw = 0, all = 0, ret, dry = 0, verbose = 0;
	size_t dlen;

	while ((opt = getopt(argc, argv, "wi:I:nvPt:")) != -1) {
		if (opt == 'w') {
			raw = 1;
		} else if (opt == 't') {
			token = optarg;
		} else if (opt == 'i' || opt == 'I') {
			if (fromarg)
				die("send: give one of -i and -I, once");
			fromarg = optarg;
			all = opt == 'I';
		} else if (opt == 'n') {
			dry = 1;
		} else if (opt == 'v') {
			verbose = 1;
		} else if (opt == 'P') {
			est.parsable = verbose = 1; /* as zfs send -P: the same lines, parsable */
		} else {
			usage_exit();
		}
	}
	/* send -t TOKEN: the token says the rest (zfs send -t) */
	if (token) {
		if (argc != optind || raw || fromarg || dry || verbose)
			die("send -t: give the token alone; it names the snapshot, the snapshot it "
			    "starts from and -w (and -n, -v, -P estimate whole streams only)");
		if (isatty(STDOUT_FILENO))
			die("send: standard output is a terminal; redirect it to a file or a pipe");
		c = conn_open();
		ret = coffer_send_resume(c, token, STDOUT_FILENO, err, sizeof(err));
		if (ret < 0)
			die_call(ret, "send -t", err);
		coffer_close(c);
		return 0;
	}
	if (argc - optind != 1)
		usage_exit();
	if (!strchr(argv[optind], '@'))
		die("send: '%s' is no snapshot; send DATASET@NAME", argv[optind]);
	/* -i @FROM or -i DATASET@FROM, as zfs send: FROM is of the same dataset */
	dlen = strcspn(argv[optind], "@");
	if (fromarg) {
		const char *at = strchr(fromarg, '@');

		if (!at || (at != fromarg && ((size_t)(at - fromarg) != dlen ||
					      strncmp(fromarg, argv[optind], dlen))))
			die("send -%c: '%s' is not a snapshot of %.*s; give @FROM or %.*s@FROM",
			    all ? 'I' : 'i', fromarg, (int)dlen, argv[optind], (int)dlen,
			    argv[optind]);
		if ((size_t)snprintf(from, sizeof(from), "%.*s%s", (int)dlen, argv[optind], at) >=
		    sizeof(from))
			die("send: '%s' is too long a name", fromarg);
	}
	if (!dry && isatty(STDOUT_FILENO))
		die("%s: send: standard output is a terminal; redirect it to a file or a pipe",
		    argv[optind]);
	c = conn_open();
	/* the estimate first: with -n it is all there is (on stdout, as zfs
	 * send -n prints it); before a real send it goes to stderr, so the
	 * stream on stdout stays whole. -n alone still makes every check. */
	est.raw = raw;
	if (!dry)
		est.to = stderr;
	if (dry && !verbose)
		est.to = fopen("/dev/null", "w");
	if (!est.to)
		die("send: /dev/null: %s", strerror(errno));
	ret = !dry && !verbose ? 0
	      : all ? coffer_send_steps(c, argv[optind], from, send_est_step, &est, err, sizeof(err))
		    : send_est_step(c, argv[optind], fromarg ? from : NULL, &est, err, sizeof(err));
	if (ret == 0 && verbose && est.parsable)
		fprintf(est.to, "size\t%llu\n", (unsigned long long)est.total);
	else if (ret == 0 && verbose) {
		char sz[32];

		stor_format_size(est.total, sz, sizeof(sz));
		fprintf(est.to, "total estimated size is %s\n", sz);
	}
	if (dry && !verbose)
		fclose(est.to);
	if (ret == 0 && !dry)
		ret = all ? coffer_send_package(c, argv[optind], from, raw, STDOUT_FILENO, err,
						sizeof(err))
			  : coffer_send_stream(c, argv[optind], fromarg ? from : NULL, raw,
					       STDOUT_FILENO, err, sizeof(err));
	if (ret < 0) {
		*strchr(argv[optind], '@') = '\0'; /* what to load a key for */
		die_call(ret, argv[optind], err);
	}
	coffer_close(c);
	return 0;
}

static int cmd_receive(int argc, char **argv)
{
	struct coffer_conn *c;
	char err[1024];
	int opt, abandon = 0, ret;
	unsigned flags = 0;

	while ((opt = getopt(argc, argv, "FusA")) != -1) {
		if (opt == 'F')
			flags |= COFFER_RECV_FORCE;
		else if (opt == 's')
			flags |= COFFER_RECV_RESUMABLE;
		else if (opt == 'A')
			abandon = 1;
		else if (opt != 'u') /* -u: nothing is exported or mounted on receive anyway */
			usage_exit();
	}
	if (argc - optind != 1)
		usage_exit();
	if ((flags & COFFER_RECV_FORCE) && (flags & COFFER_RECV_RESUMABLE))
		die("receive: -s does not go with -F; receive with one of them");
	if (abandon) {
		if (flags)
			die("receive -A: give it alone with the dataset; it reads no stream");
		c = conn_open();
		ret = coffer_receive_abandon(c, argv[optind], err, sizeof(err));
		if (ret < 0)
			die_call(ret, argv[optind], err);
		coffer_close(c);
		return 0;
	}
	if (isatty(STDIN_FILENO))
		die("%s: receive: standard input is a terminal; redirect a stream into it",
		    argv[optind]);
	c = conn_open();
	ret = coffer_receive_flags(c, argv[optind], flags, STDIN_FILENO, err, sizeof(err));
	if (ret < 0)
		die_call(ret, argv[optind], err);
	coffer_close(c);
	return 0;
}

/* The property a `list` column names: zfs list's short names too. */
static const char *long_name(const char *f)
{
	return !strcmp(f, "avail") ? "available" : !strcmp(f, "refer") ? "referenced" : f;
}

/*
 * The column of each field in a row of cells: 0 the name, then the
 * properties in the order asked for (list_col_add).
 */
static const char *list_cols[128];
static size_t nlist_cols = 1;

static void list_col_add(json_t *props, const char *prop)
{
	if (nlist_cols < sizeof(list_cols) / sizeof(list_cols[0]))
		list_cols[nlist_cols++] = prop;
	json_array_append_new(props, json_string(prop));
}

/* The column of field @f in a row of cells, -1 if it has none. */
static int cell_col(const char *f)
{
	const char *lf = long_name(f);

	if (!strcmp(f, "name"))
		return 0;
	for (size_t k = 1; k < nlist_cols; k++)
		if (!strcmp(list_cols[k], lf))
			return (int)k;
	return -1;
}

/* A row of a list reply: the cells of a text listing, or (-j) an object
 * whose values carry their sources. */
struct list_row {
	const char *const *cells;
	json_t *obj;
};

/* The exact value of field @f, column @col of cells, of row @r; "-" if none. */
static const char *list_value(const struct list_row *r, const char *f, int col)
{
	json_t *p;

	if (r->cells)
		return col >= 0 ? r->cells[col] : "-";
	if (!strcmp(f, "name"))
		return json_string_value(json_object_get(r->obj, "name"));
	p = json_object_get(json_object_get(r->obj, "props"), long_name(f));
	p = json_is_object(p) ? json_object_get(p, "value") : p;
	return json_string_value(p) ?: "-";
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
	if (prop_is_user(f)) { /* module:property: the daemon has the values */
		char why[512];

		if (prop_user_name_check(f, why, sizeof(why)) < 0)
			die("list -o: %s", why);
		return;
	}
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

/*
 * list -s PROP / -S PROP (repeatable, as zfs list): the keys to sort by,
 * first one first. Values that are numbers (sizes are exact on the wire)
 * compare as numbers; "-" (no value) sorts last either way; the name breaks
 * ties.
 */
#define SORT_MAX 8

static struct sort_key {
	const char *prop;
	int desc;
	int col; /* cell_col() once the columns are known */
} sort_keys[SORT_MAX];
static size_t nsort;

static int is_number(const char *s)
{
	return s[0] && strspn(s, "0123456789") == strlen(s);
}

static int compare_values(const char *a, const char *b)
{
	if (is_number(a) && is_number(b)) {
		unsigned long long x = strtoull(a, NULL, 10), y = strtoull(b, NULL, 10);

		return x < y ? -1 : x > y;
	}
	return strcmp(a, b);
}

static int compare_datasets(const void *pa, const void *pb)
{
	const struct list_row *a = pa, *b = pb;

	for (size_t k = 0; k < nsort; k++) {
		const char *va = list_value(a, sort_keys[k].prop, sort_keys[k].col),
			   *vb = list_value(b, sort_keys[k].prop, sort_keys[k].col);
		int none_a = !strcmp(va, "-"), none_b = !strcmp(vb, "-"), c;

		if (none_a != none_b)
			return none_a - none_b;
		c = compare_values(va, vb);
		if (c)
			return sort_keys[k].desc ? -c : c;
	}
	return strcmp(list_value(a, "name", 0), list_value(b, "name", 0));
}

/* Depth of @name below its pool: a '/' or an '@' each go one deeper (zfs list -d). */
static int name_depth(const char *name)
{
	int d = 0;

	for (; *name; name++)
		d += *name == '/' || *name == '@';
	return d;
}

/* zfs list -t: volume, snapshot or all, a comma list of them, and zfs's short forms. */
static const char *list_type(const char *arg)
{
	char *copy = strdup(arg), *save = NULL;
	int vol = 0, snap = 0;

	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "volume") || !strcmp(t, "vol"))
			vol = 1;
		else if (!strcmp(t, "snapshot") || !strcmp(t, "snap"))
			snap = 1;
		else if (!strcmp(t, "all"))
			vol = snap = 1;
		else if (!strcmp(t, "filesystem") || !strcmp(t, "bookmark"))
			die("list -t: coffer has no %ss; its datasets are volumes and snapshots", t);
		else
			die("list -t: '%s' is not volume, snapshot or all", t);
	}
	free(copy);
	if (!vol && !snap)
		die("list -t: give volume, snapshot or all");
	return vol && snap ? "all" : snap ? "snapshot" : "volume";
}

/* A dataset of the list reply as `list -j` prints it (OpenZFS's zfs list -j shape). */
static json_t *dataset_json(json_t *d, const char *const *f, size_t nf, int parsable)
{
	const char *name = json_string_value(json_object_get(d, "name"));
	const char *at = strchr(name, '@');
	json_t *o = json_pack("{s:s, s:s, s:s%}", "name", name, "type", at ? "SNAPSHOT" : "VOLUME",
			      "pool", name, strcspn(name, "/@")),
	       *props = json_object();

	if (at) {
		json_object_set_new(o, "dataset", json_stringn(name, (size_t)(at - name)));
		json_object_set_new(o, "snapshot_name", json_string(at + 1));
	}
	for (size_t k = 0; k < nf; k++) {
		json_t *p = json_object_get(json_object_get(d, "props"), long_name(f[k]));
		const char *v = json_string_value(json_object_get(p, "value"));
		char buf[64];

		if (!strcmp(f[k], "name") || !p)
			continue;
		json_object_set_new(props, long_name(f[k]),
				    jout_prop(long_name(f[k]),
					      show(long_name(f[k]), v ? v : "-", parsable, buf,
						   sizeof(buf)),
					      v, json_string_value(json_object_get(p, "source")),
					      json_string_value(json_object_get(p, "inherited_from"))));
	}
	json_object_set_new(o, "properties", props);
	return o;
}

static void sort_key_add(const char *prop, int desc)
{
	if (nsort == SORT_MAX)
		die("list: at most %d sort keys", SORT_MAX);
	check_field(prop);
	sort_keys[nsort++] = (struct sort_key){ .prop = prop, .desc = desc };
}

/*
 * ds_list with @args: its reply in *@reply, and its rows, nlist_cols cells
 * each, in *@cells (NULL for -j, whose rows are the objects returned);
 * *@n rows either way; the cells point into *@keep (malloc'd, the caller frees).
 */
static json_t *list_call(struct coffer_conn *c, json_t *args, const char *obj, json_t **reply,
			 const char ***cells, size_t *n, char **keep)
{
	const uint8_t *data;
	size_t len, ncells = 0;
	char err[512];
	int ret = coffer_call_data(c, "ds_list", args, NULL, 0, reply, &data, &len, err,
				   sizeof(err));

	json_decref(args);
	if (ret < 0)
		die_call(ret, obj, err);
	*cells = NULL;
	*keep = NULL;
	if (!json_object_get(*reply, "columns")) {
		json_t *all = json_object_get(*reply, "datasets");

		*n = json_array_size(all);
		return all;
	}
	*n = (size_t)json_integer_value(json_object_get(*reply, "rows"));
	if ((size_t)json_integer_value(json_object_get(*reply, "columns")) != nlist_cols ||
	    *n > len || (len && data[len - 1]))
		die("list: bad reply from cofferd");
	*cells = calloc(*n * nlist_cols + 1, sizeof(**cells));
	/* the cells outlive the connection's buffer, which the next call reuses */
	*keep = malloc(len + 1);
	if (!*cells || !*keep)
		die("out of memory");
	if (len)
		memcpy(*keep, data, len); /* data is NULL when there is none */
	data = (const uint8_t *)*keep;
	for (size_t off = 0; off < len && ncells <= *n * nlist_cols; ncells++) {
		if (ncells < *n * nlist_cols)
			(*cells)[ncells] = (const char *)data + off;
		off += strlen((const char *)data + off) + 1;
	}
	if (ncells != *n * nlist_cols)
		die("list: bad reply from cofferd");
	return NULL;
}

/* Write @n spaces. */
static void pad(size_t n)
{
	static const char sp[] = "                                ";

	for (size_t k; n; n -= k) {
		k = n < sizeof(sp) - 1 ? n : sizeof(sp) - 1;
		fwrite(sp, 1, k, stdout);
	}
}

/*
 * The @n rows of a text listing with fields @f: each value worked out once
 * (a size humanized into a slot of its own, unless it is the one above it,
 * as most of a long listing's sizes are), then the columns as wide as
 * their widest value, like zfs list; with -H tab-separated.
 */
static void list_print(const struct list_row *rows, size_t n, const char *const *f, size_t nf,
		       int noheader, int parsable)
{
	enum { SLOT = 32 };
	const char **v = calloc(n * nf + 1, sizeof(*v)), *raw[64] = { 0 };
	char *slots = malloc(n * nf * SLOT + 1);
	size_t w[64];
	int col[64], sized[64];

	if (!v || !slots)
		die("out of memory");
	for (size_t k = 0; k < nf; k++) {
		w[k] = strlen(f[k]);
		col[k] = cell_col(f[k]);
		sized[k] = !parsable && is_shown_prop(f[k]);
	}
	for (size_t r = 0; r < n; r++) {
		for (size_t k = 0; k < nf; k++) {
			const char *x = list_value(&rows[r], f[k], col[k]), *s = x;
			size_t len;

			if (sized[k] && raw[k] && !strcmp(x, raw[k]))
				s = v[(r - 1) * nf + k];
			else if (sized[k])
				s = show(f[k], x, 0, slots + (r * nf + k) * SLOT, SLOT);
			raw[k] = x;
			v[r * nf + k] = s;
			len = strlen(s);
			if (len > w[k])
				w[k] = len;
		}
	}
	if (!noheader) {
		for (size_t k = 0; k < nf; k++) {
			for (const char *p = f[k]; *p; p++)
				putchar(toupper((unsigned char)*p));
			if (k + 1 < nf)
				pad(w[k] - strlen(f[k]) + 2);
		}
		putchar('\n');
	}
	for (size_t r = 0; r < n; r++) {
		for (size_t k = 0; k < nf; k++) {
			const char *s = v[r * nf + k];

			fputs(s, stdout);
			if (k + 1 == nf)
				break;
			if (noheader)
				putchar('\t');
			else
				pad(w[k] - strlen(s) + 2);
		}
		putchar('\n');
	}
	free(v);
	free(slots);
}

static int cmd_list(int argc, char **argv)
{
	const char *fields = "name,used,avail,refer,volsize,recordsize,encryption,keystatus";
	const char *type = "volume";
	int opt, rec = 0, noheader = 0, parsable = 0, own_fields = 0, depth = -1;
	json_t *props = json_array(), *args, **replies, *all;
	struct list_row *rows = NULL;
	const char **cells, ***cellv;
	char **keepv;
	size_t nreplies;
	char *fcopy, *tok, *save = NULL, *end;
	struct coffer_conn *c;
	const char *f[64];
	size_t nf = 0, nrows = 0, nall, i;
	int base = 0;

	while ((opt = getopt(argc, argv, "rHpo:jt:s:S:d:")) != -1) {
		if (opt == 'r')
			rec = 1;
		else if (opt == 'o')
			fields = optarg, own_fields = 1;
		else if (opt == 't')
			type = list_type(optarg);
		else if (opt == 's' || opt == 'S')
			sort_key_add(optarg, opt == 'S');
		else if (opt == 'd') {
			long v = strtol(optarg, &end, 10);

			if (*end || !optarg[0] || v < 0 || v > 1000)
				die("list -d: '%s' is not a depth (0, 1, 2, ...)", optarg);
			depth = (int)v;
			rec = 1; /* as zfs list -d: recursive, to that depth */
		} else if (!listing_flag(opt, &noheader, &parsable))
			usage_exit();
	}
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
				list_col_add(props, long_name(tok));
			continue;
		}
		/* -o all: the name and every property, as zfs list -o all */
		f[nf++] = "name";
		for (size_t k = 0; (name = stor_prop_describe(k, &values, &w)) && nf < 64; k++) {
			f[nf++] = name;
			list_col_add(props, name);
		}
	}
	/* a sort key need not be a column, as in zfs list */
	for (size_t k = 0; k < nsort; k++)
		if (strcmp(sort_keys[k].prop, "name"))
			list_col_add(props, long_name(sort_keys[k].prop));
	for (size_t k = 0; k < nsort; k++)
		sort_keys[k].col = cell_col(sort_keys[k].prop);
	c = conn_open();
	/* list A B ...: each named one (and with -r what is under it), rows in one table */
	nreplies = argc - optind > 0 ? (size_t)(argc - optind) : 1;
	replies = calloc(nreplies, sizeof(*replies));
	cellv = calloc(nreplies, sizeof(*cellv));
	keepv = calloc(nreplies, sizeof(*keepv));
	if (!replies || !cellv || !keepv)
		die("out of memory");
	for (size_t q = 0; q < nreplies; q++) {
		const char *name = optind < argc ? argv[optind + (int)q] : NULL;
		struct list_row *more;

		/* text takes cells (a long list parses fastest so), JSON the sources too */
		args = json_pack("{s:O, s:b, s:s, s:b, s:b}", "props", props, "recursive", rec,
				 "type", type, "sources", opt_json, "cells", !opt_json);
		if (name) {
			json_object_set_new(args, "name", json_string(name));
			base = name_depth(name);
		}
		all = list_call(c, args, name, &replies[q], &cellv[q], &nall, &keepv[q]);
		cells = cellv[q];
		more = realloc(rows, (nrows + nall + 1) * sizeof(*rows));
		if (!more)
			die("out of memory");
		rows = more;
		for (i = 0; i < nall; i++) {
			struct list_row r = { cells ? cells + i * nlist_cols : NULL,
					      cells ? NULL : json_array_get(all, i) };

			if (depth < 0 || name_depth(list_value(&r, "name", 0)) - base <= depth)
				rows[nrows++] = r;
		}
	}
	json_decref(props);
	if (nsort)
		qsort(rows, nrows, sizeof(*rows), compare_datasets);
	if (opt_json) {
		json_t *doc = jout_doc("coffer list", "datasets");

		for (i = 0; i < nrows; i++)
			jout_add(doc, "datasets", list_value(&rows[i], "name", 0),
				 dataset_json(rows[i].obj, f, nf, parsable));
		jout_print(doc);
	} else {
		list_print(rows, nrows, f, nf, noheader, parsable);
	}
	free(rows);
	for (size_t q = 0; q < nreplies; q++) {
		free(cellv[q]);
		free(keepv[q]);
		json_decref(replies[q]);
	}
	free(cellv);
	free(keepv);
	free(replies);
	free(fcopy);
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

/* The rows of ds_get's @reply for @ds into the `get -j` document @doc (zfs get -j's shape). */
static void get_json(json_t *doc, const char *ds, json_t *reply, unsigned sources, int parsable)
{
	const char *at = strchr(ds, '@');
	json_t *o = json_pack("{s:s, s:s, s:s%, s:{}}", "name", ds, "type",
			      at ? "SNAPSHOT" : "VOLUME", "pool", ds, strcspn(ds, "/@"),
			      "properties"),
	       *v;
	size_t i;

	json_array_foreach(json_object_get(reply, "props"), i, v) {
		const char *p = json_string_value(json_object_get(v, "property"));
		const char *src = json_string_value(json_object_get(v, "source"));
		const char *val = json_string_value(json_object_get(v, "value"));
		char buf[64];

		if (sources != ~0u && !(sources & source_bit(src)))
			continue;
		json_object_set_new(json_object_get(o, "properties"), p,
				    jout_prop(p, show(p, val, parsable, buf, sizeof(buf)), val, src,
					      json_string_value(
						      json_object_get(v, "inherited_from"))));
	}
	jout_add(doc, "datasets", ds, o);
}

static int cmd_get(int argc, char **argv)
{
	int opt, noheader = 0, parsable = 0;
	unsigned cols = GET_NAME | GET_PROPERTY | GET_VALUE | GET_SOURCE;
	unsigned sources = ~0u; /* every source, without -s */
	json_t *args, *reply, *v, *doc = NULL;
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
	if (opt_json)
		doc = jout_doc("coffer get", "datasets");
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
			get_json(doc, argv[k], reply, sources, parsable);
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
	if (doc)
		jout_print(doc);
	coffer_close(c);
	return 0;
}

/*
 * pool get [-H] [-p] [-o FIELDS] all|PROP[,PROP]... [POOL]...: as zpool get,
 * one row per pool and property; every pool property is read-only, so the
 * source is "-".
 */
static int pool_get(int argc, char **argv)
{
	const struct pool_prop *props[NPOOL_PROPS * 4];
	unsigned cols = GET_NAME | GET_PROPERTY | GET_VALUE | GET_SOURCE;
	int opt, noheader = 0, parsable = 0;
	struct coffer_conn *c;
	json_t *reply, *p, *doc = NULL;
	size_t i, n;

	while ((opt = getopt(argc, argv, "Hpjo:")) != -1) {
		if (opt == 'o')
			cols = get_columns(optarg);
		else if (!listing_flag(opt, &noheader, &parsable))
			usage_exit();
	}
	if (argc - optind < 1)
		usage_exit();
	n = pool_props_arg(argv[optind], props, NPOOL_PROPS * 4, "pool get");
	c = conn_open();
	if (opt_json)
		doc = jout_doc("coffer pool get", "pools");
	else if (!noheader)
		get_row(cols, 0, "NAME", "PROPERTY", "VALUE", "SOURCE");
	/* no pool named: every pool, as zpool get */
	for (int k = optind + 1; k < argc || k == optind + 1; k++) {
		reply = call(c, "pool_list",
			     k < argc ? json_pack("{s:s}", "name", argv[k]) : NULL,
			     k < argc ? argv[k] : NULL);
		json_array_foreach(json_object_get(reply, "pools"), i, p) {
			const char *name = json_string_value(json_object_get(p, "name"));

			if (doc) {
				jout_add(doc, "pools", name, pool_entry_json(p, props, n, parsable));
				continue;
			}
			for (size_t j = 0; j < n; j++) {
				char buf[64], exact[32];

				get_row(cols, noheader, name, props[j]->name,
					pool_value(p, props[j], parsable, buf, sizeof(buf), exact,
						   sizeof(exact)),
					"-");
			}
		}
		json_decref(reply);
	}
	if (doc)
		jout_print(doc);
	coffer_close(c);
	return 0;
}

/* set PROP=VALUE... DATASET: all in one call, made all or none (zfs set takes several). */
/* --rate RATE ('R') and --scrub-free ('F') of a rekey's walk, for rekey and
 * set encryption=. @return 0 if @opt is neither */
static int walk_opt(int opt, uint64_t *rate, int *have_rate, int *scrub)
{
	if (opt == 'R') {
		*rate = size_arg(optarg, "--rate");
		*have_rate = 1;
	} else if (opt == 'F') {
		*scrub = 1;
	}
	return opt == 'R' || opt == 'F';
}

/*
 * set encryption=SUITE -o keyformat=F [-o keylocation=L] [-o pbkdf2iters=N]
 * [--rate RATE] [--scrub-free] DATASET: encrypt the clear DATASET in place,
 * its new key read as change-key reads one; its records are sealed in the
 * background at RATE, as a rekey's (rekeystatus). Without -o, on an
 * encrypted DATASET: its records sealed again under SUITE, its key kept.
 */
static int set_encryption(json_t *props, json_t *opts, const char *ds, uint64_t rate,
			  int have_rate, int scrub)
{
	struct coffer_conn *c;
	uint8_t key[KEY_MAX];
	const char *fmt = prop_in(opts, "keyformat"), *loc = prop_in(opts, "keylocation");
	json_t *args;
	size_t n;

	if (json_array_size(props) != 1)
		die("set: encryption=SUITE goes alone; give keyformat, keylocation and pbkdf2iters "
		    "with -o");
	if (!fmt && json_array_size(opts))
		die("%s: encrypting it needs -o keyformat=raw, hex or passphrase", ds);
	c = conn_open();
	/* no -o: a change of suite, which keeps the key (the daemon refuses it
	 * on a clear dataset, saying what encrypting it needs) */
	n = fmt ? key_read(c, ds, fmt, loc ? loc : "prompt", KEY_CONFIRM | KEY_NEW, key) : 0;
	json_array_extend(props, opts);
	args = json_pack("{s:s, s:O, s:b}", "name", ds, "props", props, "scrub_free", scrub);
	if (have_rate)
		json_object_set_new(args, "rate", json_integer((json_int_t)rate));
	if (n)
		key_attach(args, key, n);
	wipe(key, sizeof(key));
	json_decref(call(c, "ds_encrypt", args, ds));
	coffer_close(c);
	return 0;
}

static int cmd_set(int argc, char **argv)
{
	static const struct option longs[] = { { "rate", required_argument, NULL, 'R' },
					       { "scrub-free", no_argument, NULL, 'F' },
					       { NULL, 0, NULL, 0 } };
	struct coffer_conn *c;
	json_t *props, *opts = json_array();
	uint64_t rate = PROTO_REKEY_RATE;
	int opt, k, failed = 0, have_rate = 0, scrub = 0;

	while ((opt = getopt_long(argc, argv, "o:", longs, NULL)) != -1) {
		if (opt == 'o' && (!strncmp(optarg, "keyformat=", 10) ||
				   !strncmp(optarg, "keylocation=", 12) ||
				   !strncmp(optarg, "pbkdf2iters=", 12))) {
			json_array_append_new(opts, json_string(optarg));
		} else if (!walk_opt(opt, &rate, &have_rate, &scrub)) {
			usage_exit();
		}
	}
	props = json_array();
	/* PROP=VALUE... DATASET...: every assignment well-formed before any is sent */
	for (k = optind; k < argc && strchr(argv[k], '='); k++) {
		if (argv[k][0] == '=') {
			fprintf(stderr, "coffer: set: '%s' is no PROP=VALUE; nothing was set\n",
				argv[k]);
			usage_exit();
		}
		json_array_append_new(props, json_string(argv[k]));
	}
	if (k == optind || k == argc)
		usage_exit();
	for (int d = k; d < argc; d++)
		if (strchr(argv[d], '='))
			die("set: '%s' comes after the dataset %s: give every PROP=VALUE first; "
			    "nothing was set",
			    argv[d], argv[k]);
	if (prop_in(props, "encryption")) {
		if (k + 1 != argc)
			die("set: encryption=SUITE takes one dataset");
		failed = set_encryption(props, opts, argv[k], rate, have_rate, scrub);
		json_decref(props);
		json_decref(opts);
		return failed;
	}
	if (json_array_size(opts) || have_rate || scrub)
		die("set: -o, --rate and --scrub-free go with encryption=SUITE only");
	json_decref(opts);
	c = conn_open();
	/* all or none on each dataset (the daemon's), the datasets in turn */
	for (; k < argc; k++)
		failed |= call_each(c, "ds_set",
				    json_pack("{s:s, s:O}", "name", argv[k], "props", props), argv[k]);
	json_decref(props);
	coffer_close(c);
	return failed ? 1 : 0;
}

/* inherit [-r] PROP DATASET...: with -r, each DATASET and every dataset under it, as zfs inherit -r */
static int cmd_inherit(int argc, char **argv)
{
	struct coffer_conn *c;
	json_t *reply, *d;
	int opt, rec = 0, failed = 0;
	size_t i;

	while ((opt = getopt(argc, argv, "r")) != -1) {
		if (opt != 'r')
			usage_exit();
		rec = 1;
	}
	if (argc - optind < 2)
		usage_exit();
	c = conn_open();
	for (int k = optind + 1; k < argc; k++) {
		if (!rec) {
			failed |= call_each(c, "ds_inherit",
					    json_pack("{s:s, s:s}", "name", argv[k], "prop",
						      argv[optind]),
					    argv[k]);
			continue;
		}
		reply = call(c, "ds_list",
			     json_pack("{s:s, s:b, s:[]}", "name", argv[k], "recursive", 1, "props"),
			     argv[k]);
		json_array_foreach(json_object_get(reply, "datasets"), i, d) {
			const char *n = json_string_value(json_object_get(d, "name"));

			json_decref(call(c, "ds_inherit",
					 json_pack("{s:s, s:s}", "name", n, "prop", argv[optind]),
					 n));
		}
		json_decref(reply);
	}
	coffer_close(c);
	return failed ? 1 : 0;
}

/*
 * Load the key of encryption root @ds. @return 0; when @soft, instead of
 * exiting: KEY_SKIPPED (a prompt with nobody to answer it) or -1, each after
 * one line on stderr.
 */
static int load_one(struct coffer_conn *c, const char *ds, const char *loc, int noop, int soft)
{
	static const char *const names[] = { "keyformat", "keylocation", "keystatus",
					     "encryptionroot", NULL };
	json_t *p = ds_props(c, ds, names), *args, *reply = NULL;
	const char *fmt = json_string_value(json_object_get(p, "keyformat"));
	const char *ks = json_string_value(json_object_get(p, "keystatus"));
	const char *root = json_string_value(json_object_get(p, "encryptionroot"));
	uint8_t key[KEY_MAX];
	char err[1024];
	ssize_t n;
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
	n = key_get(c, ds, fmt, loc, soft ? KEY_BATCH : 0, key, err, sizeof(err));
	json_decref(p);
	if (n < 0 && !soft)
		die("%s", err);
	if (n < 0) {
		fprintf(stderr, "coffer: %s\n", err);
		return n == KEY_SKIPPED ? KEY_SKIPPED : -1;
	}
	args = json_pack("{s:s, s:b}", "name", ds, "noop", noop);
	key_attach(args, key, (size_t)n);
	wipe(key, sizeof(key));
	ret = coffer_call(c, "key_load", args, &reply, err, sizeof(err));
	wipe((char *)json_string_value(json_object_get(args, "key_hex")),
	     strlen(json_string_value(json_object_get(args, "key_hex"))));
	json_decref(args);
	json_decref(reply);
	if (ret < 0 && !soft)
		die_call(ret, ds, err);
	if (ret < 0) {
		fprintf(stderr, "coffer: %s\n", err);
		return -1;
	}
	return 0;
}

/* Is @name @base or a dataset under it? */
static int at_or_below(const char *name, const char *base)
{
	size_t n = strlen(base);

	return !strncmp(name, base, n) && (name[n] == '\0' || name[n] == '/');
}

/*
 * Encryption roots (encryptionroot == own name), optionally only those with
 * @keystatus, and with @under only @under and the datasets below it (which
 * must exist).
 */
/*
 * The encryption roots (whose keystatus is @keystatus, at or below @under
 * when given). *@unmet, when asked for, gets the roots cofferd's
 * encryption_roots lists that are missing or clear (cofferd(8)).
 */
static json_t *enc_roots(struct coffer_conn *c, const char *keystatus, const char *under,
			 json_t **unmet)
{
	json_t *reply = call(c, "ds_list",
			     json_pack("{s:[s,s,s]}", "props", "encryptionroot", "keystatus",
				       "keylocation"),
			     NULL);
	json_t *out = json_array(), *d;
	int found = !under;
	size_t i;

	json_array_foreach(json_object_get(reply, "datasets"), i, d) {
		const char *name = json_string_value(json_object_get(d, "name"));
		json_t *p = json_object_get(d, "props");
		const char *root = json_string_value(json_object_get(p, "encryptionroot"));
		const char *ks = json_string_value(json_object_get(p, "keystatus"));

		if (!name || (under && !at_or_below(name, under)))
			continue;
		found |= under && !strcmp(name, under);
		if (!root || strcmp(root, name))
			continue;
		if (keystatus && (!ks || strcmp(ks, keystatus)))
			continue;
		json_array_append(out, d);
	}
	if (unmet) {
		*unmet = json_object_get(reply, "roots");
		*unmet = json_incref(*unmet ? *unmet : json_array());
	}
	json_decref(reply);
	if (!found)
		die("%s: dataset does not exist; see 'coffer list' for the datasets there are", under);
	return out;
}

static int cmd_load_key(int argc, char **argv)
{
	const char *loc = NULL;
	int opt, all = 0, rec = 0, noop = 0;
	size_t loaded = 0, total;
	struct coffer_conn *c;
	json_t *roots, *d, *unmet = NULL;
	size_t i;

	while ((opt = getopt(argc, argv, "anrL:")) != -1) {
		switch (opt) {
		case 'a':
			all = 1;
			break;
		case 'n':
			noop = 1;
			break;
		case 'r':
			rec = 1;
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
	/* one location for many roots can only mean "ask for each", as for zfs */
	if ((all || rec) && loc && strcmp(loc, "prompt"))
		die("load-key: -L with -a or -r can only be 'prompt'");
	c = conn_open();
	if (!all && !rec) {
		load_one(c, argv[optind], loc, noop, 0);
		coffer_close(c);
		return 0;
	}
	/*
	 * Many roots: each is tried, a failure or a prompt nobody can answer
	 * (a boot without a terminal) does not stop the others, and the summary
	 * says how many made it; the exit status says whether all did.
	 */
	roots = enc_roots(c, "unavailable", all ? NULL : argv[optind], all ? &unmet : NULL);
	total = json_array_size(roots);
	/* the roots that need nobody first: a prompt left unanswered at boot holds only its own */
	for (int asks = 0; asks < 2; asks++) {
		json_array_foreach(roots, i, d) {
			const char *kl = json_string_value(
				json_object_get(json_object_get(d, "props"), "keylocation"));
			int prompt = loc || !kl || !strcmp(kl, "prompt");

			if (prompt == asks)
				loaded += load_one(c, json_string_value(json_object_get(d, "name")),
						   loc, noop, 1) == 0;
		}
	}
	printf("%zu / %zu key(s) successfully %s\n", loaded, total, noop ? "verified" : "loaded");
	/* a root the operator listed that is gone or clear fails the boot unit */
	json_array_foreach(unmet, i, d)
		fprintf(stderr, "coffer: %s: listed in cofferd's encryption_roots, but %s\n",
			json_string_value(json_object_get(d, "name")),
			!strcmp(json_string_value(json_object_get(d, "problem")), "clear")
				? "clear by its metadata: the metadata was changed, or the list "
				  "is out of date"
				: "no such dataset (or its pool is not imported)");
	i = json_array_size(unmet);
	json_decref(unmet);
	json_decref(roots);
	coffer_close(c);
	return loaded == total && i == 0 ? 0 : 1;
}

static int cmd_unload_key(int argc, char **argv)
{
	struct coffer_conn *c;
	int opt, all = 0, rec = 0, force = 0;
	size_t done = 0, total, i;
	json_t *roots, *d;

	while ((opt = getopt(argc, argv, "afr")) != -1) {
		if (opt == 'a')
			all = 1;
		else if (opt == 'f')
			force = 1; /* close the handles of whoever has its datasets open */
		else if (opt == 'r')
			rec = 1;
		else
			usage_exit();
	}
	if (all ? argc - optind != 0 : argc - optind != 1)
		usage_exit();
	c = conn_open();
	if (!all && !rec) {
		json_decref(call(c, "key_unload",
				 json_pack("{s:s, s:b}", "name", argv[optind], "force", force),
				 argv[optind]));
		coffer_close(c);
		return 0;
	}
	roots = enc_roots(c, "available", all ? NULL : argv[optind], NULL);
	total = json_array_size(roots);
	json_array_foreach(roots, i, d) {
		const char *n = json_string_value(json_object_get(d, "name"));
		json_t *args = json_pack("{s:s, s:b}", "name", n, "force", force), *reply = NULL;
		char err[512];

		if (coffer_call(c, "key_unload", args, &reply, err, sizeof(err)) < 0)
			fprintf(stderr, "coffer: %s\n", err);
		else
			done++;
		json_decref(args);
		json_decref(reply);
	}
	printf("%zu / %zu key(s) successfully unloaded\n", done, total);
	json_decref(roots);
	coffer_close(c);
	return done == total ? 0 : 1;
}

/* change-key -l: load the key of @ds's encryption root unless it is loaded. */
static void ensure_loaded(struct coffer_conn *c, const char *ds)
{
	static const char *const names[] = { "keystatus", "encryptionroot", NULL };
	json_t *p = ds_props(c, ds, names);
	const char *ks = json_string_value(json_object_get(p, "keystatus"));
	const char *root = json_string_value(json_object_get(p, "encryptionroot"));

	if (ks && !strcmp(ks, "unavailable") && root && strcmp(root, "-"))
		load_one(c, root, NULL, 0, 0);
	json_decref(p);
}

static int cmd_change_key(int argc, char **argv)
{
	static const char *const names[] = { "keyformat", "keylocation", "keystatus",
					     "encryptionroot", NULL };
	json_t *props = json_array(), *args, *cur;
	const char *fmt, *loc, *ks, *ds;
	struct coffer_conn *c;
	uint8_t key[KEY_MAX];
	int opt, inherit = 0, load = 0;
	size_t n;

	while ((opt = getopt(argc, argv, "ilo:")) != -1) {
		switch (opt) {
		case 'i':
			inherit = 1;
			break;
		case 'l':
			load = 1;
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
	ds = argv[optind];
	if (inherit && json_array_size(props))
		die("%s: change-key -i takes no -o: the key properties become the parent's "
		    "encryption root's",
		    ds);
	c = conn_open();
	cur = ds_props(c, ds, names);
	fmt = json_string_value(json_object_get(cur, "keyformat"));
	ks = json_string_value(json_object_get(cur, "keystatus"));
	if (!fmt || !strcmp(fmt, "none") || !ks || !strcmp(ks, "-"))
		die("%s: dataset is not encrypted; create it with -o encryption=on", ds);
	/* before any prompt for a new key: the old one must be there to rewrap with */
	if (load) {
		ensure_loaded(c, ds);
	} else if (!strcmp(ks, "unavailable")) {
		const char *root = json_string_value(json_object_get(cur, "encryptionroot"));

		die("%s: key is not loaded; run 'coffer load-key %s' first, or give change-key -l",
		    ds, root ? root : ds);
	}
	if (inherit) {
		char parent[STOR_NAME_MAX + 1], *slash;

		snprintf(parent, sizeof(parent), "%s", ds);
		slash = strrchr(parent, '/');
		if (slash && load) {
			*slash = '\0';
			ensure_loaded(c, parent); /* the parent's root wraps from now on */
		}
		json_decref(cur);
		json_decref(props);
		json_decref(call(c, "key_change", json_pack("{s:s, s:b}", "name", ds, "inherit", 1),
				 ds));
		coffer_close(c);
		return 0;
	}
	if (prop_in(props, "keyformat"))
		fmt = prop_in(props, "keyformat");
	loc = prop_in(props, "keylocation");
	if (!loc)
		loc = json_string_value(json_object_get(cur, "keylocation"));
	n = key_read(c, ds, fmt, loc, KEY_CONFIRM | KEY_NEW, key);
	args = json_pack("{s:s, s:o}", "name", ds, "props", props);
	key_attach(args, key, n);
	wipe(key, sizeof(key));
	json_decref(cur);
	json_decref(call(c, "key_change", args, ds));
	coffer_close(c);
	return 0;
}

/*
 * rekey [-r] [-p | -s] [--rate RATE] [--scrub-free] DATASET: start or resume
 * the rekey of DATASET (and with -r of each encrypted dataset below it), at
 * most RATE bytes per second, 0 for no limit, writing over the pool's free
 * space before it ends with --scrub-free; -p pauses it, -s stops it. Its
 * progress is the property rekeystatus.
 */
static int cmd_rekey(int argc, char **argv)
{
	static const struct option longs[] = { { "rate", required_argument, NULL, 'R' },
					       { "scrub-free", no_argument, NULL, 'F' },
					       { NULL, 0, NULL, 0 } };
	uint64_t rate = PROTO_REKEY_RATE;
	int opt, pause = 0, stop = 0, recursive = 0, have_rate = 0, scrub = 0;
	struct coffer_conn *c;
	json_t *args;

	while ((opt = getopt_long(argc, argv, "prs", longs, NULL)) != -1) {
		if (opt == 'p') {
			pause = 1;
		} else if (opt == 's') {
			stop = 1;
		} else if (opt == 'r') {
			recursive = 1;
		} else if (!walk_opt(opt, &rate, &have_rate, &scrub)) {
			usage_exit();
		}
	}
	/* a rate is a start's: with -p or -s it would be dropped unsaid */
	if (argc - optind != 1 || (pause && stop) || ((have_rate || scrub) && (pause || stop)))
		usage_exit();
	args = json_pack("{s:s, s:b, s:b, s:b, s:b}", "name", argv[optind], "pause", pause, "stop",
			 stop, "recursive", recursive, "scrub_free", scrub);
	if (!pause && !stop)
		json_object_set_new(args, "rate", json_integer((json_int_t)rate));
	c = conn_open();
	json_decref(call(c, "rekey", args, argv[optind]));
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

/* The handle is closed before the verb exits, so the next verb finds the
 * dataset free: a connection's handles go only when the daemon has finished
 * with the connection, after the client is gone. */
static void close_handle_and_conn(struct coffer_conn *c, int h, const char *ds)
{
	int ret = coffer_ds_close(c, h);

	if (ret < 0) {
		char err[512];

		snprintf(err, sizeof(err), "%s: close: %s", ds, proto_strerror(ret));
		die_call(ret, ds, err);
	}
	coffer_close(c);
}

static void io_fail(const char *ds, const char *what, uint64_t off, int status)
{
	char err[512];

	snprintf(err, sizeof(err), "%s: %s at offset %llu: %s", ds, what, (unsigned long long)off,
		 proto_strerror(status));
	die_call(status, ds, err);
}

/*
 * Requests go out IO_DEPTH at a time, so when one fails others may have
 * been written already: they are drained, flushed, and the error says how
 * many bytes landed, not only where the first one failed.
 */
static int cmd_write(int argc, char **argv)
{
	uint8_t *bufs[IO_DEPTH];
	uint64_t offs[IO_DEPTH], lens[IO_DEPTH];
	uint64_t off = 0, volsize, sent = 0, landed = 0, bad_off = 0;
	struct coffer_conn *c;
	unsigned inflight = 0, free_slots[IO_DEPTH], nfree = IO_DEPTH;
	int opt, h, eof = 0, bad = 0;
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
	while ((!eof && !bad) || inflight) {
		while (!eof && !bad && nfree) {
			unsigned s = free_slots[--nfree];
			ssize_t n = coffer_read_full(STDIN_FILENO, bufs[s], chunk);
			int ret;

			if (n < 0)
				die("reading standard input: %s", strerror((int)-n));
			if (n == 0) {
				eof = 1;
				free_slots[nfree++] = s;
				break;
			}
			if ((size_t)n < chunk)
				eof = 1;
			offs[s] = off;
			lens[s] = (uint64_t)n;
			ret = coffer_submit(c, s, COFFER_WRITE, h, off, (uint32_t)n, bufs[s]);
			if (ret < 0)
				io_fail(argv[optind], "write", off, ret);
			off += n;
			sent += n;
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
				if (cc[i].status >= 0) {
					landed += lens[cc[i].id];
				} else if (!bad || offs[cc[i].id] < bad_off) {
					bad = cc[i].status; /* the first in the file's order */
					bad_off = offs[cc[i].id];
				}
				free_slots[nfree++] = cc[i].id;
				inflight--;
			}
		}
	}
	{
		int ret = coffer_ds_flush(c, h);

		if (bad) {
			char err[512];

			snprintf(err, sizeof(err),
				 "%s: write at offset %llu: %s; %llu of the %llu bytes sent were "
				 "written%s, each request whole or not at all",
				 argv[optind], (unsigned long long)bad_off, proto_strerror(bad),
				 (unsigned long long)landed, (unsigned long long)sent,
				 ret < 0 ? " (their flush failed too)" : " and flushed");
			die_call(bad, argv[optind], err);
		}
		if (ret < 0)
			io_fail(argv[optind], "flush", off, ret);
	}
	for (unsigned i = 0; i < IO_DEPTH; i++)
		free(bufs[i]);
	close_handle_and_conn(c, h, argv[optind]);
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
	close_handle_and_conn(c, h, argv[optind]);
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
	close_handle_and_conn(c, h, argv[optind]);
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
	close_handle_and_conn(c, h, argv[optind]);
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

/* The cipher's bursts by size, as the daemon counts them (records per call). */
static void crypto_bursts(json_t *crypto)
{
	const char *ops[] = { "open_bursts", "seal_bursts" };

	if (!crypto)
		return;
	printf("%-18s", "crypto bursts");
	for (unsigned b = 0; b < 8; b++) {
		char label[16];

		snprintf(label, sizeof(label), b == 7 ? "%u+" : "%u", 1u << b);
		printf(" %8s", label);
	}
	putchar('\n');
	for (unsigned k = 0; k < 2; k++) {
		json_t *a = json_object_get(crypto, ops[k]), *v;
		size_t i;

		printf("  %-16s", k ? "seal" : "open");
		json_array_foreach(a, i, v)
			printf(" %8lld", (long long)json_integer_value(v));
		putchar('\n');
	}
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

/* A list of named objects keyed by name, as every -j document keys them. */
static json_t *by_name_object(json_t *arr)
{
	json_t *o = json_object(), *e;
	size_t i;

	json_array_foreach(arr, i, e)
		json_object_set(o, json_string_value(json_object_get(e, "name")), e);
	return o;
}

/* stats -j: the reply with its pools (and their datasets) keyed by name. */
static json_t *stats_doc(json_t *cur)
{
	json_t *doc = jout_doc("coffer stats", NULL), *body = json_deep_copy(cur), *p;
	const char *k;
	size_t i;

	json_array_foreach(json_object_get(body, "pools"), i, p)
		if (json_object_get(p, "datasets_io"))
			json_object_set_new(p, "datasets_io",
					    by_name_object(json_object_get(p, "datasets_io")));
	if (json_object_get(body, "pools"))
		json_object_set_new(body, "pools", by_name_object(json_object_get(body, "pools")));
	json_object_foreach(body, k, p)
		json_object_set(doc, k, p);
	json_decref(body);
	return jout_numbers(doc);
}

static int cmd_stats(int argc, char **argv)
{
	long interval = 0, count = -1;
	const char *ds = NULL;
	struct coffer_conn *c;
	json_t *prev = NULL, *cur;
	static const struct option longs[] = { { "prometheus", no_argument, NULL, 'P' },
						{ NULL, 0, NULL, 0 } };
	int opt, prom = 0;

	while ((opt = getopt_long(argc, argv, "jd:P", longs, NULL)) != -1) {
		if (opt == 'j')
			opt_json = 1;
		else if (opt == 'd')
			ds = optarg;
		else if (opt == 'P')
			prom = 1;
		else
			usage_exit();
	}
	if (argc - optind > 2 || (prom && (ds || opt_json || optind < argc)))
		usage_exit();
	if (prom) {
		/* the daemon renders it, as for its GET /metrics */
		c = conn_open();
		cur = call(c, "stats", json_pack("{s:b}", "prometheus", 1), NULL);
		fputs(json_string_value(json_object_get(cur, "text")), stdout);
		json_decref(cur);
		coffer_close(c);
		return fflush(stdout) == 0 ? 0 : 1;
	}
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
			char *s;
			json_t *doc = stats_doc(cur);

			/* one document a line, at an interval */
			s = json_dumps(doc, interval ? JSON_COMPACT : JSON_INDENT(2) | JSON_PRESERVE_ORDER);
			puts(s);
			free(s);
			json_decref(doc);
		} else if (!interval) {
			const char *keys[] = { "reads", "writes", "flushes", "discards", "maps",
					       "read_bytes", "write_bytes", "io_errors", "admin_calls",
					       "eperm", "bad_frames", "connections_total",
					       "connections_open", "batches", "batched_ios",
					       "ring_reads", "inflight_peak", NULL };

			json_t *p;
			size_t j;

			for (int k = 0; keys[k]; k++)
				printf("%-18s %lld\n", keys[k], io_stat(cur, keys[k]));
			crypto_bursts(json_object_get(cur, "crypto"));
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

	if (only_flag(argc, argv, 'j'))
		opt_json = 1;
	if (argc != optind)
		usage_exit();
	if (!opt_json)
		printf("coffer %s (protocol %u)\n", PACKAGE_VERSION, PROTO_VERSION);
	c = conn_open();
	r = call(c, "version", NULL, NULL);
	if (opt_json) {
		json_t *doc = jout_doc("coffer version", NULL);

		json_object_set_new(doc, "client",
				    json_pack("{s:s, s:o}", "version", PACKAGE_VERSION, "protocol",
					      jout_uint(PROTO_VERSION)));
		json_object_set_new(doc, "daemon", jout_numbers(json_incref(r)));
		jout_print(doc);
	} else {
		printf("cofferd %s (protocol %lld)\n",
		       json_string_value(json_object_get(r, "version")),
		       (long long)json_integer_value(json_object_get(r, "protocol")));
	}
	json_decref(r);
	coffer_close(c);
	return 0;
}

static int cmd_ping(int argc, char **argv)
{
	struct coffer_conn *c;

	if (only_flag(argc, argv, 'j'))
		opt_json = 1;
	if (argc != optind)
		usage_exit();
	c = conn_open();
	json_decref(call(c, "ping", NULL, NULL));
	if (opt_json) {
		json_t *doc = jout_doc("coffer ping", NULL);

		json_object_set_new(doc, "alive", json_true());
		json_object_set_new(doc, "socket", json_string(coffer_socket_path(opt_socket)));
		jout_print(doc);
	} else
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
	{ "pool", cmd_pool, "create|add|list|get|status|check|clear|scrub|offline|online|replace|"
			    "attach|detach|events|export|import|destroy ...",
	  "Pools: run 'coffer help pool VERB' for one of create, add, list, get, status, check, "
	  "clear, scrub, offline, online, replace, attach, detach, events, export, import, "
	  "destroy." },
	{ "create", cmd_create, "[-p] [-s] [-V SIZE] [-b RECORDSIZE] [-o prop=val]... POOL/NAME",
	  "Create volume POOL/NAME.\n"
	  "  -p          make the missing datasets above it first (sparse)\n"
	  "  -s          sparse: no refreservation\n"
	  "  -V SIZE     volume size (a multiple of the recordsize)\n"
	  "  -b SIZE     recordsize, a power of 2 from 512 to 1M\n"
	  "  -o P=V      set property P (see PROPERTIES below)" },
	{ "destroy", cmd_destroy, "[-nvp] [-rR] [-f] DATASET | DATASET@SNAP[%SNAP][,...]",
	  "Destroy DATASET, or snapshots (@a%b: from a to b; @a% and @%b open ends;\n"
	  "@a,c%e: a list of both, destroyed together or not at all).\n"
	  "  -r  its children (or their snapshots of that name) too\n"
	  "  -R  the clones of what goes too (and theirs); implies -r\n"
	  "  -f  close the handles of its users\n"
	  "  -n  dry run: check, destroy nothing\n"
	  "  -v  list what goes (would destroy NAME) and the space it frees (would reclaim)\n"
	  "  -p  the same, parsable: destroy NAME, reclaim BYTES" },
	{ "clone", cmd_clone, "[-o prop=val]... DATASET@SNAP POOL/NAME",
	  "Make POOL/NAME from the snapshot, in constant time: it reads the snapshot's\n"
	  "data until it writes its own, and shares its encryption root and key.\n"
	  "  -o P=V  set property P (not volsize, recordsize nor the key's)" },
	{ "promote", cmd_promote, "CLONE",
	  "Make CLONE the owner of its origin's snapshots up to its origin; the old\n"
	  "origin becomes a clone of that snapshot. Both read as before." },
	{ "rename", cmd_rename, "[-f] [-p] DATASET NEWNAME | [-r] DATASET@SNAP [DATASET]@NEWSNAP",
	  "Rename DATASET (its descendants and snapshots follow) or a snapshot, in the pool.\n"
	  "A dataset whose key is inherited stays below its encryption root, and a clear\n"
	  "one does not go below an encrypted one.\n"
	  "  -p  make the missing datasets above NEWNAME first (sparse)\n"
	  "  -r  the snapshot SNAP of every dataset under DATASET too\n"
	  "  -f  close the handles of its users" },
	{ "snapshot", cmd_snapshot, "[-r] DATASET@SNAP...",
	  "Snapshot the datasets named, all in one txg, in constant time.\n"
	  "  -r  every dataset under each one too" },
	{ "rollback", cmd_rollback, "[-r] DATASET@SNAP",
	  "Bring DATASET back to its snapshot, freeing what was written since.\n"
	  "  -r  destroy the newer snapshots (refused without it)" },
	{ "list", cmd_list,
	  "[-r | -d DEPTH] [-H] [-p] [-t TYPE[,TYPE]] [-o field[,field]...] [-s PROP]... "
	  "[-S PROP]... [-j] [DATASET]...",
	  "List datasets.\n"
	  "  -r        recursively under DATASET\n"
	  "  -d DEPTH  recursively, DEPTH levels down (a snapshot is one below its dataset)\n"
	  "  -t TYPE   volume (default), snapshot or all; vol and snap for short\n"
	  "  -H        no header, tabs between fields\n"
	  "  -p        exact numbers\n"
	  "  -o F,...  fields: name and properties (an unknown one is refused), or all\n"
	  "  -s PROP   sort by PROP, ascending (sizes as numbers); repeat for more keys\n"
	  "  -S PROP   likewise, descending\n"
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
	{ "set", cmd_set,
	  "PROP=VALUE... DATASET... | encryption=SUITE [-o keyformat=FMT [-o keylocation=LOC]\n"
	  "       [-o pbkdf2iters=N]] [--rate RATE] [--scrub-free] DATASET",
	  "Set property PROP of DATASET (see PROPERTIES below); several at once are set\n"
	  "all or none on each DATASET. A DATASET that refuses is named, and the rest are\n"
	  "set; the exit status is then 1. encryption=SUITE encrypts a clear DATASET in\n"
	  "place with a new key (read as change-key reads one), while it serves I/O: its\n"
	  "records are sealed in the background at RATE (default 16M), as a rekey's\n"
	  "(rekeystatus; rekey -p, -s and a resume apply), its clones with it. Without\n"
	  "-o, on an encrypted DATASET, its suite changes the same way; its key stays." },
	{ "inherit", cmd_inherit, "[-r] PROP DATASET...",
	  "Drop the local value of PROP: DATASET inherits it again. A DATASET that refuses\n"
	  "is named, and the rest go on; the exit status is then 1.\n"
	  "  -r  and every dataset under DATASET" },
	{ "load-key", cmd_load_key, "[-n] [-L LOCATION] -a | [-r] DATASET",
	  "Load the key of encryption root DATASET from its keylocation (prompt, file:// or\n"
	  "https://). Prompts go to $COFFER_ASKPASS when set (systemd-ask-password at boot).\n"
	  "  -a    every root whose key is not loaded; without a terminal a prompt root is\n"
	  "        skipped, and the exit status is 1 unless every one loaded\n"
	  "  -r    every root at or below DATASET whose key is not loaded, as -a does\n"
	  "  -n    check the key only\n"
	  "  -L L  read it from L (prompt, file:///path or https://URL) this once; only\n"
	  "        prompt with -a or -r" },
	{ "unload-key", cmd_unload_key, "[-f] -a | [-r] DATASET",
	  "Wipe the key of encryption root DATASET from memory.\n"
	  "  -a  every root whose key is loaded\n"
	  "  -r  every root at or below DATASET whose key is loaded\n"
	  "  -f  close the handles of its datasets' users" },
	{ "change-key", cmd_change_key,
	  "[-l] [-o keyformat=FMT] [-o keylocation=LOC] [-o pbkdf2iters=N] DATASET | "
	  "[-l] -i DATASET",
	  "Wrap the key of DATASET anew (its data keys stay); DATASET becomes an encryption\n"
	  "root if it was not. The new key is read from keylocation, asked as a new one.\n"
	  "  -l  load the key first if it is not loaded (with -i: the parent's root's too)\n"
	  "  -i  make DATASET inherit its parent's encryption root: the parent's key wraps\n"
	  "      its keys, and it is a root no more; both keys must be loaded\n"
	  "  -o keyformat=raw|hex|passphrase\n"
	  "  -o keylocation=prompt|file:///path|https://URL\n"
	  "  -o pbkdf2iters=N" },
	{ "rekey", cmd_rekey, "[-r] [-p | -s] [--rate RATE] [--scrub-free] DATASET",
	  "Give DATASET a new master key and seal every record again under it, in the\n"
	  "background while it serves I/O; then the old master key leaves the key file.\n"
	  "Again on a paused, stopped or failed rekey: resume it. Progress: 'coffer get\n"
	  "rekeystatus DATASET'. Refused for a dataset with snapshots, and for a clone.\n"
	  "  -r           each encrypted dataset below DATASET too\n"
	  "  -p           pause\n"
	  "  -s           stop (resume with 'coffer rekey DATASET')\n"
	  "  --rate RATE  at most RATE bytes per second (default 16M, 0: no limit)\n"
	  "  --scrub-free before it ends, write over the pool's free space, where the\n"
	  "               old ciphertext the rekey freed is" },
	{ "send", cmd_send, "[-nvP] [-w] [-i @FROM | -I @FROM] DATASET@SNAP > STREAM | -t TOKEN > STREAM",
	  "Write the stream of snapshot DATASET@SNAP to standard output, for 'coffer receive'.\n"
	  "  -w        raw: the records as stored, encrypted, with the wrapped key; no key\n"
	  "            needed, and the copy loads with the original key\n"
	  "  -i @FROM  incremental: only what changed since the earlier snapshot FROM\n"
	  "  -I @FROM  incremental over every snapshot between FROM and SNAP, each one sent\n"
	  "  -n        dry run: check and estimate, send nothing\n"
	  "  -v        print the estimated size of each stream and the total (on stderr\n"
	  "            when the stream goes to stdout)\n"
	  "  -P        the same, parsable: full|incremental, names, bytes; then size\n"
	  "  -t TOKEN  the rest of a stream a 'receive -s' kept part of: TOKEN is the target's\n"
	  "            receive_resume_token; it names the snapshot, FROM and -w" },
	{ "receive", cmd_receive, "[-F | -s] [-u] DATASET < STREAM | -A DATASET",
	  "Make DATASET and its snapshot from a stream of 'coffer send', or apply an\n"
	  "incremental to it; a damaged or cut stream leaves it as it was (but with -s).\n"
	  "  -F  replace DATASET if it exists; an incremental: roll it back to FROM first\n"
	  "  -s  a stream cut short keeps what came whole, and DATASET a receive_resume_token\n"
	  "      for 'coffer send -t TOKEN | coffer receive -s DATASET'; until then DATASET\n"
	  "      is closed to other use\n"
	  "  -A  abandon the partial receive -s left in DATASET (a full stream's DATASET is\n"
	  "      destroyed, an incremental's goes back to FROM)\n"
	  "  -u  accepted for zfs receive; nothing is exported on receive" },
	{ "recv", cmd_receive, "[-F | -s] [-u] DATASET < STREAM | -A DATASET",
	  "The same as receive." },
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
	{ "stats", cmd_stats, "[-j] [-d DATASET] [INTERVAL [COUNT]] | -P",
	  "Show I/O counters, every INTERVAL seconds, COUNT times.\n"
	  "  -j          JSON\n"
	  "  -d DATASET  that dataset's rows\n"
	  "  -P, --prometheus  every counter, gauge and latency histogram in the Prometheus\n"
	  "              text format (node_exporter's textfile collector; the same text\n"
	  "              as cofferd's metrics_listen serves)" },
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
	fprintf(f, "usage: coffer [-S SOCKET] [-j | --json-int] VERB [ARGS]\n\nverbs:\n");
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

/*
 * --json and --json-int may go anywhere before "--", as OpenZFS takes
 * --json-int after the verb: taken out of @argv here, so each verb's
 * getopt sees only its own options. Not for bench, whose --json names a file.
 */
static int take_json_flags(int argc, char **argv)
{
	int n = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			while (i < argc)
				argv[n++] = argv[i++];
			break;
		}
		if (!strcmp(argv[i], "--json-int"))
			opt_json = jout_int = 1;
		else if (!strcmp(argv[i], "--json"))
			opt_json = 1;
		else
			argv[n++] = argv[i];
	}
	argv[n] = NULL;
	return n;
}

static int dispatch(const struct cmd *table, const char *prefix, int argc, char **argv)
{
	for (const struct cmd *t = table; t->name; t++) {
		if (strcmp(t->name, argv[0]))
			continue;
		cur_cmd = t;
		cur_prefix = prefix;
		if (t->fn != cmd_bench && t->fn != cmd_pool)
			argc = take_json_flags(argc, argv);
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
		{ "json-int", no_argument, NULL, 'I' },	    { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },	    { NULL, 0, NULL, 0 },
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
		case 'I':
			opt_json = jout_int = 1;
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
