// SPDX-License-Identifier: MIT
/*
 * The client's half of send and receive (daemon/sendrecv.c has the other):
 * a stream between a file descriptor and the daemon, one chunk in flight,
 * so memory stays at one chunk whatever the stream's size.
 *
 * send hands back the cursor each reply carries and writes each chunk out
 * until the cursor says done. send -I is made here: the snapshots between
 * FROM and the one named, from the daemon's list in txg order, and one
 * incremental stream for each step, one after another (libstore/send/stream.h:
 * a package); send -n asks the daemon for each step's estimate instead. receive reads the stream in chunks, sends
 * each, and at end of file asks whether the stream ended whole; a short
 * read or an early end is the daemon's to refuse, not ours to guess (with
 * -s it keeps what came whole). send -t finds the token's snapshot by its
 * GUID and hands the daemon the token, which it checks again.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "common.h"

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

/* A stream, or with @token (send -t) the rest of one. */
static int send_stream(struct coffer_conn *c, const char *snap, const char *from, int raw,
		       const char *token, int fd, char *err, size_t errlen)
{
	json_t *cursor = NULL;
	int ret = 0, done = 0;

	while (!done) {
		json_t *args = json_pack("{s:s, s:b}", "name", snap, "raw", raw), *reply = NULL;
		const uint8_t *data;
		size_t len;

		if (!args)
			return -ENOMEM;
		if (from)
			json_object_set_new(args, "from", json_string(from));
		if (token && !cursor)
			json_object_set_new(args, "token", json_string(token));
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

int coffer_send_stream(struct coffer_conn *c, const char *snap, const char *from, int raw, int fd,
		       char *err, size_t errlen)
{
	return send_stream(c, snap, from, raw, NULL, fd, err, errlen);
}

/* The GUID of a list reply's snapshot object, or 0. */
static unsigned long long snap_guid(json_t *d)
{
	const char *g = json_string_value(
		json_object_get(json_object_get(json_object_get(d, "props"), "guid"), "value"));

	return g ? strtoull(g, NULL, 10) : 0;
}

int coffer_send_resume(struct coffer_conn *c, const char *token, int fd, char *err,
		       size_t errlen)
{
	struct stor_resume_token t;
	char why[256], *to = NULL, *from = NULL;
	json_t *args, *reply = NULL, *d, *arr;
	size_t i, j;
	int ret;

	if (stor_resume_token_decode(token, &t, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "send -t: the token is refused: %s", why);
		return -EINVAL;
	}
	/* the snapshots by GUID: the token names no pool, as zfs's names none
	 * the sender must have */
	args = json_pack("{s:[s], s:s, s:b, s:b}", "props", "guid", "type", "snapshot", "sources",
			 1, "rows", 0);
	ret = args ? coffer_call(c, "ds_list", args, &reply, err, errlen) : -ENOMEM;
	json_decref(args);
	/* a received copy has its source's snapshot GUIDs: FROM is looked for
	 * beside the snapshot, in the same dataset */
	arr = json_object_get(reply, "datasets");
	json_array_foreach(arr, i, d) {
		const char *name = json_string_value(json_object_get(d, "name"));

		if (ret < 0 || !name || snap_guid(d) != t.to_guid || (to && (!t.from_guid || from)))
			continue;
		free(to);
		to = strdup(name);
		json_array_foreach(arr, j, d) {
			const char *f = json_string_value(json_object_get(d, "name"));
			size_t dlen = strcspn(to, "@");

			if (t.from_guid && !from && f && snap_guid(d) == t.from_guid &&
			    !strncmp(f, to, dlen + 1))
				from = strdup(f);
		}
	}
	json_decref(reply);
	if (ret == 0 && !to) {
		snprintf(err, errlen, "send -t: no snapshot here has the token's GUID %llu: it was "
			 "destroyed, or the token is of another sender",
			 (unsigned long long)t.to_guid);
		ret = -ENOENT;
	} else if (ret == 0 && t.from_guid && !from) {
		snprintf(err, errlen, "send -t: %s is here, but not the snapshot the token's "
			 "incremental starts from (GUID %llu)", to, (unsigned long long)t.from_guid);
		ret = -ENOENT;
	}
	if (ret == 0)
		ret = send_stream(c, to, from, !!(t.flags & STOR_RESUME_RAW), token, fd, err,
				  errlen);
	free(to);
	free(from);
	return ret;
}

struct snap_at {
	const char *name;
	json_int_t txg;
};

static int by_txg(const void *a, const void *b)
{
	const struct snap_at *x = a, *y = b;

	return (x->txg > y->txg) - (x->txg < y->txg);
}

/* The createtxg of a list reply's dataset object, or -1. */
static json_int_t createtxg(json_t *d)
{
	const char *v = json_string_value(
		json_object_get(json_object_get(json_object_get(d, "props"), "createtxg"), "value"));

	return v ? (json_int_t)strtoll(v, NULL, 10) : -1;
}

int coffer_send_steps(struct coffer_conn *c, const char *snap, const char *from,
		      coffer_send_step_fn fn, void *ctx, char *err, size_t errlen)
{
	size_t dlen = strcspn(snap, "@"), n = 0, i;
	char *ds = strndup(snap, dlen);
	json_t *args, *reply = NULL, *arr, *d;
	struct snap_at *v = NULL, lo = { 0 }, hi = { 0 };
	int ret;

	if (!ds)
		return -ENOMEM;
	args = json_pack("{s:[s], s:b, s:s, s:b, s:b, s:s}", "props", "createtxg", "recursive", 0,
			 "type", "snapshot", "sources", 1, "rows", 0, "name", ds);
	ret = args ? coffer_call(c, "ds_list", args, &reply, err, errlen) : -ENOMEM;
	json_decref(args);
	arr = json_object_get(reply, "datasets");
	if (ret == 0 && !(v = calloc(json_array_size(arr) + 1, sizeof(*v))))
		ret = -ENOMEM;
	json_array_foreach(arr, i, d) {
		const char *name = json_string_value(json_object_get(d, "name"));

		if (ret < 0 || !name || strncmp(name, snap, dlen + 1))
			continue; /* only DATASET's own snapshots */
		v[n++] = (struct snap_at){ name, createtxg(d) };
		if (!strcmp(name, from))
			lo = v[n - 1];
		if (!strcmp(name, snap))
			hi = v[n - 1];
	}
	if (ret == 0 && (!lo.name || !hi.name || lo.txg >= hi.txg)) {
		snprintf(err, errlen, "send -I: %s is not an earlier snapshot of %s", from, ds);
		ret = -EINVAL;
	}
	/* FROM..S1, S1..S2, ..., Sn..SNAP: each snapshot between, in txg order */
	if (ret == 0)
		qsort(v, n, sizeof(*v), by_txg);
	for (i = 0; ret == 0 && i < n; i++) {
		if (v[i].txg <= lo.txg || v[i].txg > hi.txg)
			continue;
		ret = fn(c, v[i].name, lo.name, ctx, err, errlen);
		lo = v[i];
	}
	free(v);
	json_decref(reply);
	free(ds);
	return ret;
}

struct package_ctx {
	int raw, fd;
};

static int package_step(struct coffer_conn *c, const char *snap, const char *from, void *ctx,
			char *err, size_t errlen)
{
	const struct package_ctx *pc = ctx;

	return coffer_send_stream(c, snap, from, pc->raw, pc->fd, err, errlen);
}

int coffer_send_package(struct coffer_conn *c, const char *snap, const char *from, int raw, int fd,
			char *err, size_t errlen)
{
	struct package_ctx pc = { raw, fd };

	return coffer_send_steps(c, snap, from, package_step, &pc, err, errlen);
}

int coffer_send_estimate(struct coffer_conn *c, const char *snap, const char *from, int raw,
			 uint64_t *bytes, char *err, size_t errlen)
{
	json_t *args = json_pack("{s:s, s:b, s:b}", "name", snap, "raw", raw, "dryrun", 1);
	json_t *reply = NULL, *b;
	int ret;

	*bytes = 0;
	if (!args)
		return -ENOMEM;
	if (from)
		json_object_set_new(args, "from", json_string(from));
	ret = coffer_call(c, "send", args, &reply, err, errlen);
	json_decref(args);
	if (ret < 0)
		return ret;
	b = json_object_get(json_object_get(reply, "estimate"), "bytes");
	if (!json_is_integer(b) || json_integer_value(b) < 0) {
		snprintf(err, errlen, "send: the daemon's reply has no estimate");
		ret = -EPROTO;
	} else {
		*bytes = (uint64_t)json_integer_value(b);
	}
	json_decref(reply);
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

int coffer_receive_abandon(struct coffer_conn *c, const char *name, char *err, size_t errlen)
{
	json_t *args = json_pack("{s:s, s:b}", "name", name, "abandon", 1);
	int ret;

	if (!args)
		return -ENOMEM;
	ret = coffer_call_data(c, "receive", args, NULL, 0, NULL, NULL, NULL, err, errlen);
	json_decref(args);
	return ret;
}

int coffer_receive_stream(struct coffer_conn *c, const char *name, int force, int fd, char *err,
			  size_t errlen)
{
	return coffer_receive_flags(c, name, force ? COFFER_RECV_FORCE : 0, fd, err, errlen);
}

int coffer_receive_flags(struct coffer_conn *c, const char *name, unsigned flags, int fd,
			 char *err, size_t errlen)
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
		args = json_pack("{s:s, s:b, s:b, s:b}", "name", name, "force",
				 !!(flags & COFFER_RECV_FORCE), "resumable",
				 !!(flags & COFFER_RECV_RESUMABLE), "end", end);
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
