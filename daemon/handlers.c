// SPDX-License-Identifier: MIT
/*
 * One `static int h_<cmd>()` per command of the table in proto.h, and the
 * daemon's list of pools.
 *
 * Handlers read c->args (a JSON object), fill c->reply or c->err and return
 * 0 or a negative code; they never touch the socket, and the permission
 * column of the table was checked before they run. Blocking handlers run on
 * the libuv threadpool, so the pool list is guarded by a rwlock: imports,
 * exports and destroys take it for writing, everything else for reading.
 * A pool that failed to import stays on the list as faulted with its error
 * text; the names of imported pools are kept in <state_dir>/pools.list so a
 * restart imports them again.
 */
#include <config.h> /* the autoconf header first: _GNU_SOURCE, PACKAGE_VERSION */

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
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "rpc.h"

struct pool_ent {
	char name[PROTO_NAME_MAX + 1];
	struct stor_pool *pool; /* NULL when faulted */
	char error[512];
	atomic_uint nhandles;   /* datasets open on connections */
	struct pool_ent *next;
};

static const struct config *cfg;
static pthread_rwlock_t pools_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct pool_ent *pools;
static gid_t admin_gid;
static int have_admin_gid;

#define ERR(c, code, ...)                                       \
	do {                                                    \
		snprintf((c)->err, sizeof((c)->err), __VA_ARGS__); \
		return (code);                                  \
	} while (0)

/* ---- helpers ---- */

static struct stor_pool_opts pool_opts(uint64_t lun_size)
{
	return (struct stor_pool_opts){
		.state_dir = cfg->state_dir,
		.direct_io = cfg->direct_io,
		.pread_only = !cfg->lun_mmap,
		.txg_timeout_ms = cfg->txg_timeout * 1000u,
		.lun_size = lun_size,
	};
}

static struct pool_ent *pool_find(const char *name)
{
	for (struct pool_ent *pe = pools; pe; pe = pe->next)
		if (!strcmp(pe->name, name))
			return pe;
	return NULL;
}

/* Link @pe into the list, which is kept in name order for listings (write lock held). */
static void pool_insert(struct pool_ent *pe)
{
	struct pool_ent **pp = &pools;

	while (*pp && strcmp((*pp)->name, pe->name) < 0)
		pp = &(*pp)->next;
	pe->next = *pp;
	*pp = pe;
}

/* The pool part of a dataset name ("tank" of "tank/a/b") into @buf. */
static void pool_of(const char *ds, char *buf, size_t len)
{
	size_t n = strcspn(ds, "/");

	if (n >= len)
		n = len - 1;
	memcpy(buf, ds, n);
	buf[n] = '\0';
}

/* Rewrite pools.list from the list (caller holds the write lock). */
static void pools_save(void)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	FILE *f;

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
	int dfd = open(cfg->state_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0)
		log_err("%s: fsync: %s", cfg->state_dir, strerror(errno));
	if (dfd >= 0)
		close(dfd);
}

static const char *jstr(json_t *args, const char *key)
{
	return json_string_value(json_object_get(args, key));
}

/* Required name argument, validated; sets c->err on failure. */
static int arg_name(struct rpc_call *c, const char *key, int pool_only, const char **out)
{
	const char *s = jstr(c->args, key);

	*out = NULL;
	if (!s)
		ERR(c, -EINVAL, "%s: missing '%s'", c->cmd->name, key);
	if (!proto_name_valid(s, pool_only))
		ERR(c, STOR_EBADNAME, "'%.*s': invalid %s name", 64, s,
		    pool_only ? "pool" : "dataset");
	*out = s;
	return 0;
}

/* Look up the open pool of @name under the read lock (caller holds it). */
static int pool_get(struct rpc_call *c, const char *name, struct stor_pool **out)
{
	char pname[PROTO_NAME_MAX + 1];
	struct pool_ent *pe;

	pool_of(name, pname, sizeof(pname));
	pe = pool_find(pname);
	*out = NULL;
	if (!pe)
		ERR(c, -ENOENT, "%s: no such pool", pname);
	if (!pe->pool)
		ERR(c, STOR_EFAULTED, "%s: pool is faulted: %.200s", pname, pe->error);
	*out = pe->pool;
	return 0;
}

static int hexval(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/*
 * Key material travels hex-encoded in "key_hex" (JSON strings must be text;
 * raw keys are binary). The decoded copy and the JSON text are wiped here.
 */
static int arg_key(struct rpc_call *c, uint8_t **buf, struct stor_key_material *key, int *have)
{
	json_t *j = json_object_get(c->args, "key_hex");
	const char *s = json_string_value(j);
	size_t n;

	*buf = NULL;
	*have = 0;
	if (!s)
		return 0;
	n = strlen(s);
	if (n % 2 || n > 4096)
		ERR(c, -EINVAL, "key material: bad encoding");
	*buf = malloc(n / 2 + 1);
	if (!*buf)
		return -ENOMEM;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);

		if (hi < 0 || lo < 0) {
			explicit_bzero(*buf, n / 2);
			free(*buf);
			*buf = NULL;
			ERR(c, -EINVAL, "key material: bad encoding");
		}
		(*buf)[i] = (uint8_t)(hi << 4 | lo);
	}
	explicit_bzero((char *)s, n);
	key->data = *buf;
	key->len = n / 2;
	*have = 1;
	return 0;
}

static void key_free(uint8_t *buf, const struct stor_key_material *key)
{
	if (buf) {
		explicit_bzero(buf, key->len);
		free(buf);
	}
}

/* JSON array of strings @key into a NULL-terminated vector (strings borrowed). */
static int arg_strv(struct rpc_call *c, const char *key, const char ***out, size_t *n)
{
	json_t *a = json_object_get(c->args, key);
	const char **v;

	*out = NULL;
	*n = 0;
	if (!a)
		return 0;
	if (!json_is_array(a) || json_array_size(a) > 1024)
		ERR(c, -EINVAL, "%s: '%s' must be an array of strings", c->cmd->name, key);
	v = calloc(json_array_size(a) + 1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < json_array_size(a); i++) {
		v[i] = json_string_value(json_array_get(a, i));
		if (!v[i]) {
			free(v);
			ERR(c, -EINVAL, "%s: '%s' must be an array of strings", c->cmd->name, key);
		}
	}
	*out = v;
	*n = json_array_size(a);
	return 0;
}

/*
 * Optional size argument @key into @out (0 when absent). A present value must
 * be an integer from 1 to @max: a zero, negative or huge one is an error, not
 * the default (which is what "create -V 0" used to get).
 */
static int arg_size(struct rpc_call *c, const char *key, uint64_t max, uint64_t *out)
{
	json_t *j = json_object_get(c->args, key);

	*out = 0;
	if (!j)
		return 0;
	if (!json_is_integer(j) || json_integer_value(j) < 1 ||
	    (uint64_t)json_integer_value(j) > max)
		ERR(c, -EINVAL, "%s: '%s' must be an integer from 1 to %llu", c->cmd->name, key,
		    (unsigned long long)max);
	*out = (uint64_t)json_integer_value(j);
	return 0;
}

/* ---- access ---- */

int handlers_is_admin(uid_t uid, gid_t gid, const gid_t *peer_groups, int npeer)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	gid_t groups[256];
	int ng = 256;

	if (uid == 0 || uid == getuid())
		return 1;
	if (!have_admin_gid)
		return 0;
	if (gid == admin_gid)
		return 1;
	/* the groups the peer process really has (SO_PEERGROUPS)... */
	for (int i = 0; i < npeer; i++)
		if (peer_groups[i] == admin_gid)
			return 1;
	/* ...or the group database's, as a login would give them */
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return 0;
	if (getgrouplist(pw.pw_name, gid, groups, &ng) < 0)
		return 0;
	for (int i = 0; i < ng; i++)
		if (groups[i] == admin_gid)
			return 1;
	return 0;
}

/* Is @gid the peer's primary group or one of its supplementary groups? */
static int peer_in_group(struct rpc_call *c, gid_t gid)
{
	struct passwd pw, *res = NULL;
	char buf[4096];
	gid_t groups[256];
	int ng = 256;

	if (gid == c->gid)
		return 1;
	/* the groups the peer process really has (SO_PEERGROUPS)... */
	for (int i = 0; i < c->ngroups; i++)
		if (c->groups[i] == gid)
			return 1;
	if (c->ngroups >= 0)
		return 0;
	/* ...or, where the kernel cannot say, the group database's */
	if (getpwuid_r(c->uid, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return 0;
	if (getgrouplist(pw.pw_name, c->gid, groups, &ng) < 0)
		return 0;
	for (int i = 0; i < ng; i++)
		if (groups[i] == gid)
			return 1;
	return 0;
}

/*
 * May @c open dataset @name for record I/O: admin, or the owner property
 * ("UID" or "UID:GID", validated by libstore) names its uid or one of its groups.
 */
static int may_open(struct rpc_call *c, struct stor_pool *pool, const char *name)
{
	struct stor_prop_value v;
	unsigned long uid, gid;
	char *end;

	if (c->admin)
		return 1;
	if (stor_ds_get(pool, name, "owner", &v) < 0 || !v.value[0] || !strcmp(v.value, "-"))
		return 0;
	if (v.value[0] < '0' || v.value[0] > '9')
		return 0;
	uid = strtoul(v.value, &end, 10);
	if (uid == c->uid)
		return 1;
	if (*end == ':' && end[1] >= '0' && end[1] <= '9') {
		gid = strtoul(end + 1, &end, 10);
		if (gid <= UINT32_MAX && peer_in_group(c, (gid_t)gid))
			return 1;
	}
	return 0;
}

/* What a value of property @prop looks like, for the error of a bad one. */
static const char *prop_hint(const char *prop)
{
	if (!strncmp(prop, "owner", 5) && (!prop[5] || prop[5] == '='))
		return " (owner is UID or UID:GID, each a decimal from 0 to 4294967294, or -)";
	return "";
}

/* ---- handles of other connections ---- */

#define REVOKE_TIMEOUT_MS 30000u /* for requests in flight on revoked handles */

/* Datasets of one pool, each held open (refs) while the set lives. */
struct ds_set {
	struct stor_pool *pool;
	const char *name;
	int by_key;    /* the datasets whose encryptionroot is @name */
	int recursive; /* else @name and, if set, its descendants */
	struct stor_ds **v;
	size_t n;
};

static int collect_one(const char *n, void *arg)
{
	struct ds_set *set = arg;
	size_t len = strlen(set->name);
	struct stor_prop_value v;
	struct stor_ds *ds, **nv;

	if (set->by_key) {
		if (stor_ds_get(set->pool, n, "encryptionroot", &v) < 0 ||
		    strcmp(v.value, set->name))
			return 0;
	} else if (strcmp(n, set->name) &&
		   !(set->recursive && !strncmp(n, set->name, len) && n[len] == '/')) {
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

/*
 * Handles the connections hold on the datasets of @set (pool read lock
 * held); with @force they are revoked and closed first, whoever opened them.
 * @return their number or a negative code (c->err set)
 */
static int handles_on(struct rpc_call *c, struct ds_set *set, int force)
{
	char pname[PROTO_NAME_MAX + 1];
	struct rpc_revoke r = { .by = c->uid };
	int ret;

	if (stor_ds_list(set->pool, collect_one, set) < 0)
		ERR(c, -ENOMEM, "%s: out of memory", set->name);
	if (!set->n)
		return 0;
	pool_of(set->name, pname, sizeof(pname));
	r.pe = pool_find(pname);
	r.ds = set->v;
	r.nds = set->n;
	ret = rpc_revoke(&r, force, REVOKE_TIMEOUT_MS);
	if (ret < 0)
		ERR(c, ret, "%s: closing its handles: %s", set->name, proto_strerror(ret));
	if (force && ret > 0)
		log_warn("dataset %s: %d handles revoked by uid %u", set->name, ret,
			 (unsigned)c->uid);
	return ret;
}

/* pool export/destroy -f: revoke every handle on @pe (write lock held). */
static int pool_revoke(struct rpc_call *c, struct pool_ent *pe)
{
	struct rpc_revoke r = { .pe = pe, .by = c->uid };
	int ret;

	if (!atomic_load(&pe->nhandles) || !json_is_true(json_object_get(c->args, "force")))
		return 0;
	ret = rpc_revoke(&r, 1, REVOKE_TIMEOUT_MS);
	if (ret < 0)
		ERR(c, ret, "%s: closing its handles: %s", pe->name, proto_strerror(ret));
	log_warn("pool %s: %d handles revoked by uid %u", pe->name, ret, (unsigned)c->uid);
	return 0;
}

/* ---- commands ---- */

static int h_ping(struct rpc_call *c)
{
	c->reply = json_pack("{s:b}", "pong", 1);
	return 0;
}

static int h_hello(struct rpc_call *c)
{
	(void)c;
	return 0; /* handled by rpc.c before dispatch */
}

static int h_version(struct rpc_call *c)
{
	/* the pid lets coffer bench read the daemon's CPU time from /proc */
	c->reply = json_pack("{s:s, s:i, s:I}", "version", PACKAGE_VERSION, "protocol",
			     PROTO_VERSION, "pid", (json_int_t)getpid());
	return 0;
}

static json_t *lun_json(const struct stor_lun_stat *ls)
{
	json_t *o = json_object();

	json_object_set_new(o, "path", json_string(ls->path));
	json_object_set_new(o, "size", json_integer((json_int_t)ls->size));
	json_object_set_new(o, "used", json_integer((json_int_t)ls->used));
	json_object_set_new(o, "read_errors", json_integer((json_int_t)ls->read_errors));
	json_object_set_new(o, "write_errors", json_integer((json_int_t)ls->write_errors));
	json_object_set_new(o, "cksum_errors", json_integer((json_int_t)ls->cksum_errors));
	json_object_set_new(o, "nospace_errors", json_integer((json_int_t)ls->nospace_errors));
	json_object_set_new(o, "state", json_string(ls->faulted ? "FAULTED" : "ONLINE"));
	if (ls->label_damaged) {
		static const char *const copy[] = { "front", "end" };
		json_t *d = json_array(), *r = json_array();

		for (unsigned i = 0; i < 2; i++) {
			if (ls->label_damaged & (1u << i))
				json_array_append_new(d, json_string(copy[i]));
			if (ls->label_repaired & (1u << i))
				json_array_append_new(r, json_string(copy[i]));
		}
		json_object_set_new(o, "label_damaged", d);
		json_object_set_new(o, "label_repaired", r);
	}
	return o;
}

static json_t *pool_json(struct pool_ent *pe, int luns)
{
	struct stor_pool_stat st;
	json_t *o = json_pack("{s:s}", "name", pe->name);
	int ret;

	if (!pe->pool) {
		json_object_set_new(o, "state", json_string("FAULTED"));
		json_object_set_new(o, "error", json_string(pe->error));
		return o;
	}
	ret = stor_pool_stat(pe->pool, &st);
	if (ret < 0) {
		json_object_set_new(o, "state", json_string("DEGRADED"));
		json_object_set_new(o, "error", json_string(stor_strerror(ret)));
		return o;
	}
	json_object_set_new(o, "state", json_string(st.suspended ? "SUSPENDED" : "ONLINE"));
	if (st.suspended) {
		char why[256];

		if (st.suspended == STOR_SUSPEND_META)
			snprintf(why, sizeof(why),
				 "metadata commit failed (%s): writes are refused until a commit "
				 "succeeds; free space in the state directory, then flush",
				 stor_strerror(st.suspend_error));
		else
			snprintf(why, sizeof(why),
				 "a LUN flush failed (%s): written data may be lost; export and import",
				 stor_strerror(st.suspend_error));
		json_object_set_new(o, "error", json_string(why));
	}
	if (st.bad_frees)
		json_object_set_new(o, "bad_frees", json_integer((json_int_t)st.bad_frees));
	if (st.key_file[0])
		json_object_set_new(o, "key_file", json_string(st.key_file));
	json_object_set_new(o, "guid", json_integer((json_int_t)st.guid));
	json_object_set_new(o, "size", json_integer((json_int_t)st.size));
	json_object_set_new(o, "used", json_integer((json_int_t)st.used));
	json_object_set_new(o, "free", json_integer((json_int_t)(st.size - st.used)));
	json_object_set_new(o, "nluns", json_integer(st.nluns));
	json_object_set_new(o, "txg", json_integer((json_int_t)st.txg));
	json_object_set_new(o, "logical_used", json_integer((json_int_t)st.logical_used));
	json_object_set_new(o, "datasets", json_integer(st.ndatasets));
	json_object_set_new(o, "handles", json_integer(atomic_load(&pe->nhandles)));
	if (luns) {
		json_t *a = json_array();
		int faulted = 0;

		for (unsigned i = 0;; i++) {
			struct stor_lun_stat ls;

			if (stor_pool_lun_stat(pe->pool, i, &ls) < 0)
				break;
			faulted += ls.faulted != 0;
			json_array_append_new(a, lun_json(&ls));
		}
		json_object_set_new(o, "luns", a);
		/* a pool with faulted LUNs still serves what it holds: degraded, not faulted */
		if (faulted && !st.suspended)
			json_object_set_new(o, "state", json_string("DEGRADED"));
	}
	return o;
}

static int pools_reply(struct rpc_call *c, int luns)
{
	const char *name = jstr(c->args, "name");
	json_t *a = json_array();
	int found = 0;

	pthread_rwlock_rdlock(&pools_lock);
	for (struct pool_ent *pe = pools; pe; pe = pe->next) {
		if (name && strcmp(name, pe->name))
			continue;
		found = 1;
		json_array_append_new(a, pool_json(pe, luns));
	}
	pthread_rwlock_unlock(&pools_lock);
	if (name && !found) {
		json_decref(a);
		ERR(c, -ENOENT, "%.64s: no such pool", name);
	}
	c->reply = json_pack("{s:o}", "pools", a);
	return 0;
}

static int h_pool_list(struct rpc_call *c)
{
	return pools_reply(c, 0);
}

static int h_pool_status(struct rpc_call *c)
{
	return pools_reply(c, 1);
}

/* The offline check of a pool, run on it live: writes wait meanwhile. */
static int h_pool_check(struct rpc_call *c)
{
	struct stor_verify_report r;
	struct stor_pool *pool;
	const char *name;
	int ret;

	ret = arg_name(c, "name", 1, &name);
	if (ret < 0)
		return ret;
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		ret = stor_pool_verify(pool, &r);
		if (ret < 0)
			snprintf(c->err, sizeof(c->err), "%s: check: %s", name, stor_strerror(ret));
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0)
		c->reply = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "name", name, "records",
				     (json_int_t)r.records, "encrypted", (json_int_t)r.encrypted,
				     "nonce_repeats", (json_int_t)r.nonce_repeats, "cksum_errors",
				     (json_int_t)r.cksum_errors, "extent_errors",
				     (json_int_t)r.extent_errors, "space_errors",
				     (json_int_t)r.space_errors, "bad_frees", (json_int_t)r.bad_frees);
	return ret;
}

static int h_pool_create(struct rpc_call *c)
{
	json_t *luns = json_object_get(c->args, "luns");
	const char **paths = NULL, **props = NULL;
	size_t nprops = 0;
	struct stor_pool_opts o;
	struct stor_pool *pool = NULL;
	struct pool_ent *pe = NULL;
	const char *name;
	uint64_t size;
	size_t n;
	int ret;

	ret = arg_name(c, "name", 1, &name);
	if (ret < 0)
		return ret;
	if (!json_is_array(luns) || json_array_size(luns) == 0 ||
	    json_array_size(luns) > STOR_LUNS_MAX)
		ERR(c, -EINVAL, "%s: give 1 to %u LUN paths", name, STOR_LUNS_MAX);
	ret = arg_strv(c, "luns", &paths, &n);
	if (ret < 0)
		return ret;
	for (size_t i = 0; i < n; i++) {
		if (paths[i][0] != '/') {
			snprintf(c->err, sizeof(c->err), "%s: LUN path '%.200s' is not absolute",
				 name, paths[i]);
			free(paths);
			return -EINVAL;
		}
	}
	ret = arg_size(c, "lun_size", INT64_MAX, &size);
	if (ret < 0) {
		free(paths);
		return ret;
	}
	o = pool_opts(size);
	o.force = json_is_true(json_object_get(c->args, "force"));
	/* without a size, missing LUNs are an error the user can act on */
	for (size_t i = 0; !o.lun_size && i < n; i++) {
		struct stat st;

		if (stat(paths[i], &st) < 0 && errno == ENOENT) {
			snprintf(c->err, sizeof(c->err), "%s: LUN %.200s does not exist", name,
				 paths[i]);
			free(paths);
			return -ENOENT;
		}
	}
	pthread_rwlock_wrlock(&pools_lock);
	if (pool_find(name)) {
		ret = -EEXIST;
		snprintf(c->err, sizeof(c->err), "%s: pool already exists", name);
		goto out;
	}
	pe = calloc(1, sizeof(*pe));
	if (!pe) {
		ret = -ENOMEM;
		goto out;
	}
	ret = stor_pool_create(name, paths, (unsigned)n, &o, &pool);
	if (ret < 0) {
		const char *why = stor_pool_last_error();

		snprintf(c->err, sizeof(c->err), "%s: create: %s%s%s", name, stor_strerror(ret),
			 why[0] ? ": " : "", why);
		goto out;
	}
	/* -o props go on the root dataset, so every dataset inherits them; all or nothing */
	ret = arg_strv(c, "props", &props, &nprops);
	for (size_t i = 0; ret == 0 && i < nprops; i++) {
		char k[64];
		const char *eq = strchr(props[i], '=');

		if (!eq || eq == props[i] || (size_t)(eq - props[i]) >= sizeof(k)) {
			ret = STOR_EBADPROP;
			snprintf(c->err, sizeof(c->err), "%s: '%.64s': give prop=value", name,
				 props[i]);
			break;
		}
		memcpy(k, props[i], (size_t)(eq - props[i]));
		k[eq - props[i]] = '\0';
		ret = stor_ds_set(pool, name, k, eq + 1);
		if (ret < 0)
			snprintf(c->err, sizeof(c->err), "%s: %.64s: %s%s", name, props[i],
				 stor_strerror(ret), ret == STOR_EBADPROP ? prop_hint(props[i]) : "");
	}
	if (ret < 0) {
		stor_pool_close(pool);
		stor_pool_destroy(name, &o);
		goto out;
	}
	snprintf(pe->name, sizeof(pe->name), "%s", name);
	pe->pool = pool;
	pool_insert(pe);
	pe = NULL;
	pools_save();
	log_info("pool %s: created with %zu LUNs", name, n);
	c->reply = json_pack("{s:s}", "name", name);
out:
	pthread_rwlock_unlock(&pools_lock);
	free(pe);
	free(paths);
	free(props);
	return ret;
}

static int h_pool_add(struct rpc_call *c)
{
	struct stor_pool *pool;
	const char *name, *lun = jstr(c->args, "lun");
	uint64_t size;
	int ret;

	ret = arg_name(c, "name", 1, &name);
	if (ret < 0)
		return ret;
	if (!lun || lun[0] != '/')
		ERR(c, -EINVAL, "%s: give an absolute LUN path", name);
	ret = arg_size(c, "size", INT64_MAX, &size);
	if (ret < 0)
		return ret;
	if (!size) {
		struct stat st;

		if (stat(lun, &st) < 0 && errno == ENOENT)
			ERR(c, -ENOENT, "%s: LUN %.200s does not exist", name, lun);
	}
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		unsigned fl = json_is_true(json_object_get(c->args, "force")) ? STOR_FORCE : 0;

		ret = stor_pool_add_lun(pool, lun, size, fl);
		if (ret < 0) {
			const char *why = stor_pool_last_error();

			snprintf(c->err, sizeof(c->err), "%s: add %.200s: %s%s%.300s", name, lun,
				 stor_strerror(ret), why[0] ? ": " : "", why);
		}
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0)
		c->reply = json_object();
	return ret;
}

static int h_pool_clear(struct rpc_call *c)
{
	struct stor_pool *pool;
	const char *name, *lun = jstr(c->args, "lun");
	int ret;

	ret = arg_name(c, "name", 1, &name);
	if (ret < 0)
		return ret;
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		ret = stor_pool_clear(pool, lun);
		if (ret < 0)
			snprintf(c->err, sizeof(c->err), "%s: clear: %s", name,
				 ret == -ENOENT ? stor_pool_last_error() : stor_strerror(ret));
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0) {
		log_info("pool %s: errors cleared on %.200s", name, lun ? lun : "every LUN");
		c->reply = json_object();
	}
	return ret;
}

static int h_labelclear(struct rpc_call *c)
{
	struct stor_pool_opts o = pool_opts(0);
	const char *lun = jstr(c->args, "lun");
	unsigned fl = json_is_true(json_object_get(c->args, "force")) ? STOR_FORCE : 0;
	int ret;

	if (!lun || lun[0] != '/')
		ERR(c, -EINVAL, "labelclear: give an absolute LUN path");
	ret = stor_lun_labelclear(lun, &o, fl);
	if (ret < 0) {
		const char *why = stor_pool_last_error();

		snprintf(c->err, sizeof(c->err), "labelclear: %s", why[0] ? why : stor_strerror(ret));
		return ret;
	}
	log_info("lun %.200s: label cleared", lun);
	c->reply = json_object();
	return 0;
}

/* Unlink @name from the list (write lock held). */
static void pool_unlink(struct pool_ent *pe)
{
	for (struct pool_ent **pp = &pools; *pp; pp = &(*pp)->next) {
		if (*pp == pe) {
			*pp = pe->next;
			return;
		}
	}
}

static int h_pool_export(struct rpc_call *c)
{
	struct pool_ent *pe;
	const char *name;
	int ret;

	ret = arg_name(c, "name", 1, &name);
	if (ret < 0)
		return ret;
	pthread_rwlock_wrlock(&pools_lock);
	pe = pool_find(name);
	if (!pe) {
		ret = -ENOENT;
		snprintf(c->err, sizeof(c->err), "%s: no such pool", name);
	} else if ((ret = pool_revoke(c, pe)) < 0) {
		/* c->err says why */
	} else if (atomic_load(&pe->nhandles)) {
		ret = -EBUSY;
		snprintf(c->err, sizeof(c->err), "%s: %u datasets are open", name,
			 atomic_load(&pe->nhandles));
	} else if ((ret = stor_pool_sync(pe->pool)) < 0 &&
		   !json_is_true(json_object_get(c->args, "force"))) {
		/* what is not committed would be lost: keep the pool imported */
		snprintf(c->err, sizeof(c->err),
			 "%s: final commit failed: %s; the pool stays imported (export -f drops "
			 "what is not committed)",
			 name, stor_strerror(ret));
	} else {
		ret = stor_pool_close(pe->pool);
		if (ret < 0)
			log_err("pool %s: close: %s; writes since the last commit are lost", name,
				stor_strerror(ret));
		pool_unlink(pe);
		pools_save();
		free(pe);
		ret = 0;
		log_info("pool %s: exported", name);
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0)
		c->reply = json_object();
	return ret;
}

/* Names of pools with metadata in the state directory that are not imported. */
static json_t *importable(void)
{
	char dir[PATH_MAX];
	json_t *a = json_array();
	struct dirent *d;
	DIR *dp;

	snprintf(dir, sizeof(dir), "%s/pools", cfg->state_dir);
	dp = opendir(dir);
	if (!dp)
		return a;
	while ((d = readdir(dp))) {
		size_t n = strlen(d->d_name);
		char name[PROTO_NAME_MAX + 1];

		if (n <= 4 || n - 4 > PROTO_NAME_MAX || strcmp(d->d_name + n - 4, ".mdb"))
			continue;
		memcpy(name, d->d_name, n - 4);
		name[n - 4] = '\0';
		if (proto_name_valid(name, 1) && !pool_find(name))
			json_array_append_new(a, json_string(name));
	}
	closedir(dp);
	return a;
}

/* Open pool @name into a new list entry (write lock held); faulted on failure. */
static struct pool_ent *pool_import(const char *name, int *err)
{
	struct stor_pool_opts o = pool_opts(0);
	struct pool_ent *pe = calloc(1, sizeof(*pe));
	int ret;

	*err = -ENOMEM;
	if (!pe)
		return NULL;
	snprintf(pe->name, sizeof(pe->name), "%s", name);
	ret = stor_pool_open(name, &o, &pe->pool);
	*err = ret;
	if (ret < 0) {
		const char *why = stor_pool_last_error();

		snprintf(pe->error, sizeof(pe->error), "%s%s%s", stor_strerror(ret),
			 why[0] ? ": " : "", why);
		pe->pool = NULL;
	}
	pool_insert(pe);
	return pe;
}

static int h_pool_import(struct rpc_call *c)
{
	const char *name = jstr(c->args, "name");
	struct pool_ent *pe;
	int ret, was_listed;

	if (!name) {
		pthread_rwlock_rdlock(&pools_lock);
		c->reply = json_pack("{s:o}", "importable", importable());
		pthread_rwlock_unlock(&pools_lock);
		return 0;
	}
	ret = arg_name(c, "name", 1, &name);
	if (ret < 0)
		return ret;
	pthread_rwlock_wrlock(&pools_lock);
	pe = pool_find(name);
	if (pe && pe->pool) {
		ret = -EEXIST;
		snprintf(c->err, sizeof(c->err), "%s: pool is already imported", name);
		goto out;
	}
	was_listed = pe != NULL;
	if (pe) {
		/* a faulted pool: try again */
		pool_unlink(pe);
		free(pe);
	}
	pe = pool_import(name, &ret);
	if (!pe)
		goto out;
	if (ret < 0) {
		snprintf(c->err, sizeof(c->err), "%s: import: %.300s", name, pe->error);
		/* a pool that never imported is not remembered; a faulted one stays */
		if (!was_listed) {
			pool_unlink(pe);
			free(pe);
		}
		goto out;
	}
	pools_save();
	log_info("pool %s: imported", name);
	c->reply = json_object();
out:
	pthread_rwlock_unlock(&pools_lock);
	return ret;
}

static int h_pool_destroy(struct rpc_call *c)
{
	struct stor_pool_opts o = pool_opts(0);
	struct pool_ent *pe;
	const char *name;
	int ret;

	ret = arg_name(c, "name", 1, &name);
	if (ret < 0)
		return ret;
	pthread_rwlock_wrlock(&pools_lock);
	pe = pool_find(name);
	if (pe) {
		ret = pool_revoke(c, pe);
		if (ret < 0)
			goto out;
	}
	if (pe && atomic_load(&pe->nhandles)) {
		ret = -EBUSY;
		snprintf(c->err, sizeof(c->err), "%s: %u datasets are open", name,
			 atomic_load(&pe->nhandles));
		goto out;
	}
	if (pe) {
		stor_pool_close(pe->pool);
		pool_unlink(pe);
		free(pe);
		pools_save();
	}
	ret = stor_pool_destroy(name, &o);
	if (ret < 0) {
		snprintf(c->err, sizeof(c->err), "%s: destroy: %s", name, stor_strerror(ret));
		goto out;
	}
	log_info("pool %s: destroyed", name);
	c->reply = json_object();
out:
	pthread_rwlock_unlock(&pools_lock);
	return ret;
}

static int h_ds_create(struct rpc_call *c)
{
	struct stor_key_material key = { 0 };
	struct stor_ds_opts o = { 0 };
	struct stor_pool *pool;
	const char **props = NULL;
	uint8_t *kbuf = NULL;
	const char *name;
	size_t nprops;
	const char *hint = "";
	uint64_t v;
	int have_key, ret;

	ret = arg_name(c, "name", 0, &name);
	if (ret < 0)
		return ret;
	if (!strchr(name, '/'))
		ERR(c, -EINVAL, "%s: a dataset name is POOL/NAME", name);
	ret = arg_strv(c, "props", &props, &nprops);
	if (ret < 0)
		return ret;
	ret = arg_key(c, &kbuf, &key, &have_key);
	if (ret < 0)
		goto out;
	ret = arg_size(c, "recordsize", STOR_RECSIZE_MAX, &v);
	if (ret < 0)
		goto out;
	o.recordsize = (uint32_t)v;
	ret = arg_size(c, "volsize", INT64_MAX, &o.volsize);
	/* a present volsize below one record is refused, not replaced by the default */
	if (ret < 0 || (json_object_get(c->args, "volsize") &&
			o.volsize < (o.recordsize ? o.recordsize : STOR_RECSIZE_DEFAULT))) {
		snprintf(c->err, sizeof(c->err), "%s: volsize must be at least one record (%u bytes)",
			 name, o.recordsize ? o.recordsize : STOR_RECSIZE_DEFAULT);
		ret = -EINVAL;
		goto out;
	}
	o.props = props;
	o.nprops = nprops;
	o.key = have_key ? &key : NULL;
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		ret = stor_ds_create(pool, name, &o, NULL);
		for (size_t i = 0; ret == STOR_EBADPROP && i < nprops; i++)
			if (prop_hint(props[i])[0])
				hint = prop_hint(props[i]);
		if (ret == -EBUSY && stor_pool_last_error()[0])
			snprintf(c->err, sizeof(c->err), "%s", stor_pool_last_error());
		else if (ret < 0)
			snprintf(c->err, sizeof(c->err), "%s: create: %s%s", name,
				 stor_strerror(ret), hint);
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0) {
		log_info("dataset %s: created", name);
		c->reply = json_pack("{s:s}", "name", name);
	}
out:
	key_free(kbuf, &key);
	free(props);
	return ret;
}

static int h_ds_destroy(struct rpc_call *c)
{
	struct stor_pool *pool;
	const char *name;
	int ret;

	ret = arg_name(c, "name", 0, &name);
	if (ret < 0)
		return ret;
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		int force = json_is_true(json_object_get(c->args, "force"));
		unsigned fl = 0;
		struct ds_set set = { .pool = pool, .name = name };

		if (json_is_true(json_object_get(c->args, "recursive")))
			fl = STOR_RECURSIVE;
		set.recursive = fl != 0;
		ret = handles_on(c, &set, force);
		ds_set_free(&set);
		if (ret > 0 && !force) {
			snprintf(c->err, sizeof(c->err),
				 "%s: dataset is open (%d handles)", name, ret);
			ret = -EBUSY;
		} else if (ret >= 0) {
			ret = stor_ds_destroy(pool, name, fl);
		}
		if (ret == -EBUSY && !c->err[0])
			snprintf(c->err, sizeof(c->err), "%s: has children or is open", name);
		else if (ret < 0 && !c->err[0])
			snprintf(c->err, sizeof(c->err), "%s: destroy: %s", name,
				 stor_strerror(ret));
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0) {
		log_info("dataset %s: destroyed", name);
		c->reply = json_object();
	}
	return ret;
}

struct list_ctx {
	struct rpc_call *c;
	struct stor_pool *pool;
	const char *name;   /* NULL: all */
	int recursive;
	const char **props; /* NULL: every property */
	size_t nprops;
	json_t *out;
};

static int prop_add(const struct stor_prop_value *v, void *arg)
{
	json_object_set_new(arg, v->name, json_string(v->value));
	return 0;
}

static int list_one(const char *name, void *arg)
{
	struct list_ctx *lc = arg;
	json_t *props, *o;

	if (lc->name) {
		size_t n = strlen(lc->name);

		if (strcmp(name, lc->name) &&
		    !(lc->recursive && !strncmp(name, lc->name, n) && name[n] == '/'))
			return 0;
	}
	props = json_object();
	if (lc->props) {
		for (size_t i = 0; i < lc->nprops; i++) {
			struct stor_prop_value v;

			if (stor_ds_get(lc->pool, name, lc->props[i], &v) == 0)
				json_object_set_new(props, lc->props[i], json_string(v.value));
			else
				json_object_set_new(props, lc->props[i], json_string("-"));
		}
	} else {
		stor_ds_get_all(lc->pool, name, prop_add, props);
	}
	o = json_pack("{s:s, s:o}", "name", name, "props", props);
	json_array_append_new(lc->out, o);
	return 0;
}

static int h_ds_list(struct rpc_call *c)
{
	struct list_ctx lc = { .c = c };
	char pname[PROTO_NAME_MAX + 1] = "";
	int ret, found = 0;

	lc.name = jstr(c->args, "name");
	lc.recursive = json_is_true(json_object_get(c->args, "recursive"));
	if (lc.name && !proto_name_valid(lc.name, 0))
		ERR(c, STOR_EBADNAME, "'%.64s': invalid dataset name", lc.name);
	ret = arg_strv(c, "props", &lc.props, &lc.nprops);
	if (ret < 0)
		return ret;
	if (lc.name)
		pool_of(lc.name, pname, sizeof(pname));
	lc.out = json_array();
	pthread_rwlock_rdlock(&pools_lock);
	for (struct pool_ent *pe = pools; pe; pe = pe->next) {
		if (!pe->pool || (pname[0] && strcmp(pname, pe->name)))
			continue;
		found = 1;
		lc.pool = pe->pool;
		ret = stor_ds_list(pe->pool, list_one, &lc);
		if (ret < 0) {
			snprintf(c->err, sizeof(c->err), "%s: list: %s", pe->name,
				 stor_strerror(ret));
			break;
		}
	}
	pthread_rwlock_unlock(&pools_lock);
	free(lc.props);
	if (ret >= 0 && lc.name && (!found || json_array_size(lc.out) == 0)) {
		ret = -ENOENT;
		snprintf(c->err, sizeof(c->err), "%s: dataset does not exist", lc.name);
	}
	if (ret < 0) {
		json_decref(lc.out);
		return ret;
	}
	c->reply = json_pack("{s:o}", "datasets", lc.out);
	return 0;
}

static const char *src_name(enum stor_prop_source s)
{
	switch (s) {
	case STOR_SRC_DEFAULT:
		return "default";
	case STOR_SRC_LOCAL:
		return "local";
	case STOR_SRC_INHERITED:
		return "inherited";
	case STOR_SRC_FIXED:
		return "fixed";
	default:
		return "-";
	}
}

static json_t *prop_json(const struct stor_prop_value *v)
{
	return json_pack("{s:s, s:s, s:s, s:s}", "property", v->name, "value", v->value, "source",
			 src_name(v->source), "inherited_from", v->inherited_from);
}

static int prop_append(const struct stor_prop_value *v, void *arg)
{
	json_array_append_new(arg, prop_json(v));
	return 0;
}

static int h_ds_get(struct rpc_call *c)
{
	struct stor_pool *pool;
	const char **props = NULL;
	const char *name;
	json_t *a;
	size_t n;
	int ret;

	ret = arg_name(c, "name", 0, &name);
	if (ret < 0)
		return ret;
	ret = arg_strv(c, "props", &props, &n);
	if (ret < 0)
		return ret;
	a = json_array();
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0 && !props) {
		ret = stor_ds_get_all(pool, name, prop_append, a);
		if (ret < 0)
			snprintf(c->err, sizeof(c->err), "%s: %s", name,
				 ret == -ENOENT ? "dataset does not exist" : stor_strerror(ret));
	}
	for (size_t i = 0; ret == 0 && props && i < n; i++) {
		struct stor_prop_value v;

		ret = stor_ds_get(pool, name, props[i], &v);
		if (ret == 0)
			json_array_append_new(a, prop_json(&v));
		else if (ret == -ENOENT)
			snprintf(c->err, sizeof(c->err), "%s: dataset does not exist", name);
		else
			snprintf(c->err, sizeof(c->err), "%s: %.64s: %s%s", name, props[i],
				 stor_strerror(ret), ret == STOR_EBADPROP ? prop_hint(props[i]) : "");
	}
	pthread_rwlock_unlock(&pools_lock);
	free(props);
	if (ret < 0) {
		json_decref(a);
		return ret;
	}
	c->reply = json_pack("{s:s, s:o}", "name", name, "props", a);
	return 0;
}

static int h_ds_set(struct rpc_call *c)
{
	const char *name, *prop = jstr(c->args, "prop"), *value = jstr(c->args, "value");
	struct stor_pool *pool;
	int ret;

	ret = arg_name(c, "name", 0, &name);
	if (ret < 0)
		return ret;
	if (!prop || !value || strlen(prop) >= 32 || strlen(value) >= 256)
		ERR(c, STOR_EBADPROP, "%s: give a property and a value", name);
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		ret = stor_ds_set(pool, name, prop, value);
		if (ret < 0)
			snprintf(c->err, sizeof(c->err), "%s: set %s=%s: %s%s", name, prop, value,
				 ret == -ENOENT ? "dataset does not exist" : stor_strerror(ret),
				 ret == STOR_EBADPROP ? prop_hint(prop) : "");
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0)
		c->reply = json_object();
	return ret;
}

static int h_ds_inherit(struct rpc_call *c)
{
	const char *name, *prop = jstr(c->args, "prop");
	struct stor_pool *pool;
	int ret;

	ret = arg_name(c, "name", 0, &name);
	if (ret < 0)
		return ret;
	if (!prop)
		ERR(c, STOR_EBADPROP, "%s: give a property", name);
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		ret = stor_ds_inherit(pool, name, prop);
		if (ret < 0)
			snprintf(c->err, sizeof(c->err), "%s: inherit %.32s: %s", name, prop,
				 stor_strerror(ret));
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0)
		c->reply = json_object();
	return ret;
}

static int h_ds_open(struct rpc_call *c)
{
	char pname[PROTO_NAME_MAX + 1];
	struct stor_pool *pool;
	struct stor_ds *ds = NULL;
	const char *name;
	int ret;

	ret = arg_name(c, "name", 0, &name);
	if (ret < 0)
		return ret;
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret < 0)
		goto out;
	if (!may_open(c, pool, name)) {
		ret = -EPERM; /* rpc.c logs it, once per connection */
		snprintf(c->err, sizeof(c->err),
			 "%s: permission denied (uid %u is neither an administrator nor the owner)",
			 name, (unsigned)c->uid);
		goto out;
	}
	ret = stor_ds_open(pool, name, &ds);
	if (ret < 0) {
		snprintf(c->err, sizeof(c->err), "%s: open: %s", name,
			 ret == -ENOENT ? "dataset does not exist" : stor_strerror(ret));
		goto out;
	}
	pool_of(name, pname, sizeof(pname));
	c->opened = ds;
	c->opened_pool = pool_find(pname);
	atomic_fetch_add(&c->opened_pool->nhandles, 1);
	c->reply = json_pack("{s:I, s:I}", "volsize", (json_int_t)stor_ds_volsize(ds),
			     "recordsize", (json_int_t)stor_ds_recordsize(ds));
out:
	pthread_rwlock_unlock(&pools_lock);
	return ret;
}

void handlers_pool_unref(struct pool_ent *pe)
{
	if (pe)
		atomic_fetch_sub(&pe->nhandles, 1);
}

static int h_ds_close(struct rpc_call *c)
{
	json_t *h = json_object_get(c->args, "handle");
	int ret;

	if (!json_is_integer(h) || json_integer_value(h) < 0 ||
	    json_integer_value(h) > UINT32_MAX)
		ERR(c, -EBADF, "ds_close: give a handle");
	ret = rpc_handle_close(c->conn, (uint32_t)json_integer_value(h));
	if (ret < 0)
		ERR(c, ret, "ds_close: handle %lld is not open", (long long)json_integer_value(h));
	c->reply = json_object();
	return 0;
}

static int h_key_load(struct rpc_call *c)
{
	struct stor_key_material key = { 0 };
	struct stor_pool *pool;
	uint8_t *kbuf = NULL;
	const char *name;
	int have, ret;

	ret = arg_name(c, "name", 0, &name);
	if (ret < 0)
		return ret;
	ret = arg_key(c, &kbuf, &key, &have);
	if (ret < 0)
		return ret;
	if (!have)
		ERR(c, -EINVAL, "%s: no key material given", name);
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		unsigned fl = json_is_true(json_object_get(c->args, "noop")) ? STOR_KEY_NOOP : 0;

		ret = stor_key_load(pool, name, &key, fl);
		if (ret == -EEXIST)
			snprintf(c->err, sizeof(c->err), "%s: key already loaded", name);
		else if ((ret == STOR_EAUTH || ret == STOR_ECORRUPT) && stor_pool_last_error()[0])
			snprintf(c->err, sizeof(c->err), "%s", stor_pool_last_error());
		else if (ret < 0)
			snprintf(c->err, sizeof(c->err), "%s: %s", name,
				 ret == -ENOENT ? "dataset does not exist" : stor_strerror(ret));
	}
	pthread_rwlock_unlock(&pools_lock);
	key_free(kbuf, &key);
	if (ret == 0) {
		log_info("dataset %s: key loaded", name);
		c->reply = json_object();
	}
	return ret;
}

static int h_key_unload(struct rpc_call *c)
{
	struct stor_pool *pool;
	const char *name;
	int ret;

	ret = arg_name(c, "name", 0, &name);
	if (ret < 0)
		return ret;
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		/* every request on a handle would fail with "key is not loaded" */
		int force = json_is_true(json_object_get(c->args, "force"));
		struct ds_set set = { .pool = pool, .name = name, .by_key = 1 };

		ret = handles_on(c, &set, force);
		ds_set_free(&set);
		if (ret > 0 && !force) {
			snprintf(c->err, sizeof(c->err),
				 "%s: unload-key: dataset is open (%d handles)", name, ret);
			ret = -EBUSY;
		} else if (ret >= 0) {
			ret = stor_key_unload(pool, name, force ? STOR_FORCE : 0);
			if (ret == -EBUSY)
				snprintf(c->err, sizeof(c->err),
					 "%s: unload-key: dataset is open",
					 name);
			else if (ret < 0)
				snprintf(c->err, sizeof(c->err), "%s: unload-key: %s", name,
					 ret == -ENOENT ? "dataset does not exist"
							: stor_strerror(ret));
		}
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0) {
		log_info("dataset %s: key unloaded", name);
		c->reply = json_object();
	}
	return ret;
}

static int h_key_change(struct rpc_call *c)
{
	struct stor_key_material key = { 0 };
	struct stor_pool *pool;
	const char **props = NULL;
	uint8_t *kbuf = NULL;
	const char *name;
	size_t n;
	int have, ret;

	ret = arg_name(c, "name", 0, &name);
	if (ret < 0)
		return ret;
	ret = arg_strv(c, "props", &props, &n);
	if (ret < 0)
		return ret;
	ret = arg_key(c, &kbuf, &key, &have);
	if (ret < 0)
		goto out;
	pthread_rwlock_rdlock(&pools_lock);
	ret = pool_get(c, name, &pool);
	if (ret == 0) {
		ret = stor_key_change(pool, name, props, n, have ? &key : NULL);
		if (ret < 0)
			snprintf(c->err, sizeof(c->err), "%s: change-key: %s", name,
				 ret == -ENOENT ? "dataset does not exist" : stor_strerror(ret));
	}
	pthread_rwlock_unlock(&pools_lock);
	if (ret == 0) {
		log_info("dataset %s: key changed", name);
		c->reply = json_object();
	}
out:
	key_free(kbuf, &key);
	free(props);
	return ret;
}

/* Latency (ns) below which a fraction @q of the histogram's requests fall. */
static uint64_t lat_quantile(const struct stor_io_stats *st, double q)
{
	uint64_t total = 0, seen = 0;

	for (unsigned i = 0; i < STOR_LAT_BUCKETS; i++)
		total += st->lat[i];
	if (!total)
		return 0;
	for (unsigned i = 0; i < STOR_LAT_BUCKETS; i++) {
		seen += st->lat[i];
		if ((double)seen >= q * (double)total)
			return i + 1 < STOR_LAT_BUCKETS ? stor_lat_bucket_ns(i + 1)
							: stor_lat_bucket_ns(i);
	}
	return stor_lat_bucket_ns(STOR_LAT_BUCKETS - 1);
}

static json_t *io_stats_json(const struct stor_io_stats *st)
{
	json_t *o = json_object();

#define F(name) json_object_set_new(o, #name, json_integer((json_int_t)st->name))
	F(reads);
	F(writes);
	F(discards);
	F(flushes);
	F(errors);
	F(read_bytes);
	F(write_bytes);
	F(cache_hits);
	F(cache_misses);
	F(sealed);
	F(opened);
	F(seal_ns);
	F(open_ns);
	F(cksum_errors);
	F(auth_errors);
#undef F
	/* upper bounds of the histogram buckets the quantiles fall in */
	json_object_set_new(o, "lat_p50_ns", json_integer((json_int_t)lat_quantile(st, 0.50)));
	json_object_set_new(o, "lat_p99_ns", json_integer((json_int_t)lat_quantile(st, 0.99)));
	json_object_set_new(o, "lat_p999_ns", json_integer((json_int_t)lat_quantile(st, 0.999)));
	return o;
}

#define STAT(f) json_integer((json_int_t)atomic_load_explicit(&rpc_stats.f, memory_order_relaxed))

struct ds_io_ctx {
	struct stor_pool *pool;
	json_t *out;
};

/* One dataset's counters for the per-dataset table of `coffer stats`. */
static int ds_io_one(const char *name, void *ctx)
{
	struct ds_io_ctx *x = ctx;
	struct stor_io_stats st;
	json_t *o;

	if (stor_ds_io_stats(x->pool, name, &st) < 0)
		return 0; /* destroyed meanwhile */
	o = io_stats_json(&st);
	json_object_set_new(o, "name", json_string(name));
	json_array_append_new(x->out, o);
	return 0;
}

static int h_stats(struct rpc_call *c)
{
	json_t *io = json_object(), *pa = json_array();

	json_object_set_new(io, "reads", STAT(reads));
	json_object_set_new(io, "writes", STAT(writes));
	json_object_set_new(io, "flushes", STAT(flushes));
	json_object_set_new(io, "discards", STAT(discards));
	json_object_set_new(io, "read_bytes", STAT(read_bytes));
	json_object_set_new(io, "write_bytes", STAT(write_bytes));
	json_object_set_new(io, "io_errors", STAT(io_errors));
	json_object_set_new(io, "admin_calls", STAT(admin_calls));
	json_object_set_new(io, "eperm", STAT(eperm));
	json_object_set_new(io, "bad_frames", STAT(bad_frames));
	json_object_set_new(io, "connections_total", STAT(conns_total));
	json_object_set_new(io, "connections_open", STAT(conns_open));
	json_object_set_new(io, "batches", STAT(batches));
	json_object_set_new(io, "batched_ios", STAT(batched_ios));
	json_object_set_new(io, "inflight_peak", STAT(inflight_peak));
	int per_ds = json_is_true(json_object_get(c->args, "datasets"));
	struct stor_cache_stats cs;

	pthread_rwlock_rdlock(&pools_lock);
	for (struct pool_ent *pe = pools; pe; pe = pe->next) {
		json_t *pj = pool_json(pe, 0);
		struct stor_io_stats st;

		if (pe->pool && stor_pool_io_stats(pe->pool, &st) == 0)
			json_object_set_new(pj, "io", io_stats_json(&st));
		if (pe->pool && per_ds) {
			json_t *da = json_array();

			stor_ds_list(pe->pool, ds_io_one, &(struct ds_io_ctx){ pe->pool, da });
			json_object_set_new(pj, "datasets_io", da);
		}
		json_array_append_new(pa, pj);
	}
	pthread_rwlock_unlock(&pools_lock);
	stor_cache_stats(&cs);
	c->reply = json_pack("{s:o, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}}", "io", io, "pools",
			     pa, "cache", "capacity", (json_int_t)cs.capacity, "bytes",
			     (json_int_t)cs.bytes, "entries", (json_int_t)cs.entries, "hits",
			     (json_int_t)cs.hits, "misses", (json_int_t)cs.misses, "inserts",
			     (json_int_t)cs.inserts, "evictions", (json_int_t)cs.evictions);
	/* key hygiene of the process: 0 and 0 unless configured or limited otherwise */
	json_object_set_new(c->reply, "process",
			    json_pack("{s:i, s:I}", "dumpable", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0),
				      "key_pages_unlocked",
				      (json_int_t)stor_key_pages_unlocked()));
	/* {"name": DATASET}: that dataset's counters too */
	if (json_is_string(json_object_get(c->args, "name"))) {
		const char *name;
		struct stor_pool *pool;
		struct stor_io_stats st;
		int ret = arg_name(c, "name", 0, &name);

		if (ret < 0)
			return ret;
		pthread_rwlock_rdlock(&pools_lock);
		ret = pool_get(c, name, &pool);
		if (ret == 0) {
			ret = stor_ds_io_stats(pool, name, &st);
			if (ret < 0)
				snprintf(c->err, sizeof(c->err), "%s: dataset does not exist", name);
			else
				json_object_set_new(c->reply, "dataset", io_stats_json(&st));
		}
		pthread_rwlock_unlock(&pools_lock);
		return ret;
	}
	return 0;
}

/* ---- dispatch and life cycle ---- */

typedef int (*handler_fn)(struct rpc_call *c);

static handler_fn handler_for(unsigned op)
{
	switch (op) {
#define XX(num, NAME, str, fn, fl, minb, maxb) \
	case (num):                            \
		return (handler_fn)(fn);
		PROTO_CMDS(XX)
#undef XX
	}
	return NULL;
}

void handlers_run(struct rpc_call *c)
{
	handler_fn fn = handler_for(c->hdr.op);

	c->err[0] = '\0';
	c->status = fn ? fn(c) : -EPROTO;
	if (c->status == 0 && !c->reply)
		c->reply = json_object();
	if (c->status > 0)
		c->status = 0;
}

int handlers_init(const struct config *config)
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
	while (fgets(line, sizeof(line), f)) {
		struct pool_ent *pe;
		int ret;

		line[strcspn(line, "\r\n")] = '\0';
		if (!line[0] || line[0] == '#')
			continue;
		if (!proto_name_valid(line, 1) || pool_find(line)) {
			log_warn("%s: ignoring '%s'", path, line);
			continue;
		}
		pe = pool_import(line, &ret);
		if (!pe)
			continue;
		if (ret < 0)
			log_err("pool %s: import: %s", line, pe->error);
		else
			log_info("pool %s: imported", line);
	}
	fclose(f);
	return 0;
}

int handlers_fini(void)
{
	int failed = 0;

	pthread_rwlock_wrlock(&pools_lock);
	while (pools) {
		struct pool_ent *pe = pools;
		int ret;

		pools = pe->next;
		ret = stor_pool_close(pe->pool);
		if (ret < 0) {
			log_err("pool %s: final commit failed: %s; writes since the last commit are lost",
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
