/* SPDX-License-Identifier: MIT */
/*
 * A dataset's snapshots by the name after '@' (snapnames.c): the lookup of
 * every get, list row, create, destroy and rollback, which walked all the
 * dataset's snapshots and made `list -t snapshot` cost O(n) a row.
 *
 * An open-addressed table of indexes into ds->snaps, built on the first
 * lookup after a change that moved them and kept up by the appends that
 * snapshot creates are. It is read and changed under the pool's snap_lock,
 * as ds->snaps is changed: snap_names_find() takes it (a lookup may
 * rebuild the table, so no caller may hold it), and every change of
 * ds->snaps or of a snapshot's name, made with it held, calls
 * snap_names_added() or snap_names_stale().
 */
#ifndef STOR_DS_SNAPNAMES_H
#define STOR_DS_SNAPNAMES_H

#include "pool_impl.h"

/** The snapshot of @ds named @snapname (the part after '@'), or NULL. */
struct snap *snap_names_find(struct stor_ds *ds, const char *snapname);
/** ds->snaps gained its last entry (the newest): index it if the table has room. */
void snap_names_added(struct stor_ds *ds);
/** ds->snaps moved, lost an entry, or a name changed: rebuild at the next lookup. */
void snap_names_stale(struct stor_ds *ds);
/** Free the table (the dataset goes). */
void snap_names_free(struct stor_ds *ds);

#endif
