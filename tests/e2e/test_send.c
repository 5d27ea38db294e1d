// SPDX-License-Identifier: MIT
/*
 * E2E: send and receive through the real daemons and coffer. A raw stream
 * of an encrypted dataset, sent with its key unloaded, is received by a
 * second daemon with its own state_dir: neither the stream nor the new
 * LUNs hold the plaintext, the copy loads with the original passphrase
 * and reads back the same bytes. A byte flipped in the header, a record or
 * the end, and a stream cut anywhere, are refused and leave nothing (no
 * dataset, no space, `pool check` clean). Non-raw streams of clear and
 * encrypted datasets carry plaintext; received under an encrypted parent
 * they are encrypted with its key. -F replaces a dataset, and no -F refuses.
 * Incrementals (send -i, -I): the copy reads as the source's snapshot, the
 * discarded records as zeros, with every snapshot received; a raw one goes
 * in with no key on either side and loads with the original passphrase,
 * with no (salt, nonce) pair twice in the copy's pointers. Each refusal
 * (another FROM, a changed target without -F, a change-key on either side,
 * a cut, flipped or forged stream, a client or daemon killed mid-stream)
 * leaves the target as it was, snapshots included. A stream whose snapshot
 * has a GUID of a dataset, and a raw one far ahead of the pool's txg, are
 * refused.
 */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "crypt/hash.h"
#include "daemon.h"
#include "send/stream.h"
#include "tamper.h"

static struct tdaemon td, td2;
static char out[65536];

static const char marker[] = "coffer-plaintext-marker/";
static const char pass[] = "correct horse battery\n";

static void setup(void)
{
	tdaemon_setup(&td, NULL);
	td2.dir[0] = '\0';
}

static void teardown(void)
{
	tdaemon_teardown(&td2);
	tdaemon_teardown(&td);
}

TestSuite(send, .init = setup, .fini = teardown, .timeout = 240);

#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)
#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)
#define COF2_OK(in, ...) TDAEMON_COF_OK(&td2, out, (in), __VA_ARGS__)

/* The whole file @path, malloc'ed, its size in *@len. */
static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	uint8_t *b;
	long n;

	cr_assert_not_null(f, "%s", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	b = malloc((size_t)n + 1);
	cr_assert_not_null(b);
	cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

static int holds_marker(const char *path)
{
	size_t n;
	uint8_t *b = slurp(path, &n);
	int found = memmem(b, n, marker, sizeof(marker) - 1) != NULL;

	free(b);
	return found;
}

/* 1 MiB of the marker, repeated, with a record of random bytes between. */
static const char *marker_file(struct tdaemon *d)
{
	static char path[4200];
	size_t n = 1u << 20;
	char *b = malloc(n);

	cr_assert_not_null(b);
	for (size_t i = 0; i < n; i++)
		b[i] = marker[i % (sizeof(marker) - 1)];
	for (size_t i = 8192; i < 16384; i++)
		b[i] = (char)rand();
	memset(b + 65536, 0, 8192); /* a hole: not sent */
	snprintf(path, sizeof(path), "%s", tdaemon_file(d, "marked", b, n));
	free(b);
	return path;
}

static int files_equal(const char *a, const char *b)
{
	char cmd[9000];

	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
	return system(cmd) == 0;
}

static void reads_as(struct tdaemon *d, const char *name, const char *want)
{
	char back[4200], args[9000];

	snprintf(back, sizeof(back), "%s/back", d->dir);
	snprintf(args, sizeof(args), "read %s > '%s'", name, back);
	cr_assert_eq(tdaemon_coffer(d, NULL, NULL, out, sizeof(out), args), 0, "%s: %s\n%s", args,
		     out, tdaemon_log(d));
	cr_assert(files_equal(want, back), "%s does not read back as %s", name, want);
}

static unsigned long long pool_used(struct tdaemon *d, const char *pool)
{
	unsigned long long size = 0, used = 0;
	const char *tab;

	TDAEMON_COF_OK(d, out, NULL, "pool list -H -p %s", pool);
	tab = strchr(out, '\t');
	cr_assert(tab && !strncmp(out, pool, strlen(pool)), "%s", out);
	cr_assert_eq(sscanf(tab, "\t%llu\t%llu", &size, &used), 2, "%s", out);
	return used;
}

static void checked(struct tdaemon *d, const char *pool)
{
	TDAEMON_COF_OK(d, out, NULL, "pool check %s", pool);
	cr_assert(strstr(out, "no errors"), "%s", out);
}

/* tank/e: encrypted with the passphrase in @keyfile, the marker written,
 * snapshot @s1; the raw stream of it with the key unloaded into @stream. */
static void raw_stream(char *keyfile, size_t kcap, const char **data, char *stream, size_t scap)
{
	snprintf(keyfile, kcap, "%s", tdaemon_file(&td, "pass", pass, sizeof(pass) - 1));
	COF_OK(NULL, "pool create -s 32M tank %s/l0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o encryption=aes-256-ccm -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 -o compression=zstd tank/e",
	       keyfile);
	*data = marker_file(&td);
	COF_OK(*data, "write tank/e");
	COF_OK(NULL, "snapshot tank/e@s1");
	COF_OK(NULL, "unload-key tank/e");
	snprintf(stream, scap, "%s/stream", td.dir);
	COF_OK(NULL, "send -w tank/e@s1 > '%s'", stream);
}

Test(send, raw_stream_of_an_unloaded_key_loads_elsewhere_with_the_original_passphrase)
{
	char keyfile[4200], stream[4200], lun[4200];
	const char *data;

	raw_stream(keyfile, sizeof(keyfile), &data, stream, sizeof(stream));
	cr_assert_not(holds_marker(stream), "no plaintext in a raw stream");

	tdaemon_setup(&td2, NULL);
	COF2_OK(NULL, "pool create -s 32M backup %s/m0", td2.dir);
	COF2_OK(stream, "receive backup/e");
	COF2_OK(NULL, "get -H -o value keystatus backup/e");
	cr_assert(strstr(out, "unavailable"), "received without a key: %s", out);
	COF2_OK(NULL, "get -H -o value encryptionroot backup/e");
	cr_assert(strstr(out, "backup/e"), "its own encryption root: %s", out);
	snprintf(lun, sizeof(lun), "%s/m0", td2.dir);
	cr_assert_not(holds_marker(lun), "no plaintext on the new LUN");
	checked(&td2, "backup"); /* needs no key */

	/* the original passphrase, from a file of the other side */
	COF2_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	reads_as(&td2, "backup/e", data);
	/* it is written and read like any dataset after, and survives a restart */
	COF2_OK(data, "write -o 0 backup/e");
	tdaemon_stop_ok(&td2);
	tdaemon_start_ok(&td2);
	COF2_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	reads_as(&td2, "backup/e", data);
	checked(&td2, "backup");

	/* one copy of a raw stream per pool: the same GUID twice is refused */
	cr_assert_neq(tdaemon_cofferf(&td2, stream, out, sizeof(out), "receive backup/e2"), 0);
	cr_assert(strstr(out, "GUID"), "%s", out);
	/* the source still loads and reads as it was */
	COF_OK(NULL, "load-key tank/e");
	reads_as(&td, "tank/e@s1", data);

	/* a child of the root: its copy is a root that the root's passphrase opens */
	COF_OK(NULL, "create -s -V 256K tank/e/kid");
	tdaemon_random_file(&td, "kid", 256 << 10, lun, sizeof(lun));
	COF_OK(lun, "write tank/e/kid");
	COF_OK(NULL, "snapshot tank/e/kid@k");
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "send -w tank/e/kid@k > '%s'", stream);
	COF2_OK(stream, "receive backup/kid");
	COF2_OK(NULL, "load-key -L file://%s backup/kid", keyfile);
	reads_as(&td2, "backup/kid", lun);
}

/*
 * backup's used space comes back to @before. Polled: pool list reads the
 * LUNs' use and the metadata log's apart, and a commit running between the
 * two moves the difference for a moment.
 */
static unsigned long long stable_used(void)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);
	unsigned long long a = pool_used(&td, "backup"), b;

	while ((b = pool_used(&td, "backup")) != a && tdaemon_poll(end))
		a = b;
	return b;
}

static void settles_at(unsigned long long before, const char *what)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);
	unsigned long long after;

	while ((after = pool_used(&td, "backup")) != before && tdaemon_poll(end))
		;
	cr_assert_eq(after, before, "%s: left space taken (%llu, then %llu)", what, before, after);
}

/* Receive @path into backup/x; it must fail saying @says and leave nothing. */
static void refused_saying(const char *path, const char *what, const char *says)
{
	unsigned long long before = stable_used();

	cr_assert_neq(cof(path, "receive backup/x"), 0, "%s: accepted", what);
	cr_assert(strstr(out, "coffer: "), "%s: says why: %s", what, out);
	cr_assert(strstr(out, says), "%s: says '%s': %s", what, says, out);
	cr_assert_neq(cof(NULL, "list backup/x"), 0, "%s: left a dataset", what);
	settles_at(before, what);
}

static void refused(const char *path, const char *what)
{
	refused_saying(path, what, "coffer: ");
}

static void write_variant(const char *dst, const uint8_t *b, size_t n)
{
	FILE *f = fopen(dst, "wb");

	cr_assert_not_null(f);
	cr_assert_eq(fwrite(b, 1, n, f), n);
	fclose(f);
}

Test(send, a_flipped_byte_or_a_cut_stream_is_refused_and_leaves_nothing)
{
	char keyfile[4200], stream[4200], bad[4200];
	const char *data;
	uint8_t *b;
	size_t n;
	/* header (magic, flags, wrapped key, checksum), first record's fixed part
	 * and payload, a later record, the end's count and checksum */
	const size_t hdr = STREAM_HDR_LEN;

	raw_stream(keyfile, sizeof(keyfile), &data, stream, sizeof(stream));
	COF_OK(NULL, "pool create -s 32M backup %s/m0", td.dir);
	b = slurp(stream, &n);
	cr_assert_gt(n, hdr + 200 + 28);
	snprintf(bad, sizeof(bad), "%s/bad", td.dir);
	{
		const size_t at[] = { 0, 12, 100, hdr - 1, hdr + 2, hdr + 20, hdr + 90,
				      hdr + 200, n / 2, n - 20, n - 1 };

		for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
			char what[64];

			b[at[i]] ^= 0x40;
			write_variant(bad, b, n);
			b[at[i]] ^= 0x40;
			snprintf(what, sizeof(what), "byte %zu of %zu flipped", at[i], n);
			refused(bad, what);
		}
	}
	{
		const size_t cut[] = { 0, 7, hdr - 1, hdr, hdr + 50, n / 2, n - 28, n - 1 };

		for (size_t i = 0; i < sizeof(cut) / sizeof(cut[0]); i++) {
			char what[64];

			write_variant(bad, b, cut[i]);
			snprintf(what, sizeof(what), "cut at %zu of %zu", cut[i], n);
			refused(bad, what);
		}
	}
	/* garbage after the end, and a stream that is no stream */
	{
		uint8_t *more = malloc(n + 5);

		memcpy(more, b, n);
		memcpy(more + n, "extra", 5);
		write_variant(bad, more, n + 5);
		free(more);
		refused(bad, "bytes after the end");
		refused(data, "not a stream");
	}
	free(b);
	checked(&td, "backup");
	/* and the sound stream is received whole after all that */
	COF_OK(stream, "receive backup/x");
	COF_OK(NULL, "load-key -L file://%s backup/x", keyfile);
	reads_as(&td, "backup/x", data);
	checked(&td, "backup");
}

Test(send, plain_streams_carry_plaintext_and_an_encrypted_parent_encrypts_them)
{
	char keyfile[4200], stream[4200], rnd[4200];
	const char *data;

	snprintf(keyfile, sizeof(keyfile), "%s", tdaemon_file(&td, "pass", pass, sizeof(pass) - 1));
	COF_OK(NULL, "pool create -s 32M tank %s/l0", td.dir);
	/* a clear dataset */
	COF_OK(NULL, "create -s -V 512K -b 4K tank/c");
	tdaemon_random_file(&td, "rnd", 512 << 10, rnd, sizeof(rnd));
	COF_OK(rnd, "write tank/c");
	COF_OK(NULL, "snapshot tank/c@now");
	snprintf(stream, sizeof(stream), "%s/stream", td.dir);
	COF_OK(NULL, "send tank/c@now > '%s'", stream);
	COF_OK(stream, "receive tank/c2");
	reads_as(&td, "tank/c2", rnd);
	COF_OK(NULL, "get -H -o value recordsize tank/c2");
	cr_assert(strstr(out, "4K"), "%s", out);

	/* an encrypted one: plaintext out, only with its key */
	COF_OK(NULL, "create -s -V 1M -o encryption=aes-128-gcm -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 tank/e", keyfile);
	data = marker_file(&td);
	COF_OK(data, "write tank/e");
	COF_OK(NULL, "snapshot tank/e@now");
	COF_OK(NULL, "send tank/e@now > '%s'", stream);
	cr_assert(holds_marker(stream), "a non-raw stream is plaintext");
	COF_OK(NULL, "unload-key tank/e");
	cr_assert_neq(cof(NULL, "send tank/e@now > '%s/s2'", td.dir), 0);
	cr_assert(strstr(out, "key"), "says the key is missing: %s", out);

	/* under an encrypted parent: encrypted with its key, its root */
	COF_OK(NULL, "create -s -V 1M -o encryption=on -o keyformat=passphrase "
		     "-o keylocation=file://%s -o pbkdf2iters=100000 tank/vault", keyfile);
	COF_OK(stream, "receive tank/vault/e");
	COF_OK(NULL, "get -H -o value encryptionroot tank/vault/e");
	cr_assert(strstr(out, "tank/vault"), "%s", out);
	COF_OK(NULL, "get -H -o value encryption tank/vault/e");
	cr_assert(strstr(out, "aes-256-ccm"), "%s", out);
	reads_as(&td, "tank/vault/e", data);
	COF_OK(NULL, "unload-key tank/vault");
	cr_assert_neq(cof(NULL, "read tank/vault/e > /dev/null"), 0, "no key, no read");
	/* and with the parent's key unloaded nothing can be received under it */
	cr_assert_neq(cof(stream, "receive tank/vault/f"), 0);
	cr_assert_neq(cof(NULL, "list tank/vault/f"), 0, "nothing left");
	checked(&td, "tank");
}

Test(send, receive_refuses_an_existing_dataset_unless_F_replaces_it)
{
	char stream[4200], a[4200], b[4200];

	COF_OK(NULL, "pool create -s 32M tank %s/l0", td.dir);
	COF_OK(NULL, "create -s -V 256K tank/a");
	COF_OK(NULL, "create -s -V 256K tank/b");
	tdaemon_random_file(&td, "a", 256 << 10, a, sizeof(a));
	tdaemon_random_file(&td, "b", 256 << 10, b, sizeof(b));
	COF_OK(a, "write tank/a");
	COF_OK(b, "write tank/b");
	COF_OK(NULL, "snapshot tank/a@x");
	snprintf(stream, sizeof(stream), "%s/stream", td.dir);
	COF_OK(NULL, "send tank/a@x > '%s'", stream);
	cr_assert_neq(cof(stream, "receive tank/b"), 0);
	cr_assert(strstr(out, "-F"), "says how: %s", out);
	reads_as(&td, "tank/b", b);
	/* -F with a damaged stream changes nothing: tank/b stays as it was */
	{
		char bad[4200];
		size_t n;
		uint8_t *sb = slurp(stream, &n);

		sb[n / 2] ^= 0x10;
		snprintf(bad, sizeof(bad), "%s/bad", td.dir);
		write_variant(bad, sb, n);
		free(sb);
		cr_assert_neq(cof(bad, "receive -F tank/b"), 0);
		reads_as(&td, "tank/b", b);
		COF_OK(NULL, "list -H -o name -r tank");
		cr_assert_not(strstr(out, "recv"), "nothing received is left: %s", out);
	}
	COF_OK(stream, "receive -F -u tank/b");
	reads_as(&td, "tank/b", a);
	COF_OK(NULL, "list -H -o name -r tank");
	cr_assert_not(strstr(out, "recv"), "only the name asked for: %s", out);
	/* one with a snapshot is refused before anything is received */
	COF_OK(NULL, "snapshot tank/b@keep");
	cr_assert_neq(cof(stream, "receive -F tank/b"), 0);
	cr_assert(strstr(out, "snapshots"), "%s", out);
	reads_as(&td, "tank/b", a);
	/* what makes no sense is refused */
	cr_assert_neq(cof(NULL, "send tank/a > '%s/s2'", td.dir), 0, "not a snapshot");
	cr_assert_neq(cof(NULL, "send tank/a@nope > '%s/s2'", td.dir), 0, "no such snapshot");
	cr_assert_neq(cof(stream, "receive tank"), 0, "the pool's root");
	cr_assert_neq(cof(stream, "receive tank/none/x"), 0, "no parent");
	checked(&td, "tank");
}

/* `coffer receive backup/x` reading @fifo, in a child of ours. */
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
		execl(bin, bin, "-S", td.sock, "receive", "backup/x", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static int exists(const char *name)
{
	return cof(NULL, "list -H -o name %s", name) == 0;
}

static int busy(const char *name)
{
	return cof(NULL, "read %s -l 8K > /dev/null", name) != 0;
}

/* Feed the first 1.5 MiB of @b to a receiver, wait until @began says its
 * receive has begun (backup/x is there, or busy). */
static pid_t half_received(const char *fifo, const uint8_t *b, size_t n, int *wfd,
			   int (*began)(const char *))
{
	pid_t pid = receiver(fifo);
	double end = tdaemon_deadline(TDAEMON_WAIT_S);
	size_t half = (3u << 20) / 2;

	cr_assert_gt(n, half);
	*wfd = open(fifo, O_WRONLY);
	cr_assert_geq(*wfd, 0);
	cr_assert_eq(write(*wfd, b, half), (ssize_t)half);
	while (!began("backup/x") && tdaemon_poll(end))
		;
	cr_assert(began("backup/x"), "the receive began: %s\n%s", out, tdaemon_log(&td));
	return pid;
}

/* tank/c: 2 MiB of random bytes (@rnd) and @s, its stream in @stream. */
static void two_mib(char *rnd, char *stream)
{
	COF_OK(NULL, "pool create -s 32M tank %s/l0", td.dir);
	COF_OK(NULL, "pool create -s 32M backup %s/m0", td.dir);
	COF_OK(NULL, "create -s -V 2M tank/c");
	tdaemon_random_file(&td, "rnd", 2 << 20, rnd, 4200);
	COF_OK(rnd, "write tank/c");
	COF_OK(NULL, "snapshot tank/c@s");
	snprintf(stream, 4200, "%s/stream", td.dir);
	COF_OK(NULL, "send tank/c@s > '%s'", stream);
}

/* SIGKILL the daemon, as a crash. */
static void crash_daemon(void)
{
	int st;

	kill(td.pid, SIGKILL);
	waitpid(td.pid, &st, 0);
	td.pid = -1;
}

Test(send, a_receive_cut_off_by_its_client_or_a_crash_leaves_nothing)
{
	char stream[4200], fifo[4200], rnd[4200];
	unsigned long long before;
	double end;
	uint8_t *b;
	size_t n;
	pid_t pid;
	int wfd, st;

	two_mib(rnd, stream);
	b = slurp(stream, &n);
	snprintf(fifo, sizeof(fifo), "%s/fifo", td.dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	before = stable_used();

	/* the client goes away: its connection's receive is undone */
	pid = half_received(fifo, b, n, &wfd, exists);
	cr_assert_neq(cof(NULL, "destroy backup/x"), 0, "busy while being received");
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(wfd);
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (exists("backup/x") && tdaemon_poll(end))
		;
	cr_assert_not(exists("backup/x"), "a cut receive is undone");
	settles_at(before, "a cut receive");

	/* the daemon dies: the next import undoes it */
	pid = half_received(fifo, b, n, &wfd, exists);
	crash_daemon();
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	close(wfd);
	tdaemon_start_ok(&td);
	cr_assert_not(exists("backup/x"), "a receive a crash cut is undone at import");
	settles_at(before, "a receive a crash cut");
	checked(&td, "backup");

	/* and the whole stream goes in after both */
	COF_OK(stream, "receive backup/x");
	reads_as(&td, "backup/x", rnd);
	free(b);
}

/*
 * A forger who rebuilds every checksum of a raw stream gets it received,
 * but not past the keys: a changed ciphertext (its pointer's checksum
 * with it) fails the carried view root at the load-key, a changed wrapped
 * key fails the load-key.
 */
static size_t reforge_as(uint8_t *b, size_t n, size_t flip_rec, size_t flip_at,
			 const uint64_t *free_as)
{
	struct stream_hdr h;
	struct stream_rec r;
	uint64_t sum, chain, parts = 0, first, count;
	size_t pos = STREAM_HDR_LEN;

	cr_assert_eq(stream_hdr_get(b, &h, &sum), 0);
	stream_hdr_put(&h, b, &sum);
	chain = sum;
	while (pos + 4 <= n && stream_kind(b + pos) != STREAM_END) {
		if (stream_kind(b + pos) == STREAM_FREE) {
			cr_assert_eq(stream_free_get(b + pos, &h, &first, &count, &sum), 0);
			if (free_as) /* the first free becomes this one */
				stream_free_put(free_as[0], free_as[1], b + pos, &sum);
			free_as = NULL;
			chain = stream_chain(chain, sum);
			parts++;
			pos += STREAM_FREE_LEN;
			continue;
		}
		cr_assert_eq(stream_rec_get(b + pos, &h, &r), 0);
		if (parts == flip_rec) {
			b[pos + STREAM_REC_LEN + flip_at] ^= 0x01;
			r.cksum = hash64(b + pos + STREAM_REC_LEN, r.len); /* scrub's checksum too */
		}
		stream_rec_put(&r, b + pos + STREAM_REC_LEN, b + pos, &sum);
		chain = stream_chain(chain, sum);
		parts++;
		pos += STREAM_REC_LEN + r.len;
	}
	cr_assert_eq(pos + STREAM_END_LEN, n, "the stream is records then its end");
	stream_end_put(parts, chain, b + pos);
	return parts;
}

static size_t reforge(uint8_t *b, size_t n, size_t flip_rec, size_t flip_at)
{
	return reforge_as(b, n, flip_rec, flip_at, NULL);
}

Test(send, a_raw_stream_forged_with_sound_checksums_fails_at_its_tags_and_its_key)
{
	char keyfile[4200], stream[4200], bad[4200];
	const char *data;
	struct stream_hdr h;
	uint64_t sum;
	uint8_t *b;
	size_t n;

	raw_stream(keyfile, sizeof(keyfile), &data, stream, sizeof(stream));
	COF_OK(NULL, "pool create -s 32M backup %s/m0", td.dir);
	snprintf(bad, sizeof(bad), "%s/forged", td.dir);

	/* the second record's ciphertext (record 1, at 8K: random, stored whole) */
	b = slurp(stream, &n);
	cr_assert_gt(reforge(b, n, 1, 100), 2);
	write_variant(bad, b, n);
	free(b);
	COF_OK(bad, "receive backup/f");
	/* its stored-bytes checksum was rebuilt too, so its pointer is not the
	 * one the carried view root covers: the load-key refuses the dataset
	 * (a forger who keeps the checksum is refused at the receive) */
	cr_assert_neq(cof(NULL, "load-key -L file://%s backup/f", keyfile), 0, "a forged record");
	cr_assert(strstr(out, "backup/f") && strstr(out, "MAC"), "names the dataset: %s", out);
	COF_OK(NULL, "get -H -o value keystatus backup/f");
	cr_assert(strstr(out, "unavailable"), "%s", out);
	COF_OK(NULL, "destroy -r backup/f"); /* one copy of a GUID per pool */

	/* the wrapped key */
	b = slurp(stream, &n);
	cr_assert_eq(stream_hdr_get(b, &h, &sum), 0);
	h.wrapped[20] ^= 0x01;
	stream_hdr_put(&h, b, &sum);
	reforge(b, n, SIZE_MAX, 0);
	write_variant(bad, b, n);
	free(b);
	COF_OK(bad, "receive backup/g");
	cr_assert_neq(cof(NULL, "load-key -L file://%s backup/g", keyfile), 0, "a forged key");
	COF_OK(NULL, "get -H -o value keystatus backup/g");
	cr_assert(strstr(out, "unavailable"), "%s", out);
	checked(&td, "backup");
}

/* @stream with its header's snapshot GUID and txg changed (0: kept) and
 * every checksum made good again, into @dst; the original GUID in *@guid. */
static void forge_hdr(const char *stream, const char *dst, uint64_t to_guid, uint64_t to_txg,
		      uint64_t *guid)
{
	struct stream_hdr h;
	uint64_t sum;
	size_t n;
	uint8_t *b = slurp(stream, &n);

	struct stream_hdr was;
	struct stream_rec r;
	uint64_t chain, parts = 0, first, count;
	size_t pos = STREAM_HDR_LEN;

	cr_assert_eq(stream_hdr_get(b, &h, &sum), 0);
	was = h;
	if (guid)
		*guid = h.guid;
	h.to_guid = to_guid ? to_guid : h.to_guid;
	h.to_txg = to_txg ? to_txg : h.to_txg;
	stream_hdr_put(&h, b, &sum);
	/* the parts as they are; the chain over them starts from the header */
	chain = sum;
	while (stream_kind(b + pos) != STREAM_END) {
		if (stream_kind(b + pos) == STREAM_FREE) {
			cr_assert_eq(stream_free_get(b + pos, &was, &first, &count, &sum), 0);
			pos += STREAM_FREE_LEN;
		} else {
			cr_assert_eq(stream_rec_get(b + pos, &was, &r), 0);
			cr_assert_eq(stream_rec_check(b + pos, b + pos + STREAM_REC_LEN, r.len, &sum),
				     0);
			pos += STREAM_REC_LEN + r.len;
		}
		chain = stream_chain(chain, sum);
		parts++;
	}
	cr_assert_eq(pos + STREAM_END_LEN, n);
	stream_end_put(parts, chain, b + pos);
	write_variant(dst, b, n);
	free(b);
}

Test(send, a_stream_whose_snapshot_has_a_datasets_guid_is_refused)
{
	char keyfile[4200], stream[4200], kid[4200], bad[4200], rnd[4200];
	const char *data;
	uint64_t guid;

	raw_stream(keyfile, sizeof(keyfile), &data, stream, sizeof(stream));
	COF_OK(NULL, "pool create -s 32M backup %s/m0", td.dir);
	snprintf(bad, sizeof(bad), "%s/forged", td.dir);
	/* its own dataset's: the snapshot's table would share the head's MAC key */
	forge_hdr(stream, bad, 0, 0, &guid);
	forge_hdr(stream, bad, guid, 0, NULL);
	refused_saying(bad, "the snapshot GUID of its dataset", "GUID");
	/* another dataset's of the receiving pool */
	COF_OK(stream, "receive backup/e");
	COF_OK(NULL, "load-key tank/e");
	COF_OK(NULL, "create -s -V 256K tank/e/kid");
	tdaemon_random_file(&td, "kid", 256 << 10, rnd, sizeof(rnd));
	COF_OK(rnd, "write tank/e/kid");
	COF_OK(NULL, "snapshot tank/e/kid@k");
	COF_OK(NULL, "unload-key tank/e");
	snprintf(kid, sizeof(kid), "%s/kid-stream", td.dir);
	COF_OK(NULL, "send -w tank/e/kid@k > '%s'", kid);
	forge_hdr(kid, bad, guid, 0, NULL);
	refused_saying(bad, "the snapshot GUID of backup/e", "backup/e");
	COF_OK(kid, "receive backup/kid"); /* the stream as sent goes in */
	checked(&td, "backup");
}

static unsigned long long pool_txg(const char *pool)
{
	unsigned long long txg = 0;

	COF_OK(NULL, "pool status %s", pool);
	cr_assert_not_null(strstr(out, "txg: "), "%s", out);
	cr_assert_eq(sscanf(strstr(out, "txg: "), "txg: %llu", &txg), 1, "%s", out);
	return txg;
}

Test(send, a_raw_stream_far_ahead_of_the_pools_txg_is_refused)
{
	char keyfile[4200], stream[4200], bad[4200];
	const char *data;
	unsigned long long txg;

	raw_stream(keyfile, sizeof(keyfile), &data, stream, sizeof(stream));
	COF_OK(NULL, "pool create -s 32M backup %s/m0", td.dir);
	snprintf(bad, sizeof(bad), "%s/forged", td.dir);
	txg = pool_txg("backup");
	forge_hdr(stream, bad, 0, 1ull << 48, NULL);
	refused_saying(bad, "a snapshot at txg 2^48", "txg");
	cr_assert_lt(pool_txg("backup"), txg + 1000, "the pool's txg moved");
	/* as sent it goes in, sparse as every received volume */
	COF_OK(stream, "receive backup/e");
	COF_OK(NULL, "get -H -o value refreservation backup/e");
	cr_assert(strstr(out, "none"), "%s", out);
	cr_assert_lt(pool_txg("backup"), txg + 1000, "the pool's txg moved");
}

/* ---- incremental streams (send -i / -I, receive onto the dataset) ---- */

/* @name read whole into a file of @d's dir called @file; its path. */
static const char *read_to(struct tdaemon *d, const char *name, const char *file)
{
	static char path[2][4200];
	static int which;
	char *p = path[which++ % 2];

	snprintf(p, sizeof(path[0]), "%s/%s", d->dir, file);
	TDAEMON_COF_OK(d, out, NULL, "read %s > '%s'", name, p);
	return p;
}

static size_t file_size(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "%s", path);
	return (size_t)st.st_size;
}

/* The names of @d's snapshots under @ds, one a line. */
static const char *snapshots(struct tdaemon *d, const char *ds)
{
	TDAEMON_COF_OK(d, out, NULL, "list -t snapshot -H -o name -r %s", ds);
	return out;
}

/* Write @len random bytes at @off of @ds on @d. */
static void scribble(struct tdaemon *d, const char *ds, const char *off, size_t len)
{
	char f[4200];

	tdaemon_random_file(d, "scribble", len, f, sizeof(f));
	TDAEMON_COF_OK(d, out, f, "write %s -o %s", ds, off);
}

/* tank/p (1 MiB, 8K records, random) with @a, received whole as backup/p;
 * then records overwritten and others discarded, and @b. */
static void two_snapshots(char *s0, char *s1)
{
	char f[4200];

	COF_OK(NULL, "pool create -s 32M tank %s/l0", td.dir);
	COF_OK(NULL, "pool create -s 32M backup %s/m0", td.dir);
	COF_OK(NULL, "create -s -V 1M -o recordsize=8K tank/p");
	tdaemon_random_file(&td, "p", 1u << 20, f, sizeof(f));
	COF_OK(f, "write tank/p");
	COF_OK(NULL, "snapshot tank/p@a");
	snprintf(s0, 4200, "%s/s0", td.dir);
	COF_OK(NULL, "send tank/p@a > '%s'", s0);
	COF_OK(s0, "receive backup/p");
	scribble(&td, "tank/p", "128K", 64 << 10);
	scribble(&td, "tank/p", "1016K", 8 << 10);
	COF_OK(NULL, "discard tank/p -o 512K -l 96K");
	COF_OK(NULL, "snapshot tank/p@b");
	snprintf(s1, 4200, "%s/s1", td.dir);
	COF_OK(NULL, "send -i @a tank/p@b > '%s'", s1);
}

Test(send, an_incremental_carries_what_changed_and_frees_what_was_discarded)
{
	char s0[4200], s1[4200], zeros[4200], again[4200];
	const char *back;
	uint8_t *z = calloc(1, 96 << 10);

	two_snapshots(s0, s1);
	/* only what changed travels: 9 records of 128, and one free */
	cr_assert_lt(file_size(s1), file_size(s0) / 8, "%zu of %zu", file_size(s1), file_size(s0));
	COF_OK(s1, "receive backup/p");
	reads_as(&td, "backup/p", read_to(&td, "tank/p@b", "want.b"));
	reads_as(&td, "backup/p@b", read_to(&td, "tank/p@b", "want.b"));
	reads_as(&td, "backup/p@a", read_to(&td, "tank/p@a", "want.a"));
	/* the discarded records read as zeros */
	snprintf(zeros, sizeof(zeros), "%s", tdaemon_file(&td, "zeros", z, 96 << 10));
	free(z);
	back = tdaemon_file(&td, "back.z", "", 0);
	COF_OK(NULL, "read backup/p -o 512K -l 96K > '%s'", back);
	cr_assert(files_equal(back, zeros), "the freed records read as zeros");
	cr_assert(strstr(snapshots(&td, "backup/p"), "backup/p@a\nbackup/p@b\n"), "%s", out);
	COF_OK(NULL, "get -H -o value guid tank/p@b");
	snprintf(again, sizeof(again), "%.60s", out);
	COF_OK(NULL, "get -H -o value guid backup/p@b");
	cr_assert_str_eq(out, again, "the received snapshot has the stream's guid");
	/* the same stream twice: its snapshot is there already */
	cr_assert_neq(cof(s1, "receive backup/p"), 0);
	cr_assert(strstr(out, "exists"), "%s", out);
	checked(&td, "backup");
	/* and the copy goes on as the source does: a second step */
	scribble(&td, "tank/p", "0", 8 << 10);
	COF_OK(NULL, "snapshot tank/p@c");
	COF_OK(NULL, "send -i tank/p@b tank/p@c > '%s'", s1);
	COF_OK(s1, "receive backup/p");
	reads_as(&td, "backup/p", read_to(&td, "tank/p@c", "want.c"));
	checked(&td, "backup");
}

Test(send, send_I_carries_every_snapshot_between)
{
	char s0[4200], s1[4200];

	two_snapshots(s0, s1);
	scribble(&td, "tank/p", "0", 16 << 10);
	COF_OK(NULL, "snapshot tank/p@c");
	COF_OK(NULL, "discard tank/p -o 64K -l 8K");
	scribble(&td, "tank/p", "900K", 8 << 10);
	COF_OK(NULL, "snapshot tank/p@d");
	COF_OK(NULL, "snapshot tank/p@e"); /* after the one sent: not in the stream */
	COF_OK(NULL, "send -I @a tank/p@d > '%s'", s1);
	COF_OK(s1, "receive backup/p");
	cr_assert(strstr(snapshots(&td, "backup/p"),
			 "backup/p@a\nbackup/p@b\nbackup/p@c\nbackup/p@d\n"),
		  "%s", out);
	cr_assert_not(strstr(out, "@e"), "%s", out);
	reads_as(&td, "backup/p@b", read_to(&td, "tank/p@b", "want.b"));
	reads_as(&td, "backup/p@c", read_to(&td, "tank/p@c", "want.c"));
	reads_as(&td, "backup/p", read_to(&td, "tank/p@d", "want.d"));
	/* FROM must be an earlier snapshot of the same dataset */
	cr_assert_neq(cof(NULL, "send -I @d tank/p@b > '%s'", s1), 0);
	cr_assert_neq(cof(NULL, "send -i @d tank/p@b > '%s'", s1), 0);
	cr_assert_neq(cof(NULL, "send -i @nope tank/p@b > '%s'", s1), 0);
	cr_assert_neq(cof(NULL, "send -i other@a tank/p@b > '%s'", s1), 0);
	checked(&td, "backup");
}

/* backup/p reads as @want and has exactly the snapshots @snaps. */
static void unchanged(const char *want, const char *snaps, const char *what)
{
	char back[4200];

	snprintf(back, sizeof(back), "%s/unchanged", td.dir);
	COF_OK(NULL, "read backup/p > '%s'", back);
	cr_assert(files_equal(want, back), "%s: the target changed", what);
	cr_assert_str_eq(snapshots(&td, "backup/p"), snaps, "%s: its snapshots changed", what);
}

Test(send, a_refused_incremental_leaves_the_target_as_it_was)
{
	char s0[4200], s1[4200], s2[4200], bad[4200], mod[4200];
	const char *at_a = NULL;
	uint8_t *b;
	size_t n;

	two_snapshots(s0, s1);
	at_a = read_to(&td, "tank/p@a", "want.a");
	/* the wrong FROM: a stream from @b onto a target at @a */
	scribble(&td, "tank/p", "0", 8 << 10);
	COF_OK(NULL, "snapshot tank/p@c");
	snprintf(s2, sizeof(s2), "%s/s2", td.dir);
	COF_OK(NULL, "send -i @b tank/p@c > '%s'", s2);
	cr_assert_neq(cof(s2, "receive backup/p"), 0);
	cr_assert(strstr(out, "starts from") && strstr(out, "backup/p@a"), "names it: %s", out);
	unchanged(at_a, "backup/p@a\n", "wrong FROM");
	/* onto no dataset */
	cr_assert_neq(cof(s1, "receive backup/q"), 0);
	cr_assert(strstr(out, "does not exist"), "%s", out);

	/* cut and flipped: refused, nothing changed, the snapshot not made */
	b = slurp(s1, &n);
	snprintf(bad, sizeof(bad), "%s/bad", td.dir);
	{
		const size_t at[] = { 30, 50, 240, n / 3, n / 2, n - 60, n - 20, n - 1 };

		for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
			char what[64];

			b[at[i]] ^= 0x08;
			write_variant(bad, b, n);
			b[at[i]] ^= 0x08;
			snprintf(what, sizeof(what), "byte %zu of %zu flipped", at[i], n);
			cr_assert_neq(cof(bad, "receive backup/p"), 0, "%s: accepted", what);
			unchanged(at_a, "backup/p@a\n", what);
		}
	}
	{
		const size_t cut[] = { 100, STREAM_HDR_LEN, 300, n / 2, n - 28, n - 1 };

		for (size_t i = 0; i < sizeof(cut) / sizeof(cut[0]); i++) {
			char what[64];

			write_variant(bad, b, cut[i]);
			snprintf(what, sizeof(what), "cut at %zu of %zu", cut[i], n);
			cr_assert_neq(cof(bad, "receive backup/p"), 0, "%s: accepted", what);
			cr_assert(strstr(out, "coffer: "), "%s: says why: %s", what, out);
			unchanged(at_a, "backup/p@a\n", what);
		}
	}
	/* sound checksums over a free out of bounds, or out of order */
	{
		const uint64_t frees[][2] = { { 100, 1000 }, { 128, 1 }, { 0, 1 }, { 64, 0 } };

		for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++) {
			uint8_t *f = slurp(s1, &n);

			reforge_as(f, n, SIZE_MAX, 0, frees[i]);
			write_variant(bad, f, n);
			free(f);
			cr_assert_neq(cof(bad, "receive backup/p"), 0, "free %zu accepted", i);
			cr_assert(strstr(out, "free"), "free %zu: %s", i, out);
			unchanged(at_a, "backup/p@a\n", "a forged free");
		}
	}
	free(b);
	checked(&td, "backup");

	/* the target written since @a: refused without -F, as it is */
	scribble(&td, "backup/p", "256K", 8 << 10);
	snprintf(mod, sizeof(mod), "%s", read_to(&td, "backup/p", "mod"));
	cr_assert_neq(cof(s1, "receive backup/p"), 0);
	cr_assert(strstr(out, "changed since") && strstr(out, "-F"), "%s", out);
	unchanged(mod, "backup/p@a\n", "modified, no -F");
	/* a discard since @a is a change too */
	COF_OK(NULL, "rollback backup/p@a");
	COF_OK(NULL, "discard backup/p -o 0 -l 8K");
	cr_assert_neq(cof(s1, "receive backup/p"), 0, "a discard since @a");
	/* -F rolls it back to @a first, then takes the stream */
	COF_OK(s1, "receive -F backup/p");
	reads_as(&td, "backup/p", read_to(&td, "tank/p@b", "want.b"));
	cr_assert_str_eq(snapshots(&td, "backup/p"), "backup/p@a\nbackup/p@b\n");
	/* a snapshot made on the target after the last one received: -F destroys it */
	COF_OK(NULL, "snapshot backup/p@local");
	cr_assert_neq(cof(s2, "receive backup/p"), 0);
	cr_assert(strstr(out, "newer"), "%s", out);
	/* one with a clone stays, and so does everything else of the target */
	scribble(&td, "backup/p", "8K", 8 << 10);
	snprintf(mod, sizeof(mod), "%s", read_to(&td, "backup/p", "mod"));
	COF_OK(NULL, "clone backup/p@local backup/cl");
	cr_assert_neq(cof(s2, "receive -F backup/p"), 0);
	cr_assert(strstr(out, "clones"), "%s", out);
	unchanged(mod, "backup/p@a\nbackup/p@b\nbackup/p@local\n", "-F refused by a clone");
	COF_OK(NULL, "destroy backup/cl");
	COF_OK(s2, "receive -F backup/p");
	cr_assert_str_eq(snapshots(&td, "backup/p"), "backup/p@a\nbackup/p@b\nbackup/p@c\n");
	reads_as(&td, "backup/p", read_to(&td, "tank/p@c", "want.c"));
	checked(&td, "backup");
}

struct nonces {
	struct { uint64_t salt; uint8_t nonce[12]; } *v;
	size_t n, cap, clear;
};

static int nonce_one(const void *key, size_t klen, const void *val, size_t vlen, void *ctx)
{
	struct nonces *ns = ctx;
	struct tbp bp;

	(void)key;
	if (klen != TBP_KEY_LEN || tbp_decode(val, vlen, &bp) < 0)
		return 0;
	if (!(bp.flags & TBP_F_ENCRYPTED)) {
		ns->clear++;
		return 0;
	}
	if (ns->n == ns->cap) {
		ns->cap = ns->cap ? ns->cap * 2 : 256;
		ns->v = realloc(ns->v, ns->cap * sizeof(*ns->v));
		cr_assert_not_null(ns->v);
	}
	ns->v[ns->n].salt = bp.salt;
	memcpy(ns->v[ns->n++].nonce, bp.nonce, 12);
	return 0;
}

static int salt_nonce_cmp(const void *a, const void *b)
{
	return memcmp(a, b, sizeof(uint64_t) + 12);
}

/*
 * Every block pointer of pool @pool of the stopped daemon @d, the head's and
 * every snapshot's table (an extent is in exactly one): no (key salt,
 * nonce) pair twice. @return how many encrypted pointers were seen
 */
static size_t nonces_never_repeat(struct tdaemon *d, const char *pool)
{
	char mdb[4200];
	struct tamper *t;
	struct nonces ns = { 0 };
	size_t rep = 0;

	snprintf(mdb, sizeof(mdb), "%s/state/pools/%s.mdb", d->dir, pool);
	cr_assert_eq(tamper_open(mdb, &t), 0, "%s", mdb);
	cr_assert_geq(tamper_each(t, "bp", nonce_one, &ns), 0);
	tamper_close(t);
	cr_assert_eq(ns.clear, 0, "%zu clear pointers in an encrypted copy", ns.clear);
	qsort(ns.v, ns.n, sizeof(*ns.v), salt_nonce_cmp);
	for (size_t i = 1; i < ns.n; i++)
		rep += !salt_nonce_cmp(&ns.v[i], &ns.v[i - 1]);
	free(ns.v);
	cr_assert_eq(rep, 0, "%zu (salt, nonce) pairs used twice of %zu", rep, ns.n);
	return ns.n;
}

/* tank/e (raw_stream) changed after @s1 and snapshot @snap; its raw
 * incremental from @from into @stream, the key unloaded after. */
static void raw_step(const char *from, const char *snap, const char *off, char *stream)
{
	COF_OK(NULL, "load-key tank/e");
	scribble(&td, "tank/e", off, 64 << 10);
	COF_OK(NULL, "discard tank/e -o 512K -l 64K");
	COF_OK(NULL, "snapshot tank/e@%s", snap);
	COF_OK(NULL, "unload-key tank/e");
	snprintf(stream, 4200, "%s/%s.stream", td.dir, snap);
	COF_OK(NULL, "send -w -i @%s tank/e@%s > '%s'", from, snap, stream);
}

Test(send, a_raw_incremental_needs_no_key_and_loads_with_the_original_passphrase)
{
	char keyfile[4200], stream[4200], s2[4200], s3[4200];
	const char *data;
	size_t n;

	raw_stream(keyfile, sizeof(keyfile), &data, stream, sizeof(stream));
	tdaemon_setup(&td2, NULL);
	COF2_OK(NULL, "pool create -s 32M backup %s/m0", td2.dir);
	COF2_OK(stream, "receive backup/e");
	raw_step("s1", "s2", "256K", s2);
	cr_assert_not(holds_marker(s2), "no plaintext in a raw incremental");
	/* no key on either side */
	COF2_OK(s2, "receive backup/e");
	COF2_OK(NULL, "get -H -o value keystatus backup/e");
	cr_assert(strstr(out, "unavailable"), "%s", out);
	checked(&td2, "backup");
	COF2_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	COF_OK(NULL, "load-key tank/e");
	reads_as(&td2, "backup/e", read_to(&td, "tank/e@s2", "want.s2"));
	reads_as(&td2, "backup/e@s2", read_to(&td, "tank/e@s2", "want.s2"));
	reads_as(&td2, "backup/e@s1", data);
	COF_OK(NULL, "unload-key tank/e");

	/* the key loaded on the receiver: the copy reads at once */
	raw_step("s2", "s3", "0", s3);
	COF2_OK(s3, "receive backup/e");
	COF_OK(NULL, "load-key tank/e");
	reads_as(&td2, "backup/e", read_to(&td, "tank/e@s3", "want.s3"));
	reads_as(&td2, "backup/e@s2", read_to(&td, "tank/e@s2", "want.s2"));
	cr_assert_str_eq(snapshots(&td2, "backup/e"), "backup/e@s1\nbackup/e@s2\nbackup/e@s3\n");

	/* written on the receiver after, and snapshot there: no nonce twice */
	scribble(&td2, "backup/e", "128K", 128 << 10);
	COF2_OK(NULL, "snapshot backup/e@here");
	scribble(&td2, "backup/e", "128K", 64 << 10);
	checked(&td2, "backup");
	tdaemon_stop_ok(&td2);
	n = nonces_never_repeat(&td2, "backup");
	cr_assert_gt(n, 100, "%zu encrypted pointers", n);
	tdaemon_start_ok(&td2);
	COF2_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	reads_as(&td2, "backup/e@s3", read_to(&td, "tank/e@s3", "want.s3"));
}

/* Where each part of stream @b (@n bytes) after its header starts, in
 * @at, and its record number (UINT64_MAX: a free); the count. @at[count]
 * is where the end starts. */
static size_t parts_of(const uint8_t *b, size_t n, size_t *at, uint64_t *recnos, size_t cap)
{
	struct stream_hdr h;
	struct stream_rec r;
	uint64_t sum;
	size_t pos = STREAM_HDR_LEN, k = 0;

	cr_assert_eq(stream_hdr_get(b, &h, &sum), 0);
	while (pos + 4 <= n && stream_kind(b + pos) != STREAM_END) {
		cr_assert_lt(k, cap);
		at[k] = pos;
		if (stream_kind(b + pos) == STREAM_FREE) {
			recnos[k] = UINT64_MAX;
			pos += STREAM_FREE_LEN;
		} else {
			cr_assert_eq(stream_rec_get(b + pos, &h, &r), 0);
			recnos[k] = r.recno;
			pos += STREAM_REC_LEN + r.len;
		}
		k++;
	}
	at[k] = pos;
	return k;
}

/*
 * backup/e received anew from @s1, then the forged incremental @bad: it is
 * refused at the receive, at the load-key or at the read, or it reads as
 * the source's snapshot @want; never silently as something else.
 */
static void forged_never_lands(const char *keyfile, const char *s1, const char *bad,
			       const char *want, const char *what)
{
	char back[4200];
	int st;

	if (exists("backup/e"))
		COF_OK(NULL, "destroy -r backup/e");
	COF_OK(s1, "receive backup/e");
	st = cof(bad, "receive backup/e");
	if (st == 0)
		st = cof(NULL, "load-key -L file://%s backup/e", keyfile);
	if (st == 0) {
		snprintf(back, sizeof(back), "%s/back", td.dir);
		st = cof(NULL, "read backup/e > '%s'", back);
		if (st == 0)
			cr_assert(files_equal(want, back), "%s: the copy silently differs from its "
				  "source", what);
	}
	cr_expect_neq(st, 0, "%s: received, loaded and read", what);
	cr_expect(strstr(out, "backup/e") || strstr(out, "auth"), "%s: %s", what, out);
}

/*
 * A raw incremental rebuilt by a forger: every record in it authentic, but
 * one dropped, or one replaced by an intermediate version of the same
 * record (born between the two snapshots, from another stream of the
 * source). The carried view root does not match the set.
 */
Test(send, a_raw_incremental_that_drops_a_record_or_carries_an_older_one_never_lands)
{
	char keyfile[4200], s1[4200], mid[4200], s2[4200], bad[4200], f[4200];
	size_t at[512], mat[512], n, mn, k, mk, i, j = 0;
	uint64_t rec[512], mrec[512];
	const char *data, *want;
	uint8_t *b, *m;

	raw_stream(keyfile, sizeof(keyfile), &data, s1, sizeof(s1));
	COF_OK(NULL, "pool create -s 32M backup %s/m0", td.dir);
	COF_OK(NULL, "load-key tank/e");
	tdaemon_random_file(&td, "v1", 64 << 10, f, sizeof(f));
	COF_OK(f, "write tank/e -o 256K");
	COF_OK(NULL, "snapshot tank/e@m");
	tdaemon_random_file(&td, "v2", 64 << 10, f, sizeof(f));
	COF_OK(f, "write tank/e -o 256K");
	COF_OK(NULL, "snapshot tank/e@s2");
	want = read_to(&td, "tank/e@s2", "want.s2");
	COF_OK(NULL, "unload-key tank/e");
	snprintf(mid, sizeof(mid), "%s/mid.stream", td.dir);
	COF_OK(NULL, "send -w -i @s1 tank/e@m > '%s'", mid);
	snprintf(s2, sizeof(s2), "%s/s2.stream", td.dir);
	COF_OK(NULL, "send -w -i @s1 tank/e@s2 > '%s'", s2);
	snprintf(bad, sizeof(bad), "%s/forged", td.dir);

	/* the unforged stream lands and reads as its source */
	if (exists("backup/e"))
		COF_OK(NULL, "destroy -r backup/e");
	COF_OK(s1, "receive backup/e");
	COF_OK(s2, "receive backup/e");
	COF_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	reads_as(&td, "backup/e", want);
	COF_OK(NULL, "destroy -r backup/e");

	/* dropped: the first record of the incremental */
	b = slurp(s2, &n);
	k = parts_of(b, n, at, rec, 511);
	for (i = 0; i < k && rec[i] == UINT64_MAX; i++)
		;
	cr_assert_lt(i, k, "the incremental carries a record");
	memmove(b + at[i], b + at[i + 1], n - at[i + 1]);
	n -= at[i + 1] - at[i];
	reforge(b, n, SIZE_MAX, 0);
	write_variant(bad, b, n);
	free(b);
	forged_never_lands(keyfile, s1, bad, want, "a record dropped");

	/* an intermediate version: a record of @m's stream in place of @s2's */
	b = slurp(s2, &n);
	m = slurp(mid, &mn);
	k = parts_of(b, n, at, rec, 511);
	mk = parts_of(m, mn, mat, mrec, 511);
	for (i = 0; i < k; i++) {
		for (j = 0; j < mk && mrec[j] != rec[i]; j++)
			;
		if (rec[i] != UINT64_MAX && j < mk && mat[j + 1] - mat[j] == at[i + 1] - at[i])
			break;
	}
	cr_assert_lt(i, k, "a record both streams carry, of one size");
	cr_assert(memcmp(b + at[i], m + mat[j], at[i + 1] - at[i]), "the versions differ");
	memcpy(b + at[i], m + mat[j], at[i + 1] - at[i]);
	reforge(b, n, SIZE_MAX, 0);
	write_variant(bad, b, n);
	free(b);
	free(m);
	forged_never_lands(keyfile, s1, bad, want, "an intermediate version");
}

/* backup/e of td2 has just @s1, and reads as @data with the original key. */
static void still_at_s1(const char *keyfile, const char *data, const char *what)
{
	cr_assert_str_eq(snapshots(&td2, "backup/e"), "backup/e@s1\n", "%s", what);
	COF2_OK(NULL, "get -H -o value keystatus backup/e");
	if (strstr(out, "unavailable"))
		COF2_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	reads_as(&td2, "backup/e", data);
}

Test(send, a_raw_incremental_after_change_key_on_either_side_is_refused)
{
	char keyfile[4200], stream[4200], s2[4200], newkey[4200];
	const char *data;
	static const char pass2[] = "another passphrase entirely\n";

	raw_stream(keyfile, sizeof(keyfile), &data, stream, sizeof(stream));
	snprintf(newkey, sizeof(newkey), "%s", tdaemon_file(&td, "pass2", pass2, sizeof(pass2) - 1));
	tdaemon_setup(&td2, NULL);
	COF2_OK(NULL, "pool create -s 32M backup %s/m0", td2.dir);
	COF2_OK(stream, "receive backup/e");
	raw_step("s1", "s2", "256K", s2);

	/* on the target: its key is wrapped anew, the stream's is the old */
	COF2_OK(NULL, "load-key -L file://%s backup/e", keyfile);
	COF2_OK(NULL, "change-key -o keylocation=file://%s backup/e", newkey);
	cr_assert_neq(tdaemon_cofferf(&td2, s2, out, sizeof(out), "receive backup/e"), 0);
	cr_assert(strstr(out, "key was changed"), "names it: %s", out);
	still_at_s1(keyfile, data, "after a change-key on the target");
	checked(&td2, "backup");
	/* -F rolls back data, never a key: still refused */
	cr_assert_neq(tdaemon_cofferf(&td2, s2, out, sizeof(out), "receive -F backup/e"), 0);
	COF2_OK(NULL, "destroy -r backup/e");
	COF2_OK(stream, "receive backup/e");

	/* on the source: the stream carries the new wrapping */
	COF_OK(NULL, "load-key tank/e");
	COF_OK(NULL, "change-key -o keylocation=file://%s tank/e", newkey);
	COF_OK(NULL, "unload-key tank/e");
	COF_OK(NULL, "send -w -i @s1 tank/e@s2 > '%s'", s2);
	cr_assert_neq(tdaemon_cofferf(&td2, s2, out, sizeof(out), "receive backup/e"), 0);
	cr_assert(strstr(out, "key was changed"), "names it: %s", out);
	still_at_s1(keyfile, data, "after a change-key on the source");
	checked(&td2, "backup");
}

Test(send, an_incremental_cut_by_its_client_or_a_crash_is_rolled_back)
{
	char s0[4200], s1[4200], fifo[4200], rnd[4200], at_s[4200];
	double end;
	uint8_t *b;
	size_t n;
	pid_t pid;
	int wfd, st;

	two_mib(rnd, s0);
	COF_OK(s0, "receive backup/x");
	snprintf(at_s, sizeof(at_s), "%s", read_to(&td, "tank/c@s", "at.s"));
	scribble(&td, "tank/c", "0", 2 << 20);
	COF_OK(NULL, "snapshot tank/c@t");
	snprintf(s1, sizeof(s1), "%s/s1", td.dir);
	COF_OK(NULL, "send -i @s tank/c@t > '%s'", s1);
	b = slurp(s1, &n);
	snprintf(fifo, sizeof(fifo), "%s/fifo", td.dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);

	for (int crash = 0; crash < 2; crash++) {
		pid = half_received(fifo, b, n, &wfd, busy);
		/* nothing the rollback needs can go, or be added, meanwhile */
		cr_assert_neq(cof(NULL, "destroy backup/x@s"), 0, "destroyed mid-receive");
		cr_assert_neq(cof(NULL, "snapshot backup/x@mid"), 0, "a snapshot mid-receive");
		cr_assert_neq(cof(NULL, "clone backup/x@s backup/y"), 0, "a clone mid-receive");
		cr_assert_neq(cof(NULL, "rollback backup/x@s"), 0, "a rollback mid-receive");
		if (crash) /* the daemon dies: the next import rolls it back */
			crash_daemon();
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		close(wfd);
		if (crash)
			tdaemon_start_ok(&td);
		end = tdaemon_deadline(TDAEMON_WAIT_S);
		while (busy("backup/x") && tdaemon_poll(end))
			;
		reads_as(&td, "backup/x", at_s);
		cr_assert_str_eq(snapshots(&td, "backup/x"), "backup/x@s\n", "crash %d", crash);
		checked(&td, "backup");
	}
	/* and the whole stream goes in after both */
	COF_OK(s1, "receive backup/x");
	reads_as(&td, "backup/x", read_to(&td, "tank/c@t", "at.t"));
	checked(&td, "backup");
	free(b);
}

/*
 * A received snapshot is made last; a stream whose snapshot name the target
 * could not take (name@snap over the name limit) is refused before anything
 * is received, and an existing dataset it would replace (-F) stays.
 */
Test(send, a_snapshot_name_too_long_for_the_target_is_refused_before_anything_changes)
{
	char stream[4200], rnd[4200], target[300], snap[64], why[1024];

	COF_OK(NULL, "pool create -s 32M tank %s/l0", td.dir);
	COF_OK(NULL, "create -s -V 256K tank/c");
	tdaemon_random_file(&td, "rnd", 256 << 10, rnd, sizeof(rnd));
	COF_OK(rnd, "write tank/c");
	memset(snap, 's', 60);
	snap[60] = '\0';
	COF_OK(NULL, "snapshot tank/c@%s", snap);
	snprintf(stream, sizeof(stream), "%s/stream", td.dir);
	COF_OK(NULL, "send tank/c@%s > '%s'", snap, stream);
	/* tank/ and 200 bytes: a name, but not with @ and the 60 of the snapshot */
	memset(target, 't', sizeof(target));
	memcpy(target, "tank/", 5);
	target[205] = '\0';
	COF_OK(NULL, "create -s -V 256K %s", target);
	COF_OK(rnd, "write %s", target);
	cr_assert_neq(cof(stream, "receive -F %s", target), 0, "received: %s", out);
	memcpy(why, out, sizeof(why) - 1);
	why[sizeof(why) - 1] = '\0';
	reads_as(&td, target, rnd);
	cr_assert(strstr(why, "@sssss"), "names the snapshot: %s", why);
}
