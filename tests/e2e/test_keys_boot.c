// SPDX-License-Identifier: MIT
/*
 * E2E: keys at boot and the key verbs around them, through the real coffer
 * and cofferd: the generated cofferd-load-key.service through systemd-analyze
 * verify; `load-key -a` after a restart, without a terminal, loading every
 * file:// and https:// root and naming the prompt roots it skips; a
 * password agent (COFFER_ASKPASS) for those; -r on a subtree only;
 * change-key -i (a root joins its parent's) and -l; keylocation=https://
 * against a TLS server on 127.0.0.1 this test starts, with a CA it makes,
 * given in cofferd.conf: a wrong CA, an oversized body, a missing key and an
 * unreachable server are each refused in words, and nothing is loaded.
 */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"

TDAEMON_FIXTURE(NULL)
static char out[65536];

TestSuite(keys_boot, .init = setup, .fini = teardown, .timeout = 240);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)
#define COF_HAS(want, ...)                                          \
	do {                                                        \
		COF_OK(NULL, __VA_ARGS__);                          \
		cr_assert(strstr(out, (want)), "%s", out);          \
	} while (0)
/* `coffer ARGS` exits @st and says @want */
#define REFUSED(st, want, ...)                                                       \
	do {                                                                         \
		int rc_ = cof(NULL, __VA_ARGS__);                                     \
		cr_assert_eq(rc_, (st), "exit %d, want %d: %s", rc_, (st), out);      \
		cr_assert(strstr(out, (want)), "'%s' lacks '%s'", out, (want));        \
	} while (0)

#define PASS "correct horse battery staple\n"
#define HEX "00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210\n"
#define ENC "-o encryption=on -o pbkdf2iters=100000"

/* `coffer ARGS` with @prefix before it (environment assignments), stdin from @in. */
static int cofp(const char *prefix, const char *in, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int cofp(const char *prefix, const char *in, const char *fmt, ...)
{
	char args[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	return tdaemon_coffer(&td, prefix, in, out, sizeof(out), args);
}

static const char *file_of(const char *name, const char *text)
{
	static char path[8][4096];
	static unsigned next;
	char *p = path[next++ % 8];

	snprintf(p, sizeof(path[0]), "%s", tdaemon_file(&td, name, text, strlen(text)));
	return p;
}

static void make_pool(void)
{
	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
}

/* The value of @prop of @ds (get -H -o value). */
static const char *prop(const char *ds, const char *name)
{
	static char v[512];

	COF_OK(NULL, "get -H -o value %s %s", name, ds);
	snprintf(v, sizeof(v), "%.*s", (int)strcspn(out, "\n"), out);
	return v;
}

#define KEYSTATUS_IS(ds, want) cr_assert_str_eq(prop((ds), "keystatus"), (want), "%s", (ds))

/* Write @len random bytes into @ds; @path gets the file written. */
static void fill(const char *ds, size_t len, char *path, size_t cap)
{
	tdaemon_random_file(&td, "in", len, path, cap);
	COF_OK(path, "write %s", ds);
	COF_OK(NULL, "flush %s", ds);
}

/* @ds reads back the @len bytes of @path. */
static void reads_back(const char *ds, const char *path, size_t len)
{
	char args[8192], cmd[8192];

	snprintf(args, sizeof(args), "read -l %zu %s > '%s/back'", len, ds, td.dir);
	cr_assert_eq(tdaemon_coffer(&td, NULL, NULL, NULL, 0, args), 0, "read %s", ds);
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s/back'", path, td.dir);
	cr_assert_eq(system(cmd), 0, "%s reads back other bytes", ds);
}

static void restart(void)
{
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	tdaemon_start_ok(&td);
}

static int have(const char *prog)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
	return system(cmd) == 0;
}

/* ---- the unit ---- */

Test(keys_boot, the_load_key_unit_passes_systemd_analyze_verify)
{
	const char *unit = getenv("COFFER_LOAD_KEY_UNIT"), *daemon_unit = getenv("COFFER_UNIT");
	char cmd[16384], o[8192], mine[4096], theirs[4096];
	FILE *p;
	size_t n;

	if (!have("systemd-analyze"))
		tdaemon_skip(&td, "systemd-analyze is not installed");
	if (!unit || access(unit, R_OK) || !daemon_unit || access(daemon_unit, R_OK))
		tdaemon_skip(&td, "COFFER_LOAD_KEY_UNIT and COFFER_UNIT (the generated units) not "
				  "given");
	/* verify wants the programs to exist: point both units at the built ones */
	snprintf(mine, sizeof(mine), "%s/cofferd-load-key.service", td.dir);
	snprintf(theirs, sizeof(theirs), "%s/cofferd.service", td.dir);
	snprintf(cmd, sizeof(cmd),
		 "sed -e 's|^ExecStart=[^ ]*|ExecStart=%s|' '%s' > '%s' && "
		 "sed -e 's|^ExecStart=[^ ]*|ExecStart=%s|' '%s' > '%s'",
		 getenv("COFFER"), unit, mine, getenv("COFFERD"), daemon_unit, theirs);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
	snprintf(cmd, sizeof(cmd),
		 "SYSTEMD_LOG_LEVEL=warning systemd-analyze verify --man=no '%s' '%s' 2>&1", mine,
		 theirs);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(o, 1, sizeof(o) - 1, p);
	o[n] = '\0';
	cr_assert_eq(pclose(p), 0, "systemd-analyze verify: %s", o);
	cr_assert(!strstr(o, "cofferd-load-key.service:"), "warnings about the unit: %s", o);
	/* what the unit is, as the issue asks */
	snprintf(cmd, sizeof(cmd),
		 "grep -qx 'Type=oneshot' '%1$s' && grep -qx 'RemainAfterExit=yes' '%1$s' && "
		 "grep -qx 'After=cofferd.service' '%1$s' && grep -qx 'Requires=cofferd.service' "
		 "'%1$s' && grep -q '^ExecStart=.* load-key -a$' '%1$s' && "
		 "grep -q '^Environment=\"COFFER_ASKPASS=systemd-ask-password' '%1$s'",
		 unit);
	cr_assert_eq(system(cmd), 0, "the unit lacks a line it needs:\n%s", unit);
}

/* ---- load-key -a and -r ---- */

Test(keys_boot, load_key_a_after_a_restart_loads_file_roots_and_skips_prompt_roots)
{
	const char *pf = file_of("pass", PASS), *hf = file_of("hex", HEX);
	char in[4096];

	make_pool();
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/f1",
	       pf);
	COF_OK(NULL, "create -V 4M -o encryption=on -o keyformat=hex -o keylocation=file://%s "
		     "tank/f2",
	       hf);
	COF_OK(NULL, "create -V 4M tank/f1/child");
	COF_OK(pf, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=prompt tank/p");
	fill("tank/f1/child", 100000, in, sizeof(in));
	restart();
	KEYSTATUS_IS("tank/f1", "unavailable");
	/* no terminal, nothing on stdin: the file roots load, the prompt root is named */
	cr_assert_eq(cof(NULL, "load-key -a"), 1, "a skipped root must fail the run: %s", out);
	cr_assert(strstr(out, "2 / 3 key(s) successfully loaded"), "%s", out);
	cr_assert(strstr(out, "tank/p: keylocation=prompt and no terminal: skipped"), "%s", out);
	KEYSTATUS_IS("tank/f1", "available");
	KEYSTATUS_IS("tank/f1/child", "available");
	KEYSTATUS_IS("tank/f2", "available");
	KEYSTATUS_IS("tank/p", "unavailable");
	reads_back("tank/f1/child", in, 100000);
	/* the one left, from a pipe */
	COF_HAS("1 / 1 key(s) successfully loaded", "load-key -a < '%s'", pf);
	KEYSTATUS_IS("tank/p", "available");
	/* nothing left to load is no failure */
	COF_HAS("0 / 0 key(s) successfully loaded", "load-key -a");
	/* -L with many roots can only mean "ask for each" */
	REFUSED(1, "-L with -a or -r can only be 'prompt'", "load-key -a -L file://%s", pf);
}

/*
 * A wrong key among many: the run goes on, says which, and fails; and
 * unload-key -a has the same summary.
 */
Test(keys_boot, load_key_a_goes_on_past_a_root_that_fails)
{
	const char *pf = file_of("pass", PASS), *wrong = file_of("wrong", "not the passphrase\n");
	char cpass[4200];

	make_pool();
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/a",
	       pf);
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/b",
	       pf);
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/c",
	       pf);
	COF_HAS("3 / 3 key(s) successfully unloaded", "unload-key -a");
	/* tank/b's key file will hold another passphrase, tank/c's will be missing */
	COF_OK(NULL, "load-key tank/b");
	COF_OK(NULL, "change-key -o keylocation=file://%s tank/b", wrong);
	COF_OK(NULL, "unload-key tank/b");
	file_of("wrong", "a passphrase nobody set\n"); /* the file tank/b reads now lies */
	COF_OK(NULL, "load-key tank/c");
	snprintf(cpass, sizeof(cpass), "%s", file_of("cpass", PASS));
	COF_OK(NULL, "change-key -o keylocation=file://%s tank/c", cpass);
	COF_OK(NULL, "unload-key tank/c");
	cr_assert_eq(unlink(cpass), 0);
	cr_assert_eq(cof(NULL, "load-key -a"), 1, "%s", out);
	cr_assert(strstr(out, "1 / 3 key(s) successfully loaded"), "%s", out);
	cr_assert(strstr(out, "incorrect key"), "tank/b's wrong key is named: %s", out);
	cr_assert(strstr(out, "tank/c: keylocation file://"), "tank/c's missing file: %s", out);
	KEYSTATUS_IS("tank/a", "available");
	KEYSTATUS_IS("tank/b", "unavailable");
}

Test(keys_boot, load_and_unload_r_touch_only_the_subtree)
{
	const char *pf = file_of("pass", PASS), *hf = file_of("hex", HEX);

	make_pool();
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/a",
	       pf);
	COF_OK(NULL, "create -V 4M -o keyformat=hex -o keylocation=file://%s tank/a/b", hf);
	COF_OK(NULL, "create -V 4M tank/a/b/c");
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/ab",
	       pf);
	cr_assert_str_eq(prop("tank/a/b/c", "encryptionroot"), "tank/a/b");
	COF_HAS("2 / 2 key(s) successfully unloaded", "unload-key -r tank/a");
	KEYSTATUS_IS("tank/a", "unavailable");
	KEYSTATUS_IS("tank/a/b", "unavailable");
	KEYSTATUS_IS("tank/a/b/c", "unavailable");
	KEYSTATUS_IS("tank/ab", "available"); /* a name that starts alike is no child */
	COF_HAS("1 / 1 key(s) successfully loaded", "load-key -r tank/a/b");
	KEYSTATUS_IS("tank/a/b/c", "available");
	KEYSTATUS_IS("tank/a", "unavailable");
	COF_HAS("1 / 1 key(s) successfully loaded", "load-key -r tank/a");
	KEYSTATUS_IS("tank/a", "available");
	/* -r of a root inside another: its own subtree only */
	COF_HAS("1 / 1 key(s) successfully unloaded", "unload-key -r tank/a/b");
	KEYSTATUS_IS("tank/a", "available");
	KEYSTATUS_IS("tank/a/b/c", "unavailable");
	COF_HAS("1 / 1 key(s) successfully verified", "load-key -n -r tank/a/b");
	KEYSTATUS_IS("tank/a/b", "unavailable");
	REFUSED(1, "tank/nope: dataset does not exist", "load-key -r tank/nope");
	REFUSED(2, "usage:", "load-key -r");
}

/* ---- a password agent ---- */

static const char *agent(const char *answer)
{
	static char path[4096], body[8192];

	snprintf(body, sizeof(body),
		 "#!/bin/sh\nprintf '%%s\\n' \"$1\" >> '%s/prompts'\nprintf '%s'\n", td.dir,
		 answer);
	snprintf(path, sizeof(path), "%s", file_of("agent", body));
	cr_assert_eq(chmod(path, 0755), 0);
	return path;
}

static const char *prompts(void)
{
	static char p[4096];
	char path[4200];
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "%s/prompts", td.dir);
	f = fopen(path, "r");
	cr_assert_not_null(f, "the agent was never asked");
	n = fread(p, 1, sizeof(p) - 1, f);
	p[n] = '\0';
	fclose(f);
	unlink(path);
	return p;
}

Test(keys_boot, prompt_roots_ask_the_password_agent_and_change_key_asks_for_a_new_one)
{
	const char *pf = file_of("pass", PASS);
	char env[8192];

	make_pool();
	COF_OK(pf, "create -V 4M " ENC " -o keyformat=passphrase tank/p");
	COF_OK(NULL, "unload-key tank/p");
	snprintf(env, sizeof(env), "COFFER_ASKPASS='%s'", agent("correct horse battery staple\\n"));
	cr_assert_eq(cofp(env, NULL, "load-key -a"), 0, "%s", out);
	cr_assert(strstr(out, "1 / 1 key(s) successfully loaded"), "%s", out);
	cr_assert_str_eq(prompts(), "Enter passphrase for 'tank/p': \n");
	/* change-key: a new passphrase, asked for twice, in those words */
	snprintf(env, sizeof(env), "COFFER_ASKPASS='%s'", agent("a brand new passphrase\\n"));
	cr_assert_eq(cofp(env, NULL, "change-key tank/p"), 0, "%s", out);
	cr_assert_str_eq(prompts(), "Enter new passphrase for 'tank/p': \n"
				    "Re-enter new passphrase for 'tank/p': \n");
	COF_OK(NULL, "unload-key tank/p");
	cr_assert_eq(cof(pf, "load-key tank/p"), 1, "the old passphrase still opens: %s", out);
	cr_assert_eq(cofp(env, NULL, "load-key tank/p"), 0, "%s", out);
	/* an agent that gives up is a failure of that root, in words */
	COF_OK(NULL, "unload-key tank/p");
	cr_assert_eq(cofp("COFFER_ASKPASS=false", NULL, "load-key -a"), 1, "%s", out);
	cr_assert(strstr(out, "password agent 'false' gave no key"), "%s", out);
	cr_assert(strstr(out, "0 / 1 key(s)"), "%s", out);
}

/* At boot an unanswered prompt must not hold the roots that need nobody: they load first. */
Test(keys_boot, load_key_a_loads_the_roots_that_need_nobody_before_it_asks)
{
	const char *pf = file_of("pass", PASS);
	char body[8192], path[4096], env[8192];

	make_pool();
	COF_OK(pf, "create -V 4M " ENC " -o keyformat=passphrase tank/a");
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/b",
	       pf);
	COF_HAS("2 / 2 key(s) successfully unloaded", "unload-key -a");
	/* the agent notes what tank/b's key is when it is asked for tank/a's */
	snprintf(body, sizeof(body),
		 "#!/bin/sh\n'%s' -S '%s' get -H -o value keystatus tank/b >> '%s/prompts'\n"
		 "printf '" PASS "'\n",
		 getenv("COFFER"), td.sock, td.dir);
	snprintf(path, sizeof(path), "%s", file_of("agent", body));
	cr_assert_eq(chmod(path, 0755), 0);
	snprintf(env, sizeof(env), "COFFER_ASKPASS='%s'", path);
	cr_assert_eq(cofp(env, NULL, "load-key -a"), 0, "%s", out);
	cr_assert(strstr(out, "2 / 2 key(s) successfully loaded"), "%s", out);
	cr_assert_str_eq(prompts(), "available\n", "tank/a was asked for before tank/b loaded");
}

/* ---- change-key -i and -l ---- */

Test(keys_boot, change_key_i_joins_the_parent_root_and_the_child_loads_with_its_key)
{
	const char *pf = file_of("pass", PASS), *hf = file_of("hex", HEX);
	char in[4096];

	make_pool();
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/p",
	       pf);
	COF_OK(NULL, "create -V 4M -o keyformat=hex -o keylocation=file://%s tank/p/c", hf);
	COF_OK(NULL, "create -V 4M tank/p/c/g");
	fill("tank/p/c/g", 150000, in, sizeof(in));
	cr_assert_str_eq(prop("tank/p/c", "encryptionroot"), "tank/p/c");
	COF_OK(NULL, "change-key -i tank/p/c");
	cr_assert_str_eq(prop("tank/p/c", "encryptionroot"), "tank/p");
	cr_assert_str_eq(prop("tank/p/c/g", "encryptionroot"), "tank/p");
	COF_OK(NULL, "get -H -o source keylocation tank/p/c");
	cr_assert(strstr(out, "inherited from tank/p"), "%s", out);
	/* after a restart, tank/p's passphrase opens the child and the grandchild */
	restart();
	REFUSED(1, "the key is its encryption root's; run 'coffer load-key tank/p'",
		"load-key tank/p/c");
	COF_OK(NULL, "load-key tank/p");
	KEYSTATUS_IS("tank/p/c", "available");
	KEYSTATUS_IS("tank/p/c/g", "available");
	reads_back("tank/p/c/g", in, 150000);
	COF_HAS("1 / 1 key(s) successfully unloaded", "unload-key -r tank/p");
	KEYSTATUS_IS("tank/p/c/g", "unavailable");
	COF_OK(NULL, "load-key tank/p");
	/* twice is refused: it is no root any more */
	REFUSED(1, "already uses the key of encryption root tank/p", "change-key -i tank/p/c");
}

Test(keys_boot, change_key_i_is_refused_without_an_encrypted_parent_or_its_loaded_key)
{
	const char *pf = file_of("pass", PASS), *hf = file_of("hex", HEX);

	make_pool();
	COF_OK(NULL, "create -V 4M tank/clear");
	COF_OK(NULL, "create -V 4M -o keyformat=hex -o keylocation=file://%s tank/clear/e", hf);
	REFUSED(1, "cannot inherit a key: the parent tank/clear is not encrypted",
		"change-key -i tank/clear/e");
	cr_assert_str_eq(prop("tank/clear/e", "encryptionroot"), "tank/clear/e");
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/p",
	       pf);
	COF_OK(NULL, "create -V 4M -o keyformat=hex -o keylocation=file://%s tank/p/d", hf);
	COF_OK(NULL, "unload-key tank/p");
	REFUSED(1, "the key of encryption root tank/p is not loaded", "change-key -i tank/p/d");
	cr_assert_str_eq(prop("tank/p/d", "encryptionroot"), "tank/p/d");
	REFUSED(1, "change-key -i takes no -o", "change-key -i -o keyformat=raw tank/p/d");
	/* -l loads what is missing first: here the parent's root */
	COF_OK(NULL, "change-key -l -i tank/p/d");
	cr_assert_str_eq(prop("tank/p/d", "encryptionroot"), "tank/p");
	KEYSTATUS_IS("tank/p", "available");
}

Test(keys_boot, change_key_l_loads_the_key_before_changing_it)
{
	const char *pf = file_of("pass", PASS), *nf = file_of("new", "a brand new passphrase\n");
	char want[4200];

	make_pool();
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/e",
	       pf);
	COF_OK(NULL, "unload-key tank/e");
	/* refused before any new key is read, saying how */
	REFUSED(1, "give change-key -l", "change-key -o keylocation=file://%s tank/e", nf);
	snprintf(want, sizeof(want), "file://%s", pf);
	cr_assert_str_eq(prop("tank/e", "keylocation"), want);
	COF_OK(NULL, "change-key -l -o keylocation=file://%s tank/e", nf);
	KEYSTATUS_IS("tank/e", "available");
	COF_OK(NULL, "unload-key tank/e");
	REFUSED(1, "incorrect key", "load-key -L file://%s tank/e", pf);
	COF_OK(NULL, "load-key tank/e");
	/* -l of a loaded key loads nothing more */
	COF_OK(NULL, "change-key -l -o keylocation=file://%s tank/e", pf);
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "load-key tank/e");
}

/* ---- keylocation=https:// ---- */

#define NEED(prog, pkg)                                                                  \
	do {                                                                             \
		if (!have(prog))                                                         \
			tdaemon_skip(&td, "%s is not installed (Debian package %s; "     \
					  "contrib/deps.sh --test installs it)", prog, pkg); \
	} while (0)

/*
 * The key server: https on one port, plain http on another, serving DIR/www;
 * /to-http redirects the https client to the plain port. The ports are
 * written aside and renamed into place, so the test never reads half a file.
 */
static const char server_py[] =
	"import functools, http.server, os, ssl, sys, threading\n"
	"d = os.environ['DIR']\n"
	"class H(http.server.SimpleHTTPRequestHandler):\n"
	"    def log_message(self, *a): pass\n"
	"    def do_GET(self):\n"
	"        if self.path == '/to-http':\n"
	"            self.send_response(302)\n"
	"            self.send_header('Location', 'http://127.0.0.1:%d/key' % plain.server_address[1])\n"
	"            self.end_headers()\n"
	"            return\n"
	"        return super().do_GET()\n"
	"h = functools.partial(H, directory=d + '/www')\n"
	"tls = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n"
	"ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
	"ctx.load_cert_chain(d + '/pki/server-cert.pem', d + '/pki/server-key.pem')\n"
	"tls.socket = ctx.wrap_socket(tls.socket, server_side=True)\n"
	"plain = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n"
	"for s in (tls, plain):\n"
	"    threading.Thread(target=s.serve_forever, daemon=True).start()\n"
	"open(d + '/ports.tmp', 'w').write('%d %d' % (tls.server_address[1], plain.server_address[1]))\n"
	"os.rename(d + '/ports.tmp', d + '/ports')\n"
	"sys.stdin.read()\n";

static FILE *server;
static unsigned https_port, http_port;

/* A CA, a server certificate for 127.0.0.1 it signs, another CA; the key files; the server. */
static void key_server(void)
{
	char cmd[16384], ports[4200];
	const char *script;
	double end;
	FILE *f;

	NEED("openssl", "openssl");
	NEED("python3", "python3");
	snprintf(cmd, sizeof(cmd),
		 "set -e; cd '%s'; mkdir -p pki www; cd pki\n"
		 "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1 "
		 "2>/dev/null; }\n"
		 "ca() { key $1-key.pem; openssl req -x509 -new -key $1-key.pem -subj /CN=$1 "
		 "-days 2 -out $1-cert.pem; }\n"
		 "ca ca; ca other\n"
		 "key server-key.pem\n"
		 "openssl req -new -key server-key.pem -subj /CN=127.0.0.1 "
		 "-addext subjectAltName=IP:127.0.0.1 -out server.csr\n"
		 "openssl x509 -req -in server.csr -CA ca-cert.pem -CAkey ca-key.pem "
		 "-CAcreateserial -days 2 -copy_extensions copy -out server-cert.pem 2>/dev/null\n"
		 "cd ../www; printf '" "correct horse battery staple\\n" "' > key\n"
		 "head -c 8192 /dev/zero | tr '\\0' a > big\n",
		 td.dir);
	cr_assert_eq(system(cmd), 0, "making the certificates failed");
	script = tdaemon_file(&td, "server.py", server_py, strlen(server_py));
	snprintf(cmd, sizeof(cmd), "DIR='%s' python3 '%s' >'%s/server.log' 2>&1", td.dir, script,
		 td.dir);
	server = popen(cmd, "w");
	cr_assert_not_null(server);
	snprintf(ports, sizeof(ports), "%s/ports", td.dir);
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (!(f = fopen(ports, "r")) && tdaemon_poll(end))
		;
	cr_assert_not_null(f, "the key server did not start (see %s/server.log)", td.dir);
	cr_assert_eq(fscanf(f, "%u %u", &https_port, &http_port), 2);
	fclose(f);
}

/* The daemon's config with key_https_ca = DIR/pki/@ca-cert.pem. */
static void conf_with_ca(const char *ca)
{
	tdaemon_write_conf(&td, NULL,
			   "socket_mode = 0666\nworkers = 2\ntxg_timeout = 1\n"
			   "key_https_ca = %s/pki/%s-cert.pem\n",
			   td.dir, ca);
}

static void restart_with_ca(const char *ca)
{
	cr_assert_eq(tdaemon_stop(&td), 0, "%s", tdaemon_log(&td));
	conf_with_ca(ca);
	tdaemon_start_ok(&td);
}

/* The client was built --without-curl: the refusal is all there is to see. */
static void skip_without_curl(void)
{
	if (strstr(out, "built without libcurl"))
		tdaemon_skip(&td, "coffer was built without libcurl");
}

Test(keys_boot, an_https_key_loads_with_the_ca_given_in_the_config)
{
	const char *pf = file_of("pass", PASS);
	char in[4096], url[256];
	int st;

	key_server();
	make_pool();
	restart_with_ca("ca");
	snprintf(url, sizeof(url), "https://127.0.0.1:%u/key", https_port);
	st = cof(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=%s tank/h",
		 url);
	skip_without_curl();
	cr_assert_eq(st, 0, "%s\ndaemon:\n%s", out, tdaemon_log(&td));
	cr_assert_str_eq(prop("tank/h", "keylocation"), url);
	COF_OK(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=file://%s tank/f",
	       pf);
	fill("tank/h", 100000, in, sizeof(in));
	/* a boot: both roots load without a terminal, the https one from its server */
	restart();
	COF_HAS("2 / 2 key(s) successfully loaded", "load-key -a");
	reads_back("tank/h", in, 100000);
	/* plain http is taken, as zfs takes it */
	COF_OK(NULL, "unload-key tank/h");
	COF_OK(NULL, "load-key -L http://127.0.0.1:%u/key tank/h", http_port);
	KEYSTATUS_IS("tank/h", "available");
	/* change-key reads a new key from the server too: to a file and back */
	COF_OK(NULL, "change-key -o keylocation=file://%s tank/h", pf);
	COF_OK(NULL, "change-key -o keylocation=%s tank/h", url);
	COF_OK(NULL, "unload-key tank/h");
	COF_OK(NULL, "load-key tank/h");
}

Test(keys_boot, https_keys_from_a_wrong_ca_an_oversized_body_or_no_server_are_refused)
{
	char url[256];
	int st, closed_port;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int s;

	key_server();
	make_pool();
	restart_with_ca("ca");
	snprintf(url, sizeof(url), "https://127.0.0.1:%u/key", https_port);
	st = cof(NULL, "create -V 4M " ENC " -o keyformat=passphrase -o keylocation=%s tank/h",
		 url);
	skip_without_curl();
	cr_assert_eq(st, 0, "%s", out);
	COF_OK(NULL, "unload-key tank/h");
	/* a body larger than any key */
	REFUSED(1, "sent more than 4096 bytes", "load-key -L https://127.0.0.1:%u/big tank/h",
		https_port);
	/* no such key on the server */
	REFUSED(1, "answered HTTP 404", "load-key -L https://127.0.0.1:%u/none tank/h", https_port);
	/* https never falls back to http, not even by a redirect */
	REFUSED(1, "tank/h: keylocation https://", "load-key -L https://127.0.0.1:%u/to-http tank/h",
		https_port);
	cr_assert(strstr(out, "disabled") || strstr(out, "not supported"), "%s", out);
	/* nothing listens: a port bound and closed again */
	s = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(s, 0);
	cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &alen), 0);
	closed_port = ntohs(a.sin_port);
	close(s);
	REFUSED(1, "onnect", "load-key -L https://127.0.0.1:%d/key tank/h", closed_port);
	cr_assert(strstr(out, "tank/h: keylocation https://127.0.0.1:"), "%s", out);
	KEYSTATUS_IS("tank/h", "unavailable");
	/* another CA in the config: the server's certificate is not trusted */
	restart_with_ca("other");
	REFUSED(1, "certificate", "load-key tank/h");
	cr_assert_eq(cof(NULL, "load-key -a"), 1, "%s", out);
	cr_assert(strstr(out, "0 / 1 key(s) successfully loaded"), "%s", out);
	KEYSTATUS_IS("tank/h", "unavailable");
	/* a CA file the daemon cannot read stops it at start, saying which */
	cr_assert_eq(tdaemon_stop(&td), 0);
	tdaemon_write_conf(&td, NULL, "key_https_ca = %s/pki/missing.pem\n", td.dir);
	cr_assert_neq(tdaemon_start(&td), 0, "started with an unreadable key_https_ca");
	cr_assert(strstr(tdaemon_log(&td), "key_https_ca"), "%s", tdaemon_log(&td));
	/* with the right one it loads */
	conf_with_ca("ca");
	tdaemon_start_ok(&td);
	COF_OK(NULL, "load-key tank/h");
}
