/* SPDX-License-Identifier: MIT */
/*
 * The layout of the state directory: where a pool's files are, and the
 * directory fsync that makes a file created or renamed there stay.
 *   <state_dir>/pools/<pool>.mdb            LMDB environment (meta_lmdb.c)
 *   <state_dir>/pools/<pool>.mdb-lock       LMDB's reader table
 *   <state_dir>/pools/<pool>.mdb.lock       flock'ed: one opener (pool.c)
 *   <state_dir>/pools/<pool>.keys, .keys.1  the key file's copies (keyfile.c)
 *   <state_dir>/pools/<pool>.luns           the LUN paths, one a line: where an
 *                                           import finds the LUNs without LMDB (pool.c)
 * One place names them, so create, destroy, the key file and the LUN checks
 * agree. Nothing here opens a pool or knows what the files hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_impl.h"

int statedir_sync(const char *path)
{
	char dir[4200];
	int fd, ret = 0;

	snprintf(dir, sizeof(dir), "%s", path);
	fd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

char *statedir_meta_path(const char *state_dir, const char *name)
{
	char *p = NULL;

	if (asprintf(&p, "%s/pools/%s.mdb", state_dir, name) < 0)
		return NULL;
	return p;
}

char *statedir_of(const char *meta_path, const char *name)
{
	size_t n = strlen(meta_path), tail = strlen("/pools/") + strlen(name) + strlen(".mdb");

	return n > tail ? strndup(meta_path, n - tail) : NULL;
}

int statedir_has_pool(const char *state_dir, const char *name)
{
	char *path = statedir_meta_path(state_dir, name);
	int ret;

	if (!path)
		return -ENOMEM;
	ret = access(path, F_OK) == 0;
	free(path);
	return ret;
}

void statedir_keyfile_path(const char *meta_path, int copy, char *out, size_t len)
{
	size_t n = strlen(meta_path);

	/* pools/<pool>.mdb -> pools/<pool>.keys, pools/<pool>.keys.1 */
	snprintf(out, len, "%.*s.keys%s", (int)(n > 4 ? n - 4 : n), meta_path, copy ? ".1" : "");
}

void statedir_luns_path(const char *meta_path, char *out, size_t len)
{
	size_t n = strlen(meta_path);

	snprintf(out, len, "%.*s.luns", (int)(n > 4 ? n - 4 : n), meta_path);
}

int statedir_remove_pool(const char *meta_path)
{
	const char *const suffix[] = { "-lock", ".lock" };
	char path[4200];
	int ret = unlink(meta_path) < 0 ? -errno : 0;

	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s%s", meta_path, suffix[i]);
		unlink(path);
	}
	for (int copy = 0; copy < 2; copy++) {
		statedir_keyfile_path(meta_path, copy, path, sizeof(path));
		unlink(path);
	}
	statedir_luns_path(meta_path, path, sizeof(path));
	unlink(path);
	return ret;
}
