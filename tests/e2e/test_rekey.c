// SPDX-License-Identifier: MIT
/*
 * E2E: coffer rekey on a real cofferd. A dataset is rekeyed while
 * validated writes and reads run on it (coffer bench -v): every write it
 * acknowledged reads back, pool check is clean (no nonce used twice, every
 * MAC tree verified), and the status says done. A rekey cut by kill -9 at
 * five points of its walk resumes at each load-key and completes. The old
 * key file, put back as the newest copy by someone who holds the state
 * directory, opens nothing: its key no longer verifies the dataset's
 * block pointers, and no record reads. A raw stream taken after a rekey
 * carries the new key, and its copy reads as the source. With
 * --scrub-free no byte of the old ciphertext stays in the LUN files (and
 * without it, it does: the check can fail). And what a rekey refuses,
 * each with its reason. A clear dataset with snapshots is encrypted in
 * place (set encryption=) while validated I/O runs on it, through a kill -9,
 * and with --scrub-free no byte of its plaintext stays on the LUNs.
 */

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "daemon.h"
#include "tamper.h"

TDAEMON_FIXTURE(NULL)
static char out[65536];

TestSuite(rekey, .init = setup, .fini = teardown, .timeout = 600);

#define COF_OK(...) TDAEMON_COF_OK(&td, out, NULL, __VA_ARGS__)

__attribute__((format(printf, 1, 2))) static int cof(const char *fmt, ...)
{
	char args[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	return tdaemon_coffer(&td, NULL, NULL, out, sizeof(out), args);
}

static const char *parm(const char *name, const char *text)
{
	return tdaemon_file(&td, name, text, strlen(text));
}

static const char fill_parm[] = "sd=sd1,dataset=p/e,threads=2\n"
				"wd=fill,sd=sd1,rdpct=0,seekpct=eof,xfersize=64k\n"
				"rd=fill,wd=fill,iorate=max,elapsed=120,interval=1\n";

/* An encrypted 32 MiB volume p/e, every record written (journaled in j). */
static void make_filled(void)
{
	const char *key = tdaemon_file(&td, "key", "0123456789abcdef0123456789abcdef", 32);

	COF_OK("pool create -s 128M p %s %s", tdaemon_path(&td, "lun0"),
	       tdaemon_path(&td, "lun1"));
	COF_OK("create -V 32M -b 8k -o encryption=aes-256-ccm -o keyformat=raw "
	       "-o keylocation=file://%s -o primarycache=metadata p/e", key);
	COF_OK("bench -q --socket %s -v --journal %s %s", td.sock, tdaemon_path(&td, "j"),
	       parm("fill.parm", fill_parm));
}

static const char *status_of(const char *ds)
{
	COF_OK("get -H -o value rekeystatus %s", ds);
	out[strcspn(out, "\n")] = '\0';
	return out;
}

static const char *status(void)
{
	return status_of("p/e");
}

/* Wait (a generous deadline) until the rekeystatus of @ds starts with @want. */
static void wait_status_of(const char *ds, const char *want)
{
	double end = tdaemon_deadline(TDAEMON_WAIT_S);

	while (strncmp(status_of(ds), want, strlen(want)) && tdaemon_poll(end))
		;
	cr_assert(!strncmp(status_of(ds), want, strlen(want)),
		  "rekeystatus of %s '%s', waited for '%s'\n%s", ds, out, want, tdaemon_log(&td));
}

static void wait_status(const char *want)
{
	wait_status_of("p/e", want);
}

/* Every acknowledged write reads back, and the pool checks clean. */
static void all_sound(void)
{
	COF_OK("bench -q --socket %s -vr %s", td.sock, tdaemon_path(&td, "j"));
	COF_OK("pool check p");
	cr_assert(strstr(out, "old_keys: 0") && strstr(out, "mac_errors: 0"), "%s", out);
}

/* Writes and reads on @ds for 6 s, validated against the journal, in a
 * child; validated_io_ok() waits for it. */
static pid_t validated_io(const char *ds)
{
	char parm_text[256];
	pid_t pid;

	snprintf(parm_text, sizeof(parm_text),
		 "sd=sd1,dataset=%s,threads=4\n"
		 "wd=rw,sd=sd1,rdpct=50,seekpct=random,xfersize=8k\n"
		 "rd=rw,wd=rw,iorate=max,elapsed=6,interval=1\n", ds);
	parm("rw.parm", parm_text);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(tdaemon_cofferf(&td, NULL, NULL, 0,
				      "bench -q --socket %s -v --journal %s %s > %s 2>&1", td.sock,
				      tdaemon_path(&td, "j"), tdaemon_path(&td, "rw.parm"),
				      tdaemon_path(&td, "rw.out")));
	return pid;
}

static void validated_io_ok(pid_t pid)
{
	int st;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the validated I/O beside it failed (%d)",
		  st);
}

/* The daemon killed with SIGKILL, then started again on its state. */
static void kill_9(void)
{
	int st;

	kill(td.pid, SIGKILL);
	waitpid(td.pid, &st, 0);
	td.pid = -1;
	tdaemon_start_ok(&td);
}

/* The daemon stopped and started again (its pools imported from their
 * files), then the key of @root loaded. */
static void restart_and_load(const char *root)
{
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	COF_OK("load-key %s", root);
}

/* A rekey of p/e at 8M/s while validated writes and reads run on it. */
static void rekey_beside_validated_io(void)
{
	pid_t pid = validated_io("p/e");

	COF_OK("rekey --rate 8M p/e");
	wait_status("done");
	validated_io_ok(pid);
}

/* Snapshot p/e@@name, keep its image as name.img, then write over records
 * at random for a second, journaled (the records it held move into its table). */
static void snapshot_then_overwrite(const char *name)
{
	COF_OK("snapshot p/e@%s", name);
	COF_OK("read p/e@%s > %s.img", name, tdaemon_path(&td, "%s", name));
	COF_OK("bench -q --socket %s -v --journal %s %s", td.sock, tdaemon_path(&td, "j"),
	       parm("ow.parm", "sd=sd1,dataset=p/e,threads=2\n"
			       "wd=ow,sd=sd1,rdpct=0,seekpct=random,xfersize=8k\n"
			       "rd=ow,wd=ow,iorate=max,elapsed=1,interval=1\n"));
}

/* p/e@@name (or another dataset's @@name) reads as its image. */
static void reads_as_image(const char *snap, const char *name)
{
	char cmd[8192];

	COF_OK("read %s > %s", snap, tdaemon_path(&td, "now.img"));
	snprintf(cmd, sizeof(cmd), "cmp %s %s.img", tdaemon_path(&td, "now.img"),
		 tdaemon_path(&td, "%s", name));
	cr_assert_eq(system(cmd), 0, "%s reads otherwise than %s.img", snap, name);
}

Test(rekey, under_validated_writes_and_reads)
{
	make_filled();
	cr_assert_str_eq(status(), "none");
	rekey_beside_validated_io();
	all_sound();
	/* the records under the new key read back after a restart too */
	restart_and_load("p/e");
	all_sound();
	cr_assert(!strncmp(status(), "done", 4), "%s", out);
}

Test(rekey, kill_9_in_its_walk_resumes_and_completes)
{
	char before[256] = "";

	make_filled();
	snapshot_then_overwrite("s1");
	snapshot_then_overwrite("s2");
	COF_OK("rekey --rate 2M p/e");
	for (int cycle = 0; cycle < 5; cycle++) {
		double end = tdaemon_deadline(TDAEMON_WAIT_S);

		/* somewhere further in the walk than the last kill, before the end */
		while ((!strstr(status(), "%") || !strcmp(out, before)) && strncmp(out, "done", 4) &&
		       tdaemon_poll(end))
			;
		if (!strncmp(out, "done", 4))
			break;
		snprintf(before, sizeof(before), "%.200s", out);
		kill_9();
		COF_OK("load-key p/e"); /* a rekey that was running goes on */
	}
	wait_status("done");
	all_sound();
	reads_as_image("p/e@s1", "s1");
	reads_as_image("p/e@s2", "s2");
}

/* Rewrite a key file copy's generation to @gen, and its byte at @at (if
 * not negative) to @val, as someone who holds the state dir could. */
static void forge_keyfile(const char *path, uint64_t gen, long at, uint8_t val)
{
	static uint8_t buf[1 << 16];
	int fd = open(path, O_RDWR);
	ssize_t n;
	uint64_t sum;

	cr_assert_geq(fd, 0, "%s: %s", path, strerror(errno));
	n = read(fd, buf, sizeof(buf));
	cr_assert_gt(n, 28);
	for (int i = 0; i < 8; i++)
		buf[12 + i] = (uint8_t)(gen >> (56 - 8 * i));
	if (at >= 0) {
		cr_assert_lt(at, n - 8);
		buf[at] = val;
	}
	sum = XXH64(buf, (size_t)n - 8, 0);
	for (int i = 0; i < 8; i++)
		buf[n - 8 + i] = (uint8_t)(sum >> (56 - 8 * i));
	cr_assert_eq(pwrite(fd, buf, (size_t)n, 0), n);
	close(fd);
}

Test(rekey, the_old_key_file_opens_nothing_after_it)
{
	char cmd[8192];

	make_filled();
	snapshot_then_overwrite("s");
	snprintf(cmd, sizeof(cmd), "cp %s/pools/p.keys %s/old.keys", td.state, td.dir);
	cr_assert_eq(system(cmd), 0);
	COF_OK("rekey --rate 0 p/e");
	wait_status("done");
	all_sound();
	/* the old copy put back as both copies, newer than anything the pool has */
	tdaemon_stop_ok(&td);
	for (int i = 0; i < 2; i++) {
		char path[4200];

		snprintf(path, sizeof(path), "%s/pools/p.keys%s", td.state, i ? ".1" : "");
		snprintf(cmd, sizeof(cmd), "cp %s/old.keys %s", td.dir, path);
		cr_assert_eq(system(cmd), 0);
		forge_keyfile(path, 1000000, -1, 0);
	}
	tdaemon_start_ok(&td);
	cr_assert_neq(cof("load-key p/e"), 0, "the old key file loaded the dataset's key:\n%s",
		      out);
	cr_assert(strstr(out, "do not verify") || strstr(out, "disagrees with the key file"), "%s",
		  out);
	cr_assert_neq(cof("read -o 0 -l 8192 p/e > /dev/null"), 0, "a record read:\n%s", out);
	cr_assert_neq(cof("read -o 0 -l 8192 p/e@s > /dev/null"), 0, "a kept record read:\n%s",
		      out);
}

Test(rekey, the_suite_of_the_previous_key_changed_in_the_key_file_unwraps_nothing)
{
	char path[4200];

	make_filled();
	COF_OK("set encryption=aes-128-gcm --rate 1M p/e");
	COF_OK("rekey -p p/e");
	tdaemon_stop_ok(&td);
	/* p/e's entry, the only one: guid, root, format, iterations, salt,
	 * wrapped key (24 + 97), flags, suite, the previous key's suite */
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/pools/p.keys%s", td.state, i ? ".1" : "");
		forge_keyfile(path, 1000000, 24 + 97 + 2, 5 /* aes-256-gcm */);
	}
	tdaemon_start_ok(&td);
	cr_assert_neq(cof("load-key p/e"), 0, "loaded with the previous key's suite changed:\n%s",
		      out);
	cr_assert_neq(cof("read -o 0 -l 8192 p/e > /dev/null"), 0, "a record read:\n%s", out);
}

Test(rekey, an_old_generation_put_back_is_found_by_pool_check_without_the_key)
{
	char mdb[4200];
	struct tamper *t;
	struct tbp bp;
	uint64_t id;

	make_filled();
	COF_OK("rekey --rate 0 p/e");
	wait_status("done");
	COF_OK("pool check p");
	cr_assert(strstr(out, "old_keys: 0"), "%s", out);
	/* record 7's pointer made to name the other generation: the gone key */
	tdaemon_stop_ok(&td);
	snprintf(mdb, sizeof(mdb), "%s/pools/p.mdb", td.state);
	cr_assert_eq(tamper_open(mdb, &t), 0);
	cr_assert_eq(tamper_ds_id(t, "p/e", &id), 0);
	cr_assert_eq(tamper_bp_get(t, id, 7, &bp), 0);
	bp.flags ^= 0x2;
	cr_assert_eq(tamper_bp_put(t, id, 7, &bp), 0);
	tamper_close(t);
	tdaemon_start_ok(&td);
	cr_assert_neq(cof("pool check p"), 0, "pool check passed an old generation:\n%s", out);
	cr_assert(strstr(out, "old_keys: 1"), "%s", out);
}

/* The first 64 bytes of record @recno of p/e as stored (its ciphertext),
 * read from its LUN file with the daemon stopped; restarted after. */
static void stored_bytes_of(const char *ds, uint64_t recno, uint8_t bytes[64], char *lun,
			    size_t cap)
{
	char mdb[4200];
	struct tamper *t;
	struct tbp bp;
	uint64_t id;

	tdaemon_stop_ok(&td);
	snprintf(mdb, sizeof(mdb), "%s/pools/p.mdb", td.state);
	cr_assert_eq(tamper_open(mdb, &t), 0);
	cr_assert_eq(tamper_ds_id(t, ds, &id), 0);
	cr_assert_eq(tamper_bp_get(t, id, recno, &bp), 0);
	tamper_close(t);
	snprintf(lun, cap, "%s", tdaemon_path(&td, "lun%u", bp.lun));
	cr_assert_eq(tlun_read(lun, bp.sector, 0, bytes, 64), 0);
	tdaemon_start_ok(&td);
}

static void stored_bytes(uint64_t recno, uint8_t bytes[64], char *lun, size_t cap)
{
	stored_bytes_of("p/e", recno, bytes, lun, cap);
	COF_OK("load-key p/e");
}

/* The wrapped master key of p/e as the key file has it now (its only entry). */
static void wrapped_now(uint8_t w[60])
{
	char path[4200];
	uint8_t buf[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/pools/p.keys", td.state);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	cr_assert_geq(fread(buf, 1, sizeof(buf), f), 24 + 37 + 60);
	fclose(f);
	/* magic, version, generation, count; guid, root id, format, iterations, salt */
	memcpy(w, buf + 24 + 37, 60);
}

Test(rekey, scrub_free_leaves_no_old_ciphertext_on_the_luns)
{
	char lun1[4200], lun2[4200];
	uint8_t gen0[64], gen1[64], key1[60];
	long found = 0;

	make_filled();
	stored_bytes(5, gen0, lun1, sizeof(lun1));
	/* without --scrub-free the freed extent keeps its old ciphertext */
	COF_OK("rekey --rate 0 p/e");
	wait_status("done");
	cr_assert_gt(tlun_find(lun1, gen0, sizeof(gen0)), 0,
		     "the old ciphertext was gone without --scrub-free: the check proves nothing");
	stored_bytes(5, gen1, lun2, sizeof(lun2));
	/* the metadata log on the LUNs holds the key file, wrapped key and all */
	wrapped_now(key1);
	for (int i = 0; i < 2; i++)
		found += tlun_find(tdaemon_path(&td, "lun%d", i), key1, sizeof(key1));
	cr_assert_gt(found, 0, "the wrapped key is in no LUN file: the check proves nothing");
	COF_OK("rekey --rate 0 --scrub-free p/e");
	wait_status("done");
	for (int i = 0; i < 2; i++) {
		const char *lun = tdaemon_path(&td, "lun%d", i);

		cr_assert_eq(tlun_find(lun, gen0, sizeof(gen0)), 0, "%s keeps generation 0's bytes",
			     lun);
		cr_assert_eq(tlun_find(lun, gen1, sizeof(gen1)), 0, "%s keeps generation 1's bytes",
			     lun);
		cr_assert_eq(tlun_find(lun, key1, sizeof(key1)), 0,
			     "%s keeps the old wrapped master key", lun);
	}
	all_sound();
}

Test(rekey, a_raw_stream_after_it_carries_the_new_key_only)
{
	char cmd[8192];

	make_filled();
	COF_OK("rekey --rate 0 p/e");
	wait_status("done");
	COF_OK("snapshot p/e@s");
	COF_OK("send -w p/e@s > %s", tdaemon_path(&td, "stream"));
	COF_OK("pool create -s 128M q %s", tdaemon_path(&td, "lun2"));
	COF_OK("receive q/e < %s", tdaemon_path(&td, "stream"));
	COF_OK("load-key -L file://%s q/e", tdaemon_path(&td, "key"));
	COF_OK("read p/e > %s", tdaemon_path(&td, "p.img"));
	COF_OK("read q/e > %s", tdaemon_path(&td, "q.img"));
	snprintf(cmd, sizeof(cmd), "cmp -s %s %s", tdaemon_path(&td, "p.img"),
		 tdaemon_path(&td, "q.img"));
	cr_assert_eq(system(cmd), 0, "the received copy reads otherwise than its source");
	COF_OK("pool check q");
}

Test(rekey, r_takes_the_children_and_the_lists_verify_under_the_new_keys)
{
	char data[4200];

	make_filled();
	COF_OK("create -V 8M -b 8k p/e/c1");
	COF_OK("create -V 8M -b 8k p/e/c1/g");
	tdaemon_random_file(&td, "r1", 65536, data, sizeof(data));
	COF_OK("write p/e/c1 < %s", data);
	COF_OK("rekey -r --rate 0 p/e");
	/* each has a master key and a rekey of its own: the parent's may be
	 * done before its children's (seen on a loaded machine) */
	wait_status("done");
	wait_status_of("p/e/c1", "done");
	wait_status_of("p/e/c1/g", "done");
	all_sound();
	/* load-key checks every list of children under its parent's new MAC key */
	COF_OK("unload-key p/e");
	COF_OK("load-key p/e");
	COF_OK("read -l 8192 p/e/c1 > /dev/null");
	COF_OK("pool check p");
	cr_assert(strstr(out, "old_keys: 0") && strstr(out, "mac_errors: 0"), "%s", out);
}

Test(rekey, refusals_say_why_and_change_nothing)
{
	make_filled();
	COF_OK("create -V 8M -b 8k p/clear");
	cr_assert_neq(cof("rekey p/clear"), 0);
	cr_assert(strstr(out, "not encrypted"), "%s", out);
	cr_assert_neq(cof("rekey p/none"), 0);
	COF_OK("snapshot p/e@s");
	COF_OK("clone p/e@s p/e/c");
	cr_assert_neq(cof("rekey -p p/e"), 0, "a pause with nothing running:\n%s", out);

	/* while one runs: a second, a snapshot, a key change, a destroy or a
	 * rollback of a snapshot, a raw send, a clone and a promote wait */
	COF_OK("rekey --rate 1M p/e");
	cr_assert_neq(cof("rekey p/e"), 0);
	cr_assert(strstr(out, "is running"), "%s", out);
	cr_assert_neq(cof("snapshot p/e@t"), 0);
	cr_assert(strstr(out, "being rekeyed"), "%s", out);
	cr_assert_neq(cof("change-key -o keyformat=raw -o keylocation=file://%s p/e",
			  tdaemon_path(&td, "key")), 0);
	cr_assert(strstr(out, "being rekeyed"), "%s", out);
	cr_assert_neq(cof("destroy p/e@s"), 0);
	cr_assert(strstr(out, "being rekeyed"), "%s", out);
	cr_assert_neq(cof("rollback p/e@s"), 0);
	cr_assert(strstr(out, "being rekeyed"), "%s", out);
	cr_assert_neq(cof("send -w p/e@s > /dev/null"), 0);
	cr_assert(strstr(out, "being rekeyed"), "%s", out);
	cr_assert_neq(cof("clone p/e@s p/e/d"), 0);
	cr_assert(strstr(out, "being rekeyed"), "%s", out);
	cr_assert_neq(cof("promote p/e/c"), 0);
	cr_assert(strstr(out, "being rekeyed"), "%s", out);

	/* paused, it stays paused over an unload and a load; resumed, it ends */
	COF_OK("rekey -p p/e");
	cr_assert(!strncmp(status(), "paused", 6), "%s", out);
	COF_OK("pool status p");
	cr_assert(strstr(out, "rekey: p/e: paused"), "%s", out);
	COF_OK("unload-key p/e");
	COF_OK("load-key p/e");
	cr_assert(!strncmp(status(), "paused", 6), "%s", out);
	COF_OK("rekey -s p/e");
	cr_assert(!strncmp(status(), "stopped", 7), "%s", out);
	COF_OK("rekey --rate 0 p/e");
	wait_status("done");
	all_sound();
	COF_OK("snapshot p/e@after");
}

Test(rekey, snapshots_read_as_before_and_raw_streams_of_them_verify)
{
	make_filled();
	snapshot_then_overwrite("s1");
	snapshot_then_overwrite("s2");
	rekey_beside_validated_io(); /* over records the snapshots keep too */
	all_sound();
	reads_as_image("p/e@s1", "s1");
	reads_as_image("p/e@s2", "s2");
	/* a full and an incremental raw stream: their view roots were made anew */
	COF_OK("pool create -s 128M q %s", tdaemon_path(&td, "lun2"));
	COF_OK("send -w p/e@s1 > %s", tdaemon_path(&td, "full"));
	COF_OK("send -w -i @s1 p/e@s2 > %s", tdaemon_path(&td, "incr"));
	COF_OK("receive q/e < %s", tdaemon_path(&td, "full"));
	COF_OK("receive q/e < %s", tdaemon_path(&td, "incr"));
	COF_OK("load-key -L file://%s q/e", tdaemon_path(&td, "key"));
	reads_as_image("q/e@s1", "s1");
	reads_as_image("q/e@s2", "s2");
	COF_OK("pool check q");
	/* and everything again from the LUNs after a restart */
	restart_and_load("p/e");
	all_sound();
	reads_as_image("p/e@s1", "s1");
	reads_as_image("p/e@s2", "s2");
	/* a snapshot of the new key, then a rollback to an old one */
	COF_OK("snapshot p/e@s3");
	COF_OK("rollback -r p/e@s1");
	reads_as_image("p/e", "s1");
	COF_OK("pool check p");
}

Test(rekey, a_mirror_side_out_of_service_meanwhile_is_resilvered_whole)
{
	const char *key = tdaemon_file(&td, "key", "0123456789abcdef0123456789abcdef", 32);
	char data[4200], cmd[8192];
	double end;

	COF_OK("pool create -s 128M p mirror %s %s", tdaemon_path(&td, "lun0"),
	       tdaemon_path(&td, "lun1"));
	COF_OK("create -V 8M -b 8k -o encryption=aes-256-gcm -o keyformat=raw "
	       "-o keylocation=file://%s p/e", key);
	tdaemon_random_file(&td, "data", 8 << 20, data, sizeof(data));
	COF_OK("write p/e < %s", data);
	COF_OK("snapshot p/e@s");
	COF_OK("read p/e@s > %s", tdaemon_path(&td, "s.img"));
	/* sealed again in place while a side is out: it misses them all, and
	 * they are older than the txg it went out in */
	COF_OK("pool offline p %s", tdaemon_path(&td, "lun1"));
	COF_OK("rekey --rate 0 p/e");
	wait_status("done");
	COF_OK("pool online p %s", tdaemon_path(&td, "lun1"));
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	do
		COF_OK("pool status p");
	while (!(strstr(out, "resilver finished") && strstr(out, "state: ONLINE")) &&
	       tdaemon_poll(end));
	cr_assert(strstr(out, "resilver finished") && strstr(out, "state: ONLINE"), "%s", out);
	/* the side that was out serves everything alone */
	COF_OK("pool offline p %s", tdaemon_path(&td, "lun0"));
	COF_OK("read p/e > %s", tdaemon_path(&td, "now.img"));
	snprintf(cmd, sizeof(cmd), "cmp %s %s", tdaemon_path(&td, "now.img"), data);
	cr_assert_eq(system(cmd), 0, "the side that was out reads otherwise");
	reads_as_image("p/e@s", "s");
	COF_OK("pool check p");
	cr_assert(strstr(out, "old_keys: 0") && strstr(out, "mac_errors: 0"), "%s", out);
}

/* p/e/c's image now as @name.img. */
static void clone_image(const char *ds, const char *name)
{
	COF_OK("read %s > %s.img", ds, tdaemon_path(&td, "%s", name));
}

/* make_filled()'s p/e, a snapshot p/e@s1 that keeps records, and a clone
 * p/e/c of it with records of its own, some kept by a snapshot p/e/c@cs
 * (images s1, cs, c). */
static void make_family(void)
{
	char data[4200];

	make_filled();
	snapshot_then_overwrite("s1");
	COF_OK("clone p/e@s1 p/e/c");
	tdaemon_random_file(&td, "c1", 1 << 20, data, sizeof(data));
	COF_OK("write p/e/c < %s", data);
	COF_OK("snapshot p/e/c@cs");
	clone_image("p/e/c@cs", "cs");
	tdaemon_random_file(&td, "c2", 256 << 10, data, sizeof(data));
	COF_OK("write -o 65536 p/e/c < %s", data);
	clone_image("p/e/c", "c");
}

/* make_family()'s datasets once the rekey of both is done: every write
 * reads back, the pool checks clean, the images read as they were. */
static void family_as_before(void)
{
	wait_status("done");
	wait_status_of("p/e/c", "done");
	all_sound();
	reads_as_image("p/e@s1", "s1");
	reads_as_image("p/e/c@cs", "cs");
	reads_as_image("p/e/c", "c");
}

Test(rekey, a_clone_and_its_origin_are_rekeyed_together)
{
	make_family();
	/* named by the clone, the master key they share goes from both; a
	 * kill -9 in the walk, and the load-key of their root resumes both */
	COF_OK("rekey --rate 4M p/e/c");
	COF_OK("get -H -o value rekeystatus p/e");
	cr_assert(!strncmp(out, "running", 7), "the origin is not rekeyed with its clone: %s", out);
	kill_9();
	COF_OK("load-key p/e");
	family_as_before();
	/* from the LUNs alone, with the new key */
	restart_and_load("p/e");
	reads_as_image("p/e/c", "c");
	reads_as_image("p/e/c@cs", "cs");
	all_sound();
}

static const char clear_parm[] = "sd=sd1,dataset=p/c,threads=2\n"
				 "wd=fill,sd=sd1,rdpct=0,seekpct=eof,xfersize=64k\n"
				 "rd=fill,wd=fill,iorate=max,elapsed=120,interval=1\n";

/* A clear 16 MiB volume p/c, every record written (journaled in j), and a
 * snapshot of it (its image s.img) whose records a second of writes moves
 * into its table. */
static void make_clear(void)
{
	COF_OK("pool create -s 128M p %s %s", tdaemon_path(&td, "lun0"),
	       tdaemon_path(&td, "lun1"));
	COF_OK("create -V 16M -b 8k -o primarycache=metadata p/c");
	COF_OK("bench -q --socket %s -v --journal %s %s", td.sock, tdaemon_path(&td, "j"),
	       parm("cfill.parm", clear_parm));
	COF_OK("snapshot p/c@s");
	COF_OK("read p/c@s > %s", tdaemon_path(&td, "s.img"));
	COF_OK("bench -q --socket %s -v --journal %s %s", td.sock, tdaemon_path(&td, "j"),
	       parm("cow.parm", "sd=sd1,dataset=p/c,threads=2\n"
				"wd=ow,sd=sd1,rdpct=0,seekpct=random,xfersize=8k\n"
				"rd=ow,wd=ow,iorate=max,elapsed=1,interval=1\n"));
}

/* A clear 8 MiB p/c beside p/e, in make_filled()'s pool. */
static void make_clear_beside(void)
{
	char data[4200];

	COF_OK("create -V 8M -b 8k p/c");
	tdaemon_random_file(&td, "c", 1 << 20, data, sizeof(data));
	COF_OK("write p/c < %s", data);
}

static void encrypt_clear(const char *flags)
{
	const char *key = tdaemon_file(&td, "key", "0123456789abcdef0123456789abcdef", 32);

	COF_OK("set encryption=aes-256-gcm -o keyformat=raw -o keylocation=file://%s %s p/c",
	       key, flags);
}

Test(rekey, a_clear_dataset_is_encrypted_in_place_under_validated_io)
{
	char lun[4200], lun2[4200];
	uint8_t plain[64], kept[64];
	pid_t pid;

	make_clear();
	/* a record's plaintext as its LUN holds it */
	stored_bytes_of("p/c", 3, plain, lun, sizeof(lun));
	cr_assert_gt(tlun_find(lun, plain, sizeof(plain)), 0, "the check below proves nothing");
	COF_OK("bench -q --socket %s -vr %s", td.sock, tdaemon_path(&td, "j"));
	pid = validated_io("p/c");
	encrypt_clear("--rate 8M --scrub-free");
	COF_OK("get -H -o value encryption,keystatus,encryptionroot p/c");
	cr_assert(strstr(out, "aes-256-gcm\navailable\np/c"), "%s", out);
	wait_status_of("p/c", "done");
	validated_io_ok(pid);
	COF_OK("bench -q --socket %s -vr %s", td.sock, tdaemon_path(&td, "j"));
	COF_OK("pool check p");
	cr_assert(strstr(out, "mac_errors: 0") && strstr(out, "nonce_repeats: 0") &&
			  strstr(out, "mac_verified: 2 tables"),
		  "%s", out);
	/* every pointer is sealed: the checker counts them all encrypted */
	{
		unsigned long long nrec = 0, nenc = 1;
		const char *r = strstr(out, "records: ");

		cr_assert(r && sscanf(r, "records: %llu (%llu encrypted", &nrec, &nenc) == 2 &&
				  nrec == nenc && nrec > 0,
			  "%s", out);
	}
	reads_as_image("p/c@s", "s");
	/* no byte of the plaintext on the LUNs, freed extents included */
	for (int i = 0; i < 2; i++)
		cr_assert_eq(tlun_find(tdaemon_path(&td, "lun%d", i), plain, sizeof(plain)), 0,
			     "lun%d keeps the plaintext of a record", i);
	/* from the LUNs: the key is needed now, and everything reads with it */
	tdaemon_stop_ok(&td);
	tdaemon_start_ok(&td);
	cr_assert_neq(cof("read -l 8192 p/c > /dev/null"), 0, "read without its key:\n%s", out);
	COF_OK("load-key p/c");
	COF_OK("bench -q --socket %s -vr %s", td.sock, tdaemon_path(&td, "j"));
	reads_as_image("p/c@s", "s");
	COF_OK("pool check p");
	cr_assert(strstr(out, "mac_errors: 0"), "%s", out);
	stored_bytes_of("p/c", 3, kept, lun2, sizeof(lun2));
	cr_assert(memcmp(kept, plain, sizeof(plain)), "record 3 is still stored in the clear");
}

Test(rekey, an_encryption_in_place_cut_by_kill_9_resumes_at_load_key)
{
	make_clear();
	encrypt_clear("--rate 2M");
	for (int cycle = 0; cycle < 2; cycle++) {
		double end = tdaemon_deadline(TDAEMON_WAIT_S);

		/* right after the start, then once its walk is on its way */
		while (cycle && strstr(status_of("p/c"), "running 0%") && tdaemon_poll(end))
			;
		kill_9();
		COF_OK("get -H -o value encryption p/c");
		cr_assert(!strncmp(out, "aes-256-gcm", 11), "%s", out);
		COF_OK("load-key p/c"); /* it goes on */
	}
	/* paused and resumed as a rekey is; meanwhile a snapshot waits */
	COF_OK("rekey -p p/c");
	cr_assert(!strncmp(status_of("p/c"), "paused", 6), "%s", out);
	cr_assert_neq(cof("snapshot p/c@t"), 0);
	cr_assert(strstr(out, "being rekeyed"), "%s", out);
	COF_OK("rekey --rate 0 p/c");
	wait_status_of("p/c", "done");
	COF_OK("bench -q --socket %s -vr %s", td.sock, tdaemon_path(&td, "j"));
	reads_as_image("p/c@s", "s");
	COF_OK("pool check p");
	cr_assert(strstr(out, "mac_errors: 0"), "%s", out);
}

Test(rekey, encryption_in_place_refusals_say_why_and_change_nothing)
{
	make_filled();
	make_clear_beside();
	/* encrypted already: a change of suite keeps the key, and is a suite */
	cr_assert_neq(cof("set encryption=aes-256-gcm -o keyformat=raw -o keylocation=file://%s "
			  "p/e", tdaemon_path(&td, "key")), 0);
	cr_assert(strstr(out, "keeps its key"), "%s", out);
	cr_assert_neq(cof("set encryption=off p/e"), 0);
	cr_assert(strstr(out, "not made clear"), "%s", out);
	cr_assert_neq(cof("set encryption=aes-256-ccm p/e"), 0);
	cr_assert(strstr(out, "already"), "%s", out);
	COF_OK("get -H -o value encryption,rekeystatus p/e");
	cr_assert(!strcmp(out, "aes-256-ccm\nnone\n"), "%s", out);
	/* no keyformat */
	cr_assert_neq(cof("set encryption=on p/c"), 0);
	cr_assert(strstr(out, "keyformat"), "%s", out);
	/* a clear dataset below it would be under an encrypted one */
	COF_OK("create -V 8M -b 8k p/c/k");
	cr_assert_neq(cof("set encryption=on -o keyformat=raw -o keylocation=file://%s p/c",
			  tdaemon_path(&td, "key")), 0);
	cr_assert(strstr(out, "encrypt it first"), "%s", out);
	COF_OK("destroy p/c/k");
	/* a clone shares its origin's key, wrapped by the root above it */
	COF_OK("snapshot p/c@s");
	COF_OK("clone p/c@s p/k");
	cr_assert_neq(cof("set encryption=on -o keyformat=raw -o keylocation=file://%s p/c",
			  tdaemon_path(&td, "key")), 0);
	cr_assert(strstr(out, "not under it"), "%s", out);
	/* and is encrypted with its origin, not alone */
	cr_assert_neq(cof("set encryption=on -o keyformat=raw -o keylocation=file://%s p/k",
			  tdaemon_path(&td, "key")), 0);
	cr_assert(strstr(out, "is a clone") && strstr(out, "encrypt p/c"), "%s", out);
	COF_OK("get -H -o value encryption p/c p/k");
	cr_assert(!strcmp(out, "off\noff\n"), "%s", out);
	COF_OK("pool check p");
}

Test(rekey, a_clear_dataset_with_snapshots_and_a_clone_is_encrypted_in_place_with_it)
{
	char data[4200], lun[4200];
	uint8_t plain[64], kept[64];
	pid_t pid;

	make_clear();
	/* a clone with records of its own, some kept by a snapshot of it */
	COF_OK("clone p/c@s p/c/k");
	tdaemon_random_file(&td, "k1", 1 << 20, data, sizeof(data));
	COF_OK("write p/c/k < %s", data);
	COF_OK("snapshot p/c/k@ks");
	clone_image("p/c/k@ks", "ks");
	tdaemon_random_file(&td, "k2", 256 << 10, data, sizeof(data));
	COF_OK("write -o 65536 p/c/k < %s", data);
	clone_image("p/c/k", "k");
	stored_bytes_of("p/c/k", 3, plain, lun, sizeof(lun));
	cr_assert_gt(tlun_find(lun, plain, sizeof(plain)), 0, "the check below proves nothing");
	/* named by the origin, beside validated I/O; a kill -9 in the walk,
	 * and the load-key of their root resumes both */
	pid = validated_io("p/c");
	encrypt_clear("--rate 2M --scrub-free");
	COF_OK("get -H -o value encryption,keystatus,encryptionroot p/c/k");
	cr_assert(strstr(out, "aes-256-gcm\navailable\np/c"), "%s", out);
	cr_assert(!strncmp(status_of("p/c/k"), "running", 7), "%s", out);
	validated_io_ok(pid);
	kill_9();
	cr_assert_neq(cof("read -l 8192 p/c/k > /dev/null"), 0, "read without its key:\n%s", out);
	COF_OK("load-key p/c");
	wait_status_of("p/c", "done");
	wait_status_of("p/c/k", "done");
	COF_OK("bench -q --socket %s -vr %s", td.sock, tdaemon_path(&td, "j"));
	reads_as_image("p/c@s", "s");
	reads_as_image("p/c/k@ks", "ks");
	reads_as_image("p/c/k", "k");
	COF_OK("pool check p");
	cr_assert(strstr(out, "mac_errors: 0") && strstr(out, "nonce_repeats: 0"), "%s", out);
	{
		unsigned long long nrec = 0, nenc = 1;
		const char *r = strstr(out, "records: ");

		cr_assert(r && sscanf(r, "records: %llu (%llu encrypted", &nrec, &nenc) == 2 &&
				  nrec == nenc && nrec > 0,
			  "%s", out);
	}
	/* the clone's own plaintext is gone from the LUNs, freed extents too */
	for (int i = 0; i < 2; i++)
		cr_assert_eq(tlun_find(tdaemon_path(&td, "lun%d", i), plain, sizeof(plain)), 0,
			     "lun%d keeps the plaintext of a record of the clone", i);
	stored_bytes_of("p/c/k", 3, kept, lun, sizeof(lun));
	cr_assert(memcmp(kept, plain, sizeof(plain)), "the clone's record 3 is still clear");
	/* from the LUNs alone, with the key */
	COF_OK("load-key p/c");
	reads_as_image("p/c/k", "k");
	reads_as_image("p/c/k@ks", "ks");
	COF_OK("pool check p");
	cr_assert(strstr(out, "mac_errors: 0"), "%s", out);
}

Test(rekey, a_suite_change_of_a_dataset_with_snapshots_and_a_clone_under_validated_io)
{
	pid_t pid;

	make_family();
	/* named by the clone: they share a key, so they change together; a
	 * kill -9 in the walk, and the load-key of their root goes on */
	pid = validated_io("p/e");
	COF_OK("set encryption=aes-128-gcm --rate 2M p/e/c");
	COF_OK("get -H -o value encryption p/e p/e/c");
	cr_assert(!strcmp(out, "aes-128-gcm\naes-128-gcm\n"), "%s", out);
	cr_assert(!strncmp(status_of("p/e"), "running", 7), "%s", out);
	validated_io_ok(pid);
	kill_9();
	COF_OK("load-key p/e");
	family_as_before();
	/* from the LUNs alone: the records open under the new suite, the
	 * lists of children verify (load-key checks them) */
	restart_and_load("p/e");
	COF_OK("get -H -o value encryption p/e p/e/c");
	cr_assert(!strcmp(out, "aes-128-gcm\naes-128-gcm\n"), "%s", out);
	reads_as_image("p/e/c", "c");
	reads_as_image("p/e@s1", "s1");
	all_sound();
}

/* Copy (or, @back, put back) the LUNs and LMDB of pool p: a copy taken
 * with the daemon stopped, the key file left as it is. */
static void pool_copy(int back)
{
	char cmd[16384];

	snprintf(cmd, sizeof(cmd),
		 "set -e; for f in %s/lun0 %s/lun1 %s/pools/p.mdb; do "
		 "if [ %d = 1 ]; then cp \"$f.kept\" \"$f\"; else cp \"$f\" \"$f.kept\"; fi; done",
		 td.dir, td.dir, td.state, back);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

Test(rekey, a_suite_change_cut_before_its_switch_is_switched_by_the_load_key)
{
	char data[4200];

	make_filled();
	snapshot_then_overwrite("s1");
	/* a member of p/e's root: p/e's list of children names its suite */
	COF_OK("create -V 4M -b 8k p/e/m");
	tdaemon_random_file(&td, "m", 1 << 20, data, sizeof(data));
	COF_OK("write p/e/m < %s", data);
	clone_image("p/e/m", "m");
	tdaemon_stop_ok(&td);
	pool_copy(0);
	tdaemon_start_ok(&td);
	COF_OK("load-key p/e");
	COF_OK("set encryption=aes-128-gcm --rate 1M p/e/m");
	/* the key file with both keys, the pool as before the switch: what a
	 * crash between the two leaves */
	tdaemon_stop_ok(&td);
	pool_copy(1);
	tdaemon_start_ok(&td);
	COF_OK("get -H -o value encryption p/e/m");
	cr_assert(!strcmp(out, "aes-256-ccm\n"), "not the state before the switch: %s", out);
	COF_OK("load-key p/e");
	wait_status_of("p/e/m", "done");
	COF_OK("get -H -o value encryption p/e/m");
	cr_assert(!strcmp(out, "aes-128-gcm\n"), "%s", out);
	reads_as_image("p/e/m", "m");
	reads_as_image("p/e@s1", "s1");
	all_sound();
	/* p/e's list of children names the new suite: the load-key checks it */
	restart_and_load("p/e");
	reads_as_image("p/e/m", "m");
	all_sound();
}

Test(rekey, a_clear_record_put_back_after_encryption_reads_nothing_even_marked_encrypting)
{
	char mdb[4200], key[32];
	uint8_t row[512];
	struct tamper *t;
	struct tbp clear;
	uint64_t id;
	long n;

	make_clear();
	snprintf(mdb, sizeof(mdb), "%s/pools/p.mdb", td.state);
	tdaemon_stop_ok(&td);
	cr_assert_eq(tamper_open(mdb, &t), 0);
	cr_assert_eq(tamper_ds_id(t, "p/c", &id), 0);
	cr_assert_eq(tamper_bp_get(t, id, 9, &clear), 0);
	tamper_close(t);
	tdaemon_start_ok(&td);
	encrypt_clear("--rate 0");
	wait_status_of("p/c", "done");
	/* the clear pointer put back, and the row says an encryption is under way */
	tdaemon_stop_ok(&td);
	cr_assert_eq(tamper_open(mdb, &t), 0);
	cr_assert_eq(tamper_bp_put(t, id, 9, &clear), 0);
	snprintf(key, sizeof(key), "rekey/%016llx", (unsigned long long)id);
	n = tamper_get(t, "pool", key, strlen(key), row, sizeof(row));
	cr_assert_gt(n, 67, "no rekey row %s", key);
	row[2] = 1;     /* running */
	row[66] |= 0x2; /* encrypting: its clear records read */
	cr_assert_eq(tamper_put(t, "pool", key, strlen(key), row, (size_t)n), 0);
	tamper_close(t);
	tdaemon_start_ok(&td);
	COF_OK("load-key p/c");
	cr_assert_neq(cof("read -o %u -l 8192 p/c > /dev/null", 9 * 8192), 0,
		      "the clear record put back was served:\n%s", out);
	cr_assert_neq(cof("pool check p"), 0, "pool check passed the clear pointer:\n%s", out);
	cr_assert(!strstr(out, "mac_errors: 0"), "%s", out);
}

Test(rekey, a_pool_full_for_writes_is_rekeyed_through_its_slop)
{
	const char *key = tdaemon_file(&td, "key", "0123456789abcdef0123456789abcdef", 32);
	char data[4200], cmd[8192];

	/* 128 KiB records, written until the pool refuses more */
	COF_OK("pool create -s 64M p %s", tdaemon_path(&td, "lun0"));
	COF_OK("create -s -V 128M -b 128k -o encryption=aes-256-ccm -o keyformat=raw "
	       "-o keylocation=file://%s p/big", key);
	tdaemon_random_file(&td, "big", 128 << 20, data, sizeof(data));
	cr_assert_neq(cof("write p/big < %s", data), 0, "the pool took 128 MiB:\n%s", out);
	cr_assert(strstr(out, "out of space"), "%s", out);
	/* each record needs its new extent before the commit frees the old one:
	 * fewer at a time, down to one, fit in the slop the writes left */
	COF_OK("rekey --rate 0 p/big");
	wait_status_of("p/big", "done");
	COF_OK("pool check p");
	cr_assert(strstr(out, "old_keys: 0") && strstr(out, "mac_errors: 0"), "%s", out);
	/* what was written reads as it was: the first 32 MiB at least */
	COF_OK("read -l 33554432 p/big > %s", tdaemon_path(&td, "big.out"));
	snprintf(cmd, sizeof(cmd), "cmp -n 33554432 %s %s", data, tdaemon_path(&td, "big.out"));
	cr_assert_eq(system(cmd), 0, "the records read otherwise after the rekey");
}
