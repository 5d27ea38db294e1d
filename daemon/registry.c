// SPDX-License-Identifier: MIT
/*
 * The pool registry (registry.h): the list of pools and pools.list, the
 * handle tables of clients and their revocation, and the access rules.
 *
 * A pool that failed to import stays on the list as faulted with its error
 * text; the names of listed pools are kept in <state_dir>/pools.list so a
 * restart imports them again. Nothing here knows a socket or a request: a
 * client is a handle table and the credentials it was opened with.
 *
 * Claims on LUNs that must be kept alive (a RADOS lock, lun_rados.c) are
 * renewed from a loop timer every third of ceph_lock_timeout; the renewal
 * itself talks to the cluster, so it runs on the threadpool, one at a
 * time, and a pool that lost its lock says so in the log.
 *
 * Revocation (pool export -f, destroy -f, unload-key -f): a worker thread
 * asks every loop through an async handle to revoke the matching handles of
 * its clients, closed ones included, and waits until each has no request
 * in flight and is closed. A client's handle table is its loop's alone
 * (loops.c): requests take and put handles with no lock, and each loop
 * walks its own clients for a revocation, counting what stays open there.
 * A revoked handle number stays taken: requests on it get -ESTALE until its
 * owner closes it.
 */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "events.h"
#include "log.h"
#include "loops.h"
#include "registry.h"
#include "work.h"

static const struct config *cfg;
static pthread_rwlock_t pools_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct pool_ent *pools;
static gid_t admin_gid;
static int have_admin_gid;

/* ---- pools ---- */

void reg_lock(int write)
{
	if (write)
		pthread_rwlock_wrlock(&pools_lock);
	else
		pthread_rwlock_rdlock(&pools_lock);
}

void reg_unlock(void)
{
	pthread_rwlock_unlock(&pools_lock);
}

struct pool_ent *reg_pools(void)
{
	return pools;
}

struct pool_ent *reg_pool_of(const char *name)
{
	size_t n = strcspn(name, "/@"); /* pool/ds, pool@snap */

	for (struct pool_ent *pe = pools; pe; pe = pe->next)
		if (strlen(pe->name) == n && !strncmp(pe->name, name, n))
			return pe;
	return NULL;
}

struct stor_pool_opts reg_pool_opts(uint64_t lun_size)
{
	return (struct stor_pool_opts){
		.state_dir = cfg->state_dir,
		.direct_io = cfg->direct_io,
		.pread_only = !cfg->lun_mmap,
		.txg_timeout_ms = cfg->txg_timeout * 1000u,
		.scrub_rate = cfg->scrub_rate,
		.lun_size = lun_size,
	};
}

/* Link @pe into the list, which is kept in name order for listings. */
static void pool_insert(struct pool_ent *pe)
{
	struct pool_ent **pp = &pools;

	while (*pp && strcmp((*pp)->name, pe->name) < 0)
		pp = &(*pp)->next;
	pe->next = *pp;
	*pp = pe;
}

static void pool_unlink(struct pool_ent *pe)
{
	for (struct pool_ent **pp = &pools; *pp; pp = &(*pp)->next) {
		if (*pp == pe) {
			*pp = pe->next;
			return;
		}
	}
}

void reg_save(void)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	FILE *f;
	int dfd;

	snprintf(path, sizeof(path), "%s/pools.list", cfg->state_dir);
	snprintf(tmp, sizeof(tmp), "%s/pools.list.tmp", cfg->state_dir);
	f = fopen(tmp, "w");
	if (!f) {
		log_err("%s: %s", tmp, strerror(errno));
		return;
	}
	fprintf(f, "# pools cofferd imports at start, one per line\n");
	for (struct pool_ent *pe = pools; pe; pe = pe->next)
		fprintf(f, "%s\n", pe->name);
	if (fflush(f) != 0 || fsync(fileno(f)) < 0) {
		log_err("%s: %s", tmp, strerror(errno));
		fclose(f);
		return;
	}
	fclose(f);
	if (rename(tmp, path) < 0) {
		log_err("%s: %s", path, strerror(errno));
		return;
	}
	/* the rename is durable only once the directory is */
	dfd = open(cfg->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0)
		log_err("%s: fsync: %s", cfg->state_dir, strerror(errno));
	if (dfd >= 0)
		close(dfd);
}

int reg_pool_add(const char *name, struct stor_pool *pool)
{
	struct pool_ent *pe = calloc(1, sizeof(*pe));

	if (!pe)
		return -ENOMEM;
	snprintf(pe->name, sizeof(pe->name), "%s", name);
	pe->pool = pool;
	pool_insert(pe);
	reg_save();
	return 0;
}

static double since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

/* The import replaying now, for import_progress: imports hold the registry's
 * write lock, so this has its own, and the loop thread reads it at once */
static pthread_mutex_t progress_lock = PTHREAD_MUTEX_INITIALIZER;
static struct reg_import_progress progress;

void reg_import_progress(struct reg_import_progress *out)
{
	pthread_mutex_lock(&progress_lock);
	*out = progress;
	pthread_mutex_unlock(&progress_lock);
}

/* An import's replay into LMDB, logged at its start, every few seconds and at its end. */
struct replay_log {
	struct pool_ent *pe;
	struct timespec start;
	double logged; /* seconds since start of the last line */
};

static void replay_progress(const struct stor_progress *pr, void *arg)
{
	struct replay_log *rl = arg;
	const char *what = pr->rebuild ? "rebuilding its LMDB file from the LUNs"
				       : "replaying the LUNs' newest txgs into LMDB";
	double t;

	if (pr->records == 0) {
		clock_gettime(CLOCK_MONOTONIC, &rl->start);
		rl->logged = 0;
		log_info("pool %s: %s: %llu records, %llu bytes", rl->pe->name, what,
			 (unsigned long long)pr->records_total, (unsigned long long)pr->bytes_total);
	}
	t = since(&rl->start);
	rl->pe->replayed = *pr;
	rl->pe->replay_secs = t;
	pthread_mutex_lock(&progress_lock);
	progress.running = pr->records < pr->records_total;
	snprintf(progress.pool, sizeof(progress.pool), "%s", rl->pe->name);
	progress.pr = *pr;
	progress.seconds = t;
	pthread_mutex_unlock(&progress_lock);
	if (pr->records == pr->records_total)
		log_info("pool %s: %s: done, %llu records, %llu bytes in %.1f s", rl->pe->name,
			 what, (unsigned long long)pr->records, (unsigned long long)pr->bytes, t);
	else if (t - rl->logged >= 2.0) {
		rl->logged = t;
		log_info("pool %s: %s: %llu of %llu records, %llu of %llu bytes", rl->pe->name,
			 what, (unsigned long long)pr->records,
			 (unsigned long long)pr->records_total, (unsigned long long)pr->bytes,
			 (unsigned long long)pr->bytes_total);
	}
}

struct pool_ent *reg_pool_import(const char *name, const struct stor_pool_opts *opts,
				 int keep_failed, int *err)
{
	struct stor_pool_opts o = opts ? *opts : reg_pool_opts(0);
	struct pool_ent *pe = calloc(1, sizeof(*pe));
	struct replay_log rl = { .pe = pe };
	int ret;

	*err = -ENOMEM;
	if (!pe)
		return NULL;
	/* renamed on import: listed under the name it gets */
	snprintf(pe->name, sizeof(pe->name), "%s", o.new_name ? o.new_name : name);
	o.progress = replay_progress;
	o.progress_arg = &rl;
	ret = stor_pool_open(name, &o, &pe->pool);
	/* the import read the pool's log into buffers it has freed: a large
	 * pool's are hundreds of MiB that glibc would otherwise keep */
	stor_heap_trim();
	pthread_mutex_lock(&progress_lock);
	progress.running = 0; /* a failed replay ends here too */
	pthread_mutex_unlock(&progress_lock);
	*err = ret;
	if (ret < 0) {
		const char *why = stor_pool_last_error();

		snprintf(pe->error, sizeof(pe->error), "%s%s%s", stor_strerror(ret),
			 why[0] ? ": " : "", why);
		pe->pool = NULL;
		if (!keep_failed) {
			free(pe);
			return NULL;
		}
		/* listed FAULTED: its event's log line says why */
		events_post(EVENTS_POOL_FAULT, pe->name,
			    &(struct stor_event_field){ .name = "error", .str = pe->error }, 1);
	}
	pool_insert(pe);
	return pe;
}

void reg_pool_remove(struct pool_ent *pe)
{
	pool_unlink(pe);
	free(pe);
	reg_save();
}

void reg_importable(void (*fn)(const char *name, void *arg), void *arg)
{
	char dir[PATH_MAX];
	struct dirent *d;
	DIR *dp;

	snprintf(dir, sizeof(dir), "%s/pools", cfg->state_dir);
	dp = opendir(dir);
	if (!dp)
		return;
	while ((d = readdir(dp))) {
		size_t n = strlen(d->d_name);
		char name[PROTO_NAME_MAX + 1];

		if (n <= 4 || n - 4 > PROTO_NAME_MAX || strcmp(d->d_name + n - 4, ".mdb"))
			continue;
		memcpy(name, d->d_name, n - 4);
		name[n - 4] = '\0';
		if (proto_name_valid(name, 1) && !reg_pool_of(name))
			fn(name, arg);
	}
	closedir(dp);
}

const char *reg_lun_search(void)
{
	return cfg->lun_search ? cfg->lun_search : "";
}

const char *reg_key_https_ca(void)
{
	return cfg->key_https_ca ? cfg->key_https_ca : "";
}

int reg_init(const struct config *config)
{
	char path[PATH_MAX], line[PROTO_NAME_MAX + 8];
	FILE *f;

	cfg = config;
	if (cfg->admin_group && cfg->admin_group[0]) {
		struct group *gr = getgrnam(cfg->admin_group);

		if (!gr) {
			log_err("admin_group %s: no such group", cfg->admin_group);
			return -ESRCH;
		}
		admin_gid = gr->gr_gid;
		have_admin_gid = 1;
	}
	snprintf(path, sizeof(path), "%s/pools.list", cfg->state_dir);
	f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? 0 : -errno;
	/* pools are imported one by one; one that fails stays listed as faulted */
	pthread_rwlock_wrlock(&pools_lock);
	while (fgets(line, sizeof(line), f)) {
		struct pool_ent *pe;
		int ret;

		line[strcspn(line, "\r\n")] = '\0';
		if (!line[0] || line[0] == '#')
			continue;
		if (!proto_name_valid(line, 1) || reg_pool_of(line)) {
			log_warn("%s: ignoring '%s'", path, line);
			continue;
		}
		pe = reg_pool_import(line, NULL, 1, &ret);
		if (!pe)
			continue;
		if (ret == 0)
			log_info("pool %s: imported", line); /* a failure: pool.fault */
	}
	pthread_rwlock_unlock(&pools_lock);
	fclose(f);
	return 0;
}

int reg_fini(void)
{
	int failed = 0;

	pthread_rwlock_wrlock(&pools_lock);
	while (pools) {
		struct pool_ent *pe = pools;
		int ret;

		pools = pe->next;
		ret = stor_pool_close(pe->pool);
		if (ret < 0) {
			log_err("pool %s: final commit failed: %s; writes since the last commit "
				"are lost",
				pe->name, stor_strerror(ret));
			failed++;
		} else if (pe->pool) {
			log_info("pool %s: closed", pe->name);
		}
		free(pe);
	}
	pthread_rwlock_unlock(&pools_lock);
	return failed;
}

/* ---- access ---- */

/*
 * Is @gid the peer's primary group or one of its supplementary groups: those
 * the process really has (SO_PEERGROUPS) and, with @login or where the kernel
 * cannot say, those the group database gives the user at login.
 */
static int peer_in_group(const struct peer *p, gid_t gid, int login)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	gid_t groups[256];
	int ng = 256;

	if (gid == p->gid)
		return 1;
	for (int i = 0; i < p->ngroups; i++)
		if (p->groups[i] == gid)
			return 1;
	if (p->ngroups >= 0 && !login)
		return 0;
	if (getpwuid_r(p->uid, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return 0;
	if (getgrouplist(pw.pw_name, p->gid, groups, &ng) < 0)
		return 0;
	for (int i = 0; i < ng; i++)
		if (groups[i] == gid)
			return 1;
	return 0;
}

int reg_is_admin(const struct peer *p)
{
	if (p->uid == 0 || p->uid == getuid())
		return 1;
	/* admin_group membership counts as a login gives it, so a member added
	 * since the peer's session started is one */
	return have_admin_gid && peer_in_group(p, admin_gid, 1);
}

int reg_may_open(const struct peer *p, struct stor_pool *pool, const char *name)
{
	struct stor_prop_value v;
	unsigned long uid, gid;
	char *end;

	if (p->admin)
		return 1;
	if (stor_ds_get(pool, name, "owner", &v) < 0 || !v.value[0] || !strcmp(v.value, "-"))
		return 0;
	/* "UID" or "UID:GID", validated by libstore when set */
	if (v.value[0] < '0' || v.value[0] > '9')
		return 0;
	uid = strtoul(v.value, &end, 10);
	if (uid == p->uid)
		return 1;
	if (*end == ':' && end[1] >= '0' && end[1] <= '9') {
		gid = strtoul(end + 1, &end, 10);
		if (gid <= UINT32_MAX && peer_in_group(p, (gid_t)gid, 0))
			return 1;
	}
	return 0;
}

/* ---- handle tables ---- */

struct reg_handle {
	struct stor_ds *ds;
	struct pool_ent *pe;
	unsigned inflight;
	int closing;
	int revoked; /* by an admin's -f: -ESTALE until closed by its owner */
};

struct reg_client {
	struct peer peer; /* uid and pid for the log of a revocation */
	uint64_t id;
	unsigned loop;    /* the loop whose thread alone touches the handles */
	int nbd;          /* an NBD client: its handles are exports */
	int closed;
	struct reg_handle *handles;
	uint32_t nhandles;
	void *stream; /* a receive in progress (sendrecv.c), freed with the client */
	void (*stream_free)(void *stream);
	struct reg_client *prev, *next;
};

/* Every client with a table, closed ones included until their last request is done. */
static struct reg_client *clients;
static pthread_mutex_t clients_lock = PTHREAD_MUTEX_INITIALIZER; /* the list's links */

static void revoke_progress(void);

void reg_pool_ref(struct pool_ent *pe)
{
	atomic_fetch_add(&pe->nhandles, 1);
}

void reg_pool_unref(struct pool_ent *pe)
{
	if (pe)
		atomic_fetch_sub(&pe->nhandles, 1);
}

/* Close the dataset of handle @h; its slot stays taken while revoked. */
static void handle_release(struct reg_handle *h)
{
	stor_ds_close(h->ds);
	reg_pool_unref(h->pe);
	h->ds = NULL;
	h->pe = NULL;
	h->closing = 0;
}

struct reg_client *reg_client_new(const struct peer *p, uint64_t id, const char *front)
{
	struct reg_client *cl = calloc(1, sizeof(*cl));

	if (!cl)
		return NULL;
	cl->nbd = front && !strcmp(front, "nbd");
	cl->peer = *p;
	cl->peer.groups = NULL; /* not kept: the owner's may go first */
	cl->id = id;
	cl->loop = loops_self();
	pthread_mutex_lock(&clients_lock);
	cl->next = clients;
	if (clients)
		clients->prev = cl;
	clients = cl;
	pthread_mutex_unlock(&clients_lock);
	return cl;
}

void reg_client_closed(struct reg_client *cl)
{
	if (cl)
		cl->closed = 1;
}

void reg_client_free(struct reg_client *cl)
{
	if (!cl)
		return;
	pthread_mutex_lock(&clients_lock);
	if (cl->prev)
		cl->prev->next = cl->next;
	else
		clients = cl->next;
	if (cl->next)
		cl->next->prev = cl->prev;
	pthread_mutex_unlock(&clients_lock);
	for (uint32_t i = 0; i < cl->nhandles; i++)
		if (cl->handles[i].ds)
			handle_release(&cl->handles[i]);
	if (cl->stream_free)
		cl->stream_free(cl->stream);
	revoke_progress();
	free(cl->handles);
	free(cl);
}

void **reg_client_stream(struct reg_client *cl, void (*free_fn)(void *stream))
{
	cl->stream_free = free_fn;
	return &cl->stream;
}

int reg_handle_install(struct reg_client *cl, struct stor_ds *ds, struct pool_ent *pe)
{
	uint32_t i;

	for (i = 0; i < cl->nhandles; i++)
		if (!cl->handles[i].ds && !cl->handles[i].revoked)
			break;
	if (i == cl->nhandles) {
		uint32_t n = cl->nhandles ? cl->nhandles * 2 : 8;
		struct reg_handle *nh = realloc(cl->handles, n * sizeof(*nh));

		if (!nh)
			return -ENOMEM;
		memset(nh + cl->nhandles, 0, (n - cl->nhandles) * sizeof(*nh));
		cl->handles = nh;
		cl->nhandles = n;
	}
	cl->handles[i] = (struct reg_handle){ .ds = ds, .pe = pe };
	return (int)i;
}

int reg_handle_close(struct reg_client *cl, uint32_t hnum)
{
	struct reg_handle *h;

	if (hnum >= cl->nhandles)
		return -EBADF;
	h = &cl->handles[hnum];
	if (h->revoked) {
		/* closing a revoked handle frees its number; it closes once drained */
		h->revoked = 0;
		return 0;
	}
	if (!h->ds || h->closing)
		return -EBADF;
	if (h->inflight) {
		h->closing = 1;
		return 0;
	}
	handle_release(h);
	revoke_progress();
	return 0;
}

int reg_handle_get(struct reg_client *cl, uint32_t hnum, struct stor_ds **ds)
{
	struct reg_handle *h = hnum < cl->nhandles ? &cl->handles[hnum] : NULL;

	*ds = NULL;
	if (h && h->revoked)
		return -ESTALE; /* an admin closed it with -f */
	if (!h || !h->ds || h->closing)
		return -EBADF;
	h->inflight++;
	*ds = h->ds;
	return 0;
}

int reg_handle_encrypted(const struct reg_client *cl, uint32_t hnum)
{
	const struct reg_handle *h = hnum < cl->nhandles ? &cl->handles[hnum] : NULL;

	return !h || !h->ds || stor_ds_encrypted(h->ds);
}

void reg_handle_put(struct reg_client *cl, uint32_t hnum)
{
	struct reg_handle *h = &cl->handles[hnum];

	if (--h->inflight == 0 && h->closing && h->ds) {
		handle_release(h);
		revoke_progress();
	}
}

/* ---- revocation ---- */

/* Which handles revoke_wait() finds: those on pool @pe, of datasets @ds (all
 * if @nds is 0), or, with @named, those whose dataset's name it accepts. */
struct revoke_match {
	struct pool_ent *pe;
	struct stor_ds *const *ds;
	size_t nds;
	int (*named)(const char *name, const void *arg);
	const void *named_arg;
	uid_t by; /* the admin asking, for the log */
};

/*
 * Who holds the handles a request matches, one entry per dataset and front
 * end: "tank/vm is exported over NBD (1 connection)", "tank/a is open (2
 * handles on 1 connection)". A few are named, then how many handles more
 * there are. A client counts once per entry however many handles it holds.
 */
enum { SAY_MAX = 6 };

struct users_ent {
	struct stor_ds *ds;
	int nbd;
	unsigned handles, conns;
};

/* Revocation requests of worker threads (revoke_wait), handled on every loop. */
struct revoke_req {
	const struct revoke_match *what;
	int mark;         /* revoke; 0: only count */
	char *say;        /* only count, and say who holds the handles here (users_say) */
	size_t saylen;
	int done;
	unsigned matched; /* handles that matched when marked */
	uint64_t seen;    /* the loops that walked their clients for it */
	unsigned open[CONFIG_LOOPS_MAX]; /* handles still open, by loop */
	struct users_ent users[SAY_MAX]; /* say: the holders found so far */
	unsigned nusers, more;
	struct revoke_req *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct revoke_req *queue;  /* not yet seen by every loop */
	struct revoke_req *active; /* marked, waiting for handles to close */
	uv_async_t *async[CONFIG_LOOPS_MAX];
	uint64_t loops;            /* the loops attached, one bit each */
} rv = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER };

static int revoke_matches(const struct revoke_match *r, const struct reg_handle *h)
{
	if (!h->ds || h->pe != r->pe)
		return 0;
	if (r->named)
		return r->named(stor_ds_name(h->ds), r->named_arg);
	if (!r->nds)
		return 1;
	for (size_t i = 0; i < r->nds; i++)
		if (r->ds[i] == h->ds)
			return 1;
	return 0;
}

/* What revoke_walk() does with the handles that match. */
enum walk {
	WALK_COUNT,   /* count them */
	WALK_REVOKE,  /* revoke them, count those still open */
	WALK_PENDING, /* count those revoked (or closed by their owner) not yet released */
};

/* Handles of this loop's clients matching @r, as @how says. rv.lock held. */
static unsigned revoke_walk(const struct revoke_match *r, enum walk how, unsigned *matched)
{
	unsigned open = 0, self = loops_self();

	pthread_mutex_lock(&clients_lock);
	for (struct reg_client *cl = clients; cl; cl = cl->next) {
		if (cl->loop != self)
			continue;
		for (uint32_t i = 0; i < cl->nhandles; i++) {
			struct reg_handle *h = &cl->handles[i];

			if (!revoke_matches(r, h))
				continue;
			/* one opened since the revocation is not what it waits for */
			if (how == WALK_PENDING && !h->closing)
				continue;
			if (how == WALK_REVOKE) {
				(*matched)++;
				if (!h->revoked)
					log_warn("conn %llu (uid %u pid %d): handle %u on %s "
						 "revoked by uid %u",
						 (unsigned long long)cl->id, (unsigned)cl->peer.uid,
						 (int)cl->peer.pid, i, stor_ds_name(h->ds),
						 (unsigned)r->by);
				/* no tombstone on a closed client or a handle its owner closed */
				h->revoked = !cl->closed && !h->closing;
				if (!h->inflight) {
					handle_release(h);
					continue;
				}
				h->closing = 1;
			}
			open++;
		}
	}
	pthread_mutex_unlock(&clients_lock);
	return open;
}

static unsigned open_total(const struct revoke_req *q)
{
	unsigned n = 0;

	for (unsigned i = 0; i < CONFIG_LOOPS_MAX; i++)
		n += q->open[i];
	return n;
}

/*
 * Handles closed on this loop: count again what it still holds for each
 * request it has walked, those other loops have not walked yet included
 * (the count it gave them may be stale by the time the last one walks),
 * and wake the requests whose handles are all gone.
 */
static void revoke_progress(void)
{
	unsigned self = loops_self();
	unsigned dummy = 0;

	pthread_mutex_lock(&rv.lock);
	for (struct revoke_req *q = rv.queue; q; q = q->next)
		if (q->mark && (q->seen & (1ull << self)))
			q->open[self] = revoke_walk(q->what, WALK_PENDING, &dummy);
	for (struct revoke_req **pp = &rv.active; *pp;) {
		struct revoke_req *q = *pp;

		q->open[self] = revoke_walk(q->what, WALK_PENDING, &dummy);
		if (open_total(q) == 0) {
			q->done = 1;
			*pp = q->next;
			pthread_cond_broadcast(&rv.cond);
		} else {
			pp = &q->next;
		}
	}
	pthread_mutex_unlock(&rv.lock);
}

/* Count this loop's holders of the handles @q matches into @q (rv.lock held). */
static void users_count(struct revoke_req *q)
{
	struct users_ent *e = q->users;
	unsigned self = loops_self();

	pthread_mutex_lock(&clients_lock);
	for (struct reg_client *cl = clients; cl; cl = cl->next) {
		unsigned first[SAY_MAX] = { 0 }; /* entries this client already counts in */

		if (cl->loop != self)
			continue;
		for (uint32_t i = 0; i < cl->nhandles; i++) {
			struct reg_handle *h = &cl->handles[i];
			unsigned k = 0;

			if (!revoke_matches(q->what, h) || h->closing)
				continue;
			while (k < q->nusers && !(e[k].ds == h->ds && e[k].nbd == cl->nbd))
				k++;
			if (k == q->nusers) {
				if (q->nusers == SAY_MAX) {
					q->more++;
					continue;
				}
				e[q->nusers++] = (struct users_ent){ .ds = h->ds, .nbd = cl->nbd };
			}
			e[k].handles++;
			if (!first[k]) {
				first[k] = 1;
				e[k].conns++;
			}
		}
	}
	pthread_mutex_unlock(&clients_lock);
}

/* The holders every loop counted, in words, into q->say. */
static void users_say(const struct revoke_req *q)
{
	const struct users_ent *e = q->users;
	char *buf = q->say;
	size_t len = q->saylen, at = 0;

	buf[0] = '\0';
	for (unsigned k = 0; k < q->nusers && at < len; k++) {
		int w;

		if (e[k].nbd)
			w = snprintf(buf + at, len - at, "%s%s is exported over NBD (%u connection%s)",
				     k ? ", " : "", stor_ds_name(e[k].ds), e[k].conns,
				     e[k].conns == 1 ? "" : "s");
		else
			w = snprintf(buf + at, len - at, "%s%s is open (%u handle%s on %u connection%s)",
				     k ? ", " : "", stor_ds_name(e[k].ds), e[k].handles,
				     e[k].handles == 1 ? "" : "s", e[k].conns, e[k].conns == 1 ? "" : "s");
		at += w > 0 ? (size_t)w : 0;
	}
	if (q->more && at < len)
		snprintf(buf + at, len - at, ", and %u more handle%s", q->more,
			 q->more == 1 ? "" : "s");
}

/*
 * Requests every attached loop has walked leave the queue: counted, or
 * waiting for the handles still open. rv.lock held.
 */
static void revoke_settle(void)
{
	for (struct revoke_req **pp = &rv.queue; *pp;) {
		struct revoke_req *q = *pp;
		unsigned open;

		if ((q->seen & rv.loops) != rv.loops) {
			pp = &q->next;
			continue;
		}
		*pp = q->next;
		if (q->say)
			users_say(q);
		open = open_total(q);
		if (!q->mark)
			q->matched = open;
		if (!q->mark || open == 0) {
			q->done = 1;
		} else {
			q->next = rv.active;
			rv.active = q;
		}
	}
	pthread_cond_broadcast(&rv.cond);
}

static void revoke_cb(uv_async_t *a)
{
	unsigned self = loops_self();

	(void)a;
	pthread_mutex_lock(&rv.lock);
	for (struct revoke_req *q = rv.queue; q; q = q->next) {
		if (q->seen & (1ull << self))
			continue;
		q->seen |= 1ull << self;
		if (q->say)
			users_count(q);
		q->open[self] = revoke_walk(q->what, q->mark ? WALK_REVOKE : WALK_COUNT, &q->matched);
	}
	revoke_settle();
	pthread_mutex_unlock(&rv.lock);
}

/* Take @q off whichever list holds it (rv.lock held). */
static void revoke_unlink(struct revoke_req *q)
{
	for (struct revoke_req **pp = &rv.queue; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			return;
		}
	for (struct revoke_req **pp = &rv.active; *pp; pp = &(*pp)->next)
		if (*pp == q) {
			*pp = q->next;
			return;
		}
}

/*
 * From a worker thread: count the handles of every client that match @r
 * and, with @mark, revoke them (requests on them then get -ESTALE) and wait,
 * up to @timeout_ms, until every one has no request in flight and is closed.
 * @return the number of matching handles, -ETIMEDOUT or -ESHUTDOWN
 */
static int revoke_wait(const struct revoke_match *r, int mark, unsigned timeout_ms, char *say,
		       size_t saylen)
{
	struct revoke_req q = { .what = r, .mark = mark, .say = say, .saylen = saylen };
	struct timespec until;
	uint64_t ns;
	int ret = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	ns = (uint64_t)until.tv_nsec + (uint64_t)timeout_ms * 1000000u;
	until.tv_sec += (time_t)(ns / 1000000000u);
	until.tv_nsec = (long)(ns % 1000000000u);
	pthread_mutex_lock(&rv.lock);
	if (!rv.loops) {
		pthread_mutex_unlock(&rv.lock);
		return -ESHUTDOWN;
	}
	q.next = rv.queue;
	rv.queue = &q;
	for (unsigned i = 0; i < CONFIG_LOOPS_MAX; i++)
		if (rv.loops & (1ull << i))
			uv_async_send(rv.async[i]);
	while (!q.done && ret == 0)
		ret = pthread_cond_timedwait(&rv.cond, &rv.lock, &until);
	if (!q.done) {
		revoke_unlink(&q);
		ret = -ETIMEDOUT;
	} else {
		ret = (int)q.matched;
	}
	pthread_mutex_unlock(&rv.lock);
	return ret;
}

#define REVOKE_TIMEOUT_MS 30000u /* for requests in flight on revoked handles */

/* Datasets of one pool, each held open (refs) while the set lives. */
struct ds_set {
	struct stor_pool *pool;
	const char *name;
	int which; /* REG_DS_* */
	struct stor_ds **v;
	size_t n;
};

static int collect_one(const char *n, void *arg)
{
	struct ds_set *set = arg;
	size_t len = strlen(set->name);
	struct stor_prop_value v;
	struct stor_ds *ds, **nv;

	if (set->which == REG_DS_KEY) {
		if (stor_ds_get(set->pool, n, "encryptionroot", &v) < 0 ||
		    strcmp(v.value, set->name))
			return 0;
	} else if (strcmp(n, set->name) &&
		   !(set->which == REG_DS_TREE && !strncmp(n, set->name, len) && n[len] == '/')) {
		return 0;
	}
	if (stor_ds_open(set->pool, n, &ds) < 0)
		return 0; /* destroyed meanwhile */
	nv = realloc(set->v, (set->n + 1) * sizeof(*nv));
	if (!nv) {
		stor_ds_close(ds);
		return -ENOMEM;
	}
	set->v = nv;
	set->v[set->n++] = ds;
	return 0;
}

static void ds_set_free(struct ds_set *set)
{
	for (size_t i = 0; i < set->n; i++)
		stor_ds_close(set->v[i]);
	free(set->v);
	set->v = NULL;
	set->n = 0;
}

int reg_revoke_datasets(struct pool_ent *pe, const char *name, int which, int revoke, uid_t by)
{
	struct ds_set set = { .pool = pe->pool, .name = name, .which = which };
	struct revoke_match r = { .pe = pe, .by = by };
	int ret;

	ret = stor_ds_list(set.pool, collect_one, &set);
	if (ret >= 0 && set.n) {
		r.ds = set.v;
		r.nds = set.n;
		ret = revoke_wait(&r, revoke, REVOKE_TIMEOUT_MS, NULL, 0);
		if (revoke && ret > 0)
			log_warn("dataset %s: %d handles revoked by uid %u", name, ret,
				 (unsigned)by);
	}
	ds_set_free(&set);
	return ret;
}

int reg_revoke_pool(struct pool_ent *pe, uid_t by)
{
	struct revoke_match r = { .pe = pe, .by = by };
	int ret = revoke_wait(&r, 1, REVOKE_TIMEOUT_MS, NULL, 0);

	if (ret >= 0)
		log_warn("pool %s: %d handles revoked by uid %u", pe->name, ret, (unsigned)by);
	return ret;
}

int reg_named_users(struct pool_ent *pe, int (*named)(const char *name, const void *arg),
		    const void *arg, int revoke, uid_t by, char *buf, size_t len)
{
	struct revoke_match r = { .pe = pe, .named = named, .named_arg = arg, .by = by };
	int ret;

	if (buf && len)
		buf[0] = '\0';
	if (!revoke)
		return revoke_wait(&r, 0, REVOKE_TIMEOUT_MS, buf, len);
	ret = revoke_wait(&r, 1, REVOKE_TIMEOUT_MS, NULL, 0);
	if (ret > 0)
		log_warn("pool %s: %d handles revoked by uid %u", pe->name, ret, (unsigned)by);
	return ret;
}

int reg_pool_users(struct pool_ent *pe, char *buf, size_t len)
{
	struct revoke_match r = { .pe = pe };

	buf[0] = '\0';
	return revoke_wait(&r, 0, REVOKE_TIMEOUT_MS, buf, len);
}

/* ---- claim renewal ---- */

static struct {
	uv_timer_t timer;
	struct work_job job;
	int running; /* loop thread only */
	int init;
} renew;

static void renew_run(struct work_job *j)
{
	(void)j;
	reg_lock(0);
	for (struct pool_ent *pe = pools; pe; pe = pe->next) {
		int failed = pe->pool ? stor_pool_renew(pe->pool) : 0;

		if (failed)
			log_err("pool %s: %d LUN(s) could not renew their lock; the pool refuses "
				"writes once it may have expired",
				pe->name, failed);
	}
	reg_unlock();
}

static void renew_done(struct work_job *j, int status)
{
	(void)j, (void)status;
	renew.running = 0;
}

static void renew_cb(uv_timer_t *t)
{
	if (renew.running)
		return;
	renew.job = (struct work_job){ .run = renew_run, .done = renew_done };
	renew.running = work_submit_job(t->loop, &renew.job) == 0;
}

int reg_loop_start(uv_loop_t *loop)
{
	uint64_t ms = (uint64_t)cfg->ceph_lock_timeout * 1000 / 3;

	uv_timer_init(loop, &renew.timer);
	uv_timer_start(&renew.timer, renew_cb, ms, ms);
	uv_unref((uv_handle_t *)&renew.timer);
	renew.init = 1;
	return 0;
}

void reg_loop_stop(void)
{
	if (renew.init) {
		renew.init = 0;
		uv_close((uv_handle_t *)&renew.timer, NULL);
	}
}

int reg_loop_attach(uv_loop_t *loop)
{
	unsigned self = loops_self();
	uv_async_t *a = malloc(sizeof(*a));
	int ret = a ? uv_async_init(loop, a, revoke_cb) : -ENOMEM;

	if (ret < 0) {
		free(a);
		return ret;
	}
	uv_unref((uv_handle_t *)a);
	pthread_mutex_lock(&rv.lock);
	rv.async[self] = a;
	rv.loops |= 1ull << self;
	pthread_mutex_unlock(&rv.lock);
	return 0;
}

void reg_loop_detach(void)
{
	unsigned self = loops_self();
	uv_async_t *a;

	pthread_mutex_lock(&rv.lock);
	a = rv.async[self];
	rv.async[self] = NULL;
	rv.loops &= ~(1ull << self);
	/* a loop that is gone holds no handle: what waited on it alone is settled */
	revoke_settle();
	pthread_mutex_unlock(&rv.lock);
	if (a)
		uv_close((uv_handle_t *)a, (uv_close_cb)free);
}
