// SPDX-License-Identifier: MIT
/*
 * E2E: the dry runs and the all-or-nothing set, through the real coffer
 * and cofferd. send -n -v/-P estimates a stream from its block pointers:
 * the estimate is checked against the stream a real send writes, for a
 * full, an incremental, a -I package and a raw stream. destroy -n -v/-p
 * lists what a destroy would take and what it would free, with the
 * refusals of the real destroy, and changes nothing. set a=1 b=2 applies
 * all its assignments or none. Each refusal says why and changes nothing.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <criterion/criterion.h>

#include "client.h"
#include "daemon.h"

TDAEMON_FIXTURE(NULL)
static char out[65536];

TestSuite(dryrun, .init = setup, .fini = teardown, .timeout = 240);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* `coffer ARGS` fails and says @want. */
#define REFUSED(want, ...)                                                                  \
	do {                                                                                \
		int rc_ = cof(NULL, __VA_ARGS__);                                           \
		cr_assert_neq(rc_, 0, "exit 0, want a refusal: %s", out);                   \
		cr_assert(strstr(out, (want)), "'%s' lacks '%s'", out, (want));             \
	} while (0)

static const char pass[] = "correct horse battery\n";

static unsigned long long file_size(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "%s", path);
	return (unsigned long long)st.st_size;
}

/* The number after "@key\t" in @text (a -P line), or fail. */
static unsigned long long field(const char *text, const char *key)
{
	const char *at = strstr(text, key);

	cr_assert(at, "no '%s' in: %s", key, text);
	return strtoull(at + strlen(key), NULL, 10);
}

/* Write @len random bytes at @off of @ds. */
static void scribble(const char *ds, const char *off, size_t len)
{
	char f[4200];

	tdaemon_random_file(&td, "scribble", len, f, sizeof(f));
	COF_OK(f, "write %s -o %s", ds, off);
}

/* The real stream of `send ARGS` into a file: its size. */
static unsigned long long sent_size(const char *args)
{
	const char *path = tdaemon_path(&td, "stream");

	COF_OK(NULL, "send %s > '%s'", args, path);
	return file_size(path);
}

/* tank/p: 1 MiB of 8K records, random, @a; records overwritten and a run
 * discarded, @b; one more record, @c. */
static void three_snapshots(void)
{
	char f[4200];

	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o recordsize=8K tank/p");
	tdaemon_random_file(&td, "p", 1u << 20, f, sizeof(f));
	COF_OK(f, "write tank/p");
	COF_OK(NULL, "snapshot tank/p@a");
	scribble("tank/p", "128K", 64 << 10);
	scribble("tank/p", "1016K", 8 << 10);
	COF_OK(NULL, "discard tank/p -o 512K -l 96K");
	COF_OK(NULL, "snapshot tank/p@b");
	scribble("tank/p", "0", 8 << 10);
	COF_OK(NULL, "snapshot tank/p@c");
}

Test(dryrun, send_n_estimates_full_incremental_and_package_streams_exactly)
{
	unsigned long long est, real;

	three_snapshots();
	/* full: the lines of zfs send -nv */
	COF_OK(NULL, "send -n -v tank/p@a");
	cr_assert(strstr(out, "full send of tank/p@a estimated size is 1."), "%s", out);
	cr_assert(strstr(out, "\ntotal estimated size is 1."), "%s", out);
	COF_OK(NULL, "send -n -P tank/p@a");
	est = field(out, "full\ttank/p@a\t");
	cr_assert_eq(field(out, "\nsize\t"), est, "%s", out);
	real = sent_size("tank/p@a");
	cr_assert_eq(est, real, "full: estimated %llu, sent %llu", est, real);
	/* incremental: what changed, and a free */
	COF_OK(NULL, "send -n -v -i @a tank/p@b");
	cr_assert(strstr(out, "incremental send of tank/p@a to tank/p@b estimated size is "),
		  "%s", out);
	COF_OK(NULL, "send -n -P -i tank/p@a tank/p@b");
	est = field(out, "incremental\t@a\ttank/p@b\t");
	real = sent_size("-i @a tank/p@b");
	cr_assert_eq(est, real, "incremental: estimated %llu, sent %llu", est, real);
	cr_assert_lt(est, 200000ull, "only what changed: %llu", est);
	/* -I: a line per step, their sum */
	COF_OK(NULL, "send -n -P -I @a tank/p@c");
	cr_assert(strstr(out, "incremental\t@a\ttank/p@b\t"), "%s", out);
	cr_assert(strstr(out, "incremental\t@b\ttank/p@c\t"), "%s", out);
	est = field(out, "\nsize\t");
	real = sent_size("-I @a tank/p@c");
	cr_assert_eq(est, real, "package: estimated %llu, sent %llu", est, real);
	/* without -n: the estimate on stderr, the stream on stdout untouched */
	COF_OK(NULL, "send -v tank/p@a > '%s'", tdaemon_path(&td, "s.v"));
	cr_assert(strstr(out, "full send of tank/p@a estimated size is"), "%s", out);
	cr_assert_eq(file_size(tdaemon_path(&td, "s.v")), sent_size("tank/p@a"));
	COF_OK(NULL, "send -P tank/p@a > '%s'", tdaemon_path(&td, "s.p"));
	cr_assert_eq(field(out, "full\ttank/p@a\t"), file_size(tdaemon_path(&td, "s.p")), "%s",
		     out);
	/* -n alone: every check, nothing printed */
	COF_OK(NULL, "send -n -i @a tank/p@c");
	cr_assert_str_eq(out, "");
	/* a clone's full stream carries what it reads through its origin */
	COF_OK(NULL, "clone tank/p@a tank/q");
	scribble("tank/q", "64K", 16 << 10);
	COF_OK(NULL, "snapshot tank/q@x");
	COF_OK(NULL, "send -n -P tank/q@x");
	est = field(out, "full\ttank/q@x\t");
	real = sent_size("tank/q@x");
	cr_assert_eq(est, real, "clone: estimated %llu, sent %llu", est, real);
	cr_assert_gt(est, 1000000ull, "the origin's records too: %llu", est);
}

Test(dryrun, send_n_estimates_raw_streams_exactly)
{
	const char *key = tdaemon_file(&td, "pass", pass, sizeof(pass) - 1);
	unsigned long long est, real;
	char f[4200];

	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o recordsize=8K -o encryption=aes-256-ccm "
		     "-o keyformat=passphrase -o keylocation=file://%s -o pbkdf2iters=100000 "
		     "-o compression=zstd tank/e",
	       key);
	/* half compressible, half not: raw records of several stored sizes */
	{
		char *a = malloc(512 << 10);

		cr_assert_not_null(a);
		for (size_t i = 0; i < 512 << 10; i++)
			a[i] = (char)('a' + i % 7);
		COF_OK(tdaemon_file(&td, "a", a, 512 << 10), "write tank/e");
		free(a);
	}
	tdaemon_random_file(&td, "r", 512 << 10, f, sizeof(f));
	COF_OK(f, "write tank/e -o 512K");
	COF_OK(NULL, "snapshot tank/e@s1");
	scribble("tank/e", "64K", 24 << 10);
	COF_OK(NULL, "discard tank/e -o 800K -l 64K");
	COF_OK(NULL, "snapshot tank/e@s2");
	COF_OK(NULL, "unload-key tank/e");
	/* raw needs no key, for the estimate as for the stream */
	COF_OK(NULL, "send -n -P -w tank/e@s1");
	est = field(out, "full\ttank/e@s1\t");
	real = sent_size("-w tank/e@s1");
	cr_assert_eq(est, real, "raw: estimated %llu, sent %llu", est, real);
	cr_assert_lt(est, 800000ull, "the stored (compressed) sizes: %llu", est);
	COF_OK(NULL, "send -n -P -w -i @s1 tank/e@s2");
	est = field(out, "incremental\t@s1\ttank/e@s2\t");
	real = sent_size("-w -i @s1 tank/e@s2");
	cr_assert_eq(est, real, "raw incremental: estimated %llu, sent %llu", est, real);
	/* a plain one needs the key, dry or not, and says so alike */
	REFUSED("its key is not loaded; load it, or send it raw (-w)", "send -n -v tank/e@s1");
	REFUSED("its key is not loaded; load it, or send it raw (-w)",
		"send tank/e@s1 > '%s'", tdaemon_path(&td, "x"));
	COF_OK(NULL, "load-key tank/e");
	COF_OK(NULL, "send -n -P tank/e@s1");
	est = field(out, "full\ttank/e@s1\t");
	real = sent_size("tank/e@s1");
	cr_assert_eq(est, real, "plain of encrypted: estimated %llu, sent %llu", est, real);
}

Test(dryrun, send_n_refuses_what_send_refuses)
{
	three_snapshots();
	REFUSED("is not an earlier snapshot", "send -n -v -i @b tank/p@a");
	REFUSED("is not an earlier snapshot", "send -i @b tank/p@a > '%s'",
		tdaemon_path(&td, "x"));
	REFUSED("no such snapshot to send an incremental from", "send -n -i @zz tank/p@b");
	REFUSED("tank/p@nope", "send -n -v tank/p@nope");
	REFUSED("is no snapshot", "send -n tank/p");
	REFUSED("is not an earlier snapshot", "send -n -I @c tank/p@a");
	/* nothing changed: the snapshots are all there */
	COF_OK(NULL, "list -H -t snapshot -o name -r tank/p");
	cr_assert_str_eq(out, "tank/p@a\ntank/p@b\ntank/p@c\n");
}

/* The values of compression, sync and com.example:k of tank/x, one a line. */
static const char *three(void)
{
	COF_OK(NULL, "get -H -o value compression,sync,com.example:k tank/x");
	return out;
}

Test(dryrun, set_of_several_is_all_or_nothing_and_names_the_one_refused)
{
	char before[256];

	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/x");
	snprintf(before, sizeof(before), "%s", three());
	/* a bad value second: the first is not made */
	REFUSED("set sync=bogus: ", "set compression=zstd sync=bogus tank/x");
	cr_assert(strstr(out, "nothing was set"), "%s", out);
	cr_assert_str_eq(three(), before);
	/* a bad user property name, a read-only property, an unknown one */
	REFUSED("set com.example:K=1", "set compression=zstd com.example:K=1 tank/x");
	cr_assert(strstr(out, "nothing was set"), "%s", out);
	REFUSED("set used=1M", "set com.example:k=v used=1M tank/x");
	REFUSED("set nosuchprop=1", "set com.example:k=v nosuchprop=1 tank/x");
	/* the same property twice */
	REFUSED("sync is given twice", "set sync=always sync=disabled tank/x");
	cr_assert_str_eq(three(), before);
	/* refused only when made: a reservation the pool cannot promise puts
	 * back the ones made before it */
	REFUSED("set refreservation=1G", "set compression=zstd com.example:k=v refreservation=1G "
					 "tank/x");
	cr_assert(strstr(out, "nothing was set"), "%s", out);
	cr_assert_str_eq(three(), before);
	COF_OK(NULL, "get -H -o value refreservation tank/x");
	cr_assert_str_eq(out, "none\n");
	/* a malformed pair is refused before anything is sent */
	REFUSED("'=nonsense' is no PROP=VALUE", "set sync=always =nonsense tank/x");
	REFUSED("dataset does not exist", "set sync=always tank/none");
	cr_assert_str_eq(three(), before);
	/* all good: all made, and they stay after a restart */
	COF_OK(NULL, "set compression=zstd sync=always com.example:k=v tank/x");
	cr_assert_str_eq(three(), "zstd\nalways\nv\n");
	/* each sees the one before: a bigger volume, then its reservation */
	COF_OK(NULL, "set volsize=2M refreservation=auto tank/x");
	COF_OK(NULL, "get -H -p -o value volsize tank/x");
	cr_assert_str_eq(out, "2097152\n");
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	cr_assert_str_eq(three(), "zstd\nalways\nv\n");
	COF_OK(NULL, "get -H -p -o value volsize tank/x");
	cr_assert_str_eq(out, "2097152\n");
	COF_OK(NULL, "get -H -o value refreservation tank/x");
	cr_assert_str_neq(out, "none\n");
}

/* `coffer ARGS` and `coffer -n ARGS` (the dry run) both fail with the same text. */
static void same_refusal(const char *args, const char *want)
{
	static char real[sizeof(out)];

	cr_assert_neq(cof(NULL, "destroy %s", args), 0, "destroy %s went through: %s", args, out);
	memcpy(real, out, sizeof(out));
	cr_assert(strstr(real, want), "'%s' lacks '%s'", real, want);
	cr_assert_neq(cof(NULL, "destroy -n -v %s", args), 0, "destroy -n -v %s: %s", args, out);
	cr_assert_str_eq(out, real, "the dry run of 'destroy %s' refuses otherwise", args);
}

static const char *names(void)
{
	COF_OK(NULL, "list -H -t all -o name -r tank");
	return out;
}

static unsigned long long used_of(const char *name)
{
	COF_OK(NULL, "get -H -p -o value used %s", name);
	return strtoull(out, NULL, 10);
}

Test(dryrun, destroy_n_lists_what_goes_and_refuses_as_destroy_does)
{
	static char before[sizeof(out)];
	char f[4200];
	unsigned long long want;

	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o recordsize=8K tank/a");
	COF_OK(NULL, "create -s -V 1M -o recordsize=8K tank/a/b");
	tdaemon_random_file(&td, "d", 1u << 20, f, sizeof(f));
	COF_OK(f, "write tank/a");
	COF_OK(f, "write tank/a/b");
	COF_OK(NULL, "snapshot -r tank/a@s1");
	scribble("tank/a/b", "0", 256 << 10);
	COF_OK(NULL, "snapshot tank/a/b@s2");
	scribble("tank/a/b", "0", 128 << 10);
	COF_OK(NULL, "clone tank/a@s1 tank/c");
	scribble("tank/c", "0", 64 << 10);
	memcpy(before, names(), sizeof(out));

	/* every refusal of the destroy, word for word, and nothing gone */
	same_refusal("tank/a", "it has snapshots; use -r");
	same_refusal("-r tank/a", "snapshot has dependent clones (tank/c); use -R");
	same_refusal("tank/a@s1", "snapshot has dependent clones (tank/c); use -R");
	same_refusal("tank/nope", "does not exist");
	same_refusal("tank/a@nope", "does not exist");
	same_refusal("tank", "tank");
	cr_assert_str_eq(names(), before);

	/* -R: the clone, the children, every snapshot; children first */
	COF_OK(NULL, "destroy -n -v -R tank/a");
	{
		static const char want_lines[] = "would destroy tank/c\n"
						 "would destroy tank/a/b@s1\n"
						 "would destroy tank/a/b@s2\n"
						 "would destroy tank/a/b\n"
						 "would destroy tank/a@s1\n"
						 "would destroy tank/a\n"
						 "would reclaim ";

		cr_assert(!strncmp(out, want_lines, sizeof(want_lines) - 1), "%s", out);
		cr_assert(strchr(out + sizeof(want_lines) - 1, 'M'), "%s", out);
	}
	/* -p: what it frees is what the datasets use */
	want = used_of("tank/a") + used_of("tank/c");
	COF_OK(NULL, "destroy -n -p -R tank/a");
	cr_assert(strstr(out, "destroy\ttank/a\n"), "%s", out);
	cr_assert_eq(field(out, "reclaim\t"), want, "%s", out);
	/* -n alone says nothing */
	COF_OK(NULL, "destroy -n -R tank/a");
	cr_assert_str_eq(out, "");
	cr_assert_str_eq(names(), before);

	/* snapshots: one, a range, -r; what it frees is its used */
	want = used_of("tank/a/b@s1");
	COF_OK(NULL, "destroy -n -p tank/a/b@s1");
	cr_assert(!strncmp(out, "destroy\ttank/a/b@s1\nreclaim\t", 28), "%s", out);
	cr_assert_eq(field(out, "reclaim\t"), want, "%s", out);
	cr_assert_gt(want, 200000ull, "the records overwritten since: %llu", want);
	COF_OK(NULL, "destroy -n -v tank/a/b@%%");
	cr_assert(strstr(out, "would destroy tank/a/b@s1\nwould destroy tank/a/b@s2\n"), "%s",
		  out);
	/* -R implies -r: the children's @s1 too, after the clone */
	COF_OK(NULL, "destroy -n -v -R tank/a@s1");
	cr_assert(strstr(out, "would destroy tank/c\nwould destroy tank/a@s1\n"
			      "would destroy tank/a/b@s1\nwould reclaim"),
		  "%s", out);
	cr_assert_str_eq(names(), before);

	/* the real one does what the dry run said: -v says it first */
	COF_OK(NULL, "destroy -v -R tank/a");
	cr_assert(strstr(out, "will destroy tank/c\n") && strstr(out, "will destroy tank/a\n"),
		  "%s", out);
	COF_OK(NULL, "list -H -t all -o name -r tank");
	cr_assert_str_eq(out, "tank\n");
}

Test(dryrun, destroy_n_of_an_encrypted_snapshot_needs_the_key_as_destroy_does)
{
	const char *key = tdaemon_file(&td, "pass", pass, sizeof(pass) - 1);
	static char before[sizeof(out)];

	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o encryption=aes-256-ccm -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e",
	       key);
	scribble("tank/e", "0", 64 << 10);
	COF_OK(NULL, "snapshot tank/e@s1");
	scribble("tank/e", "0", 64 << 10);
	COF_OK(NULL, "snapshot tank/e@s2");
	COF_OK(NULL, "unload-key tank/e");
	memcpy(before, names(), sizeof(out));
	same_refusal("tank/e@s2", "the key of tank/e is not loaded");
	/* the oldest has no older one to hand on to: no key needed */
	COF_OK(NULL, "destroy -n -v tank/e@s1");
	cr_assert(strstr(out, "would destroy tank/e@s1\n"), "%s", out);
	cr_assert_str_eq(names(), before);
	COF_OK(NULL, "load-key tank/e");
	COF_OK(NULL, "destroy -n -v tank/e@s2");
	cr_assert(strstr(out, "would destroy tank/e@s2\n"), "%s", out);
	cr_assert_str_eq(names(), before);
}

Test(dryrun, destroy_n_of_an_open_dataset_refuses_without_f_and_closes_nothing_with_it)
{
	struct coffer_conn *c = NULL;
	uint64_t vol = 0;
	uint32_t rs = 0;
	int h;

	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
	COF_OK(NULL, "create -s -V 1M tank/a");
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	h = coffer_ds_open(c, "tank/a", &vol, &rs);
	cr_assert_geq(h, 0, "open: %d", h);
	same_refusal("tank/a", "dataset is open (1 handles)");
	/* -f: the destroy would close it; the dry run only counts on that */
	COF_OK(NULL, "destroy -n -v -f tank/a");
	cr_assert(strstr(out, "would destroy tank/a\n"), "%s", out);
	/* still open, still there: a second dry run without -f sees the handle */
	same_refusal("tank/a", "dataset is open (1 handles)");
	COF_OK(NULL, "list -H -o name tank/a");
	coffer_close(c);
	COF_OK(NULL, "destroy -n -v tank/a");
	cr_assert(strstr(out, "would destroy tank/a\n"), "%s", out);
}
