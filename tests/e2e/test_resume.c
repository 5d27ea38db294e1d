// SPDX-License-Identifier: MIT
/*
 * E2E: resumable receive (receive -s, send -t, receive -A) through the real
 * daemon and coffer. A raw stream of an encrypted dataset and a plain one,
 * cut short (head -c), leave the target partial with a receive_resume_token;
 * send -t TOKEN | receive -s completes it, and the copy reads byte for byte
 * as the source, loads with the original passphrase, and `pool check` is
 * clean. The daemon killed mid-receive keeps only what was committed (the
 * token says no more) and the resume completes; the state survives export
 * and import, from the LUNs alone too. A mangled token, a token of a snapshot that is gone or of
 * another one, and a new stream into a partial target are refused, leaving
 * the partial state as it was; reads of it name the token and -A; receive
 * -A drops it (an incremental's target goes back to FROM).
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "common.h"
#include "daemon.h"

static struct tdaemon td;
static char out[65536];

static const char pass[] = "correct horse battery\n";

static void setup(void)
{
	tdaemon_setup(&td, NULL);
}

static void teardown(void)
{
	tdaemon_teardown(&td);
}

TestSuite(resume, .init = setup, .fini = teardown, .timeout = 240);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)

#define VOL (4u << 20)

static char keyfile[4200], data[4200], stream[4200], cut[4200], rest[4200];

static size_t file_size(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "%s", path);
	return (size_t)st.st_size;
}

static void cut_to(const char *from, const char *to, size_t n)
{
	char cmd[9000];

	snprintf(cmd, sizeof(cmd), "head -c %zu '%s' > '%s'", n, from, to);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

static int files_equal(const char *a, const char *b)
{
	char cmd[9000];

	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
	return system(cmd) == 0;
}

/* @name read whole equals the file @want. */
static void reads_as(const char *name, const char *want)
{
	char back[4200];

	snprintf(back, sizeof(back), "%s/back", td.dir);
	COF_OK(NULL, "read %s > '%s'", name, back);
	cr_assert(files_equal(want, back), "%s does not read back as %s", name, want);
}

static void checked(const char *pool)
{
	COF_OK(NULL, "pool check %s", pool);
	cr_assert(strstr(out, "no errors"), "%s", out);
}

/* @name's receive_resume_token into @tok ("-" when none). */
static void token_of(const char *name, char *tok, size_t cap)
{
	COF_OK(NULL, "get -H -o value receive_resume_token %s", name);
	out[strcspn(out, "\n")] = '\0';
	cr_assert_lt(strlen(out), cap, "%s", out);
	memcpy(tok, out, strlen(out) + 1);
}

/* Is @name's token @want? */
static int token_is(const char *name, const char *want)
{
	char tok[256];

	token_of(name, tok, sizeof(tok));
	return !strcmp(tok, want);
}

/* tank/e: 4 MiB of random bytes, encrypted under the passphrase, with
 * snapshot @s1; the pools tank and backup. */
static void source(int encrypted)
{
	snprintf(keyfile, sizeof(keyfile), "%s", tdaemon_file(&td, "pass", pass, sizeof(pass) - 1));
	COF_OK(NULL, "pool create -s 48M tank %s/l0", td.dir);
	COF_OK(NULL, "pool create -s 48M backup %s/m0", td.dir);
	if (encrypted)
		COF_OK(NULL, "create -s -V 4M -o encryption=aes-256-gcm -o keyformat=passphrase "
			     "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e", keyfile);
	else
		COF_OK(NULL, "create -s -V 4M tank/e");
	tdaemon_random_file(&td, "data", VOL, data, sizeof(data));
	COF_OK(data, "write tank/e");
	COF_OK(NULL, "snapshot tank/e@s1");
	snprintf(stream, sizeof(stream), "%s/stream", td.dir);
	snprintf(cut, sizeof(cut), "%s/cut", td.dir);
	snprintf(rest, sizeof(rest), "%s/rest", td.dir);
}

/* The first @n bytes of the stream into backup/e with -s: refused, kept,
 * with a token (into @tok). */
static void cut_receive(size_t n, char *tok, size_t cap)
{
	cut_to(stream, cut, n);
	cr_assert_neq(cof(cut, "receive -s backup/e"), 0, "a cut stream is refused");
	cr_assert(strstr(out, "kept") && strstr(out, "receive -A"), "%s", out);
	token_of("backup/e", tok, cap);
	cr_assert(!strncmp(tok, "1-", 2), "a partial receive has a token: %s", tok);
}

/* send -t @tok | receive -s backup/e completes it. */
static void resume_with(const char *tok)
{
	COF_OK(NULL, "send -t %s > '%s'", tok, rest);
	cr_assert_lt(file_size(rest), file_size(stream), "the rest is shorter than the whole");
	COF_OK(rest, "receive -s backup/e");
	cr_assert(token_is("backup/e", "-"), "a whole receive has no token");
}

Test(resume, a_cut_raw_stream_resumes_to_the_same_bytes_and_loads_with_its_passphrase)
{
	char tok[256], tok2[256];

	source(1);
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "send -w tank/e@s1 > '%s'", stream);
	token_of("tank/e", tok, sizeof(tok));
	cr_assert_str_eq(tok, "-", "a dataset with no partial receive shows -");

	cut_receive(file_size(stream) * 2 / 5, tok, sizeof(tok));
	checked("backup"); /* a partial state is sound as it is */
	/* the partial target is closed to use, naming the way out */
	cr_assert_neq(cof(NULL, "read backup/e -l 8K > /dev/null"), 0);
	cr_assert(strstr(out, "receive_resume_token") && strstr(out, "receive -A"), "%s", out);
	cr_assert_neq(cof(NULL, "snapshot backup/e@x"), 0);
	cr_assert(strstr(out, "receive -A"), "%s", out);
	cr_assert_neq(cof(NULL, "load-key -L file://%s backup/e", keyfile), 0);
	cr_assert_neq(cof(NULL, "set volsize=8M backup/e"), 0);
	cr_assert(strstr(out, "receive -A"), "%s", out);
	/* a new stream into it is refused, saying to resume or -A */
	cr_assert_neq(cof(stream, "receive backup/e"), 0);
	cr_assert(strstr(out, "partial receive") && strstr(out, "receive -A"), "%s", out);
	cr_assert_neq(cof(stream, "receive -s backup/e"), 0);
	cr_assert(strstr(out, "partial receive"), "%s", out);
	/* cut again while resuming: still partial, further on */
	COF_OK(NULL, "send -t %s > '%s'", tok, rest);
	cut_to(rest, cut, file_size(rest) / 2);
	cr_assert_neq(cof(cut, "receive -s backup/e"), 0);
	token_of("backup/e", tok2, sizeof(tok2));
	cr_assert_str_neq(tok2, tok, "a second cut moves the token on");
	memcpy(tok, tok2, sizeof(tok));

	resume_with(tok);
	COF_OK(NULL, "list -H -o name -t snapshot backup/e");
	cr_assert(strstr(out, "backup/e@s1"), "%s", out);
	checked("backup");
	COF_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	reads_as("backup/e", data);
	reads_as("backup/e@s1", data);
	checked("backup");
}

Test(resume, a_cut_plain_stream_resumes_to_the_same_bytes)
{
	char tok[256];

	source(1);
	COF_OK(NULL, "send tank/e@s1 > '%s'", stream);
	cut_receive(file_size(stream) / 3, tok, sizeof(tok));
	resume_with(tok);
	reads_as("backup/e", data);
	reads_as("backup/e@s1", data);
	checked("backup");
}

/* A token with one field changed and its checksum made anew. */
static void retoken(const char *tok, uint64_t to_guid, uint64_t next, char *dst, size_t cap)
{
	struct stor_resume_token t;
	char why[256];

	cr_assert_eq(stor_resume_token_decode(tok, &t, why, sizeof(why)), 0, "%s", why);
	if (to_guid)
		t.to_guid = to_guid;
	if (next != UINT64_MAX)
		t.next = next;
	cr_assert_eq(stor_resume_token_encode(&t, dst, cap), 0);
}

static uint64_t guid_of(const char *name)
{
	COF_OK(NULL, "get -H -o value guid %s", name);
	return strtoull(out, NULL, 10);
}

Test(resume, bad_tokens_and_other_snapshots_are_refused_and_the_state_stays)
{
	char tok[256], bad[256];
	size_t n;

	source(0);
	COF_OK(NULL, "send tank/e@s1 > '%s'", stream);
	cut_receive(file_size(stream) / 2, tok, sizeof(tok));

	/* mangled: a digit changed, cut short, another version */
	snprintf(bad, sizeof(bad), "%s", tok);
	n = strlen(bad);
	bad[n / 2] = bad[n / 2] == '0' ? '1' : '0';
	cr_assert_neq(cof(NULL, "send -t %s > /dev/null", bad), 0);
	cr_assert(strstr(out, "checksum"), "%s", out);
	snprintf(bad, sizeof(bad), "%.*s", (int)n - 3, tok);
	cr_assert_neq(cof(NULL, "send -t %s > /dev/null", bad), 0);
	cr_assert(strstr(out, "cut short or changed"), "%s", out);
	snprintf(bad, sizeof(bad), "9%s", tok + 1);
	cr_assert_neq(cof(NULL, "send -t %s > /dev/null", bad), 0);
	cr_assert(strstr(out, "version"), "%s", out);

	/* a token of another snapshot (sound, re-checksummed): the receiver
	 * refuses the stream it makes, the state stays */
	COF_OK(NULL, "snapshot tank/e@s2");
	retoken(tok, guid_of("tank/e@s2"), UINT64_MAX, bad, sizeof(bad));
	COF_OK(NULL, "send -t %s > '%s'", bad, rest);
	cr_assert_neq(cof(rest, "receive -s backup/e"), 0);
	cr_assert(strstr(out, "not the rest"), "%s", out);
	/* one that starts elsewhere than the state is refused too */
	retoken(tok, 0, 1, bad, sizeof(bad));
	COF_OK(NULL, "send -t %s > '%s'", bad, rest);
	cr_assert_neq(cof(rest, "receive -s backup/e"), 0);
	cr_assert(strstr(out, "resumes at record 1"), "%s", out);
	cr_assert(token_is("backup/e", tok), "refused streams leave the state as it was");

	/* the snapshot is gone, or made anew under its name */
	COF_OK(NULL, "destroy tank/e@s1");
	cr_assert_neq(cof(NULL, "send -t %s > /dev/null", tok), 0);
	cr_assert(strstr(out, "no snapshot here has the token's GUID"), "%s", out);
	COF_OK(NULL, "snapshot tank/e@s1");
	cr_assert_neq(cof(NULL, "send -t %s > /dev/null", tok), 0);

	/* receive -A drops it; a second -A finds nothing */
	COF_OK(NULL, "receive -A backup/e");
	cr_assert_neq(cof(NULL, "list backup/e"), 0, "the partial dataset is gone");
	cr_assert_neq(cof(NULL, "receive -A backup/e"), 0);
	COF_OK(NULL, "send tank/e@s1 > '%s'", stream);
	COF_OK(stream, "receive backup/e");
	reads_as("backup/e", data);
	cr_assert_neq(cof(NULL, "receive -A backup/e"), 0);
	cr_assert(strstr(out, "no partial receive"), "%s", out);
	checked("backup");
}

/* `coffer receive -s backup/e` reading @fifo, in a child of ours. */
static pid_t receiver(const char *fifo)
{
	const char *bin = getenv("COFFER") && getenv("COFFER")[0] ? getenv("COFFER")
								  : "../../client/coffer";
	pid_t pid = fork();

	cr_assert_neq(pid, -1);
	if (pid == 0) {
		int fd = open(fifo, O_RDONLY);

		if (fd < 0 || dup2(fd, 0) < 0)
			_exit(127);
		execl(bin, bin, "-S", td.sock, "receive", "-s", "backup/e", (char *)NULL);
		_exit(127);
	}
	return pid;
}

Test(resume, a_receive_cut_by_a_crash_resumes_from_what_was_committed)
{
	static const char *const gone[] = { ".mdb", ".mdb-lock", ".luns", ".keys", ".keys.1" };
	char fifo[4200], tok[256], why[256];
	struct stor_resume_token t;
	size_t n, half;
	uint8_t *b;
	double end;
	FILE *f;
	pid_t pid;
	int wfd, st;

	source(1);
	COF_OK(NULL, "send -w tank/e@s1 > '%s'", stream);
	n = file_size(stream);
	half = n / 2;
	b = malloc(n);
	cr_assert_not_null(b);
	f = fopen(stream, "rb");
	cr_assert_eq(fread(b, 1, n, f), n);
	fclose(f);
	snprintf(fifo, sizeof(fifo), "%s/fifo", td.dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);

	pid = receiver(fifo);
	wfd = open(fifo, O_WRONLY);
	cr_assert_geq(wfd, 0);
	cr_assert_eq(write(wfd, b, half), (ssize_t)half);
	/* it began: backup/e is there and closed to readers */
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (cof(NULL, "list -H -o name backup/e") != 0 && tdaemon_poll(end))
		;
	cr_assert_eq(cof(NULL, "list -H -o name backup/e"), 0, "%s", tdaemon_log(&td));
	kill(td.pid, SIGKILL);
	waitpid(td.pid, &st, 0);
	td.pid = -1;
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(wfd);
	free(b);

	tdaemon_start_ok(&td);
	token_of("backup/e", tok, sizeof(tok));
	cr_assert_eq(stor_resume_token_decode(tok, &t, why, sizeof(why)), 0, "%s: %s", tok, why);
	/* no more than what the daemon was given: half a stream of 8 KiB records */
	cr_assert_leq(t.next * 8192u, half, "the token runs ahead: %s", tok);
	cr_assert(t.flags & STOR_RESUME_RAW);
	cr_assert_neq(cof(NULL, "read backup/e -l 8K > /dev/null"), 0, "still closed");
	cr_assert(strstr(out, "receive -A"), "%s", out);

	/* the state survives an export and import too */
	COF_OK(NULL, "pool export backup");
	COF_OK(NULL, "pool import -d %s backup", td.dir);
	cr_assert(token_is("backup/e", tok), "the same state after an import");
	/* and an import from the LUNs alone, the state_dir's files of the pool gone */
	COF_OK(NULL, "pool export backup");
	for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++) {
		char path[4200];

		snprintf(path, sizeof(path), "%s/pools/backup%s", td.state, gone[i]);
		cr_assert(unlink(path) == 0 || errno == ENOENT, "%s: %s", path, strerror(errno));
	}
	COF_OK(NULL, "pool import -d %s backup", td.dir);
	cr_assert(token_is("backup/e", tok), "the same state from the LUNs alone");

	resume_with(tok);
	checked("backup");
	COF_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	reads_as("backup/e", data);
	checked("backup");
}

Test(resume, an_incremental_resumes_or_receive_A_rolls_it_back_to_from)
{
	char tok[256], data2[4200], s1[4200];

	source(0);
	COF_OK(NULL, "send tank/e@s1 > '%s'", stream);
	COF_OK(stream, "receive backup/e");
	tdaemon_random_file(&td, "data2", VOL, data2, sizeof(data2));
	COF_OK(data2, "write tank/e");
	COF_OK(NULL, "snapshot tank/e@s2");
	COF_OK(NULL, "send -i @s1 tank/e@s2 > '%s'", stream);
	cut_receive(file_size(stream) / 2, tok, sizeof(tok));
	cr_assert_neq(cof(NULL, "read backup/e@s1 -l 8K > /dev/null"), 0, "closed, snapshots too");

	/* -A: back to s1, as it was */
	COF_OK(NULL, "receive -A backup/e");
	cr_assert(token_is("backup/e", "-"));
	snprintf(s1, sizeof(s1), "%s", data);
	reads_as("backup/e", s1);
	COF_OK(NULL, "list -H -o name -t snapshot backup/e");
	cr_assert(strstr(out, "backup/e@s1") && !strstr(out, "backup/e@s2"), "%s", out);

	/* cut again, then resumed: s2 whole */
	cut_receive(file_size(stream) / 2, tok, sizeof(tok));
	resume_with(tok);
	reads_as("backup/e", data2);
	reads_as("backup/e@s2", data2);
	reads_as("backup/e@s1", s1);
	checked("backup");
}

Test(resume, a_raw_incremental_resumes_and_loads_with_its_passphrase)
{
	char tok[256], data2[4200];

	source(1);
	COF_OK(NULL, "send -w tank/e@s1 > '%s'", stream);
	COF_OK(stream, "receive backup/e");
	tdaemon_random_file(&td, "data2", VOL, data2, sizeof(data2));
	COF_OK(data2, "write -o 0 tank/e");
	COF_OK(NULL, "snapshot tank/e@s2");
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "send -w -i @s1 tank/e@s2 > '%s'", stream);
	cut_receive(file_size(stream) * 3 / 5, tok, sizeof(tok));
	resume_with(tok);
	COF_OK(NULL, "list -H -o name -t snapshot backup/e");
	cr_assert(strstr(out, "backup/e@s1") && strstr(out, "backup/e@s2"), "%s", out);
	checked("backup");
	COF_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	reads_as("backup/e", data2);
	reads_as("backup/e@s2", data2);
	reads_as("backup/e@s1", data);
	checked("backup");
}

Test(resume, a_receive_whose_client_goes_away_is_kept_and_resumes)
{
	char fifo[4200], tok[256];
	size_t n, part;
	uint8_t *b;
	double end;
	FILE *f;
	pid_t pid;
	int wfd, st;

	source(0);
	COF_OK(NULL, "send tank/e@s1 > '%s'", stream);
	n = file_size(stream);
	part = n / 3;
	b = malloc(n);
	cr_assert_not_null(b);
	f = fopen(stream, "rb");
	cr_assert_eq(fread(b, 1, n, f), n);
	fclose(f);
	snprintf(fifo, sizeof(fifo), "%s/fifo", td.dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	pid = receiver(fifo);
	wfd = open(fifo, O_WRONLY);
	cr_assert_geq(wfd, 0);
	cr_assert_eq(write(wfd, b, part), (ssize_t)part);
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (cof(NULL, "list -H -o name backup/e") != 0 && tdaemon_poll(end))
		;
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(wfd);
	free(b);
	/* the connection's end keeps the state: the token shows once it is kept */
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (token_is("backup/e", "-") && tdaemon_poll(end))
		;
	token_of("backup/e", tok, sizeof(tok));
	cr_assert(!strncmp(tok, "1-", 2), "a client gone keeps the state: %s", tok);
	resume_with(tok);
	reads_as("backup/e", data);
	checked("backup");
}

Test(resume, a_destroyed_partial_receive_leaves_nothing_behind)
{
	char tok[256];

	source(0);
	COF_OK(NULL, "send tank/e@s1 > '%s'", stream);
	cut_receive(file_size(stream) / 2, tok, sizeof(tok));
	COF_OK(NULL, "destroy backup/e");
	cr_assert_neq(cof(NULL, "list backup/e"), 0);
	COF_OK(stream, "receive backup/e");
	/* a restart finds no state of the dataset destroyed to undo */
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	cr_assert(token_is("backup/e", "-"));
	reads_as("backup/e", data);
	checked("backup");
}
