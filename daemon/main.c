// SPDX-License-Identifier: MIT
/*
 * cofferd: arguments, configuration, the loop and its signals, READY=1 to
 * $NOTIFY_SOCKET, and an orderly shutdown.
 *
 * Start-up order matters: a daemon already answering on the socket stops
 * us before anything else (exit 1, naming its pid); a socket nobody
 * listens on is replaced. The pid file comes next, refused as well when a
 * running daemon holds it. The state directory and every pool come next,
 * then the socket; READY=1 is sent only when both are usable, so a client
 * started after systemd says "started" finds its pools. SIGTERM stops
 * accepting, lets every request in flight finish and be answered, then
 * closes each pool (which commits its open txg), removes the pid file and
 * exits 0. Start-up errors are one line on stderr and exit 1.
 *
 * Key hygiene of the process: unless allow_core_dumps = yes, cofferd makes
 * itself non-dumpable before it reads any key (no core file, no ptrace or
 * /proc/PID/mem for other processes of its uid), and jansson's buffers are
 * wiped when freed, since its lexer keeps copies of the key text it parsed.
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>
#include <systemd/sd-daemon.h>

#include "conf.h"
#include "counters.h"
#include "dispatch.h"
#include "events.h"
#include "log.h"
#include "loops.h"
#include "registry.h"
#include "roots.h"
#include "metrics.h"
#include "nbd.h"
#include "pidfile.h"
#include "plainbuf.h"
#include "tls.h"
#include "rpc.h"
#include "store.h"
#include "work.h"

static uv_signal_t sig_term, sig_int, sig_hup;

/* The daemon's counters (counters.h): one instance for the process. */
struct daemon_stats daemon_stats;

/*
 * jansson's free: key text passes through its lexer's buffers (grown by
 * copying) and strings, which it frees without clearing. Admin JSON only,
 * so the cost does not matter.
 */
static void json_wipe_free(void *p)
{
	if (!p)
		return;
	explicit_bzero(p, malloc_usable_size(p));
	free(p);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: cofferd [-f] [-c FILE] [-S SOCKET] [-D STATE_DIR] [-P PID_FILE]"
		   " [--check-config]\n"
		   "  -c, --config FILE      read the [cofferd] section of FILE\n"
		   "  -f, --foreground       do not detach (systemd, tests)\n"
		   "  -S, --socket PATH      listen on PATH (overrides 'socket')\n"
		   "  -D, --state-dir DIR    keep pool metadata in DIR (overrides 'state_dir')\n"
		   "  -P, --pid-file PATH    write the pid to PATH, '' for none (overrides 'pid_file')\n"
		   "      --check-config     parse the configuration and exit\n"
		   "  -V, --version          print the version and exit\n");
}

/* mkdir with exactly @mode (not masked by our umask) if it does not exist yet. */
static int mkdir_mode(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0)
		return errno == EEXIST ? 0 : -errno;
	return chmod(path, mode) < 0 ? -errno : 0;
}

/* mkdir -p with @mode for the directories created. */
static int mkdirs(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t n = strlen(path);
	int ret;

	if (n == 0 || n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		ret = mkdir_mode(buf, mode);
		if (ret < 0)
			return ret;
		*p = '/';
	}
	return mkdir_mode(buf, mode);
}

/*
 * Whoever may write the socket's directory may swap the socket for one of
 * their own and collect what clients send (key text). So the directory is
 * created if missing (0755: traversable, so members of socket_group reach
 * the socket; its own mode guards it) and then trusted only if lstat shows a
 * real directory, not a symlink, owned by our uid and writable by no group
 * or other. Its ancestors must be owned by root or us, and sticky where
 * others may write them (/tmp). @why gets the reason of a refusal.
 * @return 0 or -1
 */
static int socket_dir(const char *sock, char *why, size_t whylen);

/*
 * The directory of socket @path (option @what) made and trusted, and the
 * path free: a daemon that answers there keeps it. @return 0 or -1 (logged)
 */
static int claim_socket(const char *what, const char *path)
{
	char err[512] = "";
	pid_t other;
	int ret;

	if (socket_dir(path, err, sizeof(err)) < 0) {
		log_err("%s %s: %s", what, path, err);
		return -1;
	}
	ret = rpc_socket_probe(path, &other);
	if (ret == -EADDRINUSE && other > 0)
		log_err("cofferd already running (pid %d) at %s", (int)other, path);
	else if (ret == -EADDRINUSE)
		log_err("cofferd already running at %s (too busy to accept)", path);
	else if (ret < 0)
		log_err("%s %s: %s", what, path,
			ret == -EEXIST ? "exists and is not a socket" : strerror(-ret));
	return ret < 0 ? -1 : 0;
}

/*
 * The pid file at @path taken, or the reason it is not (logged): a running
 * daemon that holds it keeps it, as one answering on the socket keeps that.
 * @return 0 or -1
 */
static int claim_pid_file(const char *path, struct pidfile **pf)
{
	pid_t holder;
	int ret = pidfile_claim(path, pf, &holder);

	if (ret == -EBUSY && holder > 0)
		log_err("pid_file %s: held by cofferd pid %d, which is running; give each cofferd "
			"its own pid_file", path, (int)holder);
	else if (ret == -EBUSY)
		log_err("pid_file %s: held by a running process", path);
	else if (ret < 0)
		log_err("pid_file %s: %s", path,
			ret == -ELOOP ? "is a symbolic link" : strerror(-ret));
	return ret < 0 ? -1 : 0;
}

static int socket_dir(const char *sock, char *why, size_t whylen)
{
	char dir[CONFIG_SOCKET_MAX + 1];
	struct stat st;
	char *slash;
	uid_t me = geteuid();
	int ret;

	if (strlen(sock) > CONFIG_SOCKET_MAX) {
		snprintf(why, whylen, "path is longer than %u bytes", CONFIG_SOCKET_MAX);
		return -1;
	}
	memcpy(dir, sock, strlen(sock) + 1);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0; /* a socket in / : nothing to create or trust but the root */
	*slash = '\0';
	ret = mkdirs(dir, 0755);
	if (ret < 0) {
		snprintf(why, whylen, "directory %s: %s", dir, strerror(-ret));
		return -1;
	}
	if (lstat(dir, &st) < 0) {
		snprintf(why, whylen, "directory %s: %s", dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, whylen, "directory %s is %s", dir,
			 S_ISLNK(st.st_mode) ? "a symbolic link; name the real directory"
					     : "not a directory");
		return -1;
	}
	if (st.st_uid != me) {
		snprintf(why, whylen,
			 "directory %s is owned by uid %u, not by this daemon's uid %u; remove it "
			 "or choose another socket path",
			 dir, (unsigned)st.st_uid, (unsigned)me);
		return -1;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, whylen,
			 "directory %s is writable by group or others (mode %04o); "
			 "chmod go-w it",
			 dir, (unsigned)(st.st_mode & 07777));
		return -1;
	}
	for (char *p = dir + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		ret = stat(dir, &st);
		if (ret == 0 && st.st_uid != 0 && st.st_uid != me)
			snprintf(why, whylen, "directory %s is owned by uid %u, not root or us", dir,
				 (unsigned)st.st_uid);
		else if (ret == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) &&
			 !(st.st_mode & S_ISVTX))
			snprintf(why, whylen,
				 "directory %s is writable by group or others and not sticky "
				 "(mode %04o)",
				 dir, (unsigned)(st.st_mode & 07777));
		else if (ret < 0)
			snprintf(why, whylen, "directory %s: %s", dir, strerror(errno));
		*p = '/';
		if (ret < 0 || why[0])
			return -1;
	}
	return 0;
}

/*
 * Without -f: fork, and let the parent wait until the child is ready (exit 0)
 * or has failed (exit with the child's status), so that start-up errors still
 * reach the terminal and a script may use the daemon as soon as `cofferd`
 * returns. The child keeps stderr until it is ready.
 */
static int detach(int *ready_fd)
{
	int p[2], status;
	pid_t pid;
	char byte;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0) {
		close(p[1]);
		if (read(p[0], &byte, 1) == 1)
			_exit(0);
		/* the child died before it was ready */
		if (waitpid(pid, &status, 0) == pid && WIFEXITED(status))
			_exit(WEXITSTATUS(status));
		_exit(1);
	}
	close(p[0]);
	setsid();
	*ready_fd = p[1];
	return 0;
}

/* The detached child is ready: leave the terminal, log to syslog instead of stderr. */
static void detached_ready(const struct config *cfg, int *ready_fd)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);

	if (!cfg->log_target || !strcmp(cfg->log_target, "stderr")) {
		log_close();
		log_open("syslog", cfg->log_level);
	}
	if (fd >= 0) {
		dup2(fd, STDIN_FILENO);
		dup2(fd, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
	if (write(*ready_fd, "r", 1) != 1)
		log_warn("detach: could not tell the parent we are ready");
	close(*ready_fd);
	*ready_fd = -1;
}

/* Each layer's part of an event loop, on the loop's thread (loops.c). */
static int loop_attach(uv_loop_t *loop)
{
	int ret;

	dispatch_loop_attach(loop);
	ret = plainbuf_loop_attach(loop);
	if (ret == 0)
		ret = work_loop_attach(loop);
	if (ret == 0)
		ret = reg_loop_attach(loop);
	if (ret == 0)
		ret = rpc_loop_attach(loop);
	return ret;
}

/* A loop's connections are gone: nothing of its own is in flight any more. */
static void loop_drained(void)
{
	reg_loop_detach();
	work_loop_detach();
	plainbuf_loop_detach();
	dispatch_loop_detach();
}

static void drained(void)
{
	/* every loop's connections are gone: nothing is in flight any more */
	loops_join();
	reg_loop_stop();
	work_stop();
	events_loop_stop();
	uv_close((uv_handle_t *)&sig_term, NULL);
	uv_close((uv_handle_t *)&sig_int, NULL);
	uv_close((uv_handle_t *)&sig_hup, NULL);
}

static char config_path[PATH_MAX];
static const char *config_file; /* re-read on SIGHUP; absolute, the daemon runs in / */

/*
 * SIGHUP (systemctl reload): reopen the log and apply what can change while
 * running, cache_size and log_level, from the config file; the rest takes
 * a restart. A file that no longer parses changes nothing.
 */
static void reload(void)
{
	struct config c;
	char err[512];
	int ret = log_reopen();

	if (ret < 0)
		log_err("log: reopen: %s", strerror(-ret));
	if (!config_file)
		return;
	config_defaults(&c);
	if (config_load(&c, config_file, err, sizeof(err)) < 0) {
		log_err("reload: %s; keeping the running configuration", err);
	} else if (stor_cache_set_size(c.cache_size) < 0) {
		log_err("reload: cache_size %llu: out of memory", (unsigned long long)c.cache_size);
	} else {
		log_level = c.log_level;
		log_info("reloaded %s: cache_size %llu, log_level %d", config_file,
			 (unsigned long long)c.cache_size, c.log_level);
	}
	config_free(&c);
}

static void on_signal(uv_signal_t *h, int signum)
{
	(void)h;
	if (signum == SIGHUP) {
		reload();
		return;
	}
	log_info("signal %d: shutting down", signum);
	sd_notify(0, "STOPPING=1");
	rpc_shutdown(loop_drained, drained);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "socket", required_argument, NULL, 'S' },
		{ "state-dir", required_argument, NULL, 'D' },
		{ "pid-file", required_argument, NULL, 'P' },
		{ "check-config", no_argument, NULL, 'C' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct config cfg;
	const char *cfile = NULL, *sock = NULL, *state = NULL, *pidf = NULL;
	int foreground = 0, check = 0, opt, ret, status = 1, ready_fd = -1;
	char err[512], nbd_path[CONFIG_SOCKET_MAX + 1], pid_path[PATH_MAX];
	struct pidfile *pid_claim = NULL;
	int nbd_on, pid_on;
	struct tls_ctx *tls = NULL;
	unsigned tcp_port = 0;
	uv_loop_t *loop = NULL;
	long ncpu;

	config_defaults(&cfg);
	while ((opt = getopt_long(argc, argv, "c:fS:D:P:Vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'c':
			cfile = optarg;
			break;
		case 'f':
			foreground = 1;
			break;
		case 'S':
			sock = optarg;
			break;
		case 'D':
			state = optarg;
			break;
		case 'P':
			pidf = optarg;
			break;
		case 'C':
			check = 1;
			break;
		case 'V':
			printf("cofferd %s (protocol %u)\n", PACKAGE_VERSION, PROTO_VERSION);
			config_free(&cfg);
			return 0;
		case 'h':
			usage(stdout);
			config_free(&cfg);
			return 0;
		default:
			usage(stderr);
			config_free(&cfg);
			return 2;
		}
	}
	if (optind < argc) {
		usage(stderr);
		config_free(&cfg);
		return 2;
	}
	if (cfile && config_load(&cfg, cfile, err, sizeof(err)) < 0) {
		fprintf(stderr, "cofferd: %s\n", err);
		config_free(&cfg);
		return 1;
	}
	if (cfile && realpath(cfile, config_path))
		config_file = config_path;
	if (sock) {
		free(cfg.socket);
		cfg.socket = strdup(sock);
	}
	if (state) {
		free(cfg.state_dir);
		cfg.state_dir = strdup(state);
	}
	if (!cfg.socket || !cfg.state_dir) {
		fprintf(stderr, "cofferd: out of memory\n");
		config_free(&cfg);
		return 1;
	}
	/* -P is checked as the file's value is: a bare name goes beside the socket */
	if (pidf && config_set(&cfg, "pid_file", pidf, err, sizeof(err)) < 0) {
		fprintf(stderr, "cofferd: %s\n", err);
		config_free(&cfg);
		return 1;
	}
	pid_on = config_pid_file(&cfg, pid_path, sizeof(pid_path));
	if (pid_on < 0) {
		fprintf(stderr, "cofferd: pid_file %s: path is longer than %d bytes\n", cfg.pid_file,
			PATH_MAX - 1);
		config_free(&cfg);
		return 1;
	}
	/* the CA file is read per key fetch: one that cannot be read is a mistake now */
	if (cfg.key_https_ca[0] && access(cfg.key_https_ca, R_OK) < 0) {
		fprintf(stderr, "cofferd: key_https_ca %s: %s\n", cfg.key_https_ca, strerror(errno));
		config_free(&cfg);
		return 1;
	}
	/* the list of encryption roots is read now, and a wrong one is a mistake now */
	if (roots_load(cfg.encryption_roots, err, sizeof(err)) < 0) {
		fprintf(stderr, "cofferd: %s\n", err);
		config_free(&cfg);
		return 1;
	}
	if (check && cfg.nbd_listen[0]) {
		/* the TLS files are part of the configuration: check they load */
		if (tls_ctx_new(&cfg, &tls, err, sizeof(err)) < 0) {
			fprintf(stderr, "cofferd: %s\n", err);
			config_free(&cfg);
			return 1;
		}
		tls_ctx_free(tls);
		tls = NULL;
	}
	if (check) {
		printf("%s: configuration ok\n", cfile ? cfile : "(defaults)");
		config_free(&cfg);
		return 0;
	}
	if (cfg.workers == 0) {
		ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		cfg.workers = ncpu > 0 ? (unsigned)ncpu : 1;
	}
	if (!foreground && detach(&ready_fd) < 0) {
		fprintf(stderr, "cofferd: detach: %s\n", strerror(errno));
		config_free(&cfg);
		return 1;
	}
	ret = log_open(cfg.log_target ? cfg.log_target : "stderr", cfg.log_level);
	if (ret < 0) {
		fprintf(stderr, "cofferd: log %s: %s\n", cfg.log_target, strerror(-ret));
		config_free(&cfg);
		return 1;
	}
	umask(027);
	signal(SIGPIPE, SIG_IGN);
	/* before any key is read: no core file or same-uid debugger sees heap or stacks */
	if (!cfg.allow_core_dumps && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		log_warn("prctl PR_SET_DUMPABLE: %s; cofferd may dump core", strerror(errno));
	json_set_alloc_funcs(malloc, json_wipe_free);
	/*
	 * Frames and records of 128 KiB and more get their own mappings, given
	 * back on free: glibc's moving threshold otherwise keeps the peak of a
	 * burst of 1 MiB writes (95 MiB after a fill of 16 datasets) for good.
	 */
	mallopt(M_MMAP_THRESHOLD, 128 << 10);
	ret = mkdirs(cfg.state_dir, 0750);
	if (ret < 0) {
		log_err("state_dir %s: %s", cfg.state_dir, strerror(-ret));
		goto out;
	}
	nbd_on = config_nbd_socket(&cfg, nbd_path, sizeof(nbd_path));
	if (nbd_on < 0) {
		log_err("nbd_socket %s: path is longer than %u bytes", cfg.nbd_socket,
			CONFIG_SOCKET_MAX);
		goto out;
	}
	if (cfg.nbd_listen[0] && tls_ctx_new(&cfg, &tls, err, sizeof(err)) < 0) {
		log_err("%s", err);
		goto out;
	}
	/* before the pools: a daemon already serving them must keep them, and its sockets */
	if (claim_socket("socket", cfg.socket) < 0 ||
	    (nbd_on && claim_socket("nbd_socket", nbd_path) < 0))
		goto out;
	/* after the sockets, which name a daemon that answers there; written by the detached child */
	if (pid_on && claim_pid_file(pid_path, &pid_claim) < 0)
		goto out;
	/* before the pools: an import of one on RADOS LUNs connects with it */
	if (stor_rados_config(cfg.ceph_conf, cfg.ceph_user, cfg.ceph_keyring,
			      cfg.ceph_lock_timeout) < 0) {
		log_err("ceph: out of memory");
		goto out;
	}
	/* before the pools: what their imports find is an event too */
	if (events_init(&cfg) < 0) {
		log_err("max_events %u: out of memory", cfg.max_events);
		goto out;
	}
	ret = reg_init(&cfg);
	if (ret < 0) {
		log_err("state_dir %s: pools: %s", cfg.state_dir, strerror(-ret));
		goto out;
	}
	if (stor_cache_set_size(cfg.cache_size) < 0) {
		log_err("cache_size %llu: out of memory", (unsigned long long)cfg.cache_size);
		goto out_pools;
	}

	if (cfg.loops == 0)
		cfg.loops = loops_auto();
	loop = uv_default_loop();
	dispatch_init(&cfg);
	rpc_init(&cfg);
	ret = work_start(cfg.workers, cfg.io_inline);
	if (ret < 0) {
		log_err("workers: %s", uv_strerror(ret));
		goto out_pools;
	}
	plainbuf_init();
	ret = loops_start(loop, cfg.loops, loop_attach);
	if (ret < 0) {
		log_err("loops: %s", uv_strerror(ret));
		goto out_pools;
	}
	ret = events_loop_start(loop);
	if (ret == 0)
		ret = reg_loop_start(loop);
	if (ret < 0) {
		log_err("registry: %s", uv_strerror(ret));
		goto out_pools;
	}
	ret = rpc_listen();
	if (ret < 0) {
		log_err("socket %s: %s", cfg.socket,
			ret == -ESRCH ? "socket_group does not exist" : uv_strerror(ret));
		goto out_pools;
	}
	ret = nbd_on ? nbd_listen(&cfg, nbd_path) : 0;
	if (ret < 0) {
		log_err("nbd_socket %s: %s", nbd_path,
			ret == -ESRCH ? "socket_group does not exist" : uv_strerror(ret));
		goto out_pools;
	}
	ret = tls ? nbd_listen_tcp(&cfg, tls, &tcp_port) : 0;
	if (ret < 0) {
		log_err("nbd_listen %s: %s", cfg.nbd_listen,
			ret == -EINVAL ? "not HOST:PORT" : uv_strerror(ret));
		goto out_pools;
	}
	if (tls)
		log_info("NBD over TLS on %s (port %u)", cfg.nbd_listen, tcp_port);
	if (metrics_http_start(&cfg, err, sizeof(err)) < 0) {
		log_err("%s", err);
		goto out_pools;
	}
	uv_signal_init(loop, &sig_term);
	uv_signal_init(loop, &sig_int);
	uv_signal_init(loop, &sig_hup);
	uv_signal_start(&sig_term, on_signal, SIGTERM);
	uv_signal_start(&sig_int, on_signal, SIGINT);
	uv_signal_start(&sig_hup, on_signal, SIGHUP);
	log_info("cofferd %s: listening on %s%s%s, state in %s, %u loops, %u workers",
		 PACKAGE_VERSION, cfg.socket, nbd_on ? ", NBD on " : "", nbd_on ? nbd_path : "",
		 cfg.state_dir, cfg.loops, cfg.io_inline ? 0 : cfg.workers);
	log_ready();
	sd_notifyf(0, "READY=1\nSTATUS=listening on %s\nMAINPID=%lu", cfg.socket,
		   (unsigned long)getpid());
	if (ready_fd >= 0)
		detached_ready(&cfg, &ready_fd);
	uv_run(loop, UV_RUN_DEFAULT);
	status = 0;
out_pools:
	metrics_http_stop(); /* its renders read the registry */
	if (reg_fini() && status == 0)
		status = 1; /* a pool lost writes at shutdown: say so in the exit status */
	if (status == 0)
		log_info("stopped");
out:
	/* after a failed start the process exits; the loop is left as it is */
	if (status == 0)
		uv_loop_close(loop);
	pidfile_release(pid_claim);
	tls_ctx_free(tls);
	events_fini();
	log_close();
	config_free(&cfg);
	roots_free();
	return status;
}
