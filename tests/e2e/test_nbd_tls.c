// SPDX-License-Identifier: MIT
/*
 * E2E: the NBD export over TCP, where TLS is required (nbd_listen), driven
 * by libnbd's clients (nbdinfo, nbdcopy; Debian package libnbd-bin) with a
 * PSK file or with certificates this test makes with openssl(1), and by a
 * raw peer for what no well-behaved client sends. The peer of a TLS
 * session is the local user its PSK identity or its certificate's CN names:
 * root is an admin, nobody an owner of what it owns, a name that is no
 * local user is refused like a wrong key. Peers not yet named have a
 * bounded pool of their own: a flood of idle ones from one address turns
 * away neither a client that completes its handshake nor a local user.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"
#include "nbd_proto.h"
#include "nbdraw.h"
#include "proto.h"

static struct tdaemon td;
static char out[1 << 16];
static char psk_file[PATH_MAX];   /* the daemon's: root, nobody and a name no user has */
static char wrong_psk[PATH_MAX];  /* root with another key */
#define GHOST "coffer-no-such-user"

#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* Run @fmt through /bin/sh, stdout and stderr into out. @return the exit status */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
	char cmd[16384];
	va_list ap;
	FILE *p;
	size_t n = 0;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd) - 8, fmt, ap);
	va_end(ap);
	strcat(cmd, " 2>&1");
	p = popen(cmd, "r");
	cr_assert_not_null(p, "popen %s", cmd);
	while (n + 1 < sizeof(out)) {
		size_t r = fread(out + n, 1, sizeof(out) - 1 - n, p);

		if (r == 0)
			break;
		n += r;
	}
	out[n] = '\0';
	while (fgetc(p) != EOF)
		;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define SH_OK(...)                                                                       \
	do {                                                                             \
		int st_ = sh(__VA_ARGS__);                                               \
		cr_assert_eq(st_, 0, "exit %d: %s\ndaemon:\n%s", st_, out, tdaemon_log(&td)); \
	} while (0)

static int have(const char *prog)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
	return system(cmd) == 0;
}

#define NEED(prog, pkg)                                                                  \
	do {                                                                             \
		if (!have(prog))                                                         \
			tdaemon_skip(&td, "%s is not installed (Debian package %s; "     \
					  "contrib/deps.sh --test installs it)", prog, pkg); \
	} while (0)

/* The options every daemon of this file has; TLS's come after them. */
#define BASE_CONF                                                                        \
	"socket_mode = 0666\nlog_level = debug\nworkers = 2\ntxg_timeout = 1\n"         \
	"hello_timeout = 5\nmax_connections_per_uid = 24\nnbd_listen = 127.0.0.1:0\n"

static void hexkey(char *buf)
{
	FILE *f = fopen("/dev/urandom", "r");
	unsigned char k[32];

	cr_assert_not_null(f);
	cr_assert_eq(fread(k, 1, sizeof(k), f), sizeof(k));
	fclose(f);
	for (size_t i = 0; i < sizeof(k); i++)
		sprintf(buf + 2 * i, "%02x", k[i]);
}

static void write_private(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f, "%s: %s", path, strerror(errno));
	fputs(text, f);
	fclose(f);
	cr_assert_eq(chmod(path, 0600), 0);
}

static void setup(void)
{
	char root[65], nobody[65], ghost[65], other[65], text[512];

	tdaemon_init(&td, NULL);
	hexkey(root);
	hexkey(nobody);
	hexkey(ghost);
	hexkey(other);
	snprintf(psk_file, sizeof(psk_file), "%.1000s/keys.psk", td.dir);
	snprintf(text, sizeof(text), "# psktool's format\nroot:%s\nnobody:%s\n" GHOST ":%s\n", root,
		 nobody, ghost);
	write_private(psk_file, text);
	snprintf(wrong_psk, sizeof(wrong_psk), "%.1000s/wrong.psk", td.dir);
	snprintf(text, sizeof(text), "root:%s\n", other);
	write_private(wrong_psk, text);
	tdaemon_write_conf(&td, NULL, BASE_CONF "nbd_tls_psk = %s\n", psk_file);
	tdaemon_start_ok(&td);
}

static void teardown(void)
{
	tdaemon_teardown(&td);
}

TestSuite(nbd_tls, .init = setup, .fini = teardown, .timeout = 240);

/* The port the daemon bound last (port 0 in the config): its log says. */
static unsigned tls_port(void)
{
	FILE *f = fopen(td.log, "r");
	char line[1024];
	unsigned port = 0;

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, "NBD over TLS on 127.0.0.1:0 (port ");

		if (p)
			port = (unsigned)strtoul(p + strlen("NBD over TLS on 127.0.0.1:0 (port "), NULL,
						 10);
	}
	fclose(f);
	cr_assert_gt(port, 0, "no port in the log:\n%s", tdaemon_log(&td));
	return port;
}

/* Does the daemon's log say @what, or @or (NULL: no other), within the test's wait? */
static int log_says_either(const char *what, const char *or)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);
	char line[2048];

	do {
		FILE *f = fopen(td.log, "r");
		int found = 0;

		cr_assert_not_null(f);
		while (!found && fgets(line, sizeof(line), f))
			found = strstr(line, what) || (or && strstr(line, or));
		fclose(f);
		if (found)
			return 1;
	} while (tdaemon_poll(end));
	return 0;
}

static int log_says(const char *what)
{
	return log_says_either(what, NULL);
}

/* nbds:// with a PSK: @user's key from @keys. */
static const char *psk_uri(const char *user, const char *ds, const char *keys)
{
	static char u[2][PATH_MAX + 400];
	static int n;

	n ^= 1;
	snprintf(u[n], sizeof(u[n]), "nbds://%s@127.0.0.1:%u/%s?tls-psk-file=%s", user, tls_port(),
		 ds, keys);
	return u[n];
}

static void make_pool(void)
{
	COF_OK(NULL, "pool create -s 160M tank %s/l0 %s/l1", td.dir, td.dir);
}

static void daemon_alive(void)
{
	COF_OK(NULL, "version");
	cr_assert_eq(kill(td.pid, 0), 0, "cofferd is gone");
}

static int files_equal(const char *a, const char *b)
{
	char cmd[2 * PATH_MAX + 32];

	snprintf(cmd, sizeof(cmd), "cmp '%s' '%s'", a, b);
	return system(cmd) == 0;
}

/* ---- PSK ---- */

Test(nbd_tls, data_through_tls_with_a_psk_is_identical)
{
	char in[PATH_MAX], back[PATH_MAX], viacoffer[PATH_MAX];
	const char *pass = "tls test passphrase\n";

	NEED("nbdcopy", "libnbd-bin");
	NEED("nbdinfo", "libnbd-bin");
	make_pool();
	COF_OK(NULL,
	       "create -V 16M -o encryption=aes-256-gcm -o keyformat=passphrase "
	       "-o keylocation=file://%s -o pbkdf2iters=100000 tank/enc",
	       tdaemon_file(&td, "pass", pass, strlen(pass)));
	SH_OK("nbdinfo '%s'", psk_uri("root", "tank/enc", psk_file));
	cr_assert(strstr(out, "with TLS"), "%s", out);
	cr_assert(strstr(out, "export-size: 16777216"), "%s", out);
	tdaemon_random_file(&td, "in", 16u << 20, in, sizeof(in));
	snprintf(back, sizeof(back), "%s/back", td.dir);
	snprintf(viacoffer, sizeof(viacoffer), "%s/viacoffer", td.dir);
	SH_OK("nbdcopy '%s' '%s'", in, psk_uri("root", "tank/enc", psk_file));
	SH_OK("nbdcopy '%s' '%s'", psk_uri("root", "tank/enc", psk_file), back);
	cr_assert(files_equal(in, back), "what came back through TLS differs");
	cr_assert_eq(tdaemon_cofferf(&td, NULL, out, sizeof(out), "read -l 16M tank/enc > '%s'",
				     viacoffer),
		     0, "%s", out);
	cr_assert(files_equal(in, viacoffer), "coffer read differs from what came through TLS");
	cr_assert(log_says("TLS peer is user root (uid 0), admin"), "%s", tdaemon_log(&td));
}

Test(nbd_tls, a_plaintext_client_is_refused)
{
	uint8_t d[512];
	uint32_t len;
	int fd;

	NEED("nbdinfo", "libnbd-bin");
	make_pool();
	COF_OK(NULL, "create -V 1M tank/vm");
	cr_assert_neq(sh("nbdinfo 'nbd://127.0.0.1:%u/tank/vm'", tls_port()), 0, "%s", out);
	cr_assert_neq(sh("nbdinfo --list 'nbd://127.0.0.1:%u/'", tls_port()), 0, "%s", out);
	cr_assert(!strstr(out, "tank/vm"), "a plaintext peer learnt an export: %s", out);
	/* every option before STARTTLS, in the spec's words for a TLS-only server */
	fd = raw_connect_tcp(tls_port());
	greeting(fd);
	send_flags(fd);
	wire_put_u32(d, 7);
	memcpy(d + 4, "tank/vm", 7);
	wire_put_u16(d + 11, 0);
	send_opt(fd, NBD_OPT_GO, d, 13);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_GO, d, sizeof(d), &len), NBD_REP_ERR_TLS_REQD);
	cr_assert(len > 0 && memmem(d, len < sizeof(d) ? len : sizeof(d), "TLS is required", 15),
		  "%.*s", (int)len, (char *)d);
	send_opt(fd, NBD_OPT_LIST, NULL, 0);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_LIST, d, sizeof(d), &len), NBD_REP_ERR_TLS_REQD);
	send_opt(fd, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_STRUCTURED_REPLY, d, sizeof(d), &len),
		     NBD_REP_ERR_TLS_REQD);
	send_opt(fd, 77, NULL, 0);
	cr_assert_eq(read_opt_reply(fd, 77, d, sizeof(d), &len), NBD_REP_ERR_TLS_REQD);
	send_opt(fd, NBD_OPT_ABORT, NULL, 0);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_ABORT, d, sizeof(d), &len), NBD_REP_ACK);
	expect_closed(fd);
	/* EXPORT_NAME has no error reply: it is closed */
	fd = raw_connect_tcp(tls_port());
	greeting(fd);
	send_flags(fd);
	send_opt(fd, NBD_OPT_EXPORT_NAME, "tank/vm", 7);
	expect_closed(fd);
	daemon_alive();
}

Test(nbd_tls, a_wrong_psk_is_refused)
{
	char keys[PATH_MAX], key[65], text[128];

	NEED("nbdinfo", "libnbd-bin");
	make_pool();
	COF_OK(NULL, "create -V 1M tank/vm");
	cr_assert_neq(sh("nbdinfo '%s'", psk_uri("root", "tank/vm", wrong_psk)), 0, "%s", out);
	cr_assert(strstr(out, "TLS") || strstr(out, "tls"), "%s", out);
	cr_assert(!strstr(out, "export-size"), "%s", out);
	/* an identity the daemon's file does not have */
	snprintf(keys, sizeof(keys), "%s/daemon.psk", td.dir);
	hexkey(key);
	snprintf(text, sizeof(text), "daemon:%s\n", key);
	write_private(keys, text);
	cr_assert_neq(sh("nbdinfo '%s'", psk_uri("daemon", "tank/vm", keys)), 0, "%s", out);
	cr_assert(log_says("PSK identity 'daemon' is not in nbd_tls_psk"), "%s", tdaemon_log(&td));
	daemon_alive();
	SH_OK("nbdinfo --size '%s'", psk_uri("root", "tank/vm", psk_file));
	cr_assert(strstr(out, "1048576"), "%s", out);
}

Test(nbd_tls, an_identity_that_is_no_local_user_is_refused)
{
	NEED("nbdinfo", "libnbd-bin");
	cr_assert_null(getpwnam(GHOST), "this machine has a user " GHOST);
	make_pool();
	COF_OK(NULL, "create -V 1M tank/vm");
	/* its key is right: the name is what is refused */
	cr_assert_neq(sh("nbdinfo '%s'", psk_uri(GHOST, "tank/vm", psk_file)), 0, "%s", out);
	cr_assert(!strstr(out, "export-size"), "%s", out);
	cr_assert(log_says("PSK identity '" GHOST "' is not a local user"), "%s", tdaemon_log(&td));
	daemon_alive();
}

/* The PSK identity is the peer: nobody sees and opens only what it owns. */
Test(nbd_tls, a_psk_peer_has_its_local_users_rights)
{
	struct passwd *pw = getpwnam("nobody");
	const char *keys = psk_file;

	NEED("nbdinfo", "libnbd-bin");
	if (!pw)
		tdaemon_skip(&td, "needs a 'nobody' user");
	make_pool();
	COF_OK(NULL, "create -V 1M tank/theirs");
	COF_OK(NULL, "create -V 2M tank/mine");
	COF_OK(NULL, "set owner=%u tank/mine", (unsigned)pw->pw_uid);
	SH_OK("nbdinfo --list '%s'", psk_uri("nobody", "", keys));
	cr_assert(strstr(out, "tank/mine"), "%s", out);
	cr_assert(!strstr(out, "tank/theirs"), "nobody sees a dataset it may not open:\n%s", out);
	cr_assert_neq(sh("LIBNBD_DEBUG=1 nbdinfo '%s'", psk_uri("nobody", "tank/theirs", keys)), 0);
	cr_assert(strstr(out, "server error message: tank/theirs: permission denied"), "%s", out);
	SH_OK("nbdinfo --size '%s'", psk_uri("nobody", "tank/mine", keys));
	cr_assert(strstr(out, "2097152"), "%s", out);
	cr_assert(log_says("TLS peer is user nobody"), "%s", tdaemon_log(&td));
	/* and root, an admin, sees both */
	SH_OK("nbdinfo --list '%s'", psk_uri("root", "", keys));
	cr_assert(strstr(out, "tank/mine") && strstr(out, "tank/theirs"), "%s", out);
}

/* ---- certificates ---- */

/*
 * A CA, the server's certificate (for 127.0.0.1) and client certificates:
 * root and GHOST from the CA; "root" from another CA whose name is the
 * same, so the client sends it and the server's check is what refuses it.
 * libnbd's tls-certificates=DIR wants ca-cert.pem, client-cert.pem and
 * client-key.pem in DIR.
 */
static void make_certs(void)
{
	SH_OK("set -e; cd '%s'; mkdir -p pki other; cd pki\n"
	      "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out $1; }\n"
	      "ca() { key $1-key.pem; openssl req -x509 -new -key $1-key.pem -subj /CN=coffer-test-ca "
	      "-days 2 -out $1-cert.pem; }\n"
	      "leaf() { key $1-key.pem; openssl req -new -key $1-key.pem -subj /CN=$2 "
	      "-addext subjectAltName=IP:127.0.0.1 -out $1.csr; "
	      "openssl x509 -req -in $1.csr -CA $3-cert.pem -CAkey $3-key.pem -CAcreateserial "
	      "-days 2 -copy_extensions copy -out $1-cert.pem; chmod 600 $1-key.pem; }\n"
	      "ca ca; ca other; leaf server 127.0.0.1 ca; leaf root root ca; "
	      "leaf ghost " GHOST " ca; leaf impostor root other\n"
	      "for c in root ghost impostor; do mkdir -p ../$c; cp ca-cert.pem ../$c/; "
	      "cp $c-cert.pem ../$c/client-cert.pem; cp $c-key.pem ../$c/client-key.pem; done",
	      td.dir);
}

static void restart_with_certs(void)
{
	make_certs();
	cr_assert_eq(tdaemon_stop(&td), 0);
	tdaemon_write_conf(&td, NULL,
			   BASE_CONF "nbd_tls_cert = %s/pki/server-cert.pem\n"
				     "nbd_tls_key = %s/pki/server-key.pem\n"
				     "nbd_tls_ca = %s/pki/ca-cert.pem\n",
			   td.dir, td.dir, td.dir);
	tdaemon_start_ok(&td);
}

static const char *cert_uri(const char *who, const char *ds)
{
	static char u[PATH_MAX + 300];

	snprintf(u, sizeof(u), "nbds://127.0.0.1:%u/%s?tls-certificates=%s/%s", tls_port(), ds,
		 td.dir, who);
	return u;
}

Test(nbd_tls, client_certificates_of_the_ca_are_served_others_refused)
{
	char in[PATH_MAX], back[PATH_MAX];

	NEED("nbdcopy", "libnbd-bin");
	NEED("nbdinfo", "libnbd-bin");
	NEED("openssl", "openssl");
	make_pool();
	COF_OK(NULL, "create -V 4M tank/vm");
	restart_with_certs();
	tdaemon_random_file(&td, "in", 4u << 20, in, sizeof(in));
	snprintf(back, sizeof(back), "%s/back", td.dir);
	SH_OK("nbdcopy '%s' '%s' && nbdcopy '%s' '%s'", in, cert_uri("root", "tank/vm"),
	      cert_uri("root", "tank/vm"), back);
	cr_assert(files_equal(in, back), "what came back through TLS differs");
	cr_assert(log_says("TLS peer is user root (uid 0), admin"), "%s", tdaemon_log(&td));
	/* a certificate another CA signed, under the same CA name */
	cr_assert_neq(sh("nbdinfo '%s'", cert_uri("impostor", "tank/vm")), 0, "%s", out);
	cr_assert(!strstr(out, "export-size"), "%s", out);
	/* OpenSSL finds no issuer whose key matches, or a signature that does not verify */
	cr_assert(log_says_either("client certificate: unable to get local issuer",
				  "client certificate: certificate signature failure"),
		  "%s", tdaemon_log(&td));
	/* the CA's, for a name that is no local user */
	cr_assert_neq(sh("nbdinfo '%s'", cert_uri("ghost", "tank/vm")), 0, "%s", out);
	cr_assert(log_says("client certificate CN '" GHOST "' is not a local user"), "%s",
		  tdaemon_log(&td));
	/* a PSK client gets no session from a server of certificates */
	cr_assert_neq(sh("nbdinfo '%s'", psk_uri("root", "tank/vm", psk_file)), 0, "%s", out);
	daemon_alive();
}

/* ---- hostile peers over TCP ---- */

Test(nbd_tls, hostile_handshakes_over_tcp_close_only_themselves)
{
	uint8_t junk[NBD_OPT_HDR], d[512], two[2 * NBD_OPT_HDR];
	uint32_t len;
	int fd;

	NEED("nbdinfo", "libnbd-bin");
	make_pool();
	COF_OK(NULL, "create -V 1M tank/h");
	/* gone at once; in the middle of the flags; of an option header */
	close(raw_connect_tcp(tls_port()));
	fd = raw_connect_tcp(tls_port());
	greeting(fd);
	write_full(fd, "\0\0", 2);
	close(fd);
	fd = raw_connect_tcp(tls_port());
	greeting(fd);
	send_flags(fd);
	write_full(fd, "IHAVEOPT\0\0", 10);
	close(fd);
	/* an option without its magic; an oversized one, refused before it is read */
	fd = raw_connect_tcp(tls_port());
	greeting(fd);
	send_flags(fd);
	memset(junk, 'x', sizeof(junk));
	write_full(fd, junk, sizeof(junk));
	expect_closed(fd);
	fd = raw_connect_tcp(tls_port());
	greeting(fd);
	send_flags(fd);
	wire_put_u64(junk, NBD_IHAVEOPT);
	wire_put_u32(junk + 8, NBD_OPT_STARTTLS);
	wire_put_u32(junk + 12, 0x7fffffffu);
	write_full(fd, junk, sizeof(junk));
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_STARTTLS, d, sizeof(d), &len), NBD_REP_ERR_TOO_BIG);
	expect_closed(fd);
	/* STARTTLS with data is refused, and the connection goes on */
	fd = raw_connect_tcp(tls_port());
	greeting(fd);
	send_flags(fd);
	send_opt(fd, NBD_OPT_STARTTLS, "x", 1);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_STARTTLS, d, sizeof(d), &len), NBD_REP_ERR_INVALID);
	/* plaintext sent behind STARTTLS, before its answer: injected, so closed unanswered */
	wire_put_u64(two, NBD_IHAVEOPT);
	wire_put_u32(two + 8, NBD_OPT_STARTTLS);
	wire_put_u32(two + 12, 0);
	wire_put_u64(two + 16, NBD_IHAVEOPT);
	wire_put_u32(two + 24, NBD_OPT_STRUCTURED_REPLY);
	wire_put_u32(two + 28, 0);
	write_full(fd, two, sizeof(two));
	cr_assert_eq(read_full(fd, d, 1), -1, "STARTTLS with bytes behind it was answered");
	close(fd);
	cr_assert(log_says("bytes after STARTTLS, before the TLS handshake: closed"), "%s",
		  tdaemon_log(&td));
	/* junk where the ClientHello belongs */
	fd = raw_connect_tcp(tls_port());
	greeting(fd);
	send_flags(fd);
	send_opt(fd, NBD_OPT_STARTTLS, NULL, 0);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_STARTTLS, d, sizeof(d), &len), NBD_REP_ACK);
	memset(d, 'x', 300);
	write_full(fd, d, 300);
	expect_closed(fd);
	/* a handshake begun, never finished: closed at hello_timeout (5 s here) */
	fd = raw_connect_tcp(tls_port());
	greeting(fd);
	send_flags(fd);
	send_opt(fd, NBD_OPT_STARTTLS, NULL, 0);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_STARTTLS, d, sizeof(d), &len), NBD_REP_ACK);
	expect_closed(fd);
	daemon_alive();
	SH_OK("nbdinfo --size '%s'", psk_uri("root", "tank/h", psk_file));
	cr_assert(strstr(out, "1048576"), "%s", out);
}

/* ---- peers nobody has named yet ---- */

/* A config for the tests of this part: the suite's, without its per-uid limit, and @extra. */
static void restart_with(const char *extra)
{
	cr_assert_eq(tdaemon_stop(&td), 0);
	tdaemon_write_conf(&td, NULL,
			   "socket_mode = 0666\nlog_level = debug\nworkers = 2\ntxg_timeout = 1\n"
			   "nbd_listen = 127.0.0.1:0\nnbd_tls_psk = %s\n%s",
			   psk_file, extra);
	tdaemon_start_ok(&td);
}

/* Room for @n more descriptors in this process (and the daemon it starts next), or skip. */
static void need_fds(unsigned n)
{
	struct rlimit rl;
	rlim_t want = n + 256;

	cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
		if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want)
			tdaemon_skip(&td, "RLIMIT_NOFILE's hard limit %llu is below the %llu "
					  "descriptors this test holds",
				     (unsigned long long)rl.rlim_max, (unsigned long long)want);
		rl.rlim_cur = want;
		cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "%s", strerror(errno));
	}
}

/* A TCP connection to the NBD port from the loopback address @src (127.0.0.x). */
static int connect_from(const char *src)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)tls_port()),
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct sockaddr_in me = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	cr_assert_geq(fd, 0);
	cr_assert_eq(inet_pton(AF_INET, src, &me.sin_addr), 1);
	cr_assert_eq(bind(fd, (struct sockaddr *)&me, sizeof(me)), 0, "bind %s: %s", src,
		     strerror(errno));
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0, "connect: %s",
		     strerror(errno));
	return fd;
}

/*
 * Is @fd still open on the daemon's side? What it sent (the greeting) is
 * read and dropped; EOF or a reset means closed.
 */
static int still_open(int fd)
{
	char buf[512];

	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

		if (r > 0)
			continue;
		return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Under @limits: 300 idle TCP connections from 127.0.0.1, the attack of a
 * peer nobody knows (more than max_connections_per_uid's 256). Meanwhile a
 * PSK client completes its handshake and reads back what it wrote, and a
 * local user who is no administrator is answered on the control socket.
 */
static void flood_serves_others(const char *limits)
{
	enum { FLOOD = 300 };
	const char *priv = "timeout 120 setpriv --reuid=nobody --regid=nogroup --clear-groups";
	char in[PATH_MAX], back[PATH_MAX];
	int fds[FLOOD], st;
	unsigned open_now = 0;
	double t0, took;

	NEED("nbdcopy", "libnbd-bin");
	NEED("setpriv", "util-linux");
	if (geteuid() != 0 || !getpwnam("nobody"))
		tdaemon_skip(&td, "needs root and a 'nobody' user");
	need_fds(FLOOD);
	restart_with(limits);
	make_pool();
	COF_OK(NULL, "create -V 1M tank/vm");
	tdaemon_random_file(&td, "in", 1 << 20, in, sizeof(in));
	snprintf(back, sizeof(back), "%s/back", td.dir);
	SH_OK("nbdcopy '%s' '%s'", in, psk_uri("root", "tank/vm", psk_file));

	for (unsigned i = 0; i < FLOOD; i++)
		fds[i] = raw_connect_tcp(tls_port());
	st = tdaemon_coffer(&td, priv, NULL, out, sizeof(out), "ping");
	cr_assert_eq(st, 0, "a local non-admin was turned away (exit %d): %s\ndaemon:\n%s", st, out,
		     tdaemon_log(&td));
	t0 = now_s();
	st = sh("timeout 120 nbdcopy '%s' '%s'", psk_uri("root", "tank/vm", psk_file), back);
	took = now_s() - t0;
	cr_log_info("a PSK client read 1 MiB in %.2f s with %u idle peers open", took, FLOOD);
	cr_assert_eq(st, 0, "the PSK client was turned away (exit %d): %s\ndaemon:\n%s", st, out,
		     tdaemon_log(&td));
	cr_assert(files_equal(in, back));
	/* the flood was there all along: its newest connections are still open */
	for (unsigned i = 0; i < FLOOD; i++)
		open_now += still_open(fds[i]);
	cr_log_info("%u of %u idle peers still open", open_now, FLOOD);
	cr_assert_geq(open_now, 200, "the flood was closed before the test ran");
	/* the bound: measured at about 0.5 s on a loaded 2-core machine */
	cr_assert_lt(took, 10.0, "the PSK client took %.2f s", took);
	for (unsigned i = 0; i < FLOOD; i++)
		close(fds[i]);
	daemon_alive();
}

/* The case: the default limits, one address, more idle peers than a uid may have. */
Test(nbd_tls, idle_tcp_peers_of_one_address_turn_no_client_away)
{
	flood_serves_others("hello_timeout = 300\ntls_handshake_timeout = 300\n");
}

/* A low max_connections: the flood takes none of the local users' slots. */
Test(nbd_tls, idle_tcp_peers_take_no_connection_slot_of_local_users)
{
	flood_serves_others("max_connections = 32\nhello_timeout = 300\n"
			    "tls_handshake_timeout = 300\n");
}

/*
 * Peers nobody has named have a pool of their own: at the cap of their
 * address the oldest of that address goes, when the pool is full the oldest
 * of all; a newcomer is always taken, and another address keeps its own.
 */
Test(nbd_tls, unauthenticated_peers_evict_their_oldest_not_others)
{
	int mine[8], third[2], other, fd;

	restart_with("hello_timeout = 300\ntls_handshake_timeout = 300\n"
		     "max_tls_handshakes = 10\nmax_tls_handshakes_per_address = 8\n");
	other = connect_from("127.0.0.2");
	greeting(other);
	for (unsigned i = 0; i < 8; i++) {
		mine[i] = connect_from("127.0.0.1");
		greeting(mine[i]);
	}
	/* the ninth of 127.0.0.1: its oldest goes, 127.0.0.2's stays */
	fd = connect_from("127.0.0.1");
	greeting(fd);
	expect_closed(mine[0]);
	mine[0] = fd;
	cr_assert(still_open(other), "another address's peer was evicted");
	cr_assert(log_says("unauthenticated TCP peers of 127.0.0.1 reached 8: the oldest is "
			   "closed"),
		  "%s", tdaemon_log(&td));
	/* 127.0.0.3 fills the pool (10), then comes again: the oldest of all, 127.0.0.2's, goes */
	third[0] = connect_from("127.0.0.3");
	greeting(third[0]);
	third[1] = connect_from("127.0.0.3");
	greeting(third[1]);
	expect_closed(other);
	for (unsigned i = 0; i < 8; i++)
		cr_assert(still_open(mine[i]), "peer %u of 127.0.0.1 was closed", i);
	cr_assert(still_open(third[0]) && still_open(third[1]));
	cr_assert(log_says("unauthenticated TCP peers reached 10: the oldest is closed"), "%s",
		  tdaemon_log(&td));
	/* the control socket is not theirs, and a client still gets in */
	daemon_alive();
	make_pool();
	COF_OK(NULL, "create -V 1M tank/vm");
	SH_OK("nbdinfo --size '%s'", psk_uri("root", "tank/vm", psk_file));
	cr_assert(strstr(out, "1048576"), "%s", out);
	close(third[0]);
	close(third[1]);
	for (unsigned i = 0; i < 8; i++)
		close(mine[i]);
}

/* A peer that never completes its TLS handshake is closed at tls_handshake_timeout. */
Test(nbd_tls, a_handshake_not_completed_in_time_is_closed)
{
	uint8_t d[64];
	uint32_t len;
	int idle, begun;

	restart_with("hello_timeout = 300\ntls_handshake_timeout = 2\n");
	/* silent; and STARTTLS without a ClientHello */
	idle = raw_connect_tcp(tls_port());
	greeting(idle);
	begun = raw_connect_tcp(tls_port());
	greeting(begun);
	send_flags(begun);
	send_opt(begun, NBD_OPT_STARTTLS, NULL, 0);
	cr_assert_eq(read_opt_reply(begun, NBD_OPT_STARTTLS, d, sizeof(d), &len), NBD_REP_ACK);
	expect_closed(idle);
	expect_closed(begun);
	cr_assert(log_says("no TLS handshake within 2 s: closed"), "%s", tdaemon_log(&td));
	daemon_alive();
}

/* `cofferd --check-config` on @conf_text: its exit status, its words in out. */
static int check_config(const char *conf_text)
{
	const char *bin = getenv("COFFERD") ? getenv("COFFERD") : "../../daemon/cofferd";
	const char *conf = tdaemon_file(&td, "check.conf", conf_text, strlen(conf_text));
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s", conf);
	return sh("'%s' --check-config -c '%s'", bin, path);
}

/* TLS that cannot be what it says is a configuration error, named, before anything starts. */
Test(nbd_tls, tls_settings_that_cannot_work_are_refused_at_start)
{
	char conf[4 * PATH_MAX], open_keys[PATH_MAX], bad_keys[PATH_MAX];

	snprintf(conf, sizeof(conf), "[cofferd]\nnbd_listen = 127.0.0.1:10809\n");
	cr_assert_eq(check_config(conf), 1, "%s", out);
	cr_assert(strstr(out, "TLS is required over TCP: set nbd_tls_psk"), "%s", out);
	/* keys others may read */
	snprintf(open_keys, sizeof(open_keys), "%s/open.psk", td.dir);
	write_private(open_keys, "root:00112233\n");
	cr_assert_eq(chmod(open_keys, 0644), 0);
	snprintf(conf, sizeof(conf), "[cofferd]\nnbd_listen = 127.0.0.1:10809\nnbd_tls_psk = %s\n",
		 open_keys);
	cr_assert_eq(check_config(conf), 1, "%s", out);
	cr_assert(strstr(out, "mode 0644 lets others read the key; chmod 600 it"), "%s", out);
	/* a line that is not psktool's */
	snprintf(bad_keys, sizeof(bad_keys), "%s/bad.psk", td.dir);
	write_private(bad_keys, "root:00112233\nalice 0011\n");
	snprintf(conf, sizeof(conf), "[cofferd]\nnbd_listen = 127.0.0.1:10809\nnbd_tls_psk = %s\n",
		 bad_keys);
	cr_assert_eq(check_config(conf), 1, "%s", out);
	cr_assert(strstr(out, "bad.psk:2: expected 'username:hexkey'"), "%s", out);
	/* a certificate without its CA; PSK and certificates at once */
	snprintf(conf, sizeof(conf),
		 "[cofferd]\nnbd_listen = 127.0.0.1:10809\nnbd_tls_cert = /c.pem\n"
		 "nbd_tls_key = /k.pem\n");
	cr_assert_eq(check_config(conf), 1, "%s", out);
	cr_assert(strstr(out, "nbd_tls_cert, nbd_tls_key and nbd_tls_ca go together"), "%s", out);
	snprintf(conf, sizeof(conf),
		 "[cofferd]\nnbd_listen = 127.0.0.1:10809\nnbd_tls_psk = %s\nnbd_tls_cert = /c.pem\n"
		 "nbd_tls_key = /k.pem\nnbd_tls_ca = /ca.pem\n",
		 psk_file);
	cr_assert_eq(check_config(conf), 1, "%s", out);
	cr_assert(strstr(out, "exclude each other"), "%s", out);
	/* the running daemon's own file passes */
	snprintf(conf, sizeof(conf), "[cofferd]\nnbd_listen = 127.0.0.1:10809\nnbd_tls_psk = %s\n",
		 psk_file);
	cr_assert_eq(check_config(conf), 0, "%s", out);
}

/*
 * A TLS peer (Python's ssl, a client certificate) that asks for 1 MiB reads
 * and never reads a reply: the daemon stops reading it once its replies
 * back up, as on the Unix socket, and serves others meanwhile.
 */
static const char *flood_py =
	"import os, select, socket, ssl, struct\n"
	"d = os.environ['CERTS']\n"
	"s = socket.create_connection(('127.0.0.1', int(os.environ['PORT'])))\n"
	"def rd(sock, n):\n"
	"    b = b''\n"
	"    while len(b) < n:\n"
	"        c = sock.recv(n - len(b)); assert c, 'closed'; b += c\n"
	"    return b\n"
	"rd(s, 18)\n"
	"s.sendall(struct.pack('>I', 3) + b'IHAVEOPT' + struct.pack('>II', 5, 0))\n"
	"assert struct.unpack('>QIII', rd(s, 20))[2] == 1, 'STARTTLS refused'\n"
	"ctx = ssl.create_default_context(cafile=d + '/ca-cert.pem')\n"
	"ctx.load_cert_chain(d + '/client-cert.pem', d + '/client-key.pem')\n"
	"t = ctx.wrap_socket(s, server_hostname='127.0.0.1')\n"
	"name = b'tank/flood'\n"
	"t.sendall(b'IHAVEOPT' + struct.pack('>II', 7, len(name) + 6) + struct.pack('>I', len(name))\n"
	"          + name + b'\\0\\0')\n"
	"while True:\n"
	"    magic, opt, typ, n = struct.unpack('>QIII', rd(t, 20)); rd(t, n)\n"
	"    if typ == 1: break\n"
	"    assert typ == 3, 'GO refused: %#x' % typ\n"
	"t.setblocking(False)\n"
	"sent = 0\n"
	"while sent < 1 << 20:\n"
	"    q = struct.pack('>IHHQQI', 0x25609513, 0, 0, sent, (sent % 64) << 20, 1 << 20)\n"
	"    try:\n"
	"        t.send(q); sent += 1\n"
	"    except (ssl.SSLWantWriteError, BlockingIOError):\n"
	"        if not select.select([], [t], [], 3)[1]: break\n"
	"print('stopped after', sent)\n"
	/* written aside, then renamed: the test never reads a file half written */
	"open(os.environ['READY'] + '.tmp', 'w').write('%d' % sent)\n"
	"os.rename(os.environ['READY'] + '.tmp', os.environ['READY'])\n"
	"import sys; sys.stdin.read()\n";

Test(nbd_tls, a_tls_peer_that_sends_and_never_reads_holds_only_itself)
{
	char env[PATH_MAX * 3], ready[PATH_MAX], cmd[PATH_MAX * 4], certs[PATH_MAX];
	const char *script;
	double end;
	FILE *p, *f;
	unsigned sent = 0;

	NEED("nbdinfo", "libnbd-bin");
	NEED("python3", "python3");
	NEED("openssl", "openssl");
	make_pool();
	COF_OK(NULL, "create -V 64M tank/flood");
	restart_with_certs();
	snprintf(ready, sizeof(ready), "%s/ready", td.dir);
	snprintf(certs, sizeof(certs), "%s/root", td.dir);
	script = tdaemon_file(&td, "flood.py", flood_py, strlen(flood_py));
	snprintf(env, sizeof(env), "PORT=%u CERTS='%s' READY='%s'", tls_port(), certs, ready);
	snprintf(cmd, sizeof(cmd), "%s python3 '%s' >'%s/flood.log' 2>&1", env, script, td.dir);
	p = popen(cmd, "w");
	cr_assert_not_null(p);
	end = tdaemon_deadline(2 * TDAEMON_WAIT_S);
	while (!(f = fopen(ready, "r")) && tdaemon_poll(end))
		;
	cr_assert_not_null(f, "the flood did not stop:\n%s", tdaemon_log(&td));
	cr_assert_eq(fscanf(f, "%u", &sent), 1);
	fclose(f);
	cr_log_info("requests sent before the daemon stopped reading: %u", sent);
	cr_assert_lt(sent, 1u << 20, "the daemon read requests without bound");
	/* others are served meanwhile, over TCP and on the control socket */
	daemon_alive();
	SH_OK("nbdinfo --size '%s'", cert_uri("root", "tank/flood"));
	cr_assert(strstr(out, "67108864"), "%s", out);
	pclose(p);
	daemon_alive();
}
