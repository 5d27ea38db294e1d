// SPDX-License-Identifier: MIT
/*
 * The allocation map of a dataset (stor_ds_map): which records of a range
 * have a block pointer, found as a read finds them (the open and the
 * committing txg first, then LMDB), in batches, coalesced into runs. A
 * record never written or wholly discarded is a hole and reads as zeros,
 * so a copy that skips holes stays sparse (NBD's base:allocation).
 */
#include <errno.h>
#include <stdlib.h>

#include "pool_impl.h"
#include "txg/txg.h"

#define MAP_BATCH 1024u /* records looked up at once */

int stor_ds_map(struct stor_ds *ds, uint64_t off, uint64_t len, stor_map_fn fn, void *arg)
{
	uint64_t rs = ds->recsize, end, first, last, run_off = off;
	uint64_t *ids, *recnos;
	struct bp *bps;
	int *found, run_alloc = -1, ret = 0;

	if (len == 0)
		return 0;
	end = atomic_load(&ds->volsize);
	if (off >= end || len > end - off)
		return STOR_ERANGE;
	if (ds->snap) /* its pointers are spread over several tables: all data */
		return fn(off, len, 1, arg);
	end = off + len;
	first = off / rs;
	last = (end - 1) / rs;
	ids = malloc(MAP_BATCH * (2 * sizeof(*ids) + sizeof(*found)));
	bps = malloc(MAP_BATCH * sizeof(*bps));
	if (!ids || !bps) {
		free(ids);
		free(bps);
		return -ENOMEM;
	}
	recnos = ids + MAP_BATCH;
	found = (int *)(recnos + MAP_BATCH);
	for (uint64_t rec = first; rec <= last && ret == 0;) {
		size_t n = last - rec + 1 < MAP_BATCH ? (size_t)(last - rec + 1) : MAP_BATCH;

		for (size_t i = 0; i < n; i++) {
			ids[i] = ds->id;
			recnos[i] = rec + i;
		}
		ret = txg_lookup(ds->pool, n, ids, recnos, bps, found);
		for (size_t i = 0; i < n && ret == 0; i++) {
			uint64_t r_off = (rec + i) * rs;
			int a = found[i] != 0;

			if (r_off < off)
				r_off = off;
			if (a == run_alloc)
				continue;
			if (run_alloc >= 0)
				ret = fn(run_off, r_off - run_off, run_alloc, arg);
			run_off = r_off;
			run_alloc = a;
		}
		rec += n;
	}
	if (ret == 0 && run_alloc >= 0)
		ret = fn(run_off, end - run_off, run_alloc, arg);
	free(ids);
	free(bps);
	return ret;
}
