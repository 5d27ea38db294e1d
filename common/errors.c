/* SPDX-License-Identifier: MIT */
/*
 * The texts and names of return codes: STOR_ERRNO_MAP of store.h is expanded
 * here and nowhere else (libuv's UV_ERRNO_MAP likewise). The daemon's
 * proto_strerror() and the client's reports call stor_strerror() and
 * stor_errname() instead of expanding the map again. (A failed STOR_ASSERT is
 * reported by libstore/base/stor_assert.c.)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const struct stor_err {
	int code;
	const char *name, *msg;
} errs[] = {
#define XX(name, val, msg) { STOR_##name, #name, msg },
	STOR_ERRNO_MAP(XX)
#undef XX
};

/* The map's entry for @err, or NULL for 0, -errno and unknown codes. */
static const struct stor_err *lookup(int err)
{
	for (size_t i = 0; i < sizeof(errs) / sizeof(errs[0]); i++)
		if (errs[i].code == err)
			return &errs[i];
	return NULL;
}

const char *stor_strerror(int err)
{
	const struct stor_err *e = lookup(err);

	if (e)
		return e->msg;
	if (err == 0)
		return "success";
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

const char *stor_errname(int err)
{
	const struct stor_err *e = lookup(err);

	if (e)
		return e->name;
	if (err == 0)
		return "OK";
	if (err < 0 && err > -4096) {
		const char *n = strerrorname_np(-err);
		return n ? n : "EUNKNOWN";
	}
	return "EUNKNOWN";
}
