// SPDX-License-Identifier: MIT
/*
 * E2E: the relations between datasets (children, snapshots, clones) under
 * every order of clone, promote, destroy -R and destroy -r, against a model
 * of what zfs destroy defines: -r takes a dataset's descendants and all
 * their snapshots, -R also every clone of those snapshots and what that
 * clone's destroy takes, recursively. After a promote a clone made under
 * its origin is a child of the dataset that is now its clone, a loop the
 * daemon must walk without recursing. Each op's success is the model's,
 * the daemon answers a ping after each, the listing is the model's, the
 * pool passes `pool check` and imports again from its LUNs. Clear and
 * encrypted (aes-256-ccm, a raw key file), the clone a child or a sibling.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "client.h"
#include "daemon.h"

static struct tdaemon td;
static char out[1 << 20];
static struct coffer_conn *conn;

static void setup(void)
{
	tdaemon_setup_lun_dir(&td);
}

static void teardown(void)
{
	coffer_close(conn);
	conn = NULL;
	tdaemon_teardown(&td);
}

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* ---- the model ---- */

#define MAXDS 4
#define MAXSNAP 2

struct mds {
	char name[64];
	int alive;
	int origin; /* a snapshot index, -1: none */
};

struct msnap {
	int owner; /* a dataset index */
	int alive;
	int order; /* creation order: promote takes those up to the origin's */
	char name[16];
};

struct model {
	struct mds d[MAXDS];
	struct msnap s[MAXSNAP];
	int nd, ns;
	const char *top; /* the dataset every tree hangs from: never destroyed */
};

static int m_ds(const struct model *m, const char *name)
{
	for (int i = 0; i < m->nd; i++)
		if (m->d[i].alive && !strcmp(m->d[i].name, name))
			return i;
	return -1;
}

static int m_snap(const struct model *m, const char *full)
{
	const char *at = strchr(full, '@');

	for (int i = 0; at && i < m->ns; i++) {
		const struct mds *o = &m->d[m->s[i].owner];

		if (m->s[i].alive && strlen(o->name) == (size_t)(at - full) &&
		    !strncmp(o->name, full, (size_t)(at - full)) && !strcmp(m->s[i].name, at + 1))
			return i;
	}
	return -1;
}

/* Is @c a descendant of @p (by name)? */
static int m_below(const char *c, const char *p)
{
	size_t n = strlen(p);

	return !strncmp(c, p, n) && c[n] == '/';
}

static void m_add_ds(struct model *m, const char *name, int origin)
{
	cr_assert_lt(m->nd, MAXDS);
	m->d[m->nd] = (struct mds){ .alive = 1, .origin = origin };
	snprintf(m->d[m->nd].name, sizeof(m->d[m->nd].name), "%s", name);
	m->nd++;
}

static void m_add_snap(struct model *m, int owner, const char *name)
{
	cr_assert_lt(m->ns, MAXSNAP);
	m->s[m->ns] = (struct msnap){ .owner = owner, .alive = 1, .order = m->ns };
	snprintf(m->s[m->ns].name, sizeof(m->s[m->ns].name), "%s", name);
	m->ns++;
}

static int m_clone(struct model *m, const char *origin, const char *name)
{
	int s = m_snap(m, origin);
	char parent[64];

	snprintf(parent, sizeof(parent), "%s", name);
	*strrchr(parent, '/') = '\0';
	if (s < 0 || m_ds(m, name) >= 0 || (strcmp(parent, m->top) && m_ds(m, parent) < 0))
		return -1;
	m_add_ds(m, name, s);
	return 0;
}

/* zfs promote: the clone takes its origin's snapshots up to its origin. */
static int m_promote(struct model *m, const char *name)
{
	int c = m_ds(m, name), S, D;

	if (c < 0 || m->d[c].origin < 0)
		return -1;
	S = m->d[c].origin;
	D = m->s[S].owner;
	for (int i = 0; i < m->ns; i++)
		for (int j = 0; j < m->ns; j++)
			if (m->s[i].alive && m->s[i].owner == D && m->s[i].order <= m->s[S].order &&
			    m->s[j].alive && m->s[j].owner == c && !strcmp(m->s[i].name, m->s[j].name))
				return -1;
	for (int i = 0; i < m->ns; i++)
		if (m->s[i].alive && m->s[i].owner == D && m->s[i].order <= m->s[S].order)
			m->s[i].owner = c;
	m->d[c].origin = m->d[D].origin;
	m->d[D].origin = S;
	return 0;
}

/*
 * What destroying @doomed takes (zfs destroy), to a fixed point: with -r
 * the descendants, with -R the clones of their snapshots too; -1: refused
 * (children or snapshots and no -r, a clone left behind and no -R).
 */
static int m_closure(struct model *m, int doomed[MAXDS], int r, int R)
{
	for (int changed = 1; changed;) {
		changed = 0;
		for (int i = 0; i < m->nd; i++) {
			if (!doomed[i])
				continue;
			for (int j = 0; j < m->nd; j++) {
				if (!m->d[j].alive || doomed[j])
					continue;
				if (m_below(m->d[j].name, m->d[i].name)) {
					if (!r)
						return -1;
					doomed[j] = changed = 1;
				} else if (R && m->d[j].origin >= 0 &&
					   m->s[m->d[j].origin].owner == i) {
					doomed[j] = changed = 1;
				}
			}
			for (int s = 0; s < m->ns && !r; s++)
				if (m->s[s].alive && m->s[s].owner == i)
					return -1;
		}
	}
	for (int j = 0; j < m->nd; j++)
		if (m->d[j].alive && !doomed[j] && m->d[j].origin >= 0 &&
		    doomed[m->s[m->d[j].origin].owner])
			return -1;
	return 0;
}

static void m_kill(struct model *m, const int doomed[MAXDS])
{
	for (int i = 0; i < m->nd; i++) {
		if (!doomed[i])
			continue;
		m->d[i].alive = 0;
		for (int s = 0; s < m->ns; s++)
			if (m->s[s].owner == i)
				m->s[s].alive = 0;
	}
}

static int m_destroy(struct model *m, const char *target, int r, int R)
{
	int doomed[MAXDS] = { 0 }, any = 0;

	if (strchr(target, '@')) {
		int s = m_snap(m, target);

		if (s < 0)
			return -1;
		/* its clones first, with all they take */
		for (int j = 0; j < m->nd; j++)
			if (m->d[j].alive && m->d[j].origin == s)
				doomed[j] = any = 1;
		if (any && (!R || m_closure(m, doomed, 1, 1) < 0))
			return -1;
		m_kill(m, doomed);
		m->s[s].alive = 0; /* with its dataset, or now */
		return 0;
	}
	if ((any = m_ds(m, target)) < 0)
		return -1;
	doomed[any] = 1;
	if (m_closure(m, doomed, r || R, R) < 0)
		return -1;
	m_kill(m, doomed);
	return 0;
}

/* The model's `list -H -t all -o name,origin` lines, appended to @buf. */
static void m_render(const struct model *m, char *buf, size_t cap)
{
	size_t n = strlen(buf);

	for (int i = 0; i < m->nd; i++) {
		const struct mds *d = &m->d[i];

		if (!d->alive)
			continue;
		if (d->origin >= 0)
			n += (size_t)snprintf(buf + n, cap - n, "%s\t%s@%s\n", d->name,
					      m->d[m->s[d->origin].owner].name,
					      m->s[d->origin].name);
		else
			n += (size_t)snprintf(buf + n, cap - n, "%s\t-\n", d->name);
	}
	for (int i = 0; i < m->ns; i++)
		if (m->s[i].alive)
			n += (size_t)snprintf(buf + n, cap - n, "%s@%s\t-\n",
					      m->d[m->s[i].owner].name, m->s[i].name);
}

/* ---- the sequences ---- */

enum op_kind { OP_CLONE, OP_PROMOTE, OP_DESTROY_R, OP_DESTROY_r };

static const char *const kind_name[] = { "clone", "promote", "destroy -R", "destroy -r" };

struct step {
	enum op_kind kind;
	char arg[96], arg2[96];
};

static int rpc(const char *cmd, json_t *args, char *err, size_t errlen)
{
	json_t *reply = NULL;
	int ret = coffer_call(conn, cmd, args, &reply, err, errlen);

	json_decref(args);
	json_decref(reply);
	return ret;
}

static void alive(const char *after)
{
	char err[512];

	cr_assert_eq(rpc("ping", NULL, err, sizeof(err)), 0, "after %s: the daemon died: %s\n%s",
		     after, err, tdaemon_log(&td));
}

static void write_some(const char *name, char fill, uint64_t off)
{
	static char buf[65536];
	int h = coffer_ds_open(conn, name, NULL, NULL);

	cr_assert_geq(h, 0, "open %s: %d", name, h);
	memset(buf, fill, sizeof(buf));
	cr_assert_eq(coffer_write(conn, h, off, buf, sizeof(buf)), 0);
	cr_assert_eq(coffer_ds_close(conn, h), 0);
}

/* Sort the lines of @s in place (a listing, whatever order the daemon keeps). */
static int cmp_line(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *sorted(const char *s)
{
	char *dup = strdup(s), **v = calloc(strlen(s) + 1, sizeof(*v)), *res;
	size_t n = 0, len = 0;

	cr_assert(dup && v);
	for (char *t = strtok(dup, "\n"); t; t = strtok(NULL, "\n"))
		v[n++] = t;
	qsort(v, n, sizeof(*v), cmp_line);
	res = calloc(strlen(s) + 2, 1);
	cr_assert(res);
	for (size_t i = 0; i < n; i++)
		len += (size_t)sprintf(res + len, "%s\n", v[i]);
	free(dup);
	free(v);
	return res;
}

static void listing_is(const char *want, const char *when)
{
	char *a, *b;

	COF_OK(NULL, "list -H -t all -o name,origin");
	a = sorted(out);
	b = sorted(want);
	cr_assert_str_eq(a, b, "%s: the listing is not what zfs would leave", when);
	free(a);
	free(b);
}

/*
 * Every order of the four kinds of op, each with each of its targets:
 * destroy -R of the origin, the clone or the origin snapshot, destroy -r of
 * the origin or the clone. Each sequence runs on a tree of its own, BASE/aN
 * with aN@s: @child clones it as BASE/aN/c, else as BASE/bN.
 */
static void every_order(int encrypted, int child)
{
	static const int perms[24][4] = {
		{ 0, 1, 2, 3 }, { 0, 1, 3, 2 }, { 0, 2, 1, 3 }, { 0, 2, 3, 1 }, { 0, 3, 1, 2 },
		{ 0, 3, 2, 1 }, { 1, 0, 2, 3 }, { 1, 0, 3, 2 }, { 1, 2, 0, 3 }, { 1, 2, 3, 0 },
		{ 1, 3, 0, 2 }, { 1, 3, 2, 0 }, { 2, 0, 1, 3 }, { 2, 0, 3, 1 }, { 2, 1, 0, 3 },
		{ 2, 1, 3, 0 }, { 2, 3, 0, 1 }, { 2, 3, 1, 0 }, { 3, 0, 1, 2 }, { 3, 0, 2, 1 },
		{ 3, 1, 0, 2 }, { 3, 1, 2, 0 }, { 3, 2, 0, 1 }, { 3, 2, 1, 0 },
	};
	static char want[1 << 18], what[1 << 16];
	static char err[1024];
	const char *base = encrypted ? "t/e" : "t";
	int seq = 0;

	COF_OK(NULL, "pool create -s 256M t %s/l/0", td.dir);
	snprintf(want, sizeof(want), "t\t-\n");
	if (encrypted) {
		char key[32];

		for (size_t i = 0; i < sizeof(key); i++)
			key[i] = (char)(i * 7 + 1);
		tdaemon_file(&td, "key", key, sizeof(key));
		COF_OK(NULL,
		       "create -s -V 1M -o encryption=aes-256-ccm -o keyformat=raw "
		       "-o keylocation=file://%s/key t/e",
		       td.dir);
		strcat(want, "t/e\t-\n");
	}
	cr_assert_eq(coffer_connect(td.sock, &conn), 0);
	for (int p = 0; p < 24; p++)
		for (int rt = 0; rt < 3; rt++)
			for (int lt = 0; lt < 2; lt++, seq++) {
				struct model m = { .top = base };
				char a[40], k[48], as[48];
				struct step st[4];

				snprintf(a, sizeof(a), "%s/a%d", base, seq);
				snprintf(as, sizeof(as), "%s@s", a);
				if (child)
					snprintf(k, sizeof(k), "%s/c", a);
				else
					snprintf(k, sizeof(k), "%s/b%d", base, seq);
				cr_assert_eq(rpc("ds_create",
						 json_pack("{s:s, s:I, s:[s]}", "name", a, "volsize",
							   (json_int_t)(1 << 20), "props",
							   "refreservation=none"),
						 err, sizeof(err)),
					     0, "create %s: %s", a, err);
				write_some(a, 'a', 0);
				cr_assert_eq(rpc("snapshot", json_pack("{s:s}", "name", as), err,
						 sizeof(err)),
					     0, "snapshot %s: %s", as, err);
				write_some(a, 'b', 65536); /* the head differs from the snapshot */
				m_add_ds(&m, a, -1);
				m_add_snap(&m, 0, "s");
				st[0] = (struct step){ .kind = OP_CLONE };
				snprintf(st[0].arg, sizeof(st[0].arg), "%s", as);
				snprintf(st[0].arg2, sizeof(st[0].arg2), "%s", k);
				st[1] = (struct step){ .kind = OP_PROMOTE };
				snprintf(st[1].arg, sizeof(st[1].arg), "%s", k);
				st[2] = (struct step){ .kind = OP_DESTROY_R };
				snprintf(st[2].arg, sizeof(st[2].arg), "%s",
					 rt == 0 ? a : rt == 1 ? k : as);
				st[3] = (struct step){ .kind = OP_DESTROY_r };
				snprintf(st[3].arg, sizeof(st[3].arg), "%s", lt == 0 ? a : k);
				what[0] = '\0';
				for (int i = 0; i < 4; i++) {
					const struct step *x = &st[perms[p][i]];
					size_t wl = strlen(what);
					int want_ok, got;

					snprintf(what + wl, sizeof(what) - wl, "%s%s %s%s%s",
						 i ? "; " : "", kind_name[x->kind], x->arg,
						 x->kind == OP_CLONE ? " " : "", x->arg2);
					err[0] = '\0';
					switch (x->kind) {
					case OP_CLONE:
						want_ok = m_clone(&m, x->arg, x->arg2) == 0;
						got = rpc("clone",
							  json_pack("{s:s, s:s, s:[]}", "name", x->arg2,
								    "origin", x->arg, "props"),
							  err, sizeof(err));
						break;
					case OP_PROMOTE:
						want_ok = m_promote(&m, x->arg) == 0;
						got = rpc("promote", json_pack("{s:s}", "name", x->arg),
							  err, sizeof(err));
						break;
					default:
						want_ok = m_destroy(&m, x->arg, 1,
								    x->kind == OP_DESTROY_R) == 0;
						got = rpc("ds_destroy",
							  json_pack("{s:s, s:b, s:b, s:b}", "name",
								    x->arg, "recursive", 1, "force", 0,
								    "clones", x->kind == OP_DESTROY_R),
							  err, sizeof(err));
						break;
					}
					alive(what);
					cr_assert_eq(got == 0, want_ok,
						     "%s: got %d (%s), zfs would %s\n%s", what, got, err,
						     want_ok ? "do it" : "refuse",
						     tdaemon_log(&td));
				}
				m_render(&m, want, sizeof(want));
			}
	listing_is(want, "after every order");
	COF_OK(NULL, "pool check t");
	cr_assert(strstr(out, "no errors"), "%s", out);
	coffer_close(conn);
	conn = NULL;
	COF_OK(NULL, "pool export t");
	COF_OK(NULL, "pool import -d %s/l t", td.dir);
	if (encrypted)
		COF_OK(NULL, "load-key t/e");
	listing_is(want, "after export and import");
	COF_OK(NULL, "pool check t");
	cr_assert(strstr(out, "no errors"), "%s", out);
}

TestSuite(lineage, .init = setup, .fini = teardown, .timeout = 900);

Test(lineage, every_order_of_clone_promote_and_destroy_with_a_child_clone)
{
	every_order(0, 1);
}

Test(lineage, every_order_of_clone_promote_and_destroy_with_a_sibling_clone)
{
	every_order(0, 0);
}

Test(lineage, every_order_of_clone_promote_and_destroy_encrypted_with_a_child_clone)
{
	every_order(1, 1);
}

Test(lineage, every_order_of_clone_promote_and_destroy_encrypted_with_a_sibling_clone)
{
	every_order(1, 0);
}

Test(lineage, destroy_R_of_a_promoted_child_clone_takes_both_in_one_go)
{
	COF_OK(NULL, "pool create -s 64M p %s/l/0", td.dir);
	COF_OK(NULL, "create -s -V 16M p/a");
	COF_OK(NULL, "snapshot p/a@s");
	COF_OK(NULL, "clone p/a@s p/a/c");
	COF_OK(NULL, "promote p/a/c");
	cr_assert_eq(cof(NULL, "destroy -r p/a/c"), 1, "the clone p/a is outside: %s", out);
	cr_assert(strstr(out, "dependent clones") && strstr(out, "-R"), "%s", out);
	COF_OK(NULL, "destroy -R p/a/c");
	COF_OK(NULL, "ping");
	COF_OK(NULL, "list -H -t all -o name");
	cr_assert_str_eq(out, "p\n");
	COF_OK(NULL, "pool check p");
	cr_assert(strstr(out, "no errors"), "%s", out);
}
