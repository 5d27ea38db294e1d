/* SPDX-License-Identifier: MIT */
/*
 * E2E fixture: a real cofferd in a temp dir (socket, state, config, its
 * stderr), started with NOTIFY_SOCKET pointing at a datagram socket this
 * process binds, so readiness is seen exactly as systemd sees it.
 */
#ifndef COFFER_E2E_DAEMON_H
#define COFFER_E2E_DAEMON_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

struct tdaemon {
	char dir[PATH_MAX / 4];   /* mkdtemp'd; removed by tdaemon_cleanup */
	char sock[PATH_MAX / 4];
	char conf[PATH_MAX / 4];
	char state[PATH_MAX / 4];
	char log[PATH_MAX / 4];   /* the daemon's stderr */
	char notify[PATH_MAX / 4];
	char ready_msg[256];      /* what arrived on NOTIFY_SOCKET */
	pid_t pid;
};

/** Make the temp dir and write a minimal cofferd.conf (@extra: more lines or NULL). */
void tdaemon_init(struct tdaemon *d, const char *extra);
/** Spawn cofferd -f -c CONF and wait up to 120 s for READY=1. @return 0 or -1 */
int tdaemon_start(struct tdaemon *d);
/** SIGTERM, wait up to 60 s. @return the exit status (0 on a clean stop), -1 if killed */
int tdaemon_stop(struct tdaemon *d);
/**
 * Write @d's config anew: its socket at @sock (NULL: d->sock), its state
 * dir, then the lines @fmt makes (more [cofferd] options).
 */
void tdaemon_write_conf(struct tdaemon *d, const char *sock, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/** tdaemon_start(), failing the running test with the daemon's stderr unless it is ready. */
void tdaemon_start_ok(struct tdaemon *d);
/** A suite's .init: tdaemon_init(@d, @extra), then tdaemon_start_ok(). */
void tdaemon_setup(struct tdaemon *d, const char *extra);
/** tdaemon_setup(@d, NULL) with a directory for LUN files, @d->dir/l, that
 *  the daemon scans (lun_search): pool import lists what is left there. */
void tdaemon_setup_lun_dir(struct tdaemon *d);
/**
 * Stop @d if it runs and expect a clean exit (0: an ASan leak report makes
 * it 23), logging the daemon's stderr otherwise.
 */
void tdaemon_stop_ok(struct tdaemon *d);
/**
 * A suite's .fini: tdaemon_stop_ok() and tdaemon_cleanup(), unless the test
 * cleaned up already (tdaemon_skip).
 */
void tdaemon_teardown(struct tdaemon *d);
/*
 * The usual fixture of a suite: `static struct tdaemon td`, set up with
 * the config lines @extra (or NULL) by setup() and torn down by teardown(),
 * for TestSuite(name, .init = setup, .fini = teardown).
 */
#define TDAEMON_FIXTURE(extra)                      \
	static struct tdaemon td;                   \
	static void setup(void)                     \
	{                                           \
		tdaemon_setup(&td, (extra));        \
	}                                           \
	static void teardown(void)                  \
	{                                           \
		tdaemon_teardown(&td);              \
	}

/*
 * The fixture of a suite whose tests may start a second daemon: `td` as
 * TDAEMON_FIXTURE(NULL) has it, and `td2`, which a test sets up itself
 * (tdaemon_init) when it needs one; teardown kills and removes td2 if it
 * was set up, whatever its state, then tears td down.
 */
#define TDAEMON_FIXTURE2                            \
	static struct tdaemon td, td2;              \
	static void setup(void)                     \
	{                                           \
		tdaemon_setup(&td, NULL);           \
	}                                           \
	static void teardown(void)                  \
	{                                           \
		if (td2.dir[0])                     \
			tdaemon_cleanup(&td2);      \
		tdaemon_teardown(&td);              \
	}

/** Kill a daemon still running and remove the temp dir. */
void tdaemon_cleanup(struct tdaemon *d);
/** The daemon's stderr so far (static buffer), for failure messages. */
const char *tdaemon_log(struct tdaemon *d);

/**
 * Run `$COFFER -S SOCK ARGS` through /bin/sh with stdin from @in_file (NULL:
 * /dev/null) and stdout+stderr into @out (NUL-terminated, may be NULL).
 * @prefix goes before the command (e.g. "setpriv --reuid=nobody ...").
 * @return the exit status, or -1
 */
int tdaemon_coffer(struct tdaemon *d, const char *prefix, const char *in_file, char *out,
		   size_t cap, const char *args);

/** tdaemon_coffer() with printf-style arguments. */
int tdaemon_cofferf(struct tdaemon *d, const char *in_file, char *out, size_t cap,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/**
 * Run `coffer ARGS` (JSON output), fail the running test unless it exits 0
 * and prints a JSON document. @return the document (the caller decrefs)
 */
json_t *tdaemon_coffer_json(struct tdaemon *d, const char *args);

/*
 * In a pool entry of `coffer pool status -j` (its tree of vdevs, as
 * zpool status -j has it): the @n-th vdev under the root, in the order
 * printed; how many there are; the LUN whose "index" is @i, a side of a
 * mirror or a vdev of its own. NULL if there is none.
 */
json_t *tdaemon_status_vdev(json_t *pool, size_t n);
size_t tdaemon_status_nvdevs(json_t *pool);
json_t *tdaemon_status_lun(json_t *pool, size_t i);

/** Run coffer and fail the running test unless it exits 0; @out is an array. */
#define TDAEMON_COF_OK(d, out, in, ...)                                                      \
	do {                                                                                 \
		int st_ = tdaemon_cofferf((d), (in), (out), sizeof(out), __VA_ARGS__);       \
		cr_assert_eq(st_, 0, "coffer exit %d: %s\ndaemon:\n%s", st_, (out),          \
			     tdaemon_log(d));                                                \
	} while (0)

/*
 * Skip the running test: Criterion runs no .fini after cr_skip_test(), so the
 * daemon is stopped and the temp dir removed here first.
 */
#define tdaemon_skip(d, ...)              \
	do {                              \
		tdaemon_stop(d);          \
		tdaemon_cleanup(d);       \
		cr_skip_test(__VA_ARGS__); \
	} while (0)

/* How long an event the tests wait for may take on a loaded machine under sanitizers. */
#define TDAEMON_WAIT_S 120

/** A deadline @seconds from now (CLOCK_MONOTONIC seconds), for tdaemon_poll(). */
double tdaemon_deadline(double seconds);

/**
 * Wait a little (20 ms) for an event, unless @deadline has passed.
 * @return false once it has: `while (!event() && tdaemon_poll(end));`
 */
bool tdaemon_poll(double deadline);

/** Wait up to @ms for @fd to be readable (EINTR retried). @return 1 readable, 0 timeout */
int tdaemon_wait_readable(int fd, int ms);

/** @d->dir/NAME, NAME made by @fmt: a static buffer, eight at a time stay valid. */
const char *tdaemon_path(struct tdaemon *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Write @len bytes to a new file @name in the temp dir; returns its path (static). */
const char *tdaemon_file(struct tdaemon *d, const char *name, const void *data, size_t len);
/** Like tdaemon_file, with @len bytes of rand() into @path (@cap bytes). */
void tdaemon_random_file(struct tdaemon *d, const char *name, size_t len, char *path, size_t cap);

#endif
