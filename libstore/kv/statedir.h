/* SPDX-License-Identifier: MIT */
/* statedir.c's functions inside libstore (its head comment says the rest). */
#ifndef STOR_STATEDIR_H
#define STOR_STATEDIR_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

/** fsync the directory holding @path, so a file created or renamed there stays. */
int statedir_sync(const char *path);

/** <state_dir>/pools/<name>.mdb, malloc'ed; NULL on ENOMEM. */
char *statedir_meta_path(const char *state_dir, const char *name);

/** The state directory of pool @name from its statedir_meta_path(); malloc'ed or NULL. */
char *statedir_of(const char *meta_path, const char *name);

/** Does pool @name have metadata in @state_dir? 1, 0 or -ENOMEM */
int statedir_has_pool(const char *state_dir, const char *name);

/** Path of key file copy @copy (0 or 1) of the pool whose metadata is @meta_path. */
void statedir_keyfile_path(const char *meta_path, int copy, char *out, size_t len);

/** Give the files of the pool at @from (a meta path) the names of @to:
 *  -EEXIST if one is taken (nothing renamed then). */
int statedir_rename_pool(const char *from, const char *to);

/** Path of the list of LUN paths of the pool whose metadata is @meta_path:
 *  where an import looks for its LUNs when the metadata is missing. */
void statedir_luns_path(const char *meta_path, char *out, size_t len);

/** Remove the metadata, its lock files and the key file copies of a pool.
 *  @return 0 or -errno of removing the metadata itself */
int statedir_remove_pool(const char *meta_path);

#endif
