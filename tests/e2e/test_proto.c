// SPDX-License-Identifier: MIT
/* The wire codecs, the command table and name checks of common/proto.c, without a daemon. */

#include <errno.h>
#include <string.h>

#include <criterion/criterion.h>

#include "proto.h"
#include "store.h"

Test(proto, header_is_sixteen_big_endian_bytes)
{
	struct proto_hdr h = { .len = 0x01020304, .op = 0x0506, .flags = 0x0708,
			       .req_id = 0x090a0b0c, .status = -2 }, back;
	uint8_t b[PROTO_HDR_SIZE];
	const uint8_t want[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0xff, 0xff, 0xff, 0xfe };

	proto_hdr_put(b, &h);
	cr_assert_arr_eq(b, want, sizeof(want));
	proto_hdr_get(b, &back);
	cr_assert_eq(back.len, h.len);
	cr_assert_eq(back.op, h.op);
	cr_assert_eq(back.flags, h.flags);
	cr_assert_eq(back.req_id, h.req_id);
	cr_assert_eq(back.status, -2);
}

Test(proto, io_body_round_trips)
{
	struct proto_io io = { .handle = 7, .off = 0x1122334455667788ull, .len = 8192 }, back;
	uint8_t b[PROTO_IO_BODY];

	proto_io_put(b, &io);
	cr_assert_eq(b[4], 0x11);
	proto_io_get(b, &back);
	cr_assert_eq(back.handle, 7u);
	cr_assert_eq(back.off, io.off);
	cr_assert_eq(back.len, 8192u);
}

Test(proto, table_lookups_agree_and_opcodes_are_unique)
{
	static const unsigned ops[] = {
#define XX(num, NAME, str, fn, fl, minb, maxb) (num),
		PROTO_CMDS(XX)
#undef XX
	};
	size_t n = sizeof(ops) / sizeof(ops[0]);

	for (size_t i = 0; i < n; i++) {
		const struct proto_cmd *c = proto_cmd_by_op(ops[i]);

		cr_assert_not_null(c);
		cr_assert_eq(proto_cmd_by_name(c->name), c);
		cr_assert_leq(c->min_body, c->max_body);
		for (size_t j = i + 1; j < n; j++)
			cr_assert_neq(ops[i], ops[j], "opcode %u twice", ops[i]);
	}
	/* numbers are part of the wire format: they never change */
	cr_assert_eq(PROTO_OP_HELLO, 1);
	cr_assert_eq(PROTO_OP_READ, 40);
	cr_assert_eq(PROTO_OP_WRITE, 41);
	cr_assert_eq(PROTO_OP_MAP, 44);
	cr_assert_null(proto_cmd_by_op(0));
	cr_assert_null(proto_cmd_by_name("nope"));
	cr_assert_str_eq(proto_op_name(999), "unknown");
}

Test(proto, header_check_rejects_before_allocation)
{
	struct proto_hdr h = { .len = 2, .op = PROTO_OP_PING };

	cr_assert_eq(proto_hdr_check(&h, 1 << 20), 0);
	h.len = (1 << 20) + 1;
	cr_assert_eq(proto_hdr_check(&h, 1 << 20), -EMSGSIZE);
	h = (struct proto_hdr){ .len = 3, .op = PROTO_OP_READ };
	cr_assert_eq(proto_hdr_check(&h, 1 << 20), -EPROTO, "short I/O body");
	h = (struct proto_hdr){ .len = PROTO_IO_BODY + 1, .op = PROTO_OP_READ };
	cr_assert_eq(proto_hdr_check(&h, 1 << 20), -EMSGSIZE, "READ carries no data");
	h = (struct proto_hdr){ .len = PROTO_IO_BODY, .op = PROTO_OP_MAP };
	cr_assert_eq(proto_hdr_check(&h, 1 << 20), -EPROTO, "MAP without its count of runs");
	h.len = PROTO_MAP_BODY;
	cr_assert_eq(proto_hdr_check(&h, 1 << 20), 0);
	h = (struct proto_hdr){ .len = 0, .op = 1234 };
	cr_assert_eq(proto_hdr_check(&h, 1 << 20), -EPROTO);
	h = (struct proto_hdr){ .len = 2, .op = PROTO_OP_PING, .flags = PROTO_F_REPLY };
	cr_assert_eq(proto_hdr_check(&h, 1 << 20), -EPROTO, "a reply sent as a request");
	h = (struct proto_hdr){ .len = 2, .op = PROTO_OP_PING, .status = -1 };
	cr_assert_eq(proto_hdr_check(&h, 1 << 20), -EPROTO);
}

Test(proto, names)
{
	char longname[300];

	cr_assert(proto_name_valid("tank", 1));
	cr_assert(proto_name_valid("tank/a/b-c_d.e:f", 0));
	cr_assert(!proto_name_valid("tank/a", 1), "pool names have one component");
	cr_assert(!proto_name_valid("", 0));
	cr_assert(!proto_name_valid("9tank", 0));
	cr_assert(!proto_name_valid("tank//a", 0));
	cr_assert(!proto_name_valid("tank/", 0));
	cr_assert(!proto_name_valid("tank/..", 0));
	cr_assert(!proto_name_valid("tank/.", 0));
	cr_assert(!proto_name_valid("tank/a b", 0));
	cr_assert(!proto_name_valid("tank/\xc3\xa9", 0));
	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	cr_assert(!proto_name_valid(longname, 0));
	longname[PROTO_NAME_MAX] = '\0';
	cr_assert(proto_name_valid(longname, 0));
}

Test(proto, status_texts)
{
	cr_assert_str_eq(proto_strerror(STOR_ENOKEY), "dataset key is not loaded");
	cr_assert_str_eq(proto_strerror(-EPERM), "permission denied");
	cr_assert_str_eq(proto_strerror(-ENOENT), strerror(ENOENT));
	cr_assert_str_eq(proto_strerror(12345), "unknown error");
}

/* common/resume_token.c: what send -t and the receive_resume_token property share */
Test(proto, resume_token_round_trips_and_refuses_any_change)
{
	struct stor_resume_token t = { .flags = STOR_RESUME_RAW | STOR_RESUME_INCR,
				       .guid = 0x0102030405060708ull, .to_guid = 42,
				       .from_guid = 7, .to_txg = 99, .next = 1234 },
				 back;
	char tok[STOR_RESUME_TOKEN_MAX], bad[STOR_RESUME_TOKEN_MAX], why[256];

	cr_assert_eq(stor_resume_token_encode(&t, tok, sizeof(tok)), 0);
	cr_assert_eq(strncmp(tok, "1-", 2), 0, "%s", tok);
	cr_assert_eq(stor_resume_token_decode(tok, &back, why, sizeof(why)), 0, "%s", why);
	cr_assert(back.flags == t.flags && back.guid == t.guid && back.to_guid == t.to_guid &&
		  back.from_guid == t.from_guid && back.to_txg == t.to_txg && back.next == t.next);
	/* every digit changed is refused, by the checksum or the form */
	for (size_t i = 0; tok[i]; i++) {
		memcpy(bad, tok, sizeof(bad));
		bad[i] = bad[i] == 'a' ? 'b' : 'a';
		cr_assert_eq(stor_resume_token_decode(bad, &back, why, sizeof(why)), -EINVAL,
			     "changed at %zu: %s", i, bad);
	}
	bad[0] = '\0';
	cr_assert_eq(stor_resume_token_decode(bad, &back, why, sizeof(why)), -EINVAL);
	cr_assert_eq(stor_resume_token_encode(&t, bad, 16), -ENOSPC);
}
