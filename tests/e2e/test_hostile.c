// SPDX-License-Identifier: MIT
/*
 * E2E: hostile peers. A peer without admin rights (uid and gid of
 * `nobody`, no groups) calls every command the table in proto.h marks
 * CMD_ADMIN, with arguments that would change the store if the call got
 * through; each must get -EPERM, the EPERM counter must count them, and
 * pools, datasets, properties and keys must be exactly as before. The
 * list of commands comes from the table itself, so a new admin command is
 * covered the day it is added.
 */
#include <config.h> /* the autoconf header: _GNU_SOURCE */

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <jansson.h>

#include "client.h"
#include "daemon.h"
#include "proto.h"

static struct tdaemon td;
static char out[65536];

static void setup(void)
{
	tdaemon_init(&td, NULL);
	cr_assert_eq(tdaemon_start(&td), 0, "cofferd did not become ready:\n%s", tdaemon_log(&td));
}

static void teardown(void)
{
	int st = tdaemon_stop(&td);

	if (st != 0)
		cr_log_error("cofferd exit %d:\n%s", st, tdaemon_log(&td));
	cr_expect_eq(st, 0, "cofferd did not exit 0 on SIGTERM");
	tdaemon_cleanup(&td);
}

TestSuite(hostile, .init = setup, .fini = teardown, .timeout = 60);

static int __attribute__((format(printf, 1, 2))) cof(const char *fmt, ...)
{
	char args[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	return tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), args);
}

#define COF_OK(...)                                                                          \
	do {                                                                                 \
		int st_ = cof(__VA_ARGS__);                                                  \
		cr_assert_eq(st_, 0, "coffer exit %d: %s\ndaemon:\n%s", st_, out,            \
			     tdaemon_log(&td));                                              \
	} while (0)

/* Everything an admin can see of the store, as one text. */
static char *snapshot(void)
{
	static const char *const views[] = { "-j pool status", "-j list -r",
					     "-j get all tank/a tank/enc" };
	size_t cap = 3 * sizeof(out), len = 0;
	char *s = malloc(cap);

	cr_assert_not_null(s);
	for (size_t i = 0; i < sizeof(views) / sizeof(views[0]); i++) {
		COF_OK("%s", views[i]);
		len += (size_t)snprintf(s + len, cap - len, "%s\n", out);
	}
	return s;
}

/* Arguments that would change the store, whatever the command. */
static json_t *hostile_args(const struct proto_cmd *cmd)
{
	char lun[4200];
	int pool_cmd = !strncmp(cmd->name, "pool_", 5);

	snprintf(lun, sizeof(lun), "%s/hostile-lun", td.dir);
	return json_pack("{s:s, s:[s], s:I, s:[s,s], s:s, s:s, s:b, s:s, s:I}", "name",
			 !strcmp(cmd->name, "pool_create") ? "evil"
			 : pool_cmd			   ? "tank"
			 : !strncmp(cmd->name, "key_", 4)  ? "tank/enc"
							   : "tank/a",
			 "luns", lun, "lun_size", (json_int_t)(64 << 20), "props",
			 "compression=zstd", "keyformat=raw", "prop", "compression", "value",
			 "zstd", "recursive", 1, "key_hex",
			 "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100", "volsize",
			 (json_int_t)(1 << 20));
}

Test(hostile, every_admin_command_of_the_table_gets_eperm_and_changes_nothing)
{
	struct passwd *pw = getpwnam("nobody");
	int fds[2], st, nadmin = 0;
	char *before, *after, buf[8192];
	json_int_t eperm;
	json_t *stats;
	ssize_t n;
	pid_t pid;

	if (geteuid() != 0 || !pw)
		cr_skip_test("needs root and a 'nobody' user to drop to");
	COF_OK("pool create -s 64M tank %s/l0", td.dir);
	COF_OK("create -V 4M tank/a");
	COF_OK("create -V 4M -o encryption=aes-256-ccm -o keyformat=passphrase "
	       "-o pbkdf2iters=100000 -o keylocation=file://%s tank/enc",
	       tdaemon_file(&td, "pass", "hostile passphrase\n", 19));
	before = snapshot();
	cr_assert_eq(pipe(fds), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		/* the child: nobody, no groups; one line per admin command */
		struct coffer_conn *c = NULL;
		FILE *f = fdopen(fds[1], "w");

		close(fds[0]);
		if (setgroups(0, NULL) || setgid(pw->pw_gid) || setuid(pw->pw_uid))
			_exit(3);
		if (coffer_connect(td.sock, &c) < 0)
			_exit(4);
		for (unsigned op = 1; op < 65536; op++) {
			const struct proto_cmd *cmd = proto_cmd_by_op(op);
			json_t *reply = NULL;
			char err[512] = "";
			int ret;

			if (!cmd || !(cmd->flags & CMD_ADMIN))
				continue;
			ret = coffer_call(c, cmd->name, hostile_args(cmd), &reply, err,
					  sizeof(err));
			json_decref(reply);
			fprintf(f, "%s %d %s\n", cmd->name, ret, err);
		}
		/* what a non-admin may do still works on the same connection */
		fprintf(f, "ping %d\n", coffer_call(c, "ping", NULL, NULL, NULL, 0));
		coffer_close(c);
		fclose(f);
		_exit(0);
	}
	close(fds[1]);
	n = 0;
	for (ssize_t r; (r = read(fds[0], buf + n, sizeof(buf) - 1 - (size_t)n)) > 0;)
		n += r;
	buf[n] = '\0';
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
	cr_log_info("non-admin peer:\n%s", buf);
	for (unsigned op = 1; op < 65536; op++) {
		const struct proto_cmd *cmd = proto_cmd_by_op(op);
		char want[64];

		if (!cmd || !(cmd->flags & CMD_ADMIN))
			continue;
		nadmin++;
		snprintf(want, sizeof(want), "\n%s %d ", cmd->name, -EPERM);
		cr_expect(strstr(buf, want + 1) == buf || strstr(buf, want),
			  "%s by a non-admin did not get EPERM:\n%s", cmd->name, buf);
	}
	cr_assert_gt(nadmin, 10, "the table has too few admin commands to be the real one");
	cr_assert(strstr(buf, "\nping 0"), "ping failed for the non-admin:\n%s", buf);
	after = snapshot();
	cr_assert_str_eq(after, before, "the store changed under a non-admin peer");
	free(before);
	free(after);
	snprintf(buf, sizeof(buf), "%s/hostile-lun", td.dir);
	cr_assert_neq(access(buf, F_OK), 0, "a non-admin made the daemon create %s", buf);
	COF_OK("-j stats");
	stats = json_loads(out, 0, NULL);
	eperm = json_integer_value(json_object_get(json_object_get(stats, "io"), "eperm"));
	json_decref(stats);
	cr_assert_geq(eperm, nadmin, "stats count %lld refusals of %d", (long long)eperm, nadmin);
}
