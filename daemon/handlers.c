// SPDX-License-Identifier: MIT
/*
 * The bodies of the JSON commands of the table in proto.h: one
 * `static int h_<cmd>(struct hcall *c)` each.
 *
 * The dispatcher has done everything the table says before a handler runs:
 * permission, the check of the target name, the registry lock and the
 * lookup and state of the target's pool (handlers.h). So a handler parses
 * its own arguments, calls libstore and fills c->reply. On failure it
 * returns the code and, where the error map says all there is, leaves the
 * text to the dispatcher ("NAME: VERB: error: DETAIL"); it writes c->err
 * only for what only it knows (counts of open handles, a missing argument).
 * Blocking handlers run on the libuv threadpool; none touches a connection.
 */

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "counters.h"
#include "events.h"
#include "handlers.h"
#include "log.h"
#include "metrics.h"
#include "prop_names.h"
#include "roots.h"

#define ERR(c, code, ...)                                          \
	do {                                                       \
		snprintf((c)->err, sizeof((c)->err), __VA_ARGS__); \
		return (code);                                     \
	} while (0)

/* A failure the dispatcher describes: what was done, and libstore's detail. */
/*
 * @detail, or the reason the library left for this call (cleared before
 * each handler runs, so it is this request's): an error reply says what was
 * wrong, not only which errno it was.
 */
static int fail(struct hcall *c, int ret, const char *verb, const char *detail)
{
	c->verb = verb;
	if (!detail || !detail[0])
		detail = stor_pool_last_error();
	snprintf(c->detail, sizeof(c->detail), "%s", detail);
	return ret;
}

/*
 * An administrative change is done: one admin.<command> event, whose log
 * line (events.c) is the journal's record of it, with the pool it changed
 * (@pool, NULL: the part of c->name before '/' or '@'), the target, the
 * caller's uid and @fmt's text.
 */
static void __attribute__((format(printf, 3, 4)))
admin_event(struct hcall *c, const char *pool, const char *fmt, ...)
{
	char cls[64], msg[512], pbuf[STOR_POOL_NAME_MAX + 1] = "";
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!pool && c->name) {
		snprintf(pbuf, sizeof(pbuf), "%.*s", (int)strcspn(c->name, "/@"), c->name);
		pool = pbuf;
	}
	snprintf(cls, sizeof(cls), "admin.%s", c->cmd->name);
	events_post(cls, pool,
		    (struct stor_event_field[]){ { .name = "name", .str = c->name ? c->name : "" },
						 { .name = "uid", .num = c->peer->uid },
						 { .name = "msg", .str = msg } },
		    3);
}

static const char *jstr(json_t *args, const char *key)
{
	return json_string_value(json_object_get(args, key));
}

static int jtrue(json_t *args, const char *key)
{
	return json_is_true(json_object_get(args, key));
}

/* ---- arguments ---- */

/*
 * Key material travels hex-encoded in "key_hex" (JSON strings must be text;
 * raw keys are binary). The decoded copy and the JSON text are wiped here.
 */
static int arg_key(struct hcall *c, uint8_t **buf, struct stor_key_material *key, int *have)
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
	if (stor_hex_decode(s, n, *buf, NULL) < 0) {
		explicit_bzero(*buf, n / 2);
		free(*buf);
		*buf = NULL;
		ERR(c, -EINVAL, "key material: bad encoding");
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
static int arg_strv(struct hcall *c, const char *key, const char ***out, size_t *n)
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
static int arg_size(struct hcall *c, const char *key, uint64_t max, uint64_t *out)
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

/* What a value of property @prop looks like, for the error of a bad one. */
static const char *prop_hint(const char *prop)
{
	if (!strncmp(prop, "owner", 5) && (!prop[5] || prop[5] == '='))
		return "owner is UID or UID:GID, each a decimal from 0 to 4294967294, or -";
	return NULL;
}

/*
 * A dataset with handles on it (@which of registry.h) is refused as busy,
 * unless @force revoked them. @what names the operation in the refusal.
 */
static int no_handles(struct hcall *c, int which, int force, const char *what)
{
	int ret = reg_revoke_datasets(c->pe, c->name, which, force, c->peer->uid);

	if (ret < 0)
		return fail(c, ret, "closing its handles", NULL);
	if (ret > 0 && !force)
		ERR(c, -EBUSY, "%s: %sdataset is open (%d handles)", c->name, what, ret);
	return 0;
}

/* pool export/destroy -f: revoke every handle on c->pe (write lock held). */
static int pool_revoke(struct hcall *c)
{
	int ret;

	if (!atomic_load(&c->pe->nhandles) || !jtrue(c->args, "force"))
		return 0;
	ret = reg_revoke_pool(c->pe, c->peer->uid);
	return ret < 0 ? fail(c, ret, "closing its handles", NULL) : 0;
}

/*
 * Export and destroy wait for no handle: say who holds them (which datasets,
 * exported over NBD or open on the control socket, on how many
 * connections) and what to do, as zpool export says "pool is busy".
 */
static int pool_busy(struct hcall *c)
{
	char users[sizeof(c->err) - 160];
	int n;

	if (!atomic_load(&c->pe->nhandles))
		return 0;
	n = reg_pool_users(c->pe, users, sizeof(users));
	if (n < 0)
		return fail(c, n, "finding its users", NULL);
	if (n == 0)
		return 0; /* the last one closed meanwhile */
	ERR(c, -EBUSY,
	    "pool %s is busy: %s; disconnect those clients (nbd-client -d for an export), or give "
	    "-f to close their handles",
	    c->name, users);
}

/* ---- commands ---- */

static int h_ping(struct hcall *c)
{
	c->reply = json_pack("{s:b}", "pong", 1);
	return 0;
}

/* The import replaying its log now: what `coffer pool import` shows on a terminal. */
static int h_import_progress(struct hcall *c)
{
	struct reg_import_progress ip;

	reg_import_progress(&ip);
	if (!ip.running)
		c->reply = json_pack("{s:b}", "running", 0);
	else
		c->reply = json_pack("{s:b,s:s,s:b,s:I,s:I,s:I,s:I,s:f}", "running", 1, "pool",
				     ip.pool, "rebuild", ip.pr.rebuild, "records",
				     (json_int_t)ip.pr.records, "records_total",
				     (json_int_t)ip.pr.records_total, "bytes", (json_int_t)ip.pr.bytes,
				     "bytes_total", (json_int_t)ip.pr.bytes_total, "seconds",
				     ip.seconds);
	return 0;
}

static int h_version(struct hcall *c)
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
	json_object_set_new(o, "repaired", json_integer((json_int_t)ls->repaired));
	json_object_set_new(o, "vdev", json_integer(ls->vdev));
	json_object_set_new(o, "state", json_string(stor_lun_state_name(ls)));
	if (ls->absent[0])
		json_object_set_new(o, "absent", json_string(ls->absent));
	if (ls->truncated_from)
		json_object_set_new(o, "truncated_from",
				    json_integer((json_int_t)ls->truncated_from));
	if (ls->missing_since)
		json_object_set_new(o, "missing_since",
				    json_integer((json_int_t)ls->missing_since));
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

/* The scrub's state and counts, as zpool status's scan line. */
static json_t *scan_json(struct stor_pool *pool)
{
	static const char *const state[] = { "none", "scanning", "paused", "finished",
					     "canceled" };
	struct stor_scrub_stat ss;

	stor_pool_scrub_stat(pool, &ss);
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "function",
			 ss.function == STOR_SCAN_RESILVER ? "resilver" : "scrub",
			 "state", state[ss.state], "total", (json_int_t)ss.total, "examined",
			 (json_int_t)ss.examined, "repaired", (json_int_t)ss.repaired, "errors",
			 (json_int_t)ss.errors, "start", (json_int_t)ss.start, "end",
			 (json_int_t)ss.end, "rate", (json_int_t)ss.rate);
}

/* The datasets with a rekey under way or failed, as rekeystatus words it
 * (pool status prints a line for each, as for a scan). */
static int rekey_row(const char *name, const struct stor_prop_value *v, size_t nv, void *ctx)
{
	static const char *const under_way[] = { "running", "paused", "stopped", "failed" };

	for (size_t i = 0; nv && i < sizeof(under_way) / sizeof(under_way[0]); i++)
		if (!strncmp(v[0].value, under_way[i], strlen(under_way[i]))) {
			json_array_append_new(ctx, json_pack("{s:s, s:s}", "dataset", name,
							     "status", v[0].value));
			break;
		}
	return 0;
}

static json_t *rekeys_json(struct stor_pool *pool)
{
	static const char *const props[] = { "rekeystatus" };
	json_t *a = json_array();

	stor_ds_list_props(pool, props, 1, rekey_row, a);
	return a;
}

/* The records with unrecoverable errors: "data_errors" counts them all,
 * "error_records" names the first ones (pool status -v prints them). */
static void errors_json(json_t *o, struct stor_pool *pool)
{
	enum { SHOWN = 64 };
	struct stor_pool_error *e = calloc(SHOWN, sizeof(*e));
	json_t *a = json_array();
	uint64_t more = 0;
	int n = e ? stor_pool_errors(pool, e, SHOWN, &more) : 0;

	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_pack("{s:s, s:I, s:I}", "dataset", e[i].dataset,
						   "record", (json_int_t)e[i].record, "offset",
						   (json_int_t)e[i].offset));
	free(e);
	json_object_set_new(o, "data_errors", json_integer((json_int_t)((uint64_t)n + more)));
	json_object_set_new(o, "error_records", a);
}

/* A mirror serves while one side does. */
static void vdev_state(json_t *v, unsigned nlun, unsigned nfaulted)
{
	if (v)
		json_object_set_new(v, "state", json_string(!nfaulted	      ? "ONLINE"
							    : nfaulted < nlun ? "DEGRADED"
									      : "FAULTED"));
}

/* Two counters of a LUN, reads then writes, as a JSON pair. */
static json_t *pair(const uint64_t v[2])
{
	return json_pack("[I, I]", (json_int_t)v[0], (json_int_t)v[1]);
}

static json_t *hist_json(const uint64_t h[STOR_LUN_HIST_BUCKETS])
{
	json_t *a = json_array();

	for (unsigned b = 0; b < STOR_LUN_HIST_BUCKETS; b++)
		json_array_append_new(a, json_integer((json_int_t)h[b]));
	return a;
}

/* LUN @idx's I/O counters, raw since its open, as "io" of its entry @l:
 * pool iostat makes rates and deltas of them, as zpool iostat does of vdev_stat_t. */
static void lun_io_json(struct stor_pool *pool, unsigned idx, json_t *l)
{
	struct stor_lun_iostat st;

	if (stor_pool_lun_iostat(pool, idx, &st) < 0)
		return;
	json_object_set_new(
		l, "io",
		json_pack("{s:I, s:I, s:o, s:o, s:o, s:o, s:o, s:[o, o], s:[o, o]}", "since_ns",
			  (json_int_t)st.since_ns, "now_ns", (json_int_t)st.now_ns, "ops",
			  pair(st.ops), "bytes", pair(st.bytes), "wait_ns", pair(st.wait_ns),
			  "disk_ns", pair(st.disk_ns), "inflight", pair(st.inflight), "hist",
			  hist_json(st.hist[0]), hist_json(st.hist[1]), "disk_hist",
			  hist_json(st.disk_hist[0]), hist_json(st.disk_hist[1])));
}

/* Pool @pe as pool list (@luns 0), status (1) or iostat (2: each LUN's "io") show it. */
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
		char why[512];

		if (st.suspended == STOR_SUSPEND_FENCED)
			snprintf(why, sizeof(why),
				 "fenced: %s; the cluster refuses this host's writes", st.fenced_by);
		else if (st.suspended == STOR_SUSPEND_META)
			snprintf(why, sizeof(why),
				 "metadata commit failed (%s): writes are refused until a commit "
				 "succeeds; free space in the state directory, then flush",
				 stor_strerror(st.suspend_error));
		else
			snprintf(why, sizeof(why),
				 "a LUN flush failed (%s): written data may be lost; export and import",
				 stor_strerror(st.suspend_error));
		json_object_set_new(o, "error", json_string(why));
		json_object_set_new(o, "suspended",
				    json_string(st.suspended == STOR_SUSPEND_META     ? "metadata"
						: st.suspended == STOR_SUSPEND_FENCED ? "fenced"
										      : "lun"));
	}
	if (st.bad_frees)
		json_object_set_new(o, "bad_frees", json_integer((json_int_t)st.bad_frees));
	if (st.key_file[0])
		json_object_set_new(o, "key_file", json_string(st.key_file));
	if (st.meta_log[0])
		json_object_set_new(o, "metadata", json_string(st.meta_log));
	/* a GUID is 64 bits: a string, as import lists it (a JSON number loses bits over 2^53) */
	json_object_set_new(o, "guid", json_sprintf("%016llx", (unsigned long long)st.guid));
	json_object_set_new(o, "size", json_integer((json_int_t)st.size));
	json_object_set_new(o, "used", json_integer((json_int_t)st.used));
	json_object_set_new(o, "metadata_used", json_integer((json_int_t)st.meta_used));
	json_object_set_new(o, "free", json_integer((json_int_t)(st.size - st.used - st.meta_used)));
	json_object_set_new(o, "nluns", json_integer(st.nluns));
	json_object_set_new(o, "txg", json_integer((json_int_t)st.txg));
	json_object_set_new(o, "logical_used", json_integer((json_int_t)st.logical_used));
	json_object_set_new(o, "datasets", json_integer(st.ndatasets));
	json_object_set_new(o, "handles", json_integer(atomic_load(&pe->nhandles)));
	if (luns) {
		json_t *a = json_array(), *vdevs = json_array();
		/* per first LUN: its vdev's entry, and that vdev's sides and faulted */
		json_t *v[STOR_LUNS_MAX] = { 0 };
		unsigned nlun[STOR_LUNS_MAX] = { 0 }, nfaulted[STOR_LUNS_MAX] = { 0 };
		unsigned nmirror = 0, n;
		int faulted = 0;

		/* the tree of zpool status: each vdev, a mirror with its sides. A
		 * side joins the vdev its first LUN names, wherever its index
		 * falls: one attached later has an index past other vdevs' */
		for (n = 0; n < STOR_LUNS_MAX; n++) {
			struct stor_lun_stat ls;

			if (stor_pool_lun_stat(pe->pool, n, &ls) < 0)
				break;
			json_array_append_new(a, lun_json(&ls));
			if (luns > 1)
				lun_io_json(pe->pool, n, json_array_get(a, n));
			/* a detached side keeps its index, but is in no vdev's list */
			if (ls.state == STOR_SIDE_DETACHED && ls.vdev != n)
				continue;
			faulted += ls.faulted && ls.state != STOR_SIDE_DETACHED;
			if (ls.vdev == n) {
				v[n] = json_pack("{s:s, s:[]}", "type", ls.sides > 1 ? "mirror" : "lun",
						 "luns");
				if (ls.sides > 1)
					json_object_set_new(v[n], "name",
							    json_sprintf("mirror-%u", nmirror++));
				json_array_append_new(vdevs, v[n]);
			}
			if (ls.state == STOR_SIDE_DETACHED || ls.vdev > n || !v[ls.vdev])
				continue;
			json_array_append_new(json_object_get(v[ls.vdev], "luns"), json_integer(n));
			nlun[ls.vdev]++;
			nfaulted[ls.vdev] += ls.faulted != 0;
		}
		for (unsigned i = 0; i < n; i++)
			vdev_state(v[i], nlun[i], nfaulted[i]);
		json_object_set_new(o, "luns", a);
		json_object_set_new(o, "scan", scan_json(pe->pool));
		json_object_set_new(o, "rekeys", rekeys_json(pe->pool));
		errors_json(o, pe->pool);
		json_object_set_new(o, "vdevs", vdevs);
		/* a pool with faulted LUNs still serves what it holds: degraded, not faulted */
		if (faulted && !st.suspended)
			json_object_set_new(o, "state", json_string("DEGRADED"));
	}
	return o;
}

/* The named pool (looked up by the table: CMD_KNOWN) or every pool. */
static int pools_reply(struct hcall *c, int luns)
{
	json_t *a = json_array();

	for (struct pool_ent *pe = c->pe ? c->pe : reg_pools(); pe; pe = c->pe ? NULL : pe->next)
		json_array_append_new(a, pool_json(pe, luns));
	c->reply = json_pack("{s:o}", "pools", a);
	return 0;
}

static int h_pool_list(struct hcall *c)
{
	return pools_reply(c, 0);
}

static int h_pool_status(struct hcall *c)
{
	return pools_reply(c, 1);
}

static int h_pool_iostat(struct hcall *c)
{
	return pools_reply(c, 2);
}


/*
 * The MAC findings of a check, as two lists: what failed (a table's records
 * or its root) and which tables went unverified, and why.
 */
static void check_findings(json_t *reply, const struct stor_verify_report *r)
{
	json_t *failed = json_array(), *unverified = json_array();

	for (size_t i = 0; i < r->nfindings; i++) {
		const struct stor_verify_finding *f = &r->findings[i];

		switch (f->kind) {
		case STOR_VERIFY_MAC_GROUP:
			json_array_append_new(failed, json_pack("{s:s,s:s,s:I,s:I}", "name",
								f->table, "what", "records", "first",
								(json_int_t)f->first, "last",
								(json_int_t)f->last));
			break;
		case STOR_VERIFY_MAC_ROOT:
			json_array_append_new(failed, json_pack("{s:s,s:s}", "name", f->table,
								"what", "root"));
			break;
		case STOR_VERIFY_NO_KEY:
		case STOR_VERIFY_MAC_PENDING:
			json_array_append_new(unverified,
					      json_pack("{s:s,s:s}", "name", f->table, "reason",
							f->kind == STOR_VERIFY_NO_KEY
								? "key not loaded"
								: "MAC tree pending (receive)"));
			break;
		}
	}
	json_object_set_new(reply, "mac_failures", failed);
	json_object_set_new(reply, "mac_not_verified", unverified);
}

/* The offline check of a pool, run on it live: writes wait meanwhile. */
static int h_pool_check(struct hcall *c)
{
	struct stor_verify_report r;
	int ret = stor_pool_verify(c->pool, &r);

	if (ret < 0)
		return fail(c, ret, "check", NULL);
	c->reply = json_pack("{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "name",
			     c->name, "records", (json_int_t)r.records, "encrypted",
			     (json_int_t)r.encrypted, "kept", (json_int_t)r.kept,
			     "nonce_repeats", (json_int_t)r.nonce_repeats, "old_keys",
			     (json_int_t)r.old_keys, "cksum_errors",
			     (json_int_t)r.cksum_errors, "extent_errors",
			     (json_int_t)r.extent_errors, "space_errors",
			     (json_int_t)r.space_errors, "bad_frees", (json_int_t)r.bad_frees,
			     "mac_verified", (json_int_t)r.mac_verified, "mac_errors",
			     (json_int_t)r.mac_errors, "mac_unverified",
			     (json_int_t)r.mac_unverified);
	if (c->reply)
		check_findings(c->reply, &r);
	stor_verify_report_free(&r);
	return 0;
}

/* Without a size, missing LUNs are an error the user can act on. */
static int lun_missing(struct hcall *c, const char *lun, uint64_t size)
{
	struct stat st;

	if (!size && lun[0] == '/' && stat(lun, &st) < 0 && errno == ENOENT)
		ERR(c, -ENOENT, "%s: LUN %.200s does not exist", c->name, lun);
	return 0;
}

/* -o props of a new pool go on its root dataset, so every dataset inherits them. */
static int root_props(struct hcall *c, struct stor_pool *pool, const char **props, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char k[64];
		const char *eq = strchr(props[i], '=');
		int ret;

		if (!eq || eq == props[i] || (size_t)(eq - props[i]) >= sizeof(k))
			ERR(c, STOR_EBADPROP, "%s: '%.64s': give prop=value", c->name, props[i]);
		memcpy(k, props[i], (size_t)(eq - props[i]));
		k[eq - props[i]] = '\0';
		ret = stor_ds_set(pool, c->name, k, eq + 1);
		if (ret < 0)
			return fail(c, ret, props[i], prop_hint(props[i]));
	}
	return 0;
}

/*
 * "sides" of a create: how many of the paths each vdev takes in order (1 a
 * LUN of its own, 2.. a mirror); absent, every LUN is its own vdev.
 */
static int arg_sides(struct hcall *c, size_t nluns, unsigned **out, unsigned *nvdevs)
{
	json_t *a = json_object_get(c->args, "sides"), *e;
	size_t i, sum = 0;

	*out = NULL;
	*nvdevs = 0;
	if (!a)
		return 0;
	if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > nluns)
		ERR(c, -EINVAL, "%s: 'sides' must be an array of LUN counts", c->name);
	*out = calloc(json_array_size(a), sizeof(**out));
	if (!*out)
		return -ENOMEM;
	json_array_foreach(a, i, e) {
		json_int_t k = json_integer_value(e);

		if (!json_is_integer(e) || k < 1 || k > STOR_MIRROR_MAX)
			ERR(c, -EINVAL, "%s: a mirror has 2 to %u LUNs", c->name, STOR_MIRROR_MAX);
		(*out)[i] = (unsigned)k;
		sum += (size_t)k;
	}
	*nvdevs = (unsigned)json_array_size(a);
	if (sum != nluns)
		ERR(c, -EINVAL, "%s: the vdevs take %zu LUNs, %zu given", c->name, sum, nluns);
	return 0;
}

static int h_pool_create(struct hcall *c)
{
	json_t *luns = json_object_get(c->args, "luns");
	const char **paths = NULL, **props = NULL;
	size_t n = 0, nprops = 0;
	unsigned *sides = NULL, nvdevs = 0;
	struct stor_pool_opts o;
	struct stor_pool *pool = NULL;
	uint64_t size;
	uint8_t *made = NULL; /* LUN files this create makes (-s): removed if it fails */
	int ret;

	if (!json_is_array(luns) || json_array_size(luns) == 0 ||
	    json_array_size(luns) > STOR_LUNS_MAX)
		ERR(c, -EINVAL, "%s: give 1 to %u LUN paths", c->name, STOR_LUNS_MAX);
	ret = arg_strv(c, "luns", &paths, &n);
	if (ret == 0)
		ret = arg_size(c, "lun_size", INT64_MAX, &size);
	for (size_t i = 0; ret == 0 && i < n; i++) {
		if (!stor_lun_path_ok(paths[i])) {
			snprintf(c->err, sizeof(c->err),
				 "%s: LUN path '%.200s' is neither absolute nor rados:POOL/PREFIX",
				 c->name, paths[i]);
			ret = -EINVAL;
		}
	}
	for (size_t i = 0; ret == 0 && i < n; i++)
		ret = lun_missing(c, paths[i], size);
	if (ret == 0)
		ret = arg_strv(c, "props", &props, &nprops);
	if (ret == 0)
		ret = arg_sides(c, n, &sides, &nvdevs);
	if (ret == 0 && !(made = calloc(n, 1)))
		ret = -ENOMEM;
	if (ret < 0)
		goto out;
	for (size_t i = 0; size && i < n; i++) {
		struct stat st;

		made[i] = paths[i][0] == '/' && stat(paths[i], &st) < 0 && errno == ENOENT;
	}
	o = reg_pool_opts(size);
	o.force = jtrue(c->args, "force");
	o.vdev_sides = sides;
	o.nvdevs = nvdevs;
	ret = stor_pool_create(c->name, paths, (unsigned)n, &o, &pool);
	if (ret < 0) {
		ret = fail(c, ret, "create", stor_pool_last_error());
		goto undo;
	}
	/* all or nothing */
	ret = root_props(c, pool, props, nprops);
	if (ret == 0)
		ret = reg_pool_add(c->name, pool);
	if (ret < 0) {
		stor_pool_close(pool);
		stor_pool_destroy(c->name, &o);
		goto undo;
	}
	admin_event(c, NULL, "pool %s: created with %zu LUNs", c->name, n);
	c->reply = json_pack("{s:s}", "name", c->name);
	goto out;
undo:
	for (size_t i = 0; i < n; i++)
		if (made[i])
			unlink(paths[i]);
out:
	free(made);
	free(paths);
	free(props);
	free(sides);
	return ret;
}

/* One vdev: "lun", a LUN of its own, or "mirror", the paths of its sides. */
static int h_pool_add(struct hcall *c)
{
	const char *lun = jstr(c->args, "lun"), **sides = NULL;
	unsigned flags = jtrue(c->args, "force") ? STOR_FORCE : 0;
	size_t n = 0;
	uint64_t size;
	int ret;

	ret = arg_strv(c, "mirror", &sides, &n);
	if (ret < 0)
		return ret;
	if (!sides) {
		sides = calloc(1, sizeof(*sides));
		if (!sides)
			return -ENOMEM;
		sides[0] = lun;
		n = lun ? 1 : 0;
	} else if (n < 2 || n > STOR_MIRROR_MAX || lun) {
		free(sides);
		ERR(c, -EINVAL, "%s: a mirror has 2 to %u LUNs", c->name, STOR_MIRROR_MAX);
	}
	ret = n ? 0 : -EINVAL;
	for (size_t i = 0; ret == 0 && i < n; i++)
		ret = stor_lun_path_ok(sides[i]) ? 0 : -EINVAL;
	if (ret < 0) {
		free(sides);
		ERR(c, -EINVAL, "%s: give an absolute LUN path or rados:POOL/PREFIX", c->name);
	}
	ret = arg_size(c, "size", INT64_MAX, &size);
	for (size_t i = 0; ret == 0 && i < n; i++)
		ret = lun_missing(c, sides[i], size);
	if (ret == 0)
		ret = n == 1 ? stor_pool_add_lun(c->pool, sides[0], size, flags)
			     : stor_pool_add_mirror(c->pool, sides, (unsigned)n, size, flags);
	if (ret < 0 && !c->err[0])
		ret = fail(c, ret, "add", stor_pool_last_error());
	if (ret == 0)
		admin_event(c, NULL, "pool %s: %s %.200s added", c->name, n > 1 ? "mirror of" : "lun",
			    sides[0]);
	free(sides);
	return ret;
}

static int h_pool_clear(struct hcall *c)
{
	const char *lun = jstr(c->args, "lun");
	int ret = stor_pool_clear(c->pool, lun);

	if (ret < 0)
		return fail(c, ret, "clear", ret == -ENOENT ? stor_pool_last_error() : NULL);
	admin_event(c, NULL, "pool %s: errors cleared on %.200s", c->name, lun ? lun : "every LUN");
	return 0;
}

static int pool_resilvering(struct stor_pool *pool)
{
	struct stor_scrub_stat ss;

	stor_pool_scrub_stat(pool, &ss);
	return ss.function == STOR_SCAN_RESILVER && ss.state == STOR_SCRUB_RUNNING;
}

/* Start or resume ("pause", "stop": those) the pool's scrub. */
static int h_pool_scrub(struct hcall *c)
{
	int what = jtrue(c->args, "stop")    ? STOR_SCRUB_STOP
		   : jtrue(c->args, "pause") ? STOR_SCRUB_PAUSE
					     : STOR_SCRUB_START;
	int ret = stor_pool_scrub(c->pool, what);

	if (ret == -EBUSY && pool_resilvering(c->pool))
		ERR(c, ret, "%s: a resilver is running; scrub once it is done", c->name);
	if (ret == -EBUSY)
		ERR(c, ret, "%s: a scrub is running; pause it with -p or stop it with -s", c->name);
	if (ret == -ENOENT || (ret == -EBUSY && what != STOR_SCRUB_START))
		ERR(c, ret, "%s: no scrub is %s", c->name,
		    what == STOR_SCRUB_PAUSE ? "running" : "running or paused");
	if (ret < 0)
		return fail(c, ret, "scrub", NULL);
	return 0; /* libstore's scrub.start, scrub.pause or scrub.abort event says it */
}

/* offline, online, detach: one side, by path or index */
static int side_verb(struct hcall *c, int (*verb)(struct stor_pool *, const char *),
		     const char *what)
{
	const char *lun = jstr(c->args, "lun");
	int ret;

	if (!lun)
		ERR(c, -EINVAL, "%s: %s: give the LUN (its path or index)", c->name, what);
	ret = verb(c->pool, lun);
	if (ret < 0)
		return fail(c, ret, what, stor_pool_last_error());
	admin_event(c, NULL, "pool %s: lun %.200s: %s", c->name, lun, what);
	return 0;
}

static int h_pool_offline(struct hcall *c)
{
	return side_verb(c, stor_pool_offline, "offline");
}

/* online [-e] [-s SIZE]: then grow it to SIZE, or to what backs it now */
static int h_pool_online(struct hcall *c)
{
	const char *lun = jstr(c->args, "lun");
	uint64_t size;
	int ret = side_verb(c, stor_pool_online, "online");

	if (ret < 0 || !(jtrue(c->args, "expand") || json_object_get(c->args, "size")))
		return ret;
	ret = arg_size(c, "size", INT64_MAX, &size);
	if (ret == 0)
		ret = stor_pool_expand(c->pool, lun, size);
	if (ret < 0 && !c->err[0])
		return fail(c, ret, "expand", stor_pool_last_error());
	if (ret == 0)
		admin_event(c, NULL, "pool %s: lun %.200s: expanded", c->name, lun);
	return ret;
}

static int h_pool_detach(struct hcall *c)
{
	return side_verb(c, stor_pool_detach, "detach");
}

/* replace, attach: a side and a new LUN (made at the mirror's size if missing) */
static int new_side_verb(struct hcall *c,
			 int (*verb)(struct stor_pool *, const char *, const char *, unsigned),
			 const char *what)
{
	const char *lun = jstr(c->args, "lun"), *new_lun = jstr(c->args, "new");
	unsigned flags = jtrue(c->args, "force") ? STOR_FORCE : 0;
	int ret;

	if (!lun || !new_lun)
		ERR(c, -EINVAL, "%s: %s: give the LUN and the new one", c->name, what);
	if (!stor_lun_path_ok(new_lun))
		ERR(c, -EINVAL, "%s: give an absolute LUN path or rados:POOL/PREFIX", c->name);
	ret = verb(c->pool, lun, new_lun, flags);
	if (ret < 0)
		return fail(c, ret, what, stor_pool_last_error());
	admin_event(c, NULL, "pool %s: %s %.200s with %.200s: resilvering", c->name, what, lun, new_lun);
	return 0;
}

static int h_pool_replace(struct hcall *c)
{
	return new_side_verb(c, stor_pool_replace, "replace");
}

static int h_pool_attach(struct hcall *c)
{
	return new_side_verb(c, stor_pool_attach, "attach");
}

/* The events after "since" (0: every one held), of pool "name" if given. */
static int h_pool_events(struct hcall *c)
{
	json_t *since = json_object_get(c->args, "since"), *max = json_object_get(c->args, "max");

	if ((since && (!json_is_integer(since) || json_integer_value(since) < 0)) ||
	    (max && (!json_is_integer(max) || json_integer_value(max) < 1)))
		ERR(c, -EINVAL, "pool_events: 'since' is an eid (0 or more), 'max' a count");
	c->reply = events_list(since ? (uint64_t)json_integer_value(since) : 0, c->name,
			       max && json_integer_value(max) < EVENTS_REPLY_MAX
				       ? (size_t)json_integer_value(max)
				       : EVENTS_REPLY_MAX);
	return c->reply ? 0 : -ENOMEM;
}

static int h_labelclear(struct hcall *c)
{
	struct stor_pool_opts o = reg_pool_opts(0);
	const char *lun = jstr(c->args, "lun");
	int ret;

	if (!lun || !stor_lun_path_ok(lun))
		ERR(c, -EINVAL, "labelclear: give an absolute LUN path or rados:POOL/PREFIX");
	ret = stor_lun_labelclear(lun, &o, jtrue(c->args, "force") ? STOR_FORCE : 0);
	if (ret < 0)
		return fail(c, ret, NULL, stor_pool_last_error());
	admin_event(c, "", "lun %.200s: label cleared", lun);
	return 0;
}

static int h_pool_export(struct hcall *c)
{
	int ret;

	if (!c->pe->pool) {
		/* faulted: nothing is open, nothing to commit, no label can be
		 * reached to mark; the daemon just forgets it (zpool export) */
		reg_pool_remove(c->pe);
		c->pe = NULL;
		reg_save();
		admin_event(c, NULL, "pool %s: exported (it was faulted; its labels are unchanged)",
			    c->name);
		return 0;
	}
	ret = pool_revoke(c);
	if (ret == 0)
		ret = pool_busy(c);
	if (ret < 0)
		return ret;
	ret = stor_pool_sync(c->pe->pool);
	if (ret < 0 && !jtrue(c->args, "force"))
		/* what is not committed would be lost: keep the pool imported */
		ERR(c, ret,
		    "%s: final commit failed: %s; the pool stays imported (export -f drops "
		    "what is not committed)",
		    c->name, stor_strerror(ret));
	ret = stor_pool_export(c->pe->pool);
	if (ret < 0)
		log_err("pool %s: export: %s; writes since the last commit may be lost, and its "
			"labels may not say exported", c->name,
			stor_strerror(ret));
	reg_pool_remove(c->pe);
	c->pe = NULL;
	reg_save();
	admin_event(c, NULL, "pool %s: exported", c->name);
	return 0;
}

/* ---- pool import ---- */

/* Where an import looks: the request's "dirs" (-d), else lun_search. */
struct import_dirs {
	char *buf;        /* lun_search, split in place */
	const char **v;
	size_t n;
	int given;        /* from -d: a pool not found there is an error */
};

static void import_dirs_free(struct import_dirs *d)
{
	free(d->buf);
	free(d->v);
}

static int import_dirs(struct hcall *c, struct import_dirs *d)
{
	size_t n = 1;
	char *s, *tok;
	int ret;

	*d = (struct import_dirs){ 0 };
	if (json_object_get(c->args, "dirs")) {
		d->given = 1;
		ret = arg_strv(c, "dirs", &d->v, &d->n);
		for (size_t i = 0; ret == 0 && i < d->n; i++)
			if (!stor_search_dir_ok(d->v[i])) {
				snprintf(c->err, sizeof(c->err),
					 "import: directory '%.200s' is neither absolute nor rados:POOL",
					 d->v[i]);
				ret = -EINVAL;
			}
		return ret;
	}
	d->buf = strdup(reg_lun_search());
	for (const char *p = d->buf; p && *p; p++)
		n += *p == ':';
	d->v = d->buf ? calloc(n + 1, sizeof(*d->v)) : NULL;
	if (!d->v)
		return -ENOMEM;
	for (s = d->buf; (tok = strsep(&s, ":"));)
		if (tok[0])
			d->v[d->n++] = tok;
	return 0;
}

/* Is the pool of GUID @guid imported here? (registry lock held) */
static int imported_guid(uint64_t guid)
{
	for (struct pool_ent *pe = reg_pools(); pe; pe = pe->next) {
		struct stor_pool_stat st;

		if (pe->pool && stor_pool_stat(pe->pool, &st) == 0 && st.guid == guid)
			return 1;
	}
	return 0;
}

static int has_metadata(const char *name)
{
	struct stor_pool_opts o = reg_pool_opts(0);
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/pools/%s.mdb", o.state_dir, name);
	return access(path, F_OK) == 0;
}

static json_t *found_json(const struct stor_found_pool *sp)
{
	char guid[24], host[16];
	json_t *luns = json_array(), *missing = json_array(), *detached = json_array();

	snprintf(guid, sizeof(guid), "%016llx", (unsigned long long)sp->guid);
	snprintf(host, sizeof(host), "%08x", (unsigned)sp->hostid);
	for (unsigned i = 0; i < sp->nluns; i++) {
		if (sp->paths[i])
			json_array_append_new(luns, json_pack("{s:i,s:s}", "index", (int)i, "path",
							      sp->paths[i]));
		else if (sp->detached[i])
			json_array_append_new(detached, json_integer((json_int_t)i));
		else
			json_array_append_new(missing, json_integer((json_int_t)i));
	}
	return json_pack("{s:s,s:s,s:s,s:s,s:b,s:i,s:i,s:b,s:b,s:b,s:o,s:o,s:o}", "name", sp->name,
			 "guid", guid, "state",
			 sp->state == STOR_FOUND_EXPORTED ? "EXPORTED" : "ACTIVE", "hostid", host,
			 "this_host", sp->hostid == stor_hostid(), "nluns", (int)sp->nluns, "found",
			 (int)sp->nfound, "complete", sp->complete, "degraded", sp->degraded, "metadata",
			 has_metadata(sp->name), "luns", luns, "missing", missing, "detached",
			 detached);
}

/* What an import by searching looks for, and what it found. */
struct import_search {
	const char *name;  /* NULL: any */
	uint64_t guid;     /* 0: any */
	json_t *found;     /* listing: the pools not imported */
	int imported;      /* the pool looked for is imported already */
	unsigned matches;
	json_t *match;     /* the last match, as found_json() */
	char **paths;      /* its LUN paths (NULL where missing) */
	unsigned npaths;
};

static void search_paths_free(struct import_search *s)
{
	for (unsigned i = 0; i < s->npaths; i++)
		free(s->paths[i]);
	free(s->paths);
	s->paths = NULL;
	s->npaths = 0;
}

static int found_one(const struct stor_found_pool *sp, void *arg)
{
	struct import_search *s = arg;
	int want = s->guid ? sp->guid == s->guid : s->name && !strcmp(sp->name, s->name);

	if (imported_guid(sp->guid)) {
		s->imported |= want;
		return 0;
	}
	if (s->found) {
		json_array_append_new(s->found, found_json(sp));
		return 0;
	}
	if (!want)
		return 0;
	s->matches++;
	json_decref(s->match);
	s->match = found_json(sp);
	search_paths_free(s);
	s->paths = calloc(sp->nluns, sizeof(*s->paths));
	if (!s->paths)
		return -ENOMEM;
	s->npaths = sp->nluns;
	for (unsigned i = 0; i < sp->nluns; i++)
		if (sp->paths[i] && !(s->paths[i] = strdup(sp->paths[i])))
			return -ENOMEM;
	return 0;
}

static void importable_one(const char *name, void *arg)
{
	json_t *found = json_object_get(arg, "found");
	json_t *v;
	size_t i;

	/* a pool found on its LUNs is listed there, with its metadata noted */
	json_array_foreach(found, i, v)
		if (!strcmp(json_string_value(json_object_get(v, "name")), name))
			return;
	json_array_append_new(json_object_get(arg, "importable"), json_string(name));
}

static int import_list(struct hcall *c, struct import_dirs *d)
{
	struct import_search s = { .found = json_array() };
	int ret = stor_pool_search(d->v, d->n, found_one, &s);

	c->reply = json_pack("{s:o,s:o}", "importable", json_array(), "found", s.found);
	if (ret < 0)
		return fail(c, ret, "search", NULL);
	/* with -d, only what is there (zpool import -d) */
	if (!d->given)
		reg_importable(importable_one, c->reply);
	return 0;
}

/* The missing LUNs of @match for the refusal of an incomplete pool. */
static void missing_text(json_t *match, char *buf, size_t len)
{
	json_t *v;
	size_t i, at = 0;

	buf[0] = '\0';
	json_array_foreach(json_object_get(match, "missing"), i, v)
		if (at < len)
			at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? ", " : "",
					       (long long)json_integer_value(v));
}

/* What an import reply tells besides the name: what the LUNs' metadata
 * needed (rebuilt, replayed, repaired) and the replay's size and time. */
static void import_says(json_t *reply, const struct pool_ent *pe)
{
	struct stor_pool_stat st;

	if (stor_pool_stat(pe->pool, &st) == 0 && st.meta_log[0])
		json_object_set_new(reply, "metadata", json_string(st.meta_log));
	if (pe->replayed.records_total)
		json_object_set_new(reply, "replayed",
				    json_pack("{s:b,s:I,s:I,s:f}", "rebuild", pe->replayed.rebuild,
					      "records", (json_int_t)pe->replayed.records,
					      "bytes", (json_int_t)pe->replayed.bytes, "seconds",
					      pe->replay_secs));
}

static int h_pool_import(struct hcall *c)
{
	const char *guid_s = jstr(c->args, "guid"), *new_name = jstr(c->args, "new_name");
	struct import_search s = { .name = c->name };
	struct stor_pool_opts o = reg_pool_opts(0);
	struct import_dirs d;
	const char *name = c->name;
	struct pool_ent *pe;
	char what[64];
	int ret, was_listed;

	ret = import_dirs(c, &d);
	if (ret < 0)
		goto out;
	if (guid_s) {
		char *end;

		errno = 0;
		s.guid = strtoull(guid_s, &end, 16);
		if (errno || end == guid_s || *end || !s.guid) {
			snprintf(c->err, sizeof(c->err), "import: '%.64s' is not a pool GUID", guid_s);
			ret = -EINVAL;
			goto out;
		}
	}
	if (!c->name && !guid_s) {
		ret = new_name ? -EINVAL : import_list(c, &d);
		if (new_name)
			snprintf(c->err, sizeof(c->err), "import: a new name needs the pool to rename");
		goto out;
	}
	/* the dispatcher checked "name"; the new name is ours to check */
	if (new_name && !proto_name_valid(new_name, 1)) {
		snprintf(c->err, sizeof(c->err), "'%.64s': invalid pool name", new_name);
		ret = STOR_EBADNAME;
		goto out;
	}
	if (new_name && reg_pool_of(new_name)) {
		snprintf(c->err, sizeof(c->err), "%s: pool already exists", new_name);
		ret = -EEXIST;
		goto out;
	}
	snprintf(what, sizeof(what), "%s", c->name ? c->name : guid_s);
	ret = d.n ? stor_pool_search(d.v, d.n, found_one, &s) : 0;
	if (ret < 0) {
		ret = fail(c, ret, "search", NULL);
		goto out;
	}
	if (s.matches > 1) {
		snprintf(c->err, sizeof(c->err),
			 "%s: %u pools of that name found; import one by its GUID (see 'coffer pool "
			 "import')",
			 what, s.matches);
		ret = -EEXIST;
		goto out;
	}
	if (s.matches == 0 && s.imported) {
		snprintf(c->err, sizeof(c->err), "%s: pool is already imported", what);
		ret = -EEXIST;
		goto out;
	}
	if (s.matches == 0 && (d.given || guid_s)) {
		snprintf(c->err, sizeof(c->err), "%s: no such pool found%s%s", what,
			 d.given ? " in the directories given" : "",
			 d.given ? "" : " by searching lun_search");
		ret = -ENOENT;
		goto out;
	}
	if (s.matches) {
		name = json_string_value(json_object_get(s.match, "name"));
		if (!proto_name_valid(name, 1)) {
			snprintf(c->err, sizeof(c->err), "%s: its labels name it '%.64s', not a valid "
				 "pool name", what, name);
			ret = STOR_EBADNAME;
			goto out;
		}
		if (!json_is_true(json_object_get(s.match, "complete")) &&
		    !json_is_true(json_object_get(s.match, "degraded"))) {
			char miss[256];

			missing_text(s.match, miss, sizeof(miss));
			snprintf(c->err, sizeof(c->err),
				 "%s: LUN %s of %lld not found; add the directory that holds it "
				 "(-d)",
				 what, miss,
				 (long long)json_integer_value(json_object_get(s.match, "nluns")));
			ret = -ENOENT;
			goto out;
		}
		o.lun_paths = (const char *const *)s.paths;
		o.nlun_paths = s.npaths;
		c->pe = reg_pool_of(name); /* a GUID names the pool only now */
	}
	o.force = jtrue(c->args, "force");
	o.new_name = new_name && strcmp(new_name, name) ? new_name : NULL;
	if (c->pe && c->pe->pool) {
		snprintf(c->err, sizeof(c->err), "%s: pool is already imported", name);
		ret = -EEXIST;
		goto out;
	}
	was_listed = c->pe != NULL;
	if (c->pe && !o.new_name) {
		/* a faulted pool: try again */
		reg_pool_remove(c->pe);
		c->pe = NULL;
	}
	/* a pool that never imported is not remembered; a faulted one stays
	 * (under its old name, when the import was to rename it) */
	if (!(pe = reg_pool_import(name, &o, was_listed && !o.new_name, &ret)) || ret < 0) {
		if (ret == STOR_EHOSTID)
			snprintf(c->err, sizeof(c->err), "%s: %s", name, stor_pool_last_error());
		else
			ret = fail(c, ret, "import", stor_pool_last_error());
		goto out;
	}
	if (c->pe) {
		reg_pool_remove(c->pe); /* the faulted entry of the old name */
		c->pe = NULL;
	}
	reg_save();
	if (o.new_name)
		admin_event(c, o.new_name, "pool %s: imported as %s", name, o.new_name);
	else
		admin_event(c, name, "pool %s: imported%s", name,
			    s.matches ? " from the LUNs found by searching" : "");
	c->reply = json_pack("{s:s}", "name", o.new_name ? o.new_name : name);
	import_says(c->reply, pe);
out:
	json_decref(s.match);
	search_paths_free(&s);
	import_dirs_free(&d);
	return ret;
}

static int h_pool_destroy(struct hcall *c)
{
	struct stor_pool_opts o = reg_pool_opts(0);
	int ret = 0;

	/* a pool that is not imported can be destroyed as well */
	if (c->pe) {
		ret = pool_revoke(c);
		if (ret == 0)
			ret = pool_busy(c);
		if (ret < 0)
			return ret;
		stor_pool_close(c->pe->pool);
		reg_pool_remove(c->pe);
		c->pe = NULL;
		reg_save();
	}
	ret = stor_pool_destroy(c->name, &o);
	if (ret < 0)
		return fail(c, ret, "destroy", NULL);
	admin_event(c, NULL, "pool %s: destroyed", c->name);
	return 0;
}

/* The first hint a bad property of @props has, for the error of a create. */
static const char *props_hint(const char **props, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (prop_hint(props[i]))
			return prop_hint(props[i]);
	return NULL;
}

static int h_ds_create(struct hcall *c)
{
	struct stor_key_material key = { 0 };
	struct stor_ds_opts o = { 0 };
	const char **props = NULL;
	uint8_t *kbuf = NULL;
	size_t nprops;
	uint64_t v;
	int have_key, ret;

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
		snprintf(c->err, sizeof(c->err),
			 "%s: volsize must be at least one record (%u bytes)", c->name,
			 o.recordsize ? o.recordsize : STOR_RECSIZE_DEFAULT);
		ret = -EINVAL;
		goto out;
	}
	o.props = props;
	o.nprops = nprops;
	o.key = have_key ? &key : NULL;
	ret = stor_ds_create(c->pool, c->name, &o, NULL);
	if (ret < 0) {
		fail(c, ret, "create",
		     ret == -EBUSY || ret == STOR_ENOSPC ? stor_pool_last_error()
		     : ret == STOR_EBADPROP		 ? props_hint(props, nprops)
							 : NULL);
		goto out;
	}
	admin_event(c, NULL, "dataset %s: created", c->name);
	c->reply = json_pack("{s:s}", "name", c->name);
out:
	key_free(kbuf, &key);
	free(props);
	return ret;
}

/* "name" the new dataset, "origin" the snapshot (DATASET@SNAP of its pool), "props". */
static int h_clone(struct hcall *c)
{
	const char *origin = jstr(c->args, "origin");
	struct stor_ds_opts o = { 0 };
	const char **props = NULL;
	size_t nprops;
	int ret;

	if (!origin || !strchr(origin, '@') || stor_name_check(origin, STOR_NAME_SNAPSHOT) < 0)
		ERR(c, STOR_EBADNAME, "%s: the origin of a clone is DATASET@SNAP", c->name);
	ret = arg_strv(c, "props", &props, &nprops);
	if (ret < 0)
		return ret;
	o.props = props;
	o.nprops = nprops;
	ret = stor_ds_clone(c->pool, origin, c->name, &o);
	if (ret < 0)
		fail(c, ret, "clone", ret == STOR_EBADPROP ? props_hint(props, nprops) : NULL);
	free(props);
	if (ret < 0)
		return ret;
	admin_event(c, NULL, "dataset %s: cloned from %s", c->name, origin);
	c->reply = json_pack("{s:s}", "name", c->name);
	return 0;
}

static int h_promote(struct hcall *c)
{
	int ret = stor_ds_promote(c->pool, c->name);

	if (ret < 0)
		return fail(c, ret, "promote", NULL);
	admin_event(c, NULL, "dataset %s: promoted", c->name);
	return 0;
}

/* What a rename moves, for the handles on it (reg_named_users): a dataset
 * with what is below it and their snapshots; a snapshot, with -r the same
 * snapshot of every descendant. */
struct moving {
	const char *name;
	int recursive;
};

static int moving_name(const char *n, const void *arg)
{
	const struct moving *m = arg;
	const char *at = strchr(m->name, '@'), *nat;
	size_t len = at ? (size_t)(at - m->name) : strlen(m->name);

	if (strncmp(n, m->name, len))
		return 0;
	if (!at)
		return n[len] == '\0' || n[len] == '/' || n[len] == '@';
	if (!strcmp(n, m->name))
		return 1;
	nat = strchr(n, '@');
	return m->recursive && n[len] == '/' && nat && !strcmp(nat, at);
}

struct roots_walk {
	struct stor_pool *pool;
	const char *from, *to;
	char *err;
	size_t errlen;
};

/* roots.c: a clear dataset may not move to where a listed root covers it
 * (its open would be refused), and a listed root may not move from the name
 * the list gives it unless the list names its new name too. */
static int roots_one(const char *n, void *arg)
{
	struct roots_walk *w = arg;
	size_t flen = strlen(w->from);
	char newname[PROTO_NAME_MAX + 1];
	struct stor_prop_value v;
	const char *cover;

	if (strncmp(n, w->from, flen) || (n[flen] != '\0' && n[flen] != '/'))
		return 0;
	if ((size_t)snprintf(newname, sizeof(newname), "%s%s", w->to, n + flen) >= sizeof(newname))
		return 0; /* libstore refuses the length */
	for (size_t i = 0; i < roots_count(); i++) {
		const char *r = roots_at(i);

		if (!strcmp(r, n) && !roots_cover(newname)) {
			snprintf(w->err, w->errlen,
				 "%s is listed as an encryption root in %s, which would then name "
				 "nothing: list %s there too, restart cofferd, then rename",
				 n, roots_path(), newname);
			return -EPERM;
		}
	}
	cover = roots_cover(newname);
	if (cover && (stor_ds_get(w->pool, n, "encryption", &v) < 0 || !strcmp(v.value, "off"))) {
		snprintf(w->err, w->errlen,
			 "%s is not encrypted, and %s lists %s, which would cover it as %s, as an "
			 "encryption root: it would not open there",
			 n, roots_path(), cover, newname);
		return -EPERM;
	}
	return 0;
}

/* "name" the dataset or snapshot, "to" its new name (a snapshot: DATASET@NEW
 * of the same dataset), "recursive" (-r: the snapshot of each descendant),
 * "parents" (-p), "force" (-f: revoke the handles on what moves). */
static int h_ds_rename(struct hcall *c)
{
	const char *to = jstr(c->args, "to");
	struct moving m = { c->name, jtrue(c->args, "recursive") };
	unsigned fl = (m.recursive ? STOR_RECURSIVE : 0) |
		      (jtrue(c->args, "parents") ? STOR_RENAME_PARENTS : 0);
	char users[sizeof(c->err) - 200];
	int n, ret;

	if (!to || !to[0] || strlen(to) > PROTO_NAME_MAX)
		ERR(c, STOR_EBADNAME, "%s: rename: give the new name (at most %u bytes)", c->name,
		    PROTO_NAME_MAX);
	/* who holds it, by name, before libstore finds it busy */
	n = reg_named_users(c->pe, moving_name, &m, 0, c->peer->uid, users, sizeof(users));
	if (n < 0)
		return fail(c, n, "finding its users", NULL);
	if (n > 0 && !jtrue(c->args, "force"))
		ERR(c, -EBUSY,
		    "%s is busy: %s; close those handles (nbd-client -d for an export), or give "
		    "-f to close them",
		    c->name, users);
	if (n > 0) {
		n = reg_named_users(c->pe, moving_name, &m, 1, c->peer->uid, NULL, 0);
		if (n < 0)
			return fail(c, n, "closing its handles", NULL);
	}
	if (!strchr(c->name, '@') && roots_count()) {
		struct roots_walk w = { c->pool, c->name, to, c->err, sizeof(c->err) };

		ret = stor_ds_list(c->pool, roots_one, &w);
		if (ret < 0)
			return c->err[0] ? ret : fail(c, ret, "rename", NULL);
	}
	ret = stor_ds_rename(c->pool, c->name, to, fl);
	if (ret < 0)
		return fail(c, ret, "rename", NULL);
	admin_event(c, NULL, "%s %s: renamed to %s", strchr(c->name, '@') ? "snapshot" : "dataset",
		    c->name, to);
	c->reply = json_pack("{s:s}", "name", to);
	return 0;
}

static int plan_one(const char *name, void *ctx)
{
	return json_array_append_new(ctx, json_string(name)) ? -ENOMEM : 0;
}

static int h_ds_destroy(struct hcall *c)
{
	int force = jtrue(c->args, "force"), dry = jtrue(c->args, "dryrun");
	unsigned fl = (jtrue(c->args, "recursive") ? STOR_RECURSIVE : 0) |
		      (jtrue(c->args, "clones") ? STOR_RECURSIVE | STOR_DESTROY_CLONES : 0);
	json_t *names = NULL;
	uint64_t reclaim = 0;
	int ret;

	/* a dry run closes no handle: it refuses as the destroy would without
	 * -f, and with -f counts on their being closed */
	ret = dry && force ? 0 : no_handles(c, fl ? REG_DS_TREE : REG_DS_ONE, dry ? 0 : force, "");
	if (ret < 0)
		return ret;
	if (dry) {
		names = json_array();
		ret = names ? stor_destroy_plan(c->pool, c->name,
						fl | (force ? STOR_DESTROY_OPEN_OK : 0), plan_one,
						names, &reclaim)
			    : -ENOMEM;
	} else {
		ret = stor_ds_destroy(c->pool, c->name, fl);
	}
	if (ret < 0)
		json_decref(names);
	if (ret < 0 && stor_pool_last_error()[0]) /* snapshots, keys: libstore says why */
		return fail(c, ret, "destroy", stor_pool_last_error());
	if (ret < 0)
		return fail(c, ret, "destroy", ret == -EBUSY ? "it has children or is open" : NULL);
	if (dry) {
		c->reply = json_pack("{s:o, s:I}", "destroy", names, "reclaim", (json_int_t)reclaim);
		return c->reply ? 0 : -ENOMEM;
	}
	admin_event(c, NULL, "dataset %s: destroyed", c->name);
	return 0;
}

/* "name" and the "more" names, DATASET@SNAP each, all of one pool: one txg. */
static int h_snapshot(struct hcall *c)
{
	const char **more = NULL, **all = NULL;
	size_t n = 0, plen = strcspn(c->name, "/@");
	int ret;

	ret = arg_strv(c, "more", &more, &n);
	if (ret < 0)
		return ret;
	all = calloc(n + 2, sizeof(*all));
	if (!all) {
		free(more);
		return -ENOMEM;
	}
	all[0] = c->name;
	for (size_t i = 0; i < n; i++)
		all[i + 1] = more[i];
	for (size_t i = 0; i <= n && ret == 0; i++) {
		if (!strchr(all[i], '@') || strpbrk(all[i], "%,") ||
		    stor_name_check(all[i], STOR_NAME_SNAPSHOT) < 0) {
			snprintf(c->err, sizeof(c->err), "'%.64s': a snapshot is DATASET@NAME", all[i]);
			ret = STOR_EBADNAME;
		} else if (strncmp(all[i], c->name, plen) || !strchr("/@", all[i][plen])) {
			snprintf(c->err, sizeof(c->err), "%.64s: snapshots of one call are of one pool",
				 all[i]);
			ret = -EXDEV;
		}
	}
	if (ret == 0)
		ret = stor_snap_create(c->pool, all, n + 1,
				       jtrue(c->args, "recursive") ? STOR_RECURSIVE : 0);
	free(all);
	free(more);
	if (ret < 0 && !c->err[0])
		return fail(c, ret, "snapshot",
			    ret == STOR_ENOKEY || ret == -ENOENT ? stor_pool_last_error() : NULL);
	if (ret == 0)
		admin_event(c, NULL, "dataset %s: snapshot%s made", c->name, n ? "s" : "");
	return ret;
}

static int h_rollback(struct hcall *c)
{
	int ret;

	if (!strchr(c->name, '@'))
		ERR(c, STOR_EBADNAME, "%s: roll back to DATASET@SNAP", c->name);
	ret = stor_snap_rollback(c->pool, c->name, jtrue(c->args, "recursive") ? STOR_RECURSIVE : 0);
	if (ret < 0)
		return fail(c, ret, "rollback",
			    stor_pool_last_error()[0] ? stor_pool_last_error() : NULL);
	admin_event(c, NULL, "dataset %s: rolled back", c->name);
	return 0;
}

struct list_ctx {
	struct hcall *c;
	struct stor_pool *pool;
	const char *name;   /* NULL: all */
	int recursive;
	int snapshots;      /* the names are snapshots: match their dataset part */
	int openable;       /* only those the caller may open (the NBD export list) */
	const char **props; /* NULL: every property */
	size_t nprops;
	int sources;        /* each value as {value, source, inherited_from} (coffer list -j) */
	int cells;          /* the rows as cells after the reply (list_row), no objects */
	struct stor_prop_value *vals; /* nprops of them, for list_one */
	char **full;        /* nprops: user properties' values in full (list_one), else NULL */
	int user;           /* a user property is asked for: list_one for every row */
	json_t *out;
	size_t nrows;
	char *text;         /* with cells: the bytes of the rows so far */
	size_t len, cap;
	int nomem;
};

static json_t *prop_json(const struct stor_prop_value *v);

/* A property of a listed dataset into @props: its value, or with @sources all of prop_json. */
static void list_prop(json_t *props, const struct stor_prop_value *v, int sources)
{
	json_object_set_new(props, v->name, sources ? prop_json(v) : json_string(v->value));
}

struct prop_add_ctx {
	json_t *props;
	int sources;
};

static int prop_add(const struct stor_prop_value *v, void *arg)
{
	struct prop_add_ctx *pc = arg;

	list_prop(pc->props, v, pc->sources);
	return 0;
}

/* Is @name one the listing asked for: the named dataset (its snapshots), or under it with -r. */
static int list_wanted(const struct list_ctx *lc, const char *name)
{
	size_t n, len;

	if (!lc->name)
		return 1;
	n = strlen(lc->name);
	len = lc->snapshots ? strcspn(name, "@") : strlen(name);
	return (len == n && !strncmp(name, lc->name, n)) ||
	       (lc->recursive && !strncmp(name, lc->name, n) && name[n] == '/');
}

/* Append @s and its NUL to the cells of @lc. */
static void cell_add(struct list_ctx *lc, const char *s)
{
	size_t n = strlen(s) + 1;

	if (lc->cap - lc->len < n) {
		size_t cap = lc->cap ? lc->cap : 64 * 1024;
		char *t;

		while (cap - lc->len < n)
			cap *= 2;
		t = realloc(lc->text, cap);
		if (!t) {
			lc->nomem = 1;
			return;
		}
		lc->text = t;
		lc->cap = cap;
	}
	memcpy(lc->text + lc->len, s, n);
	lc->len += n;
}

/*
 * The row of dataset @name with the @nv values @v: an object {name, props},
 * or with "cells" its name and values as NUL-terminated strings after the
 * reply object (CMD_DATA). A listing of 10,000 datasets then builds, sends
 * and parses no JSON per value, which cost the daemon and coffer most of
 * its time; a value holds no NUL, so the cells need no escaping.
 */
static void list_row(struct list_ctx *lc, const char *name, const struct stor_prop_value *v,
		     size_t nv, char *const *full)
{
	json_t *props;

	lc->nrows++;
	if (lc->cells) {
		cell_add(lc, name);
		for (size_t i = 0; i < nv; i++)
			cell_add(lc, full && full[i] ? full[i] : v[i].value);
		return;
	}
	props = json_object();
	for (size_t i = 0; i < nv; i++) {
		/* a user property's name and value may not fit v[i]: the asked name, full[i] */
		const char *key = lc->props ? lc->props[i] : v[i].name;
		json_t *pv = lc->sources ? prop_json(&v[i]) : json_string(v[i].value);

		if (full && full[i] && lc->sources) {
			json_object_set_new(pv, "property", json_string(key));
			json_object_set_new(pv, "value", json_string(full[i]));
		} else if (full && full[i]) {
			json_decref(pv);
			pv = json_string(full[i]);
		}
		json_object_set_new(props, key, pv);
	}
	json_array_append_new(lc->out, json_pack("{s:s, s:o}", "name", name, "props", props));
}

/* stor_ds_list_props' callback: the pool's admin lock is held, nothing may call into it. */
static int list_values(const char *name, const struct stor_prop_value *v, size_t nv, void *arg)
{
	struct list_ctx *lc = arg;

	if (list_wanted(lc, name))
		list_row(lc, name, v, nv, NULL);
	return 0;
}

/* A user property into a stor_prop_value (name, source) and its whole value, malloc'd. */
struct uprop_ctx {
	struct stor_prop_value *v;
	char *full;
};

static int uprop_keep(const struct stor_uprop_value *u, void *arg)
{
	struct uprop_ctx *uc = arg;

	memset(uc->v, 0, sizeof(*uc->v));
	snprintf(uc->v->name, sizeof(uc->v->name), "%s", u->name);
	snprintf(uc->v->value, sizeof(uc->v->value), "%s", u->value);
	snprintf(uc->v->inherited_from, sizeof(uc->v->inherited_from), "%s", u->inherited_from);
	uc->v->source = u->source;
	free(uc->full);
	uc->full = strdup(u->value);
	return uc->full ? 0 : -ENOMEM;
}

/* One dataset or snapshot at a time: for snapshots, and for who may open what. */
static int list_one(const char *name, void *arg)
{
	struct list_ctx *lc = arg;
	struct prop_add_ctx pc = { .sources = lc->sources };

	if (!list_wanted(lc, name))
		return 0;
	if (lc->openable && !reg_may_open(lc->c->peer, lc->pool, name))
		return 0;
	if (!lc->props) {
		pc.props = json_object();
		stor_ds_get_all(lc->pool, name, prop_add, &pc);
		json_array_append_new(lc->out, json_pack("{s:s, s:o}", "name", name, "props",
							 pc.props));
		lc->nrows++;
		return 0;
	}
	for (size_t i = 0; i < lc->nprops; i++) {
		struct stor_prop_value v;

		free(lc->full[i]);
		lc->full[i] = NULL;
		if (prop_is_user(lc->props[i])) {
			struct uprop_ctx u = { .v = &v };
			int r = stor_ds_user_props(lc->pool, name, lc->props[i], uprop_keep, &u);

			if (r < 0) {
				memset(&v, 0, sizeof(v));
				snprintf(v.value, sizeof(v.value), "-");
				free(u.full);
				u.full = NULL;
				lc->nomem |= r == -ENOMEM;
			}
			lc->full[i] = u.full;
			lc->vals[i] = v;
			continue;
		}
		if (stor_ds_get(lc->pool, name, lc->props[i], &v) < 0) {
			memset(&v, 0, sizeof(v));
			snprintf(v.name, sizeof(v.name), "%s", lc->props[i]);
			snprintf(v.value, sizeof(v.value), "-");
			v.source = STOR_SRC_NONE;
		}
		lc->vals[i] = v;
	}
	list_row(lc, name, lc->vals, lc->nprops, lc->full);
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

static int uprop_append(const struct stor_uprop_value *v, void *arg)
{
	json_array_append_new(arg, json_pack("{s:s, s:s, s:s, s:s}", "property", v->name, "value",
					     v->value, "source", src_name(v->source),
					     "inherited_from", v->inherited_from));
	return 0;
}

/*
 * The roots of encryption_roots that are missing or clear (roots.c), for
 * load-key -a to name: [{name, problem}]. A root of a pool that is not
 * imported is missing too: its keys cannot be loaded.
 */
static json_t *roots_unmet(void)
{
	json_t *out = json_array();

	for (size_t i = 0; i < roots_count(); i++) {
		const char *r = roots_at(i);
		char pool[PROTO_NAME_MAX + 1];
		struct pool_ent *pe;
		struct stor_prop_value v;
		const char *problem = NULL;

		snprintf(pool, sizeof(pool), "%.*s", (int)strcspn(r, "/"), r);
		pe = reg_pool_of(pool);
		if (!pe || !pe->pool || stor_ds_get(pe->pool, r, "encryption", &v) < 0)
			problem = "missing";
		else if (!strcmp(v.value, "off"))
			problem = "clear";
		if (problem)
			json_array_append_new(out, json_pack("{s:s, s:s}", "name", r, "problem",
							     problem));
	}
	return out;
}

static int h_ds_list(struct hcall *c)
{
	struct list_ctx lc = { .c = c, .name = c->name };
	int ret;

	const char *type = jstr(c->args, "type");
	int volumes = 1, snapshots = 0, one_pass;

	lc.recursive = jtrue(c->args, "recursive");
	lc.openable = jtrue(c->args, "openable");
	lc.sources = jtrue(c->args, "sources");
	lc.cells = jtrue(c->args, "cells");
	/* zfs list -t: volume (the default), snapshot, all */
	if (type && !strcmp(type, "snapshot"))
		volumes = 0, snapshots = 1;
	else if (type && !strcmp(type, "all"))
		snapshots = 1;
	else if (type && strcmp(type, "volume"))
		ERR(c, -EINVAL, "list: type '%.32s' is not volume, snapshot or all", type);
	/* a named dataset of a faulted pool: say so, not "no such dataset" */
	if (c->name && c->pe && !c->pe->pool)
		ERR(c, STOR_EFAULTED, "%.*s: pool is faulted: %.200s", (int)strcspn(c->name, "/@"),
		    c->name, c->pe->error);
	ret = arg_strv(c, "props", &lc.props, &lc.nprops);
	if (ret < 0)
		return ret;
	lc.cells &= lc.props != NULL; /* a row's columns are the props asked for */
	lc.vals = calloc(lc.nprops ? lc.nprops : 1, sizeof(*lc.vals));
	lc.full = calloc(lc.nprops ? lc.nprops : 1, sizeof(*lc.full));
	if (!lc.vals || !lc.full) {
		free(lc.props);
		free(lc.vals);
		free(lc.full);
		return -ENOMEM;
	}
	for (size_t i = 0; i < lc.nprops; i++)
		lc.user |= prop_is_user(lc.props[i]);
	/* rows in one pass (list_values), unless each needs a check of its
	 * owner or a user property; snapshots' only when columns are asked for */
	one_pass = !lc.openable && !lc.user;
	lc.out = json_array();
	/* a named dataset is looked for in its pool only (c->pe, NULL if unknown) */
	for (struct pool_ent *pe = c->name ? c->pe : reg_pools(); pe;
	     pe = c->name ? NULL : pe->next) {
		if (!pe->pool)
			continue;
		lc.pool = pe->pool;
		lc.snapshots = 0;
		if (volumes && one_pass)
			ret = stor_ds_list_props(pe->pool, lc.props, lc.nprops, list_values, &lc);
		else if (volumes)
			ret = stor_ds_list(pe->pool, list_one, &lc);
		else
			ret = 0;
		lc.snapshots = 1;
		if (ret == 0 && snapshots && lc.props && one_pass)
			ret = stor_snap_list_props(pe->pool, lc.props, lc.nprops, list_values, &lc);
		else if (ret == 0 && snapshots)
			ret = stor_snap_list(pe->pool, list_one, &lc);
		if (ret < 0) {
			fail(c, ret, "list", NULL);
			break;
		}
	}
	for (size_t i = 0; i < lc.nprops; i++)
		free(lc.full[i]);
	free(lc.full);
	free(lc.props);
	free(lc.vals);
	if (ret >= 0 && lc.nomem)
		ret = -ENOMEM;
	if (ret >= 0 && c->name && lc.nrows == 0)
		ret = -ENOENT;
	if (ret < 0) {
		json_decref(lc.out);
		free(lc.text);
		return ret;
	}
	if (!lc.cells) {
		c->reply = json_pack("{s:o}", "datasets", lc.out);
		if (c->reply && !c->name && roots_count())
			json_object_set_new(c->reply, "roots", roots_unmet());
		return 0;
	}
	json_decref(lc.out);
	c->reply = json_pack("{s:I, s:I}", "rows", (json_int_t)lc.nrows, "columns",
			     (json_int_t)lc.nprops + 1);
	c->out_data = (uint8_t *)lc.text;
	c->out_len = lc.len;
	return 0;
}

static int h_ds_get(struct hcall *c)
{
	const char **props = NULL;
	json_t *a;
	size_t n;
	int ret;

	ret = arg_strv(c, "props", &props, &n);
	if (ret < 0)
		return ret;
	a = json_array();
	if (!props)
		ret = stor_ds_get_all(c->pool, c->name, prop_append, a);
	/* get all: the user properties after the table's, by name, as zfs get all */
	if (!props && ret == 0)
		ret = stor_ds_user_props(c->pool, c->name, NULL, uprop_append, a);
	for (size_t i = 0; ret == 0 && props && i < n; i++) {
		struct stor_prop_value v;

		if (prop_is_user(props[i])) {
			ret = stor_ds_user_props(c->pool, c->name, props[i], uprop_append, a);
			if (ret < 0 && ret != -ENOENT)
				fail(c, ret, props[i], NULL);
			continue;
		}
		ret = stor_ds_get(c->pool, c->name, props[i], &v);
		if (ret == 0)
			json_array_append_new(a, prop_json(&v));
		else if (ret != -ENOENT)
			fail(c, ret, props[i], ret == STOR_EBADPROP ? prop_hint(props[i]) : NULL);
	}
	free(props);
	if (ret < 0) {
		json_decref(a);
		return ret;
	}
	c->reply = json_pack("{s:s, s:o}", "name", c->name, "props", a);
	return 0;
}

/*
 * set with "props": ["PROP=VALUE", ...]: all or none (stor_ds_set_many),
 * and a refusal names the assignment refused and says none was made.
 */
static int ds_set_many(struct hcall *c, json_t *arr)
{
	size_t n = json_array_size(arr), i;
	const char **props = calloc(n + 1, sizeof(*props)), **values = calloc(n + 1, sizeof(*values));
	char **copies = calloc(n + 1, sizeof(*copies));
	json_t *v;
	int ret = 0, bad = -1;

	if (!props || !values || !copies) {
		ret = -ENOMEM;
		goto out;
	}
	json_array_foreach(arr, i, v) {
		const char *s = json_string_value(v);
		char *eq;

		if (!s || !(copies[i] = strdup(s))) {
			ret = s ? -ENOMEM : -EINVAL;
			snprintf(c->err, sizeof(c->err), "%s: set: give PROP=VALUE strings", c->name);
			goto out;
		}
		eq = strchr(copies[i], '=');
		if (!eq || eq == copies[i]) {
			snprintf(c->err, sizeof(c->err), "%s: set: '%s' is no PROP=VALUE; nothing was set",
				 c->name, s);
			ret = STOR_EBADPROP;
			goto out;
		}
		*eq = '\0';
		props[i] = copies[i];
		values[i] = eq + 1;
	}
	ret = stor_ds_set_many(c->pool, c->name, n, props, values, &bad);
	if (ret < 0 && bad >= 0) {
		const char *why = stor_pool_last_error(), *hint = prop_hint(props[bad]);

		if (!why[0])
			why = hint ? hint : stor_strerror(ret);
		/* a long value is cut: the reason must fit */
		snprintf(c->err, sizeof(c->err), "%s: set %.64s=%.40s%s: %s; nothing was set",
			 c->name, props[bad], values[bad], strlen(values[bad]) > 40 ? "..." : "",
			 why);
	} else if (ret < 0) {
		ret = fail(c, ret, "set", NULL);
	}
	for (size_t k = 0; ret == 0 && k < n; k++)
		admin_event(c, NULL, "dataset %s: %s set to %s", c->name, props[k], values[k]);
out:
	for (size_t k = 0; copies && k < n; k++)
		free(copies[k]);
	free(copies);
	free(props);
	free(values);
	return ret;
}

static int h_ds_set(struct hcall *c)
{
	const char *prop = jstr(c->args, "prop"), *value = jstr(c->args, "value");
	json_t *many = json_object_get(c->args, "props");
	int ret;

	if (many) {
		if (!json_is_array(many) || !json_array_size(many) ||
		    json_array_size(many) > PROP_COUNT + 1024)
			ERR(c, STOR_EBADPROP, "%s: set: give one PROP=VALUE or more", c->name);
		return ds_set_many(c, many);
	}

	/* user properties have bounds of their own (prop_names.h), checked by libstore */
	if (!prop || !value ||
	    (!prop_is_user(prop) && (strlen(prop) >= 32 || strlen(value) >= 256)))
		ERR(c, STOR_EBADPROP, "%s: give a property and a value", c->name);
	ret = stor_ds_set(c->pool, c->name, prop, value);
	if (ret < 0)
		return fail(c, ret, "set",
			    ret == STOR_EBADPROP  ? prop_hint(prop)
			    : ret == STOR_ENOSPC ? stor_pool_last_error()
						 : NULL);
	admin_event(c, NULL, "dataset %s: %s set to %s", c->name, prop, value);
	return 0;
}

static int h_ds_inherit(struct hcall *c)
{
	const char *prop = jstr(c->args, "prop");
	int ret;

	if (!prop)
		ERR(c, STOR_EBADPROP, "%s: give a property", c->name);
	ret = stor_ds_inherit(c->pool, c->name, prop);
	if (ret < 0)
		return fail(c, ret, "inherit", NULL);
	admin_event(c, NULL, "dataset %s: %s inherited", c->name, prop);
	return 0;
}

/* The table checked that the peer may open it (CMD_OWNER); the dispatcher gives the handle. */
static int h_ds_open(struct hcall *c)
{
	struct stor_prop_value v;
	struct stor_ds *ds = NULL;
	const char *root = roots_cover(c->name);
	int ret = stor_ds_open(c->pool, c->name, &ds);

	if (ret < 0)
		return fail(c, ret, "open", NULL);
	/* roots.c: a dataset the operator listed as encrypted that the metadata
	 * calls clear would take its writes in plaintext */
	if (root && (stor_ds_get(c->pool, c->name, "encryption", &v) < 0 ||
		     !strcmp(v.value, "off"))) {
		stor_ds_close(ds);
		ERR(c, STOR_ECORRUPT,
		    "%s: clear by its metadata, but %s lists %s as an encryption root: not "
		    "opened (the metadata was changed, or the list is out of date)",
		    c->name, roots_path(), root);
	}
	c->opened = ds;
	c->opened_pe = c->pe;
	reg_pool_ref(c->pe);
	c->reply = json_pack("{s:I, s:I}", "volsize", (json_int_t)stor_ds_volsize(ds),
			     "recordsize", (json_int_t)stor_ds_recordsize(ds));
	/* a block-device export refuses a dataset whose records cannot be read */
	if (c->reply && stor_ds_get(c->pool, c->name, "keystatus", &v) == 0)
		json_object_set_new(c->reply, "keystatus", json_string(v.value));
	return 0;
}

/* Runs on the loop thread (no CMD_BLOCKING), which owns the handle tables. */
static int h_ds_close(struct hcall *c)
{
	json_t *h = json_object_get(c->args, "handle");

	if (!json_is_integer(h) || json_integer_value(h) < 0 ||
	    json_integer_value(h) > UINT32_MAX)
		ERR(c, -EBADF, "ds_close: give a handle");
	if (reg_handle_close(c->client, (uint32_t)json_integer_value(h)) < 0)
		ERR(c, -EBADF, "ds_close: handle %lld is not open",
		    (long long)json_integer_value(h));
	return 0;
}

static int h_key_load(struct hcall *c)
{
	struct stor_key_material key = { 0 };
	uint8_t *kbuf = NULL;
	int have, ret;

	ret = arg_key(c, &kbuf, &key, &have);
	if (ret < 0)
		return ret;
	if (!have)
		ERR(c, -EINVAL, "%s: no key material given", c->name);
	ret = stor_key_load(c->pool, c->name, &key, jtrue(c->args, "noop") ? STOR_KEY_NOOP : 0);
	key_free(kbuf, &key);
	if (ret == -EEXIST)
		ERR(c, ret, "%s: key already loaded", c->name);
	if (ret < 0)
		return fail(c, ret, NULL,
			    ret == STOR_EAUTH || ret == STOR_ECORRUPT ? stor_pool_last_error()
								      : NULL);
	return 0; /* libstore's key.load event says it */
}

static int h_key_unload(struct hcall *c)
{
	/* every request on a handle would fail with "key is not loaded" */
	int force = jtrue(c->args, "force");
	int ret;

	ret = no_handles(c, REG_DS_KEY, force, "unload-key: ");
	if (ret < 0)
		return ret;
	ret = stor_key_unload(c->pool, c->name, force ? STOR_FORCE : 0);
	if (ret < 0)
		return fail(c, ret, "unload-key", ret == -EBUSY ? "the dataset is open" : NULL);
	return 0; /* libstore's key.unload event says it */
}

static int h_key_change(struct hcall *c)
{
	struct stor_key_material key = { 0 };
	const char **props = NULL;
	uint8_t *kbuf = NULL;
	size_t n;
	int have, ret;

	if (jtrue(c->args, "inherit")) {
		/* change-key -i: no new key, the parent's root wraps */
		ret = stor_key_inherit(c->pool, c->name);
		if (ret < 0)
			return fail(c, ret, "change-key -i", NULL);
		admin_event(c, NULL, "dataset %s: key now inherited from its parent's encryption root", c->name);
		return 0;
	}
	ret = arg_strv(c, "props", &props, &n);
	if (ret == 0)
		ret = arg_key(c, &kbuf, &key, &have);
	if (ret == 0)
		ret = stor_key_change(c->pool, c->name, props, n, have ? &key : NULL);
	key_free(kbuf, &key);
	free(props);
	if (ret < 0)
		return c->err[0] ? ret : fail(c, ret, "change-key", NULL);
	admin_event(c, NULL, "dataset %s: key changed", c->name);
	return 0;
}

/*
 * Start or resume the rekey of an encrypted dataset at "rate" bytes per
 * second (0: no limit; absent: PROTO_REKEY_RATE), or "pause" or "stop" it;
 * with "recursive" each encrypted dataset below it too, with "scrub_free"
 * the pool's free space written over before it ends.
 * libstore says what it refuses and why (a clear dataset, a key not loaded,
 * one being received, one running, none to pause) in stor_pool_last_error().
 */
static int h_rekey(struct hcall *c)
{
	int what = jtrue(c->args, "stop")    ? STOR_REKEY_STOP
		   : jtrue(c->args, "pause") ? STOR_REKEY_PAUSE
					     : STOR_REKEY_START;
	json_t *r = json_object_get(c->args, "rate");
	uint64_t rate = PROTO_REKEY_RATE;
	int ret;

	if (r && (!json_is_integer(r) || json_integer_value(r) < 0))
		ERR(c, -EINVAL, "%s: rekey: 'rate' is bytes per second, 0 for no limit", c->name);
	if (r)
		rate = (uint64_t)json_integer_value(r);
	if (jtrue(c->args, "recursive"))
		what |= STOR_REKEY_RECURSIVE;
	if (jtrue(c->args, "scrub_free"))
		what |= STOR_REKEY_SCRUB_FREE;
	ret = stor_rekey(c->pool, c->name, what, rate);
	if (ret < 0)
		return fail(c, ret, jtrue(c->args, "stop")    ? "rekey -s"
				    : jtrue(c->args, "pause") ? "rekey -p"
							      : "rekey",
			    NULL);
	/* libstore's rekey.start event says a start; a pause or stop has none */
	if (jtrue(c->args, "stop") || jtrue(c->args, "pause"))
		admin_event(c, NULL, "dataset %s: rekey %s", c->name,
			    jtrue(c->args, "pause") ? "paused" : "stopped");
	return 0;
}

/*
 * Encrypt a clear dataset in place: "props" (encryption, keyformat,
 * keylocation, pbkdf2iters), the new key as key_change takes it, "rate"
 * and "scrub_free" as rekey's; on an encrypted one, "props" of encryption
 * alone and no key: a change of its suite. libstore says what it refuses
 * and why.
 */
static int h_ds_encrypt(struct hcall *c)
{
	struct stor_key_material key = { 0 };
	json_t *r = json_object_get(c->args, "rate");
	uint64_t rate = PROTO_REKEY_RATE;
	const char **props = NULL;
	uint8_t *kbuf = NULL;
	size_t n;
	int have, ret;

	if (r && (!json_is_integer(r) || json_integer_value(r) < 0))
		ERR(c, -EINVAL, "%s: encrypt: 'rate' is bytes per second, 0 for no limit", c->name);
	if (r)
		rate = (uint64_t)json_integer_value(r);
	ret = arg_strv(c, "props", &props, &n);
	if (ret == 0)
		ret = arg_key(c, &kbuf, &key, &have);
	if (ret == 0)
		ret = stor_ds_encrypt(c->pool, c->name, props, n, have ? &key : NULL, rate,
				      jtrue(c->args, "scrub_free") ? STOR_REKEY_SCRUB_FREE : 0);
	key_free(kbuf, &key);
	free(props);
	if (ret < 0)
		return c->err[0] ? ret : fail(c, ret, "encrypt", stor_pool_last_error());
	admin_event(c, NULL, "dataset %s: being encrypted in place", c->name);
	return 0;
}

/*
 * The CA certificates of key_https_ca, for the client that fetches a
 * keylocation=https:// key: the client fetches (it reads every key, and the
 * daemon's unit has no network), the daemon's configuration says whom to
 * trust. The bytes go, not the path, so a client with another filesystem
 * view (a container, another mount namespace) gets the same anchors. {} when
 * unset: the client then uses the system's store. Read per call, so a
 * renewed CA file needs no restart.
 */
#define KEY_HTTPS_CA_MAX (512u << 10)

static int h_key_https_ca(struct hcall *c)
{
	const char *path = reg_key_https_ca();
	char *pem = NULL;
	size_t n = 0;
	FILE *f;

	if (!path[0])
		return 0;
	f = fopen(path, "re");
	if (!f)
		ERR(c, -EIO, "key_https_ca %s: %s", path, strerror(errno));
	pem = malloc(KEY_HTTPS_CA_MAX + 1);
	if (pem)
		n = fread(pem, 1, KEY_HTTPS_CA_MAX + 1, f);
	fclose(f);
	if (!pem)
		return -ENOMEM;
	if (n > KEY_HTTPS_CA_MAX || !memmem(pem, n, "-----BEGIN CERTIFICATE-----", 27)) {
		free(pem);
		ERR(c, -EIO, "key_https_ca %s: %s", path,
		    n > KEY_HTTPS_CA_MAX ? "larger than 512K" : "holds no PEM certificate");
	}
	c->reply = json_pack("{s:s%}", "pem", pem, n);
	free(pem);
	if (!c->reply)
		ERR(c, -EIO, "key_https_ca %s: not a text file", path);
	return 0;
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

#define STAT(f) \
	json_integer((json_int_t)atomic_load_explicit(&daemon_stats.f, memory_order_relaxed))

static json_t *daemon_io_json(void)
{
	json_t *io = json_object();

	json_object_set_new(io, "reads", STAT(reads));
	json_object_set_new(io, "writes", STAT(writes));
	json_object_set_new(io, "flushes", STAT(flushes));
	json_object_set_new(io, "discards", STAT(discards));
	json_object_set_new(io, "maps", STAT(maps));
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
	json_object_set_new(io, "ring_reads", STAT(ring_reads));
	json_object_set_new(io, "inflight_peak", STAT(inflight_peak));
	return io;
}

/* The cipher's bursts: {"open_bursts": [n of 1, of 2-3, ...], "seal_bursts": [...]}. */
static json_t *bursts_json(void)
{
	struct stor_crypt_bursts b;
	json_t *open = json_array(), *seal = json_array();

	stor_crypt_bursts(&b);
	for (unsigned i = 0; i < STOR_BURST_BUCKETS; i++) {
		json_array_append_new(open, json_integer((json_int_t)b.open[i]));
		json_array_append_new(seal, json_integer((json_int_t)b.seal[i]));
	}
	return json_pack("{s:o, s:o}", "open_bursts", open, "seal_bursts", seal);
}

static int h_stats(struct hcall *c)
{
	json_t *pa;
	int per_ds = jtrue(c->args, "datasets");
	struct stor_cache_stats cs;

	/* {"prometheus": true}: the exposition text GET /metrics serves */
	if (jtrue(c->args, "prometheus")) {
		size_t len;
		char *text = metrics_render(&len);

		if (!text)
			return -ENOMEM;
		c->reply = json_pack("{s:s%}", "text", text, len);
		free(text);
		return c->reply ? 0 : -ENOMEM;
	}
	pa = json_array();

	for (struct pool_ent *pe = reg_pools(); pe; pe = pe->next) {
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
	stor_cache_stats(&cs);
	c->reply = json_pack("{s:o, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}}", "io",
			     daemon_io_json(), "pools", pa, "cache", "capacity",
			     (json_int_t)cs.capacity, "bytes", (json_int_t)cs.bytes, "entries",
			     (json_int_t)cs.entries, "hits", (json_int_t)cs.hits, "misses",
			     (json_int_t)cs.misses, "inserts", (json_int_t)cs.inserts, "evictions",
			     (json_int_t)cs.evictions);
	json_object_set_new(c->reply, "crypto", bursts_json());
	/* key hygiene of the process: 0 and 0 unless configured or limited otherwise */
	json_object_set_new(c->reply, "process",
			    json_pack("{s:i, s:I}", "dumpable", prctl(PR_GET_DUMPABLE, 0, 0, 0, 0),
				      "key_pages_unlocked",
				      (json_int_t)stor_key_pages_unlocked()));
	/* {"name": DATASET}: that dataset's counters too */
	if (c->name) {
		struct stor_io_stats st;
		int ret = stor_ds_io_stats(c->pool, c->name, &st);

		if (ret < 0)
			return -ENOENT; /* the dataset's is the only failure it has */
		json_object_set_new(c->reply, "dataset", io_stats_json(&st));
	}
	return 0;
}

/* ---- the handler column of the table ---- */

typedef int (*handler_fn)(struct hcall *c);

static const handler_fn handlers[] = {
#define XX(num, NAME, str, fn, fl, minb, maxb) [num] = (fn),
	PROTO_CMDS(XX)
#undef XX
};

int handlers_run(struct hcall *c)
{
	unsigned op = c->cmd->op;
	handler_fn fn = op < sizeof(handlers) / sizeof(handlers[0]) ? handlers[op] : NULL;
	int ret;

	stor_clear_error();
	ret = fn ? fn(c) : -EPROTO;

	if (ret > 0)
		ret = 0;
	if (ret == 0 && !c->reply)
		c->reply = json_object();
	return ret;
}
