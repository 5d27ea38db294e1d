/* SPDX-License-Identifier: MIT */
/*
 * What a LUN path may be, in one place for the client, the daemon's
 * request checks and lun_open(): an absolute path of a file or block
 * device, or "rados:POOL/PREFIX", a LUN on Ceph RADOS (lun_rados.c), both
 * POOL and PREFIX non-empty. A relative path is never one: taken from some
 * working directory it would quietly make a file there. What a scan may
 * look in: an absolute directory, or "rados:POOL".
 */
#include <string.h>

#include "common.h"

int lun_path_is_rados(const char *path)
{
	return !strncmp(path, LUN_RADOS_PREFIX, strlen(LUN_RADOS_PREFIX));
}

int stor_lun_path_ok(const char *path)
{
	const char *pool = path + strlen(LUN_RADOS_PREFIX), *slash;

	if (path[0] == '/')
		return 1;
	if (!lun_path_is_rados(path))
		return 0;
	slash = strchr(pool, '/');
	return slash && slash > pool && slash[1];
}

int stor_search_dir_ok(const char *dir)
{
	return dir[0] == '/' || (lun_path_is_rados(dir) && dir[strlen(LUN_RADOS_PREFIX)] &&
				 !strchr(dir, '/'));
}
