/* SPDX-License-Identifier: MIT */
/*
 * The command line as an operator meets it, through the real coffer binary
 * and daemon: each refusal says what was wrong and what is allowed (never a
 * bare "Invalid argument"), a typo gets "did you mean", and nothing stored
 * changes when a command is refused.
 */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "client.h"
#include "daemon.h"

TDAEMON_FIXTURE(NULL)
static char out[65536];

TestSuite(cli, .init = setup, .fini = teardown, .timeout = 240);

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
	/* a raw key of another length is refused, not cut to 32 bytes (a hex
	 * key file given as raw would load as its first 32 characters) */
	REFUSED(NULL, 1, "a raw key is exactly 32 bytes, this one is 65 (64 hex digits are "
			 "keyformat=hex)",
		"create -o encryption=on -o keyformat=raw -o keylocation=file://%s tank/r",
		tdaemon_file(&td, "hexkey",
			     "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n",
			     65));
	cr_assert_neq(cof(NULL, "get name tank/r"), 0, "a refused dataset exists: %s", out);
	REFUSED(NULL, 1, "a raw key is exactly 32 bytes, this one is 33",
		"create -o encryption=on -o keyformat=raw -o keylocation=file://%s tank/r",
		tdaemon_file(&td, "raw33", "0123456789abcdef0123456789abcdef\n", 33));
	tdaemon_random_file(&td, "raw", 32, key, sizeof(key));
	COF_OK(NULL, "create -o encryption=on -o keyformat=raw -o keylocation=file://%s tank/enc",
	       key);
	cr_assert(!strstr(out, "warning"), "a key file of mode 0600 is fine: %s", out);
	/* a key file others can read still loads, with a warning (as ssh's) */
	cr_assert_eq(chmod(key, 0644), 0);
	COF_OK(NULL, "unload-key tank/enc");
	COF_OK(NULL, "load-key tank/enc");
	cr_assert(strstr(out, "warning: tank/enc: key file") &&
			  strstr(out, "mode 0644 lets others read the key; chmod 600 it"),
		  "%s", out);
	prop_is("tank/enc", "keystatus", "available");
	COF_OK(NULL, "unload-key tank/enc");
	REFUSED(NULL, 1, "a raw key is exactly 32 bytes, this one is 33",
		"load-key -L file://%s tank/enc", tdaemon_path(&td, "raw33"));
	prop_is("tank/enc", "keystatus", "unavailable");
	COF_OK(NULL, "load-key tank/enc");
	REFUSED(NULL, 1, "cannot create an unencrypted dataset under an encrypted parent",
		"create -o encryption=off tank/enc/child");
	/* a child's encryption root is found up its names */
	COF_OK(NULL, "create -V 8M tank/enc/c");
	COF_OK(NULL, "list -H -o name,encryptionroot -r tank/enc");
	cr_assert_str_eq(out, "tank/enc\ttank/enc\ntank/enc/c\ttank/enc\n");
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

Test(cli, export_of_a_busy_pool_names_what_holds_it_and_what_to_do)
{
	struct coffer_conn *c = NULL;

	pool();
	COF_OK(NULL, "create -V 8M tank/a");
	COF_OK(NULL, "create -V 8M tank/b");
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	cr_assert_geq(coffer_ds_open(c, "tank/a", NULL, NULL), 0);
	cr_assert_geq(coffer_ds_open(c, "tank/a", NULL, NULL), 0);
	REFUSED(NULL, 1, "pool tank is busy: tank/a is open (2 handles on 1 connection); ",
		"pool export tank");
	cr_assert(strstr(out, "give -f to close their handles"), "%s", out);
	cr_assert(!strstr(out, "tank/b") && !strstr(out, "use -r") && !strstr(out, "datasets are"),
		  "wrong advice: %s", out);
	REFUSED(NULL, 1, "pool tank is busy: tank/a is open", "pool destroy tank");
	COF_OK(NULL, "list tank/b"); /* nothing was exported or destroyed */
	COF_OK(NULL, "pool export -f tank");
	coffer_close(c);
	COF_OK(NULL, "pool import tank");
}

Test(cli, advice_fits_the_verb_and_names_what_is_missing)
{
	struct coffer_conn *c = NULL;
	char path[4200];
	struct stat st;

	pool();
	/* a refused -o of pool create says why and leaves no LUN file behind */
	REFUSED(NULL, 1, "'compression' must be one of off | on | zstd",
		"pool create -s 64M -o compression=lz4 t2 %s/t2", td.dir);
	snprintf(path, sizeof(path), "%s/t2", td.dir);
	cr_assert(stat(path, &st) < 0 && errno == ENOENT, "the failed create left %s", path);
	/* what does not exist is named */
	REFUSED(NULL, 1, "its parent tank/a does not exist", "create -V 8M tank/a/b");
	REFUSED(NULL, 1, "tank/v@nope: destroy: snapshot does not exist", "destroy tank/v@nope");
	/* no -f where the verb has none */
	COF_OK(NULL, "create -V 8M tank/v");
	COF_OK(NULL, "snapshot tank/v@s");
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	cr_assert_geq(coffer_ds_open(c, "tank/v", NULL, NULL), 0);
	REFUSED(NULL, 1, "open", "rollback tank/v@s");
	cr_assert(!strstr(out, "-f"), "rollback has no -f: %s", out);
	coffer_close(c);
	/* create's key location is an -o; a wrong key is said once */
	REFUSED(NULL, 1, "use -o keylocation=prompt",
		"create -V 8M -o encryption=on -o keyformat=passphrase "
		"-o keylocation=file:///nonexistent tank/e");
	cr_assert(!strstr(out, "-L"), "create has no -L: %s", out);
	COF_OK(NULL, "create -V 8M -o encryption=on -o keyformat=passphrase -o keylocation=file://%s "
	       "tank/e", tdaemon_file(&td, "pass", "correct horse battery", 21));
	COF_OK(NULL, "unload-key tank/e");
	REFUSED(NULL, 1, "incorrect key", "load-key -L file://%s tank/e",
		tdaemon_file(&td, "wrong", "wrong horse battery", 19));
	cr_assert(!strstr(strstr(out, "incorrect key") + 1, "incorrect key"), "said twice: %s",
		  out);
}

/* Where @name starts in the last output, failing the test if it is not there. */
static const char *at(const char *name)
{
	const char *p = strstr(out, name);

	cr_assert(p, "no '%s' in: %s", name, out);
	return p;
}

Test(cli, list_sorts_sizes_as_numbers_stops_at_a_depth_and_takes_types)
{
	pool();
	COF_OK(NULL, "create -s -V 16M tank/big");
	COF_OK(NULL, "create -s -V 2M tank/small");
	COF_OK(NULL, "create -s -V 100M tank/huge");
	COF_OK(NULL, "create -s -V 4M tank/small/child");
	COF_OK(NULL, "snapshot tank/big@s1");
	/* 2M < 16M < 100M as numbers, which as text they are not; the key need not be a column */
	COF_OK(NULL, "list -H -o name -s volsize -r tank");
	cr_assert(at("tank/small\n") < at("tank/big\n") && at("tank/big\n") < at("tank/huge\n"),
		  "%s", out);
	COF_OK(NULL, "list -H -o name -S volsize -r tank");
	cr_assert(at("tank/huge\n") < at("tank/big\n") && at("tank/big\n") < at("tank/small\n"),
		  "%s", out);
	REFUSED(NULL, 1, "list -o: unknown field 'colour'", "list -s colour");
	COF_OK(NULL, "list -H -o name -d 1 tank");
	cr_assert(strstr(out, "tank/small\n") && !strstr(out, "tank/small/child"), "%s", out);
	COF_OK(NULL, "list -H -o name -d 0 tank");
	cr_assert_str_eq(out, "tank\n");
	COF_OK(NULL, "list -H -o name -t snap");
	cr_assert_str_eq(out, "tank/big@s1\n");
	COF_OK(NULL, "list -H -o name -t all -d 1 tank/big");
	cr_assert_str_eq(out, "tank/big\ntank/big@s1\n");
	COF_OK(NULL, "list -H -o name -t volume,snapshot -d 1 tank/big");
	cr_assert_str_eq(out, "tank/big\ntank/big@s1\n");
	REFUSED(NULL, 1, "coffer has no filesystems", "list -t filesystem");
	REFUSED(NULL, 1, "list -t: 'colour' is not volume, snapshot or all", "list -t colour");
	REFUSED(NULL, 1, "list -d: 'x' is not a depth", "list -d x");
}

Test(cli, pool_list_o_and_pool_get_take_zpool_properties)
{
	pool();
	COF_OK(NULL, "pool list");
	cr_assert(!strncmp(out, "NAME", 4) && strstr(out, "ALLOC") && strstr(out, "HEALTH") &&
			  strstr(out, "ONLINE"),
		  "%s", out);
	COF_OK(NULL, "pool list -H -o name,health,luns");
	cr_assert_str_eq(out, "tank\tONLINE\t1\n");
	COF_OK(NULL, "pool list -Hp -o size,state tank");
	cr_assert(strspn(out, "0123456789") > 6 && strstr(out, "\tONLINE\n"), "%s", out);
	REFUSED(NULL, 1, "unknown pool property 'helth' (did you mean 'health'?)",
		"pool list -o helth");
	COF_OK(NULL, "pool get -H -o property,value,source health,luns tank");
	cr_assert_str_eq(out, "health\tONLINE\t-\nluns\t1\t-\n");
	COF_OK(NULL, "pool get all tank");
	cr_assert(strstr(out, "NAME") && strstr(out, "SOURCE") && strstr(out, "capacity") &&
			  strstr(out, "allocated"),
		  "%s", out);
	/* no pool named: every pool */
	COF_OK(NULL, "pool get -H -o value guid");
	cr_assert(strlen(out) == 17 && strspn(out, "0123456789abcdef") == 16, "%s", out);
	REFUSED(NULL, 1, "unknown pool property 'dedup'", "pool get dedup tank");
	REFUSED(NULL, 1, "no such pool", "pool get all nosuch");
}

Test(cli, options_may_follow_operands_and_a_double_dash_ends_them)
{
	const char *parm;
	char json[4200];
	json_t *j;

	pool();
	COF_OK(NULL, "create tank/a -V 8M -o compression=zstd");
	prop_is("tank/a", "compression", "zstd");
	COF_OK(NULL, "get volsize tank/a -H -o value");
	cr_assert_str_eq(out, "8M\n");
	COF_OK(NULL, "list tank/a -H -o name");
	cr_assert_str_eq(out, "tank/a\n");
	COF_OK(NULL, "pool list tank -H -o name");
	cr_assert_str_eq(out, "tank\n");
	COF_OK(NULL, "get -H -o value -- volsize tank/a");
	cr_assert_str_eq(out, "8M\n");
	/* after "--" an operand that looks like an option is an operand */
	cr_assert_eq(cof(NULL, "destroy -- -r"), 1, "%s", out);
	cr_assert(strstr(out, "-r") && !strstr(out, "usage"), "%s", out);
	/* bench FILE --json OUT, as GNU users write it */
	parm = tdaemon_file(&td, "w.parm",
			    "sd=sd1,dataset=tank/a\nwd=w1,sd=sd1,rdpct=0,xfersize=8k\n"
			    "rd=r1,wd=w1,iorate=max,elapsed=1,interval=1\n",
			    strlen("sd=sd1,dataset=tank/a\nwd=w1,sd=sd1,rdpct=0,xfersize=8k\n"
				   "rd=r1,wd=w1,iorate=max,elapsed=1,interval=1\n"));
	snprintf(json, sizeof(json), "%s/w.json", td.dir);
	COF_OK(NULL, "bench '%s' --json '%s' -q", parm, json);
	j = json_load_file(json, 0, NULL);
	cr_assert_not_null(j, "no JSON written: %s", out);
	json_decref(j);
}

/* output_version of document @j names @command. */
static void is_doc(json_t *j, const char *command)
{
	json_t *v = json_object_get(j, "output_version");

	cr_assert_str_eq(json_string_value(json_object_get(v, "command")), command);
	cr_assert(json_is_integer(json_object_get(v, "vers_major")));
	cr_assert(json_is_integer(json_object_get(v, "vers_minor")));
}

/* j[a][b][c], the keys after the first NULL left out */
static json_t *path_get(json_t *j, const char *a, const char *b, const char *c)
{
	j = json_object_get(j, a);
	j = b ? json_object_get(j, b) : j;
	return c ? json_object_get(j, c) : j;
}

Test(cli, json_has_one_shape_with_strings_unless_json_int_and_guids_as_strings)
{
	json_t *j, *p, *v;

	pool();
	COF_OK(NULL, "create -V 8M -o compression=zstd tank/d");
	COF_OK(NULL, "create -V 8M tank/d/c");
	j = tdaemon_coffer_json(&td, "list -j -o name,volsize,compression tank/d");
	is_doc(j, "coffer list");
	p = path_get(j, "datasets", "tank/d", "properties");
	cr_assert_str_eq(json_string_value(path_get(j, "datasets", "tank/d", "type")), "VOLUME");
	cr_assert_str_eq(json_string_value(path_get(j, "datasets", "tank/d", "pool")), "tank");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(p, "volsize"), "value")),
			 "8M");
	v = json_object_get(json_object_get(p, "compression"), "source");
	cr_assert_str_eq(json_string_value(json_object_get(v, "type")), "LOCAL");
	json_decref(j);
	j = tdaemon_coffer_json(&td, "list --json-int -o volsize tank/d");
	p = path_get(j, "datasets", "tank/d", "properties");
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(p, "volsize"), "value")),
		     8 << 20);
	json_decref(j);
	/* get: every dataset in one document; an inherited value names where from */
	j = tdaemon_coffer_json(&td, "get -j compression tank/d tank/d/c");
	is_doc(j, "coffer get");
	v = json_object_get(path_get(j, "datasets", "tank/d/c", "properties"), "compression");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(v, "source"), "type")),
			 "INHERITED");
	cr_assert_str_eq(json_string_value(json_object_get(json_object_get(v, "source"), "data")),
			 "tank/d");
	cr_assert_not_null(path_get(j, "datasets", "tank/d", "properties"));
	json_decref(j);
	/* pools keyed by name, the GUID a string even with --json-int */
	j = tdaemon_coffer_json(&td, "pool list --json-int");
	is_doc(j, "coffer pool list");
	p = path_get(j, "pools", "tank", NULL);
	cr_assert(json_is_string(json_object_get(p, "pool_guid")), "%s", json_dumps(j, 0));
	cr_assert(json_is_integer(path_get(p, "properties", "luns", "value")));
	json_decref(j);
	j = tdaemon_coffer_json(&td, "pool status -j");
	is_doc(j, "coffer pool status");
	p = path_get(j, "pools", "tank", NULL);
	cr_assert(json_is_string(json_object_get(p, "pool_guid")) &&
			  json_is_string(json_object_get(p, "txg")),
		  "%s", json_dumps(j, 0));
	json_decref(j);
	j = tdaemon_coffer_json(&td, "-j version");
	is_doc(j, "coffer version");
	cr_assert(json_is_string(path_get(j, "daemon", "protocol", NULL)), "%s", json_dumps(j, 0));
	json_decref(j);
	j = tdaemon_coffer_json(&td, "-j ping");
	is_doc(j, "coffer ping");
	cr_assert(json_is_true(json_object_get(j, "alive")));
	json_decref(j);
	j = tdaemon_coffer_json(&td, "stats -j");
	is_doc(j, "coffer stats");
	cr_assert(json_is_string(path_get(j, "io", "reads", NULL)), "%s", json_dumps(j, 0));
	cr_assert_not_null(path_get(j, "pools", "tank", NULL), "pools keyed by name");
	json_decref(j);
}

Test(cli, pool_status_j_keys_the_vdev_tree_by_name_as_zpool_does)
{
	char l0[4200], l1[4200], l2[4200];
	json_t *j, *root, *m, *v;

	snprintf(l0, sizeof(l0), "%s/l0", td.dir);
	snprintf(l1, sizeof(l1), "%s/l1", td.dir);
	snprintf(l2, sizeof(l2), "%s/l2", td.dir);
	COF_OK(NULL, "pool create -s 64M tank %s mirror %s %s", l0, l1, l2);
	j = tdaemon_coffer_json(&td, "pool status -j --json-int");
	cr_assert_null(path_get(j, "pools", "tank", "luns"), "no LUN list: %s", json_dumps(j, 0));
	root = path_get(path_get(j, "pools", "tank", "vdevs"), "tank", NULL, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(root, "vdev_type")), "root", "%s",
			 json_dumps(j, 0));
	cr_assert(json_is_object(json_object_get(root, "vdevs")), "%s", json_dumps(j, 0));
	m = path_get(root, "vdevs", "mirror-0", NULL);
	cr_assert_str_eq(json_string_value(json_object_get(m, "vdev_type")), "mirror", "%s",
			 json_dumps(j, 0));
	cr_assert_str_eq(json_string_value(json_object_get(m, "state")), "ONLINE");
	cr_assert_eq(json_object_size(json_object_get(m, "vdevs")), 2, "%s", json_dumps(m, 0));
	v = path_get(m, "vdevs", l1, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(v, "name")), l1, "%s", json_dumps(m, 0));
	cr_assert_str_eq(json_string_value(json_object_get(v, "vdev_type")), "file");
	cr_assert_str_eq(json_string_value(json_object_get(v, "path")), l1);
	cr_assert_eq(json_integer_value(json_object_get(v, "index")), 1);
	cr_assert(json_is_integer(json_object_get(v, "checksum_errors")), "%s", json_dumps(v, 0));
	cr_assert_gt(json_integer_value(json_object_get(v, "total_space")), 0);
	/* a mirror's space is one side's, the pool's the sum of its vdevs */
	cr_assert_eq(json_integer_value(json_object_get(m, "total_space")),
		     json_integer_value(json_object_get(v, "total_space")));
	v = path_get(root, "vdevs", l0, NULL);
	cr_assert_str_eq(json_string_value(json_object_get(v, "vdev_type")), "file", "%s",
			 json_dumps(root, 0));
	cr_assert_eq(json_integer_value(json_object_get(v, "index")), 0);
	cr_assert_eq(json_integer_value(json_object_get(root, "total_space")),
		     json_integer_value(json_object_get(m, "total_space")) +
			     json_integer_value(json_object_get(v, "total_space")));
	json_decref(j);
}

Test(cli, write_says_when_standard_input_cannot_be_read)
{
	pool();
	COF_OK(NULL, "create -V 8M tank/d");
	/* a directory opens for reading, but read(2) fails: EISDIR, not end of file */
	REFUSED("/", 1, "reading standard input", "write tank/d");
}

/*
 * A write whose requests fail part way says how much of it landed: with 16
 * requests in flight, the ones before the failure were written whole.
 * Before, the error named only the offset that failed.
 */
Test(cli, a_write_that_fails_part_way_says_how_much_landed)
{
	char in[4200], cmd[8600];

	pool();
	COF_OK(NULL, "create -V 1M tank/a");
	tdaemon_random_file(&td, "in", 1536 * 1024, in, sizeof(in));
	REFUSED(in, 1, "1048576 of the 1572864 bytes sent were written and flushed", "write tank/a");
	cr_assert(strstr(out, "write at offset 1048576"), "not the first failure: %s", out);
	COF_OK(NULL, "read tank/a > '%s/back'", td.dir);
	snprintf(cmd, sizeof(cmd), "cmp -s -n 1048576 '%s' '%s/back'", in, td.dir);
	cr_assert_eq(system(cmd), 0, "the bytes said written are not there");
}
