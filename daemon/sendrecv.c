// SPDX-License-Identifier: MIT
/*
 * The handlers of send and receive: a stream travels in chunks, each a
 * CMD_DATA frame (the JSON object, a NUL, the bytes), so a stream of any
 * size passes through bounded memory on both sides.
 *
 * send is stateless here: each request names the snapshot and carries the
 * cursor the previous reply gave (libstore's struct stor_send_cursor, its
 * u64 fields as hex strings), and the reply carries one chunk and the next
 * cursor. A client that stops just stops. With "dryrun" true it sends
 * nothing and replies {"estimate": {"bytes", "records", "frees"}}: the
 * stream's size as libstore reckons it from the block pointers.
 *
 * send, request: {"name": DATASET@SNAP, "raw": bool, "from": DATASET@FROM
 * (an incremental), "cursor": {...} (after the first chunk), "token": a
 * receive_resume_token (send -t; the first chunk only: it gives the cursor
 * its start, raw or not and the GUIDs the snapshot and FROM must have)}.
 * Reply: {"cursor": {"next", "chain", "parts", "guid", "from_guid": hex,
 * "state": 0..2}}, then the chunk.
 *
 * receive, request: {"name": DATASET, "force": bool (-F), "resumable": bool
 * (-s: a stream cut short keeps what came, see libstore's
 * STOR_RECV_RESUMABLE), "end": bool (the stream's last chunk), "abandon":
 * bool (receive -A: drop the partial state; no bytes, nothing else)}, then
 * the chunk. Reply: {"complete": bool}.
 *
 * receive keeps one receive per client connection (registry.c's stream
 * slot): the first chunk begins it, each chunk feeds it, a request with
 * "end" true asks whether the stream ended whole. A failure ends it at
 * once, and so does the connection going away: in both cases libstore
 * destroys the dataset again (stor_recv_close). The receive holds its
 * pool's count of open datasets, as a handle does, so the pool is not
 * exported under it.
 */

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "handlers.h"

#define SEND_CHUNK (4u << 20) /* >= STOR_SEND_CHUNK_MIN; fewer round trips */

#define ERR_TEXT(c, code, ...)                                     \
	do {                                                       \
		snprintf((c)->err, sizeof((c)->err), __VA_ARGS__); \
		return (code);                                     \
	} while (0)

struct recv_sess {
	struct stor_recv *r;
	struct pool_ent *pe;
	char name[PROTO_NAME_MAX + 1];
	int busy, complete;
};

/* Guards every client's slot: a client may pipeline two chunks. */
static pthread_mutex_t sess_lock = PTHREAD_MUTEX_INITIALIZER;

static void sess_free(void *p)
{
	struct recv_sess *s = p;

	if (!s)
		return;
	stor_recv_close(s->r);
	reg_pool_unref(s->pe);
	free(s);
}

static int fail(struct hcall *c, int ret, const char *verb)
{
	c->verb = verb;
	snprintf(c->detail, sizeof(c->detail), "%s", stor_pool_last_error());
	return ret;
}

static int get_hex(json_t *o, const char *key, uint64_t *v)
{
	const char *s = json_string_value(json_object_get(o, key));
	char *end;

	if (!s) {
		*v = 0;
		return json_object_get(o, key) ? -EINVAL : 0;
	}
	*v = strtoull(s, &end, 16);
	return *s && !*end && strlen(s) <= 16 ? 0 : -EINVAL;
}

static json_t *hex(uint64_t v)
{
	char b[17];

	snprintf(b, sizeof(b), "%016" PRIx64, v);
	return json_string(b);
}

/* send with "dryrun": the stream's size from its block pointers, and no stream */
static int send_dryrun(struct hcall *c, const char *from, int raw)
{
	struct stor_send_estimate est;
	int ret = stor_send_estimate(c->pool, c->name, from, raw ? STOR_SEND_RAW : 0, &est);

	if (ret < 0)
		return fail(c, ret, "send");
	c->reply = json_pack("{s:{s:I, s:I, s:I}}", "estimate", "bytes", (json_int_t)est.bytes,
			     "records", (json_int_t)est.records, "frees", (json_int_t)est.frees);
	return c->reply ? 0 : -ENOMEM;
}

int h_send(struct hcall *c)
{
	struct stor_send_cursor cur = { 0 };
	json_t *jc = json_object_get(c->args, "cursor"), *from;
	uint8_t *buf;
	size_t len = 0;
	int ret = 0, raw;
	unsigned resume = 0;

	if (json_is_true(json_object_get(c->args, "dryrun"))) {
		from = json_object_get(c->args, "from");
		if (from && (!json_is_string(from) ||
			     strlen(json_string_value(from)) > PROTO_NAME_MAX))
			ERR_TEXT(c, -EINVAL, "send: a bad snapshot to start from");
		return send_dryrun(c, json_string_value(from),
				   json_is_true(json_object_get(c->args, "raw")));
	}
	if (jc) {
		json_t *st = json_object_get(jc, "state");

		if (!json_is_object(jc) || !json_is_integer(st) || json_integer_value(st) < 0 ||
		    json_integer_value(st) > 2)
			ERR_TEXT(c, -EINVAL, "send: a bad cursor");
		cur.state = (int)json_integer_value(st);
		ret = get_hex(jc, "next", &cur.next);
		if (ret == 0)
			ret = get_hex(jc, "chain", &cur.chain);
		if (ret == 0)
			ret = get_hex(jc, "parts", &cur.parts);
		if (ret == 0)
			ret = get_hex(jc, "guid", &cur.guid);
		if (ret == 0)
			ret = get_hex(jc, "from_guid", &cur.from_guid);
		if (ret < 0)
			ERR_TEXT(c, -EINVAL, "send: a bad cursor");
	}
	raw = json_is_true(json_object_get(c->args, "raw"));
	if (json_object_get(c->args, "token")) {
		const char *tok = json_string_value(json_object_get(c->args, "token"));
		struct stor_resume_token t;
		char why[256];

		if (!tok || jc)
			ERR_TEXT(c, -EINVAL, "send: a token is a string, and only in the first request");
		if (stor_resume_token_decode(tok, &t, why, sizeof(why)) < 0)
			ERR_TEXT(c, -EINVAL, "send -t: the token is refused: %s", why);
		cur = (struct stor_send_cursor){ .guid = t.to_guid, .from_guid = t.from_guid,
						 .next = t.next };
		raw = !!(t.flags & STOR_RESUME_RAW);
		resume = STOR_SEND_RESUME;
	}
	buf = malloc(SEND_CHUNK);
	if (!buf)
		return -ENOMEM;
	from = json_object_get(c->args, "from");
	if (from && (!json_is_string(from) || strlen(json_string_value(from)) > PROTO_NAME_MAX)) {
		free(buf);
		ERR_TEXT(c, -EINVAL, "send: a bad snapshot to start from");
	}
	ret = stor_send_chunk(c->pool, c->name, from ? json_string_value(from) : NULL,
			      (raw ? STOR_SEND_RAW : 0) | resume, &cur, buf, SEND_CHUNK, &len);
	if (ret < 0) {
		if (!raw) /* a plain stream's records are plaintext */
			explicit_bzero(buf, SEND_CHUNK);
		free(buf);
		return fail(c, ret, "send");
	}
	c->reply = json_pack("{s:{s:o, s:o, s:o, s:o, s:o, s:i}}", "cursor", "next",
			     hex(cur.next), "chain", hex(cur.chain), "parts", hex(cur.parts),
			     "guid", hex(cur.guid), "from_guid", hex(cur.from_guid), "state",
			     cur.state);
	if (!c->reply) {
		if (!raw)
			explicit_bzero(buf, len);
		free(buf);
		return -ENOMEM;
	}
	c->out_data = buf;
	c->out_len = len;
	c->out_plain = !raw;
	return 0;
}

int h_receive(struct hcall *c)
{
	void **slot;
	struct recv_sess *s;
	int ret = 0, end = json_is_true(json_object_get(c->args, "end"));
	unsigned flags = 0;

	if (json_is_true(json_object_get(c->args, "abandon"))) {
		ret = stor_recv_abandon(c->pool, c->name);
		if (ret == -ENOENT && !stor_pool_last_error()[0])
			ERR_TEXT(c, ret, "receive -A: %s: no such dataset", c->name);
		if (ret < 0)
			return fail(c, ret, "receive -A");
		c->reply = json_pack("{s:b}", "complete", 1);
		return c->reply ? 0 : -ENOMEM;
	}
	if (json_is_true(json_object_get(c->args, "force")))
		flags |= STOR_FORCE;
	if (json_is_true(json_object_get(c->args, "resumable")))
		flags |= STOR_RECV_RESUMABLE;

	pthread_mutex_lock(&sess_lock);
	slot = reg_client_stream(c->client, sess_free);
	s = *slot;
	if (s && (s->busy || strcmp(s->name, c->name))) {
		pthread_mutex_unlock(&sess_lock);
		ERR_TEXT(c, -EBUSY, "receive: this connection is receiving %s already", s->name);
	}
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s) {
			pthread_mutex_unlock(&sess_lock);
			return -ENOMEM;
		}
		snprintf(s->name, sizeof(s->name), "%s", c->name);
		*slot = s;
	}
	s->busy = 1;
	pthread_mutex_unlock(&sess_lock);

	if (!s->r) {
		ret = stor_recv_begin(c->pool, c->name, flags, &s->r);
		if (ret == 0) {
			s->pe = c->pe;
			reg_pool_ref(c->pe);
		}
	}
	if (ret == 0 && c->data_len) {
		/* a package: whole after each of its streams, not in between */
		ret = stor_recv_feed(s->r, c->data, c->data_len);
		if (ret >= 0)
			s->complete = ret == 1;
	}
	if (ret >= 0 && end && !s->complete && stor_recv_keeps(s->r)) {
		snprintf(c->err, sizeof(c->err),
			 "receive: the stream ended early (truncated); what came whole is kept in "
			 "%s: resume with 'coffer send -t TOKEN | coffer receive -s %s', TOKEN "
			 "from 'coffer get -H -o value receive_resume_token %s', or abandon it "
			 "with 'coffer receive -A %s'", c->name, c->name, c->name, c->name);
		ret = STOR_ECORRUPT;
	} else if (ret >= 0 && end && !s->complete) {
		snprintf(c->err, sizeof(c->err),
			 "receive: the stream ended early (truncated); nothing was received");
		ret = STOR_ECORRUPT;
	}
	/* a failure or the end: the receive is over, and what failed is undone
	 * (stor_recv_close keeps the reason it failed for) */
	pthread_mutex_lock(&sess_lock);
	if (ret < 0 || end) {
		*slot = NULL;
		pthread_mutex_unlock(&sess_lock);
		sess_free(s);
	} else {
		s->busy = 0;
		pthread_mutex_unlock(&sess_lock);
	}
	if (ret < 0)
		return c->err[0] ? ret : fail(c, ret, "receive");
	c->reply = json_pack("{s:b}", "complete", end);
	return 0;
}
