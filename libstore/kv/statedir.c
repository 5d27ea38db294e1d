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
 * One place names them, so create, destroy, rename, the key file and the LUN checks
 * agree. Nothing here opens a pool or knows what the files hold.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv/statedir.h"
#include "store.h"

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

/* The names of a pool's files, as suffixes of its meta path ("": the .mdb). */
static const char *const pool_files[] = { "", "-lock", ".lock" };

#define POOL_FILES 6 /* the three above, two key file copies, the LUN list */

static void file_of(const char *meta_path, int i, char *out, size_t len)
{
	if (i < 3)
		snprintf(out, len, "%s%s", meta_path, pool_files[i]);
	else if (i < 5)
		statedir_keyfile_path(meta_path, i - 3, out, len);
	else
		statedir_luns_path(meta_path, out, len);
}

int statedir_rename_pool(const char *from, const char *to)
{
	char a[4200], b[4200];
	unsigned made = 0;
	int ret = 0;

	/* links first: at every moment each file has at least one of its names */
	for (int i = 0; ret == 0 && i < POOL_FILES; i++) {
		file_of(from, i, a, sizeof(a));
		file_of(to, i, b, sizeof(b));
		/* a lock file left by a pool of that name destroyed long ago */
		if (i == 1 || i == 2)
			unlink(b);
		if (link(a, b) == 0)
			made |= 1u << i;
		else if (!(errno == ENOENT && i > 0))
			ret = -errno;
	}
	for (int i = 0; ret < 0 && i < POOL_FILES; i++) {
		file_of(to, i, b, sizeof(b));
		if (made & (1u << i))
			unlink(b);
	}
	if (ret == 0)
		ret = statedir_sync(to);
	for (int i = 0; ret == 0 && i < POOL_FILES; i++) {
		file_of(from, i, a, sizeof(a));
		if (made & (1u << i))
			unlink(a);
	}
	return ret == 0 ? statedir_sync(to) : ret;
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
