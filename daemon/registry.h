/* SPDX-License-Identifier: MIT */
/*
 * The daemon's pool registry: the pools it serves (imported at start from
 * <state_dir>/pools.list, created, imported, exported, destroyed), the
 * dataset handles each client holds on them with their counts, the
 * revocation of those handles by an administrator, and the access rules
 * (who is an administrator, who owns a dataset).
 *
 * Locking: the pool list is guarded by one rwlock (reg_lock). Imports,
 * exports, creates and destroys hold it for writing, every other call that
 * uses a pool for reading, so a pool cannot go while a call uses it. Handle
 * tables are touched on the loop thread only. Nothing here knows a
 * transport: the clients of any front end hold their handles here.
 */
#ifndef COFFERD_REGISTRY_H
#define COFFERD_REGISTRY_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <uv.h>

#include "conf.h"
#include "peer.h"
#include "proto.h"
#include "store.h"

/** One pool of the registry. */
struct pool_ent {
	char name[PROTO_NAME_MAX + 1];
	struct stor_pool *pool; /* NULL when faulted */
	char error[512];        /* why it is faulted */
	atomic_uint nhandles;   /* its users: reg_pool_ref() and reg_pool_unref() only */
	/* what the import replayed into LMDB from the LUNs (records_total 0: nothing) */
	struct stor_progress replayed;
	double replay_secs;
	struct pool_ent *next;
};

/* ---- life cycle ---- */

/** Remember @cfg, resolve admin_group, import every pool of pools.list. @return 0 or -errno */
int reg_init(const struct config *cfg);
/** Close every pool (commits the open txg). @return how many failed their final commit */
int reg_fini(void);
/** Renew the claims on LUNs from a timer of @loop, the main one. @return 0 */
int reg_loop_start(uv_loop_t *loop);
/** Stop renewing. */
void reg_loop_stop(void);
/**
 * Answer revocations on @loop, from its own thread (loops.c): the handle
 * tables of the clients made on it are its alone. @return 0 or -errno
 */
int reg_loop_attach(uv_loop_t *loop);
/** This loop's clients are gone; once every loop is, revocations get -ESHUTDOWN. */
void reg_loop_detach(void);

/* ---- pools (reg_lock held as the comments say) ---- */

/** Take the pool list's lock for reading, or for writing with @write. */
void reg_lock(int write);
void reg_unlock(void);
/** The first pool in name order, for listings (lock held); then ->next. */
struct pool_ent *reg_pools(void);
/** The pool named @name, or of the dataset @name ("tank" of "tank/a"), or NULL (lock held). */
struct pool_ent *reg_pool_of(const char *name);
/** Options for opening or creating a pool with LUNs of @lun_size bytes (0: as found). */
struct stor_pool_opts reg_pool_opts(uint64_t lun_size);
/** Add the created pool @pool as @name and remember it in pools.list (write lock). */
int reg_pool_add(const char *name, struct stor_pool *pool);
/**
 * Open pool @name with @opts (NULL: reg_pool_opts(0)) into a new entry
 * (named opts->new_name when the open renames it),
 * listed even if it fails (faulted, with its error text), unless
 * @keep_failed is 0; pools.list is not rewritten (reg_save). (write lock)
 * @param[out] err  0 or the negative code of the failure
 * @return the entry, or NULL (out of memory, or failed and not kept)
 */
struct pool_ent *reg_pool_import(const char *name, const struct stor_pool_opts *opts,
				 int keep_failed, int *err);
/** Rewrite pools.list from the list (write lock). */
void reg_save(void);
/** Unlink and free @pe (its pool already closed) and rewrite pools.list (write lock). */
void reg_pool_remove(struct pool_ent *pe);
/** Call @fn for each pool with metadata in the state directory that is not on the list. */
void reg_importable(void (*fn)(const char *name, void *arg), void *arg);
/** How far the import running now (if any) has replayed its log into LMDB. */
struct reg_import_progress {
	int running;                    /* an import is bringing LMDB up from the LUNs */
	char pool[PROTO_NAME_MAX + 1];
	struct stor_progress pr;
	double seconds;
};
/** A copy of the progress of the import running now; takes no registry lock. */
void reg_import_progress(struct reg_import_progress *out);

/** The lun_search directories of the configuration, ':'-separated ("" = none). */
const char *reg_lun_search(void);
/** The key_https_ca file of the configuration ("" = none). */
const char *reg_key_https_ca(void);

/* ---- access rules ---- */

/**
 * Is @p an administrator: uid 0, our uid, or a member of admin_group by its
 * gid, its supplementary groups or the group database (as a login gives them)?
 */
int reg_is_admin(const struct peer *p);
/**
 * May @p open dataset @name of @pool: an administrator, or the owner property
 * ("UID" or "UID:GID") names its uid or one of its groups.
 */
int reg_may_open(const struct peer *p, struct stor_pool *pool, const char *name);

/* ---- dataset handles of clients (loop thread) ---- */

struct reg_client;

/**
 * A new, empty handle table for a client of @p (copied) known as @id in
 * logs, connected through the front end named @front ("nbd": an export;
 * static text, or NULL). NULL: no memory
 */
struct reg_client *reg_client_new(const struct peer *p, uint64_t id, const char *front);
/** The client's connection is gone: a revocation leaves it no tombstone. */
void reg_client_closed(struct reg_client *cl);
/** The slot of @cl's stream in progress (one per client), which @free_fn
 *  frees when the client goes (no call of it in flight then). */
void **reg_client_stream(struct reg_client *cl, void (*free_fn)(void *stream));
/** Close every handle of @cl and free it. NULL is a no-op. */
void reg_client_free(struct reg_client *cl);
/**
 * Give the open dataset @ds of @pe (whose count was taken for it) the first
 * free handle number of @cl. @return the number or -ENOMEM
 */
int reg_handle_install(struct reg_client *cl, struct stor_ds *ds, struct pool_ent *pe);
/** Close handle @h (once its requests are done). @return 0 or -EBADF */
int reg_handle_close(struct reg_client *cl, uint32_t h);
/**
 * The dataset of handle @h for a request, counted in flight until
 * reg_handle_put(). @return 0, -ESTALE (revoked by an admin), -EBADF
 */
int reg_handle_get(struct reg_client *cl, uint32_t h, struct stor_ds **ds);
/** Is handle @h's dataset encrypted? Also 1 when @h names no open dataset (say so if unsure). */
int reg_handle_encrypted(const struct reg_client *cl, uint32_t h);
/** A request on @h (one reg_handle_get() that returned 0) is done. */
void reg_handle_put(struct reg_client *cl, uint32_t h);
/**
 * Count one more user of @pe (a dataset opened on it for a handle, a
 * receive in progress), so that export and destroy see it busy.
 */
void reg_pool_ref(struct pool_ent *pe);
/** Drop a count of @pe that reg_handle_install() did not take over. */
void reg_pool_unref(struct pool_ent *pe);

/* Which datasets of a pool reg_revoke_datasets() means by a name. */
#define REG_DS_ONE 0  /* the dataset itself */
#define REG_DS_TREE 1 /* it and its descendants */
#define REG_DS_KEY 2  /* the datasets whose encryptionroot it is */

/**
 * From a worker thread, registry lock held: the handles clients hold on the
 * datasets @which of @name in @pe; with @revoke they are revoked (requests
 * on them get -ESTALE) and closed once their requests in flight are done,
 * waited for up to 30 s, whoever opened them; the revocation is logged.
 * @return their number, -ENOMEM, -ETIMEDOUT or -ESHUTDOWN (daemon stopping)
 */
int reg_revoke_datasets(struct pool_ent *pe, const char *name, int which, int revoke, uid_t by);
/** Likewise every handle on @pe (export -f, destroy -f). */
int reg_revoke_pool(struct pool_ent *pe, uid_t by);
/**
 * From a worker thread, registry lock held: what holds @pe busy, in words
 * for a refusal ("tank/vm is exported over NBD (1 connection), tank/a is
 * open (2 handles on 1 connection)"), into @buf. @return the number of
 * handles (0: @buf is ""), -ETIMEDOUT or -ESHUTDOWN
 */
int reg_pool_users(struct pool_ent *pe, char *buf, size_t len);
/**
 * From a worker thread, registry lock held: the handles on the datasets and
 * snapshots of @pe whose name @named accepts (called on the loop thread);
 * with @revoke they are revoked as reg_revoke_datasets() does, else they
 * are said in words into @buf as reg_pool_users() says them.
 * @return their number, -ETIMEDOUT or -ESHUTDOWN
 */
int reg_named_users(struct pool_ent *pe, int (*named)(const char *name, const void *arg),
		    const void *arg, int revoke, uid_t by, char *buf, size_t len);

#endif
