/* SPDX-License-Identifier: MIT */
/*
 * Crash consistency of transaction groups. A forked child writes records
 * whose every 8-byte word holds (record number, generation) and flushes now
 * and then, telling the parent through a pipe which generation it is about
 * to write and when a flush returned. The parent SIGKILLs it at a random
 * moment, reopens the pool and checks that each record holds its last
 * flushed generation or a later one the child started to write: never
 * older, never torn, never another record's data. The child never shares a
 * pool handle with the parent (store.h: do not use a pool across fork).
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "fixture.h"
#include "pool_impl.h" /* the pool's stage lock, for all_committed() */
#include "txg/txg.h"

#define DSNAME TPOOL_NAME "/crash"
#define NREC 64
#define TIMER_DEADLINE_S 30 /* generous: the test passes as soon as the commit is seen */

static struct tpool tp;

struct msg {
	char type;       /* 'W'/'D' about to write/discard, 'F' flush returned, 'E' error */
	unsigned rec;
	uint64_t gen;    /* 'E': the error code */
};

/*
 * What a record may hold after a crash: its value at the last flush, any
 * generation written since (all above floor), or zeros if it was discarded
 * since. Generations only grow, across children too, so none is reused.
 */
struct model {
	uint64_t flushed[NREC]; /* value at the last flush (0: zeros) */
	uint64_t floor[NREC];   /* newest generation announced before that flush */
	uint64_t cur[NREC];     /* value of the last write or discard announced */
	uint64_t maxgen[NREC];  /* newest generation ever announced */
	bool zero_ok[NREC];     /* discarded since the last flush */
};

static void teardown(void)
{
	tpool_fini(&tp);
}

TestSuite(txg, .fini = teardown, .timeout = 240);

static void send_msg(int fd, char type, unsigned rec, uint64_t gen)
{
	struct msg m = { .type = type, .rec = rec, .gen = gen };

	/* smaller than PIPE_BUF: atomic; a short write means the parent is gone */
	if (write(fd, &m, sizeof(m)) != (ssize_t)sizeof(m))
		_exit(3);
}

/*
 * The child: open the pool, then write and flush until killed. @next holds
 * the generation to write next per record (a copy of the parent's model).
 */
static void child(int fd, const struct stor_pool_opts *opts, uint64_t *next, unsigned seed,
		  uint32_t recsize, int flush_every)
{
	struct stor_pool *pool = NULL;
	struct stor_ds *ds = NULL;
	unsigned char *buf = malloc(2 * (size_t)recsize);
	int ret, n = 0;

	ret = stor_pool_open(TPOOL_NAME, opts, &pool);
	if (ret == 0)
		ret = stor_ds_open(pool, DSNAME, &ds);
	if (ret || !buf) {
		send_msg(fd, 'E', 0, (uint64_t)(int64_t)ret);
		_exit(2);
	}
	for (;;) {
		unsigned r = (unsigned)rand_r(&seed) % NREC;
		int two = r + 1 < NREC && rand_r(&seed) % 4 == 0;

		if (rand_r(&seed) % 10 == 0) {
			/* whole records only: a partial discard would tear the pattern */
			send_msg(fd, 'D', r, 0);
			ret = stor_ds_discard(ds, (uint64_t)r * recsize, recsize);
			if (ret) {
				send_msg(fd, 'E', r, (uint64_t)(int64_t)ret);
				_exit(2);
			}
			continue;
		}

		tpat_fill(buf, recsize, r, next[r]);
		send_msg(fd, 'W', r, next[r]);
		if (two) {
			tpat_fill(buf + recsize, recsize, r + 1, next[r + 1]);
			send_msg(fd, 'W', r + 1, next[r + 1]);
		}
		ret = stor_ds_write(ds, (uint64_t)r * recsize, buf, (two ? 2u : 1u) * recsize);
		if (ret == STOR_ENOSPC) {
			/* the pool is kept tight on purpose: commit, so the frees come back */
			ret = stor_pool_sync(pool);
			if (ret == 0) {
				send_msg(fd, 'F', 0, 0);
				ret = stor_ds_write(ds, (uint64_t)r * recsize, buf,
						    (two ? 2u : 1u) * recsize);
			}
		}
		if (ret) {
			send_msg(fd, 'E', r, (uint64_t)(int64_t)ret);
			_exit(2);
		}
		next[r]++;
		if (two)
			next[r + 1]++;
		if (flush_every && ++n % flush_every == 0) {
			ret = n % (2 * flush_every) ? stor_ds_flush(ds) : stor_pool_sync(pool);
			if (ret) {
				send_msg(fd, 'E', 0, (uint64_t)(int64_t)ret);
				_exit(2);
			}
			send_msg(fd, 'F', 0, 0);
		}
	}
}

/* Apply one message of the child to the model. */
static void model_apply(struct model *m, const struct msg *msg)
{
	if (msg->type == 'W') {
		cr_assert(msg->rec < NREC && msg->gen > m->maxgen[msg->rec]);
		m->cur[msg->rec] = msg->gen;
		m->maxgen[msg->rec] = msg->gen;
	} else if (msg->type == 'D') {
		cr_assert(msg->rec < NREC);
		m->cur[msg->rec] = 0;
		m->zero_ok[msg->rec] = true;
	} else if (msg->type == 'F') {
		/* every write announced before this flush had returned when it started */
		memcpy(m->flushed, m->cur, sizeof(m->flushed));
		memcpy(m->floor, m->maxgen, sizeof(m->floor));
		memset(m->zero_ok, 0, sizeof(m->zero_ok));
	} else {
		cr_assert_fail("child failed: %c rec %u: %s", msg->type, msg->rec,
			       stor_strerror((int)(int64_t)msg->gen));
	}
}

/*
 * Read every message that is ready, or wait up to @ms for one.
 * @return messages read, -1 at end of file (the child is gone) with none read.
 */
static int drain(int fd, struct model *m, int ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	struct msg msg;
	int n = 0;

	while (poll(&pfd, 1, n ? 0 : ms) > 0) {
		ssize_t r = read(fd, &msg, sizeof(msg));

		if (r == 0)
			return n ? n : -1;
		cr_assert_eq(r, (ssize_t)sizeof(msg), "short message from child");
		model_apply(m, &msg);
		n++;
	}
	return n;
}

/*
 * Reopen the pool and hold every record to the model: its generation is
 * between flushed and written. The generation found becomes the new floor,
 * since what import saw is committed.
 */
static unsigned verify(struct model *m, uint32_t recsize, unsigned round)
{
	static unsigned char buf[128 << 10]; /* static: a failed assert must not leak it */
	struct stor_ds *ds = NULL;
	unsigned ahead = 0;
	int ret;

	cr_assert_leq(recsize, sizeof(buf));

	ret = tpool_open(&tp);
	cr_assert_eq(ret, 0, "round %u: open after kill: %s (%s)", round, stor_strerror(ret),
		     stor_pool_last_error());
	cr_assert_eq(stor_ds_open(tp.pool, DSNAME, &ds), 0);
	for (unsigned r = 0; r < NREC; r++) {
		int64_t g;

		ret = stor_ds_read(ds, (uint64_t)r * recsize, buf, recsize);
		cr_assert_eq(ret, 0, "round %u: read record %u: %s", round, r, stor_strerror(ret));
		g = tpat_check(buf, recsize, r);
		cr_assert_neq(g, -1, "round %u: record %u is torn", round, r);
		cr_assert_neq(g, -2, "round %u: record %u holds another record's data", round, r);
		cr_assert((uint64_t)g == m->flushed[r] ||
				  ((uint64_t)g > m->floor[r] && (uint64_t)g <= m->maxgen[r]) ||
				  (g == 0 && m->zero_ok[r]),
			  "round %u: record %u holds %lld; flushed %llu, written since (%llu, %llu]"
			  "%s",
			  round, r, (long long)g, (unsigned long long)m->flushed[r],
			  (unsigned long long)m->floor[r], (unsigned long long)m->maxgen[r],
			  m->zero_ok[r] ? ", discarded since" : "");
		ahead += (uint64_t)g != m->flushed[r];
		/* what import saw is committed; whatever else the child wrote is gone */
		m->flushed[r] = m->cur[r] = (uint64_t)g;
		m->floor[r] = m->maxgen[r];
		m->zero_ok[r] = false;
	}
	stor_ds_close(ds);
	tpool_close(&tp);
	return ahead;
}

/*
 * Fork a child that talks to the parent through a pipe. @return 0 in the
 * child, with *fd the write end; the child's pid in the parent, *fd the read end
 */
static pid_t fork_piped(int *fd)
{
	int p[2];
	pid_t pid;

	cr_assert_eq(pipe(p), 0);
	fflush(NULL);
	pid = fork();
	cr_assert(pid >= 0);
	close(p[pid == 0 ? 0 : 1]);
	*fd = p[pid == 0 ? 1 : 0];
	return pid;
}

static pid_t spawn(int *rfd, struct model *m, unsigned seed, uint32_t recsize, int flush_every,
		   const struct stor_pool_opts *opts)
{
	uint64_t next[NREC];
	pid_t pid;

	for (unsigned r = 0; r < NREC; r++)
		next[r] = m->maxgen[r] + 1;
	pid = fork_piped(rfd);
	if (pid == 0) {
		child(*rfd, opts, next, seed, recsize, flush_every);
		_exit(0);
	}
	return pid;
}

static void kill_and_reap(pid_t pid, int fd, struct model *m)
{
	int status;

	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	/* everything the child said before it died counts */
	while (drain(fd, m, 0) > 0)
		;
	close(fd);
	cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		  "child ended by itself (status %#x)", status);
}

static void setup_crash_pool_props(uint32_t recsize, uint64_t lun_size, const char *prop)
{
	/* sparse: the crash cycles fill a volume larger than the pool */
	const char *props[] = { "refreservation=none", prop };
	struct stor_ds_opts o = { .volsize = (uint64_t)NREC * recsize, .recordsize = recsize,
				  .props = props, .nprops = prop ? 2 : 1 };
	int ret;

	tpool_init(&tp, 2, lun_size, NULL);
	ret = stor_ds_create(tp.pool, DSNAME, &o, NULL);
	cr_assert_eq(ret, 0, "create %s: %s", DSNAME, stor_strerror(ret));
	tpool_close(&tp);
}

static void setup_crash_pool(uint32_t recsize, uint64_t lun_size)
{
	setup_crash_pool_props(recsize, lun_size, NULL);
}

static void random_kills(const char *prop, unsigned min_rounds, double budget)
{
	struct model m = { 0 };
	struct stor_pool_opts opts;
	unsigned seed = 20261129, rounds = 0, ahead = 0;
	unsigned long flushes = 0;
	double t0 = tnow();

	/*
	 * A pool with room for the live records and half as much again: the
	 * next-fit allocator comes back to freed sectors within a few txgs, so
	 * an extent reused before the txg that freed it is durable shows up as
	 * a record with the wrong data. The slop space of so small a pool is
	 * half of it (space.c), which new data cannot use: twice that.
	 */
	setup_crash_pool_props(8192, (1u << 20) + NREC * 8192 * 3 / 2, prop);
	opts = tp.opts;
	opts.txg_timeout_ms = 100; /* the timer commits too, between explicit flushes */
	/* at least min_rounds kills, and more while time allows */
	while (rounds < min_rounds || (rounds < 60 && tnow() - t0 < budget)) {
		struct model before = m;
		int fd, got = 0;
		pid_t pid = spawn(&fd, &m, seed + rounds, 8192, 1 + rounds % 8, &opts);
		/* kill at a random point: sometimes during import, mostly while writing */
		int delay = rand_r(&seed) % 250;

		if (rand_r(&seed) % 6) {
			while (!got)
				got = drain(fd, &m, 5000);
			cr_assert_gt(got, 0, "round %u: child died before writing", rounds);
		}
		for (double end = tnow() + delay / 1000.0; tnow() < end;)
			drain(fd, &m, 5);
		kill_and_reap(pid, fd, &m);
		for (unsigned r = 0; r < NREC; r++)
			flushes += m.flushed[r] != before.flushed[r];
		ahead += verify(&m, 8192, rounds);
		rounds++;
	}
	cr_log_info("%u kills in %.1f s, %lu record changes kept, %u found past their flush",
		    rounds, tnow() - t0, flushes, ahead);
	cr_assert_gt(flushes, 0, "the children never flushed: the test proved nothing");

	/* the crashes leaked no space: with every record discarded nothing is in use */
	{
		struct stor_ds *ds = NULL;

		cr_assert_eq(tpool_open(&tp), 0);
		cr_assert_eq(stor_ds_open(tp.pool, DSNAME, &ds), 0);
		cr_assert_eq(stor_ds_discard(ds, 0, NREC * 8192ull), 0);
		stor_ds_close(ds);
		cr_assert_eq(stor_pool_sync(tp.pool), 0);
		cr_assert_eq(tpool_used(&tp), 0, "%llu bytes leaked by crashes",
			     (unsigned long long)tpool_used(&tp));
	}
}

Test(txg, sigkill_at_random_points_leaves_flushed_or_later_data)
{
	random_kills(NULL, 24, 20);
}

Test(txg, sigkill_with_zstd_records)
{
	/* compressed records take one sector: other extent sizes, same promises */
	random_kills("compression=zstd", 20, 6);
}

Test(txg, unflushed_large_records_may_be_lost_but_never_torn)
{
	struct model m = { 0 };
	struct stor_pool_opts opts;
	unsigned seed = 77, rounds;
	const uint32_t recsize = 128u << 10;

	setup_crash_pool(recsize, 32u << 20);
	opts = tp.opts;
	opts.txg_timeout_ms = 60000; /* only close would commit: the kill leaves it open */
	for (rounds = 0; rounds < 8; rounds++) {
		int fd;
		pid_t pid = spawn(&fd, &m, seed + rounds, recsize, 0, &opts);

		int got = 0;

		while (!got)
			got = drain(fd, &m, 5000);
		cr_assert_gt(got, 0, "round %u: child died before writing", rounds);
		for (double end = tnow() + (rand_r(&seed) % 150) / 1000.0; tnow() < end;)
			drain(fd, &m, 5);
		kill_and_reap(pid, fd, &m);
		verify(&m, recsize, rounds);
	}
}

/*
 * Whether the timer has committed everything written: nothing staged and
 * nothing being committed (txg.h; the test looks inside the pool for it).
 */
static int all_committed(struct stor_pool *pool)
{
	int idle;

	pthread_mutex_lock(&pool->stage_lock);
	idle = txg_stage_idle(pool);
	pthread_mutex_unlock(&pool->stage_lock);
	return idle;
}

/*
 * Fork a child that opens the pool with @opts and writes generation 1 of
 * records 0 .. @nrec - 1, unflushed; with @wait_commit it then waits until
 * they are committed (up to TIMER_DEADLINE_S). SIGKILL it once it says so.
 * @return what it said: 'w' written, 'c' committed, 't' not committed in time
 */
static char killed_after_writes(const struct stor_pool_opts *opts, unsigned nrec,
				bool wait_commit)
{
	unsigned char buf[8192];
	int fd, status;
	char c = 0;
	pid_t pid = fork_piped(&fd);

	if (pid == 0) {
		struct stor_pool *pool = NULL;
		struct stor_ds *ds = NULL;
		double deadline;

		if (stor_pool_open(TPOOL_NAME, opts, &pool) || stor_ds_open(pool, DSNAME, &ds))
			_exit(2);
		for (unsigned r = 0; r < nrec; r++) {
			tpat_fill(buf, sizeof(buf), r, 1);
			if (stor_ds_write(ds, r * 8192ull, buf, sizeof(buf)))
				_exit(2);
		}
		c = 'w';
		if (wait_commit) {
			/* a loaded machine under sanitizers may take long: wait for the event */
			deadline = tnow() + TIMER_DEADLINE_S;
			while (!all_committed(pool) && tnow() < deadline)
				poll(NULL, 0, 10);
			c = all_committed(pool) ? 'c' : 't';
		}
		if (write(fd, &c, 1) != 1)
			_exit(3);
		for (;;)
			pause();
	}
	cr_assert_eq(read(fd, &c, 1), 1, "child failed before writing");
	close(fd);
	kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFSIGNALED(status));
	return c;
}

/* Reopen the pool: records 0 .. @nrec - 1 hold generation 1, or the test fails saying @why. */
static void assert_written(unsigned nrec, const char *why)
{
	unsigned char buf[8192];
	struct stor_ds *ds = NULL;

	cr_assert_eq(tpool_open(&tp), 0);
	cr_assert_eq(stor_ds_open(tp.pool, DSNAME, &ds), 0);
	for (unsigned r = 0; r < nrec; r++) {
		cr_assert_eq(stor_ds_read(ds, r * 8192ull, buf, sizeof(buf)), 0);
		cr_assert_eq(tpat_check(buf, sizeof(buf), r), 1, "record %u %s", r, why);
	}
	stor_ds_close(ds);
}

Test(txg, timer_commits_without_a_flush)
{
	struct stor_pool_opts opts;
	char c;

	setup_crash_pool(8192, 32u << 20);
	opts = tp.opts;
	opts.txg_timeout_ms = 200;
	/* written, never flushed: only the timer can commit */
	c = killed_after_writes(&opts, 8, true);
	cr_assert_eq(c, 'c', "the 200 ms timer committed nothing within %d s", TIMER_DEADLINE_S);
	assert_written(8, "not committed by the 200 ms timer");
}

Test(txg, sync_always_makes_each_write_durable)
{
	const char *props[] = { "sync=always" };
	struct stor_ds_opts o = { .volsize = NREC * 8192ull, .props = props, .nprops = 1 };
	struct stor_pool_opts opts;

	tpool_init(&tp, 2, 32u << 20, NULL);
	cr_assert_eq(stor_ds_create(tp.pool, DSNAME, &o, NULL), 0);
	tpool_close(&tp);
	opts = tp.opts;
	opts.txg_timeout_ms = 60000;
	cr_assert_eq(killed_after_writes(&opts, 4, false), 'w');
	assert_written(4, "sync=always write returned before it was durable");
}

/* ---- crashes around dataset create and destroy ---- */

#define DSREC 4
/* creates in a round at most: on a fast machine the child made more than
 * the pool had room for (half of them live, each reserving its volume)
 * before the kill came, and failed with ENOSPC */
#define DS_PER_ROUND 48

static void ds_child(int fd, const struct stor_pool_opts *opts, unsigned first)
{
	struct stor_pool *pool = NULL;
	unsigned char buf[8192];
	char name[64];
	int ret = stor_pool_open(TPOOL_NAME, opts, &pool);

	unsigned step = 0;

	for (unsigned i = first; ret == 0 && i < first + DS_PER_ROUND; i++) {
		struct stor_ds *ds = NULL;

		snprintf(name, sizeof(name), TPOOL_NAME "/c%u", i);
		send_msg(fd, 'C', i, 0);
		step = 1;
		ret = stor_ds_create(pool, name, &(struct stor_ds_opts){ .volsize = 1 << 20 }, &ds);
		step = 2;
		for (unsigned k = 0; ret == 0 && k < DSREC; k++) {
			tpat_fill(buf, sizeof(buf), i * DSREC + k, 1);
			ret = stor_ds_write(ds, k * 8192ull, buf, sizeof(buf));
		}
		step = 3;
		if (ret == 0)
			ret = stor_ds_flush(ds);
		stor_ds_close(ds);
		step = 4;
		if (ret)
			break;
		send_msg(fd, 'F', i, 0);
		if (i % 2 && i > first) {
			snprintf(name, sizeof(name), TPOOL_NAME "/c%u", i - 1);
			send_msg(fd, 'X', i - 1, 0);
			ret = stor_ds_destroy(pool, name, 0);
			if (ret == 0)
				ret = stor_pool_sync(pool);
			if (ret)
				break;
			send_msg(fd, 'Y', i - 1, 0);
		}
	}
	if (ret == 0)
		for (;;)
			pause(); /* the round's creates are done: wait for the kill */
	send_msg(fd, 'E', step, (uint64_t)(int64_t)ret);
	_exit(2);
}

enum ds_state { DS_NONE, DS_CREATING, DS_FLUSHED, DS_DESTROYING, DS_GONE };

struct ds_scan {
	enum ds_state *st;
	unsigned n;
	char bad[200];
};

static int ds_seen(const char *name, void *ctx)
{
	struct ds_scan *sc = ctx;
	unsigned i;

	if (sscanf(name, TPOOL_NAME "/c%u", &i) != 1)
		return 0;
	if (i >= sc->n || sc->st[i] == DS_NONE || sc->st[i] == DS_GONE)
		snprintf(sc->bad, sizeof(sc->bad), "%s exists (state %d)", name,
			 i < sc->n ? (int)sc->st[i] : -1);
	return 0;
}

/* What the child said about dataset c<rec>: its state now (an error fails the test). */
static void ds_note(enum ds_state *st, const struct msg *m)
{
	cr_assert_neq(m->type, 'E', "child, step %u: %s", m->rec,
		      stor_strerror((int)(int64_t)m->gen));
	cr_assert_lt(m->rec, 4096u);
	st[m->rec] = m->type == 'C' ? DS_CREATING : m->type == 'F' ? DS_FLUSHED :
		     m->type == 'X' ? DS_DESTROYING : DS_GONE;
}

Test(txg, sigkill_around_dataset_create_and_destroy)
{
	enum ds_state st[4096] = { DS_NONE };
	struct stor_pool_opts opts;
	unsigned seed = 4321, first = 0;

	/* room for the datasets a kill leaves behind on fast (tmpfs) LUNs */
	setup_crash_pool(8192, 32u << 20);
	tpool_open(&tp);
	stor_ds_destroy(tp.pool, DSNAME, 0);
	tpool_close(&tp);
	opts = tp.opts;
	opts.txg_timeout_ms = 100;
	for (unsigned round = 0; round < 32; round++) {
		struct ds_scan sc = { .st = st, .n = 4096 };
		struct msg msg;
		unsigned char buf[8192];
		int fd, status;
		double end = tnow() + (50 + rand_r(&seed) % 300) / 1000.0;
		int aimed = 0;
		pid_t pid = fork_piped(&fd);

		if (pid == 0)
			ds_child(fd, &opts, first);
		while (tnow() < end) {
			struct pollfd pfd = { .fd = fd, .events = POLLIN };

			if (poll(&pfd, 1, 5) <= 0)
				continue;
			if (read(fd, &msg, sizeof(msg)) != (ssize_t)sizeof(msg))
				break;
			ds_note(st, &msg);
			/* three rounds in four aim at the middle of a destroy */
			if (msg.type == 'X' && round % 4 && !aimed) {
				end = tnow() + (rand_r(&seed) % 5000) / 1e6;
				aimed = 1;
				while (tnow() < end)
					;
				break;
			}
		}
		kill(pid, SIGKILL);
		cr_assert_eq(waitpid(pid, &status, 0), pid);
		while (read(fd, &msg, sizeof(msg)) == (ssize_t)sizeof(msg))
			ds_note(st, &msg);
		close(fd);

		cr_assert_eq(tpool_open(&tp), 0, "round %u: %s", round, stor_pool_last_error());
		cr_assert_eq(stor_ds_list(tp.pool, ds_seen, &sc), 0);
		cr_assert_eq(sc.bad[0], '\0', "round %u: %s", round, sc.bad);
		for (unsigned i = first; i < 4096 && st[i] != DS_NONE; i++) {
			struct stor_ds *ds = NULL;
			char name[64];
			int ret;

			snprintf(name, sizeof(name), TPOOL_NAME "/c%u", i);
			ret = stor_ds_open(tp.pool, name, &ds);
			if (st[i] == DS_FLUSHED)
				cr_assert_eq(ret, 0, "round %u: flushed %s lost: %s", round, name,
					     stor_strerror(ret));
			if (ret == -ENOENT)
				continue;
			cr_assert_eq(ret, 0);
			for (unsigned k = 0; k < DSREC; k++) {
				int64_t g;

				cr_assert_eq(stor_ds_read(ds, k * 8192ull, buf, sizeof(buf)), 0);
				g = tpat_check(buf, sizeof(buf), i * DSREC + k);
				cr_assert(g == 1 || (g == 0 && st[i] == DS_CREATING),
					  "round %u: %s record %u: check %lld (state %d)", round,
					  name,
					  k, (long long)g, (int)st[i]);
			}
			stor_ds_close(ds);
			/* clean up so the next round starts empty */
			cr_assert_eq(stor_ds_destroy(tp.pool, name, 0), 0);
		}
		cr_assert_eq(stor_pool_sync(tp.pool), 0);
		cr_assert_eq(tpool_used(&tp), 0, "round %u: %llu bytes leaked", round,
			     (unsigned long long)tpool_used(&tp));
		tpool_close(&tp);
		while (first < 4096 && st[first] != DS_NONE)
			st[first++] = DS_GONE;
	}
	cr_log_info("32 kills over %u dataset creates", first);
	cr_assert_gt(first, 24, "too few datasets created to prove anything");
}
