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
