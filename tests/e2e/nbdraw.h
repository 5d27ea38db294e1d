/* SPDX-License-Identifier: MIT */
/*
 * E2E: a raw NBD peer (nbdraw.c) for the hostile tests: each call fails
 * the running test on what it did not expect, within TDAEMON_WAIT_S.
 */
#ifndef COFFER_E2E_NBDRAW_H
#define COFFER_E2E_NBDRAW_H

#include <stddef.h>
#include <stdint.h>

/** A connection to the NBD socket at @path. */
int raw_connect_unix(const char *path);
/** A connection to 127.0.0.1:@port. */
int raw_connect_tcp(unsigned port);
/** Read exactly @n bytes. @return 0, or -1 at EOF */
int read_full(int fd, void *buf, size_t n);
void write_full(int fd, const void *buf, size_t n);
/** The daemon closes @fd (what it still sends is read and dropped); @fd is closed. */
void expect_closed(int fd);
/** The fixed newstyle greeting with NO_ZEROES. */
void greeting(int fd);
/** The client flags: fixed newstyle, no zeroes. */
void send_flags(int fd);
void send_opt(int fd, uint32_t opt, const void *data, uint32_t len);
/** One reply to @opt: its type, its length (*@len), up to @cap bytes of its data. */
uint32_t read_opt_reply(int fd, uint32_t opt, void *data, size_t cap, uint32_t *len);

#endif
