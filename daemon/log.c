/* SPDX-License-Identifier: MIT */
/*
 * Levelled logging for cofferd: one line per message to stderr, syslog or a
 * file opened O_APPEND.
 *
 * Each message is formatted into a stack buffer and leaves in one write(),
 * so lines from different threads never interleave and no lock is taken.
 * log_reopen() (SIGHUP, after logrotate moved the file) opens the path anew
 * and dup2()s it over the old descriptor: a thread writing at that moment
 * lands in either file, never in a closed descriptor.
 *
 * On stderr under systemd (JOURNAL_STREAM names our stderr) each line starts
 * with "<N>", which journald turns into the priority, and carries no
 * timestamp since the journal adds its own. Anywhere else lines carry a UTC
 * ISO 8601 timestamp and the level name. Newlines inside a message become
 * spaces: one message is one line, whatever text a client sent.
 *
 * Until log_ready() (the daemon serves), an error logged to syslog or a
 * file also goes to stderr: a cofferd that cannot start says why where it
 * was started from, not only in a file nobody is looking at.
 *
 * log_open() and log_close() are for the main thread before and after the
 * other threads run; log_msg() and log_reopen() are safe from any thread.
 */

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define LOG_LINE_MAX 4096 /* longer messages are cut and end in "..." */

enum log_kind { LOG_TO_STDERR, LOG_TO_SYSLOG, LOG_TO_FILE };

int log_level = LOG_INFO;
static volatile int started; /* log_ready() was called */

static enum log_kind kind = LOG_TO_STDERR;
static int log_fd = STDERR_FILENO;
static char *log_path;
static bool journal; /* stderr is a journald stream */

static const char *const prio_names[] = {
	"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
};

/*
 * JOURNAL_STREAM=dev:ino is inherited by children whose stderr may point
 * elsewhere; only trust it if it still names our stderr (systemd.exec(5)).
 */
static bool stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

static int open_file(const char *path)
{
	/* 0640: logs can name datasets and users; the group may read them */
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640);

	return fd < 0 ? -errno : fd;
}

int log_open(const char *target, int level)
{
	int fd;

	if (!target || (strcmp(target, "stderr") != 0 && strcmp(target, "syslog") != 0 &&
			target[0] != '/'))
		return -EINVAL;
	log_close();
	log_level = level;
	if (strcmp(target, "stderr") == 0) {
		journal = stderr_is_journal();
		return 0;
	}
	if (strcmp(target, "syslog") == 0) {
		openlog("cofferd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		kind = LOG_TO_SYSLOG;
		return 0;
	}
	log_path = strdup(target);
	if (!log_path)
		return -ENOMEM;
	fd = open_file(target);
	if (fd < 0) {
		free(log_path);
		log_path = NULL;
		return fd;
	}
	log_fd = fd;
	kind = LOG_TO_FILE;
	return 0;
}

int log_reopen(void)
{
	int fd, ret = 0;

	if (kind != LOG_TO_FILE)
		return 0;
	fd = open_file(log_path);
	if (fd < 0)
		return fd; /* keep writing to the old file rather than nowhere */
	/* atomic swap: concurrent writers see the old or the new file */
	if (dup3(fd, log_fd, O_CLOEXEC) < 0)
		ret = -errno;
	close(fd);
	return ret;
}

void log_close(void)
{
	if (kind == LOG_TO_FILE && log_fd != STDERR_FILENO)
		close(log_fd);
	if (kind == LOG_TO_SYSLOG)
		closelog();
	free(log_path);
	log_path = NULL;
	log_fd = STDERR_FILENO;
	kind = LOG_TO_STDERR;
	journal = false;
}

static size_t put_prefix(char *buf, size_t len, int prio)
{
	struct timespec ts;
	struct tm tm;
	int n;

	if (journal)
		return (size_t)snprintf(buf, len, "<%d>", prio);
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s: ", tm.tm_year + 1900,
		     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		     ts.tv_nsec / 1000000, prio_names[prio]);
	return n > 0 && (size_t)n < len ? (size_t)n : 0;
}

void log_ready(void)
{
	started = 1;
}

/* An error before the daemon serves, on stderr as well ("cofferd: ..."). */
static void starting_error(const char *line, size_t len)
{
	struct iovec v[2] = { { .iov_base = (void *)"cofferd: ", .iov_len = 9 },
			      { .iov_base = (void *)line, .iov_len = len } };

	while (writev(STDERR_FILENO, v, 2) < 0 && errno == EINTR)
		;
}

void log_msg(int prio, const char *fmt, ...)
{
	char buf[LOG_LINE_MAX];
	size_t pre, len, room;
	va_list ap;
	int n, saved_errno = errno; /* callers log, then look at errno */

	prio &= LOG_PRIMASK;
	pre = kind == LOG_TO_SYSLOG ? 0 : put_prefix(buf, sizeof(buf), prio);
	room = sizeof(buf) - pre - 1; /* keep one byte for the newline */
	va_start(ap, fmt);
	n = vsnprintf(buf + pre, room + 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		goto out;
	len = (size_t)n;
	if (len > room) {
		len = room;
		memcpy(buf + pre + len - 3, "...", 3);
	}
	/* one message, one line: a newline in client-supplied text cannot forge a line */
	for (size_t i = pre; i < pre + len; i++)
		if (buf[i] == '\n' || buf[i] == '\r')
			buf[i] = ' ';
	if (kind == LOG_TO_SYSLOG) {
		buf[len] = '\0';
		syslog(prio, "%s", buf);
		if (!started && prio <= LOG_ERR) {
			buf[len] = '\n';
			starting_error(buf, len + 1);
		}
		goto out;
	}
	buf[pre + len] = '\n';
	len += pre + 1;
	/* no retry on a short write: a second write() could interleave with another thread */
	while (write(log_fd, buf, len) < 0 && errno == EINTR)
		;
	if (!started && kind == LOG_TO_FILE && prio <= LOG_ERR)
		starting_error(buf + pre, len - pre);
out:
	errno = saved_errno;
}
