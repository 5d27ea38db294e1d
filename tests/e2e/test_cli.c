/* SPDX-License-Identifier: MIT */
/*
 * The command line as an operator meets it, through the real coffer binary
 * and daemon: each refusal says what was wrong and what is allowed (never a
 * bare "Invalid argument"), a typo gets "did you mean", and nothing stored
 * changes when a command is refused.
 */
#include <config.h> /* the autoconf header: _GNU_SOURCE */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"

TDAEMON_FIXTURE(NULL)
static char out[65536];

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 120);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

/* `coffer ARGS` fails with exit status @st and says @want, and never "Invalid argument". */
#define REFUSED(in, st, want, ...)                                                          \
	do {                                                                                \
		int rc_ = cof((in), __VA_ARGS__);                                           \
		cr_assert_eq(rc_, (st), "exit %d, want %d: %s", rc_, (st), out);             \
		cr_assert(strstr(out, (want)), "'%s' lacks '%s'", out, (want));               \
		cr_assert(!strstr(out, "Invalid argument"), "bare errno text: %s", out);     \
	} while (0)

static void pool(void)
{
	COF_OK(NULL, "pool create -s 64M tank %s/l0", td.dir);
}

/* `get -H` prints NAME PROPERTY VALUE SOURCE separated by tabs */
static void prop_is(const char *ds, const char *prop, const char *want)
{
	char *v, *end;

	COF_OK(NULL, "get -H %s %s", prop, ds);
	v = strchr(out, '\t');
	v = v ? strchr(v + 1, '\t') : NULL;
	cr_assert(v, "get -H: %s", out);
	v++;
	end = v + strcspn(v, "\t\n");
	*end = '\0';
	cr_assert_str_eq(v, want, "%s of %s", prop, ds);
}

Test(cli, refused_sizes_say_what_is_allowed_and_change_nothing)
{
	pool();
	REFUSED(NULL, 1, "a LUN must be at least 2M", "pool create -s 1M tank2 %s/small", td.dir);
	cr_assert_neq(cof(NULL, "pool status tank2"), 0, "a refused pool exists: %s", out);
	REFUSED(NULL, 1, "recordsize must be a power of 2 from 512 to 1M",
		"create -V 8M -b 3K tank/c");
	REFUSED(NULL, 1, "volsize must be a multiple of recordsize", "create -V 8193K tank/c");
	cr_assert_neq(cof(NULL, "get volsize tank/c"), 0, "a refused dataset exists: %s", out);
	COF_OK(NULL, "create -V 8M tank/d");
	REFUSED(NULL, 1, "volsize cannot shrink", "set volsize=4M tank/d");
	REFUSED(NULL, 1, "volsize must be a multiple of recordsize", "set volsize=8201K tank/d");
	prop_is("tank/d", "volsize", "8M");
}

Test(cli, refused_keys_and_encryption_say_why)
{
	char key[4096];

	pool();
	REFUSED("/dev/null", 1, "passphrase must be 8 to 512 bytes",
		"create -o encryption=on -o keyformat=passphrase -o keylocation=file://%s tank/a",
		tdaemon_file(&td, "short", "short\n", 6));
	REFUSED(NULL, 1, "hex key must be exactly 64 hex digits",
		"create -o encryption=on -o keyformat=hex -o keylocation=file://%s tank/b",
		tdaemon_file(&td, "hex", "zzzz\n", 5));
	tdaemon_random_file(&td, "raw", 32, key, sizeof(key));
	COF_OK(NULL, "create -o encryption=on -o keyformat=raw -o keylocation=file://%s tank/enc",
	       key);
	REFUSED(NULL, 1, "cannot create an unencrypted dataset under an encrypted parent",
		"create -o encryption=off tank/enc/child");
	REFUSED(NULL, 1, "key already loaded", "load-key tank/enc");
	cr_assert(!strstr(out, "choose another name"), "wrong advice: %s", out);
	COF_OK(NULL, "unload-key tank/enc");
	REFUSED(NULL, 1, "not loaded", "unload-key tank/enc");
	cr_assert(!strstr(out, "does not exist"), "wrong reason: %s", out);
	prop_is("tank/enc", "keystatus", "unavailable");
}

Test(cli, properties_tell_a_wrong_name_from_a_wrong_value)
{
	pool();
	COF_OK(NULL, "create -V 8M tank/d");
	REFUSED(NULL, 1, "'compression' must be one of off | on | zstd | zstd-1..19",
		"set compression=zstd-40 tank/d");
	REFUSED(NULL, 1, "unknown property 'compresion' (did you mean 'compression'?)",
		"set compresion=zstd tank/d");
	REFUSED(NULL, 1, "'dedup' is a ZFS property not supported by coffer", "set dedup=on tank/d");
	REFUSED(NULL, 1, "'sync' must be one of standard | always | disabled",
		"create -V 8M -o sync=sometimes tank/e");
	REFUSED(NULL, 1, "unknown property 'foo'", "get foo tank/d");
	prop_is("tank/d", "compression", "off");
}

Test(cli, mistyped_verbs_get_a_suggestion)
{
	REFUSED(NULL, 2, "unknown verb 'lod-key' (did you mean 'load-key'?)", "lod-key tank/a");
	REFUSED(NULL, 2, "unknown verb 'pool craete' (did you mean 'pool create'?)",
		"pool craete tank");
	REFUSED(NULL, 2, "unknown verb 'lsit' (did you mean 'list'?)", "help lsit");
	REFUSED(NULL, 2, "unknown verb 'frobnicate'; run 'coffer help'", "frobnicate");
}

Test(cli, relative_lun_paths_are_refused_and_no_file_is_made)
{
	char cwd[4096], made[4200];

	cr_assert(getcwd(cwd, sizeof(cwd)));
	REFUSED(NULL, 1, "LUN 'mirror-typo': give an absolute path", "pool create tank mirror-typo");
	REFUSED(NULL, 1, "LUN 'a': give an absolute path", "pool create tank mirror a b");
	REFUSED(NULL, 1, "LUN './a': give an absolute path", "pool create -s 64M tank ./a");
	snprintf(made, sizeof(made), "%s/a", cwd);
	cr_assert_neq(access(made, F_OK), 0, "a LUN file was made in the working directory");
	cr_assert_neq(cof(NULL, "pool status tank"), 0, "a refused pool exists: %s", out);
}

Test(cli, help_and_version_exit_0_and_say_what_a_verb_takes)
{
	COF_OK(NULL, "--help");
	cr_assert(strstr(out, "usage: coffer") && strstr(out, "load-key"), "%s", out);
	COF_OK(NULL, "--version");
	cr_assert(strstr(out, "coffer ") && strstr(out, "protocol"), "%s", out);
	COF_OK(NULL, "help create");
	cr_assert(strstr(out, "-V SIZE") && strstr(out, "PROPERTIES") &&
			  strstr(out, "one of off | on | zstd | zstd-1..19") &&
			  strstr(out, "(at create)") && !strstr(out, "keystatus"),
		  "%s", out);
	COF_OK(NULL, "create --help");
	cr_assert(strstr(out, "recordsize, a power of 2 from 512 to 1M"), "%s", out);
	COF_OK(NULL, "help get");
	cr_assert(strstr(out, "keystatus") && strstr(out, "(read-only)"), "%s", out);
	COF_OK(NULL, "help pool create");
	cr_assert(strstr(out, "usage: coffer pool create") && strstr(out, "mirror"), "%s", out);
	COF_OK(NULL, "pool scrub --help");
	cr_assert(strstr(out, "-p  pause"), "%s", out);
}

Test(cli, read_refuses_to_write_binary_to_a_terminal)
{
	const char *bin = getenv("COFFER") ? getenv("COFFER") : "../../client/coffer";
	char cmd[8192], outp[4200];
	FILE *f;
	size_t n;
	int st;

	pool();
	COF_OK(NULL, "create -V 8M tank/d");
	snprintf(outp, sizeof(outp), "%s/tty.out", td.dir);
	/* script(1) gives the command a terminal for standard output */
	snprintf(cmd, sizeof(cmd), "script -qec \"'%s' -S '%s' read tank/d\" /dev/null > '%s' 2>&1",
		 bin, td.sock, outp);
	st = system(cmd);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1, "exit %d", WEXITSTATUS(st));
	f = fopen(outp, "r");
	cr_assert(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	fclose(f);
	cr_assert(strstr(out, "standard output is a terminal"), "%s", out);
	cr_assert(n < 1024, "%zu bytes reached the terminal", n);
}

Test(cli, get_takes_zfs_columns_and_sources)
{
	pool();
	COF_OK(NULL, "create -V 8M -o compression=zstd tank/d");
	COF_OK(NULL, "get -H -o value volsize tank/d");
	cr_assert_str_eq(out, "8M\n");
	COF_OK(NULL, "get -Hp -o value volsize tank/d");
	cr_assert_str_eq(out, "8388608\n");
	COF_OK(NULL, "get -H -o property,value,source compression,sync tank/d");
	cr_assert_str_eq(out, "compression\tzstd\tlocal\nsync\tstandard\tdefault\n");
	COF_OK(NULL, "get -H -s local -o name,property all tank/d");
	/* a thick volume sets its refreservation locally, as zfs does */
	cr_assert_str_eq(out, "tank/d\trefreservation\ntank/d\tcompression\n");
	COF_OK(NULL, "get -o all compression tank/d");
	cr_assert(strstr(out, "NAME") && strstr(out, "SOURCE") && strstr(out, "local"), "%s", out);
	REFUSED(NULL, 1, "get -o: unknown field 'colour'", "get -o colour volsize tank/d");
	REFUSED(NULL, 1, "get -s: unknown source 'nowhere'", "get -s nowhere volsize tank/d");
}

Test(cli, discard_zeroes_a_range_and_frees_its_records)
{
	char in[1024], cmd[8192], back[1100];

	pool();
	COF_OK(NULL, "create -V 8M tank/d");
	tdaemon_random_file(&td, "data", 256 << 10, in, sizeof(in));
	COF_OK(in, "write tank/d");
	/* options after the operand, as GNU users write them; a partial record at each end */
	COF_OK(NULL, "discard tank/d -o 12K -l 100K");
	snprintf(back, sizeof(back), "%s/back", td.dir);
	COF_OK(NULL, "read -l 256K tank/d > '%s'", back);
	snprintf(cmd, sizeof(cmd),
		 "cmp -s -n 12288 '%s' '%s' && cmp -s -n 102400 /dev/zero '%s' -i 0:12288 && "
		 "cmp -s '%s' '%s' -i 114688:114688",
		 in, back, back, in, back);
	cr_assert_eq(system(cmd), 0, "discard changed the wrong bytes");
	REFUSED(NULL, 1, "discard", "discard tank/d -o 8M -l 8K");
	REFUSED(NULL, 2, "usage: coffer discard", "discard");
}

Test(cli, inherit_r_reaches_every_dataset_under_the_one_named)
{
	pool();
	COF_OK(NULL, "set compression=zstd tank");
	COF_OK(NULL, "create -o compression=off tank/a");
	COF_OK(NULL, "create -V 8M -o compression=zstd-9 tank/a/v");
	COF_OK(NULL, "create -V 8M -o compression=off tank/b");
	COF_OK(NULL, "inherit -r compression tank/a");
	prop_is("tank/a", "compression", "zstd");
	prop_is("tank/a/v", "compression", "zstd");
	prop_is("tank/b", "compression", "off"); /* not under tank/a */
	REFUSED(NULL, 2, "usage: coffer inherit", "inherit -x compression tank/a");
}

Test(cli, stats_d_at_an_interval_prints_that_datasets_rows)
{
	pool();
	COF_OK(NULL, "create -V 8M tank/d");
	COF_OK(NULL, "create -V 8M tank/e");
	COF_OK(NULL, "stats -d tank/d 1 1");
	cr_assert(strstr(out, "pool/dataset") && strstr(out, "\ntank/d "), "%s", out);
	cr_assert(!strstr(out, "\ntank ") && !strstr(out, "tank/e"), "other rows: %s", out);
}

Test(cli, list_o_refuses_unknown_fields_and_takes_all)
{
	pool();
	COF_OK(NULL, "create -V 8M -o compression=zstd tank/d");
	REFUSED(NULL, 1, "list -o: unknown field 'colour'", "list -o name,colour");
	REFUSED(NULL, 1, "unknown field 'compresion' (did you mean 'compression'?)",
		"list -o name,compresion");
	COF_OK(NULL, "list -H -o all tank/d");
	cr_assert(!strncmp(out, "tank/d\tvolume\t", 14) && strstr(out, "\tzstd\t"), "%s", out);
	COF_OK(NULL, "list -H -o name,avail,refer tank/d");
	cr_assert(!strncmp(out, "tank/d\t", 7), "%s", out);
}
