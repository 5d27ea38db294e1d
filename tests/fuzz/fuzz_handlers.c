// SPDX-License-Identifier: MIT
/*
 * libFuzzer harness for the JSON admin bodies: daemon/dispatch.c and
 * handlers.c run for real against a temporary state directory holding one
 * pool with a clear and an encrypted dataset, made in the init. The first
 * input byte picks a JSON command of the table, the rest is the body, which
 * goes through the dispatcher's checks as a frame from a connection would
 * (an admin peer past its HELLO). Commands that take file paths
 * (pool_create, pool_add) or remove the fixture (pool_destroy) are left out
 * so that the fuzzer cannot write outside the temp dir. Blocking commands
 * run on the libuv threadpool of a loop run here until the reply is in.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "conf.h"
#include "counters.h"
#include "dispatch.h"
#include "log.h"
#include "registry.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct daemon_stats daemon_stats;

static struct config cfg;
static char dir[256];
static const uint16_t ops[] = {
	PROTO_OP_PING,	     PROTO_OP_VERSION,	  PROTO_OP_STATS,      PROTO_OP_POOL_LIST,
	PROTO_OP_POOL_STATUS, PROTO_OP_POOL_EXPORT, PROTO_OP_POOL_IMPORT, PROTO_OP_DS_CREATE,
	PROTO_OP_DS_DESTROY, PROTO_OP_DS_LIST,	  PROTO_OP_DS_GET,     PROTO_OP_DS_SET,
	PROTO_OP_DS_INHERIT, PROTO_OP_DS_OPEN,	  PROTO_OP_DS_CLOSE,   PROTO_OP_KEY_LOAD,
	PROTO_OP_KEY_UNLOAD, PROTO_OP_KEY_CHANGE, PROTO_OP_KEY_HTTPS_CA,
};

static uv_loop_t *loop;
static struct disp_client client;

struct fuzz_call {
	struct disp_call dc; /* first: the completion finds its call */
	int done;
};

static void call_done(struct disp_call *dc)
{
	struct fuzz_call *fc = (struct fuzz_call *)dc;

	if (dc->status < 0 && !dc->payload_len && dc->status != -ENOMEM)
		fprintf(stderr, "%s: status %d without a message\n", proto_op_name(dc->hdr.op),
			dc->status);
	fc->done = 1;
}

/* One request with body @args (consumed) through the dispatcher. */
static int call(uint16_t op, json_t *args)
{
	struct fuzz_call *fc;
	char *text = json_dumps(args, JSON_COMPACT);
	int st;

	json_decref(args);
	fc = text ? (struct fuzz_call *)dispatch_call_create(sizeof(*fc)) : NULL;
	if (!fc) {
		free(text);
		return -ENOMEM;
	}
	fc->dc.cl = &client;
	fc->dc.hdr.op = op;
	fc->dc.hdr.len = (uint32_t)strlen(text);
	fc->dc.body = (uint8_t *)text;
	fc->dc.done = call_done;
	dispatch_call(&fc->dc);
	while (!fc->done)
		uv_run(loop, UV_RUN_ONCE);
	st = fc->dc.status;
	dispatch_call_destroy(&fc->dc);
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
	if (reg_init(&cfg) < 0)
		abort();
	loop = uv_default_loop();
	dispatch_init(&cfg);
	dispatch_loop_attach(loop);
	if (reg_loop_start(loop) < 0 || reg_loop_attach(loop) < 0)
		abort();
	client.peer.uid = getuid();
	client.peer.gid = getgid();
	client.peer.ngroups = -1;
	if (dispatch_client_init(&client) < 0)
		abort();
	client.hello_done = 1;
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
		return 0; /* the dispatcher refuses it before any handler */
	}
	call(op, args);
	/* a dataset the input opened is closed again: a fresh handle table */
	dispatch_client_fini(&client);
	if (dispatch_client_init(&client) < 0)
		abort();
	/* an export by the input is undone, so the next input finds the pool */
	if (op == PROTO_OP_POOL_EXPORT)
		call(PROTO_OP_POOL_IMPORT, json_pack("{s:s}", "name", "fz"));
	return 0;
}
