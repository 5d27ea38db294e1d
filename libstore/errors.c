/* SPDX-License-Identifier: MIT */
/* stor_strerror() and stor_errname(), expanded from STOR_ERRNO_MAP in store.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "store.h"

const char *stor_strerror(int err)
{
	switch (err) {
#define XX(name, val, msg) \
	case STOR_##name:  \
		return msg;
		STOR_ERRNO_MAP(XX)
#undef XX
	case 0:
		return "success";
	}
	if (err < 0 && err > -4096)
		return strerror(-err);
	return "unknown error";
}

const char *stor_errname(int err)
{
	switch (err) {
#define XX(name, val, msg) \
	case STOR_##name:  \
		return #name;
		STOR_ERRNO_MAP(XX)
#undef XX
	case 0:
		return "OK";
	}
	if (err < 0 && err > -4096) {
		const char *n = strerrorname_np(-err);
		return n ? n : "EUNKNOWN";
	}
	return "EUNKNOWN";
}
