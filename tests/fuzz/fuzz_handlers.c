// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness for the JSON admin bodies: daemon/handlers.c run for
 * real against a temporary state directory holding one pool with a clear
 * and an encrypted dataset, made in the init. The first input byte picks a
 * JSON command of the table, the rest is the body, parsed as rpc.c parses
 * it. Commands that take file paths (pool_create, pool_add) or remove the
 * fixture (pool_destroy) are left out so that the fuzzer cannot write
 * outside the temp dir. rpc.c's two symbols are stubbed.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "rpc.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct rpc_stats rpc_stats;

int rpc_handle_close(struct rpc_conn *conn, uint32_t h)
{
	(void)conn;
	(void)h;
	return -EBADF;
}

/* No connection holds a handle here: nothing to revoke. */
int rpc_revoke(const struct rpc_revoke *r, int mark, unsigned timeout_ms)
{
	(void)r;
	(void)mark;
	(void)timeout_ms;
	return 0;
}

static struct config cfg;
static char dir[256];
static const uint16_t ops[] = {
	PROTO_OP_PING,	     PROTO_OP_VERSION,	  PROTO_OP_STATS,      PROTO_OP_POOL_LIST,
	PROTO_OP_POOL_STATUS, PROTO_OP_POOL_EXPORT, PROTO_OP_POOL_IMPORT, PROTO_OP_DS_CREATE,
	PROTO_OP_DS_DESTROY, PROTO_OP_DS_LIST,	  PROTO_OP_DS_GET,     PROTO_OP_DS_SET,
	PROTO_OP_DS_INHERIT, PROTO_OP_DS_OPEN,	  PROTO_OP_DS_CLOSE,   PROTO_OP_KEY_LOAD,
	PROTO_OP_KEY_UNLOAD, PROTO_OP_KEY_CHANGE,
};

static int call(uint16_t op, json_t *args)
{
	struct rpc_call c;
	int st;

	memset(&c, 0, sizeof(c));
	c.hdr.op = op;
	c.cmd = proto_cmd_by_op(op);
	c.admin = 1;
	c.args = args;
	handlers_run(&c);
	if (c.opened) {
		stor_ds_close(c.opened);
		handlers_pool_unref(c.opened_pool);
	}
	if (c.status < 0 && !c.err[0] && c.status != -ENOMEM)
		fprintf(stderr, "%s: status %d without a message\n", c.cmd->name, c.status);
	st = c.status;
	json_decref(c.reply);
	json_decref(c.args);
	return st;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char luns[2][300], state[300], err[256];
	int ret;

	(void)argc;
	(void)argv;
	snprintf(dir, sizeof(dir), "%s/fuzz-handlers.XXXXXX",
		 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
	if (!mkdtemp(dir))
		abort();
	/* LUNs may not sit inside the state directory */
	snprintf(state, sizeof(state), "%s/state", dir);
	if (mkdir(state, 0700) < 0)
		abort();
	config_defaults(&cfg);
	if (config_set(&cfg, "state_dir", state, err, sizeof(err)) < 0 ||
	    config_set(&cfg, "log_level", "err", err, sizeof(err)) < 0) {
		fprintf(stderr, "config: %s\n", err);
		abort();
	}
	if (handlers_init(&cfg) < 0)
		abort();
	snprintf(luns[0], sizeof(luns[0]), "%s/l0", dir);
	snprintf(luns[1], sizeof(luns[1]), "%s/l1", dir);
	ret = call(PROTO_OP_POOL_CREATE, json_pack("{s:s, s:[s,s], s:I}", "name", "fz", "luns",
						   luns[0], luns[1], "lun_size",
						   (json_int_t)(64 << 20)));
	ret |= call(PROTO_OP_DS_CREATE, json_pack("{s:s, s:I}", "name", "fz/a", "volsize",
						  (json_int_t)(4 << 20)));
	ret |= call(PROTO_OP_DS_CREATE,
		    json_pack("{s:s, s:[s,s], s:s}", "name", "fz/enc", "props",
			      "encryption=aes-256-ccm", "keyformat=raw", "key_hex",
			      "00112233445566778899aabbccddeeff"
			      "00112233445566778899aabbccddeeff"));
	if (ret)
		fprintf(stderr, "fuzz_handlers: fixture incomplete (%d); fuzzing anyway\n", ret);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *args;
	uint16_t op;

	if (size < 1)
		return 0;
	op = ops[data[0] % (sizeof(ops) / sizeof(ops[0]))];
	args = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
	if (!args)
		return 0;
	if (!json_is_object(args)) {
		json_decref(args);
		return 0; /* rpc.c refuses it before any handler */
	}
	call(op, args);
	/* an export by the input is undone, so the next input finds the pool */
	if (op == PROTO_OP_POOL_EXPORT)
		call(PROTO_OP_POOL_IMPORT, json_pack("{s:s}", "name", "fz"));
	return 0;
}
