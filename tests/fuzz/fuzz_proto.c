// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness for the frame decoder (common/proto.c): the input is a
 * byte stream as a peer would send it, cut into frames the way rpc.c does:
 * header, check against the table and max_frame before any allocation,
 * then the body by kind (HELLO, record I/O, JSON with its names).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint32_t max_frame = PROTO_FRAME_DEFAULT;

	while (size >= PROTO_HDR_SIZE) {
		struct proto_hdr h, back;
		const struct proto_cmd *cmd;
		uint8_t enc[PROTO_HDR_SIZE];
		const uint8_t *body;

		proto_hdr_get(data, &h);
		/* the codec is its own inverse */
		proto_hdr_put(enc, &h);
		proto_hdr_get(enc, &back);
		if (memcmp(enc, data, PROTO_HDR_SIZE) || memcmp(&h, &back, sizeof(h)))
			abort();
		(void)proto_op_name(h.op);
		proto_strerror(h.status);
		data += PROTO_HDR_SIZE;
		size -= PROTO_HDR_SIZE;
		if (proto_hdr_check(&h, max_frame) < 0)
			return 0; /* the daemon closes the connection */
		cmd = proto_cmd_by_op(h.op);
		if (!cmd || h.len < cmd->min_body || h.len > cmd->max_body || h.len > max_frame)
			abort(); /* the check let through what the table forbids */
		if (h.len > size)
			return 0; /* waits for more bytes */
		body = data;
		if (cmd->flags & CMD_IO) {
			struct proto_io io;

			proto_io_get(body, &io);
		} else if (cmd->flags & CMD_JSON && h.len) {
			json_t *j = json_loadb((const char *)body, h.len, JSON_REJECT_DUPLICATES, NULL);
			const char *name = json_string_value(json_object_get(j, "name"));

			if (name) {
				proto_name_valid(name, 0);
				proto_name_valid(name, 1);
				if (proto_name_valid(name, 0) && strlen(name) > PROTO_NAME_MAX)
					abort();
			}
			json_decref(j);
		}
		data += h.len;
		size -= h.len;
	}
	return 0;
}
