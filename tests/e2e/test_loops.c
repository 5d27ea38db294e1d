// SPDX-License-Identifier: MIT
/*
 * E2E: cofferd with four event loops under load from every side at once.
 * Each loop owns its connections, their handle tables and its completion
 * queue from the shared I/O workers, so what one loop does must never
 * reach a connection of another: writers on every loop each keep their own
 * records of an encrypted dataset while a forced unload-key of another
 * dataset revokes handles on every loop (each loop walks its own clients,
 * the revocation waits for all of them); connections spread over the
 * loops are all answered and the per-uid limit still counts them as one;
 * and a SIGTERM with pipelined writes in flight on every loop stops
 * cleanly and keeps every write it acknowledged.
 *
 * Threads do the clients' work, one connection each, and say what went
 * wrong in `trouble`; the test thread asserts after joining them. Every
 * wait is for an event with a generous deadline; a daemon that stops
 * answering is caught by a watchdog, which takes its threads' stacks (gdb)
 * and kills it so that the blocked clients return and the test fails.
 */

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "client.h"
#include "daemon.h"
#include "proto.h"
#include "store.h"

enum {
	RECORD = 8192,                   /* the datasets' recordsize: one write is one record */
	WAIT_MS = TDAEMON_WAIT_S * 1000, /* for one reply */
	STUCK_S = 2 * TDAEMON_WAIT_S,    /* the test thread made no progress: the daemon hangs */
};

static struct tdaemon td;
static char out[65536];

static void teardown(void)
{
	tdaemon_teardown(&td);
}

TestSuite(loops, .fini = teardown, .timeout = 1800);

#define COF_OK(...) TDAEMON_COF_OK(&td, out, NULL, __VA_ARGS__)
#define STR_(x) #x
#define STR(x) STR_(x)

static void start(const char *extra)
{
	tdaemon_init(&td, extra);
	tdaemon_start_ok(&td);
}

/* ---- what went wrong, from any thread ---- */

static struct {
	pthread_mutex_t lock;
	char why[2048];
	atomic_int failed;
} trouble = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Only the first complaint is kept: the later ones are usually its echo. */
__attribute__((format(printf, 1, 2))) static void trouble_say(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&trouble.lock);
	if (!atomic_load(&trouble.failed)) {
		va_start(ap, fmt);
		vsnprintf(trouble.why, sizeof(trouble.why), fmt, ap);
		va_end(ap);
		atomic_store(&trouble.failed, 1);
	}
	pthread_mutex_unlock(&trouble.lock);
}

static bool in_trouble(void)
{
	return atomic_load(&trouble.failed);
}

/* Condition variables on CLOCK_MONOTONIC, which tdaemon_deadline() reads too. */
static void cond_init(pthread_cond_t *cond)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(cond, &a);
	pthread_condattr_destroy(&a);
}

/* Wait on @cond until woken or @ms have passed (so that the caller looks at its deadline). */
static void cond_wait_ms(pthread_cond_t *cond, pthread_mutex_t *lock, int ms)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(cond, lock, &ts);
}

/* ---- a daemon that stops answering ---- */

static struct {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	double last; /* when the test thread last made progress */
	int done, fired;
	char stacks[8192]; /* the daemon's threads when it was found stuck (gdb) */
} dog = { .lock = PTHREAD_MUTEX_INITIALIZER };

/*
 * The daemon is stuck: keep where its threads are and kill it, so that
 * every client blocked on it gets an error and the test can fail. Once.
 */
static void daemon_stuck(const char *what)
{
	char cmd[4096];
	FILE *f;
	size_t n;

	pthread_mutex_lock(&dog.lock);
	if (dog.fired || td.pid <= 0) {
		pthread_mutex_unlock(&dog.lock);
		return;
	}
	dog.fired = 1;
	pthread_mutex_unlock(&dog.lock);
	trouble_say("%s", what);
	snprintf(cmd, sizeof(cmd),
		 "timeout 120 gdb -p %d -batch -ex 'thread apply all bt' 2>&1 | "
		 "grep -E '^(Thread|#)' | tail -c 8000 > '%s/stuck.txt'",
		 (int)td.pid, td.dir);
	if (system(cmd) != 0)
		fprintf(stderr, "gdb on cofferd failed\n");
	f = fopen(tdaemon_path(&td, "stuck.txt"), "r");
	if (f) {
		n = fread(dog.stacks, 1, sizeof(dog.stacks) - 1, f);
		dog.stacks[n] = '\0';
		fclose(f);
	}
	kill(td.pid, SIGKILL);
}

static void *dog_run(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&dog.lock);
	while (!dog.done) {
		if (tdaemon_deadline(0) - dog.last > STUCK_S) {
			pthread_mutex_unlock(&dog.lock);
			daemon_stuck("no progress for a long time: the daemon stopped answering");
			return NULL;
		}
		cond_wait_ms(&dog.cond, &dog.lock, 1000);
	}
	pthread_mutex_unlock(&dog.lock);
	return NULL;
}

static void dog_pet(void)
{
	pthread_mutex_lock(&dog.lock);
	dog.last = tdaemon_deadline(0);
	pthread_mutex_unlock(&dog.lock);
}

static void dog_start(void)
{
	cond_init(&dog.cond);
	dog.done = dog.fired = 0;
	dog.stacks[0] = '\0';
	dog_pet();
	cr_assert_eq(pthread_create(&dog.thread, NULL, dog_run, NULL), 0);
}

static void dog_stop(void)
{
	pthread_mutex_lock(&dog.lock);
	dog.done = 1;
	pthread_cond_broadcast(&dog.cond);
	pthread_mutex_unlock(&dog.lock);
	pthread_join(dog.thread, NULL);
}

/*
 * The end of the daemon's log without the opens and closes of tank/b's
 * readers, which would fill any tail: what is left says what the loops
 * and the revocations did.
 */
static const char *log_story(void)
{
	static char buf[12288];
	static char lines[256][512];
	FILE *f = fopen(td.log, "r");
	unsigned n = 0;
	size_t at = 0;

	buf[0] = '\0';
	if (!f)
		return buf;
	while (fgets(lines[n % 256], sizeof(lines[0]), f)) {
		const char *l = lines[n % 256];

		if (!strstr(l, ": ds_open {") && !strstr(l, ": ds_close {"))
			n++;
	}
	fclose(f);
	for (unsigned i = n > 256 ? n - 256 : 0; i < n; i++) {
		size_t len = strlen(lines[i % 256]);

		if (at + len >= sizeof(buf)) {
			/* the newest lines matter most: drop the oldest kept */
			size_t cut = at + len - sizeof(buf) + 1;
			char *nl = memchr(buf + cut, '\n', at - cut);

			cut = nl ? (size_t)(nl + 1 - buf) : at;
			memmove(buf, buf + cut, at - cut);
			at -= cut;
		}
		memcpy(buf + at, lines[i % 256], len);
		at += len;
		buf[at] = '\0';
	}
	return buf;
}

/* After the joins: fail with what the threads saw, the daemon's stacks if it hung, its log. */
static void assert_no_trouble(void)
{
	if (dog.fired && td.pid > 0) {
		waitpid(td.pid, NULL, 0);
		td.pid = -1; /* killed: nothing for the teardown to stop */
	}
	cr_assert(!in_trouble(),
		  "%s\n%s%s\ndaemon log (its end, without the opens and closes of datasets):\n%s",
		  trouble.why, dog.fired ? "the daemon's threads when it was found stuck:\n" : "",
		  dog.stacks, log_story());
}

/* ---- records that say who wrote them ---- */

static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The first word names the writer, the record and the generation; the rest follows from it. */
static void pattern_fill(void *buf, unsigned who, unsigned rec, unsigned gen)
{
	uint64_t *w = buf, stamp = (uint64_t)who << 48 | (uint64_t)rec << 24 | gen;

	w[0] = stamp;
	for (size_t i = 1; i < RECORD / 8; i++)
		w[i] = mix(stamp + i);
}

static bool pattern_is(const void *buf, unsigned who, unsigned rec, unsigned gen)
{
	uint64_t want[RECORD / 8];

	pattern_fill(want, who, rec, gen);
	return !memcmp(buf, want, RECORD);
}

static bool is_zero(const void *buf)
{
	const uint64_t *w = buf;

	for (size_t i = 0; i < RECORD / 8; i++)
		if (w[i])
			return false;
	return true;
}

/* What a record holds, in words, for a failure message. */
static const char *pattern_say(const void *buf, char *s, size_t cap)
{
	uint64_t stamp = *(const uint64_t *)buf;
	unsigned who = (unsigned)(stamp >> 48), rec = (unsigned)(stamp >> 24) & 0xffffff,
		 gen = (unsigned)stamp & 0xffffff;

	if (is_zero(buf))
		snprintf(s, cap, "zeros");
	else
		snprintf(s, cap, "writer %u's record %u of generation %u%s", who, rec, gen,
			 pattern_is(buf, who, rec, gen) ? "" : " (torn: the rest is not its own)");
	return s;
}

/* ---- record I/O with deadlines ---- */

struct req {
	enum coffer_op op;
	uint64_t off;
	void *buf;
	int status;
};

/*
 * @n (at most 64) requests on handle @h in flight together, ids 0..n-1,
 * each one's status into its req. @return 0, the connection's -errno, or
 * -ETIMEDOUT when a reply is overdue
 */
static int io_batch(struct coffer_conn *c, int h, struct req *r, int n)
{
	struct coffer_completion cc[64];
	int done = 0, ret;

	for (int i = 0; i < n; i++) {
		uint32_t len = r[i].op == COFFER_FLUSH ? 0 : RECORD;

		r[i].status = 1; /* no reply yet */
		ret = coffer_submit(c, (uint32_t)i, r[i].op, h, r[i].off, len, r[i].buf);
		if (ret < 0)
			return ret;
	}
	ret = coffer_flush_out(c);
	if (ret < 0)
		return ret;
	while (done < n) {
		ret = coffer_reap(c, cc, 64, WAIT_MS);
		if (ret < 0)
			return ret;
		if (ret == 0) {
			daemon_stuck("a reply to record I/O overdue by " STR(TDAEMON_WAIT_S) " s");
			return -ETIMEDOUT;
		}
		for (int i = 0; i < ret; i++)
			r[cc[i].id].status = cc[i].status;
		done += ret;
	}
	return 0;
}

/* One request. @return its status, or what io_batch() returned */
static int io_one(struct coffer_conn *c, int h, enum coffer_op op, uint64_t off, void *buf)
{
	struct req r = { .op = op, .off = off, .buf = buf };
	int ret = io_batch(c, h, &r, 1);

	return ret < 0 ? ret : r.status;
}

/* Does a thread of the daemon carry @name (its comm, as top -H shows it)? */
static bool has_thread(const char *name)
{
	char path[64], comm[32];
	struct dirent *e;
	bool found = false;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)td.pid);
	d = opendir(path);
	cr_assert_not_null(d, "%s: %s", path, strerror(errno));
	while (!found && (e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/comm", (int)td.pid, e->d_name);
		f = fopen(path, "r");
		if (f && fgets(comm, sizeof(comm), f))
			found = strcspn(comm, "\n") == strlen(name) && !strncmp(comm, name, strlen(name));
		if (f)
			fclose(f);
	}
	closedir(d);
	return found;
}

static struct coffer_conn *connect_ok(void)
{
	struct coffer_conn *c = NULL;
	int ret = coffer_connect(td.sock, &c);

	cr_assert_eq(ret, 0, "connect: %s\n%s", proto_strerror(ret), tdaemon_log(&td));
	return c;
}

/*
 * Read @nrec records from @first of @ds through a fresh connection and
 * check each with @check, which says what is wrong (NULL: nothing).
 */
static void read_back(const char *ds, unsigned first, unsigned nrec,
		      const char *(*check)(const void *buf, unsigned rec, void *arg, char *why,
					   size_t cap),
		      void *arg)
{
	static uint8_t buf[32][RECORD];
	struct coffer_conn *c = connect_ok();
	int h = coffer_ds_open(c, ds, NULL, NULL);

	cr_assert_geq(h, 0, "open %s: %s\n%s", ds, proto_strerror(h), tdaemon_log(&td));
	for (unsigned r0 = 0; r0 < nrec; r0 += 32) {
		unsigned n = nrec - r0 < 32 ? nrec - r0 : 32;
		struct req q[32];
		int ret;

		for (unsigned k = 0; k < n; k++)
			q[k] = (struct req){ .op = COFFER_READ,
					     .off = (uint64_t)(first + r0 + k) * RECORD,
					     .buf = buf[k] };
		ret = io_batch(c, h, q, (int)n);
		cr_assert_eq(ret, 0, "reading %s back: %s\n%s", ds, proto_strerror(ret),
			     tdaemon_log(&td));
		for (unsigned k = 0; k < n; k++) {
			char why[512];
			const char *bad;

			cr_assert_eq(q[k].status, 0, "%s record %u: %s", ds, first + r0 + k,
				     proto_strerror(q[k].status));
			bad = check(buf[k], first + r0 + k, arg, why, sizeof(why));
			cr_assert_null(bad, "%s record %u: %s\ndaemon log (its end):\n%s", ds,
				       first + r0 + k, bad, tdaemon_log(&td));
		}
	}
	coffer_close(c);
}

/*
 * The lines of the daemon's log (all of it, not the tail) that contain
 * @what and, unless @at_least_n is 0, a count of at least that right after.
 */
static unsigned log_count(const char *what, unsigned at_least_n)
{
	FILE *f = fopen(td.log, "r");
	char line[4096];
	unsigned n = 0;

	cr_assert_not_null(f, "%s", td.log);
	while (fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, what);
		unsigned v;

		/* "dataset tank/b: 4 handles revoked": @what ends before the count */
		if (p && (!at_least_n ||
			  (sscanf(p + strlen(what), "%u", &v) == 1 && v >= at_least_n)))
			n++;
	}
	fclose(f);
	return n;
}

/* ======== 1. writers on every loop beside a forced unload-key ======== */

enum {
	WRITERS = 8,         /* two per loop: the least-loaded choice spreads them */
	WRITER_RECS = 16,    /* each writer's own records of tank/a */
	WRITE_BATCH = 4,     /* writes in flight together, then a FLUSH */
	MIN_ROUNDS = 6,      /* generations every writer completes, more while keys cycle */
	HOLDERS = 4,         /* tank/b readers the control waits for each cycle: one per loop */
	ROAMERS = 2,         /* tank/b readers that open and close at any time */
	KEY_CYCLES = 12,     /* forced unload and load of tank/b */
	B_RECS = 128,        /* tank/b's records, written once before the load starts */
	B_WHO = 0xb0,
};

/* The writers of tank/a keep going until the key cycles are done too. */
static atomic_int cycles_done;

struct writer {
	pthread_t thread;
	struct coffer_conn *c;
	unsigned who;
	unsigned gen; /* the last generation written, flushed and read back whole */
};

static unsigned writer_first(unsigned who)
{
	return (who - 1) * WRITER_RECS;
}

/*
 * Generations of its records, a FLUSH after every few writes, then each
 * read back: another loop's completion delivered here, or a write of
 * another connection landing on these records, shows as a wrong pattern.
 */
static void *writer_run(void *arg)
{
	struct writer *w = arg;
	uint8_t(*wbuf)[RECORD] = malloc((size_t)WRITER_RECS * RECORD);
	uint8_t(*rbuf)[RECORD] = malloc((size_t)WRITER_RECS * RECORD);
	unsigned first = writer_first(w->who);
	int h = coffer_ds_open(w->c, "tank/a", NULL, NULL);

	if (!wbuf || !rbuf) {
		trouble_say("writer %u: out of memory", w->who);
		goto out;
	}
	if (h < 0) {
		trouble_say("writer %u: open tank/a: %s", w->who, proto_strerror(h));
		goto out;
	}
	for (unsigned gen = 1; !in_trouble() && (gen <= MIN_ROUNDS || !atomic_load(&cycles_done));
	     gen++) {
		struct req q[WRITER_RECS];
		int ret;

		for (unsigned r0 = 0; r0 < WRITER_RECS; r0 += WRITE_BATCH) {
			for (unsigned k = 0; k < WRITE_BATCH; k++) {
				unsigned rec = first + r0 + k;

				pattern_fill(wbuf[r0 + k], w->who, rec, gen);
				q[k] = (struct req){ .op = COFFER_WRITE,
						     .off = (uint64_t)rec * RECORD,
						     .buf = wbuf[r0 + k] };
			}
			ret = io_batch(w->c, h, q, WRITE_BATCH);
			for (unsigned k = 0; k < WRITE_BATCH && ret == 0; k++)
				ret = q[k].status;
			/* a FLUSH covers the writes that completed before it: so after them */
			if (ret == 0)
				ret = io_one(w->c, h, COFFER_FLUSH, 0, NULL);
			if (ret != 0) {
				trouble_say("writer %u, generation %u: write or flush of records "
					    "%u..%u: %s",
					    w->who, gen, first + r0, first + r0 + WRITE_BATCH - 1,
					    proto_strerror(ret));
				goto out;
			}
		}
		for (unsigned k = 0; k < WRITER_RECS; k++)
			q[k] = (struct req){ .op = COFFER_READ,
					     .off = (uint64_t)(first + k) * RECORD,
					     .buf = rbuf[k] };
		ret = io_batch(w->c, h, q, WRITER_RECS);
		for (unsigned k = 0; k < WRITER_RECS; k++) {
			char s[160];

			if (ret == 0 && q[k].status != 0)
				ret = q[k].status;
			if (ret != 0) {
				trouble_say("writer %u, generation %u: reading back: %s", w->who,
					    gen, proto_strerror(ret));
				goto out;
			}
			if (!pattern_is(rbuf[k], w->who, first + k, gen)) {
				trouble_say("writer %u, generation %u: record %u reads back as %s",
					    w->who, gen, first + k,
					    pattern_say(rbuf[k], s, sizeof(s)));
				goto out;
			}
		}
		w->gen = gen;
	}
out:
	free(wbuf);
	free(rbuf);
	return NULL;
}

/*
 * One cycle of tank/b's key, in step with its holders: each holds a handle
 * that has read B; the control unloads the key with -f, waits until every
 * holder has seen -ESTALE and closed its handle, loads the key, and the
 * next epoch begins.
 */
static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned epoch;   /* bumped once B's key is loaded again */
	int unloaded;     /* the forced unload of this epoch has replied */
	unsigned holding; /* holders whose handle of this epoch read B correctly */
	unsigned revoked; /* holders that saw -ESTALE on it and closed it */
	int stop;
} kc = { .lock = PTHREAD_MUTEX_INITIALIZER };

struct reader {
	pthread_t thread;
	struct coffer_conn *c;
	unsigned idx;
	unsigned seed;
	/* what a roamer met */
	unsigned long good, stale, nokey;
};

static bool kc_stopping(void)
{
	bool s;

	pthread_mutex_lock(&kc.lock);
	s = kc.stop;
	pthread_mutex_unlock(&kc.lock);
	return s || in_trouble();
}

/* Read record @rec of tank/b on @h and check it. @return the status (0: it was B's) */
static int read_b(struct reader *r, int h, unsigned rec, const char *who)
{
	uint8_t buf[RECORD];
	char s[160];
	int ret = io_one(r->c, h, COFFER_READ, (uint64_t)rec * RECORD, buf);

	if (ret == 0 && !pattern_is(buf, B_WHO, rec, 1)) {
		trouble_say("%s %u: tank/b record %u reads as %s", who, r->idx, rec,
			    pattern_say(buf, s, sizeof(s)));
		return -EIO;
	}
	return ret;
}

static void *holder_run(void *arg)
{
	struct reader *r = arg;
	unsigned epoch = 0;

	while (!kc_stopping()) {
		int h = coffer_ds_open(r->c, "tank/b", NULL, NULL), ret, unloaded;

		if (h < 0) {
			trouble_say("holder %u, epoch %u: open tank/b: %s", r->idx, epoch,
				    proto_strerror(h));
			return NULL;
		}
		ret = read_b(r, h, (unsigned)rand_r(&r->seed) % B_RECS, "holder");
		if (ret != 0) {
			trouble_say("holder %u, epoch %u: the first read with the key loaded: %s",
				    r->idx, epoch, proto_strerror(ret));
			return NULL;
		}
		pthread_mutex_lock(&kc.lock);
		kc.holding++;
		pthread_cond_broadcast(&kc.cond);
		pthread_mutex_unlock(&kc.lock);
		/* reads until the revocation shows; once unload-key -f has replied, it must */
		for (;;) {
			if (kc_stopping())
				return NULL;
			pthread_mutex_lock(&kc.lock);
			unloaded = kc.unloaded;
			pthread_mutex_unlock(&kc.lock);
			ret = read_b(r, h, (unsigned)rand_r(&r->seed) % B_RECS, "holder");
			if (ret == -ESTALE)
				break;
			if (ret != 0) {
				trouble_say("holder %u, epoch %u: read on a handle open since "
					    "before the unload: %s (%d), not -ESTALE",
					    r->idx, epoch, proto_strerror(ret), ret);
				return NULL;
			}
			if (unloaded) {
				trouble_say("holder %u, epoch %u: a read succeeded on a handle "
					    "after unload-key -f replied: it was not revoked",
					    r->idx, epoch);
				return NULL;
			}
		}
		/* the number stays taken and failing until its owner closes it */
		ret = read_b(r, h, 0, "holder");
		if (ret != -ESTALE) {
			trouble_say("holder %u, epoch %u: the next read on the revoked handle: %s",
				    r->idx, epoch, proto_strerror(ret));
			return NULL;
		}
		ret = coffer_ds_close(r->c, h);
		if (ret == 0)
			ret = read_b(r, h, 0, "holder") == -EBADF ? 0 : -EEXIST;
		if (ret != 0) {
			trouble_say("holder %u, epoch %u: closing the revoked handle: %s", r->idx,
				    epoch,
				    ret == -EEXIST ? "its number still answers"
						   : proto_strerror(ret));
			return NULL;
		}
		pthread_mutex_lock(&kc.lock);
		kc.revoked++;
		pthread_cond_broadcast(&kc.cond);
		while (kc.epoch == epoch && !kc.stop && !in_trouble())
			cond_wait_ms(&kc.cond, &kc.lock, 200);
		epoch = kc.epoch;
		pthread_mutex_unlock(&kc.lock);
	}
	return NULL;
}

/*
 * Opens and closes tank/b out of step with the key: its opens land before,
 * during and after revocations. A handle opened while the key is away
 * reads STOR_ENOKEY (libstore's forced unload leaves it valid); one open
 * when the revocation came reads -ESTALE; nothing else.
 */
static void *roamer_run(void *arg)
{
	struct reader *r = arg;

	while (!kc_stopping()) {
		int h = coffer_ds_open(r->c, "tank/b", NULL, NULL), ret = 0;
		unsigned epoch;

		if (h < 0) {
			trouble_say("roamer %u: open tank/b: %s", r->idx, proto_strerror(h));
			return NULL;
		}
		pthread_mutex_lock(&kc.lock);
		epoch = kc.epoch;
		pthread_mutex_unlock(&kc.lock);
		for (int i = 0; i < 8 && ret == 0; i++) {
			ret = read_b(r, h, (unsigned)rand_r(&r->seed) % B_RECS, "roamer");
			if (ret == 0)
				r->good++;
		}
		if (ret == -ESTALE) {
			r->stale++;
		} else if (ret == STOR_ENOKEY) {
			r->nokey++;
		} else if (ret != 0) {
			trouble_say("roamer %u: read tank/b: %s (%d)", r->idx, proto_strerror(ret),
				    ret);
			return NULL;
		}
		if (coffer_ds_close(r->c, h) != 0) {
			trouble_say("roamer %u: closing its handle failed", r->idx);
			return NULL;
		}
		/* no key: come back with the next one rather than spin on the refusal */
		pthread_mutex_lock(&kc.lock);
		while (ret == STOR_ENOKEY && kc.epoch == epoch && !kc.stop && !in_trouble())
			cond_wait_ms(&kc.cond, &kc.lock, 200);
		pthread_mutex_unlock(&kc.lock);
	}
	return NULL;
}

/* Wait until @pred holds (kc.lock held), the control's progress; false if it did not in time. */
static bool kc_wait(bool (*pred)(void), const char *what)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);
	bool ok;

	pthread_mutex_lock(&kc.lock);
	while (!(ok = pred()) && !in_trouble() && tdaemon_deadline(0) < end)
		cond_wait_ms(&kc.cond, &kc.lock, 200);
	pthread_mutex_unlock(&kc.lock);
	if (!ok && !in_trouble())
		daemon_stuck(what);
	dog_pet();
	return ok;
}

static bool all_holding(void)
{
	return kc.holding == HOLDERS;
}

static bool all_revoked(void)
{
	return kc.revoked == HOLDERS;
}

static const char *check_b(const void *buf, unsigned rec, void *arg, char *why, size_t cap)
{
	char s[160];

	(void)arg;
	if (pattern_is(buf, B_WHO, rec, 1))
		return NULL;
	snprintf(why, cap, "holds %s, not what was written before the key cycles",
		 pattern_say(buf, s, sizeof(s)));
	return why;
}

static const char *check_a(const void *buf, unsigned rec, void *arg, char *why, size_t cap)
{
	const struct writer *w = arg;
	const struct writer *mine = &w[rec / WRITER_RECS];
	char s[160];

	if (pattern_is(buf, mine->who, rec, mine->gen))
		return NULL;
	snprintf(why, cap, "holds %s, not writer %u's last generation %u",
		 pattern_say(buf, s, sizeof(s)), mine->who, mine->gen);
	return why;
}

/* @n bytes as 2 * @n hex digits into @s, which holds them and a NUL. */
static void hex_of(const uint8_t *b, size_t n, char *s)
{
	static const char digit[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		s[2 * i] = digit[b[i] >> 4];
		s[2 * i + 1] = digit[b[i] & 15];
	}
	s[2 * n] = '\0';
}

#define PASS_A "writers' passphrase\n"

/*
 * A forced unload-key is the one request that reaches into every loop's
 * handle tables; it must revoke the handles on all of them, wait for each
 * loop to drain, and leave the writers of another dataset on the same
 * loops untouched, cycle after cycle.
 */
Test(loops, writers_on_every_loop_and_a_key_unloaded_beside_them)
{
	static uint8_t bbuf[RECORD];
	struct writer w[WRITERS];
	struct reader rd[HOLDERS + ROAMERS];
	struct coffer_conn *ctl;
	uint8_t key_b[32];
	char key_b_hex[65];
	unsigned long good = 0, stale = 0, nokey = 0;
	unsigned rounds_min = ~0u;
	int h, ret;

	start("loops = 4\n");
	cond_init(&kc.cond);
	cr_assert_eq(getentropy(key_b, sizeof(key_b)), 0);
	hex_of(key_b, sizeof(key_b), key_b_hex);
	COF_OK("pool create -s 128M tank %s/l0 %s/l1", td.dir, td.dir);
	COF_OK("create -V 2M -b 8K -o encryption=aes-256-ccm -o keyformat=passphrase "
	       "-o pbkdf2iters=100000 -o keylocation=file://%s tank/a",
	       tdaemon_file(&td, "pass-a", PASS_A, strlen(PASS_A)));
	COF_OK("create -V 1M -b 8K -o encryption=aes-256-ccm -o keyformat=raw "
	       "-o keylocation=file://%s tank/b",
	       tdaemon_file(&td, "key-b", key_b, sizeof(key_b)));

	/* B's records, known before any reader comes */
	ctl = connect_ok();
	h = coffer_ds_open(ctl, "tank/b", NULL, NULL);
	cr_assert_geq(h, 0, "open tank/b: %s", proto_strerror(h));
	for (unsigned rec = 0; rec < B_RECS; rec++) {
		pattern_fill(bbuf, B_WHO, rec, 1);
		ret = io_one(ctl, h, COFFER_WRITE, (uint64_t)rec * RECORD, bbuf);
		cr_assert_eq(ret, 0, "write tank/b record %u: %s", rec, proto_strerror(ret));
	}
	cr_assert_eq(io_one(ctl, h, COFFER_FLUSH, 0, NULL), 0);
	cr_assert_eq(coffer_ds_close(ctl, h), 0);

	/* connected here one after the other, so the least-loaded choice spreads them */
	dog_start();
	for (unsigned i = 0; i < WRITERS; i++) {
		w[i] = (struct writer){ .c = connect_ok(), .who = i + 1 };
		cr_assert_eq(pthread_create(&w[i].thread, NULL, writer_run, &w[i]), 0);
	}
	for (unsigned i = 0; i < HOLDERS + ROAMERS; i++) {
		rd[i] = (struct reader){ .c = connect_ok(), .idx = i, .seed = 7919 * (i + 1) };
		cr_assert_eq(pthread_create(&rd[i].thread, NULL,
					    i < HOLDERS ? holder_run : roamer_run, &rd[i]),
			     0);
	}

	for (unsigned cycle = 0; cycle < KEY_CYCLES && !in_trouble(); cycle++) {
		json_t *args;
		char err[512];

		if (!kc_wait(all_holding, "the holders of tank/b never all got a good read"))
			break;
		args = json_pack("{s:s, s:b}", "name", "tank/b", "force", 1);
		ret = coffer_call(ctl, "key_unload", args, NULL, err, sizeof(err));
		json_decref(args);
		if (ret < 0) {
			trouble_say("cycle %u: unload-key -f tank/b: %s (%d)", cycle, err, ret);
			break;
		}
		pthread_mutex_lock(&kc.lock);
		kc.unloaded = 1;
		pthread_cond_broadcast(&kc.cond);
		pthread_mutex_unlock(&kc.lock);
		if (!kc_wait(all_revoked, "a holder of tank/b never saw its handle revoked"))
			break;
		args = json_pack("{s:s, s:s}", "name", "tank/b", "key_hex", key_b_hex);
		ret = coffer_call(ctl, "key_load", args, NULL, err, sizeof(err));
		json_decref(args);
		if (ret < 0) {
			trouble_say("cycle %u: load-key tank/b: %s (%d)", cycle, err, ret);
			break;
		}
		pthread_mutex_lock(&kc.lock);
		kc.epoch++;
		kc.unloaded = 0;
		kc.holding = kc.revoked = 0;
		pthread_cond_broadcast(&kc.cond);
		pthread_mutex_unlock(&kc.lock);
		dog_pet();
	}
	atomic_store(&cycles_done, 1);
	for (unsigned i = 0; i < WRITERS; i++) {
		pthread_join(w[i].thread, NULL);
		dog_pet();
	}
	pthread_mutex_lock(&kc.lock);
	kc.stop = 1;
	pthread_cond_broadcast(&kc.cond);
	pthread_mutex_unlock(&kc.lock);
	for (unsigned i = 0; i < HOLDERS + ROAMERS; i++) {
		pthread_join(rd[i].thread, NULL);
		if (i >= HOLDERS) {
			good += rd[i].good;
			stale += rd[i].stale;
			nokey += rd[i].nokey;
		}
	}
	dog_stop();
	for (unsigned i = 0; i < WRITERS; i++) {
		coffer_close(w[i].c);
		if (w[i].gen < rounds_min)
			rounds_min = w[i].gen;
	}
	for (unsigned i = 0; i < HOLDERS + ROAMERS; i++)
		coffer_close(rd[i].c);
	coffer_close(ctl);
	assert_no_trouble();
	cr_log_info("writers: at least %u generations each; roamers: %lu good reads, %lu -ESTALE, "
		    "%lu STOR_ENOKEY",
		    rounds_min, good, stale, nokey);
	cr_assert_geq(rounds_min, MIN_ROUNDS);
	cr_assert_gt(good, 0, "the roamers never read tank/b");

	/* each cycle revoked every holder's handle, wherever the least-loaded choice put it */
	cr_assert_geq(log_count("dataset tank/b: ", HOLDERS), KEY_CYCLES, "%s", tdaemon_log(&td));

	/* what stays: A as last written, B's key loads through the CLI and B as it was */
	read_back("tank/a", 0, WRITERS * WRITER_RECS, check_a, w);
	COF_OK("unload-key -f tank/b");
	COF_OK("get -H keystatus tank/b");
	cr_assert(strstr(out, "unavailable"), "%s", out);
	COF_OK("load-key tank/b");
	read_back("tank/b", 0, B_RECS, check_b, NULL);
	ctl = connect_ok();
	ret = coffer_call(ctl, "ping", NULL, NULL, NULL, 0);
	cr_assert_eq(ret, 0, "ping after the load: %s\n%s", proto_strerror(ret), tdaemon_log(&td));
	coffer_close(ctl);
	ret = tdaemon_stop(&td);
	cr_assert_eq(ret, 0, "cofferd exit %d after the load:\n%s", ret, tdaemon_log(&td));
}

/* ======== 2. connections over the loops, and the per-uid limit over them ======== */

enum { SPREAD = 12, PER_UID = 6, SPREAD_WRITES = 4 };

static long long stats_open(struct coffer_conn *c)
{
	json_t *r = NULL;
	long long n;
	int ret = coffer_call(c, "stats", NULL, &r, NULL, 0);

	cr_assert_eq(ret, 0, "stats: %s", proto_strerror(ret));
	n = (long long)json_integer_value(json_object_get(json_object_get(r, "io"),
							  "connections_open"));
	json_decref(r);
	return n;
}

static const char *check_spread(const void *buf, unsigned rec, void *arg, char *why, size_t cap)
{
	char s[160];

	(void)arg;
	if (pattern_is(buf, rec / SPREAD_WRITES + 1, rec, 1))
		return NULL;
	snprintf(why, cap, "holds %s", pattern_say(buf, s, sizeof(s)));
	return why;
}

/*
 * The main loop accepts and admits, the others serve: every connection is
 * answered wherever it landed, its completions come back to it alone, the
 * counters add up over the loops, and max_connections_per_uid counts the
 * connections of all loops, a slot freed on one loop is free for the next.
 */
Test(loops, connections_spread_and_limits_hold_over_loops)
{
	static uint8_t wbuf[SPREAD][SPREAD_WRITES][RECORD];
	struct coffer_conn *c[SPREAD], *extra = NULL;
	int h[SPREAD], ret;
	long long open;

	start("loops = 4\n");
	COF_OK("pool create -s 64M tank %s/l0", td.dir);
	COF_OK("create -V 1M -b 8K tank/v");
	for (int i = 0; i < SPREAD; i++)
		c[i] = connect_ok();

	/* a ping on each before any reply is read: every loop answers its own */
	for (int i = 0; i < SPREAD; i++) {
		uint8_t frame[PROTO_HDR_SIZE];

		proto_hdr_put(frame, &(struct proto_hdr){ .op = PROTO_OP_PING,
							  .req_id = 1000u + (uint32_t)i });
		cr_assert_eq(coffer_send_raw(c[i], frame, sizeof(frame)), 0);
	}
	for (int i = SPREAD - 1; i >= 0; i--) {
		struct proto_hdr rh;

		cr_assert_eq(coffer_recv_raw(c[i], &rh, out, sizeof(out), WAIT_MS), 1,
			     "connection %d: no reply to its ping\n%s", i, tdaemon_log(&td));
		cr_assert_eq(rh.req_id, 1000u + (uint32_t)i, "connection %d got reply %u", i,
			     rh.req_id);
		cr_assert_eq(rh.status, 0);
	}
	/* each thread says what it does (cofferd(8)): the loops that answered,
	 * the workers, the pool's commits */
	for (int i = 1; i < 4; i++) {
		char name[16];

		snprintf(name, sizeof(name), "cofferd-loop%d", i);
		cr_assert(has_thread(name), "no thread named %s", name);
	}
	cr_assert(has_thread("cofferd-io0"), "no thread named cofferd-io0");
	cr_assert(has_thread("txg:tank"), "no thread named txg:tank");

	/* writes in flight on all of them at once: each completion must come back to its own */
	for (int i = 0; i < SPREAD; i++) {
		h[i] = coffer_ds_open(c[i], "tank/v", NULL, NULL);
		cr_assert_geq(h[i], 0, "open on connection %d: %s", i, proto_strerror(h[i]));
		for (int k = 0; k < SPREAD_WRITES; k++) {
			unsigned rec = (unsigned)(i * SPREAD_WRITES + k);

			pattern_fill(wbuf[i][k], (unsigned)i + 1, rec, 1);
			ret = coffer_submit(c[i], (uint32_t)(100 * i + k), COFFER_WRITE, h[i],
					    (uint64_t)rec * RECORD, RECORD, wbuf[i][k]);
			cr_assert_eq(ret, 0, "submit on connection %d: %s", i, proto_strerror(ret));
		}
		cr_assert_eq(coffer_flush_out(c[i]), 0);
	}
	for (int i = 0; i < SPREAD; i++) {
		for (int got = 0; got < SPREAD_WRITES;) {
			struct coffer_completion cc[SPREAD_WRITES];
			int n = coffer_reap(c[i], cc, SPREAD_WRITES, WAIT_MS);

			cr_assert_gt(n, 0, "connection %d: %d of %d writes answered (%s)\n%s", i,
				     got, SPREAD_WRITES, proto_strerror(n), tdaemon_log(&td));
			for (int k = 0; k < n; k++) {
				cr_assert_eq(cc[k].id / 100, (uint32_t)i,
					     "a completion of another connection: id %u", cc[k].id);
				cr_assert_eq(cc[k].status, 0, "write %u: %s", cc[k].id,
					     proto_strerror(cc[k].status));
			}
			got += n;
		}
		cr_assert_eq(io_one(c[i], h[i], COFFER_FLUSH, 0, NULL), 0);
	}
	read_back("tank/v", 0, SPREAD * SPREAD_WRITES, check_spread, NULL);

	/* the loops' counts add up to ours once the CLI's and read_back's have gone */
	for (double end = tdaemon_deadline(TDAEMON_WAIT_S);
	     (open = stats_open(c[0])) != SPREAD && tdaemon_poll(end);)
		;
	cr_assert_eq(open, SPREAD, "connections_open %lld with %d open", open, SPREAD);
	for (int i = 0; i < SPREAD; i++)
		coffer_close(c[i]);
	ret = tdaemon_stop(&td);
	cr_assert_eq(ret, 0, "cofferd exit %d:\n%s", ret, tdaemon_log(&td));

	/* the limit is counted on the main loop over every loop's connections */
	tdaemon_write_conf(&td, NULL,
			   "loops = 4\nmax_connections_per_uid = %d\nlog_level = debug\n"
			   "log_target = stderr\nworkers = 2\ntxg_timeout = 1\n",
			   PER_UID);
	tdaemon_start_ok(&td);
	for (int i = 0; i < PER_UID; i++)
		c[i] = connect_ok();
	ret = coffer_connect(td.sock, &extra);
	cr_assert_eq(ret, -EUSERS, "connection %d: %s, not refused", PER_UID + 1,
		     proto_strerror(ret));
	for (int i = 0; i < PER_UID; i++)
		cr_assert_eq(coffer_call(c[i], "ping", NULL, NULL, NULL, 0), 0,
			     "connection %d after the refusal", i);
	/* one goes on its loop: the main loop must see its slot free */
	coffer_close(c[PER_UID / 2]);
	for (double end = tdaemon_deadline(TDAEMON_WAIT_S);
	     (ret = coffer_connect(td.sock, &c[PER_UID / 2])) == -EUSERS && tdaemon_poll(end);)
		;
	cr_assert_eq(ret, 0, "the freed slot: %s\n%s", proto_strerror(ret), tdaemon_log(&td));
	ret = coffer_connect(td.sock, &extra);
	cr_assert_eq(ret, -EUSERS, "over the limit again: %s", proto_strerror(ret));
	for (int i = 0; i < PER_UID; i++)
		coffer_close(c[i]);
	snprintf(out, sizeof(out), "%d connections per uid is the limit", PER_UID);
	cr_assert(strstr(tdaemon_log(&td), out), "%s", tdaemon_log(&td));
}

/* ======== 3. SIGTERM with writes in flight on every loop ======== */

enum {
	SHUT_WRITERS = 8,
	SHUT_RECS = 256, /* each writer's records, written round and round */
	WINDOW = 16,     /* in flight per connection: less than SHUT_RECS, so a record's
			    previous write has been answered before it is written again */
	WARM_ACKS = 320, /* every connection past one lap of its records before the SIGTERM */
};

struct shut_writer {
	pthread_t thread;
	struct coffer_conn *c;
	int h;
	unsigned who;
	uint32_t acked[SHUT_RECS]; /* the generation last acknowledged (0: none) */
	uint32_t maybe[SHUT_RECS]; /* a later one sent and not acknowledged (0: none) */
	atomic_uint acks;
	unsigned after_sigterm; /* replies that came once the SIGTERM was on its way */
	unsigned errors, unanswered;
	int first_error, end;
};

static unsigned shut_first(unsigned who)
{
	return (who - 1) * SHUT_RECS;
}

/* Set just before the SIGTERM: the replies after it are of requests the daemon finished. */
static atomic_int sigterm_sent;

/*
 * Keeps WINDOW writes in flight, each on the next of its records, until
 * the connection ends (the daemon's shutdown closes it).
 */
static void *shut_run(void *arg)
{
	struct shut_writer *w = arg;
	uint8_t(*buf)[RECORD] = malloc((size_t)WINDOW * RECORD);
	unsigned rec_of[WINDOW], gen_of[WINDOW], first = shut_first(w->who);
	bool busy[WINDOW] = { false };
	uint32_t seq = 0;
	unsigned inflight = 0;

	if (!buf) {
		trouble_say("writer %u: out of memory", w->who);
		return NULL;
	}
	for (;;) {
		struct coffer_completion cc[WINDOW];
		int n;

		for (unsigned s = 0; s < WINDOW; s++) {
			unsigned rec;

			if (busy[s])
				continue;
			rec = seq % SHUT_RECS;
			gen_of[s] = ++seq;
			rec_of[s] = rec;
			pattern_fill(buf[s], w->who, first + rec, gen_of[s]);
			w->maybe[rec] = gen_of[s];
			n = coffer_submit(w->c, s, COFFER_WRITE, w->h,
					  (uint64_t)(first + rec) * RECORD, RECORD, buf[s]);
			if (n < 0) {
				w->end = n;
				goto out;
			}
			busy[s] = true;
			inflight++;
		}
		n = coffer_flush_out(w->c);
		if (n == 0)
			n = coffer_reap(w->c, cc, WINDOW, WAIT_MS);
		if (n == 0)
			daemon_stuck("a reply to a write overdue by " STR(TDAEMON_WAIT_S) " s");
		if (n <= 0) {
			w->end = n ? n : -ETIMEDOUT;
			goto out;
		}
		for (int i = 0; i < n; i++) {
			unsigned s = cc[i].id, rec = rec_of[s];

			busy[s] = false;
			inflight--;
			if (atomic_load(&sigterm_sent))
				w->after_sigterm++;
			if (cc[i].status == 0) {
				w->acked[rec] = gen_of[s];
				if (w->maybe[rec] == gen_of[s])
					w->maybe[rec] = 0;
				atomic_fetch_add(&w->acks, 1);
			} else if (!w->errors++) {
				w->first_error = cc[i].status;
			}
		}
	}
out:
	w->unanswered = inflight;
	free(buf);
	return NULL;
}

static const char *check_shut(const void *buf, unsigned rec, void *arg, char *why, size_t cap)
{
	const struct shut_writer *w = &((const struct shut_writer *)arg)[rec / SHUT_RECS];
	unsigned mine = rec % SHUT_RECS, acked = w->acked[mine], maybe = w->maybe[mine];
	char s[160];

	if (acked ? pattern_is(buf, w->who, rec, acked) : is_zero(buf))
		return NULL;
	if (maybe && pattern_is(buf, w->who, rec, maybe))
		return NULL; /* written, its reply lost with the connection */
	snprintf(why, cap, "holds %s; acknowledged: generation %u, sent after it: %u",
		 pattern_say(buf, s, sizeof(s)), acked, maybe);
	return why;
}

static bool all_under_way(struct shut_writer *w)
{
	for (unsigned i = 0; i < SHUT_WRITERS; i++)
		if (atomic_load(&w[i].acks) < WARM_ACKS)
			return false;
	return true;
}

/*
 * A SIGTERM must wait for every loop to drain, with requests in flight on
 * each, then commit: an acknowledged write is kept even without a FLUSH.
 */
Test(loops, shutdown_with_requests_in_flight_on_every_loop)
{
	static struct shut_writer w[SHUT_WRITERS];
	unsigned unanswered = 0, errors = 0, after_sigterm = 0;
	double end;
	int ret;

	start("loops = 4\n");
	COF_OK("pool create -s 256M tank %s/l0", td.dir);
	COF_OK("create -V 16M -b 8K tank/v");
	dog_start();
	for (unsigned i = 0; i < SHUT_WRITERS; i++) {
		w[i].c = connect_ok();
		w[i].who = i + 1;
		w[i].h = coffer_ds_open(w[i].c, "tank/v", NULL, NULL);
		cr_assert_geq(w[i].h, 0, "open: %s", proto_strerror(w[i].h));
	}
	for (unsigned i = 0; i < SHUT_WRITERS; i++)
		cr_assert_eq(pthread_create(&w[i].thread, NULL, shut_run, &w[i]), 0);
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (!all_under_way(w) && !in_trouble() && tdaemon_poll(end))
		;
	if (!all_under_way(w))
		daemon_stuck("the writers never all got under way");
	dog_pet();
	if (!dog.fired) {
		atomic_store(&sigterm_sent, 1);
		ret = tdaemon_stop(&td);
		if (ret != 0)
			trouble_say("SIGTERM with writes in flight: cofferd exit %d", ret);
	}
	for (unsigned i = 0; i < SHUT_WRITERS; i++) {
		pthread_join(w[i].thread, NULL);
		coffer_close(w[i].c);
		unanswered += w[i].unanswered;
		errors += w[i].errors;
		after_sigterm += w[i].after_sigterm;
		if (w[i].end == -ETIMEDOUT)
			trouble_say("writer %u: a reply overdue at shutdown, the connection stayed "
				    "open",
				    w[i].who);
		if (w[i].errors)
			cr_log_warn("writer %u: %u writes failed, the first with %s", w[i].who,
				    w[i].errors, proto_strerror(w[i].first_error));
	}
	dog_stop();
	assert_no_trouble();
	cr_log_info("at the SIGTERM: %u writes answered after it, %u never answered (sent "
		    "after the daemon stopped reading), %u answered with an error; %u connections "
		    "cut off after the grace period",
		    after_sigterm, unanswered, errors, log_count("closed at shutdown with", 0));
	/* with WINDOW writes always out on each connection, some were in the daemon's hands */
	cr_assert_gt(after_sigterm, 0, "no write was in flight at the SIGTERM, or none finished");

	/* the same state, imported again: every acknowledged write is there */
	ret = tdaemon_start(&td);
	cr_assert_eq(ret, 0, "restart after the SIGTERM:\n%s", tdaemon_log(&td));
	COF_OK("pool status tank");
	cr_assert(strstr(out, "ONLINE"), "%s", out);
	read_back("tank/v", 0, SHUT_WRITERS * SHUT_RECS, check_shut, w);
}
