/* SPDX-License-Identifier: MIT */
/*
 * What a LUN path may be, in one place for the client, the daemon's
 * request checks and lun_open(): an absolute path of a file or block
 * device, or "rados:POOL/PREFIX", a LUN on Ceph RADOS (lun_rados.c).
 * A relative path is never one: taken from some working directory it
 * would quietly make a file there.
 */
#include <string.h>

#include "lun_impl.h"
#include "store.h"

int lun_path_is_rados(const char *path)
{
	return !strncmp(path, LUN_RADOS_PREFIX, strlen(LUN_RADOS_PREFIX));
}

int stor_lun_path_ok(const char *path)
{
	return path[0] == '/' || lun_path_is_rados(path);
}
