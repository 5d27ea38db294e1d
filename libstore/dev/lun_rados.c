/* SPDX-License-Identifier: MIT */
/*
 * LUNs on Ceph RADOS: the backend behind a LUN path "rados:POOL/PREFIX"
 * (lun_rados_backend, a row of lun.c's table of backends).
 *
 * Layout. The LUN's bytes - labels, uberblock ring, data area, end label,
 * as format.h lays them out for a file - are cut into objects of
 * RADOS_OBJ_SIZE (4 MiB, as RBD cuts an image), object n named
 * "PREFIX.%016llx" and covering [n * 4 MiB, (n + 1) * 4 MiB). Objects are
 * made by their first write; a missing object, or the part of one past its
 * end, reads as zeros, as a hole of a sparse file does. The LUN's size is a
 * property of the LUN kept in the object "PREFIX.lun" (u64 magic
 * "COFFRLUN" | u64 size, big-endian), which lun_open(LUN_CREATE) makes and
 * every open reads; the lock below lives on that object too.
 *
 * Index. The Ceph pool's object "coffer.luns" has an omap key for each
 * LUN's prefix: a create adds it (and so does every open that claims the
 * LUN, which indexes LUNs made before the index existed), an unmade or
 * removed LUN takes it out. A scan of "rados:POOL" (import -d) reads that
 * omap, so it costs O(LUNs) however many other objects the Ceph pool
 * holds (RBD keeps its images in the rbd_directory object the same way);
 * only a Ceph pool with no index at all is listed object by object, for
 * ".lun" objects. A pool is imported from the cluster alone, its labels
 * and metadata log found where a file would have them.
 *
 * Removal. pool destroy removes every object of its RADOS LUNs
 * (lun_remove): the data objects by number, a window of them in flight at
 * a time, reporting progress, then the ".lun" object with its lock, then
 * the index key. A LUN file is left where it is, wiped of its labels, as
 * zpool destroy leaves its devices.
 *
 * I/O. Every extent of a batch becomes one rados_aio_read/write per object
 * it touches; all go out before the first is waited for, so a batch costs
 * a round trip to the slowest OSD, not the sum. A write completes when the
 * cluster acknowledges it, which Ceph only does once every replica has it
 * durable: a flush has nothing left to wait for but rados_aio_flush of
 * whatever is still in flight. Operations time out (rados_osd_op_timeout,
 * 30 s unless the ceph.conf sets one) rather than wait forever for an OSD
 * that is gone; a timeout or any other failure of an object is -EIO for
 * the extent, and a read never yields zeros for an object it could not
 * read.
 *
 * The claim: one host at a time. A file LUN is claimed with flock, which
 * another host cannot see; here the open takes rados_lock_exclusive
 * ("coffer", a cookie of its host id, pid and a random part) on "PREFIX.lun"
 * with a duration (ceph_lock_timeout, 30 s). A second opener anywhere gets
 * -EBUSY, so a second daemon's import fails "in use" while the first
 * holds the pool. The daemon renews the lock from a timer (lun_renew, every
 * third of the duration). The lock expires if its holder stops renewing (it
 * died, or lost the cluster): only then can another host take it, and
 * since the labels still say "active under host X", its import needs -f -
 * so import -f takes over a pool only after the old owner's lock expired,
 * never while it is alive and renewing.
 *
 * Fencing. A holder that could not renew in time may have lost the lock
 * to another host: from the moment its last successful renewal is a
 * duration old (measured from before that renewal was sent, so early
 * rather than late) it refuses every write (-EIO) and never unfences;
 * the pool must be exported and imported again. A renewal that the OSD
 * refuses (the lock was broken or taken) fences at once.
 *
 * That fence is the holder's own, and cannot cover a write it sent before
 * it fenced that librados or an OSD holds back (a stopped process, a
 * paused cluster, a partition) until after another host took the pool
 * over. So the cluster fences it too, as RBD's exclusive lock does: each
 * open records its client address in the ".lun" object (the xattr
 * "coffer.owner": host id, pid, address), and a clean close removes it.
 * An open that takes the lock and finds an owner recorded that is not
 * itself - a holder that died or stalled and whose lock expired -
 * blocklists that address in the OSD map (rados_blocklist_add, for
 * RADOS_BLOCKLIST_SECS) and waits for the map that says so before it
 * reads or writes anything; from then on every OSD refuses whatever that
 * client sends (-EBLOCKLISTED), queued or new. The open says whom it
 * blocklisted (lun_took_over, the pool's "pool.takeover" event). Only an
 * expired lock is taken: import -f never breaks the lock of a host that
 * still renews it, as zpool import -f refuses a pool whose multihost
 * activity check sees its owner alive. The owner record is trusted as the
 * lock beside it is: a client that may write the Ceph pool can make the
 * next takeover blocklist an address of its choosing for an hour (or
 * refuse the import with a record Ceph cannot parse), as it can already
 * remove the LUN; give cofferd's Ceph user a pool of its own.
 *
 * The old holder, woken, finds its writes and its renewal refused and is
 * fenced; it asks the cluster through a connection of its own (the LUN's
 * is refused everything) who holds the LUN now, and the pool's status says
 * so (lun_fenced). Each claimed LUN has its own cluster connection, so a
 * takeover blocklists the LUNs of the pool taken over and none of the
 * daemon's other pools; opens that claim nothing (a scan's LUN_PEEK) share
 * one.
 *
 * Many hosts: each pool has one owner at a time, so a deployment scales by
 * pools - one cofferd per pool, or per group of datasets in a pool of
 * their own, on as many hosts as needed, each pool's LUNs spread over the
 * whole cluster by CRUSH, and NBD clients spread over the cofferd hosts.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dev/lun_impl.h"
#include "store.h"

#ifdef HAVE_RADOS
#include <rados/librados.h>

#define RADOS_OBJ_SIZE (4ull << 20)
#define RADOS_META_MAGIC 0x434f4646524c554eull /* "COFFRLUN" */
#define RADOS_META_LEN 16u
#define RADOS_LOCK "coffer"
#define RADOS_OID_MAX 256u
#define RADOS_INDEX "coffer.luns"
#define RADOS_REMOVE_WINDOW 128u /* object removals in flight at a time */
#define RADOS_OWNER_XATTR "coffer.owner"
#define RADOS_OWNER_MAX 192u
/* How long a holder whose lock another host took stays blocklisted: far
 * past any operation of its librados (rados_osd_op_timeout, 30 s), and
 * Ceph's own default (osd_blocklist_default_expire) */
#define RADOS_BLOCKLIST_SECS 3600u
#define EBLOCKLISTED ESHUTDOWN /* what Ceph answers a blocklisted client */

struct lun_rados {
	rados_t c; /* this LUN's own connection: a blocklist fences this LUN only */
	rados_ioctx_t io;
	char *prefix;
	char meta[RADOS_OID_MAX];
	char cookie[64];
	char owner[RADOS_OWNER_MAX]; /* "host H pid P addr A": this open's record */
	char took_over[RADOS_OWNER_MAX]; /* the previous owner it blocklisted, or "" */
	int peek;            /* LUN_PEEK: c is the shared connection */
	int locked, claimed; /* claimed: the owner record is ours */
	atomic_int fenced;
	pthread_mutex_t fence_lock; /* fenced_by, asked once */
	char fenced_by[RADOS_OWNER_MAX + 64];
	atomic_int_fast64_t lock_until; /* CLOCK_MONOTONIC ns the lock surely lasts */
};

/* One connection shared by the opens that claim nothing (LUN_PEEK: a scan
 * reading labels) and by scans: it never holds a lock, so no takeover
 * blocklists it. Made at first use, shut down with its last user. */
static pthread_mutex_t shared_lock = PTHREAD_MUTEX_INITIALIZER;
static rados_t shared;
static unsigned shared_refs;

/* Where and as whom to connect, set before the first open. */
static pthread_mutex_t cfg_lock = PTHREAD_MUTEX_INITIALIZER;
static char *cfg_conf, *cfg_user, *cfg_keyring;
static unsigned cfg_lock_secs = STOR_RADOS_LOCK_DEFAULT;

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int set_str(char **dst, const char *v)
{
	char *c = v && v[0] ? strdup(v) : NULL;

	if (v && v[0] && !c)
		return -ENOMEM;
	free(*dst);
	*dst = c;
	return 0;
}

int stor_rados_config(const char *conf, const char *user, const char *keyring,
		      unsigned lock_timeout)
{
	int ret;

	pthread_mutex_lock(&cfg_lock);
	ret = set_str(&cfg_conf, conf);
	if (ret == 0)
		ret = set_str(&cfg_user, user);
	if (ret == 0)
		ret = set_str(&cfg_keyring, keyring);
	if (ret == 0 && lock_timeout)
		cfg_lock_secs = lock_timeout;
	pthread_mutex_unlock(&cfg_lock);
	return ret;
}

/* Set @key to @v unless the ceph.conf gave it a value other than @dflt. */
static void conf_default(rados_t c, const char *key, const char *dflt, const char *v)
{
	char cur[64];

	if (rados_conf_get(c, key, cur, sizeof(cur)) < 0 || strtod(cur, NULL) == strtod(dflt, NULL))
		rados_conf_set(c, key, v);
}

/* A new connection to the cluster (about 20 ms to a local mon). */
static int cluster_connect(rados_t *out)
{
	rados_t c;
	int ret;

	pthread_mutex_lock(&cfg_lock);
	ret = rados_create(&c, cfg_user ? cfg_user : "admin");
	if (ret == 0) {
		/* NULL: Ceph's own search ($CEPH_CONF, /etc/ceph/ceph.conf, ...) */
		ret = rados_conf_read_file(c, cfg_conf);
		if (ret == 0 && cfg_keyring)
			ret = rados_conf_set(c, "keyring", cfg_keyring);
		/* an OSD or mon that is gone fails the operation, not hangs it */
		conf_default(c, "rados_osd_op_timeout", "0", "30");
		conf_default(c, "rados_mon_op_timeout", "0", "30");
		conf_default(c, "client_mount_timeout", "300", "30");
		if (ret < 0)
			rados_shutdown(c);
	}
	pthread_mutex_unlock(&cfg_lock);
	if (ret < 0)
		return ret;
	ret = rados_connect(c);
	if (ret < 0) {
		rados_shutdown(c);
		return ret;
	}
	*out = c;
	return 0;
}

static int shared_get(rados_t *out)
{
	int ret = 0;

	pthread_mutex_lock(&shared_lock);
	if (shared_refs == 0)
		ret = cluster_connect(&shared);
	if (ret == 0) {
		shared_refs++;
		*out = shared;
	}
	pthread_mutex_unlock(&shared_lock);
	return ret;
}

static void shared_put(void)
{
	pthread_mutex_lock(&shared_lock);
	if (--shared_refs == 0) {
		rados_shutdown(shared);
		shared = NULL;
	}
	pthread_mutex_unlock(&shared_lock);
}

/* "rados:POOL/PREFIX" into @pool and @prefix; -EINVAL if it is not one. */
static int parse_path(const char *path, char *pool, size_t poollen, const char **prefix)
{
	const char *p = path + strlen(LUN_RADOS_PREFIX), *slash = strchr(p, '/');

	if (!slash || slash == p || (size_t)(slash - p) >= poollen || !slash[1] ||
	    strlen(slash + 1) + 32 >= RADOS_OID_MAX)
		return -EINVAL;
	memcpy(pool, p, (size_t)(slash - p));
	pool[slash - p] = '\0';
	*prefix = slash + 1;
	return 0;
}

/* Any failure of an object's I/O is an I/O error of the LUN, but these. */
static int io_error(int r)
{
	return r == -ENOSPC || r == -EDQUOT || r == -ENOMEM ? r : -EIO;
}

/* Add (@add) or take out @rl's prefix in the Ceph pool's index of LUNs. */
static int index_set(struct lun_rados *rl, int add)
{
	rados_write_op_t op = rados_create_write_op();
	const char *key = rl->prefix, *val = "";
	size_t klen = strlen(key), vlen = 0;
	int ret;

	if (!op)
		return -ENOMEM;
	if (add) {
		rados_write_op_create(op, LIBRADOS_CREATE_IDEMPOTENT, NULL);
		rados_write_op_omap_set2(op, &key, &val, &klen, &vlen, 1);
	} else {
		rados_write_op_omap_rm_keys2(op, &key, &klen, 1);
	}
	ret = rados_write_op_operate(op, rl->io, RADOS_INDEX, NULL, 0);
	rados_release_write_op(op);
	return ret == -ENOENT && !add ? 0 : ret;
}

/* One object's part of a request. */
struct piece {
	struct lun_rados *rl;
	rados_completion_t c;
	char *buf;
	size_t len;
	int *result; /* of the request it belongs to */
	int write, issued;
};

/* A request on a whole LUN byte range, as the batch and sync rounds make. */
struct rreq {
	struct lun *l;
	int write;
	void *buf;
	size_t len;
	uint64_t off;
	int result;
};

static size_t pieces_of(const struct rreq *r)
{
	if (!r->len)
		return 0;
	return (size_t)((r->off + r->len - 1) / RADOS_OBJ_SIZE - r->off / RADOS_OBJ_SIZE + 1);
}

/* Issue one object's part: @oid at @objoff. */
static void issue(struct lun_rados *rl, struct piece *pc, const char *oid, uint64_t objoff)
{
	int ret = rados_aio_create_completion2(NULL, NULL, &pc->c);

	if (ret == 0)
		ret = pc->write ? rados_aio_write(rl->io, oid, pc->c, pc->buf, pc->len, objoff)
				: rados_aio_read(rl->io, oid, pc->c, pc->buf, pc->len, objoff);
	if (ret < 0) {
		if (pc->c)
			rados_aio_release(pc->c);
		pc->c = NULL;
		if (*pc->result == 0)
			*pc->result = io_error(ret);
		return;
	}
	pc->issued = 1;
}

static void reap(struct piece *pc)
{
	int r;

	if (!pc->issued)
		return;
	rados_aio_wait_for_complete(pc->c);
	r = rados_aio_get_return_value(pc->c);
	rados_aio_release(pc->c);
	if (!pc->write && (r == -ENOENT || (r >= 0 && (size_t)r < pc->len))) {
		/* never written (or not this far): a hole reads as zeros */
		size_t got = r > 0 ? (size_t)r : 0;

		memset(pc->buf + got, 0, pc->len - got);
		r = 0;
	}
	if (r == -EBLOCKLISTED)
		atomic_store(&pc->rl->fenced, 1); /* another host took the LUN over */
	if (r < 0 && *pc->result == 0)
		*pc->result = io_error(r);
}

/* Run @n requests: every object's part issued, then every one waited for. */
static void run(struct rreq *rq, size_t n)
{
	size_t npieces = 0, k = 0;
	struct piece *pcs;

	for (size_t i = 0; i < n; i++) {
		struct lun_rados *rl = rq[i].l->rados;

		rq[i].result = 0;
		if (!rl || rq[i].off + rq[i].len > rq[i].l->size || rq[i].off + rq[i].len < rq[i].off)
			rq[i].result = -EIO; /* past the end: a short read, a write nowhere */
		else if (rq[i].write && atomic_load(&rl->fenced))
			rq[i].result = -EIO;
		else if (rq[i].write && now_ns() >= atomic_load(&rl->lock_until) && rl->locked) {
			/* the lock may have gone to another host by now */
			atomic_store(&rl->fenced, 1);
			rq[i].result = -EIO;
		} else
			npieces += pieces_of(&rq[i]);
	}
	pcs = calloc(npieces ? npieces : 1, sizeof(*pcs));
	if (!pcs) {
		for (size_t i = 0; i < n; i++)
			rq[i].result = -ENOMEM;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct lun_rados *rl = rq[i].l->rados;
		uint64_t off = rq[i].off;
		size_t done = 0;

		if (rq[i].result < 0)
			continue;
		while (done < rq[i].len) {
			uint64_t obj = off / RADOS_OBJ_SIZE, objoff = off % RADOS_OBJ_SIZE;
			size_t len = rq[i].len - done;
			char oid[RADOS_OID_MAX];

			if (len > RADOS_OBJ_SIZE - objoff)
				len = (size_t)(RADOS_OBJ_SIZE - objoff);
			snprintf(oid, sizeof(oid), "%s.%016llx", rl->prefix, (unsigned long long)obj);
			pcs[k] = (struct piece){ .rl = rl,
						 .buf = (char *)rq[i].buf + done,
						 .len = len,
						 .result = &rq[i].result,
						 .write = rq[i].write };
			issue(rl, &pcs[k++], oid, objoff);
			done += len;
			off += len;
		}
	}
	for (size_t j = 0; j < k; j++)
		reap(&pcs[j]);
	free(pcs);
}

static int rados_rw(struct lun *l, int write, void *buf, size_t len, uint64_t off)
{
	struct rreq r = { .l = l, .write = write, .buf = buf, .len = len, .off = off };

	run(&r, 1);
	return r.result;
}

static void rados_batch(struct lun_io *ios, size_t n, int write)
{
	struct rreq *rq = calloc(n ? n : 1, sizeof(*rq));

	if (!rq) {
		for (size_t i = 0; i < n; i++)
			ios[i].result = -ENOMEM;
		return;
	}
	for (size_t i = 0; i < n; i++)
		rq[i] = (struct rreq){ .l = ios[i].lun,
				       .write = write,
				       .buf = ios[i].buf,
				       .len = ios[i].len,
				       .off = LUN_DATA_OFF + ios[i].off };
	run(rq, n);
	for (size_t i = 0; i < n; i++)
		ios[i].result = rq[i].result;
	free(rq);
}

/* Writes are durable when they complete: a flush waits for any still in
 * flight (there are none between batches) and says whether this LUN may
 * still write at all; the uberblock writes of a round all go at once. */
static void rados_sync_round(struct lun **luns, int *res, size_t n, const void *buf, size_t len,
			     uint64_t off)
{
	struct rreq *rq = buf ? calloc(n ? n : 1, sizeof(*rq)) : NULL;

	for (size_t i = 0; i < n; i++) {
		struct lun_rados *rl = luns[i]->rados;

		res[i] = !rl || atomic_load(&rl->fenced) || rados_aio_flush(rl->io) < 0 ? EIO : 0;
		if (rq)
			rq[i] = (struct rreq){
				.l = luns[i], .write = 1, .buf = (void *)buf, .len = len, .off = off
			};
	}
	if (buf && !rq) {
		for (size_t i = 0; i < n; i++)
			res[i] = ENOMEM;
		return;
	}
	if (rq) {
		run(rq, n);
		for (size_t i = 0; i < n; i++)
			res[i] = res[i] ? res[i] : -rq[i].result;
		free(rq);
	}
}

static int lock_take(struct lun_rados *rl, uint8_t flags)
{
	struct timeval tv = { .tv_sec = cfg_lock_secs };
	int64_t sent = now_ns();
	char desc[96];
	int ret;

	snprintf(desc, sizeof(desc), "cofferd host %08x pid %d", (unsigned)stor_hostid(),
		 (int)getpid());
	ret = rados_lock_exclusive(rl->io, rl->meta, RADOS_LOCK, rl->cookie, desc, &tv, flags);
	if (ret == 0)
		atomic_store(&rl->lock_until, sent + (int64_t)cfg_lock_secs * 1000000000);
	return ret;
}

static int rados_renew(struct lun *l)
{
	struct lun_rados *rl = l->rados;
	int ret;

	if (!rl->locked)
		return 0;
	if (atomic_load(&rl->fenced))
		return -ENOLCK;
	ret = lock_take(rl, LIBRADOS_LOCK_FLAG_MUST_RENEW);
	if (ret == -ENOENT || ret == -EBUSY || ret == -EEXIST || ret == -EBLOCKLISTED) {
		/* it expired and went, was broken, or another host fenced us */
		atomic_store(&rl->fenced, 1);
		return -ENOLCK;
	}
	return ret < 0 ? io_error(ret) : 0;
}

/* Who holds @rl's LUN now, asked through a connection of its own: ours may
 * be blocklisted. Into rl->fenced_by, under fence_lock. */
static void learn_new_owner(struct lun_rados *rl)
{
	char owner[RADOS_OWNER_MAX] = "";
	rados_ioctx_t io;
	rados_t c;
	int ret = cluster_connect(&c);

	if (ret == 0) {
		ret = rados_ioctx_create2(c, rados_ioctx_get_id(rl->io), &io);
		if (ret == 0) {
			ret = rados_getxattr(io, rl->meta, RADOS_OWNER_XATTR, owner,
					     sizeof(owner) - 1);
			owner[ret > 0 ? ret : 0] = '\0';
			rados_ioctx_destroy(io);
		}
		rados_shutdown(c);
	}
	if (owner[0] && strcmp(owner, rl->owner))
		snprintf(rl->fenced_by, sizeof(rl->fenced_by), "taken over by cofferd %s", owner);
	else
		snprintf(rl->fenced_by, sizeof(rl->fenced_by),
			 "its lock was lost (%s); no other holder is recorded",
			 ret < 0 ? strerror(-ret) : "expired");
}

static int rados_fenced(struct lun *l, char *why, size_t len)
{
	struct lun_rados *rl = l->rados;

	if (!rl || !atomic_load(&rl->fenced))
		return 0;
	pthread_mutex_lock(&rl->fence_lock);
	if (!rl->fenced_by[0])
		learn_new_owner(rl);
	snprintf(why, len, "%s", rl->fenced_by);
	pthread_mutex_unlock(&rl->fence_lock);
	return 1;
}

static int rados_took_over(struct lun *l, char *who, size_t wlen, char *addr, size_t alen)
{
	struct lun_rados *rl = l->rados;
	const char *a = rl ? strstr(rl->took_over, " addr ") : NULL;

	if (!a)
		return 0;
	snprintf(who, wlen, "%.*s", (int)(a - rl->took_over), rl->took_over);
	snprintf(addr, alen, "%s", a + 6);
	return 1;
}

static void rados_close(struct lun *l)
{
	struct lun_rados *rl = l->rados;

	if (!rl)
		return;
	if (rl->io) {
		rados_aio_flush(rl->io);
		if (rl->locked && !atomic_load(&rl->fenced)) {
			/* a clean close: nobody to blocklist after us */
			if (rl->claimed)
				rados_rmxattr(rl->io, rl->meta, RADOS_OWNER_XATTR);
			rados_unlock(rl->io, rl->meta, RADOS_LOCK, rl->cookie);
		}
		rados_ioctx_destroy(rl->io);
	}
	if (rl->c && rl->peek)
		shared_put();
	else if (rl->c)
		rados_shutdown(rl->c);
	pthread_mutex_destroy(&rl->fence_lock);
	free(rl->prefix);
	free(rl);
}

/* What "PREFIX.lun" holds for a LUN of @size bytes. */
static void meta_encode(uint8_t buf[RADOS_META_LEN], uint64_t size)
{
	uint8_t *w = buf;

	put_u64(&w, RADOS_META_MAGIC);
	put_u64(&w, size);
}

/* "PREFIX.lun" says @size now: the LUN is that large. */
static int meta_write(struct lun_rados *rl, uint64_t size)
{
	uint8_t buf[RADOS_META_LEN];

	meta_encode(buf, size);
	return rados_write_full(rl->io, rl->meta, (const char *)buf, sizeof(buf));
}

/* The size in "PREFIX.lun"; with @create and none there, make it @size. */
static int meta_size(struct lun_rados *rl, int create, uint64_t size, uint64_t *out, int *made)
{
	uint8_t buf[RADOS_META_LEN];
	const uint8_t *p = buf;
	int ret;

	*made = 0;
	ret = rados_read(rl->io, rl->meta, (char *)buf, sizeof(buf), 0);
	if (ret == -ENOENT && create && size) {
		rados_write_op_t op = rados_create_write_op();

		if (size < LUN_MIN_SIZE) {
			rados_release_write_op(op);
			return -EINVAL;
		}
		meta_encode(buf, size);
		rados_write_op_create(op, LIBRADOS_CREATE_EXCLUSIVE, NULL);
		rados_write_op_write_full(op, (const char *)buf, sizeof(buf));
		ret = rados_write_op_operate(op, rl->io, rl->meta, NULL, 0);
		rados_release_write_op(op);
		if (ret == 0) {
			*made = 1;
			*out = size;
			return 0;
		}
		if (ret != -EEXIST)
			return ret;
		ret = rados_read(rl->io, rl->meta, (char *)buf, sizeof(buf), 0);
	}
	if (ret < 0)
		return ret;
	if (ret != (int)sizeof(buf) || get_u64(&p) != RADOS_META_MAGIC)
		return -EINVAL; /* not an object of ours */
	*out = get_u64(&p);
	return 0;
}

/* The objects a LUN made for nothing has: its ".lun" (and the lock on it);
 * data objects come only with writes, after the LUN was taken. */
static void rados_unmake(struct lun *l)
{
	if (l->rados->io && !rados_remove(l->rados->io, l->rados->meta)) {
		l->rados->locked = 0;
		index_set(l->rados, 0);
	}
}

/* lun_grow(): the size object says @size (if larger), and is read back. */
static int rados_grow(struct lun *l, uint64_t size, uint64_t *now)
{
	struct lun_rados *rl = l->rados;
	int made, ret;

	if (!rl->locked || atomic_load(&rl->fenced))
		return -ENOLCK;
	if (size > l->size) {
		ret = meta_write(rl, size);
		if (ret < 0)
			return ret == -EBLOCKLISTED ? -ENOLCK : io_error(ret);
	}
	ret = meta_size(rl, 0, 0, now, &made);
	return ret < 0 ? io_error(ret) : 0;
}

/* lun_remove(): every object of the LUN, the index key last. */
static int rados_remove_all(struct lun *l, lun_progress_fn progress, void *ctx)
{
	struct lun_rados *rl = l->rados;
	uint64_t nobj = (l->size + RADOS_OBJ_SIZE - 1) / RADOS_OBJ_SIZE, done = 0;
	rados_completion_t c[RADOS_REMOVE_WINDOW];
	int ret = 0;

	if (!rl->locked || atomic_load(&rl->fenced))
		return -ENOLCK; /* only the holder removes */
	while (done < nobj && ret == 0) {
		unsigned n = 0;

		for (; n < RADOS_REMOVE_WINDOW && done + n < nobj; n++) {
			char oid[RADOS_OID_MAX];
			int r;

			snprintf(oid, sizeof(oid), "%s.%016llx", rl->prefix,
				 (unsigned long long)(done + n));
			r = rados_aio_create_completion2(NULL, NULL, &c[n]);
			if (r == 0) {
				r = rados_aio_remove(rl->io, oid, c[n]);
				if (r < 0)
					rados_aio_release(c[n]);
			}
			if (r < 0) {
				ret = io_error(r);
				break;
			}
		}
		for (unsigned k = 0; k < n; k++) {
			int r;

			rados_aio_wait_for_complete(c[k]);
			r = rados_aio_get_return_value(c[k]);
			rados_aio_release(c[k]);
			if (r < 0 && r != -ENOENT && ret == 0) /* never written: nothing there */
				ret = r == -EBLOCKLISTED ? -ENOLCK : io_error(r);
		}
		done += n;
		if (progress)
			progress(ctx, l, done, nobj);
	}
	if (ret == 0) {
		ret = rados_remove(rl->io, rl->meta); /* the lock goes with it */
		if (ret == 0 || ret == -ENOENT) {
			rl->locked = 0;
			ret = index_set(rl, 0);
		}
		ret = ret < 0 ? io_error(ret) : 0;
	}
	return ret;
}

/*
 * Record this open as the LUN's owner, the lock held. A previous owner
 * recorded (it never closed cleanly, and its lock has expired, since we
 * hold it) is blocklisted first, and the OSD map that says so awaited, so
 * that nothing it still sends lands from here on.
 */
static int claim(struct lun_rados *rl)
{
	char prev[RADOS_OWNER_MAX], *addrs = NULL;
	const char *a;
	int ret = rados_getxattr(rl->io, rl->meta, RADOS_OWNER_XATTR, prev, sizeof(prev) - 1);

	if (ret < 0 && ret != -ENODATA)
		return io_error(ret);
	prev[ret > 0 ? ret : 0] = '\0';
	ret = rados_getaddrs(rl->c, &addrs);
	if (ret < 0)
		return io_error(ret);
	snprintf(rl->owner, sizeof(rl->owner), "host %08x pid %d addr %s", (unsigned)stor_hostid(),
		 (int)getpid(), addrs);
	free(addrs);
	a = strstr(prev, " addr ");
	if (a && strcmp(prev, rl->owner)) {
		char addr[RADOS_OWNER_MAX];

		snprintf(addr, sizeof(addr), "%s", a + 6);
		ret = rados_blocklist_add(rl->c, addr, RADOS_BLOCKLIST_SECS);
		if (ret == 0)
			ret = rados_wait_for_latest_osdmap(rl->c);
		if (ret < 0)
			return ret == -EACCES || ret == -EPERM ? -EACCES : io_error(ret);
		snprintf(rl->took_over, sizeof(rl->took_over), "%s", prev);
	}
	ret = rados_setxattr(rl->io, rl->meta, RADOS_OWNER_XATTR, rl->owner, strlen(rl->owner));
	rl->claimed = ret == 0;
	return ret < 0 ? io_error(ret) : 0;
}

static const struct lun_ops rados_ops = {
	.rw = rados_rw,
	.batch = rados_batch,
	.sync_round = rados_sync_round,
	.renew = rados_renew,
	.fenced = rados_fenced,
	.took_over = rados_took_over,
	.grow = rados_grow,
	.remove = rados_remove_all,
	.unmake = rados_unmake,
	.close = rados_close,
};

static int rados_open(const char *path, unsigned flags, uint64_t size, struct lun **out)
{
	struct lun_rados *rl;
	struct lun *l;
	char pool[128];
	const char *prefix;
	int ret, made = 0;

	*out = NULL;
	if (parse_path(path, pool, sizeof(pool), &prefix) < 0)
		return -EINVAL;
	if (flags & LUN_DIRECT)
		flags &= ~LUN_DIRECT; /* nothing to bypass: no page cache here */
	l = calloc(1, sizeof(*l));
	rl = calloc(1, sizeof(*rl));
	if (!l || !rl || !(l->path = strdup(path)) || !(rl->prefix = strdup(prefix))) {
		if (l)
			free(l->path);
		free(l);
		if (rl)
			free(rl->prefix);
		free(rl);
		return -ENOMEM;
	}
	pthread_mutex_init(&rl->fence_lock, NULL);
	l->ops = &rados_ops;
	l->fd = -1;
	l->rados = rl;
	l->flags = flags;
	snprintf(rl->meta, sizeof(rl->meta), "%s.lun", prefix);
	rl->peek = !!(flags & LUN_PEEK);
	ret = rl->peek ? shared_get(&rl->c) : cluster_connect(&rl->c);
	if (ret < 0) {
		rl->c = NULL;
		ret = -ENOTCONN; /* no ceph.conf, no keyring, no mon answered */
		goto fail;
	}
	ret = rados_ioctx_create(rl->c, pool, &rl->io);
	if (ret < 0) {
		rl->io = NULL;
		ret = ret == -ENOENT ? -ENXIO : ret; /* no such pool in the cluster */
		goto fail;
	}
	ret = meta_size(rl, (flags & (LUN_CREATE | LUN_PEEK)) == LUN_CREATE, size, &l->size, &made);
	if (ret == 0 && l->size < LUN_MIN_SIZE)
		ret = -EINVAL;
	if (ret < 0)
		goto fail;
	l->created = made ? LUN_MADE : 0;
	if (!(flags & LUN_PEEK)) {
		unsigned rnd = 0;
		FILE *f = fopen("/dev/urandom", "re");

		if (f) {
			if (fread(&rnd, sizeof(rnd), 1, f) != 1)
				rnd = 0;
			fclose(f);
		}
		snprintf(rl->cookie, sizeof(rl->cookie), "%08x.%d.%08x", (unsigned)stor_hostid(),
			 (int)getpid(), rnd ^ (unsigned)now_ns());
		ret = lock_take(rl, 0);
		if (ret == -EEXIST)
			ret = -EBUSY;
		if (ret < 0) {
			ret = ret == -EBUSY ? -EBUSY : io_error(ret);
			goto fail;
		}
		rl->locked = 1;
		ret = claim(rl);
		if (ret == 0)
			ret = index_set(rl, 1);
		if (ret < 0) {
			ret = ret == -EACCES ? ret : io_error(ret);
			goto fail;
		}
	}
	*out = l;
	return 0;
fail:
	if (made)
		l->created = LUN_MADE;
	lun_discard(l);
	return ret;
}

/* Call @fn with "rados:POOL/PREFIX" of @prefix (@n bytes). */
static int found(const char *pool, const char *prefix, size_t n,
		 int (*fn)(const char *path, void *ctx), void *ctx)
{
	char path[RADOS_OID_MAX + 160];

	if (!n || n >= RADOS_OID_MAX ||
	    (size_t)snprintf(path, sizeof(path), "%s/%.*s", pool, (int)n, prefix) >= sizeof(path))
		return 0;
	return fn(path, ctx);
}

/* The LUNs the index names, a page of keys at a time; -ENOENT: no index. */
static int list_index(rados_ioctx_t io, const char *pool,
		      int (*fn)(const char *path, void *ctx), void *ctx)
{
	char after[RADOS_OID_MAX] = "", keys[64][RADOS_OID_MAX];
	unsigned char more = 1;
	int ret = 0;

	while (ret == 0 && more) {
		rados_read_op_t op = rados_create_read_op();
		rados_omap_iter_t it;
		unsigned n = 0;
		int rval = 0;
		char *k, *v;
		size_t klen, vlen;

		if (!op)
			return -ENOMEM;
		rados_read_op_omap_get_vals2(op, after, "", 64, &it, &more, &rval);
		ret = rados_read_op_operate(op, io, RADOS_INDEX, 0);
		if (ret == 0)
			ret = rval;
		while (ret == 0 && n < 64 && rados_omap_get_next2(it, &k, &v, &klen, &vlen) == 0 &&
		       k) {
			if (klen < RADOS_OID_MAX) {
				memcpy(keys[n], k, klen);
				keys[n++][klen] = '\0';
			}
		}
		rados_omap_get_end(it);
		rados_release_read_op(op);
		for (unsigned i = 0; i < n && ret == 0; i++)
			ret = found(pool, keys[i], strlen(keys[i]), fn, ctx);
		if (n)
			snprintf(after, sizeof(after), "%s", keys[n - 1]);
		else
			more = 0;
	}
	return ret;
}

/* Every ".lun" object of the Ceph pool, for one that has no index. */
static int list_objects(rados_ioctx_t io, const char *pool,
			int (*fn)(const char *path, void *ctx), void *ctx)
{
	rados_list_ctx_t lc;
	const char *oid;
	int ret = rados_nobjects_list_open(io, &lc);

	if (ret < 0)
		return ret;
	while (ret == 0) {
		size_t n;

		ret = rados_nobjects_list_next(lc, &oid, NULL, NULL);
		if (ret < 0) {
			ret = ret == -ENOENT ? 0 : ret; /* -ENOENT: the end */
			break;
		}
		n = strlen(oid);
		if (n > 4 && !strcmp(oid + n - 4, ".lun"))
			ret = found(pool, oid, n - 4, fn, ctx);
	}
	rados_nobjects_list_close(lc);
	return ret;
}

int lun_rados_list(const char *pool, int (*fn)(const char *path, void *ctx), void *ctx)
{
	const char *name = pool + strlen(LUN_RADOS_PREFIX);
	rados_ioctx_t io;
	rados_t c = NULL;
	int ret;

	if (!name[0] || strchr(name, '/'))
		return -EINVAL;
	ret = shared_get(&c);
	if (ret < 0)
		return ret;
	ret = rados_ioctx_create(c, name, &io);
	if (ret < 0) {
		shared_put();
		return ret;
	}
	ret = list_index(io, pool, fn, ctx);
	if (ret == -ENOENT)
		ret = list_objects(io, pool, fn, ctx);
	rados_ioctx_destroy(io);
	shared_put();
	return ret;
}

#else /* !HAVE_RADOS */

int stor_rados_config(const char *conf, const char *user, const char *keyring,
		      unsigned lock_timeout)
{
	(void)conf, (void)user, (void)keyring, (void)lock_timeout;
	return 0;
}

static int rados_open(const char *path, unsigned flags, uint64_t size, struct lun **out)
{
	(void)path, (void)flags, (void)size;
	*out = NULL;
	return -EPROTONOSUPPORT; /* built --without-rados */
}

int lun_rados_list(const char *pool, int (*fn)(const char *path, void *ctx), void *ctx)
{
	(void)pool, (void)fn, (void)ctx;
	return -EPROTONOSUPPORT;
}

#endif

const struct lun_backend lun_rados_backend = {
	.prefix = LUN_RADOS_PREFIX,
	.open = rados_open,
};
