// SPDX-License-Identifier: MIT
/*
 * The pure parsers of nbd_proto.h: lengths are checked against the bytes
 * given before anything is read, and nothing here allocates, so a peer's
 * bytes cannot make these read out of bounds or hold memory.
 */

#include <errno.h>
#include <string.h>

#include "nbd_proto.h"
#include "proto.h"

int nbd_opt_get(const uint8_t *p, struct nbd_opt *o)
{
	if (wire_get_u64(p) != NBD_IHAVEOPT)
		return -EPROTO;
	o->opt = wire_get_u32(p + 8);
	o->len = wire_get_u32(p + 12);
	return 0;
}

int nbd_export_req_parse(const uint8_t *d, uint32_t len, struct nbd_export_req *r)
{
	uint32_t pos;

	memset(r, 0, sizeof(*r));
	if (len < 4)
		return -EINVAL;
	r->namelen = wire_get_u32(d);
	if (r->namelen > len - 4 || len - 4 - r->namelen < 2)
		return -EINVAL;
	if (r->namelen > NBD_NAME_MAX)
		return -ENAMETOOLONG;
	r->name = d + 4;
	pos = 4 + r->namelen;
	r->ninfo = wire_get_u16(d + pos);
	pos += 2;
	if ((uint64_t)r->ninfo * 2 != len - pos)
		return -EINVAL;
	for (uint32_t i = 0; i < r->ninfo && i < NBD_INFO_REQ_MAX; i++)
		r->info[i] = wire_get_u16(d + pos + 2 * i);
	return 0;
}

int nbd_meta_req_parse(const uint8_t *d, uint32_t len, struct nbd_meta_req *r)
{
	uint32_t pos;

	memset(r, 0, sizeof(*r));
	if (len < 8)
		return -EINVAL;
	r->namelen = wire_get_u32(d);
	if (r->namelen > len - 8)
		return -EINVAL;
	if (r->namelen > NBD_NAME_MAX)
		return -ENAMETOOLONG;
	r->name = d + 4;
	pos = 4 + r->namelen;
	r->nqueries = wire_get_u32(d + pos);
	pos += 4;
	for (uint32_t i = 0; i < r->nqueries; i++) {
		uint32_t ql;

		if (len - pos < 4)
			return -EINVAL;
		ql = wire_get_u32(d + pos);
		pos += 4;
		if (ql > len - pos)
			return -EINVAL;
		if (ql > NBD_NAME_MAX)
			return -ENAMETOOLONG;
		if (i < NBD_QUERIES_MAX) {
			r->query[i] = d + pos;
			r->querylen[i] = ql;
		}
		pos += ql;
	}
	return pos == len ? 0 : -EINVAL;
}

int nbd_request_get(const uint8_t *p, struct nbd_request *r)
{
	if (wire_get_u32(p) != NBD_REQUEST_MAGIC)
		return -EPROTO;
	r->flags = wire_get_u16(p + 4);
	r->type = wire_get_u16(p + 6);
	r->cookie = wire_get_u64(p + 8);
	r->off = wire_get_u64(p + 16);
	r->len = wire_get_u32(p + 24);
	return 0;
}

uint32_t nbd_request_check(const struct nbd_request *r, uint64_t size, uint32_t max_len,
			   int block_status)
{
	unsigned allowed;
	int ranged = 1;

	switch (r->type) {
	case NBD_CMD_READ:
		allowed = NBD_CMD_FLAG_DF;
		break;
	case NBD_CMD_WRITE:
	case NBD_CMD_TRIM:
		allowed = NBD_CMD_FLAG_FUA;
		break;
	case NBD_CMD_WRITE_ZEROES:
		allowed = NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE;
		break;
	case NBD_CMD_CACHE:
		allowed = 0;
		break;
	case NBD_CMD_BLOCK_STATUS:
		if (!block_status)
			return NBD_EINVAL;
		allowed = NBD_CMD_FLAG_REQ_ONE;
		break;
	case NBD_CMD_FLUSH:
	case NBD_CMD_DISC:
		allowed = 0;
		ranged = 0;
		break;
	default:
		return NBD_EINVAL;
	}
	if (r->flags & ~allowed)
		return NBD_EINVAL;
	if (!ranged)
		return 0;
	if (r->len == 0)
		return NBD_EINVAL;
	/* the reads and writes that carry data must fit one call; the rest are cut to it */
	if ((r->type == NBD_CMD_READ || r->type == NBD_CMD_WRITE || r->type == NBD_CMD_CACHE) &&
	    r->len > max_len)
		return r->type == NBD_CMD_WRITE ? NBD_EOVERFLOW : NBD_EINVAL;
	if (r->off > size || r->len > size - r->off)
		return r->type == NBD_CMD_WRITE || r->type == NBD_CMD_WRITE_ZEROES ? NBD_ENOSPC
										    : NBD_EINVAL;
	return 0;
}

enum nbd_gate nbd_opt_gate(uint32_t opt, int tls_required)
{
	if (!tls_required || opt == NBD_OPT_ABORT)
		return NBD_GATE_PASS;
	if (opt == NBD_OPT_STARTTLS)
		return NBD_GATE_STARTTLS;
	return opt == NBD_OPT_EXPORT_NAME ? NBD_GATE_CLOSE : NBD_GATE_TLS_REQD;
}
