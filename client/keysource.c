// SPDX-License-Identifier: MIT
/*
 * Key material from a key server or a password agent (keysource.h).
 *
 * The client fetches keylocation=https:// keys, as libzfs does for zfs, and
 * not the daemon: every key is read on the client side already (files,
 * prompts), the daemon's unit has no network at all (PrivateNetwork=yes),
 * and a TLS or HTTP parser bug then reaches one client process holding one
 * key, not the daemon holding every key of every pool. A slow server holds
 * only this client, not a daemon worker. What the daemon contributes is
 * trust: the CA certificates of its key_https_ca, sent as bytes.
 *
 * The fetch is narrow on purpose: the URL's own scheme only (also for
 * redirects, so https never falls back to http), at most 3 redirects, a
 * connect and a total timeout, a body of at most KEYSOURCE_URL_MAX bytes
 * (a longer one is no key and is cut off as it arrives), a 2xx status, and
 * peer and host name verification that cannot be turned off. Bytes received
 * are wiped on every failure. Only this file includes <curl/curl.h>.
 *
 * libcurl is opened (dlopen) at the first fetch, not linked: it brings some
 * thirty libraries (TLS, Kerberos, LDAP, IDN...), whose loading and
 * relocation took 6 of the 8 ms that every coffer command spent before
 * main(), for a feature only load-key of an https:// key uses. Its soname,
 * libcurl.so.4, has been stable since 2006; the headers of configure's
 * libcurl still check every call's types.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef HAVE_CURL
#include <curl/curl.h>
#include <dlfcn.h>
#endif

#include "keysource.h"

#ifdef HAVE_CURL

/* The calls of libcurl this file makes, from libcurl.so.4 once it is open. */
static struct {
	void *lib;
	__typeof__(curl_global_init) *global_init;
	__typeof__(curl_global_cleanup) *global_cleanup;
	__typeof__(curl_easy_init) *easy_init;
	__typeof__(curl_easy_setopt) *easy_setopt;
	__typeof__(curl_easy_perform) *easy_perform;
	__typeof__(curl_easy_getinfo) *easy_getinfo;
	__typeof__(curl_easy_strerror) *easy_strerror;
	__typeof__(curl_easy_cleanup) *easy_cleanup;
} cu;
static char cu_err[256];

/* Open libcurl and find its calls: 0, or -1 with the reason in cu_err. */
static int curl_open(void)
{
	static const char *const names[] = { "curl_global_init",   "curl_global_cleanup",
					     "curl_easy_init",	   "curl_easy_setopt",
					     "curl_easy_perform",  "curl_easy_getinfo",
					     "curl_easy_strerror", "curl_easy_cleanup" };
	void **slot[] = { (void **)&cu.global_init,  (void **)&cu.global_cleanup,
			  (void **)&cu.easy_init,    (void **)&cu.easy_setopt,
			  (void **)&cu.easy_perform, (void **)&cu.easy_getinfo,
			  (void **)&cu.easy_strerror, (void **)&cu.easy_cleanup };

	if (cu.lib)
		return 0;
	if (cu_err[0])
		return -1;
	cu.lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
	for (size_t i = 0; cu.lib && i < sizeof(names) / sizeof(names[0]); i++) {
		*slot[i] = dlsym(cu.lib, names[i]);
		if (!*slot[i]) {
			dlclose(cu.lib);
			cu.lib = NULL;
		}
	}
	if (!cu.lib) {
		const char *e = dlerror();

		snprintf(cu_err, sizeof(cu_err),
			 "libcurl.so.4 could not be loaded (%s); install libcurl, or use "
			 "keylocation=file:// or prompt",
			 e ? e : "a call is missing");
		return -1;
	}
	return 0;
}

int keysource_url_supported(void)
{
	return curl_open() == 0;
}

struct sink {
	unsigned char *buf;
	size_t cap, len;
	int over; /* the body was longer than cap */
};

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
	struct sink *s = arg;
	size_t n = size * nmemb;

	if (n > s->cap - s->len) {
		s->over = 1;
		return 0; /* less than given: libcurl stops with CURLE_WRITE_ERROR */
	}
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	return n;
}

ssize_t keysource_url(const char *url, const char *ca_pem, unsigned char *buf, size_t cap,
		      char *err, size_t errlen)
{
	char cerr[CURL_ERROR_SIZE] = "";
	int https = strncmp(url, "https://", 8) == 0;
	const char *scheme = https ? "https" : "http";
	struct sink s = { buf, cap < KEYSOURCE_URL_MAX ? cap : KEYSOURCE_URL_MAX, 0, 0 };
	struct curl_blob ca;
	ssize_t ret = -1;
	long status = 0;
	CURLcode rc;
	CURL *h;

	if (!https && strncmp(url, "http://", 7) != 0) {
		snprintf(err, errlen, "not an http:// or https:// URL");
		return -1;
	}
	if (curl_open() < 0) {
		snprintf(err, errlen, "%s", cu_err);
		return -1;
	}
	if (cu.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		snprintf(err, errlen, "libcurl would not start");
		return -1;
	}
	h = cu.easy_init();
	if (!h) {
		snprintf(err, errlen, "libcurl would not start");
		cu.global_cleanup();
		return -1;
	}
	cu.easy_setopt(h, CURLOPT_URL, url);
	cu.easy_setopt(h, CURLOPT_PROTOCOLS_STR, scheme);
	cu.easy_setopt(h, CURLOPT_REDIR_PROTOCOLS_STR, scheme);
	cu.easy_setopt(h, CURLOPT_FOLLOWLOCATION, 1L);
	cu.easy_setopt(h, CURLOPT_MAXREDIRS, 3L);
	cu.easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)KEYSOURCE_URL_CONNECT_S);
	cu.easy_setopt(h, CURLOPT_TIMEOUT, (long)KEYSOURCE_URL_TIMEOUT_S);
	cu.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	cu.easy_setopt(h, CURLOPT_ERRORBUFFER, cerr);
	cu.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	cu.easy_setopt(h, CURLOPT_WRITEDATA, &s);
	/* refused before the body when the server says its length */
	cu.easy_setopt(h, CURLOPT_MAXFILESIZE, (long)s.cap);
	cu.easy_setopt(h, CURLOPT_USERAGENT, "coffer/" PACKAGE_VERSION);
	cu.easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
	cu.easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
	if (ca_pem) {
		ca.data = (void *)ca_pem;
		ca.len = strlen(ca_pem);
		ca.flags = CURL_BLOB_COPY;
		cu.easy_setopt(h, CURLOPT_CAINFO_BLOB, &ca);
	}
	rc = cu.easy_perform(h);
	if (rc == CURLE_OK)
		cu.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	if (s.over || rc == CURLE_FILESIZE_EXCEEDED)
		snprintf(err, errlen, "the key server sent more than %zu bytes, which is no key",
			 s.cap);
	else if (rc != CURLE_OK)
		snprintf(err, errlen, "%s", cerr[0] ? cerr : cu.easy_strerror(rc));
	else if (status < 200 || status > 299)
		snprintf(err, errlen, "the key server answered HTTP %ld", status);
	else
		ret = (ssize_t)s.len;
	if (ret < 0)
		explicit_bzero(buf, s.len);
	cu.easy_cleanup(h);
	cu.global_cleanup();
	return ret;
}

#else /* !HAVE_CURL */

int keysource_url_supported(void)
{
	return 0;
}

ssize_t keysource_url(const char *url, const char *ca_pem, unsigned char *buf, size_t cap,
		      char *err, size_t errlen)
{
	(void)url, (void)ca_pem, (void)buf, (void)cap;
	snprintf(err, errlen, "this coffer was built without libcurl (configure --without-curl); "
			      "use keylocation=file:// or prompt");
	return -1;
}

#endif

ssize_t keysource_askpass(const char *agent, const char *prompt, unsigned char *buf, size_t cap,
			  char *err, size_t errlen)
{
	char cmd[4096];
	unsigned char spill[256];
	size_t n = 0;
	int fds[2], st;
	pid_t pid;

	/* the agent is a command line of the caller's environment: the shell splits it */
	if ((size_t)snprintf(cmd, sizeof(cmd), "exec %s \"$1\"", agent) >= sizeof(cmd)) {
		snprintf(err, errlen, "COFFER_ASKPASS is too long");
		return -1;
	}
	if (pipe2(fds, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		if (dup2(fds[1], STDOUT_FILENO) < 0)
			_exit(127);
		execl("/bin/sh", "sh", "-c", cmd, "sh", prompt, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	for (;;) {
		ssize_t r = n < cap ? read(fds[0], buf + n, cap - n) : read(fds[0], spill, sizeof(spill));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (n < cap)
			n += (size_t)r;
	}
	explicit_bzero(spill, sizeof(spill));
	close(fds[0]);
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		explicit_bzero(buf, n);
		if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
			snprintf(err, errlen, "password agent '%s' could not be run", agent);
		else
			snprintf(err, errlen, "password agent '%s' gave no key (exit status %d)",
				 agent, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
		return -1;
	}
	return (ssize_t)n;
}
