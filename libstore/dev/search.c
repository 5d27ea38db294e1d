/* SPDX-License-Identifier: MIT */
/*
 * Import by searching (zpool import -d): read the LUN labels of the files
 * and block devices in some directories and put pools together from them,
 * by pool GUID, LUN index and LUN GUID, wherever the files now sit. A search
 * only reads: each candidate is opened read-only and unclaimed (LUN_PEEK),
 * so it neither writes, nor locks, nor disturbs a pool that has it open.
 *
 * What is a candidate: a regular file or block device directly in a given
 * directory; a symbolic link only if it leads to a block device (udev's
 * /dev/disk/by-id is all links), never one to a file elsewhere, so a search
 * of a directory does not wander into other trees. The file type is looked
 * at before the open (a FIFO would block it) and the open checks it again
 * on the descriptor (lun_file.c). No recursion. A "directory" rados:POOL is
 * the RADOS pool's LUNs, each opened as a file would be. Opening a pool at the paths
 * found is stor_pool_open()'s, with opts->lun_paths.
 *
 * An index that a label of the pool names detached (format.h) is neither
 * found nor missing: detached for good, its own label wiped, and a file
 * that still carries it (a wipe that failed) is a stale copy, not a side.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dev/lun_impl.h"
#include "store.h"

struct found {
	struct lun_label lab;
	char *path;
	size_t seq; /* order found: which of two of one index comes first */
};

struct found_set {
	struct found *v;
	size_t n, cap;
};

/* May @dir/@name be a LUN: a regular file, a block device, or a link to one? */
static int candidate(int dfd, const char *name)
{
	struct stat st;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
		return 1;
	return S_ISLNK(st.st_mode) && fstatat(dfd, name, &st, 0) == 0 && S_ISBLK(st.st_mode);
}

/* Keep the label of @path if it is a sound one of this format. */
static int read_one(struct found_set *fs, const char *path)
{
	struct lun *l = NULL;
	struct lun_label lab;
	unsigned bad;
	int ret;

	/* LUN_NEW: a link is followed only to a block device, judged on the descriptor */
	if (lun_open(path, LUN_PEEK | LUN_NEW, 0, &l) < 0)
		return 0;
	ret = lun_label_read(l, &lab, &bad);
	lun_close(l);
	if (ret < 0)
		return 0;
	for (size_t i = 0; i < fs->n; i++)
		if (fs->v[i].lab.pool_guid == lab.pool_guid && fs->v[i].lab.lun_guid == lab.lun_guid)
			return 0; /* the same LUN by another path: the first one stays */
	if (fs->n == fs->cap) {
		size_t cap = fs->cap ? fs->cap * 2 : 16;
		struct found *v = realloc(fs->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		fs->v = v;
		fs->cap = cap;
	}
	fs->v[fs->n].lab = lab;
	fs->v[fs->n].seq = fs->n;
	fs->v[fs->n].path = strdup(path);
	if (!fs->v[fs->n].path)
		return -ENOMEM;
	fs->n++;
	return 0;
}

static int search_dir(struct found_set *fs, const char *dir)
{
	struct dirent **ents = NULL;
	int n, dfd, ret = 0;

	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return 0; /* a directory that is not there has nothing to import */
	/* name order: the same LUNs give the same listing */
	n = scandirat(dfd, ".", &ents, NULL, alphasort);
	for (int i = 0; i < n; i++) {
		char path[4096];

		if (ret == 0 && ents[i]->d_name[0] != '.' && candidate(dfd, ents[i]->d_name) &&
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, ents[i]->d_name) <
			    sizeof(path))
			ret = read_one(fs, path);
		free(ents[i]);
	}
	free(ents);
	close(dfd);
	return ret;
}

static int read_rados(const char *path, void *ctx)
{
	return read_one(ctx, path);
}

/* The LUNs of a RADOS pool: its ".lun" objects (lun_rados.c). A pool that
 * cannot be listed has nothing to import, as a missing directory. */
static int search_rados(struct found_set *fs, const char *pool)
{
	int ret = lun_rados_list(pool, read_rados, fs);

	return ret == -ENOMEM ? ret : 0;
}

static int by_pool_then_index(const void *a, const void *b)
{
	const struct lun_label *x = &((const struct found *)a)->lab;
	const struct lun_label *y = &((const struct found *)b)->lab;

	if (x->pool_guid != y->pool_guid)
		return x->pool_guid < y->pool_guid ? -1 : 1;
	if (x->index != y->index)
		return x->index < y->index ? -1 : 1;
	return ((const struct found *)a)->seq < ((const struct found *)b)->seq ? -1 : 1;
}

static int is_detached(const uint8_t *bits, unsigned idx)
{
	return idx < STOR_LUNS_MAX && (bits[idx / 8] & (1u << idx % 8));
}

/* Could @missing LUNs all be sides of the mirrors the labels v[0, n) name,
 * each of which keeps a side found? Labels say a side's vdev and width,
 * not which index a missing side had: the import's pool record does. The
 * labels of detached indexes (@bits) count for nothing. */
static int mirrors_cover(const struct found *v, size_t n, const uint8_t *bits, unsigned missing)
{
	unsigned lacking = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned found = 0, width = 0;
		int seen = 0;

		if (v[i].lab.sides <= 1 || is_detached(bits, v[i].lab.index))
			continue;
		/* each mirror once, at the first of its labels found */
		for (size_t j = 0; j < i && !seen; j++)
			seen = v[j].lab.sides > 1 && v[j].lab.vdev == v[i].lab.vdev &&
			       !is_detached(bits, v[j].lab.index);
		if (seen)
			continue;
		for (size_t j = 0; j < n; j++) {
			if (v[j].lab.sides <= 1 || v[j].lab.vdev != v[i].lab.vdev ||
			    is_detached(bits, v[j].lab.index))
				continue;
			found++;
			width = v[j].lab.sides > width ? v[j].lab.sides : width;
		}
		lacking += found < width ? width - found : 0;
	}
	return missing <= lacking;
}

/* Report the pool of the labels v[0, n) (one pool GUID, sorted by index). */
static int report(const struct found *v, size_t n,
		  int (*fn)(const struct stor_found_pool *pool, void *ctx), void *ctx)
{
	struct stor_found_pool sp = { .guid = v[0].lab.pool_guid, .state = STOR_FOUND_EXPORTED };
	uint8_t bits[LABEL_DETACHED_LEN] = { 0 }, *detached;
	const char **paths;
	int ret;

	for (size_t i = 0; i < n; i++) {
		/* detached is for good: what any label says, the pool has */
		for (unsigned b = 0; b < LABEL_DETACHED_LEN; b++)
			bits[b] |= v[i].lab.detached[b];
		/* each label says how many LUNs the pool had when it was written
		 * (import, export, add rewrite them all): the most is the newest */
		if (v[i].lab.nluns > sp.nluns)
			sp.nluns = v[i].lab.nluns;
		if (v[i].lab.index >= sp.nluns)
			sp.nluns = v[i].lab.index + 1;
		if (v[i].lab.state != LABEL_EXPORTED)
			sp.state = STOR_FOUND_ACTIVE;
	}
	if (sp.nluns > STOR_LUNS_MAX)
		return 0; /* not a label we wrote */
	snprintf(sp.name, sizeof(sp.name), "%s", v[0].lab.pool_name);
	sp.hostid = v[0].lab.hostid;
	paths = calloc(sp.nluns, sizeof(*paths));
	detached = calloc(sp.nluns, 1);
	if (!paths || !detached) {
		free(paths);
		free(detached);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < sp.nluns; i++)
		if (is_detached(bits, i)) {
			detached[i] = 1;
			sp.ndetached++;
		}
	for (size_t i = 0; i < n; i++) {
		/* two LUNs of one index (a stale copy of a file): the first in name order */
		if (paths[v[i].lab.index] || detached[v[i].lab.index])
			continue;
		paths[v[i].lab.index] = v[i].path;
		sp.nfound++;
	}
	sp.complete = sp.nfound + sp.ndetached == sp.nluns;
	sp.degraded = !sp.complete &&
		      mirrors_cover(v, n, bits, sp.nluns - sp.nfound - sp.ndetached);
	sp.paths = paths;
	sp.detached = detached;
	ret = fn(&sp, ctx);
	free(paths);
	free(detached);
	return ret;
}

int stor_pool_search(const char *const *dirs, size_t ndirs,
		   int (*fn)(const struct stor_found_pool *pool, void *ctx), void *ctx)
{
	struct found_set fs = { 0 };
	int ret = 0, npools = 0;

	for (size_t i = 0; ret == 0 && i < ndirs; i++)
		ret = lun_path_is_rados(dirs[i]) ? search_rados(&fs, dirs[i]) : search_dir(&fs, dirs[i]);
	if (ret == 0 && fs.n)
		qsort(fs.v, fs.n, sizeof(*fs.v), by_pool_then_index);
	for (size_t i = 0, j; ret == 0 && i < fs.n; i = j) {
		for (j = i + 1; j < fs.n && fs.v[j].lab.pool_guid == fs.v[i].lab.pool_guid; j++)
			;
		ret = report(fs.v + i, j - i, fn, ctx);
		npools++;
	}
	for (size_t i = 0; i < fs.n; i++)
		free(fs.v[i].path);
	free(fs.v);
	return ret ? ret : npools;
}
