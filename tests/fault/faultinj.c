// SPDX-License-Identifier: MIT
/*
 * faultinj.so: an LD_PRELOAD shim that makes I/O on chosen files fail, so
 * tests can show what cofferd does when a LUN or its metadata misbehaves.
 * It wraps pread, pwrite, preadv, pwritev, fsync, fdatasync and msync; a
 * call is a candidate when its fd (/proc/self/fd) or, for msync, the
 * mapping of its address (/proc/self/maps) resolves to a path a rule
 * names, exactly or as the last components ("lun1" matches /x/lun1).
 *
 * Rules, one per line or separated by '|', from $COFFER_FAULT or from the
 * file $COFFER_FAULT_CTL (re-read whenever its mtime changes, so a test can
 * arm and disarm faults in a running daemon):
 *   path=P;op=read|write|fsync|short_read|msync|slow_read;err=EIO|ENOSPC;ms=N;after=N;count=M
 * after: matching calls that pass before the first fault (default 0);
 * count: faults to inject (default -1, without end). short_read returns
 * half the bytes asked for (the rest of the buffer is garbage), then end of
 * file once fewer than two bytes are asked for. slow_read fails nothing: the
 * read waits ms milliseconds (default 300), then runs, so a test can hold a
 * thread inside a read while it does something else. Each injected fault is
 * appended as a line to $COFFER_FAULT_LOG if set, so tests can count them.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

enum fop { F_READ, F_WRITE, F_FSYNC, F_SHORT, F_MSYNC, F_SLOW };

struct rule {
	char path[512];
	enum fop op;
	int err;
	long ms;
	long after;
	long count;
	long seen;
};

#define RULES_MAX 16

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct rule rules[RULES_MAX];
static int nrules;
static int loaded;
static struct timespec ctl_mtime;

static ssize_t (*real_pread)(int, void *, size_t, off_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_preadv)(int, const struct iovec *, int, off_t);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static int (*real_msync)(void *, size_t, int);

static void resolve(void)
{
	if (real_pread)
		return;
	real_pwrite = dlsym(RTLD_NEXT, "pwrite");
	real_preadv = dlsym(RTLD_NEXT, "preadv");
	real_pwritev = dlsym(RTLD_NEXT, "pwritev");
	real_fsync = dlsym(RTLD_NEXT, "fsync");
	real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
	real_msync = dlsym(RTLD_NEXT, "msync");
	real_pread = dlsym(RTLD_NEXT, "pread");
}

static int parse_rule(char *s, struct rule *r)
{
	char *save = NULL;

	memset(r, 0, sizeof(*r));
	r->err = EIO;
	r->count = -1;
	r->ms = 300;
	r->op = -1;
	for (char *kv = strtok_r(s, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
		char *v = strchr(kv, '=');

		while (*kv == ' ' || *kv == '\t')
			kv++;
		if (!v)
			continue;
		*v++ = '\0';
		if (!strcmp(kv, "path"))
			snprintf(r->path, sizeof(r->path), "%s", v);
		else if (!strcmp(kv, "op"))
			r->op = !strcmp(v, "read")	   ? F_READ
				: !strcmp(v, "write")	   ? F_WRITE
				: !strcmp(v, "fsync")	   ? F_FSYNC
				: !strcmp(v, "short_read") ? F_SHORT
				: !strcmp(v, "msync")	   ? F_MSYNC
				: !strcmp(v, "slow_read")  ? F_SLOW
							   : -1;
		else if (!strcmp(kv, "err"))
			r->err = !strcmp(v, "ENOSPC") ? ENOSPC : !strcmp(v, "EIO") ? EIO : atoi(v);
		else if (!strcmp(kv, "ms"))
			r->ms = atol(v);
		else if (!strcmp(kv, "after"))
			r->after = atol(v);
		else if (!strcmp(kv, "count"))
			r->count = atol(v);
	}
	return r->path[0] && (int)r->op >= 0 ? 0 : -1;
}

static void parse_rules(const char *text)
{
	char *copy = strdup(text), *save = NULL;

	nrules = 0;
	if (!copy)
		return;
	for (char *line = strtok_r(copy, "|\n", &save); line && nrules < RULES_MAX;
	     line = strtok_r(NULL, "|\n", &save)) {
		if (line[0] == '#')
			continue;
		if (parse_rule(line, &rules[nrules]) == 0)
			nrules++;
	}
	free(copy);
}

/* Re-read the control file when it changed (lock held). */
static void reload(void)
{
	const char *ctl = getenv("COFFER_FAULT_CTL");
	const char *env = getenv("COFFER_FAULT");
	struct stat st;
	char buf[4096];
	ssize_t n;
	int fd;

	if (!loaded) {
		loaded = 1;
		if (env)
			parse_rules(env);
	}
	if (!ctl || stat(ctl, &st) < 0)
		return;
	if (st.st_mtim.tv_sec == ctl_mtime.tv_sec && st.st_mtim.tv_nsec == ctl_mtime.tv_nsec)
		return;
	ctl_mtime = st.st_mtim;
	fd = open(ctl, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	buf[n > 0 ? n : 0] = '\0';
	parse_rules(buf);
}

static int path_matches(const char *path, const char *want)
{
	size_t lp = strlen(path), lw = strlen(want);

	if (!strcmp(path, want))
		return 1;
	return lw < lp && path[lp - lw - 1] == '/' && !strcmp(path + lp - lw, want);
}

static void note(const char *path, const struct rule *r)
{
	const char *logp = getenv("COFFER_FAULT_LOG");
	static const char *names[] = { "read", "write", "fsync", "short_read", "msync", "slow_read" };
	char line[700];
	int fd, n;

	if (!logp)
		return;
	fd = open(logp, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%s %s %d\n", names[r->op], path, r->err);
	if (write(fd, line, (size_t)n) < 0)
		n = 0;
	close(fd);
}

/*
 * Should this call on @fd fail? @ops: the rule ops that apply (a read is
 * matched by read, short_read and slow_read rules). @return the rule's op + 1
 * with *err set (a slow_read's: its milliseconds), or 0 to pass the call through.
 */
static int inject_path(const char *path, unsigned ops, int *err)
{
	int hit = 0;

	pthread_mutex_lock(&lock);
	reload();
	for (int i = 0; i < nrules && !hit; i++) {
		struct rule *r = &rules[i];

		if (!(ops & (1u << r->op)) || !path_matches(path, r->path))
			continue;
		if (r->seen++ < r->after || r->count == 0)
			continue;
		if (r->count > 0)
			r->count--;
		*err = r->op == F_SLOW ? (int)r->ms : r->err;
		hit = (int)r->op + 1;
		note(path, r);
	}
	pthread_mutex_unlock(&lock);
	return hit;
}

static int armed(void)
{
	return getenv("COFFER_FAULT") || getenv("COFFER_FAULT_CTL");
}

static int inject(int fd, unsigned ops, int *err)
{
	char link[64], path[512];
	ssize_t n;

	if (!armed())
		return 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return 0;
	path[n] = '\0';
	return inject_path(path, ops, err);
}

/* The file mapped at @addr, from /proc/self/maps; 0 if found. */
static int path_of_addr(const void *addr, char *path, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "re");
	char line[1024];
	int ret = -1;

	if (!f)
		return -1;
	while (ret && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		char *p = strchr(line, '/');

		if (sscanf(line, "%lx-%lx", &lo, &hi) != 2 || (unsigned long)addr < lo ||
		    (unsigned long)addr >= hi || !p)
			continue;
		p[strcspn(p, "\n")] = '\0';
		snprintf(path, len, "%s", p);
		ret = 0;
	}
	fclose(f);
	return ret;
}

static void wait_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	int err, hit;
	ssize_t r;

	resolve();
	hit = inject(fd, 1u << F_READ | 1u << F_SHORT | 1u << F_SLOW, &err);
	if (hit == F_SLOW + 1)
		wait_ms(err);
	if (hit == F_READ + 1) {
		errno = err;
		return -1;
	}
	if (hit == F_SHORT + 1) {
		if (len < 2)
			return 0;
		r = real_pread(fd, buf, len / 2, off);
		if (r > 0)
			memset((char *)buf + r, 0xa5, len - (size_t)r);
		return r;
	}
	return real_pread(fd, buf, len, off);
}

ssize_t pread64(int fd, void *buf, size_t len, off_t off) __attribute__((alias("pread")));

ssize_t pwrite(int fd, const void *buf, size_t len, off_t off)
{
	int err;

	resolve();
	if (inject(fd, 1u << F_WRITE, &err)) {
		errno = err;
		return -1;
	}
	return real_pwrite(fd, buf, len, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t len, off_t off) __attribute__((alias("pwrite")));

ssize_t preadv(int fd, const struct iovec *iov, int n, off_t off)
{
	int err, hit;

	resolve();
	hit = inject(fd, 1u << F_READ | 1u << F_SHORT | 1u << F_SLOW, &err);
	if (hit == F_SLOW + 1)
		wait_ms(err);
	if (hit == F_READ + 1 || (hit == F_SHORT + 1 && n > 0 && iov[0].iov_len < 2)) {
		errno = err;
		return hit == F_READ + 1 ? -1 : 0;
	}
	if (hit == F_SHORT + 1 && n > 0)
		return real_pread(fd, iov[0].iov_base, iov[0].iov_len / 2, off);
	return real_preadv(fd, iov, n, off);
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off)
{
	int err;

	resolve();
	if (inject(fd, 1u << F_WRITE, &err)) {
		errno = err;
		return -1;
	}
	return real_pwritev(fd, iov, n, off);
}

int fsync(int fd)
{
	int err;

	resolve();
	if (inject(fd, 1u << F_FSYNC, &err)) {
		errno = err;
		return -1;
	}
	return real_fsync(fd);
}

int fdatasync(int fd)
{
	int err;

	resolve();
	if (inject(fd, 1u << F_FSYNC, &err)) {
		errno = err;
		return -1;
	}
	return real_fdatasync(fd);
}

int msync(void *addr, size_t len, int flags)
{
	char path[512];
	int err;

	resolve();
	if (armed() && path_of_addr(addr, path, sizeof(path)) == 0 &&
	    inject_path(path, 1u << F_MSYNC, &err)) {
		errno = err;
		return -1;
	}
	return real_msync(addr, len, flags);
}
