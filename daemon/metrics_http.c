// SPDX-License-Identifier: MIT
/*
 * The optional HTTP listener of the metrics (metrics_listen): GET /metrics
 * answers metrics_render()'s text; any other path is 404, any other method
 * 405. Nothing else is served, and nothing is read from the request.
 *
 * libmicrohttpd, not an HTTP reader of our own on the loop: its request
 * parser, connection limit and timeouts are a maintained library's, and on
 * its own thread a render may take the registry's read lock and wait for it
 * (an administrative command holding the write lock waits for the loop, so
 * the loop itself must never wait for that lock).
 *
 * The address is a Unix socket path (made here, mode 0660, removed on
 * stop), or HOST:PORT. A host that is not a loopback address is refused
 * unless metrics_allow_remote says yes: the counters name pools, datasets
 * and LUN paths.
 */

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <microhttpd.h>

#include "log.h"
#include "metrics.h"
#include "registry.h"

#define HTTP_CONNECTIONS 16u /* scrapers at once */
#define HTTP_TIMEOUT 10u     /* seconds a connection may idle */

static struct {
	struct MHD_Daemon *mhd;
	char unix_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
} http;

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status, const char *type,
			     void *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result ret;

	if (!r) {
		if (mode == MHD_RESPMEM_MUST_FREE)
			free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
				  const char *method, const char *version, const char *upload,
				  size_t *upload_len, void **state)
{
	static char not_found[] = "not found: the metrics are at /metrics\n";
	static char not_allowed[] = "only GET\n";
	static char no_mem[] = "out of memory\n";
	char *text;
	size_t len;

	(void)cls;
	(void)version;
	(void)upload;
	if (*upload_len)
		return MHD_NO; /* a body to a GET: drop the connection */
	(void)state;
	if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", not_allowed,
			     sizeof(not_allowed) - 1, MHD_RESPMEM_PERSISTENT);
	if (strcmp(url, "/metrics"))
		return reply(conn, MHD_HTTP_NOT_FOUND, "text/plain", not_found,
			     sizeof(not_found) - 1, MHD_RESPMEM_PERSISTENT);
	reg_lock(0);
	text = metrics_render(&len);
	reg_unlock();
	if (!text)
		return reply(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", no_mem,
			     sizeof(no_mem) - 1, MHD_RESPMEM_PERSISTENT);
	return reply(conn, MHD_HTTP_OK, METRICS_CONTENT_TYPE, text, len, MHD_RESPMEM_MUST_FREE);
}

static int is_loopback(const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return 0;
}

/* A listening socket on @addr, or -1 with @err set. */
static int listen_on(const char *addr, int allow_remote, char *err, size_t errlen)
{
	char host[CONFIG_HOSTPORT_MAX + 1], port[8];
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV },
			*res = NULL;
	unsigned p;
	int fd = -1, one = 1, ret;

	if (addr[0] == '/') {
		struct sockaddr_un sun = { .sun_family = AF_UNIX };

		if (strlen(addr) >= sizeof(sun.sun_path)) {
			snprintf(err, errlen, "metrics_listen %s: path too long", addr);
			return -1;
		}
		strcpy(sun.sun_path, addr);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		/* a socket left by a daemon that did not stop cleanly; main.c
		 * has made sure no cofferd serves this state any more */
		if (fd >= 0)
			unlink(addr);
		if (fd < 0 || bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 ||
		    chmod(addr, 0660) < 0 || listen(fd, 64) < 0) {
			snprintf(err, errlen, "metrics_listen %s: %s", addr, strerror(errno));
			if (fd >= 0)
				close(fd);
			return -1;
		}
		snprintf(http.unix_path, sizeof(http.unix_path), "%s", addr);
		return fd;
	}
	if (config_hostport_split(addr, host, sizeof(host), &p) < 0) {
		snprintf(err, errlen, "metrics_listen %s: not HOST:PORT or a path", addr);
		return -1;
	}
	snprintf(port, sizeof(port), "%u", p);
	ret = getaddrinfo(host, port, &hints, &res);
	if (ret) {
		snprintf(err, errlen, "metrics_listen %s: %s", addr, gai_strerror(ret));
		return -1;
	}
	if (!allow_remote && !is_loopback(res->ai_addr)) {
		snprintf(err, errlen,
			 "metrics_listen %s: not a loopback address (set metrics_allow_remote = "
			 "yes to serve the metrics to other hosts)",
			 addr);
		freeaddrinfo(res);
		return -1;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 64) < 0) {
		snprintf(err, errlen, "metrics_listen %s: %s", addr, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

int metrics_http_start(const struct config *cfg, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	socklen_t sslen = sizeof(ss);
	unsigned port = 0;
	int fd;

	if (!cfg->metrics_listen[0])
		return 0;
	fd = listen_on(cfg->metrics_listen, cfg->metrics_allow_remote, err, errlen);
	if (fd < 0)
		return -1;
	/* the port bound, which port 0 leaves to the kernel to choose */
	if (getsockname(fd, (struct sockaddr *)&ss, &sslen) == 0)
		port = ss.ss_family == AF_INET	  ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
		       : ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
						  : 0;
	http.mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL,
				    on_request, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
				    MHD_OPTION_CONNECTION_LIMIT, HTTP_CONNECTIONS,
				    MHD_OPTION_CONNECTION_TIMEOUT, HTTP_TIMEOUT, MHD_OPTION_END);
	if (!http.mhd) {
		snprintf(err, errlen, "metrics_listen %s: the HTTP server did not start",
			 cfg->metrics_listen);
		close(fd);
		metrics_http_stop();
		return -1;
	}
	if (port)
		log_info("metrics on %s (port %u): GET /metrics", cfg->metrics_listen, port);
	else
		log_info("metrics on %s: GET /metrics", cfg->metrics_listen);
	return 0;
}

void metrics_http_stop(void)
{
	if (http.mhd)
		MHD_stop_daemon(http.mhd); /* closes the listening socket too */
	http.mhd = NULL;
	if (http.unix_path[0])
		unlink(http.unix_path);
	http.unix_path[0] = 0;
}
