// SPDX-License-Identifier: MIT
/*
 * The daemon's events, after OpenZFS's zevent queue and ZED: libstore hands
 * each fault, repair, lost record, scan, suspend and key change to
 * events_post() (through stor_set_event_fn), and so do the handlers for
 * every administrative change they used to log (admin.<command>). Each
 * event gets an eid (1, 2, ... per run of the daemon) and a time, and goes
 *
 *   - into a ring of the last max_events (cofferd.conf), which pool_events
 *     reads (`coffer pool events [-f]`; zpool events);
 *   - into the log as one line, "event EID CLASS: pool=P k=v ...", at
 *     warning for faults, errors and suspends, info otherwise;
 *   - to the hooks of event_hook_dir (ZED's zedlets): every executable
 *     named SELECTOR-anything whose SELECTOR is "all", the class
 *     ("lun.fault-mail.sh") or a prefix of it up to a dot ("io-log.sh"
 *     runs for io.repair, io.error...). Each runs with the event in its
 *     environment (COFFER_EVENT_EID, _CLASS, _TIME, _TIME_NS,
 *     _TIME_STRING, _POOL and COFFER_EVENT_<FIELD> for each field, upper
 *     case; COFFER_SOCKET, PATH), stdin /dev/null, stdout and stderr the
 *     daemon's. At most EVENTS_HOOKS_MAX at once, EVENTS_HOOK_QUEUE more
 *     waiting (past that a run is dropped, and the log says how many), each
 *     killed after EVENTS_HOOK_TIMEOUT_S. The directory is read anew for
 *     each turn of the loop that has events.
 *
 * Posting happens on any thread, I/O workers included, with libstore's
 * locks perhaps held: it takes one mutex, copies the event into one
 * allocation and wakes the loop (uv_async). The log line and the hooks
 * happen on the loop, so no I/O path waits on the journal or a fork.
 *
 * Floods: one damaged side may give an io.repair per extent, a full pool
 * an io.nospace per batch of writes. The io.* classes are limited per
 * (class, pool) by a token bucket, as ZED's zfs_*_events_per_second: the
 * first EVENTS_BURST pass, then EVENTS_RATE a second; what is dropped is
 * counted and said once a second as one event of that class and pool with
 * a single field, suppressed=N. The other classes happen once per
 * transition or per command, and are never dropped.
 */

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "events.h"
#include "log.h"

#define LIMITS 64     /* (class, pool) pairs the limiter keeps */
#define ANNOUNCE 64   /* events the loop logs per turn of the lock */
#define CLASS_MAX 48  /* bytes of a class, its NUL included */

/* One event; immutable once posted, shared by the ring, the loop and hooks. */
struct ev {
	atomic_int refs;
	uint64_t eid;
	int64_t sec;
	long nsec;
	const char *cls;
	const char *pool;
	size_t nf;
	struct stor_event_field f[]; /* the strings follow, in the same allocation */
};

/* A (class, pool) of a limited class: its bucket and what it dropped. */
struct limit {
	char cls[CLASS_MAX];
	char pool[STOR_POOL_NAME_MAX + 1];
	double tokens, at; /* tokens as of @at (CLOCK_MONOTONIC seconds) */
	uint64_t dropped;
};

/* A hook to run for an event, waiting for a slot. */
struct hook_run {
	struct hook_run *next;
	struct ev *ev;
	char *path;
};

/* A hook running: its process and its timeout. */
struct hook_child {
	uv_process_t proc;
	uv_timer_t timer;
	struct hook_child *prev, *next;
	char *path;
	uint64_t eid;
	int open; /* handles not yet closed */
};

static struct {
	pthread_mutex_t lock; /* the ring, the counters, the limiter, started */
	struct ev **ring;
	size_t cap;
	uint64_t next;      /* the eid the next event gets (the first is 1) */
	uint64_t announced; /* the last eid handed to the loop */
	struct limit limits[LIMITS];
	size_t nlimits;
	int any_dropped;
	int started;
	const struct config *cfg;
	uv_loop_t *loop;
	uv_async_t async;
	uv_timer_t flush;
	/* loop thread only: the hooks */
	char **hooks;
	size_t nhooks;
	int dir_failed;
	struct hook_run *q_head, *q_tail;
	size_t queued;
	unsigned running;
	struct hook_child *children;
	uint64_t hook_dropped;
} E = { .lock = PTHREAD_MUTEX_INITIALIZER, .next = 1 };

/* ---- the events ---- */

static void ev_unref(struct ev *e)
{
	if (e && atomic_fetch_sub(&e->refs, 1) == 1)
		free(e);
}

static struct ev *ev_ref(struct ev *e)
{
	atomic_fetch_add(&e->refs, 1);
	return e;
}

static char *put_str(char **at, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = *at;

	memcpy(d, s, n);
	*at += n;
	return d;
}

/* @cls, @pool and @f copied into one allocation, timed now; NULL: no memory. */
static struct ev *ev_new(const char *cls, const char *pool, const struct stor_event_field *f,
			 size_t n)
{
	size_t size = sizeof(struct ev) + n * sizeof(f[0]) + strlen(cls) + strlen(pool) + 2;
	struct timespec ts;
	struct ev *e;
	char *at;

	for (size_t i = 0; i < n; i++)
		size += strlen(f[i].name) + 1 + (f[i].str ? strlen(f[i].str) + 1 : 0);
	e = malloc(size);
	if (!e)
		return NULL;
	clock_gettime(CLOCK_REALTIME, &ts);
	atomic_init(&e->refs, 1);
	e->eid = 0;
	e->sec = ts.tv_sec;
	e->nsec = ts.tv_nsec;
	e->nf = n;
	at = (char *)&e->f[n];
	e->cls = put_str(&at, cls);
	e->pool = put_str(&at, pool);
	for (size_t i = 0; i < n; i++) {
		e->f[i].name = put_str(&at, f[i].name);
		e->f[i].str = f[i].str ? put_str(&at, f[i].str) : NULL;
		e->f[i].num = f[i].num;
	}
	return e;
}

/* What a class is worth in the log, and whether it comes in floods. */
static int class_prio(const char *cls)
{
	static const char *const warn[] = { STOR_EV_LUN_FAULT,	   STOR_EV_POOL_STATE,
					    STOR_EV_POOL_SUSPEND,  STOR_EV_POOL_TAKEOVER,
					    STOR_EV_IO_REPAIR,	   STOR_EV_IO_ERROR,
					    STOR_EV_IO_NOSPACE };

	if (!strcmp(cls, EVENTS_POOL_FAULT))
		return LOG_ERR;

	for (size_t i = 0; i < sizeof(warn) / sizeof(warn[0]); i++)
		if (!strcmp(cls, warn[i]))
			return LOG_WARNING;
	return LOG_INFO;
}

static int class_limited(const char *cls)
{
	return !strncmp(cls, "io.", 3);
}

static double mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The bucket of (@cls, @pool), made (or taken from the quietest pair) if new; lock held. */
static struct limit *limit_of(const char *cls, const char *pool)
{
	struct limit *l, *old = NULL;

	for (size_t i = 0; i < E.nlimits; i++) {
		l = &E.limits[i];
		if (!strcmp(l->cls, cls) && !strcmp(l->pool, pool))
			return l;
		if (!l->dropped && (!old || l->at < old->at))
			old = l;
	}
	if (E.nlimits < LIMITS)
		l = &E.limits[E.nlimits++];
	else
		l = old ? old : &E.limits[0];
	snprintf(l->cls, sizeof(l->cls), "%s", cls);
	snprintf(l->pool, sizeof(l->pool), "%s", pool);
	l->tokens = EVENTS_BURST;
	l->at = mono();
	l->dropped = 0;
	return l;
}

/* Refill @l's bucket to now; lock held. */
static void refill(struct limit *l)
{
	double now = mono();

	l->tokens += (now - l->at) * EVENTS_RATE;
	if (l->tokens > EVENTS_BURST)
		l->tokens = EVENTS_BURST;
	l->at = now;
}

/* Wake the loop, if it runs; lock held (the async handle closes under it). */
static void wake(void)
{
	if (E.started)
		uv_async_send(&E.async);
}

/* Into the ring, with the next eid; the oldest falls off. */
static void ring_put(struct ev *e)
{
	struct ev *old;

	pthread_mutex_lock(&E.lock);
	e->eid = E.next++;
	old = E.ring[e->eid % E.cap];
	E.ring[e->eid % E.cap] = e;
	wake();
	pthread_mutex_unlock(&E.lock);
	ev_unref(old);
}

void events_post(const char *cls, const char *pool, const struct stor_event_field *f, size_t n)
{
	struct ev *e;

	if (!E.ring || !cls)
		return;
	pool = pool ? pool : "";
	if (class_limited(cls)) {
		struct limit *l;
		int pass;

		pthread_mutex_lock(&E.lock);
		l = limit_of(cls, pool);
		refill(l);
		pass = l->tokens >= 1;
		if (pass) {
			l->tokens -= 1;
		} else {
			l->dropped++;
			E.any_dropped = 1;
			wake();
		}
		pthread_mutex_unlock(&E.lock);
		if (!pass)
			return;
	}
	e = ev_new(cls, pool, f, n);
	if (e)
		ring_put(e);
}

static void from_store(const struct stor_event *ev, void *arg)
{
	(void)arg;
	events_post(ev->cls, ev->pool, ev->fields, ev->nfields);
}

int events_init(const struct config *cfg)
{
	E.cap = cfg->max_events;
	E.ring = calloc(E.cap, sizeof(*E.ring));
	if (!E.ring)
		return -ENOMEM;
	E.cfg = cfg;
	stor_set_event_fn(from_store, NULL);
	return 0;
}

void events_fini(void)
{
	stor_set_event_fn(NULL, NULL);
	for (size_t i = 0; E.ring && i < E.cap; i++)
		ev_unref(E.ring[i]);
	free(E.ring);
	E.ring = NULL;
}

/* The oldest eid the ring holds; lock held. */
static uint64_t first_held(void)
{
	return E.next > E.cap ? E.next - E.cap : 1;
}

json_t *events_list(uint64_t since, const char *pool, size_t max)
{
	json_t *reply = json_object(), *a = json_array();
	struct ev **got = NULL;
	uint64_t first, next, lost, upto;
	size_t n = 0;
	int more = 0;

	if (!reply || !a || !(got = calloc(max ? max : 1, sizeof(*got)))) {
		json_decref(reply);
		json_decref(a);
		return NULL;
	}
	pthread_mutex_lock(&E.lock);
	first = first_held();
	next = E.next;
	lost = since + 1 < first ? first - since - 1 : 0;
	upto = next - 1; /* what this reply covers, unless it fills up */
	for (uint64_t eid = since + 1 > first ? since + 1 : first; eid < next; eid++) {
		struct ev *e = E.ring[eid % E.cap];

		if (pool && strcmp(e->pool, pool))
			continue;
		if (n == max) {
			upto = eid - 1;
			more = 1;
			break;
		}
		got[n++] = ev_ref(e);
	}
	pthread_mutex_unlock(&E.lock);
	for (size_t i = 0; i < n; i++) {
		struct ev *e = got[i];
		json_t *fo = json_object();

		for (size_t k = 0; k < e->nf; k++)
			json_object_set_new(fo, e->f[k].name,
					    e->f[k].str ? json_string(e->f[k].str)
							: json_integer((json_int_t)e->f[k].num));
		json_array_append_new(a, json_pack("{s:I, s:I, s:I, s:s, s:s, s:o}", "eid",
						   (json_int_t)e->eid, "time", (json_int_t)e->sec,
						   "time_ns", (json_int_t)e->nsec, "class", e->cls,
						   "pool", e->pool, "fields", fo));
		ev_unref(e);
	}
	free(got);
	json_object_set_new(reply, "events", a);
	json_object_set_new(reply, "next", json_integer((json_int_t)(upto > since ? upto : since)));
	json_object_set_new(reply, "first", json_integer((json_int_t)first));
	json_object_set_new(reply, "lost", json_integer((json_int_t)lost));
	json_object_set_new(reply, "more", json_boolean(more));
	return reply;
}

/* ---- the log line ---- */

/* @s as a value of a log line: bare when it is plain, else quoted. */
static size_t put_value(char *buf, size_t len, const char *s)
{
	size_t n = 0;
	int plain = s[0] != '\0';

	for (const char *c = s; *c && plain; c++)
		plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
			(*c >= '0' && *c <= '9') || strchr("_./:@%+,-", *c);
	if (plain)
		return (size_t)snprintf(buf, len, "%s", s);
	if (n + 1 < len)
		buf[n++] = '"';
	for (const char *c = s; *c && n + 3 < len; c++) {
		if (*c == '"' || *c == '\\')
			buf[n++] = '\\';
		buf[n++] = *c;
	}
	if (n + 1 < len)
		buf[n++] = '"';
	buf[n < len ? n : len - 1] = '\0';
	return n;
}

static void log_event(const struct ev *e)
{
	char line[3072];
	size_t n;

	n = (size_t)snprintf(line, sizeof(line), "event %llu %s:", (unsigned long long)e->eid,
			     e->cls);
	if (e->pool[0] && n < sizeof(line))
		n += (size_t)snprintf(line + n, sizeof(line) - n, " pool=%s", e->pool);
	for (size_t i = 0; i < e->nf && n + 2 < sizeof(line); i++) {
		n += (size_t)snprintf(line + n, sizeof(line) - n, " %s=", e->f[i].name);
		if (n >= sizeof(line))
			break;
		if (e->f[i].str)
			n += put_value(line + n, sizeof(line) - n, e->f[i].str);
		else
			n += (size_t)snprintf(line + n, sizeof(line) - n, "%llu",
					      (unsigned long long)e->f[i].num);
	}
	log_msg(class_prio(e->cls), "%s", line);
}

/* ---- the hooks ---- */

static void hooks_free(void)
{
	for (size_t i = 0; i < E.nhooks; i++)
		free(E.hooks[i]);
	free(E.hooks);
	E.hooks = NULL;
	E.nhooks = 0;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Read event_hook_dir anew: the executables in it, by name. Once per turn
 * of the loop that has events, not per event: a hook added, removed or made
 * executable counts from the next turn (a directory's mtime would miss a
 * chmod), and a few hundred entries cost little next to a fork.
 */
static void hooks_scan(const char *dir)
{
	struct stat st;
	struct dirent *d;
	DIR *dh;

	hooks_free();
	dh = opendir(dir);
	if (!dh) {
		/* said once until it can be read again */
		if (!E.dir_failed)
			log_warn("event_hook_dir %s: %s; no hooks run", dir, strerror(errno));
		E.dir_failed = 1;
		return;
	}
	E.dir_failed = 0;
	while ((d = readdir(dh))) {
		char path[4096], **v;

		/* hidden files and editors' leftovers are no hooks */
		if (d->d_name[0] == '.' || !strchr(d->d_name, '-') ||
		    d->d_name[strlen(d->d_name) - 1] == '~')
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, d->d_name) >= sizeof(path) ||
		    stat(path, &st) < 0 || !S_ISREG(st.st_mode) || access(path, X_OK) < 0)
			continue;
		v = realloc(E.hooks, (E.nhooks + 1) * sizeof(*v));
		if (!v || !(v[E.nhooks] = strdup(path))) {
			E.hooks = v ? v : E.hooks;
			break;
		}
		E.hooks = v;
		E.nhooks++;
	}
	closedir(dh);
	qsort(E.hooks, E.nhooks, sizeof(*E.hooks), by_name);
}

/* Does hook file @path run for class @cls? Its name up to the first '-' says. */
static int hook_matches(const char *path, const char *cls)
{
	const char *name = strrchr(path, '/') + 1;
	size_t sel = strcspn(name, "-");

	if (sel == 3 && !strncmp(name, "all", 3))
		return 1;
	return !strncmp(name, cls, sel) && (cls[sel] == '\0' || cls[sel] == '.');
}

/* "COFFER_EVENT_" and @name in upper case, "=" and @value, or NULL. */
static char *env_var(const char *name, const char *value)
{
	size_t n = strlen(name);
	char *s = malloc(13 + n + 1 + strlen(value) + 1);

	if (!s)
		return NULL;
	memcpy(s, "COFFER_EVENT_", 13);
	for (size_t i = 0; i < n; i++)
		s[13 + i] = (name[i] >= 'a' && name[i] <= 'z') ? (char)(name[i] - 32) : name[i];
	s[13 + n] = '=';
	strcpy(s + 14 + n, value);
	return s;
}

/* The environment of a hook for @e (NULL-terminated, to free with env_free). */
static char **hook_env(const struct ev *e)
{
	size_t n = 0, cap = e->nf + 10;
	char **env = calloc(cap, sizeof(*env)), num[32], when[64];
	struct tm tm;
	time_t t = (time_t)e->sec;

	if (!env)
		return NULL;
	gmtime_r(&t, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	snprintf(num, sizeof(num), "%llu", (unsigned long long)e->eid);
	env[n++] = env_var("eid", num);
	env[n++] = env_var("class", e->cls);
	snprintf(num, sizeof(num), "%lld", (long long)e->sec);
	env[n++] = env_var("time", num);
	snprintf(num, sizeof(num), "%ld", e->nsec);
	env[n++] = env_var("time_ns", num);
	env[n++] = env_var("time_string", when);
	env[n++] = env_var("pool", e->pool);
	for (size_t i = 0; i < e->nf; i++) {
		snprintf(num, sizeof(num), "%llu", (unsigned long long)e->f[i].num);
		env[n++] = env_var(e->f[i].name, e->f[i].str ? e->f[i].str : num);
	}
	if (asprintf(&env[n++], "COFFER_SOCKET=%s", E.cfg->socket) < 0)
		env[n - 1] = NULL;
	env[n++] = strdup("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
	for (size_t i = 0; i < n; i++)
		if (!env[i]) {
			for (size_t k = 0; k < n; k++)
				free(env[k]);
			free(env);
			return NULL;
		}
	return env;
}

static void env_free(char **env)
{
	for (size_t i = 0; env && env[i]; i++)
		free(env[i]);
	free(env);
}

static void pump(void);

static void child_closed(uv_handle_t *h)
{
	struct hook_child *c = h->data;

	if (--c->open > 0)
		return;
	free(c->path);
	free(c);
}

/* Off the list of running hooks, both handles closed. */
static void child_end(struct hook_child *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		E.children = c->next;
	if (c->next)
		c->next->prev = c->prev;
	E.running--;
	uv_close((uv_handle_t *)&c->timer, child_closed);
	uv_close((uv_handle_t *)&c->proc, child_closed);
}

static void child_exit(uv_process_t *p, int64_t status, int sig)
{
	struct hook_child *c = p->data;

	if (sig)
		log_warn("event hook %s: killed by signal %d (event %llu)", c->path, sig,
			 (unsigned long long)c->eid);
	else if (status)
		log_warn("event hook %s: exit %lld (event %llu)", c->path, (long long)status,
			 (unsigned long long)c->eid);
	else
		log_debug("event hook %s: done (event %llu)", c->path, (unsigned long long)c->eid);
	child_end(c);
	pump();
}

static void child_timeout(uv_timer_t *t)
{
	struct hook_child *c = t->data;

	log_warn("event hook %s: still running after %u s: killed (event %llu)", c->path,
		 EVENTS_HOOK_TIMEOUT_S, (unsigned long long)c->eid);
	uv_process_kill(&c->proc, SIGKILL);
}

/* Start @r's hook; the run is used up. */
static void spawn(struct hook_run *r)
{
	struct hook_child *c = calloc(1, sizeof(*c));
	char **env = hook_env(r->ev);
	char *args[] = { r->path, NULL };
	uv_stdio_container_t stdio[3] = {
		{ .flags = UV_IGNORE },
		{ .flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO },
		{ .flags = UV_INHERIT_FD, .data.fd = STDERR_FILENO },
	};
	uv_process_options_t o = { .exit_cb = child_exit, .file = r->path, .args = args,
				   .env = env, .cwd = "/", .stdio_count = 3, .stdio = stdio };
	int ret;

	if (!c || !env) {
		log_warn("event hook %s: out of memory (event %llu)", r->path,
			 (unsigned long long)r->ev->eid);
		free(c);
		goto out;
	}
	c->path = r->path;
	r->path = NULL;
	c->eid = r->ev->eid;
	c->proc.data = c;
	c->timer.data = c;
	c->open = 2;
	uv_timer_init(E.loop, &c->timer);
	ret = uv_spawn(E.loop, &c->proc, &o);
	c->next = E.children;
	if (E.children)
		E.children->prev = c;
	E.children = c;
	E.running++;
	if (ret < 0) {
		log_warn("event hook %s: %s (event %llu)", c->path, uv_strerror(ret),
			 (unsigned long long)c->eid);
		child_end(c); /* a process handle is closed even when the spawn failed */
		goto out;
	}
	uv_timer_start(&c->timer, child_timeout, EVENTS_HOOK_TIMEOUT_S * 1000ull, 0);
out:
	env_free(env);
	ev_unref(r->ev);
	free(r->path);
	free(r);
}

/* Start waiting hooks while slots are free. */
static void pump(void)
{
	while (E.started && E.q_head && E.running < EVENTS_HOOKS_MAX) {
		struct hook_run *r = E.q_head;

		E.q_head = r->next;
		if (!E.q_head)
			E.q_tail = NULL;
		E.queued--;
		spawn(r);
	}
	if (!E.q_head && E.hook_dropped) {
		log_warn("event hooks: %llu runs dropped, the queue of %u was full",
			 (unsigned long long)E.hook_dropped, EVENTS_HOOK_QUEUE);
		E.hook_dropped = 0;
	}
}

/* Queue a run of every hook (as last read) that matches @e. */
static void hooks_for(struct ev *e)
{
	for (size_t i = 0; i < E.nhooks; i++) {
		struct hook_run *r;

		if (!hook_matches(E.hooks[i], e->cls))
			continue;
		if (E.queued >= EVENTS_HOOK_QUEUE) {
			E.hook_dropped++;
			continue;
		}
		r = calloc(1, sizeof(*r));
		if (!r || !(r->path = strdup(E.hooks[i]))) {
			free(r);
			E.hook_dropped++;
			continue;
		}
		r->ev = ev_ref(e);
		if (E.q_tail)
			E.q_tail->next = r;
		else
			E.q_head = r;
		E.q_tail = r;
		E.queued++;
	}
	pump();
}

/* ---- on the loop ---- */

static void flush_cb(uv_timer_t *t);

/* The events posted since the last turn: their log lines and hooks, in eid order. */
static void announce(uv_async_t *a)
{
	struct ev *batch[ANNOUNCE];
	uint64_t fell = 0;
	size_t n;
	int dropped;

	(void)a;
	if (E.cfg->event_hook_dir && E.cfg->event_hook_dir[0])
		hooks_scan(E.cfg->event_hook_dir);
	do {
		uint64_t first;

		n = 0;
		pthread_mutex_lock(&E.lock);
		first = first_held();
		if (E.announced + 1 < first) {
			fell += first - E.announced - 1; /* a flood overran the ring meanwhile */
			E.announced = first - 1;
		}
		while (n < ANNOUNCE && E.announced + 1 < E.next)
			batch[n++] = ev_ref(E.ring[++E.announced % E.cap]);
		dropped = E.any_dropped;
		pthread_mutex_unlock(&E.lock);
		for (size_t i = 0; i < n; i++) {
			log_event(batch[i]);
			hooks_for(batch[i]);
			ev_unref(batch[i]);
		}
	} while (n == ANNOUNCE);
	if (fell)
		log_warn("events: %llu events left the list (max_events %zu) before they were "
			 "logged", (unsigned long long)fell, E.cap);
	if (dropped && !uv_is_active((uv_handle_t *)&E.flush))
		uv_timer_start(&E.flush, flush_cb, 1000, 1000);
}

/* Once a second while a limited class drops events: one event per pair says how many. */
static void flush_cb(uv_timer_t *t)
{
	struct {
		char cls[CLASS_MAX], pool[STOR_POOL_NAME_MAX + 1];
		uint64_t n;
	} said[LIMITS];
	size_t n = 0;

	pthread_mutex_lock(&E.lock);
	for (size_t i = 0; i < E.nlimits; i++) {
		struct limit *l = &E.limits[i];

		if (!l->dropped)
			continue;
		memcpy(said[n].cls, l->cls, sizeof(l->cls));
		memcpy(said[n].pool, l->pool, sizeof(l->pool));
		said[n++].n = l->dropped;
		l->dropped = 0;
	}
	E.any_dropped = 0;
	pthread_mutex_unlock(&E.lock);
	for (size_t i = 0; i < n; i++) {
		struct stor_event_field f = { .name = "suppressed", .num = said[i].n };
		struct ev *e = ev_new(said[i].cls, said[i].pool, &f, 1);

		if (e)
			ring_put(e); /* past the limiter: one a second a pair */
	}
	if (!n)
		uv_timer_stop(t);
}

int events_loop_start(uv_loop_t *loop)
{
	int ret;

	E.loop = loop;
	ret = uv_async_init(loop, &E.async, announce);
	if (ret < 0)
		return ret;
	uv_timer_init(loop, &E.flush);
	pthread_mutex_lock(&E.lock);
	E.started = 1;
	wake(); /* what the imports said before the loop ran */
	pthread_mutex_unlock(&E.lock);
	return 0;
}

void events_loop_stop(void)
{
	if (!E.loop)
		return;
	pthread_mutex_lock(&E.lock);
	E.started = 0;
	pthread_mutex_unlock(&E.lock);
	uv_close((uv_handle_t *)&E.async, NULL);
	uv_close((uv_handle_t *)&E.flush, NULL);
	while (E.q_head) {
		struct hook_run *r = E.q_head;

		E.q_head = r->next;
		ev_unref(r->ev);
		free(r->path);
		free(r);
	}
	E.q_tail = NULL;
	E.queued = 0;
	while (E.children)
		child_end(E.children); /* they run on alone */
	hooks_free();
	E.loop = NULL;
}
