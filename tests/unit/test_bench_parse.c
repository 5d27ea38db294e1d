/* SPDX-License-Identifier: MIT */
/* coffer bench input: vdbench parameter files and one-liner flags into run plans. */

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_parse.h"
#include "store.h"

static char err[512];
static struct bench_plan *pl;

static void teardown(void)
{
	bench_plan_free(pl);
	pl = NULL;
}

TestSuite(bench_parse, .fini = teardown, .timeout = 240);

static struct bench_plan *ok(const char *text)
{
	int ret = bench_plan_parse_text("t.parm", text, &pl, err, sizeof(err));

	cr_assert_eq(ret, 0, "parse failed: %s", err);
	cr_assert_not_null(pl);
	return pl;
}

static void bad(const char *text, const char *want)
{
	struct bench_plan *p = NULL;
	int ret = bench_plan_parse_text("t.parm", text, &p, err, sizeof(err));

	cr_assert_lt(ret, 0, "parse of <<%s>> should fail with %s", text, want);
	cr_assert_null(p);
	cr_assert_str_eq(err, want);
}

Test(bench_parse, every_keyword_is_read)
{
	ok("hd=default,system=localhost,vdbench=/opt/vdbench\n"
	   "sd=sd1,dataset=tank/vol*,threads=2,range=(10,50)\n"
	   "sd=sd2,lun=tank/other,threads=3,range=(1m,2g)\n"
	   "wd=wd1,sd=sd1,rdpct=70,seekpct=random,xfersize=(8k,50,64k,50),rhpct=10,hitarea=2m\n"
	   "wd=wd2,sd=(sd1,sd2),readpct=30,seekpct=eof,xfersize=1m\n"
	   "wd=wd3,sd=sd*,seekpct=40,xfersize=4k\n"
	   "wd=wd4,sd=sd2,seekpct=sequential\n"
	   "rd=rd1,wd=wd1,iorate=max,elapsed=10,interval=2,warmup=3\n"
	   "rd=rd2,wd=(wd2,wd3),iorate=500,elapsed=1m,interval=0.5\n"
	   "rd=rd3,wd=wd*,iorate=curve,curve=(50,90),elapsed=5s\n"
	   "rd=rd4,wd=wd1,forthreads=(1,2),forxfersize=(4k,8k),forrdpct=(0,100),elapsed=1\n"
	   "rd=rd5,wd=wd1,threads=7,elapsed=2\n");
	cr_assert_eq(pl->nsd, 2);
	cr_assert_str_eq(pl->sd[0].name, "sd1");
	cr_assert_str_eq(pl->sd[0].dataset, "tank/vol*");
	cr_assert_eq(pl->sd[0].threads, 2);
	cr_assert(pl->sd[0].range_set && !pl->sd[0].range_bytes);
	cr_assert_float_eq(pl->sd[0].range_lo, 10, 1e-9);
	cr_assert_float_eq(pl->sd[0].range_hi, 50, 1e-9);
	cr_assert_str_eq(pl->sd[1].dataset, "tank/other");
	cr_assert(pl->sd[1].range_bytes);
	cr_assert_float_eq(pl->sd[1].range_hi, 2.0 * (1 << 30), 1);

	cr_assert_eq(pl->nwd, 4);
	cr_assert_float_eq(pl->wd[0].rdpct, 70, 1e-9);
	cr_assert_float_eq(pl->wd[0].seekpct, 100, 1e-9);
	cr_assert_eq(pl->wd[0].nxfer, 2);
	cr_assert_eq(pl->wd[0].xfer[0].size, 8192);
	cr_assert_eq(pl->wd[0].xfer[1].size, 65536);
	cr_assert_float_eq(pl->wd[0].xfer[1].pct, 50, 1e-9);
	cr_assert_float_eq(pl->wd[0].rhpct, 10, 1e-9);
	cr_assert_eq(pl->wd[0].hitarea, 2 << 20);
	cr_assert_eq(pl->wd[0].nsd, 1);
	cr_assert_float_eq(pl->wd[1].rdpct, 30, 1e-9);
	cr_assert(pl->wd[1].eof);
	cr_assert_eq(pl->wd[1].nsd, 2);
	cr_assert_eq(pl->wd[1].xfer[0].size, 1 << 20);
	cr_assert_eq(pl->wd[2].nsd, 2, "sd* matches both");
	cr_assert_float_eq(pl->wd[2].seekpct, 40, 1e-9);
	cr_assert_float_eq(pl->wd[3].seekpct, 0, 1e-9);
	cr_assert(!pl->wd[3].eof);

	/* rd1 + rd2 + (max, 50 %, 90 %) + 8 for* runs + rd5 */
	cr_assert_eq(pl->nrun, 1 + 1 + 3 + 8 + 1);
	cr_assert_str_eq(pl->run[0].name, "rd1");
	cr_assert_eq(pl->run[0].rate_kind, BENCH_RATE_MAX);
	cr_assert_float_eq(pl->run[0].elapsed, 10, 1e-9);
	cr_assert_float_eq(pl->run[0].interval, 2, 1e-9);
	cr_assert_float_eq(pl->run[0].warmup, 3, 1e-9);
	cr_assert_eq(pl->run[1].rate_kind, BENCH_RATE_FIXED);
	cr_assert_float_eq(pl->run[1].rate, 500, 1e-9);
	cr_assert_float_eq(pl->run[1].elapsed, 60, 1e-9);
	cr_assert_float_eq(pl->run[1].interval, 0.5, 1e-9);
	cr_assert_eq(pl->run[1].nwd, 2);
	cr_assert_eq(pl->run[2].nwd, 4);
	cr_assert_eq(pl->run[13].threads, 7);
}

Test(bench_parse, curve_runs_a_max_run_first_then_each_percentage_of_it)
{
	ok("sd=sd1,dataset=a\nwd=w,sd=sd1\nrd=r,wd=w,iorate=curve,curve=(95,90,80,70,60,50),elapsed=5\n");
	cr_assert_eq(pl->nrun, 7);
	cr_assert_eq(pl->run[0].rate_kind, BENCH_RATE_MAX);
	cr_assert_str_eq(pl->run[0].name, "r.1");
	for (unsigned i = 1; i < 7; i++) {
		cr_assert_eq(pl->run[i].rate_kind, BENCH_RATE_CURVE);
		cr_assert_eq(pl->run[i].base, 0);
	}
	cr_assert_float_eq(pl->run[1].rate, 95, 1e-9);
	cr_assert_float_eq(pl->run[6].rate, 50, 1e-9);
	cr_assert_str_eq(pl->run[6].label, "iorate=curve 50%");
}

Test(bench_parse, curve_without_a_list_uses_the_vdbench_default)
{
	ok("sd=s,dataset=a\nwd=w,sd=s\nrd=r,wd=w,iorate=curve\n");
	cr_assert_eq(pl->nrun, 7);
	cr_assert_float_eq(pl->run[1].rate, 10, 1e-9);
	cr_assert_float_eq(pl->run[6].rate, 100, 1e-9);
}

Test(bench_parse, each_for_combination_of_a_curve_gets_its_own_max_run)
{
	ok("sd=s,dataset=a\nwd=w,sd=s\nrd=r,wd=w,iorate=curve,curve=(50),forthreads=(1,4)\n");
	cr_assert_eq(pl->nrun, 4);
	cr_assert_eq(pl->run[1].base, 0);
	cr_assert_eq(pl->run[3].base, 2);
	cr_assert_eq(pl->run[2].threads, 4);
	cr_assert_eq(pl->run[3].threads, 4);
}

Test(bench_parse, for_loops_expand_into_every_combination)
{
	ok("sd=s,dataset=a\nwd=w,sd=s\n"
	   "rd=r,wd=w,forxfersize=(4k,8k,16k),forrdpct=(0,50),forthreads=(1-8,d)\n");
	cr_assert_eq(pl->nrun, 3 * 2 * 4);
	cr_assert_eq(pl->run[0].xfersize, 4096);
	cr_assert_float_eq(pl->run[0].rdpct, 0, 1e-9);
	cr_assert_eq(pl->run[0].threads, 1);
	cr_assert_eq(pl->run[3].threads, 8);
	cr_assert_float_eq(pl->run[4].rdpct, 50, 1e-9);
	cr_assert_eq(pl->run[23].xfersize, 16384);
	cr_assert_str_eq(pl->run[23].name, "r.24");
	cr_assert_str_eq(pl->run[23].label, "xfersize=16k rdpct=50 threads=8 iorate=max");
}

Test(bench_parse, for_ranges_with_a_step)
{
	ok("sd=s,dataset=a\nwd=w,sd=s\nrd=r,wd=w,forthreads=(2-10,4)\n");
	cr_assert_eq(pl->nrun, 3);
	cr_assert_eq(pl->run[2].threads, 10);
}

Test(bench_parse, iorate_list_gives_one_run_per_rate)
{
	ok("sd=s,dataset=a\nwd=w,sd=s\nrd=r,wd=w,iorate=(100,200,300)\n");
	cr_assert_eq(pl->nrun, 3);
	cr_assert_float_eq(pl->run[2].rate, 300, 1e-9);
}

Test(bench_parse, comments_blank_lines_and_continuations)
{
	ok("* vdbench comment\n"
	   "# another comment\n"
	   "\n"
	   "sd=sd1,  dataset=tank/a   # trailing comment\n"
	   "   threads=4\n" /* a line of keywords continues the definition above */
	   "wd=wd1,sd=sd1,\\\n"
	   "   rdpct=25,\\\n"
	   "   xfersize=(4k,\\\n"
	   "      25,8k,75)\n"
	   "rd=rd1,wd=wd1,iorate=max,elapsed=3 interval=1\n");
	cr_assert_eq(pl->sd[0].threads, 4);
	cr_assert_float_eq(pl->wd[0].rdpct, 25, 1e-9);
	cr_assert_eq(pl->wd[0].nxfer, 2);
	cr_assert_float_eq(pl->wd[0].xfer[1].pct, 75, 1e-9);
	cr_assert_float_eq(pl->run[0].elapsed, 3, 1e-9);
}

Test(bench_parse, defaults_apply_to_later_definitions)
{
	ok("sd=default,threads=5\nwd=default,xfersize=16k,rdpct=10\nrd=default,elapsed=7\n"
	   "sd=s,dataset=a\nwd=w,sd=s\nrd=r,wd=w\n");
	cr_assert_eq(pl->sd[0].threads, 5);
	cr_assert_eq(pl->wd[0].xfer[0].size, 16384);
	cr_assert_float_eq(pl->wd[0].rdpct, 10, 1e-9);
	cr_assert_float_eq(pl->run[0].elapsed, 7, 1e-9);
}

Test(bench_parse, sd_name_is_the_dataset_when_no_dataset_is_given)
{
	ok("sd=tank/vol*,threads=2\nwd=w,sd=tank/vol*\nrd=r,wd=w\n");
	cr_assert_str_eq(pl->sd[0].dataset, "tank/vol*");
}

Test(bench_parse, hd_default_is_accepted_with_a_note)
{
	ok("hd=default,jvms=4\nsd=s,dataset=a\nwd=w,sd=s\nrd=r,wd=w\n");
	cr_assert_eq(pl->nnotes, 1);
	cr_assert(strstr(pl->notes[0], "t.parm:1: hd=default ignored"));
	cr_assert(strstr(pl->notes[0], "jvms=4"), "%s", pl->notes[0]);
}

Test(bench_parse, sd_takes_vdbenchs_size_and_hitarea)
{
	ok("sd=s,lun=tank/v1,size=5g,hitarea=100m\nwd=w,sd=s,rhpct=100\nrd=r,wd=w\n");
	cr_assert_eq(pl->sd[0].size, 5ull << 30);
	cr_assert_eq(pl->sd[0].hitarea, 100ull << 20);
	bad("sd=s,dataset=a,size=0\n", "t.parm:1: bad size '0' for 'size'");
}

Test(bench_parse, errors_name_file_and_line)
{
	bad("sd=s,dataset=a\n\nwd=w,sd=s,foo=1\nrd=r,wd=w\n", "t.parm:3: unknown keyword 'foo'");
	bad("sd=s,dataset=a,threads=0\n", "t.parm:1: bad value '0' for 'threads' (1 to 4096)");
	bad("sd=s,dataset=a,bogus=2\n", "t.parm:1: unknown keyword 'bogus'");
	bad("sd=s,range=(50,10)\n", "t.parm:1: bad range '(50,10)': percentages, start < end");
	bad("sd=s\nwd=w,sd=s,rdpct=101\n", "t.parm:2: bad value '101' for 'rdpct' (0 to 100)");
	bad("sd=s\nwd=w,sd=s,seekpct=sometimes\n",
	    "t.parm:2: bad value 'sometimes' for 'seekpct' (0 to 100, random, sequential or eof)");
	bad("sd=s\nwd=w,sd=s,xfersize=(4k,50,8k,40)\n",
	    "t.parm:2: xfersize percentages add up to 90, not 100");
	bad("sd=s\nwd=w,sd=s,xfersize=4q\n", "t.parm:2: bad size '4q' for 'xfersize'");
	bad("sd=s\nwd=w,sd=s,xfersize=(4k,50,8k)\n",
	    "t.parm:2: bad xfersize '(4k,50,8k)': a size or (size,pct,size,pct,...)");
	bad("sd=s\nwd=w,sd=s,hitarea=x\n", "t.parm:2: bad size 'x' for 'hitarea'");
	bad("sd=s\nwd=w,sd=s,rhpct=-1\n", "t.parm:2: bad value '-1' for 'rhpct' (0 to 100)");
	bad("sd=s\nwd=w,sd=nope\nrd=r,wd=w\n", "t.parm:2: unknown sd 'nope'");
	bad("sd=s\nwd=w\n", "t.parm:2: wd=w has no sd=");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=x\n", "t.parm:3: unknown wd 'x'");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,iorate=fast\n",
	    "t.parm:3: bad value 'fast' for 'iorate' (max, curve, a rate or a list of rates)");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,curve=(50)\n", "t.parm:3: rd=r: curve= needs iorate=curve");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,iorate=curve,\\\n  curve=(50,x)\n",
	    "t.parm:4: bad value 'x' in 'curve'");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,elapsed=ten\n", "t.parm:3: bad time 'ten' for 'elapsed'");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,interval=0\n",
	    "t.parm:3: interval must be at least 0.01 s");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,elapsed=5,warmup=5\n",
	    "t.parm:3: rd=r: warmup (5s) must be shorter than elapsed (5s)");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,warmup=soon\n", "t.parm:3: bad time 'soon' for 'warmup'");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,forthreads=(1,x)\n",
	    "t.parm:3: bad value 'x' in 'forthreads'");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,forthreads=(1.5)\n",
	    "t.parm:3: bad value '(1.5)' for 'forthreads'");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,forxfersize=(4k,0)\n",
	    "t.parm:3: bad size '0' in 'forxfersize'");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,forrdpct=(50,200)\n",
	    "t.parm:3: bad value '200' in 'forrdpct'");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,forthreads=(8-1,d)\n",
	    "t.parm:3: bad range '(8-1,d)' for 'forthreads'");
	bad("sd=s\nwd=w,sd=s\nrd=r,wd=w,bogus=1\n", "t.parm:3: unknown keyword 'bogus'");
	bad("hd=host1,system=x\n", "t.parm:1: hd=host1: host definitions are not supported, "
	    "only hd=default");
	bad("threads=2\n", "t.parm:1: unknown keyword 'threads'");
	bad("sd=s\nsd=s\n", "t.parm:2: sd=s defined twice");
	bad("sd=s\nwd=w,sd=s\nwd=w,sd=s\n", "t.parm:3: wd=w defined twice");
	bad("sd=s\nwd=w,sd=s\nrd=r\nrd=r\n", "t.parm:4: rd=r defined twice");
	bad("sd=s,range=(1,2\n", "t.parm:1: unbalanced parentheses");
	bad("sd=s oops\n", "t.parm:1: expected keyword=value, got 'oops'");
	bad("sd=\n", "t.parm:1: sd= needs a name");
	bad("sd=s\nwd=w,sd=s\n", "t.parm: no run definition (rd=)");
}

Test(bench_parse, error_lines_count_comments_and_continuations)
{
	bad("* header\n# more\nsd=s,\\\n  dataset=a,\\\n  thread=2\n", "t.parm:5: unknown keyword 'thread'");
}

Test(bench_parse, sizes_and_times)
{
	uint64_t b;
	double t;

	cr_assert_eq(stor_parse_size("8k", &b), 0);
	cr_assert_eq(b, 8192);
	cr_assert_eq(stor_parse_size("1M", &b), 0);
	cr_assert_eq(b, 1 << 20);
	cr_assert_eq(stor_parse_size("1.5g", &b), 0);
	cr_assert_eq(b, 3ull << 29);
	cr_assert_eq(stor_parse_size("4KiB", &b), 0);
	cr_assert_eq(b, 4096);
	cr_assert_eq(stor_parse_size("512", &b), 0);
	cr_assert_eq(b, 512);
	cr_assert_lt(stor_parse_size("0.3", &b), 0);
	cr_assert_lt(stor_parse_size("k", &b), 0);
	cr_assert_lt(stor_parse_size("-1", &b), 0);
	cr_assert_eq(bench_parse_time("5m", &t), 0);
	cr_assert_float_eq(t, 300, 1e-9);
	cr_assert_eq(bench_parse_time("2h", &t), 0);
	cr_assert_float_eq(t, 7200, 1e-9);
	cr_assert_eq(bench_parse_time("1.5s", &t), 0);
	cr_assert_float_eq(t, 1.5, 1e-9);
	cr_assert_lt(bench_parse_time("5x", &t), 0);
}

Test(bench_parse, reads_a_file_and_reports_a_missing_one)
{
	char dir[300], path[400];
	const char *tmp = getenv("TMPDIR");
	FILE *f;

	snprintf(dir, sizeof(dir), "%s/bench-parse.XXXXXX", tmp && *tmp ? tmp : "/tmp");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/p.parm", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs("sd=s,dataset=a\nwd=w,sd=s\nrd=r,wd=w,bad=1\n", f);
	fclose(f);
	cr_assert_eq(bench_plan_parse_file(path, &pl, err, sizeof(err)), -EINVAL);
	cr_assert(strstr(err, "p.parm:3: unknown keyword 'bad'"), "%s", err);
	unlink(path);
	cr_assert_eq(bench_plan_parse_file(path, &pl, err, sizeof(err)), -ENOENT);
	rmdir(dir);
}

/* ---- one-liner flags ---- */

static int args(struct bench_args *a, const char *const *v)
{
	int n = 0;

	while (v[n])
		n++;
	return bench_args_parse(n, (char **)v, a, err, sizeof(err));
}

Test(bench_parse, one_liner_flags_make_a_plan)
{
	struct bench_args a;
	const char *v[] = { "bench", "--datasets", "tank/vol*", "--rw", "randrw", "--bs", "16k",
			    "--qd", "2", "--time", "30s", "--rate", "1000", "--warmup", "5s",
			    "--rdpct", "70", "--interval", "2", "--json", "o.json", "--csv",
			    "o.csv", "-v", "--journal", "j", "--daemon-pid", "42", "--threads",
			    "3", "-q", NULL };

	cr_assert_eq(args(&a, v), 0, "%s", err);
	cr_assert_str_eq(a.json, "o.json");
	cr_assert_str_eq(a.csv, "o.csv");
	cr_assert(a.verify && !a.recover && a.quiet);
	cr_assert_str_eq(a.journal, "j");
	cr_assert_eq(a.daemon_pid, 42);
	cr_assert_eq(a.nthreads, 3);
	cr_assert_eq(bench_plan_from_args(&a, &pl, err, sizeof(err)), 0, "%s", err);
	cr_assert_str_eq(pl->sd[0].dataset, "tank/vol*");
	cr_assert_eq(pl->sd[0].threads, 2);
	cr_assert_float_eq(pl->wd[0].rdpct, 70, 1e-9);
	cr_assert_float_eq(pl->wd[0].seekpct, 100, 1e-9);
	cr_assert_eq(pl->wd[0].xfer[0].size, 16384);
	cr_assert_eq(pl->nrun, 1);
	cr_assert_eq(pl->run[0].rate_kind, BENCH_RATE_FIXED);
	cr_assert_float_eq(pl->run[0].rate, 1000, 1e-9);
	cr_assert_float_eq(pl->run[0].elapsed, 30, 1e-9);
	cr_assert_float_eq(pl->run[0].warmup, 5, 1e-9);
	cr_assert_float_eq(pl->run[0].interval, 2, 1e-9);
}

Test(bench_parse, options_may_follow_the_parameter_file)
{
	struct bench_args a;
	const char *v[] = { "bench", "run.parm", "--json", "o.json", "-q", "-s", NULL };
	const char *dd[] = { "bench", "--", "-odd.parm", NULL };

	cr_assert_eq(args(&a, v), 0, "%s", err);
	cr_assert_str_eq(a.file, "run.parm");
	cr_assert_str_eq(a.json, "o.json");
	cr_assert(a.quiet && a.parse_only);
	cr_assert_eq(args(&a, dd), 0, "%s", err);
	cr_assert_str_eq(a.file, "-odd.parm");
}

Test(bench_parse, rw_modes_set_read_and_seek_percentages)
{
	static const struct { const char *rw; double rd, seek; } m[] = {
		{ "randread", 100, 100 }, { "randwrite", 0, 100 }, { "read", 100, 0 },
		{ "write", 0, 0 }, { "randrw", 50, 100 },
	};

	for (unsigned i = 0; i < 5; i++) {
		struct bench_args a;
		const char *v[] = { "bench", "--datasets", "d", "--rw", m[i].rw, NULL };

		cr_assert_eq(args(&a, v), 0, "%s", err);
		cr_assert_eq(bench_plan_from_args(&a, &pl, err, sizeof(err)), 0, "%s", err);
		cr_assert_float_eq(pl->wd[0].rdpct, m[i].rd, 1e-9, "%s", m[i].rw);
		cr_assert_float_eq(pl->wd[0].seekpct, m[i].seek, 1e-9, "%s", m[i].rw);
		cr_assert_eq(pl->run[0].rate_kind, BENCH_RATE_MAX);
		bench_plan_free(pl);
		pl = NULL;
	}
}

Test(bench_parse, curve_flags)
{
	struct bench_args a;
	const char *v[] = { "bench", "--datasets", "d", "--rate", "curve", "--curve", "90,50",
			    NULL };

	cr_assert_eq(args(&a, v), 0, "%s", err);
	cr_assert_eq(bench_plan_from_args(&a, &pl, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(pl->nrun, 3);
	cr_assert_float_eq(pl->run[2].rate, 50, 1e-9);
}

Test(bench_parse, vr_takes_a_journal)
{
	struct bench_args a;
	const char *v[] = { "bench", "-vr", "/tmp/j", NULL };

	cr_assert_eq(args(&a, v), 0, "%s", err);
	cr_assert(a.verify && a.recover);
	cr_assert_str_eq(a.journal, "/tmp/j");
	cr_assert_null(a.file);
}

Test(bench_parse, parameter_file_is_positional)
{
	struct bench_args a;
	const char *v[] = { "bench", "-v", "run.parm", NULL };

	cr_assert_eq(args(&a, v), 0, "%s", err);
	cr_assert_str_eq(a.file, "run.parm");
	cr_assert(a.verify);
}

Test(bench_parse, bad_flags_are_named)
{
	struct bench_args a;
	const char *v1[] = { "bench", "--datasets", "d", "--rw", "sideways", NULL };
	const char *v2[] = { "bench", "--datasets", "d", "--bs", "8q", NULL };
	const char *v3[] = { "bench", "--datasets", "d", "--frobnicate", NULL };
	const char *v4[] = { "bench", NULL };
	const char *v5[] = { "bench", "f.parm", "--datasets", "d", NULL };
	const char *v6[] = { "bench", "--datasets", "d", "--time", "5", "--warmup", "5", NULL };
	const char *v7[] = { "bench", "--datasets", "d", "--rate", "fast", NULL };
	const char *v8[] = { "bench", "--datasets", NULL };

	cr_assert_eq(args(&a, v1), -EINVAL);
	cr_assert_str_eq(err, "--rw: 'sideways' is not one of randread, randwrite, read, write, randrw");
	cr_assert_eq(args(&a, v2), -EINVAL);
	cr_assert_str_eq(err, "--bs: bad size '8q'");
	cr_assert_eq(args(&a, v3), -EINVAL);
	cr_assert_str_eq(err, "unknown option '--frobnicate'");
	cr_assert_eq(args(&a, v4), -EINVAL);
	cr_assert_str_eq(err, "nothing to run: give a parameter file or --datasets GLOB");
	cr_assert_eq(args(&a, v5), -EINVAL);
	cr_assert_eq(args(&a, v6), -EINVAL);
	cr_assert_str_eq(err, "--warmup must be shorter than --time");
	cr_assert_eq(args(&a, v7), -EINVAL);
	cr_assert_eq(args(&a, v8), -EINVAL);
	cr_assert_str_eq(err, "--datasets needs a value");
}
