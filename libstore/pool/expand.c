/* SPDX-License-Identifier: MIT */
/*
 * A LUN that grew, online (pool online -e, as zpool online -e): the file
 * extended or the RADOS LUN's size object rewritten (lun_grow), its labels
 * rewritten for the new end, and the new sectors given to the allocator,
 * while the pool serves.
 *
 * Order, for a crash at any point: the backing grows first; its labels
 * follow (a crash before leaves a front label of the old size and no end
 * copy at the new end, which the import repairs, as for a file grown while
 * the pool was exported); the allocator hands out the new sectors last, so
 * nothing is written there before both labels say the LUN is that large.
 * The pool record, which keeps each LUN's end to find a truncated file,
 * is saved with the new end at once.
 *
 * A mirror's vdev is as large as its smallest side: the space grows when
 * the last side has grown. A LUN that the import found cut short does not
 * grow: block pointers still name sectors past its cut.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "base/pool_error.h"
#include "dev/alloc.h"
#include "dev/lun.h"
#include "dev/lunset.h"
#include "dev/mirror.h"
#include "pool_impl.h"
#include "store.h"
#include "txg/pool_record.h"

/* The data size of vdev @vdev: its smallest side open and attached. */
static uint64_t vdev_data_size(struct stor_pool *p, unsigned vdev)
{
	unsigned n = p->luns[vdev].nsides ? p->luns[vdev].nsides : 1;
	uint64_t min = UINT64_MAX;

	for (unsigned s = 0; s < n; s++) {
		unsigned i = p->luns[vdev].nsides ? p->luns[vdev].side[s] : vdev;
		uint64_t sz;

		if (p->luns[i].absent || atomic_load(&p->luns[i].state) == SIDE_DETACHED)
			continue;
		sz = lun_data_size(p->luns[i].lun);
		if (sz < min)
			min = sz;
	}
	return min == UINT64_MAX ? 0 : min;
}

/* Both label copies of lun @idx for its size now. */
static int relabel(struct stor_pool *p, unsigned idx)
{
	struct lun *l = p->luns[idx].lun;
	struct lun_label lab;
	unsigned bad;
	int ret = lun_label_read(l, &lab, &bad);

	if (ret == 0) {
		lab.size = lun_size(l);
		ret = lun_label_write(l, &lab);
	}
	if (ret < 0)
		pool_set_error("lun %u (%s): label write: %s", idx, lun_path(l), stor_strerror(ret));
	return ret;
}

int stor_pool_expand(struct stor_pool *p, const char *lun, uint64_t size)
{
	struct pool_lun *pl;
	uint64_t was;
	int idx, ret;

	pool_clear_error();
	pthread_mutex_lock(&p->admin);
	idx = lunset_index(p, lun);
	if (idx < 0) {
		pool_set_error("%s: no such LUN in pool %s", lun, p->name);
		ret = -ENOENT;
		goto out;
	}
	pl = &p->luns[idx];
	if (pl->absent || atomic_load(&pl->state) == SIDE_DETACHED) {
		pool_set_error("lun %d (%s): not open in the pool (online it first)", idx,
			       lun_path(pl->lun));
		ret = -ENXIO;
		goto out;
	}
	if (pl->cut) {
		pool_set_error("lun %d (%s): cut short at import; records past its cut are "
			       "lost, and it grows only once they are destroyed and it is imported "
			       "again",
			       idx, lun_path(pl->lun));
		ret = -EINVAL;
		goto out;
	}
	was = lun_size(pl->lun);
	ret = lun_grow(pl->lun, size);
	if (ret < 0) {
		if (ret == -EINVAL)
			pool_set_error("lun %d (%s): %llu bytes is below its size, %llu: a LUN "
				       "never shrinks",
				       idx, lun_path(pl->lun), (unsigned long long)size,
				       (unsigned long long)was);
		else if (ret == -ERANGE)
			pool_set_error("lun %d (%s): it is smaller than the pool has it (%llu "
				       "bytes): it was truncated",
				       idx, lun_path(pl->lun), (unsigned long long)was);
		else
			pool_set_error("lun %d (%s): cannot grow: %s", idx, lun_path(pl->lun),
				       stor_strerror(ret));
		goto out;
	}
	if (lun_size(pl->lun) != was) {
		ret = relabel(p, (unsigned)idx);
		if (ret < 0)
			goto out;
	}
	ret = alloc_grow(p->alloc, pl->vdev, vdev_data_size(p, pl->vdev) / STOR_SECTOR);
	if (ret == 0)
		ret = pool_save_config(p);
out:
	pthread_mutex_unlock(&p->admin);
	return ret;
}
