/* SPDX-License-Identifier: MIT */
/*
 * TLS for the transport's TCP sockets (tls.c): the server's credentials (a
 * PSK file, or a certificate with client certificates checked against a
 * CA), and one session per connection over memory buffers, so that the
 * transport moves the bytes on its loop and nothing here blocks on a socket.
 * A session's peer is a local user: the PSK identity or the CN of the
 * client certificate, looked up with getpwnam.
 */
#ifndef COFFERD_TLS_H
#define COFFERD_TLS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"

#define TLS_NAME_MAX 255u /* bytes of a PSK identity or a certificate's CN */

struct tls_ctx;
struct tls_conn;

/**
 * The credentials cfg->nbd_tls_* name: a PSK file (psktool's
 * `identity:hexkey` lines, readable by its owner only), or a certificate,
 * its key (owner only) and the CA client certificates must be signed by;
 * not both. On failure @err says what to fix. @return 0 or -1
 */
int tls_ctx_new(const struct config *cfg, struct tls_ctx **out, char *err, size_t errlen);
void tls_ctx_free(struct tls_ctx *ctx);
/**
 * Parse psktool's format (@len bytes at @text) into @ctx's keys (@ctx may be
 * NULL: only checked). @return the number of keys, or -1 with *@line the
 * first bad line
 */
int tls_psk_parse(struct tls_ctx *ctx, const char *text, size_t len, unsigned *line);

/** A server session, before its handshake. @return NULL: no memory */
struct tls_conn *tls_conn_new(struct tls_ctx *ctx);
void tls_conn_free(struct tls_conn *t);
/** Bytes from the peer. @return 0 or -1 (no memory) */
int tls_conn_feed(struct tls_conn *t, const void *p, size_t n);
/**
 * Plaintext from the peer into @buf (handshake first). @return bytes (>0), 0
 * when it needs more from the peer, -1 when the session failed (the reason:
 * tls_conn_error(); what to tell the peer is in tls_conn_take_out())
 */
long tls_conn_read(struct tls_conn *t, void *buf, size_t cap);
/** Plaintext to the peer, after the handshake. @return 0 or -1 */
int tls_conn_write(struct tls_conn *t, const void *p, size_t n);
/** Bytes due to the peer, for tls_conn_take_out(). */
size_t tls_conn_pending(const struct tls_conn *t);
/** Everything due to the peer, in a malloc'd buffer (*@buf). @return its length, 0: none */
size_t tls_conn_take_out(struct tls_conn *t, uint8_t **buf);
/** Start an orderly end (close_notify, then tls_conn_take_out()). */
void tls_conn_shutdown(struct tls_conn *t);
/** Is the handshake done, with a peer that is a local user? */
int tls_conn_ready(const struct tls_conn *t);
/** The peer: its user name and ids (tls_conn_ready() first). */
const char *tls_conn_peer(const struct tls_conn *t, uid_t *uid, gid_t *gid);
/** The cipher suite the handshake chose, for the log. */
const char *tls_conn_cipher(const struct tls_conn *t);
/** Did the session end by the peer's close_notify (not an error)? */
int tls_conn_ended(const struct tls_conn *t);
/** Why the session failed, for the log. */
const char *tls_conn_error(const struct tls_conn *t);

#endif
