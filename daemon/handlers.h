/* SPDX-License-Identifier: MIT */
/*
 * The bodies of the JSON commands of the table in proto.h. The dispatcher
 * has done the generic work before a handler runs (dispatch.h): the peer may
 * call the command, the target name is valid, the registry lock the table
 * asks for is held and the target's pool was looked up and is in the state
 * the table asks for. A handler reads what it was given, fills @reply or
 * returns a negative code, and knows no connection.
 */
#ifndef COFFERD_HANDLERS_H
#define COFFERD_HANDLERS_H

#include <jansson.h>

#include "proto.h"
#include "registry.h"

/** One JSON command, as the dispatcher resolved it. */
struct hcall {
	const struct proto_cmd *cmd;
	const struct peer *peer;   /* the caller */
	struct reg_client *client; /* the caller's dataset handles */
	json_t *args;              /* the request object */
	const uint8_t *data;       /* CMD_DATA: the bytes after the object's NUL */
	size_t data_len;
	const char *name;          /* the checked target ("name"), NULL if none */
	struct pool_ent *pe;       /* the target's pool entry (CMD_LOCK), NULL if none */
	struct stor_pool *pool;    /* pe->pool where the table asks for an online pool */
	/* out */
	json_t *reply;             /* the reply object; {} if left NULL on success */
	const char *verb;          /* what failed, for the dispatcher's error text */
	char detail[512];          /* libstore's word on it (stor_pool_last_error()), copied:
				    * a later libstore call may clear the thread's */
	char err[1024];            /* a handler's own error text; wins over the above */
	uint8_t *out_data;         /* CMD_DATA: bytes to send after the reply's NUL (malloc'd) */
	size_t out_len;
	int out_plain;               /* out_data may hold plaintext: wiped before it is freed */
	struct stor_ds *opened;    /* ds_open: the dataset, for a handle */
	struct pool_ent *opened_pe; /* its pool, whose count was taken */
};

/* sendrecv.c: the handlers of send and receive */
int h_send(struct hcall *c);
int h_receive(struct hcall *c);

/** Run the handler of c->cmd. @return 0 or the negative status of the reply */
int handlers_run(struct hcall *c);

#endif
