/* SPDX-License-Identifier: MIT */
/*
 * The daily verbs of an operator, through the real coffer and cofferd:
 * creation as a property (a date, epoch with -p, sortable), user
 * properties (module:property), rename, create -p, destroy -n -v, and
 * several names or assignments per call; each refusal says why and
 * changes nothing.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <criterion/criterion.h>

#include "daemon.h"

TDAEMON_FIXTURE(NULL)
static char out[65536];

TestSuite(verbs, .init = setup, .fini = teardown, .timeout = 240);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* `coffer ARGS` fails and says @want. */
#define REFUSED(want, ...)                                                                  \
	do {                                                                                \
		int rc_ = cof(NULL, __VA_ARGS__);                                           \
		cr_assert_neq(rc_, 0, "exit 0, want a refusal: %s", out);                   \
		cr_assert(strstr(out, (want)), "'%s' lacks '%s'", out, (want));               \
	} while (0)

static void pool(void)
{
	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
}

Test(verbs, creation_is_a_date_epoch_with_p_and_sorts_snapshots_by_time)
{
	time_t before = time(NULL), after;
	unsigned long long v;
	char *a, *b, *c;

	pool();
	COF_OK(NULL, "create -s -V 1M tank/vm");
	COF_OK(NULL, "snapshot tank/vm@b");
	COF_OK(NULL, "snapshot tank/vm@a");
	after = time(NULL);
	/* -p: seconds since the epoch, for a dataset and a snapshot */
	COF_OK(NULL, "list -H -p -o creation tank/vm");
	v = strtoull(out, NULL, 10);
	cr_assert(v >= (unsigned long long)before && v <= (unsigned long long)after, "%s", out);
	COF_OK(NULL, "get -H -p -o value creation tank/vm@a");
	v = strtoull(out, NULL, 10);
	cr_assert(v >= (unsigned long long)before && v <= (unsigned long long)after, "%s", out);
	/* without -p: a date as zfs prints it, "Mon Jan  6 14:05 2025" */
	COF_OK(NULL, "get -H -o value creation tank/vm");
	cr_assert(strlen(out) > 16 && strchr(out, ':') && !strncmp(out + strlen(out) - 5, "20", 2),
		  "not a date: %s", out);
	/* the retention idiom: snapshots by time, the name breaking ties as created */
	COF_OK(NULL, "list -H -t snapshot -o name -s createtxg -s creation tank/vm");
	a = strstr(out, "tank/vm@b");
	b = strstr(out, "tank/vm@a");
	cr_assert(a && b && a < b, "created order: %s", out);
	COF_OK(NULL, "list -H -t snapshot -o name,creation -s creation tank/vm");
	cr_assert(strstr(out, "tank/vm@a") && strstr(out, "tank/vm@b"), "%s", out);
	/* every dataset has it, the pool's root too, and get all shows it */
	COF_OK(NULL, "get -H -o property,source creation tank");
	cr_assert(strstr(out, "creation"), "%s", out);
	COF_OK(NULL, "get all tank/vm");
	c = strstr(out, "creation");
	cr_assert(c, "get all lacks creation: %s", out);
}

Test(verbs, creation_survives_a_restart)
{
	char first[64];

	pool();
	COF_OK(NULL, "create -s -V 1M tank/vm");
	COF_OK(NULL, "get -H -p -o value creation tank/vm");
	snprintf(first, sizeof(first), "%.63s", out);
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "get -H -p -o value creation tank/vm");
	cr_assert_str_eq(out, first);
}

/* The value column of `get -H -o value,source PROP DS`, and its source into @src. */
static const char *uprop(const char *prop, const char *ds, char *src, size_t len)
{
	char *tab;

	COF_OK(NULL, "get -H -o value,source %s %s", prop, ds);
	out[strcspn(out, "\n")] = '\0';
	tab = strchr(out, '\t');
	cr_assert(tab, "%s", out);
	*tab = '\0';
	snprintf(src, len, "%s", tab + 1);
	return out;
}

Test(verbs, user_properties_are_set_inherited_listed_and_survive_a_restart)
{
	char src[128], *big;

	pool();
	COF_OK(NULL, "create -s -V 1M tank/a");
	COF_OK(NULL, "create -s -V 1M tank/a/b");
	COF_OK(NULL, "snapshot tank/a/b@s");
	COF_OK(NULL, "set com.example:owner=alice tank/a");
	cr_assert_str_eq(uprop("com.example:owner", "tank/a", src, sizeof(src)), "alice");
	cr_assert_str_eq(src, "local");
	cr_assert_str_eq(uprop("com.example:owner", "tank/a/b", src, sizeof(src)), "alice");
	cr_assert_str_eq(src, "inherited from tank/a");
	cr_assert_str_eq(uprop("com.example:owner", "tank/a/b@s", src, sizeof(src)), "alice");
	cr_assert_str_eq(uprop("com.example:other", "tank/a/b", src, sizeof(src)), "-");
	/* get all: after the table's, with the source */
	COF_OK(NULL, "get all tank/a/b");
	cr_assert(strstr(out, "com.example:owner") && strstr(out, "inherited from tank/a"), "%s",
		  out);
	/* a column of list, sortable */
	COF_OK(NULL, "set com.example:owner=bob tank/a/b");
	COF_OK(NULL, "list -H -r -o name,com.example:owner -S com.example:owner tank/a");
	cr_assert_str_eq(out, "tank/a/b\tbob\ntank/a\talice\n");
	COF_OK(NULL, "list -j -o name,com.example:owner tank/a/b");
	cr_assert(strstr(out, "\"com.example:owner\"") && strstr(out, "bob"), "%s", out);
	COF_OK(NULL, "inherit com.example:owner tank/a/b");
	cr_assert_str_eq(uprop("com.example:owner", "tank/a/b", src, sizeof(src)), "alice");
	/* the longest value, whole in get and list */
	big = malloc(8192);
	memset(big, 'v', 8191);
	big[8191] = '\0';
	/* through a file: a command line of tdaemon_cofferf has less room */
	COF_OK(NULL, "set \"org.x:big=$(cat %s)\" tank/a", tdaemon_file(&td, "big", big, 8191));
	COF_OK(NULL, "list -H -o org.x:big tank/a/b");
	cr_assert_eq(strlen(out), 8192, "%zu", strlen(out));
	/* stored with the dataset */
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	cr_assert_str_eq(uprop("com.example:owner", "tank/a/b", src, sizeof(src)), "alice");
	COF_OK(NULL, "get -H -o value org.x:big tank/a");
	cr_assert_eq(strlen(out), 8192);
	/* one byte too many is refused */
	REFUSED("at most 8191 bytes", "set \"org.x:big=$(cat %s)w\" tank/a",
		tdaemon_file(&td, "big", big, 8191));
	free(big);
}

/* set and inherit take several datasets, as zfs: each is done in turn, one
 * that refuses is named, the others are still done, and the exit status is 1. */
Test(verbs, set_and_inherit_take_several_datasets_and_go_on_past_a_refusal)
{
	pool();
	COF_OK(NULL, "create -s -V 1M tank/a");
	COF_OK(NULL, "create -s -V 1M tank/b");
	COF_OK(NULL, "set compression=zstd com.example:tier=gold tank/a tank/b");
	COF_OK(NULL, "list -H -o name,compression,com.example:tier tank/a tank/b");
	cr_assert_str_eq(out, "tank/a\tzstd\tgold\ntank/b\tzstd\tgold\n", "%s", out);
	/* the missing one is named; the ones around it are set */
	REFUSED("tank/nope", "set com.example:tier=lead tank/a tank/nope tank/b");
	COF_OK(NULL, "list -H -o name,com.example:tier tank/a tank/b");
	cr_assert_str_eq(out, "tank/a\tlead\ntank/b\tlead\n", "%s", out);
	/* an assignment after a dataset is refused before anything is sent */
	REFUSED("give every PROP=VALUE first", "set com.example:tier=tin tank/a tank/b x:y=1");
	COF_OK(NULL, "get -H -o value com.example:tier tank/a");
	cr_assert_str_eq(out, "lead\n", "%s", out);
	COF_OK(NULL, "inherit com.example:tier tank/a tank/b");
	COF_OK(NULL, "list -H -o name,com.example:tier tank/a tank/b");
	cr_assert_str_eq(out, "tank/a\t-\ntank/b\t-\n", "%s", out);
	REFUSED("tank/nope", "inherit compression tank/nope tank/a");
	COF_OK(NULL, "get -H -o value,source compression tank/a");
	cr_assert(strstr(out, "\tdefault") || strstr(out, "\tinherited"), "%s", out);
}

/* destroy DS@a,c%d: a list of names and ranges, as zfs destroy takes it:
 * each snapshot once, all in one go or none. */
Test(verbs, destroy_takes_a_list_of_snapshots_and_ranges_all_or_none)
{
	pool();
	COF_OK(NULL, "create -s -V 1M tank/v");
	COF_OK(NULL, "snapshot tank/v@a tank/v@b tank/v@c tank/v@d tank/v@e");
	COF_OK(NULL, "destroy -n -p tank/v@a,c%%d,a");
	cr_assert_str_eq(strstr(out, "destroy\t"), out, "%s", out);
	cr_assert(strstr(out, "destroy\ttank/v@a\n") && strstr(out, "destroy\ttank/v@c\n") &&
		  strstr(out, "destroy\ttank/v@d\n") && !strstr(out, "tank/v@b") &&
		  !strstr(out, "tank/v@e"), "%s", out);
	/* one missing: none goes */
	REFUSED("tank/v@a,c,zz", "destroy tank/v@a,c,zz");
	REFUSED("names are letters", "destroy tank/v@a,,c");
	REFUSED("a snapshot is DATASET@NAME", "snapshot tank/v@x,y");
	COF_OK(NULL, "list -H -t snapshot -o name tank/v");
	cr_assert_str_eq(out, "tank/v@a\ntank/v@b\ntank/v@c\ntank/v@d\ntank/v@e\n", "%s", out);
	COF_OK(NULL, "destroy tank/v@a,c%%d,a");
	COF_OK(NULL, "list -H -t snapshot -o name tank/v");
	cr_assert_str_eq(out, "tank/v@b\ntank/v@e\n", "%s", out);
}

Test(verbs, user_property_names_and_values_that_break_the_rule_are_refused)
{
	char src[128];

	pool();
	COF_OK(NULL, "create -s -V 1M tank/a");
	REFUSED("not a user property name", "set 'Com.Example:x=1' tank/a");
	REFUSED("not a user property name", "set 'a/b:c=1' tank/a");
	REFUSED("not a user property name", "set 'a@b:c=1' tank/a");
	REFUSED("not a user property name", "set 'a%%b:c=1' tank/a");
	REFUSED("not a user property name", "set \"$(printf 'a:\\033x')=1\" tank/a");
	REFUSED("not a user property name", "set \"a:$(head -c 300 /dev/zero | tr '\\0' x)=1\" tank/a");
	REFUSED("control characters", "set \"a:b=$(printf 'x\\ty')\" tank/a");
	REFUSED("control characters", "set \"a:b=$(printf 'x\\033[2J')\" tank/a");
	REFUSED("not a user property name", "list -o 'A:B' tank/a");
	/* nothing was set */
	COF_OK(NULL, "get all tank/a");
	cr_assert(!strstr(out, "a:b") && !strstr(out, "a:c"), "%s", out);
	/* an encrypted dataset takes them without its key, and load-key still verifies */
	COF_OK(NULL, "create -s -V 1M -o encryption=on -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e",
	       tdaemon_file(&td, "pass", "correct horse battery\n", 22));
	COF_OK(NULL, "create -s -V 1M tank/e/c");
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "set com.example:tier=gold tank/e");
	COF_OK(NULL, "load-key tank/e");
	cr_assert_str_eq(uprop("com.example:tier", "tank/e/c", src, sizeof(src)), "gold");
	COF_OK(NULL, "get -H -o value keystatus tank/e/c");
	cr_assert_str_eq(out, "available\n");
}

Test(verbs, create_p_set_of_several_and_list_of_several)
{
	pool();
	/* create -p: the missing parents first, sparse */
	COF_OK(NULL, "create -p -s -V 1M tank/x/y/z");
	COF_OK(NULL, "list -H -r -o name,refreservation tank/x");
	cr_assert_str_eq(out, "tank/x\tnone\ntank/x/y\tnone\ntank/x/y/z\tnone\n");
	/* the parents there already: made no second time */
	COF_OK(NULL, "create -p -s -V 1M tank/x/y/w");
	cr_assert_neq(cof(NULL, "create -s -V 1M tank/q/r"), 0, "no parent, no -p: %s", out);
	/* set a=1 b=2 DS */
	COF_OK(NULL, "set compression=zstd com.example:k=v tank/x/y");
	COF_OK(NULL, "get -H -o value compression,com.example:k tank/x/y");
	cr_assert_str_eq(out, "zstd\nv\n");
	/* a malformed pair is refused before any is sent (a word without '=' is
	 * a dataset to set, as in zfs set) */
	cr_assert_neq(cof(NULL, "set sync=always =nonsense tank/x/y"), 0);
	cr_assert(strstr(out, "nothing was set"), "%s", out);
	COF_OK(NULL, "get -H -o value sync tank/x/y");
	cr_assert_str_eq(out, "standard\n");
	/* list A B */
	COF_OK(NULL, "list -H -o name tank/x/y/z tank/x");
	cr_assert_str_eq(out, "tank/x/y/z\ntank/x\n");
	COF_OK(NULL, "list -H -o name -s name tank/x/y/z tank/x");
	cr_assert_str_eq(out, "tank/x\ntank/x/y/z\n");
}
