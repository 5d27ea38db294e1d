/* SPDX-License-Identifier: MIT */
/*
 * The index of a dataset's snapshot names (snapnames.h says what and why).
 * Slots hold an index into ds->snaps plus one (0: empty), probed linearly
 * from the name's hash; the table is kept at most half full, so a miss -
 * every snapshot create asks for one - ends within a few slots. A dataset
 * with few snapshots is walked instead: a table buys nothing there.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ds/snapnames.h"

#define WALK_BELOW 16u

static const char *short_name(const struct snap *s)
{
	const char *at = strchr(s->name, '@');

	return at ? at + 1 : s->name;
}

static size_t slot_of(const struct stor_ds *ds, const char *snapname)
{
	return (size_t)XXH3_64bits(snapname, strlen(snapname)) & (ds->snap_index_cap - 1);
}

static void put(struct stor_ds *ds, size_t i)
{
	size_t k = slot_of(ds, short_name(ds->snaps[i]));

	while (ds->snap_index[k])
		k = (k + 1) & (ds->snap_index_cap - 1);
	ds->snap_index[k] = (uint32_t)i + 1;
	ds->snap_index_n = i + 1;
}

/* @return 0, or -1 when there is no memory for it (then the caller walks) */
static int rebuild(struct stor_ds *ds)
{
	size_t cap = 64;

	while (cap < 2 * ds->nsnaps)
		cap *= 2;
	if (cap != ds->snap_index_cap || !ds->snap_index) {
		uint32_t *t = malloc(cap * sizeof(*t));

		if (!t)
			return -1;
		free(ds->snap_index);
		ds->snap_index = t;
		ds->snap_index_cap = cap;
	}
	memset(ds->snap_index, 0, cap * sizeof(*ds->snap_index));
	ds->snap_index_n = 0;
	for (size_t i = 0; i < ds->nsnaps; i++)
		put(ds, i);
	return 0;
}

static struct snap *find(struct stor_ds *ds, const char *snapname)
{
	if (ds->nsnaps >= WALK_BELOW && ds->nsnaps <= UINT32_MAX &&
	    (ds->snap_index_n == ds->nsnaps || rebuild(ds) == 0)) {
		for (size_t k = slot_of(ds, snapname); ds->snap_index[k];
		     k = (k + 1) & (ds->snap_index_cap - 1)) {
			struct snap *s = ds->snaps[ds->snap_index[k] - 1];

			if (!strcmp(short_name(s), snapname))
				return s;
		}
		return NULL;
	}
	for (size_t i = 0; i < ds->nsnaps; i++)
		if (!strcmp(short_name(ds->snaps[i]), snapname))
			return ds->snaps[i];
	return NULL;
}

struct snap *snap_names_find(struct stor_ds *ds, const char *snapname)
{
	struct snap *s;

	/* a lookup may rebuild the table: two at once must not */
	pthread_mutex_lock(&ds->pool->snap_lock);
	s = find(ds, snapname);
	pthread_mutex_unlock(&ds->pool->snap_lock);
	return s;
}

void snap_names_added(struct stor_ds *ds)
{
	if (ds->snap_index && ds->snap_index_n + 1 == ds->nsnaps &&
	    2 * ds->nsnaps <= ds->snap_index_cap)
		put(ds, ds->nsnaps - 1);
	else
		snap_names_stale(ds);
}

void snap_names_stale(struct stor_ds *ds)
{
	ds->snap_index_n = SIZE_MAX;
}

void snap_names_free(struct stor_ds *ds)
{
	free(ds->snap_index);
	ds->snap_index = NULL;
	ds->snap_index_cap = 0;
	snap_names_stale(ds);
}
