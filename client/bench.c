/* SPDX-License-Identifier: MIT */
/*
 * bench.c owns the command "coffer bench": it parses the arguments and the
 * plan, expands the plan's dataset globs against the daemon's list (or, for
 * -vr, builds a plan that reads back every record of a journal), then runs
 * each rd in turn. A run has three stages: setup (the engine's streams and
 * workers, bench_run.c), the run itself, where the main thread only samples
 * the workers' counters once per interval and hands them to the report
 * (bench_report.c), and the run's report (average, percentiles, JSON).
 * Last it saves the validation journal and the JSON document.
 */

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "store.h"

static atomic_bool interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	atomic_store(&interrupted, true);
}

/* ---- one run ---- */

/* Set up the engine for run @ri and @t's histograms, then print the run's header. */
static int run_setup(struct engine *e, const struct bench_plan *pl, unsigned ri,
		     const struct sdmatch *m, const double *base_iops, struct tally *t)
{
	int ret;

	t->r = &pl->run[ri];
	t->ri = ri;
	t->k = 1;
	ret = bench_engine_setup(e, pl, ri, m, base_iops, t->err, sizeof(t->err));
	if (ret < 0)
		return ret;
	t->h = malloc(sizeof(*t->h));
	t->hr = malloc(sizeof(*t->hr));
	t->hw = malloc(sizeof(*t->hw));
	t->gtot = calloc(e->ngroups, sizeof(*t->gtot));
	t->gint = calloc(e->ngroups, sizeof(*t->gint));
	if (!t->h || !t->hr || !t->hw || !t->gtot || !t->gint)
		return -ENOMEM;
	hist_init(t->h);
	hist_init(t->hr);
	hist_init(t->hw);
	bench_report_start(e);
	return 0;
}

/* Sample the workers once per interval until the run ends, is interrupted or fails. */
static void run_sample(struct engine *e, const struct bench_plan *pl, struct tally *t)
{
	uint64_t prev = e->t0, ival = (uint64_t)(t->r->interval * 1e9);
	double cpu0 = bench_client_cpu_s(), dcpu0 = bench_daemon_cpu_s(e->daemon_pid);
	double cpu1, dcpu1;
	struct line l;

	for (;;) {
		uint64_t target = e->t0 + t->k * ival, now;
		bool done = false;

		if (target > e->end_ns)
			target = e->end_ns;
		for (;;) {
			now = bench_now_ns();
			if (now >= target || (done = bench_all_finished(e)) ||
			    atomic_load(&interrupted))
				break;
			bench_report_progress(e, pl, t, now);
			{
				uint64_t d = target - now > NS / 4 ? NS / 4 : target - now;
				struct timespec ts = { 0, (long)d };

				nanosleep(&ts, NULL);
			}
		}
		if (atomic_load(&interrupted))
			atomic_store(&e->stop, true), done = true;
		bench_collect(e, &l.a, t->gint);
		bench_acc_add(&t->all, &l.a);
		cpu1 = bench_client_cpu_s();
		dcpu1 = bench_daemon_cpu_s(e->daemon_pid);
		l.dur = (double)(now - prev) / 1e9;
		l.ccpu = l.dur > 0 ? 100.0 * (cpu1 - cpu0) / l.dur : 0;
		l.dcpu = dcpu0 >= 0 && dcpu1 >= 0 && l.dur > 0 ? 100.0 * (dcpu1 - dcpu0) / l.dur : -1;
		cpu0 = cpu1;
		dcpu0 = dcpu1;
		if (l.dur > 0.001 || l.a.reads + l.a.writes) {
			bench_report_interval(e, t, &l);
			/* an interval that began at or after the warmup counts in the average */
			if (prev >= e->t0 + e->warm_ns - ival / 1000) {
				bench_acc_add(&t->tot.a, &l.a);
				for (unsigned g = 0; g < e->ngroups; g++)
					bench_acc_add(&t->gtot[g], &t->gint[g]);
				t->tot.dur += l.dur;
				t->tot.ccpu += l.ccpu * l.dur;
				t->tot.dcpu = l.dcpu < 0 || t->tot.dcpu < 0 ? -1 :
									  t->tot.dcpu + l.dcpu * l.dur;
			}
		}
		prev = now;
		t->k++;
		if (done || now >= e->end_ns)
			break;
	}
}

/* The run's totals, its average lines and its JSON object (if it ran). */
static json_t *run_report(struct engine *e, struct tally *t, double *base_iops, bool ran)
{
	struct acc late;

	/* completions inside the run that arrived after the last sample */
	bench_collect(e, &late, t->gint);
	bench_acc_add(&t->tot.a, &late);
	for (unsigned g = 0; g < e->ngroups; g++)
		bench_acc_add(&t->gtot[g], &t->gint[g]);
	bench_acc_add(&t->all, &late);
	e->total_errors += t->all.errors;
	e->total_verrors += t->all.verrors;
	if (t->tot.dur > 0) {
		t->tot.ccpu /= t->tot.dur;
		t->tot.dcpu = t->tot.dcpu < 0 ? -1 : t->tot.dcpu / t->tot.dur;
		base_iops[t->ri] = bench_report_average(e, t);
	}
	return ran ? bench_report_run_json(e, t) : NULL;
}

/*
 * Run @ri of @pl: setup, the run, its report. @base_iops holds the rate of
 * each run so far, for the curve points. @param[out] jrun_out  its JSON
 * object, NULL if it never started
 */
static int run_one(struct engine *e, const struct bench_plan *pl, unsigned ri,
		   const struct sdmatch *m, double *base_iops, json_t **jrun_out)
{
	struct tally t = { 0 };
	unsigned started = 0;
	bool ran;
	int ret, jret;

	*jrun_out = NULL;
	ret = run_setup(e, pl, ri, m, base_iops, &t);
	if (ret < 0)
		goto out;
	ret = bench_engine_start(e, &started, t.err, sizeof(t.err));
	ran = ret == 0;
	if (ran) {
		t.jint = json_array();
		run_sample(e, pl, &t);
	}
	jret = bench_engine_join(e, started, &t);
	if (jret < 0)
		ret = jret;
	*jrun_out = run_report(e, &t, base_iops, ran);
out:
	if (t.err[0])
		fprintf(stderr, "coffer bench: run %s: %s\n", pl->run[ri].name, t.err);
	bench_engine_free(e);
	free(t.h);
	free(t.hr);
	free(t.hw);
	free(t.gtot);
	free(t.gint);
	json_decref(t.jint);
	return ret;
}

/* ---- setup ---- */

static int add_dataset(struct engine *e, struct coffer_conn *c, const char *name,
		       const char *guid)
{
	struct bds *n, *ds;
	uint64_t volsize = 0;
	uint32_t rs = 0;
	int h;

	for (unsigned i = 0; i < e->nds; i++)
		if (!strcmp(e->ds[i].name, name))
			return (int)i;
	h = coffer_ds_open(c, name, &volsize, &rs);
	if (h < 0) {
		char eb[64];

		fprintf(stderr, "coffer bench: open %s: %s\n", name, bench_errstr(h, eb, sizeof(eb)));
		return h;
	}
	coffer_ds_close(c, h);
	n = realloc(e->ds, (e->nds + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	e->ds = n;
	ds = &e->ds[e->nds];
	memset(ds, 0, sizeof(*ds));
	ds->name = strdup(name);
	if (!ds->name)
		return -ENOMEM;
	ds->volsize = volsize;
	ds->recordsize = rs ? rs : 8192;
	verify_guid(name, guid, ds->guid);
	if (e->verify) {
		int ret = verify_ds_new(name, ds->guid, ds->recordsize, volsize / ds->recordsize,
					&ds->v);
		if (ret < 0) {
			free(ds->name);
			fprintf(stderr, "coffer bench: %s: cannot validate (recordsize %u, "
				"volsize %" PRIu64 ")\n", name, ds->recordsize, volsize);
			return ret;
		}
	}
	return (int)e->nds++;
}

/* Expand every sd glob against the daemon's dataset list. */
static int match_sds(struct engine *e, struct coffer_conn *c, const struct bench_plan *pl,
		     struct sdmatch *m)
{
	json_t *reply = NULL, *arr;
	char err[256];
	size_t i;
	json_t *it;
	int ret;
	json_t *args = json_pack("{s:[s,s]}", "props", "volsize", "guid");

	ret = coffer_call(c, "ds_list", args, &reply, err, sizeof(err));
	json_decref(args);
	if (ret < 0) {
		fprintf(stderr, "coffer bench: ds_list: %s\n", err[0] ? err : strerror(-ret));
		return ret;
	}
	arr = json_object_get(reply, "datasets");
	for (unsigned s = 0; s < pl->nsd; s++) {
		m[s].idx = calloc(json_array_size(arr) + 1, sizeof(unsigned));
		if (!m[s].idx) {
			ret = -ENOMEM;
			goto out;
		}
		json_array_foreach(arr, i, it) {
			const char *name = json_string_value(json_object_get(it, "name"));
			json_t *props = json_object_get(it, "props");
			const char *guid = json_string_value(json_object_get(it, "guid"));

			if (!guid)
				guid = json_string_value(json_object_get(props, "guid"));
			if (!name || fnmatch(pl->sd[s].dataset, name, FNM_PATHNAME))
				continue;
			/* a pool's root dataset has no volume to load */
			if (!strcmp(json_string_value(json_object_get(props, "volsize")) ?: "", "0"))
				continue;
			ret = add_dataset(e, c, name, guid);
			if (ret < 0)
				goto out;
			m[s].idx[m[s].n++] = (unsigned)ret;
		}
		if (!m[s].n) {
			fprintf(stderr, "coffer bench: sd=%s: no dataset matches '%s'\n",
				pl->sd[s].name, pl->sd[s].dataset);
			ret = -ENOENT;
			goto out;
		}
	}
	ret = 0;
out:
	json_decref(reply);
	return ret;
}

static int find_daemon_pid(struct coffer_conn *c)
{
	static const char *const cmds[] = { "version", "stats" };
	struct ucred cred;
	socklen_t len = sizeof(cred);

	for (unsigned i = 0; i < 2; i++) {
		json_t *reply = NULL;
		json_int_t pid;

		if (coffer_call(c, cmds[i], NULL, &reply, NULL, 0) < 0)
			continue;
		pid = json_integer_value(json_object_get(reply, "pid"));
		json_decref(reply);
		if (pid > 0)
			return (int)pid;
	}
	/* the peer of a Unix socket is the daemon itself */
	if (getsockopt(coffer_fd(c), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.pid > 0)
		return cred.pid;
	return 0;
}

/*
 * -vr: the journal's datasets come first, then a pass that reads every
 * record the journal knows and checks it. Returns a plan for that pass.
 */
static int recover_plan(struct engine *e, struct coffer_conn *c, const char *journal,
			struct bench_plan **out, struct sdmatch **mout)
{
	struct verify_ds **j = NULL;
	unsigned nj = 0;
	char *text = NULL, err[300];
	size_t len = 0;
	FILE *f = NULL;
	struct sdmatch *m = NULL;
	int ret;

	*out = NULL;
	ret = verify_journal_load(journal, &j, &nj);
	if (ret < 0) {
		fprintf(stderr, "coffer bench: journal %s: %s\n", journal,
			ret == -EBADMSG ? "not a journal or damaged" : strerror(-ret));
		return ret;
	}
	f = open_memstream(&text, &len);
	if (!f) {
		ret = -ENOMEM;
		goto out;
	}
	for (unsigned i = 0; i < nj; i++) {
		int idx = add_dataset(e, c, j[i]->name, NULL);
		struct bds *ds;

		if (idx < 0) {
			ret = idx;
			goto out;
		}
		ds = &e->ds[idx];
		if (ds->v->unit != j[i]->unit || ds->v->nunits != j[i]->nunits) {
			fprintf(stderr, "coffer bench: %s: recordsize or volsize differs from the "
				"journal\n", ds->name);
			ret = -EINVAL;
			goto out;
		}
		memcpy(ds->guid, j[i]->guid, 16);
		memcpy(ds->v->guid, j[i]->guid, 16);
		memcpy(ds->v->gen, j[i]->gen, j[i]->nunits * sizeof(uint32_t));
		for (uint64_t u = 0; u < j[i]->nunits; u++)
			if (j[i]->gen[u] != VERIFY_GEN_UNKNOWN && j[i]->gen[u] > ds->next_gen)
				ds->next_gen = j[i]->gen[u];
		fprintf(f, "sd=j%u,dataset=%s,threads=8\nwd=jw%u,sd=j%u,rdpct=100,seekpct=eof,"
			"xfersize=%u\n", i, ds->name, i, i, ds->recordsize);
	}
	fprintf(f, "rd=verify,wd=jw*,iorate=max,elapsed=100h,interval=1\n");
	fclose(f);
	f = NULL;
	ret = bench_plan_parse_text(journal, text, out, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "coffer bench: %s\n", err);
		goto out;
	}
	m = calloc((*out)->nsd, sizeof(*m));
	if (!m) {
		ret = -ENOMEM;
		goto out;
	}
	for (unsigned s = 0; s < (*out)->nsd; s++) {
		m[s].idx = calloc(1, sizeof(unsigned));
		if (!m[s].idx) {
			ret = -ENOMEM;
			goto out;
		}
		for (unsigned d = 0; d < e->nds; d++)
			if (!strcmp(e->ds[d].name, (*out)->sd[s].dataset))
				m[s].idx[m[s].n++] = d;
	}
	*mout = m;
	m = NULL;
out:
	if (f)
		fclose(f);
	free(text);
	for (unsigned i = 0; i < nj; i++)
		verify_ds_free(j[i]);
	free(j);
	if (m) {
		for (unsigned s = 0; s < (*out)->nsd; s++)
			free(m[s].idx);
		free(m);
	}
	if (ret < 0) {
		bench_plan_free(*out);
		*out = NULL;
	}
	return ret;
}

/* -s, --parse-only: what the plan would run, checked, without a daemon (vdbench -s). */
static void plan_print(const struct bench_plan *pl)
{
	static const char *const rate[] = { "max", "fixed", "curve" };
	char a[32], b[32];

	if (!pl) {
		printf("nothing to run but the check of the journal\n");
		return;
	}
	for (unsigned i = 0; i < pl->nsd; i++) {
		const struct bench_sd *sd = &pl->sd[i];

		stor_format_size(sd->size, a, sizeof(a));
		stor_format_size(sd->hitarea, b, sizeof(b));
		printf("sd=%s dataset=%s threads=%u size=%s hitarea=%s\n", sd->name, sd->dataset,
		       sd->threads, sd->size ? a : "all", sd->hitarea ? b : "of the wd");
	}
	for (unsigned i = 0; i < pl->nwd; i++) {
		const struct bench_wd *wd = &pl->wd[i];

		stor_format_size(wd->xfer[0].size, a, sizeof(a));
		if (wd->eof)
			snprintf(b, sizeof(b), "eof");
		else
			snprintf(b, sizeof(b), "%g", wd->seekpct);
		printf("wd=%s on %u sd rdpct=%g seekpct=%s xfersize=%s%s\n", wd->name, wd->nsd,
		       wd->rdpct, b, a, wd->nxfer > 1 ? " (a distribution)" : "");
	}
	for (unsigned i = 0; i < pl->nrun; i++) {
		const struct bench_run *r = &pl->run[i];

		printf("run %s (rd=%s) ", r->name, r->rd);
		/* the label names the rate when the rd sets one */
		if (!r->label || !strstr(r->label, "iorate"))
			printf("iorate=%s ", rate[r->rate_kind]);
		if (r->label && r->label[0])
			printf("%s ", r->label);
		printf("elapsed=%gs interval=%gs warmup=%gs\n", r->elapsed, r->interval, r->warmup);
	}
	printf("%u runs\n", pl->nrun);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: coffer bench [options] PARAMFILE\n"
		"       coffer bench --datasets GLOB [--rw randread|randwrite|read|write|randrw]\n"
		"                    [--bs 8k] [--qd N] [--time 30s] [--rate max|N|curve]\n"
		"                    [--curve 95,90,...] [--warmup 5s] [--rdpct N] [--interval 1]\n"
		"options: --json FILE  --csv FILE  -v [--journal FILE]  -vr JOURNAL\n"
		"         --socket PATH  --daemon-pid PID  --threads N  -q\n"
		"See coffer-bench(8).\n");
}

static int run_plan(struct engine *e, const struct bench_plan *pl, const struct sdmatch *m)
{
	double *base = calloc(pl->nrun, sizeof(*base));
	int ret = 0;

	if (!base)
		return -ENOMEM;
	for (unsigned i = 0; i < pl->nrun && !atomic_load(&interrupted); i++) {
		json_t *jr = NULL;

		ret = run_one(e, pl, i, m, base, &jr);
		if (jr)
			json_array_append_new(e->jruns, jr);
		if (ret < 0)
			break;
	}
	free(base);
	return ret;
}

int bench_main(int argc, char **argv)
{
	struct bench_args a;
	struct bench_plan *plan = NULL, *rplan = NULL;
	struct sdmatch *m = NULL, *rm = NULL;
	struct engine e = { 0 };
	struct coffer_conn *admin = NULL;
	struct sigaction sa = { 0 };
	char err[512];
	int ret, status = 1;

	pthread_mutex_init(&e.rep_lock, NULL);
	ret = bench_args_parse(argc, argv, &a, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "coffer bench: %s\n", err);
		usage(stderr);
		return 2;
	}
	if (a.help) {
		usage(stdout);
		return 0;
	}
	if (a.file)
		ret = bench_plan_parse_file(a.file, &plan, err, sizeof(err));
	else if (a.datasets)
		ret = bench_plan_from_args(&a, &plan, err, sizeof(err));
	if (ret < 0) {
		fprintf(stderr, "coffer bench: %s\n", err);
		return 2;
	}
	for (unsigned i = 0; plan && i < plan->nnotes; i++)
		fprintf(stderr, "coffer bench: note: %s\n", plan->notes[i]);
	if (a.parse_only) {
		plan_print(plan);
		bench_plan_free(plan);
		pthread_mutex_destroy(&e.rep_lock);
		return 0;
	}
	e.a = &a;
	e.verify = a.verify;
	e.sock = coffer_socket_path(a.socket);
	e.jruns = json_array();
	e.jerrors = json_array();
	if (!e.jruns || !e.jerrors) {
		ret = -ENOMEM;
		goto out;
	}
	if (a.csv && bench_csv_open(&e, a.csv) < 0)
		goto out;
	ret = coffer_connect(e.sock, &admin);
	if (ret < 0) {
		fprintf(stderr, "coffer bench: connect %s: %s (is cofferd running?)\n", e.sock,
			strerror(-ret));
		goto out;
	}
	e.daemon_pid = a.daemon_pid ? a.daemon_pid : find_daemon_pid(admin);
	sa.sa_handler = on_sigint;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	if (a.recover) {
		ret = recover_plan(&e, admin, a.journal, &rplan, &rm);
		if (ret < 0)
			goto out;
	}
	if (plan) {
		m = calloc(plan->nsd, sizeof(*m));
		if (!m) {
			ret = -ENOMEM;
			goto out;
		}
		ret = match_sds(&e, admin, plan, m);
		if (ret < 0)
			goto out;
	}
	if (rplan) {
		printf("Validating every record of journal %s\n", a.journal);
		e.total_only = true;
		ret = run_plan(&e, rplan, rm);
		e.total_only = false;
		if (ret < 0)
			goto out;
	}
	if (plan)
		ret = run_plan(&e, plan, m);
out:
	if (e.verify && e.nds && (plan || rplan)) {
		struct verify_ds **v = calloc(e.nds, sizeof(*v));
		const char *jpath = a.journal ? a.journal : "coffer-bench.journal";
		int jr;

		for (unsigned i = 0; v && i < e.nds; i++)
			v[i] = e.ds[i].v;
		jr = v ? verify_journal_save(jpath, v, e.nds) : -ENOMEM;
		if (jr < 0) {
			fprintf(stderr, "coffer bench: journal %s: %s\n", jpath, strerror(-jr));
			ret = ret < 0 ? ret : jr;
		}
		free(v);
	}
	if (e.verify && e.nds)
		printf("validation: %" PRIu64 " errors\n", e.total_verrors);
	if (a.json && e.jruns && bench_report_json(&e, a.json) < 0)
		ret = ret < 0 ? ret : -EIO;
	if (ret == 0 && !e.total_errors && !e.total_verrors && !atomic_load(&interrupted))
		status = 0;
	json_decref(e.jruns);
	json_decref(e.jerrors);
	if (e.csv)
		fclose(e.csv);
	coffer_close(admin);
	for (unsigned s = 0; m && s < plan->nsd; s++)
		free(m[s].idx);
	for (unsigned s = 0; rm && s < rplan->nsd; s++)
		free(rm[s].idx);
	free(m);
	free(rm);
	for (unsigned i = 0; i < e.nds; i++) {
		free(e.ds[i].name);
		verify_ds_free(e.ds[i].v);
	}
	free(e.ds);
	bench_plan_free(plan);
	bench_plan_free(rplan);
	pthread_mutex_destroy(&e.rep_lock);
	return status;
}
