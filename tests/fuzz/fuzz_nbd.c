// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness for the NBD parsers (daemon/nbd_proto.c): the input is
 * a peer's byte stream, cut as nbd.c cuts it (client flags, options with
 * their data, then transmission requests with WRITE data), and every piece
 * goes through the parser nbd.c would give it. The parsers may only return
 * errors; what they point at must lie inside the input.
 */
#include <config.h>

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nbd_proto.h"
#include "proto.h"

static void inside(const uint8_t *p, size_t n, const uint8_t *lo, size_t len)
{
	if (n && (p < lo || p + n > lo + len))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t pos = 0;
	int transmission = 0;

	if (size < 4)
		return 0;
	pos = 4; /* the client flags */
	while (!transmission && size - pos >= NBD_OPT_HDR) {
		struct nbd_opt o;
		const uint8_t *d;

		if (nbd_opt_get(data + pos, &o) < 0)
			return 0;
		pos += NBD_OPT_HDR;
		if (o.len > NBD_OPT_MAX || o.len > size - pos)
			return 0;
		d = data + pos;
		if (o.opt == NBD_OPT_INFO || o.opt == NBD_OPT_GO) {
			struct nbd_export_req r;

			if (nbd_export_req_parse(d, o.len, &r) == 0) {
				inside(r.name, r.namelen, d, o.len);
				if (r.namelen > NBD_NAME_MAX)
					abort();
				transmission = o.opt == NBD_OPT_GO;
			}
		} else if (o.opt == NBD_OPT_SET_META_CONTEXT || o.opt == NBD_OPT_LIST_META_CONTEXT) {
			struct nbd_meta_req m;

			if (nbd_meta_req_parse(d, o.len, &m) == 0) {
				inside(m.name, m.namelen, d, o.len);
				for (uint32_t i = 0; i < m.nqueries && i < NBD_QUERIES_MAX; i++)
					inside(m.query[i], m.querylen[i], d, o.len);
			}
		} else if (o.opt == NBD_OPT_EXPORT_NAME) {
			transmission = 1;
		}
		pos += o.len;
	}
	while (transmission && size - pos >= NBD_REQ_SIZE) {
		struct nbd_request r;
		uint64_t esize = get_u32(data) ? get_u32(data) : 1u << 20;
		uint32_t err;

		if (nbd_request_get(data + pos, &r) < 0)
			return 0;
		pos += NBD_REQ_SIZE;
		err = nbd_request_check(&r, esize, 1u << 16, data[0] & 1);
		if (!err && (r.type == NBD_CMD_READ || r.type == NBD_CMD_WRITE) &&
		    (r.len == 0 || r.len > 1u << 16 || r.off + r.len > esize))
			abort(); /* a request the check let through must be servable */
		if (nbd_request_data(&r) > size - pos)
			return 0;
		pos += nbd_request_data(&r);
	}
	return 0;
}
