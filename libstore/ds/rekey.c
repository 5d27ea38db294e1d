/* SPDX-License-Identifier: MIT */
/*
 * Rekey: every record of an encrypted dataset sealed again under a new
 * master key, in the background, while the dataset serves I/O (coffer
 * rekey; after LUKS2's online reencryption, on a copy-on-write store where
 * a record sealed again is one more write).
 *
 * Generations. A dataset has at most two master keys, of generation 0 and
 * 1. A record's block pointer says which one sealed it (BP_F_KEYGEN), and
 * its data key is derived from that one (dskeys_data_key); writes seal
 * under the current one. The key file holds the current master key
 * wrapped and, while a rekey runs, the previous one beside it (keyfile.c).
 *
 * A rekey, step by step:
 * 1. Start (stor_rekey): the dataset's MAC tree is checked whole under its
 *    key, so nothing unverified is carried over, and every group is marked
 *    verified. Then a new master key is drawn and the key file saved with
 *    both (dskeys_new_gen: the commit point). From here a crash resumes
 *    at the next load-key.
 * 2. The switch (switch_tree): as one txg closes (txg_sync_close), under
 *    the write hold, the key state takes the new master as current and the
 *    MAC key derived from it; the commit of that txg rebuilds the dataset's
 *    MAC tree from its pointers under the new MAC key and records the
 *    tree's generation in the pool table ("rekey/" and the id). Group sums
 *    staged before are under the old key and applied before the rebuild,
 *    those staged after are under the new key and applied on top of it.
 *    Reads in between check no group: all were verified in step 1. From
 *    the commit on, the old key cannot forge a pointer either.
 * 3. The walk (rekey_main): the head's pointers in record order from a
 *    cursor, REKEY_BATCH at a time, then each snapshot's table the same
 *    way; each record still under the old generation is sealed again by
 *    record_reseal() (io/record.c, handed down as p->reseal), under its
 *    stripe, so a client's write of it in between wins: read, opened,
 *    sealed with a fresh nonce under the new key and written to a new
 *    extent, its pointer otherwise as it was. It keeps its birth, so every
 *    snapshot that read the old pointer reads this one (snapshot.c's read
 *    rule goes by birth), and nothing moves between tables: txg_stage()
 *    frees the old extent of a pointer of the same birth instead of
 *    keeping it for a snapshot. Paced to the rate asked, an eighth of it
 *    while clients' requests keep coming (pace). The table, the
 *    cursor and the counts go to the pool table about once a second: a
 *    pause, an export or a crash resumes there.
 * 4. The end: a commit makes every rewrite durable, then a walk of all the
 *    committed pointers of every table must find none of the old
 *    generation, or the walk starts over (a cursor edited offline skips
 *    nothing: the end is checked, not assumed). A commit then makes each
 *    snapshot's view root (bpmac.c) anew from its pointers, under the
 *    head's new MAC key: what a raw stream of it carries. With
 *    --scrub-free every free extent of the pool is then written over
 *    (scrub_free), the old ciphertext the rekey freed with them. Then the
 *    old master key leaves the key file
 *    (dskeys_drop_old: the commit point) and memory, with every data key
 *    derived from it; with --scrub-free a checkpoint of the metadata log
 *    then frees its older records, which hold the old key file, and they
 *    are written over too.
 *
 * What it protects against: someone who holds an older copy of the key
 * file with its passphrase or raw key, and the LUNs as they are after the
 * end. The old master opens no record: each record's generation bit names
 * the new key, a bit flipped back names a key the file no longer has, and
 * the MAC tree that covers the bit is under the new key. What it cannot:
 * copies taken before (backups of the LUN files, raw streams sent
 * elsewhere) stay under the old key, and so do freed extents on the LUNs
 * until they are written over, and the metadata log's older records the
 * old key file's bytes (the old master key wrapped by the wrapping key):
 * --scrub-free writes over both before it reports done.
 *
 * Snapshots. Each snapshot's table has a MAC tree of its own under a key
 * from the master and its GUID (snapshot.c): step 1 checks them all, the
 * switch rebuilds each under the new master and gives each snapshot its
 * new MAC key in the same hold, the walk goes through them after the
 * head. While a rekey is under way the list of tables stays as it is: a
 * snapshot, its destroy, a rollback, and a raw send (whose view roots are
 * made at the end) wait, each refused with its reason.
 *
 * Mirrors. A record sealed again keeps its birth in a new extent, so a
 * side of a mirror out of service meanwhile lacks extents older than the
 * txg it went out in: the row keeps the txg the rekey finished in
 * (rekey_sealed_since), and a side that comes back after one, or during
 * one, is resilvered whole (resilver.c).
 *
 * Clones share their origin's master key (dskeys_clone) and read its
 * records under it, so a dataset, its clones, theirs and so on (a family)
 * are rekeyed together, whichever of them is named: one new master for
 * all in one save of the key file, every one switched before any walks
 * (a clone must open what its origin's walk seals under the new key), a
 * walk each, and the old key dropped from all at once by the last to end
 * its walk (drop_old: a clone still opens its origin's old records until
 * they are sealed again); the others wait in finish() for that. Creating
 * or promoting a clone of one of them waits for the end.
 *
 * Encryption in place (stor_ds_encrypt, coffer set encryption=): the same
 * walk over a clear dataset, where what needs sealing is a clear record.
 * The key file is saved first with the dataset's new key marked pending
 * (dskeys_encrypt_prepare, keyfile.c: an import that finds the record
 * still clear drops it, so a crash leaves the dataset as it was); then one
 * txg closing under the write hold (encrypt_hook) makes it an encryption
 * root whose writes seal, and its commit writes the dataset's record with
 * its suite and builds MAC trees over every pointer of the head and of each
 * snapshot, clear ones too, with the row marked ROW_ENCRYPTING. While the
 * mark stands a clear pointer reads (ds->encrypting; record.c checks its
 * group like any), and the walk seals each one in place; at the end, as
 * for a rekey, no table may hold one, the view roots are made, free space
 * is written over with --scrub-free, and the mark goes. A clone reads its
 * origin's records, so the dataset named and its clones (a family, all
 * clear) are encrypted together as a family is rekeyed: one master key
 * for all in one save of the key file, the named one their encryption
 * root and each clone a member (so each must sit below it, as
 * dskeys_clone requires), one hook switching all, a walk each, and the
 * last walk to end takes the mark from all (drop_old). A clone named
 * alone, and a clear dataset below that is not a clone, are refused.
 *
 * A change of suite (resuite_start, coffer set encryption=SUITE on an
 * encrypted dataset) is a rekey of its family whose new master key is of
 * the new suite: each generation has its suite (ds->key_suite and
 * old_suite, in the key file and in each key's wrapping AAD; the key
 * state derives each record's data key for its generation's), the switch
 * gives the dataset the new suite, and its commit writes the record and
 * the parent's list of encrypted children with it. The whole family
 * switches in one txg (switch_trees): a clone is of its origin's suite in
 * every commit, as the import checks (clone_link_all).
 *
 * Children: each has a master key of its own (rekey -r rekeys each), and
 * the list of a dataset's encrypted children is under its MAC key
 * (children.c), so the switch makes that list anew under the new key.
 * Changes of the dataset's key wait for the end.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/bytes.h"
#include "base/events.h"
#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "crypt/crypt.h"
#include "crypt/keys.h"
#include "dev/alloc.h"
#include "dev/lun.h"
#include "dev/mirror.h"
#include "ds/children.h"
#include "ds/dataset.h"
#include "ds/dskeys.h"
#include "ds/keyfile.h"
#include "ds/props.h"
#include "ds/recv_state.h"
#include "ds/rekey.h"
#include "ds/snapshot.h"
#include "kv/bp.h"
#include "kv/meta.h"
#include "pool_impl.h"
#include "txg/bpmac.h"
#include "txg/metalog.h"
#include "txg/txg.h"

#define REKEY_BATCH 64u
/* and at most this many bytes of them: a batch's new extents are taken
 * before the commit frees the old ones, and one of 1 MiB records always
 * fits in the slop (space.c's SLOP_MIN) a pool full for writes keeps */
#define REKEY_BATCH_BYTES (1u << 20)
#define REKEY_ROW_VERSION 2u /* 1: no table, no end_txg */
#define REKEY_HALT (-1) /* rekey_halt: the thread ends, the rekey stays running */
#define REKEY_NICE 19
#define REKEY_BUSY_S 0.25 /* clients' I/O this recent makes the pool busy (pace) */
#define REKEY_BUSY_SHARE 8 /* of its rate a rekey takes on a busy pool */

enum rekey_state {
	REKEY_NONE = 0,    /* never rekeyed */
	REKEY_RUNNING = 1, /* records being sealed again (resumes at load-key) */
	REKEY_PAUSED = 2,  /* -p: where it was; a start resumes it */
	REKEY_STOPPED = 3, /* -s: likewise */
	REKEY_DONE = 4,    /* every record under the new key; the old one is gone */
	REKEY_FAILED = 5   /* a record could not be sealed again: the error says which */
};

/* Where a rekey is, as the pool-table row keeps it. */
struct rekey_stat {
	int state;          /* enum rekey_state */
	uint64_t total;     /* records of the dataset when it started */
	uint64_t examined;  /* records looked at since it started */
	uint64_t rewritten; /* records sealed again under the new key */
	uint64_t rate;      /* the bytes per second asked, 0 for no limit */
	uint64_t start;     /* unix seconds it started, 0 if never */
	uint64_t end;       /* unix seconds it finished, 0 while not */
	uint64_t end_txg;   /* the txg it finished in, 0 while not (rekey_sealed_since) */
	unsigned table;     /* the table the walk is in: 0 the head, i its i-th snapshot */
	char error[256];    /* REKEY_FAILED: why */
};

struct rekey {
	struct stor_pool *p;
	struct stor_ds *ds;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_t thread;
	int have_thread;
	int stop;               /* 0, a state to end in (paused, stopped), or REKEY_HALT */
	int walking;            /* its thread is in rekey_main (lock) */
	int walked;             /* and found none of its records under the old key (lock) */
	int scrub_free;         /* --scrub-free: free space written over before the end */
	struct rekey_stat st;
	unsigned mac_gen;
	uint64_t cursor;        /* the next record the walk looks at */
	double next;            /* pace: when the next batch may start (mono) */
	double busy_until;      /* clients' I/O was seen: the walk yields until then */
	uint_fast64_t io_seen;  /* p->client_io when last looked at */
};

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t wall(void)
{
	return (uint64_t)time(NULL);
}

/* ---- the row in the pool table ---- */

static void row_key(uint64_t id, char key[32])
{
	snprintf(key, 32, "rekey/%016" PRIx64, id);
}

#define ROW_FIXED (1 + 1 + 1 + 8 * 8 + 2)
#define ROW_V2 (8 + 4) /* end_txg, table */

#define ROW_SCRUB_FREE 0x1u /* row flags */
#define ROW_ENCRYPTING 0x2u /* an encryption in place: clear records are read until the end */

static int row_put(struct meta_txn *t, uint64_t id, unsigned mac_gen, uint64_t cursor,
		   const struct rekey_stat *st, unsigned flags)
{
	uint8_t buf[ROW_FIXED + sizeof(st->error) + ROW_V2], *w = buf;
	size_t elen = strnlen(st->error, sizeof(st->error) - 1);
	char key[32];

	put_u8(&w, REKEY_ROW_VERSION);
	put_u8(&w, (uint8_t)mac_gen);
	put_u8(&w, (uint8_t)st->state);
	put_u64(&w, cursor);
	put_u64(&w, st->total);
	put_u64(&w, st->examined);
	put_u64(&w, st->rewritten);
	put_u64(&w, st->rate);
	put_u64(&w, st->start);
	put_u64(&w, st->end);
	put_u64(&w, flags);
	put_u16(&w, (uint16_t)elen);
	put_bytes(&w, st->error, elen);
	put_u64(&w, st->end_txg);
	put_u32(&w, st->table);
	row_key(id, key);
	return meta_put(t, META_POOL, key, strlen(key), buf, (size_t)(w - buf));
}

/* A row's value: 0 or STOR_ECORRUPT. */
static int row_decode(const void *v, size_t vlen, unsigned *mac_gen, uint64_t *cursor,
		      struct rekey_stat *st, unsigned *flags)
{
	const uint8_t *r = v;
	uint16_t elen;
	uint8_t version;

	memset(st, 0, sizeof(*st));
	version = vlen ? get_u8(&r) : 0;
	if (vlen < ROW_FIXED || version < 1 || version > REKEY_ROW_VERSION)
		return STOR_ECORRUPT;
	*mac_gen = get_u8(&r);
	st->state = get_u8(&r);
	*cursor = get_u64(&r);
	st->total = get_u64(&r);
	st->examined = get_u64(&r);
	st->rewritten = get_u64(&r);
	st->rate = get_u64(&r);
	st->start = get_u64(&r);
	st->end = get_u64(&r);
	*flags = (unsigned)(get_u64(&r) & (ROW_SCRUB_FREE | ROW_ENCRYPTING));
	elen = get_u16(&r);
	if (*mac_gen > 1 || st->state > REKEY_FAILED || elen >= sizeof(st->error) ||
	    vlen != (size_t)ROW_FIXED + elen + (version > 1 ? ROW_V2 : 0))
		return STOR_ECORRUPT;
	get_bytes(&r, st->error, elen);
	st->error[elen] = '\0';
	if (version > 1) {
		st->end_txg = get_u64(&r);
		st->table = get_u32(&r);
	}
	return 0;
}

/* The row of @id: 0, -ENOENT (never rekeyed), or STOR_ECORRUPT. */
static int row_get(struct stor_pool *p, uint64_t id, unsigned *mac_gen, uint64_t *cursor,
		   struct rekey_stat *st, unsigned *flags)
{
	struct meta_txn *t = NULL;
	const void *v;
	size_t vlen;
	char key[32];
	int ret = meta_rtxn_get(p->meta, &t);

	if (ret < 0)
		return ret;
	row_key(id, key);
	ret = meta_get(t, META_POOL, key, strlen(key), &v, &vlen);
	if (ret == 0)
		ret = row_decode(v, vlen, mac_gen, cursor, st, flags);
	meta_rtxn_put(t);
	return ret;
}

static int sealed_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	uint64_t *since = ctx, cursor;
	struct rekey_stat st;
	unsigned gen, flags;

	(void)key;
	(void)klen;
	/* a damaged row, or one under way: it may have sealed at any txg */
	if (row_decode(val, vlen, &gen, &cursor, &st, &flags) < 0 || st.state != REKEY_DONE ||
	    st.end_txg >= *since)
		return 1;
	return 0;
}

int rekey_sealed_since(struct stor_pool *p, uint64_t since)
{
	struct meta_txn *t = NULL;
	int ret = meta_rtxn_get(p->meta, &t);

	if (ret < 0)
		return 1;
	ret = meta_iter(t, META_POOL, "rekey/", 6, 0, sealed_one, &since);
	meta_rtxn_put(t);
	return ret != 0;
}

static int save(struct rekey *rk)
{
	struct rekey_stat st;
	struct meta_txn *t = NULL;
	uint64_t cursor;
	unsigned gen, flags;
	int ret;

	pthread_mutex_lock(&rk->lock);
	st = rk->st;
	cursor = rk->cursor;
	gen = rk->mac_gen;
	flags = (rk->scrub_free ? ROW_SCRUB_FREE : 0) |
		(atomic_load(&rk->ds->encrypting) ? ROW_ENCRYPTING : 0);
	pthread_mutex_unlock(&rk->lock);
	ret = meta_txn_begin(rk->p->meta, &t);
	if (ret == 0)
		ret = row_put(t, rk->ds->id, gen, cursor, &st, flags);
	if (ret == 0)
		return meta_txn_commit(t);
	if (t)
		meta_txn_abort(t);
	return ret;
}

int rekey_mac_gen(struct stor_pool *p, struct stor_ds *ds)
{
	struct rekey_stat st;
	uint64_t cursor;
	unsigned gen, flags;
	int ret = row_get(p, ds->id, &gen, &cursor, &st, &flags);

	/* no row: never switched, so under the key a rekey (if any) replaces */
	if (ret == -ENOENT)
		return (int)(ds->has_old ? ds->keygen ^ 1u : ds->keygen);
	if (ret == 0 && gen != ds->keygen && !ds->has_old)
		ret = STOR_ECORRUPT;
	if (ret < 0) {
		pool_set_error("dataset %s: its rekey state in the pool table is damaged, or "
			       "disagrees with the key file", ds->name);
		return ret;
	}
	/* its clear records read until the walk has sealed them all */
	atomic_store(&ds->encrypting, (flags & ROW_ENCRYPTING) != 0);
	return (int)gen;
}

/* ---- the state in memory ---- */

static struct rekey *rekey_of(struct stor_pool *p, struct stor_ds *ds)
{
	struct rekey *rk = ds->rekey;
	unsigned flags = 0;

	if (rk)
		return rk;
	rk = calloc(1, sizeof(*rk));
	if (!rk)
		return NULL;
	rk->p = p;
	rk->ds = ds;
	pthread_mutex_init(&rk->lock, NULL);
	pthread_cond_init(&rk->wake, NULL);
	if (row_get(p, ds->id, &rk->mac_gen, &rk->cursor, &rk->st, &flags) == 0) {
		rk->scrub_free = (flags & ROW_SCRUB_FREE) != 0;
	} else {
		/* none yet; with both keys in the key file, a start that a crash
		 * cut before its switch: it goes on */
		memset(&rk->st, 0, sizeof(rk->st));
		rk->mac_gen = ds->has_old ? ds->keygen ^ 1u : ds->keygen;
		rk->cursor = 0;
		if (ds->has_old) {
			rk->st.state = REKEY_RUNNING;
			rk->st.start = wall();
		}
	}
	ds->rekey = rk;
	return rk;
}

void rekey_halt(struct stor_ds *ds)
{
	struct rekey *rk = ds->rekey;

	if (!rk || !rk->have_thread)
		return;
	pthread_mutex_lock(&rk->lock);
	rk->stop = REKEY_HALT;
	pthread_cond_broadcast(&rk->wake);
	pthread_mutex_unlock(&rk->lock);
	pthread_join(rk->thread, NULL);
	rk->have_thread = 0;
}

void rekey_free(struct stor_ds *ds)
{
	struct rekey *rk = ds->rekey;

	if (!rk)
		return;
	rekey_halt(ds);
	pthread_mutex_destroy(&rk->lock);
	pthread_cond_destroy(&rk->wake);
	free(rk);
	ds->rekey = NULL;
}

void rekey_fini(struct stor_pool *p)
{
	pthread_mutex_lock(&p->admin);
	for (size_t i = 0; i < p->nds; i++)
		rekey_halt(p->ds[i]);
	pthread_mutex_unlock(&p->admin);
}

/* ---- the datasets of one master key ---- */

/* The dataset @ds's master key came from: up its origins to one that is
 * no clone (admin lock held). */
static struct stor_ds *family_top(struct stor_ds *ds)
{
	while (ds->origin)
		ds = ds->origin->ds;
	return ds;
}

/*
 * The datasets that share @ds's master key (dskeys_clone), or its lack of
 * one: the one it came from first, then every clone of it, of its clones,
 * and so on, into @out (room for p->nds). A clone reads its origin's
 * records under that key, so they are rekeyed, or encrypted, together: one
 * new master for all, and the old one (or the clear records' reading) goes
 * from all at once. Admin lock held. @return how many
 */
static size_t family(struct stor_pool *p, struct stor_ds *ds, struct stor_ds **out)
{
	struct stor_ds *top = family_top(ds);
	size_t n = 1;

	STOR_ASSERT_HELD(&p->admin);
	out[0] = top;
	for (size_t i = 0; i < p->nds; i++)
		if (p->ds[i] != top && family_top(p->ds[i]) == top)
			out[n++] = p->ds[i];
	return n;
}

/* ---- the switch ---- */

struct switch_arg {
	struct stor_ds *ds;
	struct ds_keys *k;
	uint8_t *master;      /* a new generation's master key, or NULL: the state has it */
	struct mac_key *mk;   /* the new MAC key (a reference for the state) */
	struct mac_key *was;  /* the MAC key replaced, put once no reader can hold it */
	struct mac_key **snap_was; /* likewise, each snapshot's */
	char *enc;            /* a change of suite: its encryption property then */
	struct rebuild *rb;   /* its commit's task, in switch_all's */
};

struct switch_all {
	size_t n;
	struct stor_ds *const *dss; /* the datasets switched, @n */
	struct switch_arg *a;
	struct rebuild *rb; /* every one's commit task, the stage's once enlisted */
};

/* The task of the switch's commit: its own, since a failed commit keeps it
 * for the next one. */
struct rebuild {
	struct stor_ds *ds;
	struct mac_key *mk;
	unsigned gen;
	uint64_t cursor;
	struct rekey_stat st;
	unsigned flags;
	int encrypt;          /* an encryption in place: its record, and trees over clear pointers */
	/* a change of suite to @resuite from @old_suite: its record, and the
	 * list of its parent @parent_id (under @pmk, from @pk's) when listed */
	unsigned resuite, old_suite;
	uint64_t parent_id;
	struct ds_keys *pk;
	struct mac_key *pmk;
	size_t nkids;
	struct kid {
		uint64_t guid;
		unsigned suite;
	} *kids; /* its encrypted children, listed under its MAC key (children.c) */
	size_t nsnaps;
	struct table {
		struct snap *s;
		uint64_t id, txg;
		struct mac_key *mk; /* its new MAC key */
	} *snaps; /* its snapshots' tables, oldest first */
	struct rebuild *next; /* another dataset's, switched in the same hold */
};

static int rebuild_one(struct meta_txn *t, struct rebuild *rb)
{
	uint64_t end = 0;
	int ret;

	/* its record says encrypted now, or of the new suite */
	ret = rb->encrypt || rb->resuite ? ds_save_txn(t, rb->ds) : 0;
	if (ret == 0 && rb->pmk)
		ret = children_change(t, rb->parent_id, rb->pmk, rb->ds->guid, rb->old_suite, 0);
	if (ret == 0 && rb->pmk)
		ret = children_change(t, rb->parent_id, rb->pmk, rb->ds->guid, rb->resuite, 1);
	if (ret == 0)
		ret = bpmac_build_table(t, rb->ds->id, rb->mk, UINT64_MAX, rb->encrypt, &end);
	/* its list of encrypted children, anew under the new key */
	if (ret == 0)
		ret = children_init(t, rb->ds->id, rb->mk);
	for (size_t i = 0; i < rb->nkids && ret == 0; i++)
		ret = children_change(t, rb->ds->id, rb->mk, rb->kids[i].guid, rb->kids[i].suite, 1);
	/* each snapshot's table under its new key: pointers born by its txg */
	for (size_t i = 0; i < rb->nsnaps && ret == 0; i++)
		ret = bpmac_build_table(t, rb->snaps[i].id, rb->snaps[i].mk, rb->snaps[i].txg,
					 rb->encrypt, &end);
	if (ret == 0)
		ret = row_put(t, rb->ds->id, rb->gen, rb->cursor, &rb->st, rb->flags);
	return ret;
}

static int rebuild_commit(struct meta_txn *t, void *arg, txg_free_fn free_extent, void *stage)
{
	int ret = 0;

	(void)free_extent;
	(void)stage;
	for (struct rebuild *rb = arg; rb && ret == 0; rb = rb->next)
		ret = rebuild_one(t, rb);
	return ret;
}

static void rebuild_free(struct rebuild *rb)
{
	while (rb) {
		struct rebuild *next = rb->next;

		mac_key_put(rb->mk);
		mac_key_put(rb->pmk);
		for (size_t i = 0; i < rb->nsnaps; i++)
			mac_key_put(rb->snaps[i].mk);
		free(rb->snaps);
		free(rb->kids);
		free(rb);
		rb = next;
	}
}

static void rebuild_release(void *arg)
{
	rebuild_free(arg);
}

/* @ds's snapshots, each with a MAC key from @master for suite @suite
 * (admin lock held: none is made or destroyed meanwhile). */
static int list_snaps(struct stor_ds *ds, const uint8_t *master, unsigned suite,
		      struct rebuild *rb)
{
	rb->snaps = calloc(ds->nsnaps ? ds->nsnaps : 1, sizeof(*rb->snaps));
	if (!rb->snaps)
		return -ENOMEM;
	for (size_t i = 0; i < ds->nsnaps; i++) {
		struct snap *s = ds->snaps[i];

		rb->snaps[i] = (struct table){ s, s->id, s->txg, mac_key_new(master, s->guid, suite) };
		rb->nsnaps++;
		if (!rb->snaps[i].mk)
			return -ENOMEM;
	}
	return 0;
}

/* @ds's encrypted children as its list has them (dskeys.c: check_children),
 * with the @nnew datasets @becoming among them of @suite (0: theirs): an
 * encryption in place, or a change of suite, of them all. */
static int list_kids(struct stor_pool *p, struct stor_ds *ds, struct stor_ds *const *becoming,
		     size_t nnew, unsigned suite, struct rebuild *rb)
{
	STOR_ASSERT_HELD(&p->admin);
	rb->kids = calloc(p->nds ? p->nds : 1, sizeof(*rb->kids));
	if (!rb->kids)
		return -ENOMEM;
	for (size_t i = 0; i < p->nds; i++) {
		const struct stor_ds *d = p->ds[i];
		size_t pi = ds_parent_index_locked(p, d);

		unsigned as = (unsigned)d->suite;

		for (size_t j = 0; j < nnew && suite; j++)
			as = becoming[j] == d ? suite : as;
		if (pi < p->nds && p->ds[pi] == ds && !d->unlisted && as)
			rb->kids[rb->nkids++] = (struct kid){ d->guid, as };
	}
	return 0;
}

/* One dataset's switch, in switch_hook. */
static void switch_one(struct switch_arg *a)
{
	struct stor_ds *ds = a->ds;
	struct ds_keys *k = a->k;
	struct rebuild *rb = a->rb;

	/* no writer is between its hold and its stage: from here they seal under
	 * the new master and sum their MAC changes under its MAC key, and a
	 * pointer kept for a snapshot joins its table's tree under its new key */
	pthread_mutex_lock(&k->lock);
	if (a->master) {
		k->old = k->master;
		k->master = a->master;
		a->master = NULL;
		k->gen = ds->keygen;
	}
	k->suite[k->gen] = (int)dskeys_suite_of(ds, k->gen);
	a->was = k->mac;
	k->mac = a->mk;
	k->mac_gen = k->gen;
	pthread_mutex_unlock(&k->lock);
	/* a change of suite: the dataset's is the new key's from here (its
	 * record and its parent's list of children say so at the commit) */
	if (rb->resuite) {
		ds->suite = rb->resuite;
		free(ds->local[PROP_ENCRYPTION]);
		ds->local[PROP_ENCRYPTION] = a->enc;
		a->enc = NULL;
	}
	if (rb->pk) {
		pthread_mutex_lock(&rb->pk->lock);
		rb->pmk = mac_key_ref(rb->pk->mac);
		pthread_mutex_unlock(&rb->pk->lock);
	}
	for (size_t i = 0; i < rb->nsnaps; i++) {
		struct snap *s = rb->snaps[i].s;

		pthread_mutex_lock(&s->lock);
		a->snap_was[i] = s->mk;
		s->mk = mac_key_ref(rb->snaps[i].mk);
		pthread_mutex_unlock(&s->lock);
	}
}

/* The switch of every dataset of @arg (a switch_all) in one txg: a clone
 * and its origin are of one suite in every commit. */
static int switch_hook(struct stor_pool *p, uint64_t txg, void *arg)
{
	struct switch_all *all = arg;
	struct txg_task task = { .commit = rebuild_commit, .release = rebuild_release,
				 .arg = all->rb };
	int ret;

	(void)txg;
	ret = txg_enlist(p, &task);
	if (ret < 0)
		return ret;
	all->rb = NULL; /* the stage's now */
	for (size_t i = 0; i < all->n; i++)
		switch_one(&all->a[i]);
	return 0;
}

/* Mark every group of a table of @volsize bytes verified: step 1 checked them all. */
static int mark_all_seen(struct seen_bits *seen, uint64_t volsize, uint64_t recsize)
{
	uint64_t groups = (volsize / recsize + MAC_GROUP - 1) / MAC_GROUP;

	for (uint64_t g = 0; g < groups; g++) {
		uint8_t bit;
		_Atomic uint8_t *b = seen_bits_at(seen, g, 1, &bit);

		if (!b)
			return -ENOMEM;
		atomic_fetch_or(b, bit);
	}
	return 0;
}

static void count_bad(void *ctx, uint64_t g)
{
	(void)g;
	(*(uint64_t *)ctx)++;
}

/* Step 1's check: the whole tree of the head and of each snapshot's table
 * under the keys the state has now. */
static int check_tree(struct stor_pool *p, struct stor_ds *ds, struct ds_keys *k)
{
	uint64_t bad = 0;
	int ret = bpmac_verify_root(p->meta, ds->id, k->mac);

	if (ret == 0)
		ret = bpmac_check_table(p->meta, ds->id, k->mac, count_bad, &bad);
	if (ret == 0)
		ret = mark_all_seen(&k->seen, atomic_load(&ds->volsize), ds->recsize);
	for (size_t i = 0; i < ds->nsnaps && ret == 0 && !bad; i++) {
		struct snap *s = ds->snaps[i];
		struct mac_key *mk = NULL;

		ret = snap_mac(s, &mk); /* its root, checked */
		if (ret == 0)
			ret = bpmac_check_table(p->meta, s->id, mk, count_bad, &bad);
		mac_key_put(mk);
		pthread_mutex_lock(&s->lock);
		if (ret == 0)
			ret = mark_all_seen(&s->seen, s->volsize, ds->recsize);
		pthread_mutex_unlock(&s->lock);
	}
	if (ret == 0 && bad)
		ret = STOR_EAUTH;
	if (ret == STOR_EAUTH)
		pool_set_error("%s: its block pointers do not verify under its key (run 'coffer "
			       "pool check'); nothing was rekeyed",
			       ds->name);
	return ret;
}

/*
 * The parts of step 2 for @a->ds that may fail, before the hook: its
 * new MAC keys, its commit's task (chained to @all's), and with a change
 * of suite the MAC key of the parent whose list names it.
 */
static int switch_prepare(struct stor_pool *p, struct switch_all *all, struct switch_arg *a)
{
	struct stor_ds *ds = a->ds;
	struct ds_keys *k = a->k;
	unsigned suite = dskeys_suite_of(ds, ds->keygen);
	struct rekey *rk = rekey_of(p, ds);
	struct rebuild *rb = calloc(1, sizeof(*rb));
	size_t pi = ds_parent_index_locked(p, ds);
	struct stor_ds *parent = pi < p->nds ? p->ds[pi] : NULL;
	int with_parent = 0;

	if (!rb)
		return -ENOMEM;
	rb->next = all->rb;
	all->rb = rb;
	a->rb = rb;
	if (!rk)
		goto nomem;
	rb->ds = ds;
	rb->gen = ds->keygen;
	pthread_mutex_lock(&rk->lock);
	rb->st = rk->st;
	rb->cursor = rk->cursor;
	rb->flags = rk->scrub_free ? ROW_SCRUB_FREE : 0;
	pthread_mutex_unlock(&rk->lock);
	a->mk = mac_key_new(a->master ? a->master : k->master, ds->guid, suite);
	a->snap_was = calloc(ds->nsnaps ? ds->nsnaps : 1, sizeof(*a->snap_was));
	if (!a->mk || !a->snap_was || !(rb->mk = mac_key_ref(a->mk)))
		goto nomem;
	if (suite != (unsigned)ds->suite) {
		rb->resuite = suite;
		rb->old_suite = (unsigned)ds->suite;
		if (!(a->enc = strdup(crypt_suite_name((enum crypt_suite)suite))))
			goto nomem;
		/* a parent switched with it makes its list whole, with this suite */
		for (size_t i = 0; i < all->n; i++)
			with_parent |= all->dss[i] == parent;
		if (parent && parent->suite && !ds->unlisted && !with_parent &&
		    !(rb->pk = atomic_load(&parent->keys))) {
			pool_set_error("the key of %s is not loaded: its list of encrypted "
				       "children names the suite of %s; load it, then run "
				       "coffer rekey %s to go on", parent->name, ds->name, ds->name);
			return STOR_ENOKEY;
		}
		rb->parent_id = parent ? parent->id : 0;
	}
	if (list_kids(p, ds, all->dss, all->n, rb->resuite, rb) < 0 ||
	    list_snaps(ds, a->master ? a->master : k->master, suite, rb) < 0)
		goto nomem;
	return 0;
nomem:
	return -ENOMEM;
}

/*
 * Step 2 for the @n datasets @dss in one txg: each's key state has the
 * new master already (a resume), or gets its copy of @master (a start;
 * taken either way).
 */
static int switch_trees(struct stor_pool *p, struct stor_ds *const *dss, size_t n,
			uint8_t *master)
{
	struct switch_all all = { .n = n, .dss = dss, .a = calloc(n, sizeof(*all.a)) };
	int ret = all.a ? 0 : -ENOMEM;

	if (n == 0) {
		keys_secure_free(master, KEYS_MASTER_LEN);
		free(all.a);
		return 0;
	}
	for (size_t i = 0; i < n && ret == 0; i++) {
		struct switch_arg *a = &all.a[i];

		*a = (struct switch_arg){ .ds = dss[i], .k = atomic_load(&dss[i]->keys) };
		if (master && !(a->master = keys_secure_alloc(KEYS_MASTER_LEN)))
			ret = -ENOMEM;
		else if (master)
			memcpy(a->master, master, KEYS_MASTER_LEN);
		if (ret == 0)
			ret = switch_prepare(p, &all, a);
	}
	keys_secure_free(master, KEYS_MASTER_LEN);
	if (ret == 0)
		ret = txg_sync_close(p, switch_hook, &all);
	rebuild_free(all.rb); /* not enlisted */
	/* readers that took the old MAC keys are done with them before they go
	 * (the hook swaps every one's, or none's) */
	if (all.a && all.a[0].was)
		txg_read_synchronize(p);
	for (size_t i = 0; all.a && i < n; i++) {
		struct switch_arg *a = &all.a[i];

		if (a->master)
			keys_secure_free(a->master, KEYS_MASTER_LEN); /* the hook did not take it */
		if (ret == 0)
			rekey_of(p, a->ds)->mac_gen = a->k->gen;
		else if (!a->was)
			mac_key_put(a->mk);
		if (a->was) {
			mac_key_put(a->was);
			for (size_t j = 0; j < a->ds->nsnaps; j++)
				mac_key_put(a->snap_was[j]);
		}
		free(a->snap_was);
		free(a->enc);
	}
	free(all.a);
	return ret;
}

/* ---- the walk ---- */

struct gather {
	uint64_t id, recnos[REKEY_BATCH], last;
	unsigned gen; /* the current generation: others are gathered */
	size_t n, seen, max;
	int more;
};

static int gather_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct gather *g = ctx;
	const uint8_t *k = key;
	struct bp bp;

	if (klen != BP_KEY_LEN || get_u64(&k) != g->id) {
		g->more = 0;
		return 1;
	}
	if (g->seen == REKEY_BATCH * 8 || g->n == g->max)
		return 1;
	g->last = get_u64(&k);
	g->seen++;
	if (bp_decode(val, vlen, &bp) < 0)
		return STOR_ECORRUPT;
	/* clear (an encryption in place), or of the old generation */
	if (!(bp.flags & BP_F_ENCRYPTED) || dskeys_gen_of(&bp) != g->gen)
		g->recnos[g->n++] = g->last;
	return 0;
}

/* Up to REKEY_BATCH records (REKEY_BATCH_BYTES of @recsize) of table @id
 * under the old generation from @from on, committed. */
static int gather(struct stor_pool *p, uint64_t id, uint32_t recsize, unsigned gen,
		  uint64_t from, struct gather *g)
{
	struct meta_txn *t = NULL;
	uint8_t key[BP_KEY_LEN];
	size_t max = recsize ? REKEY_BATCH_BYTES / recsize : REKEY_BATCH;
	int ret;

	*g = (struct gather){ .id = id, .gen = gen, .more = 1,
			      .max = max < 1 ? 1 : max > REKEY_BATCH ? REKEY_BATCH : max };
	ret = meta_rtxn_get(p->meta, &t);
	if (ret < 0)
		return ret;
	bp_key(id, from, key);
	ret = meta_iter_from(t, META_BP, key, sizeof(key), gather_one, g);
	meta_rtxn_put(t);
	if (ret == 0)
		g->more = 0; /* the table's end */
	return ret < 0 ? ret : 0;
}

/*
 * Table @i of @ds as the walk goes through them: 0 its head, i its i-th
 * snapshot from the oldest (the list stays as it is while a rekey is under
 * way: snapshots are neither made nor destroyed then), with its MAC key (a
 * reference) and verified groups. @return 0, 1 past the last, or an error.
 */
static int table_at(struct stor_pool *p, struct stor_ds *ds, unsigned i, struct reseal_table *tb)
{
	struct ds_keys *k = atomic_load(&ds->keys);
	struct snap *s = NULL;

	*tb = (struct reseal_table){ 0 };
	if (!k)
		return STOR_ENOKEY;
	if (i == 0) {
		pthread_mutex_lock(&k->lock);
		*tb = (struct reseal_table){ ds->id, mac_key_ref(k->mac), &k->seen };
		pthread_mutex_unlock(&k->lock);
		return 0;
	}
	pthread_mutex_lock(&p->snap_lock);
	if (i <= ds->nsnaps)
		s = ds->snaps[i - 1];
	pthread_mutex_unlock(&p->snap_lock);
	if (!s)
		return 1;
	tb->id = s->id;
	tb->seen = &s->seen;
	return snap_mac(s, &tb->mk);
}

/* Step 4's check: is any committed record of any table still under the old generation? */
static int any_old(struct stor_pool *p, struct stor_ds *ds, unsigned gen)
{
	for (unsigned i = 0;; i++) {
		struct reseal_table tb;
		uint64_t from = 0;
		int ret = table_at(p, ds, i, &tb);

		mac_key_put(tb.mk);
		if (ret != 0)
			return ret < 0 ? ret : 0;
		for (;;) {
			struct gather g;

			ret = gather(p, tb.id, ds->recsize, gen, from, &g);
			if (ret < 0 || g.n)
				return ret < 0 ? ret : 1;
			if (!g.more)
				break;
			from = g.last + 1;
		}
	}
}

/* ---- the snapshots' view roots, at the end ---- */

struct views {
	struct stor_ds *ds;
	struct mac_key *mk; /* the head's */
};

/* Each snapshot's view root (bpmac.c) over its pointers as they are now,
 * all sealed again, under the head's new MAC key: what a raw send carries. */
static int views_commit(struct meta_txn *t, void *arg, txg_free_fn free_extent, void *stage)
{
	struct views *v = arg;
	struct stor_ds *ds = v->ds;
	uint64_t end = atomic_load(&ds->volsize);
	int ret = 0;

	(void)free_extent;
	(void)stage;
	for (size_t i = 0; i < ds->nsnaps; i++)
		end = ds->snaps[i]->volsize > end ? ds->snaps[i]->volsize : end;
	end = end / ds->recsize + 1;
	for (size_t i = 0; i < ds->nsnaps && ret == 0; i++) {
		uint8_t acc[MAC_LEN];

		ret = view_sum(t, ds, i, v->mk, end, acc);
		if (ret == 0)
			ret = bpmac_view_put(t, ds->snaps[i]->id, v->mk, acc);
	}
	return ret;
}

static void views_release(void *arg)
{
	struct views *v = arg;

	mac_key_put(v->mk);
	free(v);
}

static int views_hook(struct stor_pool *p, uint64_t txg, void *arg)
{
	struct views **v = arg;
	struct txg_task task = { .commit = views_commit, .release = views_release, .arg = *v };
	int ret = txg_enlist(p, &task);

	(void)txg;
	if (ret == 0)
		*v = NULL; /* the stage's now */
	return ret;
}

static int save_views(struct stor_pool *p, struct stor_ds *ds)
{
	struct ds_keys *k = atomic_load(&ds->keys);
	struct views *v = calloc(1, sizeof(*v));
	int ret;

	if (!v)
		return -ENOMEM;
	v->ds = ds;
	pthread_mutex_lock(&k->lock);
	v->mk = mac_key_ref(k->mac);
	pthread_mutex_unlock(&k->lock);
	ret = txg_sync_close(p, views_hook, &v);
	if (v)
		views_release(v);
	return ret;
}

/*
 * After a batch that examined @recs records: wait until the pace allows
 * more, or a stop (rk->lock held). The rate asked is the most it takes:
 * while clients' requests keep coming to the pool (client_io moved within
 * REKEY_BUSY_S), it takes 1/REKEY_BUSY_SHARE of it, after ZFS's scrub that
 * backs off a pool in use, so their I/O keeps its pace on a busy pool and
 * an idle one is rekeyed at full speed.
 */
static void pace(struct rekey *rk, uint64_t recs)
{
	uint_fast64_t io = atomic_load_explicit(&rk->p->client_io, memory_order_relaxed);
	double now = mono(), rate = (double)rk->st.rate;

	if (!rk->st.rate)
		return;
	if (io != rk->io_seen) {
		rk->io_seen = io;
		rk->busy_until = now + REKEY_BUSY_S;
	}
	if (now < rk->busy_until)
		rate /= REKEY_BUSY_SHARE;
	/* no credit saved up beyond one batch while it waited or was paused */
	if (rk->next < now - 0.1)
		rk->next = now - 0.1;
	rk->next += (double)recs * rk->ds->recsize / rate;
	while (!rk->stop && rk->next > mono()) {
		double ahead = rk->next - mono();
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		ahead += ts.tv_nsec / 1e9;
		ts.tv_sec += (time_t)ahead;
		ts.tv_nsec = (long)((ahead - (double)(time_t)ahead) * 1e9);
		pthread_cond_timedwait(&rk->wake, &rk->lock, &ts);
	}
}

static void fail(struct rekey *rk, int err, const char *what)
{
	const char *why = err == STOR_ENOSPC ? stor_pool_last_error() : "";

	pthread_mutex_lock(&rk->lock);
	rk->st.state = REKEY_FAILED;
	snprintf(rk->st.error, sizeof(rk->st.error), "%s: %s", what,
		 why[0] ? why : stor_strerror(err));
	pthread_mutex_unlock(&rk->lock);
	EVENT(STOR_EV_REKEY_FAIL, rk->p->name, EV_STR("dataset", rk->ds->name),
	      EV_STR("error", rk->st.error));
}

/*
 * --scrub-free, before the old key goes: every free extent of the pool
 * written over with zeros on every side of its vdev, so the old ciphertext
 * the rekey freed is not on the LUNs any more. Each run of free sectors is
 * claimed while it is written (alloc_claim_free), so no writer takes it
 * meanwhile. A side out of service would keep what it had: refused then.
 * A crash in it starts it over at the resume: the old key is still there.
 */
static int stopping(struct rekey *rk)
{
	int stop;

	pthread_mutex_lock(&rk->lock);
	stop = rk->stop;
	pthread_mutex_unlock(&rk->lock);
	return stop;
}

static int scrub_free(struct stor_pool *p, struct rekey *rk)
{
	const uint32_t chunk = 256; /* sectors at once: 1 MiB */
	unsigned nluns = atomic_load(&p->nluns);
	uint8_t *zero = aligned_alloc(STOR_SECTOR, (size_t)chunk * STOR_SECTOR);
	int ret = zero ? 0 : -ENOMEM;

	for (unsigned i = 0; i < nluns && ret == 0; i++)
		if (atomic_load(&p->luns[i].out) != SIDE_IN) {
			pool_set_error("a side of a mirror of pool %s is out of service and would "
				       "keep the old ciphertext: bring it back, then resume the rekey",
				       p->name);
			ret = -EBUSY;
		}
	if (zero)
		memset(zero, 0, (size_t)chunk * STOR_SECTOR);
	for (unsigned v = 0; v < nluns && ret == 0; v++) {
		uint64_t from = 0, sector;
		uint32_t n;

		while (ret == 0 && (ret = alloc_claim_free(p->alloc, v, from, chunk, &sector, &n)) == 0) {
			struct lun_io ios[STOR_MIRROR_MAX];
			unsigned sides[STOR_MIRROR_MAX], ns = mirror_sides(p, v, sides);

			/* a halt (unload-key, export) does not wait for a whole pool */
			if (stopping(rk)) {
				alloc_put(p->alloc, v, sector, n);
				ret = -ECANCELED;
				break;
			}

			for (unsigned k = 0; k < ns; k++)
				ios[k] = (struct lun_io){ p->luns[sides[k]].lun, sector * STOR_SECTOR,
							  zero, (size_t)n * STOR_SECTOR, 0, 0, 0 };
			if (ns && lun_write_batch(ios, ns))
				for (unsigned k = 0; k < ns; k++)
					ret = ios[k].result < 0 ? ios[k].result : ret;
			alloc_put(p->alloc, v, sector, n);
			from = sector + n;
		}
		ret = ret == -ENOENT ? 0 : ret;
	}
	for (unsigned i = 0; i < nluns && ret == 0; i++)
		if (p->luns[i].lun)
			ret = lun_flush(p->luns[i].lun);
	free(zero);
	return ret;
}

/* Step 4: the old key goes, once nothing needs it. 1: done, 0: walk again. */
/* The admin lock, unless asked to stop meanwhile (a halt holds it). */
static int admin_lock(struct rekey *rk)
{
	while (pthread_mutex_trylock(&rk->p->admin) != 0) {
		struct timespec ts = { 0, 5000000 };

		if (stopping(rk))
			return -ECANCELED;
		nanosleep(&ts, NULL);
	}
	return 0;
}

/*
 * Has every dataset of @rk's master key (family) none of its records under
 * the old one left? 1: yes (*@scrub: one of them asked for --scrub-free),
 * 0: not yet, 2: the old key is gone already, or an error.
 */
static int family_walked(struct rekey *rk, int *scrub)
{
	struct stor_pool *p = rk->p;
	struct stor_ds **fam = calloc(p->nds ? p->nds : 1, sizeof(*fam));
	size_t n;
	int ret = fam ? admin_lock(rk) : -ENOMEM;

	if (ret < 0) {
		free(fam);
		return ret;
	}
	*scrub = rk->scrub_free;
	n = family(p, rk->ds, fam);
	ret = rk->ds->has_old || atomic_load(&rk->ds->encrypting) ? 1 : 2;
	for (size_t i = 0; i < n && ret == 1; i++) {
		struct stor_ds *d = fam[i];
		struct ds_keys *k = atomic_load(&d->keys);

		struct rekey *o = d->rekey;
		int walking = 0, walked = 0;

		if (d == rk->ds || !rekey_under_way(d))
			continue;
		if (o) {
			pthread_mutex_lock(&o->lock);
			walking = o->walking;
			walked = o->walked;
			*scrub |= o->scrub_free;
			pthread_mutex_unlock(&o->lock);
		}
		/* one still walking is not done; one with no thread (paused,
		 * stopped, failed) may be, as its pointers say */
		ret = walked ? 1 : walking || !k ? 0 : any_old(p, d, k->gen) ? 0 : 1;
	}
	pthread_mutex_unlock(&p->admin);
	free(fam);
	return ret;
}

/* The old key leaves every dataset of @rk's master key that still has it,
 * or, encrypted in place, none reads a clear record from here; one whose
 * rekey has no thread to end it ends here. */
static int drop_old(struct rekey *rk)
{
	struct stor_pool *p = rk->p;
	struct stor_ds **fam = calloc(p->nds ? p->nds : 1, sizeof(*fam));
	size_t n, m = 0;
	int ret = fam ? admin_lock(rk) : -ENOMEM;

	if (ret < 0) {
		free(fam);
		return ret;
	}
	n = family(p, rk->ds, fam);
	for (size_t i = 0; i < n; i++)
		if (rekey_under_way(fam[i]))
			fam[m++] = fam[i];
	/* a family is rekeyed or encrypted, never both at once */
	ret = m && fam[0]->has_old ? dskeys_drop_old(p, fam, m) : 0;
	/* each one's row says so when its rekey is saved as done */
	for (size_t i = 0; i < m && ret == 0; i++)
		atomic_store(&fam[i]->encrypting, 0);
	for (size_t i = 0; i < m && ret == 0; i++) {
		struct rekey *o = fam[i]->rekey;

		if (!o || o == rk)
			continue;
		pthread_mutex_lock(&o->lock);
		if (!o->walking && o->st.state != REKEY_DONE) {
			o->st.state = REKEY_DONE;
			o->st.end = wall();
			o->st.end_txg = atomic_load(&p->synced_txg);
		}
		pthread_cond_broadcast(&o->wake); /* one waiting in finish() ends now */
		pthread_mutex_unlock(&o->lock);
		(void)save(o);
	}
	pthread_mutex_unlock(&p->admin);
	free(fam);
	return ret;
}

/*
 * Step 4: the old key goes, once nothing needs it. 1: done, 0: walk again
 * (or stop). Its clones and origin share it (family): the last of them to
 * end its walk drops it from all, the others wait for that.
 */
static int finish(struct rekey *rk)
{
	struct stor_pool *p = rk->p;
	int ret = 0, scrub = 0;

	/* has_old and encrypting change only in drop_old, under the admin lock */
	if (rk->ds->has_old || atomic_load(&rk->ds->encrypting)) {
		ret = txg_sync(p, 0);
		if (ret == 0)
			ret = any_old(p, rk->ds, atomic_load(&rk->ds->keys)->gen);
		if (ret != 0)
			return ret < 0 ? ret : 0;
		pthread_mutex_lock(&rk->lock);
		rk->walked = 1;
		pthread_mutex_unlock(&rk->lock);
		while ((ret = family_walked(rk, &scrub)) == 0) {
			struct timespec ts;

			pthread_mutex_lock(&rk->lock);
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			if (!rk->stop)
				pthread_cond_timedwait(&rk->wake, &rk->lock, &ts);
			pthread_mutex_unlock(&rk->lock);
			if (stopping(rk))
				return 0;
		}
		if (ret < 0)
			return ret == -ECANCELED ? 0 : ret;
	}
	if (ret == 1) {
		struct stor_ds **fam = calloc(p->nds ? p->nds : 1, sizeof(*fam));
		size_t n = 0;

		/* the view roots of every one's snapshots (their lists stay: has_old),
		 * under the admin lock: none of them is destroyed meanwhile */
		ret = fam ? admin_lock(rk) : -ENOMEM;
		if (ret == 0) {
			n = family(p, rk->ds, fam);
			for (size_t i = 0; i < n && ret == 0; i++)
				if (fam[i]->nsnaps &&
				    (fam[i]->has_old || atomic_load(&fam[i]->encrypting)))
					ret = save_views(p, fam[i]);
			pthread_mutex_unlock(&p->admin);
		}
		free(fam);
		if (ret == 0 && scrub)
			ret = scrub_free(p, rk);
		if (ret == 0)
			ret = drop_old(rk);
		if (ret < 0)
			return ret == -ECANCELED ? 0 : ret;
	}
	/* the older records of the metadata log keep the old key file's bytes:
	 * a checkpoint replaces them, its commit frees them, and they are
	 * written over as free space (a crash before the end does it again) */
	if (rk->scrub_free || scrub) {
		metalog_force_checkpoint(p);
		ret = txg_sync(p, 0);
		if (ret == 0)
			ret = scrub_free(p, rk);
		if (ret < 0)
			return ret == -ECANCELED ? 0 : ret;
	}
	pthread_mutex_lock(&rk->lock);
	rk->st.state = REKEY_DONE;
	rk->st.end = wall();
	rk->st.end_txg = atomic_load(&p->synced_txg);
	pthread_mutex_unlock(&rk->lock);
	EVENT(STOR_EV_REKEY_FINISH, p->name, EV_STR("dataset", rk->ds->name),
	      EV_NUM("rewritten", rk->st.rewritten));
	return 1;
}

/*
 * Seal @g's records again. Copy-on-write: each needs a new extent before
 * its old one is freed, which happens only when its txg commits, so a pool
 * short of room commits for the frees and tries again (as writes do), then
 * with fewer records at once: a pool full for writes keeps its slop, and
 * one record's extent in it is all a rekey needs. A pool without even that
 * fails the rekey, saying how much it needs.
 */
static int reseal(struct stor_pool *p, struct stor_ds *ds, const struct reseal_table *tb,
		  const struct gather *g, size_t *done)
{
	uint64_t mark = txg_freed(p);
	size_t at = 0, step = g->n;

	*done = 0;
	while (at < g->n) {
		size_t k = g->n - at < step ? g->n - at : step, d = 0;
		int ret = p->reseal(ds, tb, k, g->recnos + at, &d), more;

		if (ret == 0) {
			at += k;
			*done += d;
			continue;
		}
		if (ret != STOR_ENOSPC)
			return ret;
		more = txg_sync_for_space(p, &mark);
		if (more < 0)
			return more;
		if (more == 0 && step > 1) {
			step /= 2;
		} else if (more == 0) {
			pool_set_error("pool %s has no room for one record (%u KiB) beside the "
				       "one it replaces: free space, then resume the rekey",
				       p->name, ds->recsize / 1024);
			return ret;
		}
	}
	return 0;
}

static void *rekey_main(void *arg)
{
	struct rekey *rk = arg;
	struct stor_pool *p = rk->p;
	struct stor_ds *ds = rk->ds;
	double last_save = mono();
	char name[16];
	int ret = 0;

	snprintf(name, sizeof(name), "rekey:%s", p->name);
	(void)pthread_setname_np(pthread_self(), name);
	/* the whole pipeline of its records runs on this thread: at the lowest
	 * priority (Linux nice is per thread) the clients' I/O comes first on
	 * a busy machine, and the rate is only the most it takes */
	(void)setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), REKEY_NICE);
	atomic_fetch_add(&p->client_io_watchers, 1); /* pace() watches client_io */
	pthread_mutex_lock(&rk->lock);
	while (!rk->stop && rk->st.state == REKEY_RUNNING) {
		struct gather g = { 0 };
		struct reseal_table tb;
		size_t done = 0;
		uint64_t from = rk->cursor;
		unsigned table = rk->st.table;
		struct ds_keys *k = atomic_load(&ds->keys);
		int past;

		pthread_mutex_unlock(&rk->lock);
		ret = past = table_at(p, ds, table, &tb);
		if (ret == 0)
			ret = gather(p, tb.id, ds->recsize, k->gen, from, &g);
		if (ret == 0 && g.n)
			ret = reseal(p, ds, &tb, &g, &done);
		mac_key_put(tb.mk);
		if (ret < 0) {
			fail(rk, ret, g.n ? "sealing records again" : "reading block pointers");
			pthread_mutex_lock(&rk->lock);
			break;
		}
		if (past) {
			ret = finish(rk);
			if (ret < 0)
				fail(rk, ret, "ending the rekey");
			pthread_mutex_lock(&rk->lock);
			/* done, or round again for what a crash left behind */
			rk->cursor = 0;
			rk->st.table = 0;
			if (ret)
				break;
			continue;
		}
		pthread_mutex_lock(&rk->lock);
		rk->cursor = g.more ? g.last + 1 : 0;
		rk->st.table += !g.more; /* on to the next snapshot's table */
		rk->st.examined += g.seen;
		rk->st.rewritten += done;
		if (mono() - last_save >= 1.0) {
			pthread_mutex_unlock(&rk->lock);
			(void)save(rk); /* a failure costs only where a resume starts */
			last_save = mono();
			pthread_mutex_lock(&rk->lock);
		}
		pace(rk, g.seen);
	}
	if (rk->stop > 0) {
		rk->st.state = rk->stop;
		rk->stop = 0;
	}
	rk->walking = rk->walked = 0;
	pthread_mutex_unlock(&rk->lock);
	atomic_fetch_sub(&p->client_io_watchers, 1);
	(void)save(rk);
	return NULL;
}

static int start_thread(struct rekey *rk)
{
	int ret;

	if (rk->have_thread) {
		/* a thread that ended on its own (done, failed) is joined first */
		pthread_join(rk->thread, NULL);
		rk->have_thread = 0;
	}
	rk->stop = 0;
	rk->next = mono();
	pthread_mutex_lock(&rk->lock);
	rk->walking = 1;
	pthread_mutex_unlock(&rk->lock);
	ret = -pthread_create(&rk->thread, NULL, rekey_main, rk);
	rk->have_thread = ret == 0;
	if (ret < 0)
		rk->walking = 0;
	return ret;
}

/* The switch of @ds and of those of its family that a crash left before
 * theirs, checked first as at a start. */
static int switch_resumed(struct stor_pool *p, struct stor_ds *ds)
{
	struct stor_ds **fam = calloc(p->nds, sizeof(*fam));
	size_t n = fam ? family(p, ds, fam) : 0, m = 0;
	int ret = fam ? 0 : -ENOMEM;

	for (size_t i = 0; i < n && ret == 0; i++) {
		struct stor_ds *d = fam[i];
		struct ds_keys *k = atomic_load(&d->keys);
		struct rekey *rk = rekey_of(p, d);

		if (!rk)
			ret = -ENOMEM;
		else if (k && d->has_old && rk->mac_gen != k->gen &&
			 (ret = check_tree(p, d, k)) == 0)
			fam[m++] = d;
	}
	if (ret == 0)
		ret = switch_trees(p, fam, m, NULL);
	free(fam);
	return ret;
}

void rekey_resume(struct stor_pool *p, struct stor_ds *ds)
{
	struct ds_keys *k = atomic_load(&ds->keys);
	struct rekey *rk;
	int ret = 0;

	STOR_ASSERT_HELD(&p->admin);
	/* one under way, or a --scrub-free that a crash cut after the old key went */
	if (!ds->suite || !k || !(rk = rekey_of(p, ds)) ||
	    !(ds->has_old || atomic_load(&ds->encrypting) ||
	      (rk->st.state == REKEY_RUNNING && rk->scrub_free)))
		return;
	/* a crash between steps 1 and 2: the switch first, of its clones and
	 * origin with it (all are loaded by one load-key: one root) */
	if (ds->has_old && rk->mac_gen != k->gen)
		ret = switch_resumed(p, ds);
	if (ret < 0) {
		fail(rk, ret, "switching the MAC tree to the new key");
		return;
	}
	if (rk->st.state == REKEY_RUNNING && start_thread(rk) < 0)
		fail(rk, -EAGAIN, "starting its thread");
}

/* @rk's state for a walk from the start, of every record its dataset
 * holds now, its snapshots' too. */
static void begin(struct rekey *rk, uint64_t rate, int scrub)
{
	struct stor_ds *ds = rk->ds;
	uint64_t rs = ds->recsize ? ds->recsize : 1;

	pthread_mutex_lock(&rk->lock);
	memset(&rk->st, 0, sizeof(rk->st));
	rk->st.state = REKEY_RUNNING;
	rk->st.rate = rate;
	rk->st.start = wall();
	rk->st.total = (uint64_t)(atomic_load(&ds->used) + atomic_load(&ds->snap_used)) / rs;
	rk->cursor = 0;
	rk->scrub_free = scrub;
	pthread_mutex_unlock(&rk->lock);
}

/* ---- encryption in place ---- */

/* One dataset of an encryption in place, from its start to its switch. */
struct encrypt_one {
	struct stor_ds *ds, *shadow;
	struct ds_keys *k; /* its key state, the dataset's once the hook ran */
	struct rebuild *rb;
};

struct encrypt_arg {
	size_t n;
	struct encrypt_one *one; /* the root first, then its clones */
	char *local[4];          /* the root's encryption, keyformat, keylocation, pbkdf2iters */
	struct rebuild *rb;      /* every one's commit task, the stage's once enlisted */
};

static const int encrypt_props[4] = { PROP_ENCRYPTION, PROP_KEYFORMAT, PROP_KEYLOCATION,
				      PROP_PBKDF2ITERS };

/* As the txg closes, under the write hold: from here every write of the
 * datasets seals, every read goes through its MAC groups (all marked
 * verified: the commit builds them over what is there), and a clear
 * record reads until the walks have sealed them all. */
static int encrypt_hook(struct stor_pool *p, uint64_t txg, void *arg)
{
	struct encrypt_arg *a = arg;
	struct txg_task task = { .commit = rebuild_commit, .release = rebuild_release,
				 .arg = a->rb };
	int ret;

	(void)txg;
	ret = txg_enlist(p, &task);
	if (ret < 0)
		return ret;
	a->rb = NULL; /* the stage's now */
	for (size_t j = 0; j < a->n; j++) {
		struct encrypt_one *o = &a->one[j];
		struct stor_ds *ds = o->ds;

		ds->keyformat = o->shadow->keyformat;
		ds->iters = o->shadow->iters;
		memcpy(ds->salt, o->shadow->salt, sizeof(ds->salt));
		memcpy(ds->wrapped, o->shadow->wrapped, sizeof(ds->wrapped));
		ds->enc_root_id = o->shadow->enc_root_id;
		ds->keygen = 0;
		for (int i = 0; i < 4 && j == 0; i++) {
			free(ds->local[encrypt_props[i]]);
			ds->local[encrypt_props[i]] = a->local[i];
			a->local[i] = NULL;
		}
		for (size_t i = 0; i < o->rb->nsnaps; i++) {
			struct snap *s = o->rb->snaps[i].s;

			pthread_mutex_lock(&s->lock);
			mac_key_put(s->mk);
			s->mk = mac_key_ref(o->rb->snaps[i].mk);
			pthread_mutex_unlock(&s->lock);
		}
		atomic_store(&ds->encrypting, 1);
		atomic_store(&ds->keys, o->k);
		o->k = NULL;
		ds->suite = o->shadow->suite;
	}
	return 0;
}

/* What an encryption in place of @ds, with the others of its family @fam
 * (@n, @ds first), refuses, with its reason. */
static int refuse_encrypt(struct stor_pool *p, struct stor_ds *ds, struct stor_ds *const *fam,
			  size_t n)
{
	size_t len = strlen(ds->name);

	if (ds->origin) {
		pool_set_error("%s is a clone: it shares the key of %s, whose records it reads; "
			       "encrypt %s, and its clones are encrypted with it",
			       ds->name, fam[0]->name, fam[0]->name);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		if (atomic_load(&fam[i]->receiving)) {
			pool_set_error("%s is being received; encrypt %s once that is done",
				       fam[i]->name, ds->name);
			return -EBUSY;
		}
		/* a clone's key is wrapped by its encryption root's (dskeys_clone) */
		if (i > 0 && (strncmp(fam[i]->name, ds->name, len) || fam[i]->name[len] != '/')) {
			pool_set_error("clone %s would share the key of %s, whose records it "
				       "reads, and is not under it: rename it under %s first",
				       fam[i]->name, ds->name, ds->name);
			return -EXDEV;
		}
	}
	/* no clear dataset under an encrypted one (dataset.c's check_crypto) */
	for (size_t i = 0; i < p->nds; i++) {
		const struct stor_ds *d = p->ds[i];
		int member = 0;

		for (size_t j = 0; j < n; j++)
			member |= fam[j] == d;
		if (!d->suite && !member && !strncmp(d->name, ds->name, len) &&
		    d->name[len] == '/') {
			pool_set_error("%s is not encrypted and would be under an encrypted "
				       "dataset: encrypt it first (each below %s)", d->name, ds->name);
			return -EBUSY;
		}
	}
	return 0;
}

/* The value of property @name in @props ("NAME=VALUE"), or NULL. */
static const char *prop_arg(const char *const *props, size_t n, const char *name)
{
	size_t len = strlen(name);

	for (size_t i = 0; i < n; i++)
		if (!strncmp(props[i], name, len) && props[i][len] == '=')
			return props[i] + len + 1;
	return NULL;
}

/* Everything but the hook for @o, one of @a's, with @a's datasets' @suite. */
static int encrypt_prepare_one(struct stor_pool *p, struct encrypt_arg *a,
			       struct encrypt_one *o, unsigned suite, uint64_t rate, int scrub)
{
	struct stor_ds *ds = o->ds;
	struct stor_ds **becoming = calloc(a->n, sizeof(*becoming));
	struct rekey *rk = rekey_of(p, ds);
	struct rebuild *rb = calloc(1, sizeof(*rb));
	int ret = rk && rb && becoming ? 0 : -ENOMEM;

	if (ret < 0) {
		free(rb);
		free(becoming);
		return ret;
	}
	rb->next = a->rb;
	a->rb = rb;
	for (size_t i = 0; i < a->n; i++)
		becoming[i] = a->one[i].ds;
	begin(rk, rate, scrub);
	pthread_mutex_lock(&rk->lock);
	rk->mac_gen = 0;
	rb->st = rk->st;
	pthread_mutex_unlock(&rk->lock);
	rb->ds = ds;
	rb->encrypt = 1;
	rb->flags = ROW_ENCRYPTING | (scrub ? ROW_SCRUB_FREE : 0);
	rb->mk = mac_key_ref(o->k->mac);
	o->rb = rb;
	ret = list_kids(p, ds, becoming, a->n, suite, rb);
	free(becoming);
	if (ret == 0)
		ret = list_snaps(ds, o->k->master, suite, rb);
	/* every group verified: the commit builds them from what is there */
	if (ret == 0)
		ret = mark_all_seen(&o->k->seen, atomic_load(&ds->volsize), ds->recsize);
	for (size_t i = 0; i < ds->nsnaps && ret == 0; i++) {
		struct snap *s = ds->snaps[i];

		pthread_mutex_lock(&s->lock);
		ret = mark_all_seen(&s->seen, s->volsize, ds->recsize);
		pthread_mutex_unlock(&s->lock);
	}
	return ret;
}

static int encrypt_start(struct stor_pool *p, struct stor_ds *ds, const char *const *props,
			 size_t nprops, const struct stor_key_material *key, uint64_t rate,
			 int scrub)
{
	const char *enc = prop_arg(props, nprops, "encryption");
	const char *fmt = prop_arg(props, nprops, "keyformat");
	const char *loc = prop_arg(props, nprops, "keylocation");
	const char *iters = prop_arg(props, nprops, "pbkdf2iters");
	char canon[4][256] = { "", "", "prompt", "" };
	struct stor_ds *shadows = NULL, **fam = NULL;
	struct ds_keys **states = NULL;
	struct encrypt_arg a = { 0 };
	size_t n = 0;
	int ret = 0, suite;

	for (size_t i = 0; i < nprops; i++)
		if (strncmp(props[i], "encryption=", 11) && strncmp(props[i], "keyformat=", 10) &&
		    strncmp(props[i], "keylocation=", 12) && strncmp(props[i], "pbkdf2iters=", 12)) {
			pool_set_error("%s: only encryption, keyformat, keylocation and "
				       "pbkdf2iters go with an encryption in place", props[i]);
			return STOR_EBADPROP;
		}
	if (!enc || !fmt) {
		pool_set_error("%s: encrypting it needs encryption=SUITE and keyformat=raw, hex "
			       "or passphrase", ds->name);
		return -EINVAL;
	}
	fam = calloc(p->nds, sizeof(*fam));
	if (!fam)
		return -ENOMEM;
	n = family(p, ds, fam);
	ret = refuse_encrypt(p, ds, fam, n);
	for (int i = 0; i < 4 && ret == 0; i++) {
		const char *v = i == 0 ? enc : i == 1 ? fmt : i == 2 ? loc : iters;

		if (v)
			ret = prop_validate(encrypt_props[i], v, canon[i], sizeof(canon[i]));
	}
	suite = ret == 0 ? crypt_suite_parse(canon[0]) : CRYPT_OFF;
	if (ret == 0 && suite <= CRYPT_OFF) {
		pool_set_error("%s: encryption=%s encrypts nothing", ds->name, enc);
		ret = STOR_EBADPROP;
	}
	if (ret == 0) {
		shadows = calloc(n, sizeof(*shadows));
		states = calloc(n, sizeof(*states));
		a.one = calloc(n, sizeof(*a.one));
		ret = shadows && states && a.one ? 0 : -ENOMEM;
	}
	if (ret == 0)
		ret = dskeys_encrypt_prepare(p, fam, n, (unsigned)suite, canon[1],
					     iters ? canon[3] : NULL, canon[2], key, shadows, states);
	if (ret < 0)
		goto out;
	/* from here the key file has the keys, marked pending until the commit */
	if (shadows[0].keyformat == STOR_KEY_PASSPHRASE && !iters)
		snprintf(canon[3], sizeof(canon[3]), "%u", shadows[0].iters);
	for (int i = 0; i < 4 && ret == 0; i++)
		if (canon[i][0] && !(a.local[i] = strdup(canon[i])))
			ret = -ENOMEM;
	a.n = n;
	for (size_t i = 0; i < n; i++) {
		a.one[i] = (struct encrypt_one){ fam[i], &shadows[i], states[i], NULL };
		states[i] = NULL;
	}
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = encrypt_prepare_one(p, &a, &a.one[i], (unsigned)suite, rate, scrub);
	if (ret == 0)
		ret = txg_sync_close(p, encrypt_hook, &a);
	rebuild_free(a.rb); /* not enlisted */
	for (int i = 0; i < 4; i++)
		free(a.local[i]);
	for (size_t i = 0; i < n; i++)
		dskeys_state_free(a.one[i].k); /* not installed */
	if (ret < 0) {
		pool_set_error("%s: its encryption could not start (%s); it stays clear, and "
			       "its key file entry goes with the next change", ds->name,
			       stor_strerror(ret));
		goto out;
	}
	(void)keyfile_save(p, NULL); /* the pending marks go; harmless if they stay */
	for (size_t i = 0; i < n && ret == 0; i++) {
		EVENT(STOR_EV_REKEY_START, p->name, EV_STR("dataset", fam[i]->name),
		      EV_NUM("resumed", 0));
		ret = start_thread(fam[i]->rekey);
	}
out:
	free(a.one);
	free(states);
	free(shadows);
	free(fam);
	return ret;
}

/* ---- rekeystatus ---- */

/* @n bytes as the largest binary unit that states them whole: 64M, 1536K. */
static void size_text(uint64_t n, char *buf, size_t len)
{
	static const char units[] = "BKMGT";
	unsigned u = 0;

	while (u + 1 < sizeof(units) - 1 && n >= 1024 && n % 1024 == 0) {
		n /= 1024;
		u++;
	}
	snprintf(buf, len, "%" PRIu64 "%c", n, units[u]);
}

/* @ds's rekey state, if it was ever rekeyed: none is made for a listing. */
static struct rekey *rekey_if_any(struct stor_pool *p, struct stor_ds *ds)
{
	struct rekey_stat st;
	uint64_t cursor;
	unsigned gen, flags;

	if (!ds->suite || ds->snap)
		return NULL;
	if (ds->rekey || ds->has_old || row_get(p, ds->id, &gen, &cursor, &st, &flags) != -ENOENT)
		return rekey_of(p, ds);
	return NULL;
}

void rekey_status_text(struct stor_pool *p, struct stor_ds *ds, char *buf, size_t len)
{
	struct rekey *rk = rekey_if_any(p, ds);
	struct rekey_stat st;
	char rate[32], when[40] = "";
	unsigned pct;
	struct tm tm;
	time_t t;

	STOR_ASSERT_HELD(&p->admin);
	if (ds->snap) {
		snprintf(buf, len, "-"); /* a snapshot is rekeyed with its dataset, or not */
		return;
	}
	if (!rk) {
		snprintf(buf, len, ds->suite ? "none" : "-");
		return;
	}
	pthread_mutex_lock(&rk->lock);
	st = rk->st;
	pthread_mutex_unlock(&rk->lock);
	pct = !st.total ? 0 : st.examined >= st.total ? 100 : (unsigned)(st.examined * 100 / st.total);
	switch (st.state) {
	case REKEY_RUNNING:
		if (!atomic_load(&ds->keys)) {
			snprintf(buf, len, "running, waits for load-key");
			return;
		}
		size_text(st.rate, rate, sizeof(rate));
		snprintf(buf, len, "running %u%% (%" PRIu64 "/%" PRIu64 " records, %s%s)", pct,
			 st.examined, st.total, st.rate ? rate : "no rate limit", st.rate ? "/s" : "");
		return;
	case REKEY_PAUSED:
	case REKEY_STOPPED:
		snprintf(buf, len, "%s %u%%", st.state == REKEY_PAUSED ? "paused" : "stopped",
			 pct);
		return;
	case REKEY_DONE:
		t = (time_t)st.end;
		if (st.end && gmtime_r(&t, &tm))
			strftime(when, sizeof(when), " %Y-%m-%d %H:%M UTC", &tm);
		snprintf(buf, len, "done%s", when);
		return;
	case REKEY_FAILED:
		snprintf(buf, len, "failed: %s", st.error);
		return;
	default:
		snprintf(buf, len, "none");
		return;
	}
}

void rekey_busy_error(const struct stor_ds *ds, const char *what)
{
	pool_set_error("%s is being rekeyed; %s once that is done (coffer get rekeystatus %s)",
		       ds->name, what, ds->name);
}

/* ---- the calls ---- */

/* What a start refuses, with its reason. */
static int refuse(struct stor_ds *ds)
{
	if (!ds->suite) {
		pool_set_error("%s is not encrypted: there is no key to change", ds->name);
		return STOR_ENOTENCRYPTED;
	}
	if (!atomic_load(&ds->keys)) {
		pool_set_error("the key of %s is not loaded; load it to rekey", ds->name);
		return STOR_ENOKEY;
	}
	if (atomic_load(&ds->receiving)) {
		pool_set_error("%s is being received; rekey it once that is done", ds->name);
		return -EBUSY;
	}
	/* a clone reads its origin's records: both under one generation */
	if (ds->origin && ds->keygen != ds->origin->ds->keygen) {
		pool_set_error("%s: its key generation is not its origin's (%s): its key file "
			       "entry was changed", ds->name, ds->origin->ds->name);
		return STOR_ECORRUPT;
	}
	return 0;
}

/* Is @rk's rekey under way and left to go on (paused, stopped, failed, or
 * past the old key's end with a --scrub-free left to do)? */
static int resumable(const struct rekey *rk)
{
	return rk->ds->has_old || atomic_load(&rk->ds->encrypting) ||
	       (rk->scrub_free && rk->st.state != REKEY_NONE && rk->st.state != REKEY_DONE);
}

static int running(const struct rekey *rk)
{
	return rk->have_thread && rk->st.state == REKEY_RUNNING;
}

/* @rk's rekey on from where it was. */
static int resume(struct stor_pool *p, struct rekey *rk, uint64_t rate, int scrub)
{
	struct ds_keys *k = atomic_load(&rk->ds->keys);
	int ret;

	pthread_mutex_lock(&rk->lock);
	rk->st.state = REKEY_RUNNING;
	rk->st.rate = rate;
	rk->st.error[0] = '\0';
	rk->scrub_free |= scrub; /* asked at any start, it stays asked */
	pthread_mutex_unlock(&rk->lock);
	if (rk->mac_gen != k->gen) {
		rekey_resume(p, rk->ds);
		return rk->st.state == REKEY_FAILED ? -EIO : 0;
	}
	ret = start_thread(rk);
	EVENT(STOR_EV_REKEY_START, p->name, EV_STR("dataset", rk->ds->name), EV_NUM("resumed", 1));
	return ret;
}

/*
 * Start the rekey of the @n datasets of one master key @fam, or resume
 * theirs; with @suite (0: theirs), a change of their suite. One new master
 * for all, in one save of the key file; all switch in one txg before any
 * walks, since a clone reads its origin's records under the master they
 * share, and is of its suite.
 */
static int start(struct stor_pool *p, struct stor_ds **fam, size_t n, uint64_t rate, int scrub,
		 unsigned suite)
{
	uint8_t *master = NULL;
	size_t under_way = 0, resumed = 0;
	int ret = 0;

	for (size_t i = 0; i < n; i++) {
		struct rekey *rk = rekey_of(p, fam[i]);

		if (!rk)
			return -ENOMEM;
		under_way += resumable(rk);
	}
	if (under_way) {
		for (size_t i = 0; i < n && ret == 0; i++)
			if (resumable(fam[i]->rekey) && !running(fam[i]->rekey)) {
				ret = resume(p, fam[i]->rekey, rate, scrub);
				resumed++;
			}
		if (ret == 0 && !resumed) {
			pool_set_error("a rekey of %s is running", fam[0]->name);
			return -EBUSY;
		}
		return ret;
	}
	for (size_t i = 0; i < n && ret == 0; i++)
		ret = check_tree(p, fam[i], atomic_load(&fam[i]->keys));
	if (ret == 0 && !(master = keys_secure_alloc(KEYS_MASTER_LEN)))
		ret = -ENOMEM;
	if (ret == 0)
		ret = dskeys_new_gen(p, fam, n, master, suite);
	if (ret < 0) {
		keys_secure_free(master, KEYS_MASTER_LEN);
		return ret;
	}
	for (size_t i = 0; i < n; i++)
		begin(fam[i]->rekey, rate, scrub);
	/* the key file has the new key for all now: a failure from here is resumed */
	ret = switch_trees(p, fam, n, master);
	for (size_t i = 0; i < n && ret < 0; i++)
		fail(fam[i]->rekey, ret, "switching the MAC tree to the new key");
	for (size_t i = 0; i < n && ret == 0; i++) {
		EVENT(STOR_EV_REKEY_START, p->name, EV_STR("dataset", fam[i]->name),
		      EV_NUM("resumed", 0));
		ret = start_thread(fam[i]->rekey);
	}
	return ret;
}

/* One dataset's pause or stop (admin lock held). */
static int halt_one(struct stor_pool *p, struct stor_ds *ds, int what)
{
	struct rekey *rk = rekey_under_way(ds) ? rekey_of(p, ds) : NULL;

	if (!rk || (what == STOR_REKEY_PAUSE && rk->st.state != REKEY_RUNNING)) {
		pool_set_error("no rekey of %s is %s", ds->name,
			       what == STOR_REKEY_PAUSE ? "running" : "under way");
		return -ENOENT;
	}
	rekey_halt(ds);
	pthread_mutex_lock(&rk->lock);
	rk->st.state = what == STOR_REKEY_PAUSE ? REKEY_PAUSED : REKEY_STOPPED;
	pthread_mutex_unlock(&rk->lock);
	return save(rk);
}

/* Mark @d and the others of its master key in @sel (by table index). */
static void select_family(struct stor_pool *p, struct stor_ds *d, struct stor_ds **tmp,
			  uint8_t *sel)
{
	size_t n = family(p, d, tmp);

	for (size_t i = 0; i < n; i++)
		for (size_t j = 0; j < p->nds; j++)
			if (p->ds[j] == tmp[i])
				sel[j] = 1;
}

int stor_rekey(struct stor_pool *p, const char *name, int what, uint64_t rate)
{
	int recursive = what & STOR_REKEY_RECURSIVE, scrub = !!(what & STOR_REKEY_SCRUB_FREE), ret = 0;
	size_t len = strlen(name);
	struct stor_ds *ds, **fam = NULL;
	uint8_t *sel = NULL;

	what &= ~(STOR_REKEY_RECURSIVE | STOR_REKEY_SCRUB_FREE);
	pool_set_error("%s", "");
	pthread_mutex_lock(&p->admin);
	ds = ds_find_locked(p, name);
	if (!ds || strchr(name, '@')) {
		ret = -ENOENT;
		goto out;
	}
	fam = calloc(p->nds, sizeof(*fam));
	sel = calloc(p->nds, 1);
	if (!fam || !sel) {
		ret = -ENOMEM;
		goto out;
	}
	if (what != STOR_REKEY_START && !rekey_under_way(ds)) {
		ret = halt_one(p, ds, what); /* says why not */
		goto out;
	}
	if (what == STOR_REKEY_START && (ret = refuse(ds)) < 0)
		goto out;
	/* it, with -r every encrypted dataset below it, and with each the
	 * others of its master key (its clones, its origin), each checked
	 * before any starts; a pause or stop of those that have one under way */
	for (size_t i = 0; i < p->nds; i++) {
		struct stor_ds *d = p->ds[i];
		int below = recursive && !strncmp(d->name, name, len) && d->name[len] == '/';

		if (d == ds || (below && d->suite))
			select_family(p, d, fam, sel);
	}
	for (size_t i = 0; i < p->nds && ret == 0; i++) {
		if (sel[i] && what == STOR_REKEY_START)
			ret = refuse(p->ds[i]);
		else if (sel[i] && rekey_under_way(p->ds[i]))
			ret = halt_one(p, p->ds[i], what);
		/* the named one says why not; of the others, those that can */
		if (ret == -ENOENT && p->ds[i] != ds) {
			ret = 0;
			pool_set_error("%s", "");
		}
	}
	/* each master key's datasets together */
	for (size_t i = 0; i < p->nds && ret == 0 && what == STOR_REKEY_START; i++) {
		size_t n;

		if (!sel[i])
			continue;
		n = family(p, p->ds[i], fam);
		for (size_t k = 0; k < n; k++)
			for (size_t j = 0; j < p->nds; j++)
				if (p->ds[j] == fam[k])
					sel[j] = 0;
		ret = start(p, fam, n, rate, scrub, 0);
	}
out:
	pthread_mutex_unlock(&p->admin);
	free(fam);
	free(sel);
	return ret;
}

/* ---- a change of suite ---- */

/* The other suite of an encrypted @ds (encryption=SUITE alone): a rekey
 * of its family whose new master key is of that suite. */
static int resuite_start(struct stor_pool *p, struct stor_ds *ds, const char *const *props,
			 size_t nprops, const struct stor_key_material *key, uint64_t rate,
			 int scrub)
{
	const char *enc = prop_arg(props, nprops, "encryption");
	struct stor_ds **fam;
	char canon[64];
	size_t n;
	int ret, suite;

	if (nprops != 1 || !enc || key) {
		pool_set_error("%s is encrypted: a change of its suite takes encryption=SUITE "
			       "alone, and keeps its key (change-key changes that)", ds->name);
		return -EINVAL;
	}
	ret = prop_validate(PROP_ENCRYPTION, enc, canon, sizeof(canon));
	if (ret < 0)
		return ret;
	suite = crypt_suite_parse(canon);
	if (suite <= CRYPT_OFF) {
		pool_set_error("%s: an encrypted dataset is not made clear again (encryption=%s)",
			       ds->name, enc);
		return STOR_EBADPROP;
	}
	if (suite == ds->suite) {
		pool_set_error("%s is %s already", ds->name, canon);
		return -EEXIST;
	}
	fam = calloc(p->nds, sizeof(*fam));
	if (!fam)
		return -ENOMEM;
	n = family(p, ds, fam);
	for (size_t i = 0; i < n && ret == 0; i++) {
		size_t pi = ds_parent_index_locked(p, fam[i]);
		struct stor_ds *up = pi < p->nds ? p->ds[pi] : NULL;

		ret = refuse(fam[i]);
		if (ret == 0 && rekey_under_way(fam[i])) {
			rekey_busy_error(fam[i], "change its suite");
			ret = -EBUSY;
		}
		/* its parent's list of encrypted children names its suite */
		if (ret == 0 && up && up->suite && !fam[i]->unlisted && !atomic_load(&up->keys)) {
			pool_set_error("the key of %s is not loaded; load it to change the suite of "
				       "%s, which its list of children names", up->name, fam[i]->name);
			ret = STOR_ENOKEY;
		}
	}
	if (ret == 0)
		ret = start(p, fam, n, rate, scrub, (unsigned)suite);
	free(fam);
	return ret;
}

int stor_ds_encrypt(struct stor_pool *p, const char *name, const char *const *props,
		    size_t nprops, const struct stor_key_material *key, uint64_t rate,
		    unsigned flags)
{
	struct stor_ds *ds;
	int ret;

	pool_set_error("%s", "");
	pthread_mutex_lock(&p->admin);
	ds = strchr(name, '@') ? NULL : ds_find_locked(p, name);
	if (!ds)
		ret = -ENOENT;
	else if (ds->suite)
		ret = resuite_start(p, ds, props, nprops, key, rate, !!(flags & STOR_REKEY_SCRUB_FREE));
	else
		ret = encrypt_start(p, ds, props, nprops, key, rate,
				    !!(flags & STOR_REKEY_SCRUB_FREE));
	pthread_mutex_unlock(&p->admin);
	return ret;
}
