/* SPDX-License-Identifier: MIT */
/* dataset.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_DATASET_H
#define STOR_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "pool_impl.h"

struct kids_join;
struct meta_txn;
struct recv_identity;
struct snap;

struct stor_ds *ds_find_locked(struct stor_pool *p, const char *name);
/** The index in p->ds (sorted by name) of the first dataset whose name is
 *  not below @name: the descendants of "a" are those from "a/" on that
 *  begin with it. */
size_t ds_lower_bound_locked(struct stor_pool *p, const char *name);

struct stor_ds *ds_find_id_locked(struct stor_pool *p, uint64_t id);

/** The index in p->ds of @ds's parent, or SIZE_MAX (the pool's root). */
size_t ds_parent_index_locked(struct stor_pool *p, const struct stor_ds *ds);

int ds_load_all(struct stor_pool *p);

void ds_free(struct stor_ds *ds);

int ds_save(struct stor_pool *p, struct stor_ds *ds);

/** Put the record of @ds in @t (a read-write transaction). */
int ds_save_txn(struct meta_txn *t, struct stor_ds *ds);

/** The record of @ds, malloc'ed, in *@out. @return 0 or -ENOMEM */
int ds_record(struct stor_ds *ds, uint8_t **out, size_t *len);

/** Property @name as shown where it has no value: "-", source STOR_SRC_NONE. */
void ds_value_none(struct stor_prop_value *v, const char *name);
/** Property @id of @ds as a get shows it (admin lock held). */
void ds_value_locked(struct stor_pool *p, struct stor_ds *ds, int id, struct stor_prop_value *v);
/** Effective (local or inherited) value of @id for @ds; admin lock held. */
const char *ds_prop_locked(struct stor_pool *p, struct stor_ds *ds, int id, struct stor_ds **from);

/** Create a dataset; a clone when @origin is set (dataset.c). Admin lock held. */
int ds_create_locked(struct stor_pool *p, const char *name, const struct stor_ds_opts *o,
		     struct snap *origin, struct stor_ds **out);

/** Destroy @name as stor_ds_destroy() does; admin lock held. */
int ds_destroy_locked(struct stor_pool *p, const char *name, unsigned flags);

/** Destroy @seeds, with -r (@flags) their descendants and snapshots, with -R
 *  the clones of those too, recursively, all in one txg; admin lock held.
 *  @return 0, -EBUSY (with the reason: children, snapshots or clones and no
 *  flag for them, open, or the pool's root among them) */
int ds_destroy_set_locked(struct stor_pool *p, struct stor_ds *const *seeds, size_t nseeds,
			  unsigned flags);

/** What a destroy would take (stor_destroy_plan): names in the order listed,
 *  and the bytes it would free. */
struct destroy_plan {
	char **names;
	size_t n;
	uint64_t bytes;
};
int destroy_plan_add(struct destroy_plan *pl, const char *name);
void destroy_plan_free(struct destroy_plan *pl);

/** The dry run of ds_destroy_set_locked(): doomed_locked()'s very list and
 *  refusals, nothing changed. Each dataset it takes goes into @pl (its
 *  snapshots first, children before parents) with its space (own data,
 *  snapshots, unused refreservation). With @gone, the datasets taken, a
 *  NULL-terminated array to free. Admin lock held. */
int ds_destroy_plan_locked(struct stor_pool *p, struct stor_ds *const *seeds, size_t nseeds,
			   unsigned flags, struct destroy_plan *pl, struct stor_ds ***gone);

int pool_create_root(struct stor_pool *p);

/** Names of the table changed (rename.c): sort it again, and refresh what
 *  @top and its descendants inherit (NULL: none moved). Admin lock held. */
void ds_table_renamed_locked(struct stor_pool *p, struct stor_ds *top);


/** What received @ds joins as its receive ends: its encrypted parent's list
 *  (@join->mk set, a reference), or nothing. @return 0 or STOR_ENOKEY */
int ds_list_join(struct stor_pool *p, struct stor_ds *ds, struct kids_join *join);

/** Create @name for a receive, marked as being received (@id); a raw
 *  stream's copy takes its GUID and its encryption root's wrapping from
 *  @id, and no key. Admin lock held. */
int ds_create_received_locked(struct stor_pool *p, const char *name,
			      const struct stor_ds_opts *o, const struct recv_identity *id,
			      struct stor_ds **out);

/** @ds, received under a name of its own (receive -F), takes @name, whose
 *  dataset is destroyed already; its mark becomes @mark in the same commit. */
int ds_rename_received(struct stor_pool *p, struct stor_ds *ds, const char *name, unsigned mark);

#endif
