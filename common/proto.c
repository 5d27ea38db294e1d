// SPDX-License-Identifier: MIT
/*
 * Wire format helpers shared by cofferd and the client: the command table
 * without its handler column, header codecs and the checks every frame goes
 * through before anything is allocated for it, name validation and the text
 * of status codes. Nothing here allocates or does I/O, so the client links it
 * without libuv; of libstore it needs only the shared rules (name.c,
 * errors.c), which a static link pulls in alone.
 */

#include <assert.h>
#include <errno.h>
#include <string.h>

#include "proto.h"
#include "common.h"

/* Indexed by opcode: every frame looks its command up (more than once), so
 * the lookup is an array access; unused opcodes have no name. */
static const struct proto_cmd cmds[] = {
#define XX(num, NAME, str, fn, fl, minb, maxb) \
	[num] = { .op = (num), .name = (str), .flags = (fl), .min_body = (minb), .max_body = (maxb) },
	PROTO_CMDS(XX)
#undef XX
};

const struct proto_cmd *proto_cmd_by_op(unsigned op)
{
	return op < sizeof(cmds) / sizeof(cmds[0]) && cmds[op].name ? &cmds[op] : NULL;
}

const struct proto_cmd *proto_cmd_by_name(const char *name)
{
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (cmds[i].name && !strcmp(cmds[i].name, name))
			return &cmds[i];
	return NULL;
}

const char *proto_op_name(unsigned op)
{
	const struct proto_cmd *c = proto_cmd_by_op(op);

	return c ? c->name : "unknown";
}

void proto_hdr_put(uint8_t *p, const struct proto_hdr *h)
{
	wire_put_u32(p, h->len);
	wire_put_u16(p + 4, h->op);
	wire_put_u16(p + 6, h->flags);
	wire_put_u32(p + 8, h->req_id);
	wire_put_u32(p + 12, (uint32_t)h->status);
}

void proto_hdr_get(const uint8_t *p, struct proto_hdr *h)
{
	h->len = wire_get_u32(p);
	h->op = wire_get_u16(p + 4);
	h->flags = wire_get_u16(p + 6);
	h->req_id = wire_get_u32(p + 8);
	h->status = (int32_t)wire_get_u32(p + 12);
}

void proto_io_put(uint8_t *p, const struct proto_io *io)
{
	wire_put_u32(p, io->handle);
	wire_put_u64(p + 4, io->off);
	wire_put_u32(p + 12, io->len);
}

void proto_io_get(const uint8_t *p, struct proto_io *io)
{
	io->handle = wire_get_u32(p);
	io->off = wire_get_u64(p + 4);
	io->len = wire_get_u32(p + 12);
}

int proto_hdr_check(const struct proto_hdr *h, uint32_t max_frame)
{
	const struct proto_cmd *c = proto_cmd_by_op(h->op);

	if (!c || (h->flags & PROTO_F_REPLY) || h->status != 0)
		return -EPROTO;
	if (h->len > max_frame || h->len > c->max_body)
		return -EMSGSIZE;
	if (h->len < c->min_body)
		return -EPROTO;
	return 0;
}

static_assert(PROTO_NAME_MAX == STOR_NAME_MAX, "the wire carries any name libstore takes");

/* The dispatcher's spelling of stor_name_check(). */
int proto_name_valid(const char *name, int pool_only)
{
	return stor_name_check(name, pool_only ? STOR_NAME_POOL : STOR_NAME_DATASET) == 0;
}

/* stor_strerror(), but for the few codes the daemon means more by than errno says. */
const char *proto_strerror(int status)
{
	switch (status) {
	case -EPERM:
		return "permission denied";
	case -EPROTO:
		return "protocol error";
	case -ESTALE:
		return "handle closed by an administrator (-f)";
	default:
		return stor_strerror(status);
	}
}
