// SPDX-License-Identifier: MIT
/*
 * The client's half of send and receive (daemon/sendrecv.c has the other):
 * a stream between a file descriptor and the daemon, one chunk in flight,
 * so memory stays at one chunk whatever the stream's size.
 *
 * send hands back the cursor each reply carries and writes each chunk out
 * until the cursor says done. receive reads the stream in chunks, sends
 * each, and at end of file asks whether the stream ended whole; a short
 * read or an early end is the daemon's to refuse, not ours to guess.
 */
#include <config.h> /* the autoconf header first: _GNU_SOURCE */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"

#define RECV_CHUNK (1u << 20)

static int write_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int coffer_send_stream(struct coffer_conn *c, const char *snap, int raw, int fd, char *err,
		       size_t errlen)
{
	json_t *cursor = NULL;
	int ret = 0, done = 0;

	while (!done) {
		json_t *args = json_pack("{s:s, s:b}", "name", snap, "raw", raw), *reply = NULL;
		const uint8_t *data;
		size_t len;

		if (!args)
			return -ENOMEM;
		if (cursor)
			json_object_set_new(args, "cursor", cursor);
		cursor = NULL;
		ret = coffer_call_data(c, "send", args, NULL, 0, &reply, &data, &len, err, errlen);
		json_decref(args);
		if (ret < 0)
			return ret;
		cursor = json_incref(json_object_get(reply, "cursor"));
		done = json_integer_value(json_object_get(cursor, "state")) == 2;
		json_decref(reply);
		if (!cursor) {
			snprintf(err, errlen, "send: the daemon's reply has no cursor");
			return -EPROTO;
		}
		ret = len ? write_all(fd, data, len) : 0;
		if (ret < 0) {
			snprintf(err, errlen, "send: writing the stream: %s", strerror(-ret));
			break;
		}
	}
	json_decref(cursor);
	return ret;
}

ssize_t coffer_read_full(int fd, void *to, size_t cap)
{
	uint8_t *buf = to;
	size_t got = 0;

	while (got < cap) {
		ssize_t n = read(fd, buf + got, cap - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int coffer_receive_stream(struct coffer_conn *c, const char *name, int force, int fd, char *err,
			  size_t errlen)
{
	uint8_t *buf = malloc(RECV_CHUNK);
	int ret = 0, end = 0;

	if (!buf)
		return -ENOMEM;
	while (!end && ret == 0) {
		ssize_t n = coffer_read_full(fd, buf, RECV_CHUNK);
		json_t *args;

		if (n < 0) {
			snprintf(err, errlen, "receive: reading the stream: %s", strerror((int)-n));
			ret = (int)n;
			break;
		}
		end = (size_t)n < RECV_CHUNK;
		args = json_pack("{s:s, s:b, s:b}", "name", name, "force", force, "end", end);
		if (!args) {
			ret = -ENOMEM;
			break;
		}
		ret = coffer_call_data(c, "receive", args, buf, (size_t)n, NULL, NULL, NULL, err,
				       errlen);
		json_decref(args);
	}
	free(buf);
	return ret;
}
