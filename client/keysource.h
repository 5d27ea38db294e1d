/* SPDX-License-Identifier: MIT */
/*
 * Where key material comes from besides a file and the terminal: a key
 * server (keylocation=https:// or http://, through libcurl) and a password
 * agent (COFFER_ASKPASS, e.g. systemd-ask-password at boot). coffer.c
 * decides which source a key comes from; this file only brings the bytes.
 */
#ifndef COFFER_KEYSOURCE_H
#define COFFER_KEYSOURCE_H

#include <stddef.h>
#include <sys/types.h>

/* The most a key server may send: the longest key (a 512-byte passphrase) and room to spare. */
#define KEYSOURCE_URL_MAX 4096
/* The whole fetch, connection and TLS handshake included, and the connection alone. */
#define KEYSOURCE_URL_TIMEOUT_S 30
#define KEYSOURCE_URL_CONNECT_S 10

/** Was coffer built with libcurl (keylocation=https:// and http://)? */
int keysource_url_supported(void);

/**
 * GET @url (http:// or https://) into @buf (@cap bytes). The server must
 * answer 2xx with at most min(@cap, KEYSOURCE_URL_MAX) bytes; redirects are
 * followed (3 at most) only to the URL's own scheme; TLS peers are checked
 * against @ca_pem (PEM certificates; NULL: the system's store).
 * @return the bytes read, or -1 with the reason in @err
 */
ssize_t keysource_url(const char *url, const char *ca_pem, unsigned char *buf, size_t cap,
		      char *err, size_t errlen);

/**
 * Ask the password agent @agent (a command line, run by /bin/sh with
 * @prompt as its one argument) and read what it prints into @buf (@cap
 * bytes). @return the bytes read, or -1 with the reason in @err (it could
 * not run, or exited non-zero: cancelled or timed out)
 */
ssize_t keysource_askpass(const char *agent, const char *prompt, unsigned char *buf, size_t cap,
			  char *err, size_t errlen);

#endif
