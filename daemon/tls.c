// SPDX-License-Identifier: MIT
/*
 * TLS sessions for the transport's TCP sockets, from the OpenSSL libstore
 * already links, the way nbdkit offers them: a pre-shared key per user
 * (psktool's file format, `identity:hexkey` per line), or X.509 with client
 * certificates required and checked against a CA of the operator's.
 *
 * The design decision: a session is a pair of memory BIOs, not a socket.
 * The transport (rpc.c) feeds what libuv read into it and writes what it
 * gives back, so the handshake and every record run on the loop without a
 * blocking call, and the transport's framing, limits and back-pressure are
 * the ones a Unix-socket connection has.
 *
 * Who the peer is: over a Unix socket the kernel says (SO_PEERCRED); over
 * TCP the peer is the local user named by its PSK identity or by the CN of
 * its client certificate (getpwnam), so the same admin and owner rules
 * apply to it. A name that is no local user fails the handshake, as a
 * wrong key or a certificate of another CA does: the client is told by a
 * TLS alert, the log says why. The lookup runs on the loop in the
 * handshake; it reads the password database, which is local on a server
 * that serves block devices.
 *
 * A server authenticates peers by PSK or by certificate, not both, as
 * nbdkit: a TLS 1.3 client offering a PSK to a server with a certificate
 * may be sent a certificate request it cannot answer.
 *
 * Hardening: TLS 1.2 at least, no renegotiation, no session tickets or
 * cache (a resumed session would skip the identity check), key files that
 * others may read are refused, PSKs are wiped when the daemon exits.
 */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "store.h"
#include "tls.h"

#define PSK_FILE_MAX (1u << 20) /* bytes of a PSK file */
#define PSK_KEY_MAX 64u         /* bytes of one key (psktool makes 32) */

struct psk {
	char name[TLS_NAME_MAX + 1];
	uint8_t key[PSK_KEY_MAX];
	unsigned keylen;
};

struct tls_ctx {
	SSL_CTX *ssl;
	struct psk *psks;
	unsigned npsks;
};

struct tls_conn {
	SSL *ssl;
	BIO *rbio, *wbio;   /* the peer's bytes in, ours out; owned by ssl */
	int peer_ok;        /* the identity is a local user */
	int failed;
	int ended;          /* by the peer's close_notify: an orderly end */
	char name[TLS_NAME_MAX + 1];
	uid_t uid;
	gid_t gid;
	char why[256];
};

static int app_idx = -1; /* SSL ex_data slot: the tls_conn */

/* Is @name a local user? Then its ids into @t. */
static int local_user(struct tls_conn *t, const char *name, const char *how)
{
	struct passwd pw, *res = NULL;
	char buf[4096];

	if (getpwnam_r(name, &pw, buf, sizeof(buf), &res) != 0 || !res) {
		snprintf(t->why, sizeof(t->why), "%s '%.64s' is not a local user", how, name);
		return 0;
	}
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->uid = pw.pw_uid;
	t->gid = pw.pw_gid;
	t->peer_ok = 1;
	return 1;
}

static struct tls_conn *conn_of(SSL *ssl)
{
	return SSL_get_ex_data(ssl, app_idx);
}

/* The PSK of the identity the client names, if it names a local user. */
static unsigned int psk_cb(SSL *ssl, const char *identity, unsigned char *psk,
			   unsigned int max_len)
{
	struct tls_ctx *ctx = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	struct tls_conn *t = conn_of(ssl);

	for (unsigned i = 0; identity && i < ctx->npsks; i++) {
		const struct psk *k = &ctx->psks[i];

		if (strcmp(k->name, identity) != 0)
			continue;
		if (k->keylen > max_len || !local_user(t, identity, "PSK identity"))
			return 0;
		memcpy(psk, k->key, k->keylen);
		return k->keylen;
	}
	snprintf(t->why, sizeof(t->why), "PSK identity '%.64s' is not in nbd_tls_psk",
		 identity ? identity : "");
	return 0;
}

/* Client certificates: the CA's verdict, then the leaf's CN must be a local user. */
static int verify_cb(int ok, X509_STORE_CTX *x)
{
	SSL *ssl = X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
	struct tls_conn *t = ssl ? conn_of(ssl) : NULL;
	X509 *cert = X509_STORE_CTX_get_current_cert(x);
	char cn[TLS_NAME_MAX + 1];
	int n;

	if (!t)
		return 0;
	if (!ok) {
		snprintf(t->why, sizeof(t->why), "client certificate: %s",
			 X509_verify_cert_error_string(X509_STORE_CTX_get_error(x)));
		return 0;
	}
	if (X509_STORE_CTX_get_error_depth(x) != 0)
		return 1;
	n = cert ? X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn,
					     sizeof(cn))
		 : -1;
	if (n <= 0 || (size_t)n != strlen(cn)) {
		snprintf(t->why, sizeof(t->why), "client certificate has no usable CN");
		X509_STORE_CTX_set_error(x, X509_V_ERR_APPLICATION_VERIFICATION);
		return 0;
	}
	if (!local_user(t, cn, "client certificate CN")) {
		X509_STORE_CTX_set_error(x, X509_V_ERR_APPLICATION_VERIFICATION);
		return 0;
	}
	return 1;
}

int tls_psk_parse(struct tls_ctx *ctx, const char *text, size_t len, unsigned *line)
{
	const char *p = text, *end = text + len;
	unsigned n = 0;

	*line = 0;
	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p)), *colon;
		size_t l = eol ? (size_t)(eol - p) : (size_t)(end - p), hex;
		struct psk k = { 0 };

		++*line;
		if (l && p[l - 1] == '\r')
			l--;
		if (l == 0 || p[0] == '#')
			goto next; /* blank lines and comments */
		colon = memchr(p, ':', l);
		hex = colon ? l - (size_t)(colon - p) - 1 : 0;
		if (!colon || colon == p || (size_t)(colon - p) > TLS_NAME_MAX || hex == 0 ||
		    hex % 2 || hex / 2 > PSK_KEY_MAX || memchr(p, '\0', l))
			goto bad;
		memcpy(k.name, p, (size_t)(colon - p));
		if (stor_hex_decode(colon + 1, hex, k.key, NULL) < 0)
			goto bad;
		k.keylen = (unsigned)(hex / 2);
		if (ctx) {
			struct psk *a = OPENSSL_secure_malloc((ctx->npsks + 1) * sizeof(*a));

			if (!a)
				goto bad;
			if (ctx->npsks)
				memcpy(a, ctx->psks, ctx->npsks * sizeof(*a));
			OPENSSL_secure_clear_free(ctx->psks, ctx->npsks * sizeof(*a));
			a[ctx->npsks++] = k;
			ctx->psks = a;
		}
		OPENSSL_cleanse(&k, sizeof(k));
		n++;
next:
		p = eol ? eol + 1 : end;
		continue;
bad:
		OPENSSL_cleanse(&k, sizeof(k));
		return -1;
	}
	return (int)n;
}

/* A key file only its owner may read, or a text in @err saying what is wrong. */
static int private_file(const char *opt, const char *path, int *fdp, char *err, size_t errlen)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);

	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%s %s: %s", opt, path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode) || (st.st_mode & 077)) {
		snprintf(err, errlen,
			 S_ISREG(st.st_mode) ? "%s %s: mode %04o lets others read the key; chmod 600 it"
					     : "%s %s: not a regular file (mode %04o)",
			 opt, path, (unsigned)(st.st_mode & 07777));
		close(fd);
		return -1;
	}
	if (fdp)
		*fdp = fd;
	else
		close(fd);
	return 0;
}

static int load_psks(struct tls_ctx *ctx, const char *path, char *err, size_t errlen)
{
	char *text = OPENSSL_secure_malloc(PSK_FILE_MAX);
	size_t len = 0;
	unsigned line;
	ssize_t r;
	int fd, n;

	if (!text) {
		snprintf(err, errlen, "nbd_tls_psk %s: out of memory", path);
		return -1;
	}
	if (private_file("nbd_tls_psk", path, &fd, err, errlen) < 0) {
		OPENSSL_secure_free(text);
		return -1;
	}
	while (len < PSK_FILE_MAX && (r = read(fd, text + len, PSK_FILE_MAX - len)) > 0)
		len += (size_t)r;
	close(fd);
	n = len == PSK_FILE_MAX ? -2 : tls_psk_parse(ctx, text, len, &line);
	OPENSSL_secure_clear_free(text, PSK_FILE_MAX);
	if (n == -2)
		snprintf(err, errlen, "nbd_tls_psk %s: larger than %u bytes", path, PSK_FILE_MAX);
	else if (n < 0)
		snprintf(err, errlen,
			 "nbd_tls_psk %s:%u: expected 'username:hexkey' (psktool's format, "
			 "a key of at most %u bytes)",
			 path, line, PSK_KEY_MAX);
	else if (n == 0)
		snprintf(err, errlen, "nbd_tls_psk %s: no keys in it", path);
	return n > 0 ? 0 : -1;
}

static int ssl_failed(char *err, size_t errlen, const char *opt, const char *path)
{
	char e[256];

	ERR_error_string_n(ERR_get_error(), e, sizeof(e));
	ERR_clear_error();
	snprintf(err, errlen, "%s %s: %s", opt, path, e);
	return -1;
}

static int load_certs(struct tls_ctx *ctx, const struct config *cfg, char *err, size_t errlen)
{
	STACK_OF(X509_NAME) *cas;

	if (private_file("nbd_tls_key", cfg->nbd_tls_key, NULL, err, errlen) < 0)
		return -1;
	if (SSL_CTX_use_certificate_chain_file(ctx->ssl, cfg->nbd_tls_cert) != 1)
		return ssl_failed(err, errlen, "nbd_tls_cert", cfg->nbd_tls_cert);
	if (SSL_CTX_use_PrivateKey_file(ctx->ssl, cfg->nbd_tls_key, SSL_FILETYPE_PEM) != 1)
		return ssl_failed(err, errlen, "nbd_tls_key", cfg->nbd_tls_key);
	if (SSL_CTX_check_private_key(ctx->ssl) != 1)
		return ssl_failed(err, errlen, "nbd_tls_key (not the key of nbd_tls_cert)",
				  cfg->nbd_tls_key);
	if (SSL_CTX_load_verify_locations(ctx->ssl, cfg->nbd_tls_ca, NULL) != 1)
		return ssl_failed(err, errlen, "nbd_tls_ca", cfg->nbd_tls_ca);
	cas = SSL_load_client_CA_file(cfg->nbd_tls_ca);
	if (!cas)
		return ssl_failed(err, errlen, "nbd_tls_ca", cfg->nbd_tls_ca);
	SSL_CTX_set_client_CA_list(ctx->ssl, cas);
	SSL_CTX_set_verify(ctx->ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_cb);
	return 0;
}

static int set(const char *s)
{
	return s && s[0];
}

int tls_ctx_new(const struct config *cfg, struct tls_ctx **out, char *err, size_t errlen)
{
	int psk = set(cfg->nbd_tls_psk);
	int x509 = set(cfg->nbd_tls_cert) || set(cfg->nbd_tls_key) || set(cfg->nbd_tls_ca);
	struct tls_ctx *ctx;

	*out = NULL;
	if (x509 && !(set(cfg->nbd_tls_cert) && set(cfg->nbd_tls_key) && set(cfg->nbd_tls_ca))) {
		snprintf(err, errlen, "nbd_tls_cert, nbd_tls_key and nbd_tls_ca go together: "
				      "set all three (client certificates are checked against the CA)");
		return -1;
	}
	if (psk && x509) {
		/* as nbdkit: a handshake offers one kind of credential */
		snprintf(err, errlen, "nbd_tls_psk and nbd_tls_cert exclude each other: "
				      "authenticate peers by PSK or by certificate");
		return -1;
	}
	if (!psk && !x509) {
		snprintf(err, errlen, "nbd_listen %s: TLS is required over TCP: set nbd_tls_psk, "
				      "or nbd_tls_cert, nbd_tls_key and nbd_tls_ca",
			 cfg->nbd_listen);
		return -1;
	}
	if (app_idx < 0)
		app_idx = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx || app_idx < 0 || !(ctx->ssl = SSL_CTX_new(TLS_server_method()))) {
		snprintf(err, errlen, "TLS: out of memory");
		free(ctx);
		return -1;
	}
	SSL_CTX_set_app_data(ctx->ssl, ctx);
	SSL_CTX_set_min_proto_version(ctx->ssl, TLS1_2_VERSION);
	SSL_CTX_set_options(ctx->ssl, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET |
					      SSL_OP_CIPHER_SERVER_PREFERENCE);
	SSL_CTX_set_num_tickets(ctx->ssl, 0);
	/* AES-GCM first: the machines that serve block devices have AES instructions,
	 * and a PSK of TLS 1.3 may only use the SHA-256 suites */
	SSL_CTX_set_ciphersuites(ctx->ssl, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
					   "TLS_CHACHA20_POLY1305_SHA256");
	SSL_CTX_set_session_cache_mode(ctx->ssl, SSL_SESS_CACHE_OFF);
	if ((psk && load_psks(ctx, cfg->nbd_tls_psk, err, errlen) < 0) ||
	    (x509 && load_certs(ctx, cfg, err, errlen) < 0)) {
		tls_ctx_free(ctx);
		return -1;
	}
	if (psk)
		SSL_CTX_set_psk_server_callback(ctx->ssl, psk_cb);
	*out = ctx;
	return 0;
}

void tls_ctx_free(struct tls_ctx *ctx)
{
	if (!ctx)
		return;
	SSL_CTX_free(ctx->ssl);
	OPENSSL_secure_clear_free(ctx->psks, ctx->npsks * sizeof(*ctx->psks));
	free(ctx);
}

struct tls_conn *tls_conn_new(struct tls_ctx *ctx)
{
	struct tls_conn *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->ssl = SSL_new(ctx->ssl);
	t->rbio = BIO_new(BIO_s_mem());
	t->wbio = BIO_new(BIO_s_mem());
	if (!t->ssl || !t->rbio || !t->wbio || !SSL_set_ex_data(t->ssl, app_idx, t)) {
		SSL_free(t->ssl);
		BIO_free(t->rbio);
		BIO_free(t->wbio);
		free(t);
		return NULL;
	}
	/* an empty input buffer means "more to come", not the end of the stream */
	BIO_set_mem_eof_return(t->rbio, -1);
	SSL_set_bio(t->ssl, t->rbio, t->wbio);
	SSL_set_accept_state(t->ssl);
	return t;
}

void tls_conn_free(struct tls_conn *t)
{
	if (!t)
		return;
	SSL_free(t->ssl); /* and its BIOs */
	free(t);
}

int tls_conn_feed(struct tls_conn *t, const void *p, size_t n)
{
	return n <= INT_MAX && BIO_write(t->rbio, p, (int)n) == (int)n ? 0 : -1;
}

/* The session failed: keep the first reason (a callback's is the best). */
static long failed(struct tls_conn *t, const char *why)
{
	unsigned long e = ERR_get_error();

	t->failed = 1;
	if (!t->why[0]) {
		if (e)
			ERR_error_string_n(e, t->why, sizeof(t->why));
		else
			snprintf(t->why, sizeof(t->why), "%s", why);
	}
	ERR_clear_error();
	return -1;
}

long tls_conn_read(struct tls_conn *t, void *buf, size_t cap)
{
	int n, e;

	if (t->failed)
		return -1;
	n = SSL_read(t->ssl, buf, cap > INT_MAX ? INT_MAX : (int)cap);
	if (n > 0) {
		/* a completed handshake whose peer no callback named cannot be */
		if (!t->peer_ok)
			return failed(t, "TLS peer without an identity");
		return n;
	}
	e = SSL_get_error(t->ssl, n);
	if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
		ERR_clear_error();
		return 0;
	}
	t->ended = e == SSL_ERROR_ZERO_RETURN;
	return failed(t, t->ended ? "the peer ended TLS" : "TLS error");
}

int tls_conn_write(struct tls_conn *t, const void *p, size_t n)
{
	/* into a memory BIO, which grows: the transport bounds what it queues */
	while (n && !t->failed) {
		int w = SSL_write(t->ssl, p, n > INT_MAX ? INT_MAX : (int)n);

		if (w <= 0)
			return (int)failed(t, "TLS write failed");
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
	return t->failed ? -1 : 0;
}

size_t tls_conn_pending(const struct tls_conn *t)
{
	return BIO_ctrl_pending(t->wbio);
}

size_t tls_conn_take_out(struct tls_conn *t, uint8_t **buf)
{
	size_t n = BIO_ctrl_pending(t->wbio);

	*buf = NULL;
	if (n == 0 || n > INT_MAX)
		return 0;
	*buf = malloc(n);
	if (!*buf || BIO_read(t->wbio, *buf, (int)n) != (int)n) {
		free(*buf);
		*buf = NULL;
		return 0;
	}
	return n;
}

void tls_conn_shutdown(struct tls_conn *t)
{
	if (!t->failed && SSL_is_init_finished(t->ssl))
		SSL_shutdown(t->ssl);
	ERR_clear_error();
}

int tls_conn_ready(const struct tls_conn *t)
{
	return !t->failed && t->peer_ok && SSL_is_init_finished(t->ssl);
}

const char *tls_conn_peer(const struct tls_conn *t, uid_t *uid, gid_t *gid)
{
	*uid = t->uid;
	*gid = t->gid;
	return t->name;
}

int tls_conn_ended(const struct tls_conn *t)
{
	return t->ended;
}

const char *tls_conn_cipher(const struct tls_conn *t)
{
	const char *c = SSL_get_cipher_name(t->ssl);

	return c ? c : "?";
}

const char *tls_conn_error(const struct tls_conn *t)
{
	return t->why[0] ? t->why : "TLS error";
}
