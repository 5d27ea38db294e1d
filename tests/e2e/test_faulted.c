// SPDX-License-Identifier: MIT
/*
 * E2E: a faulted pool (a LUN of a pool without redundancy deleted or
 * truncated while the daemon was down): every pool and dataset verb either
 * works or says why, and the daemon lives on; export and destroy forget
 * the pool, and once the LUN is back it imports.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"

static struct tdaemon td;
static char out[65536];

static void setup(void)
{
	tdaemon_setup_lun_dir(&td);
}

static void teardown(void)
{
	tdaemon_teardown(&td);
}

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/*
 * Pool f on two LUNs (no redundancy) with a dataset and a snapshot; the
 * daemon stopped, LUN 1 deleted (or truncated), the daemon started: f is
 * listed FAULTED.
 */
static void faulted_pool(int truncate_it)
{
	char path[4200];

	COF_OK(NULL, "pool create -s 16M f %s/l/0 %s/l/1", td.dir, td.dir);
	COF_OK(NULL, "create -s -V 1M f/v");
	COF_OK(NULL, "snapshot f/v@s");
	tdaemon_stop_ok(&td);
	snprintf(path, sizeof(path), "%s/l/1", td.dir);
	if (truncate_it)
		cr_assert_eq(truncate(path, 0), 0);
	else
		cr_assert_eq(unlink(path), 0);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool list -H -o name,health f");
	cr_assert_str_eq(out, "f\tFAULTED\n");
	/* the operator is told what is wrong and what to do */
	COF_OK(NULL, "pool status -x");
	cr_assert(strstr(out, "  pool: f\n") && strstr(out, "status: The pool could not be opened") &&
			  strstr(out, "then run 'coffer pool import f'") && strstr(out, " error: "),
		  "%s", out);
}

/* Run coffer @args: success, or exit 1 with a message that says why; the daemon lives. */
static void verb(const char *args, const char *why)
{
	int st = cof(NULL, "%s", args);

	cr_assert(st == 0 || st == 1, "%s: exit %d: %s\n%s", args, st, out, tdaemon_log(&td));
	if (st == 1)
		cr_assert(out[0] && (!why || strstr(out, why)), "%s: '%s', not '%s'", args, out,
			  why);
	cr_assert_eq(cof(NULL, "ping"), 0, "after %s the daemon is gone\n%s", args,
		     tdaemon_log(&td));
}

static void every_verb(void)
{
	static const struct {
		const char *args, *why;
	} verbs[] = {
		{ "pool status f", NULL },
		{ "pool status", NULL },
		{ "pool list", NULL },
		{ "pool list f", NULL },
		{ "pool get all f", NULL },
		{ "pool iostat f", NULL },
		{ "pool iostat -v -l -q", NULL },
		{ "pool iostat -w f", NULL },
		{ "pool check f", "faulted" },
		{ "pool clear f", "faulted" },
		{ "pool scrub f", "faulted" },
		{ "pool offline f LUN0", "faulted" },
		{ "pool online f LUN0", "faulted" },
		{ "pool add f LUN9", "faulted" },
		{ "pool replace f LUN0 LUN8", "faulted" },
		{ "pool attach f LUN0 LUN7", "faulted" },
		{ "pool detach f LUN0", "faulted" },
		{ "pool import f", "not found" },
		{ "create -V 1M f/x", "faulted" },
		{ "destroy f/v", "faulted" },
		{ "destroy -r f/v", "faulted" },
		{ "destroy -R f/v", "faulted" },
		{ "destroy f/v@s", "faulted" },
		{ "clone f/v@s f/c", "faulted" },
		{ "promote f/v", "faulted" },
		{ "snapshot f/v@t", "faulted" },
		{ "rollback f/v@s", "faulted" },
		{ "list", NULL },
		{ "list -t all", NULL },
		{ "list f", "faulted" },
		{ "list -r -t all f/v", "faulted" },
		{ "get all f/v", "faulted" },
		{ "get all f/v@s", "faulted" },
		{ "set compression=off f/v", "faulted" },
		{ "inherit compression f/v", "faulted" },
		{ "load-key f/v", "faulted" },
		{ "load-key -a", NULL },
		{ "unload-key f/v", "faulted" },
		{ "unload-key -a", NULL },
		{ "change-key f/v", "faulted" },
		{ "send f/v@s > /dev/null", "faulted" },
		{ "receive f/r < /dev/null", NULL },
		{ "write f/v < /dev/null", "faulted" },
		{ "read f/v > /dev/null", "faulted" },
		{ "discard f/v", "faulted" },
		{ "flush f/v", "faulted" },
		{ "stats -d f/v 1 1", "faulted" },
		{ "stats 1 1", NULL },
	};
	char args[8400], *l;

	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++) {
		/* LUNn: a path in the LUN directory */
		snprintf(args, sizeof(args), "%s", verbs[i].args);
		while ((l = strstr(args, "LUN"))) {
			char rest[200];

			snprintf(rest, sizeof(rest), "%s", l + 4);
			snprintf(l, sizeof(args) - (size_t)(l - args), "%.1100s/l/%c%s", td.dir, l[3],
				 rest);
		}
		verb(args, verbs[i].why);
	}
}

TestSuite(faulted, .init = setup, .fini = teardown, .timeout = 300);

Test(faulted, every_verb_on_a_pool_with_a_deleted_lun_answers_and_export_forgets_it)
{
	faulted_pool(0);
	every_verb();
	/* nothing open to count: a row of "-" */
	COF_OK(NULL, "pool iostat -H f");
	cr_assert_str_eq(out, "f\t-\t-\t-\t-\t-\t-\n");
	verb("pool export f", NULL);
	COF_OK(NULL, "pool list -H -o name");
	cr_assert(!strstr(out, "f\n"), "exported, still listed: %s", out);
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	COF_OK(NULL, "pool list -H -o name");
	cr_assert(!strstr(out, "f\n"), "exported, listed after a restart: %s", out);
}

Test(faulted, every_verb_on_a_pool_with_a_truncated_lun_answers_and_destroy_forgets_it)
{
	faulted_pool(1);
	every_verb();
	verb("pool destroy f", NULL);
	COF_OK(NULL, "pool list -H -o name");
	cr_assert(!strstr(out, "f\n"), "destroyed, still listed: %s", out);
}

Test(faulted, a_faulted_pool_imports_once_its_lun_is_back)
{
	char a[4200], b[4200];

	COF_OK(NULL, "pool create -s 16M f %s/l/0 %s/l/1", td.dir, td.dir);
	COF_OK(NULL, "create -s -V 1M f/v");
	tdaemon_stop_ok(&td);
	snprintf(a, sizeof(a), "%s/l/1", td.dir);
	snprintf(b, sizeof(b), "%s/aside", td.dir);
	cr_assert_eq(rename(a, b), 0);
	tdaemon_start_ok(&td);
	verb("pool export f", NULL);
	verb("pool import f", "not found");
	cr_assert_eq(rename(b, a), 0);
	COF_OK(NULL, "pool import -d %s/l f", td.dir);
	COF_OK(NULL, "pool list -H -o name,health f");
	cr_assert_str_eq(out, "f\tONLINE\n");
	COF_OK(NULL, "list -H -o name f/v");
	verb("pool destroy f", NULL);
}
