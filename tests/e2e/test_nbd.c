// SPDX-License-Identifier: MIT
/*
 * E2E: the NBD export of a real cofferd, driven by the real clients of the
 * Debian packages libnbd-bin (nbdinfo, nbdcopy), python3-libnbd (nbdsh),
 * qemu-utils (qemu-img, qemu-io) and fio, and by a raw socket for what no
 * well-behaved client sends. A test whose client is missing is skipped and
 * says which package brings it (contrib/deps.sh --test installs them).
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "daemon.h"
#include "nbd_proto.h"
#include "nbdraw.h"
#include "proto.h"

/* short handshake limits, so that the hostile tests see them act */
TDAEMON_FIXTURE("hello_timeout = 5\nmax_connections_per_uid = 24\n")
static char out[1 << 16];

TestSuite(nbd, .init = setup, .fini = teardown, .timeout = 240);

#define COF_OK(in, ...) TDAEMON_COF_OK(&td, out, (in), __VA_ARGS__)
#define cof(in, ...) tdaemon_cofferf(&td, (in), out, sizeof(out), __VA_ARGS__)

static const char *nbd_sock(void)
{
	static char p[PATH_MAX];

	snprintf(p, sizeof(p), "%.1000s/nbd.sock", td.dir);
	return p;
}

static const char *uri(const char *ds)
{
	static char u[2][PATH_MAX + 300];
	static int n;

	n ^= 1;
	snprintf(u[n], sizeof(u[n]), "nbd+unix:///%s?socket=%s", ds, nbd_sock());
	return u[n];
}

/* Run @fmt through /bin/sh, stdout and stderr into @o. @return the exit status */
static int sh(char *o, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int sh(char *o, size_t cap, const char *fmt, ...)
{
	char cmd[16384];
	va_list ap;
	FILE *p;
	size_t n = 0;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd) - 8, fmt, ap);
	va_end(ap);
	strcat(cmd, " 2>&1");
	p = popen(cmd, "r");
	cr_assert_not_null(p, "popen %s", cmd);
	while (o && n + 1 < cap) {
		size_t r = fread(o + n, 1, cap - 1 - n, p);

		if (r == 0)
			break;
		n += r;
	}
	if (o)
		o[n] = '\0';
	while (!o && fgetc(p) != EOF)
		;
	st = pclose(p);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define SH_OK(...)                                                                    \
	do {                                                                          \
		int st_ = sh(out, sizeof(out), __VA_ARGS__);                          \
		cr_assert_eq(st_, 0, "exit %d: %s\ndaemon:\n%s", st_, out, tdaemon_log(&td)); \
	} while (0)

static int have(const char *prog)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", prog);
	return system(cmd) == 0;
}

#define NEED(prog, pkg)                                                                  \
	do {                                                                             \
		if (!have(prog))                                                         \
			tdaemon_skip(&td, "%s is not installed (Debian package %s; "     \
					  "contrib/deps.sh --test installs it)", prog, pkg); \
	} while (0)

/*
 * nbdsh runs the first python3 on PATH; the module python3-libnbd installs
 * is the system python's, so a python3 of one's own (pyenv, a venv) goes
 * after /usr/bin for it.
 */
static const char *nbdsh = "nbdsh";

#define NEED_NBDSH()                                                                     \
	do {                                                                             \
		NEED("nbdsh", "libnbd-bin");                                             \
		if (system("nbdsh -c 'import nbd' >/dev/null 2>&1") == 0)                \
			nbdsh = "nbdsh";                                                 \
		else if (system("PATH=/usr/bin:$PATH nbdsh -c 'import nbd' >/dev/null 2>&1") == 0) \
			nbdsh = "PATH=/usr/bin:$PATH nbdsh";                             \
		else                                                                     \
			tdaemon_skip(&td, "python3's nbd module is missing (Debian package " \
					  "python3-libnbd)");                            \
	} while (0)

static void make_pool(void)
{
	COF_OK(NULL, "pool create -s 160M tank %s/l0 %s/l1", td.dir, td.dir);
}

static const char *pass_file(void)
{
	static char p[PATH_MAX];
	const char *s = "nbd test passphrase\n";

	snprintf(p, sizeof(p), "%s", tdaemon_file(&td, "pass", s, strlen(s)));
	return p;
}

static void make_encrypted(const char *name, const char *size, const char *suite)
{
	COF_OK(NULL,
	       "create -V %s -o encryption=%s -o keyformat=passphrase -o keylocation=file://%s "
	       "-o pbkdf2iters=100000 %s",
	       size, suite, pass_file(), name);
}

static int files_equal(const char *a, const char *b)
{
	char cmd[2 * PATH_MAX + 32];

	snprintf(cmd, sizeof(cmd), "cmp '%s' '%s'", a, b);
	return system(cmd) == 0;
}

/* A script in the temp dir, run by nbdsh with @env before it. */
static int nbdsh_script(const char *env, const char *name, const char *text)
{
	const char *p = tdaemon_file(&td, name, text, strlen(text));
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s", p);
	return sh(out, sizeof(out), "%s %s -c \"exec(open('%s').read())\"", env, nbdsh, path);
}

static void daemon_alive(void)
{
	COF_OK(NULL, "version");
	cr_assert_eq(kill(td.pid, 0), 0, "cofferd is gone");
}

/* ---- what the clients see ---- */

Test(nbd, nbdinfo_shows_size_block_sizes_and_flags)
{
	NEED("nbdinfo", "libnbd-bin");
	make_pool();
	COF_OK(NULL, "create -V 64M -o recordsize=16K tank/vm1");
	SH_OK("nbdinfo --json '%s'", uri("tank/vm1"));
	cr_assert(strstr(out, "\"export-size\": 67108864"), "%s", out);
	cr_assert(strstr(out, "\"block_size_minimum\": 512"), "%s", out);
	cr_assert(strstr(out, "\"block_size_preferred\": 16384"), "%s", out);
	cr_assert(strstr(out, "\"block_size_maximum\": 16777216"), "%s", out);
	cr_assert(strstr(out, "\"is_read_only\": false"), "%s", out);
	cr_assert(strstr(out, "\"can_flush\": true"), "%s", out);
	cr_assert(strstr(out, "\"can_fua\": true"), "%s", out);
	cr_assert(strstr(out, "\"can_trim\": true"), "%s", out);
	cr_assert(strstr(out, "\"can_zero\": true"), "%s", out);
	cr_assert(strstr(out, "\"can_cache\": true"), "%s", out);
	cr_assert(strstr(out, "\"can_multi_conn\": true"), "%s", out);
	/* the control socket's verbs still work beside it */
	daemon_alive();
}

static const char *ro_py =
	"import os, nbd\n"
	"h = nbd.NBD(); h.set_strict_mode(0); h.connect_uri(os.environ['URI'])\n"
	"assert h.is_read_only()\n"
	"try:\n"
	"    h.pwrite(b'x' * 4096, 0)\n"
	"    print('write taken')\n"
	"except nbd.Error as e:\n"
	"    print('write refused', e.errnum)\n"
	"h.flush()\n"
	"print('read', h.pread(16, 0).hex())\n";

/* A snapshot is exported read-only: the flag, a write refused, its own data. */
Test(nbd, a_snapshot_is_exported_read_only_with_its_own_data)
{
	char a[PATH_MAX], b[PATH_MAX], back[PATH_MAX], env[PATH_MAX + 400];

	NEED("nbdcopy", "libnbd-bin");
	NEED_NBDSH();
	make_pool();
	COF_OK(NULL, "create -V 4M tank/vm");
	tdaemon_random_file(&td, "a", 4u << 20, a, sizeof(a));
	tdaemon_random_file(&td, "b", 4u << 20, b, sizeof(b));
	SH_OK("nbdcopy '%s' '%s'", a, uri("tank/vm"));
	COF_OK(NULL, "snapshot tank/vm@a");
	SH_OK("nbdcopy '%s' '%s'", b, uri("tank/vm"));
	SH_OK("nbdinfo --json '%s'", uri("tank/vm@a"));
	cr_assert(strstr(out, "\"is_read_only\": true"), "%s", out);
	cr_assert(strstr(out, "\"can_trim\": false") && strstr(out, "\"can_fua\": false"), "%s",
		  out);
	snprintf(back, sizeof(back), "%s/back", td.dir);
	SH_OK("nbdcopy '%s' '%s'", uri("tank/vm@a"), back);
	cr_assert(files_equal(a, back), "the snapshot's export is not A");
	snprintf(env, sizeof(env), "URI='%s'", uri("tank/vm@a"));
	cr_assert_eq(nbdsh_script(env, "ro.py", ro_py), 0, "%s\ndaemon:\n%s", out,
		     tdaemon_log(&td));
	cr_assert(strstr(out, "write refused 1"), "EPERM from the server: %s", out);
	SH_OK("nbdcopy '%s' '%s'", uri("tank/vm@a"), back);
	cr_assert(files_equal(a, back), "a refused write changed the snapshot");
	daemon_alive();
}

static long long allocated_bytes(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0, "%s", path);
	return (long long)st.st_blocks * 512;
}

/* Does nbdinfo --map output @m have the line "OFF LEN TYPE ..."? */
static int map_has(const char *m, unsigned long long off, unsigned long long len, unsigned type)
{
	for (const char *l = m; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		unsigned long long o, n;
		unsigned t;

		if (sscanf(l, "%llu %llu %u", &o, &n, &t) == 3 && o == off && n == len && t == type)
			return 1;
	}
	return 0;
}

/* base:allocation from the block pointers: a half-written volume maps half a hole. */
Test(nbd, nbdinfo_maps_a_half_written_volume_and_copies_stay_sparse)
{
	char in[PATH_MAX], back[PATH_MAX];

	NEED("nbdinfo", "libnbd-bin");
	NEED("nbdcopy", "libnbd-bin");
	make_pool();
	COF_OK(NULL, "create -s -V 8M tank/half");
	COF_OK(NULL, "create -s -V 8M tank/copy");
	tdaemon_random_file(&td, "in", 4u << 20, in, sizeof(in));
	COF_OK(in, "write tank/half");
	SH_OK("nbdinfo --map '%s'", uri("tank/half"));
	cr_assert(map_has(out, 0, 4u << 20, 0), "%s", out);
	cr_assert(map_has(out, 4u << 20, 4u << 20, 3), "%s", out);
	SH_OK("nbdinfo --map --totals '%s'", uri("tank/half"));
	cr_assert(strstr(out, "50.0%"), "%s", out);
	/* out of the export: the hole is not written */
	snprintf(back, sizeof(back), "%s/back", td.dir);
	SH_OK("nbdcopy '%s' '%s'", uri("tank/half"), back);
	cr_assert_lt(allocated_bytes(back), 6ll << 20, "the copy is not sparse");
	SH_OK("cmp -n 4194304 '%s' '%s' && cmp -i 4194304:0 -n 4194304 '%s' /dev/zero", in, back,
	      back);
	/* into an export: the hole stays one */
	SH_OK("nbdcopy '%s' '%s'", back, uri("tank/copy"));
	SH_OK("nbdinfo --map '%s'", uri("tank/copy"));
	cr_assert(map_has(out, 4u << 20, 4u << 20, 3), "%s", out);
	SH_OK("nbdcopy '%s' - | cmp - '%s'", uri("tank/copy"), back);
}

Test(nbd, nbdinfo_list_shows_only_what_the_peer_may_open)
{
	const char *priv = "setpriv --reuid=nobody --regid=nogroup --clear-groups";
	struct passwd *pw = getpwnam("nobody");

	NEED("nbdinfo", "libnbd-bin");
	if (geteuid() != 0 || !pw || !have("setpriv"))
		tdaemon_skip(&td, "needs root, a 'nobody' user and setpriv");
	make_pool();
	COF_OK(NULL, "create -V 1M tank/theirs");
	COF_OK(NULL, "create -V 1M tank/mine");
	COF_OK(NULL, "set owner=%u tank/mine", (unsigned)pw->pw_uid);
	SH_OK("nbdinfo --list '%s'", uri(""));
	cr_assert(strstr(out, "tank/mine") && strstr(out, "tank/theirs"), "%s", out);
	SH_OK("%s nbdinfo --list '%s'", priv, uri(""));
	cr_assert(strstr(out, "tank/mine"), "%s", out);
	cr_assert(!strstr(out, "tank/theirs"), "nobody sees a dataset it may not open:\n%s", out);
	/* and may not open it by name either: the refusal's text reaches the client
	 * (libnbd 1.14 shows a server's message for a policy error only in its debug) */
	cr_assert_neq(sh(out, sizeof(out), "LIBNBD_DEBUG=1 %s nbdinfo '%s'", priv,
			 uri("tank/theirs")),
		      0);
	cr_assert(strstr(out, "server error message: tank/theirs: permission denied"), "%s", out);
	SH_OK("%s nbdinfo --size '%s'", priv, uri("tank/mine"));
	cr_assert(strstr(out, "1048576"), "%s", out);
	cr_assert_neq(sh(out, sizeof(out), "LIBNBD_DEBUG=1 nbdinfo '%s'", uri("tank/none")), 0);
	cr_assert(strstr(out, "server error message: tank/none: no such dataset"), "%s", out);
}

Test(nbd, nbdcopy_64_mib_into_an_encrypted_dataset_and_back)
{
	char in[PATH_MAX], back[PATH_MAX], viacoffer[PATH_MAX];

	NEED("nbdcopy", "libnbd-bin");
	make_pool();
	make_encrypted("tank/enc", "64M", "aes-256-gcm");
	tdaemon_random_file(&td, "in", 64u << 20, in, sizeof(in));
	snprintf(back, sizeof(back), "%s/back", td.dir);
	snprintf(viacoffer, sizeof(viacoffer), "%s/viacoffer", td.dir);
	SH_OK("nbdcopy '%s' '%s'", in, uri("tank/enc"));
	SH_OK("nbdcopy '%s' '%s'", uri("tank/enc"), back);
	cr_assert(files_equal(in, back), "nbdcopy read back differs");
	cr_assert_eq(tdaemon_cofferf(&td, NULL, out, sizeof(out), "read -l 64M tank/enc > '%s'",
				     viacoffer),
		     0, "%s", out);
	cr_assert(files_equal(in, viacoffer), "coffer read differs from what nbdcopy wrote");
}

Test(nbd, qemu_img_convert_compare_and_qemu_io_at_unaligned_offsets)
{
	char in[PATH_MAX], back[PATH_MAX];

	NEED("qemu-img", "qemu-utils");
	NEED("qemu-io", "qemu-utils");
	make_pool();
	COF_OK(NULL, "create -V 8M tank/q");
	tdaemon_random_file(&td, "in", 8u << 20, in, sizeof(in));
	snprintf(back, sizeof(back), "%s/back.raw", td.dir);
	SH_OK("qemu-img convert -n -f raw -O raw '%s' '%s'", in, uri("tank/q"));
	SH_OK("qemu-img compare -f raw -F raw '%s' '%s'", in, uri("tank/q"));
	SH_OK("qemu-img convert -f raw -O raw '%s' '%s'", uri("tank/q"), back);
	cr_assert(files_equal(in, back));
	/* offsets and lengths that are neither sectors nor records */
	SH_OK("qemu-io -f raw -c 'write -P 0x5a 12345 7000' -c 'read -P 0x5a 12345 7000' "
	      "-c 'read -P 0x5a 12345 1' -c 'write -P 0x11 8191 2' -c 'read -P 0x11 8191 2' '%s'",
	      uri("tank/q"));
	cr_assert(!strstr(out, "Pattern verification failed"), "%s", out);
	/* the bytes around the unaligned writes are the image's */
	SH_OK("qemu-io -f raw -c 'write -P 0x5a 12345 7000' '%s' && "
	      "qemu-io -f raw -c 'write -P 0x5a 12345 7000' -c 'write -P 0x11 8191 2' '%s' && "
	      "qemu-img compare -f raw -F raw '%s' '%s'",
	      in, in, in, uri("tank/q"));
}

static const char *multi_py =
	"import os, random, nbd\n"
	"uri = os.environ['URI']; size = int(os.environ['SIZE'])\n"
	"random.seed(18)\n"
	"hs = []\n"
	"for i in range(4):\n"
	"    x = nbd.NBD(); x.set_strict_mode(0); x.connect_uri(uri); hs.append(x)\n"
	"assert hs[0].can_multi_conn()\n"
	"model = bytearray(size); bs = 8192; nblk = size // bs\n"
	"for rnd in range(12):\n"
	"    cookies = [[] for h in hs]\n"
	"    for j, b in enumerate(random.sample(range(nblk), 96)):\n"
	"        h = hs[j % 4]; off = b * bs; ck = cookies[j % 4]\n"
	"        kind = random.choice(['w', 'w', 'w', 't', 'z', 'zh'])\n"
	"        o = off + random.randrange(0, 3000); n = random.randrange(1, bs - (o - off))\n"
	"        if kind == 'w':\n"
	"            data = os.urandom(n)\n"
	"            ck.append(h.aio_pwrite(nbd.Buffer.from_bytearray(bytearray(data)), o,\n"
	"                         flags=nbd.CMD_FLAG_FUA if j % 7 == 0 else 0))\n"
	"            model[o:o + n] = data\n"
	"        elif kind == 't':\n"
	"            ck.append(h.aio_trim(n, o)); model[o:o + n] = bytes(n)\n"
	"        elif kind == 'z':\n"
	"            ck.append(h.aio_zero(n, o)); model[o:o + n] = bytes(n)\n"
	"        else:\n"
	"            ck.append(h.aio_zero(n, o, flags=nbd.CMD_FLAG_NO_HOLE)); model[o:o + n] = bytes(n)\n"
	"    for i, h in enumerate(hs):\n"
	"        cookies[i].append(h.aio_flush())\n"
	"    for i, h in enumerate(hs):\n"
	"        while h.aio_in_flight() > 0:\n"
	"            h.poll(-1)\n"
	"        for c in cookies[i]:\n"
	"            assert h.aio_command_completed(c)\n"
	"r = nbd.NBD(); r.connect_uri(uri)\n"
	"got = bytearray()\n"
	"for off in range(0, size, 1 << 20):\n"
	"    got += r.pread(1 << 20, off)\n"
	"assert got == model, 'read back differs from the model'\n"
	"print('multi-conn ok')\n";

Test(nbd, nbdsh_pipelined_mixed_requests_on_four_connections)
{
	char env[PATH_MAX + 400];

	NEED_NBDSH();
	make_pool();
	make_encrypted("tank/m", "16M", "aes-256-ccm");
	snprintf(env, sizeof(env), "URI='%s' SIZE=%u", uri("tank/m"), 16u << 20);
	cr_assert_eq(nbdsh_script(env, "multi.py", multi_py), 0, "%s\ndaemon:\n%s", out,
		     tdaemon_log(&td));
	cr_assert(strstr(out, "multi-conn ok"), "%s", out);
}

/*
 * A structured read across written records and holes: its chunks, as
 * libnbd's pread_structured sees them, say which is which, and the bytes
 * are the ones written. Records of 8 KiB: data in records 0, 2, 3 and 6.
 */
static const char *holes_py =
	"import os, nbd\n"
	"h = nbd.NBD(); h.connect_uri(os.environ['URI'])\n"
	"assert h.get_structured_replies_negotiated()\n"
	"R = 8192\n"
	"model = bytearray(8 * R)\n"
	"for rec in (0, 2, 3, 6):\n"
	"    b = bytes([rec + 1]) * R\n"
	"    h.pwrite(b, rec * R); model[rec * R:(rec + 1) * R] = b\n"
	"h.flush()\n"
	"def read(off, n):\n"
	"    chunks = []\n"
	"    def cb(buf, o, status, err):\n"
	"        chunks.append((o, len(buf), status))\n"
	"        return 0\n"
	"    got = h.pread_structured(n, off, cb)\n"
	"    assert got == model[off:off + n], 'bytes differ at %d+%d' % (off, n)\n"
	"    return sorted(chunks)\n"
	"D, H = nbd.READ_DATA, nbd.READ_HOLE\n"
	"c = read(0, 8 * R)\n"
	"assert c == [(0, R, D), (R, R, H), (2 * R, 2 * R, D), (4 * R, 2 * R, H),\n"
	"             (6 * R, R, D), (7 * R, R, H)], c\n"
	"# unaligned: a piece of record 1's hole, record 2, the start of record 3\n"
	"c = read(R + 1024, 2 * R)\n"
	"assert c == [(R + 1024, R - 1024, H), (2 * R, R + 1024, D)], c\n"
	"# all data, all hole: one chunk each\n"
	"assert read(2 * R, 2 * R) == [(2 * R, 2 * R, D)]\n"
	"assert read(4 * R, 2 * R) == [(4 * R, 2 * R, H)]\n"
	"print('holes ok')\n";

Test(nbd, a_structured_read_across_holes_answers_data_and_hole_chunks)
{
	char env[PATH_MAX + 400];

	NEED_NBDSH();
	make_pool();
	COF_OK(NULL,
	       "create -V 64K -o recordsize=8K -o encryption=aes-256-gcm -o keyformat=passphrase "
	       "-o keylocation=file://%s -o pbkdf2iters=100000 tank/holes",
	       pass_file());
	snprintf(env, sizeof(env), "URI='%s'", uri("tank/holes"));
	cr_assert_eq(nbdsh_script(env, "holes.py", holes_py), 0, "%s\ndaemon:\n%s", out,
		     tdaemon_log(&td));
	cr_assert(strstr(out, "holes ok"), "%s", out);
}

static const char *fua_py =
	"import os, nbd, signal\n"
	"uri = os.environ['URI']\n"
	"h = nbd.NBD(); h.set_strict_mode(0); h.connect_uri(uri)\n"
	"data = bytearray()\n"
	"for i in range(16):\n"
	"    d = os.urandom(8192 + 100)\n"
	"    h.pwrite(d, i * len(d), nbd.CMD_FLAG_FUA)\n"
	"    data += d\n"
	"os.kill(int(os.environ['PID']), signal.SIGKILL)\n"
	"open(os.environ['OUT'], 'wb').write(data)\n";

Test(nbd, fua_writes_survive_a_sigkill_right_after_their_reply)
{
	char env[PATH_MAX * 2 + 400], want[PATH_MAX], back[PATH_MAX];

	NEED_NBDSH();
	make_pool();
	/* no timer commit in the way: only FUA can have made them durable */
	tdaemon_stop_ok(&td);
	tdaemon_write_conf(&td, NULL, "txg_timeout = 300\nhello_timeout = 5\n");
	tdaemon_start_ok(&td);
	COF_OK(NULL, "create -V 4M tank/f");
	COF_OK(NULL, "pool status tank"); /* created and committed before the writes */
	snprintf(want, sizeof(want), "%s/want", td.dir);
	snprintf(back, sizeof(back), "%s/back", td.dir);
	snprintf(env, sizeof(env), "URI='%s' PID=%d OUT='%s'", uri("tank/f"), (int)td.pid, want);
	cr_assert_eq(nbdsh_script(env, "fua.py", fua_py), 0, "%s", out);
	waitpid(td.pid, NULL, 0);
	td.pid = -1;
	tdaemon_start_ok(&td);
	cr_assert_eq(tdaemon_cofferf(&td, NULL, out, sizeof(out), "read -l %u tank/f > '%s'",
				     16 * (8192 + 100), back),
		     0, "%s", out);
	cr_assert(files_equal(want, back), "a FUA write was lost in the crash");
}

static const char *hold_py =
	"import os, sys, nbd\n"
	"h = nbd.NBD(); h.connect_uri(os.environ['URI'])\n"
	"h.pread(4096, 0)\n"
	"open(os.environ['READY'], 'w').write('ready')\n"
	"sys.stdin.read()\n"
	"h.shutdown()\n";

static int file_exists(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0;
}

Test(nbd, key_unloaded_refuses_go_and_an_open_export_is_busy)
{
	char env[PATH_MAX * 2 + 400], ready[PATH_MAX], cmd[PATH_MAX * 3 + 600];
	const char *script;
	double end;
	FILE *p;

	NEED("nbdinfo", "libnbd-bin");
	NEED_NBDSH();
	make_pool();
	make_encrypted("tank/vm1", "4M", "aes-128-gcm");
	COF_OK(NULL, "unload-key tank/vm1");
	cr_assert_neq(sh(out, sizeof(out), "LIBNBD_DEBUG=1 nbdinfo '%s'", uri("tank/vm1")), 0);
	cr_assert(strstr(out, "server error message: tank/vm1: dataset key is not loaded; run "
			      "coffer load-key tank/vm1"),
		  "%s", out);
	/* qemu's client prints the text as it is */
	if (have("qemu-img")) {
		cr_assert_neq(sh(out, sizeof(out), "qemu-img info '%s'", uri("tank/vm1")), 0);
		cr_assert(strstr(out, "dataset key is not loaded; run coffer load-key tank/vm1"),
			  "%s", out);
	}
	COF_OK(NULL, "load-key tank/vm1");

	/* an export held open: unload-key, destroy and export refuse with EBUSY */
	snprintf(ready, sizeof(ready), "%s/ready", td.dir);
	script = tdaemon_file(&td, "hold.py", hold_py, strlen(hold_py));
	snprintf(env, sizeof(env), "URI='%s' READY='%s'", uri("tank/vm1"), ready);
	snprintf(cmd, sizeof(cmd), "%s %s -c \"exec(open('%s').read())\" >/dev/null 2>&1", env,
		 nbdsh, script);
	p = popen(cmd, "w");
	cr_assert_not_null(p);
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (!file_exists(ready) && tdaemon_poll(end))
		;
	cr_assert(file_exists(ready), "the NBD client did not connect");
	cr_assert_eq(cof(NULL, "unload-key tank/vm1"), 1, "%s", out);
	cr_assert(strstr(out, "open") || strstr(out, "busy"), "%s", out);
	cr_assert_eq(cof(NULL, "destroy tank/vm1"), 1, "%s", out);
	cr_assert_eq(cof(NULL, "pool export tank"), 1, "%s", out);
	cr_assert(strstr(out, "pool tank is busy: tank/vm1 is exported over NBD (1 connection); "
			      "disconnect those clients (nbd-client -d for an export), or give -f"),
		  "%s", out);
	pclose(p);
	/* once the client is gone the key unloads */
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (cof(NULL, "unload-key tank/vm1") != 0 && tdaemon_poll(end))
		;
	COF_OK(NULL, "get -H keystatus tank/vm1");
	cr_assert(strstr(out, "unavailable"), "%s", out);
}

static void fio_verify(const char *ds)
{
	SH_OK("fio --name=verify --ioengine=nbd --uri='%s' --rw=randwrite --bs=4k --size=8M "
	      "--iodepth=16 --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 "
	      "--output-format=terse",
	      uri(ds));
	cr_assert(!strstr(out, "verify:") || !strstr(out, "bad"), "%s", out);
	/* then a verify pass on its own, over what the first wrote */
	SH_OK("fio --name=verify --ioengine=nbd --uri='%s' --rw=randread --bs=4k --size=8M "
	      "--iodepth=16 --verify=crc32c --verify_only --verify_fatal=1 --verify_state_save=0 "
	      "--output-format=terse",
	      uri(ds));
}

Test(nbd, fio_nbd_engine_verifies_clear_and_encrypted)
{
	NEED("fio", "fio");
	if (system("fio --enghelp=nbd >/dev/null 2>&1") != 0)
		tdaemon_skip(&td, "this fio has no nbd engine");
	make_pool();
	COF_OK(NULL, "create -V 8M tank/clear");
	make_encrypted("tank/enc", "8M", "aes-256-gcm");
	fio_verify("tank/clear");
	fio_verify("tank/enc");
}

/*
 * nbdfuse (libnbd-bin) shows an export as a file in a FUSE mount: what is
 * written to the file is in the dataset, what the dataset holds reads back.
 * The mount is undone before any check, so that a failure leaves none.
 */
Test(nbd, nbdfuse_shows_an_export_as_a_file)
{
	char mnt[PATH_MAX], file[PATH_MAX + 8], in[PATH_MAX], back[PATH_MAX], cmd[PATH_MAX * 3];
	int wrote, read_back, via_coffer;
	double end;
	FILE *p;

	NEED("nbdfuse", "libnbd-bin");
	if (access("/dev/fuse", R_OK | W_OK) != 0)
		tdaemon_skip(&td, "no usable /dev/fuse here (%s)", strerror(errno));
	if (geteuid() != 0 && !have("fusermount3"))
		tdaemon_skip(&td, "fusermount3 is not installed (Debian package fuse3)");
	make_pool();
	make_encrypted("tank/fuse", "4M", "aes-256-gcm");
	tdaemon_random_file(&td, "in", 4u << 20, in, sizeof(in));
	snprintf(mnt, sizeof(mnt), "%s/mnt", td.dir);
	snprintf(file, sizeof(file), "%s/nbd", mnt);
	snprintf(back, sizeof(back), "%s/back", td.dir);
	cr_assert_eq(mkdir(mnt, 0700), 0);
	snprintf(cmd, sizeof(cmd), "exec nbdfuse '%s' '%s' >'%s/nbdfuse.log' 2>&1", mnt,
		 uri("tank/fuse"), td.dir);
	p = popen(cmd, "w");
	cr_assert_not_null(p);
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (!file_exists(file) && tdaemon_poll(end))
		;
	wrote = file_exists(file) ? sh(out, sizeof(out), "dd if='%s' of='%s' bs=1M conv=notrunc,fsync",
				       in, file)
				  : -1;
	read_back = wrote == 0 ? sh(NULL, 0, "cmp '%s' '%s'", in, file) : -1;
	sh(NULL, 0, "%s '%s'", geteuid() == 0 ? "umount" : "fusermount3 -u", mnt);
	pclose(p); /* nbdfuse exits once unmounted */
	cr_assert_eq(wrote, 0, "writing through nbdfuse: %s\n%s", out, tdaemon_log(&td));
	cr_assert_eq(read_back, 0, "the file nbdfuse shows differs from what was written");
	via_coffer = tdaemon_cofferf(&td, NULL, out, sizeof(out), "read -l 4M tank/fuse > '%s'", back);
	cr_assert_eq(via_coffer, 0, "%s", out);
	cr_assert(files_equal(in, back), "coffer read differs from what nbdfuse wrote");
}

Test(nbd, the_kernel_client_path)
{
	struct stat st;

	if (stat("/sys/module/nbd", &st) != 0 && system("modprobe -n nbd >/dev/null 2>&1") != 0)
		tdaemon_skip(&td, "no nbd kernel module on this machine: nbd-client -unix is "
				  "documented in README.md, not tested here");
	if (!have("nbd-client"))
		tdaemon_skip(&td, "nbd-client is not installed (Debian package nbd-client)");
	tdaemon_skip(&td, "the nbd module exists, but attaching /dev/nbdN is left to the operator");
}

/* ---- hostile peers, on a raw socket ---- */

static int raw_connect(void)
{
	return raw_connect_unix(nbd_sock());
}

/*
 * INFO or GO on @ds with no info requests. @return the type of the reply
 * that ends it; *@size: the export's size, if it said
 */
static uint32_t raw_export_opt(int fd, uint32_t opt, const char *ds, uint64_t *size)
{
	uint8_t d[512], r[512];
	uint32_t n = (uint32_t)strlen(ds), len, type;

	wire_put_u32(d, n);
	memcpy(d + 4, ds, n);
	wire_put_u16(d + 4 + n, 0);
	send_opt(fd, opt, d, n + 6);
	while ((type = read_opt_reply(fd, opt, r, sizeof(r), &len)) == NBD_REP_INFO) {
		if (wire_get_u16(r) == NBD_INFO_EXPORT && size)
			*size = wire_get_u64(r + 2);
	}
	return type;
}

#define RAW_ALLOC 2 /* raw_go_with(): structured replies and base:allocation */

/*
 * Fixed newstyle up to GO on @ds, @structured replies or not (RAW_ALLOC:
 * and the base:allocation context for BLOCK_STATUS). @return the export's size
 */
static uint64_t raw_go_with(int fd, const char *ds, int structured)
{
	uint8_t d[512], r[512];
	uint32_t n = (uint32_t)strlen(ds), qn = (uint32_t)strlen(NBD_META_ALLOCATION), len;
	uint64_t size = 0;

	greeting(fd);
	send_flags(fd);
	if (structured) {
		send_opt(fd, NBD_OPT_STRUCTURED_REPLY, NULL, 0);
		cr_assert_eq(read_opt_reply(fd, NBD_OPT_STRUCTURED_REPLY, r, sizeof(r), &len),
			     NBD_REP_ACK);
	}
	if (structured == RAW_ALLOC) {
		wire_put_u32(d, n);
		memcpy(d + 4, ds, n);
		wire_put_u32(d + 4 + n, 1);
		wire_put_u32(d + 8 + n, qn);
		memcpy(d + 12 + n, NBD_META_ALLOCATION, qn);
		send_opt(fd, NBD_OPT_SET_META_CONTEXT, d, 12 + n + qn);
		cr_assert_eq(read_opt_reply(fd, NBD_OPT_SET_META_CONTEXT, r, sizeof(r), &len),
			     NBD_REP_META_CONTEXT);
		cr_assert_eq(wire_get_u32(r), NBD_META_ALLOCATION_ID);
		cr_assert_eq(read_opt_reply(fd, NBD_OPT_SET_META_CONTEXT, r, sizeof(r), &len),
			     NBD_REP_ACK);
	}
	cr_assert_eq(raw_export_opt(fd, NBD_OPT_GO, ds, &size), NBD_REP_ACK);
	return size;
}

static uint64_t raw_go(int fd, const char *ds)
{
	return raw_go_with(fd, ds, 0);
}

static void send_req(int fd, uint16_t type, uint16_t flags, uint64_t cookie, uint64_t off,
		     uint32_t len)
{
	uint8_t q[NBD_REQ_SIZE];

	wire_put_u32(q, NBD_REQUEST_MAGIC);
	wire_put_u16(q + 4, flags);
	wire_put_u16(q + 6, type);
	wire_put_u64(q + 8, cookie);
	wire_put_u64(q + 16, off);
	wire_put_u32(q + 24, len);
	write_full(fd, q, sizeof(q));
}

/* A simple reply: its error, for @cookie. */
static uint32_t read_simple(int fd, uint64_t cookie)
{
	uint8_t r[NBD_SIMPLE_REPLY_SIZE];

	cr_assert_eq(read_full(fd, r, sizeof(r)), 0, "no reply");
	cr_assert_eq(wire_get_u32(r), NBD_SIMPLE_REPLY_MAGIC);
	cr_assert_eq(wire_get_u64(r + 8), cookie);
	return wire_get_u32(r + 4);
}

Test(nbd, truncated_handshakes_and_wrong_magic_close_only_themselves)
{
	uint8_t junk[NBD_OPT_HDR], d[64];
	uint32_t len;
	int fd;

	make_pool();
	COF_OK(NULL, "create -V 1M tank/h");
	/* gone at once; after 2 of the 4 flag bytes; in the middle of an option header */
	close(raw_connect());
	fd = raw_connect();
	greeting(fd);
	write_full(fd, "\0\0", 2);
	close(fd);
	fd = raw_connect();
	greeting(fd);
	send_flags(fd);
	write_full(fd, "IHAVEOPT\0\0", 10);
	close(fd);
	/* old-style or unknown client flags */
	fd = raw_connect();
	greeting(fd);
	write_full(fd, "\0\0\0\0", 4);
	expect_closed(fd);
	fd = raw_connect();
	greeting(fd);
	write_full(fd, "\0\0\0\x81", 4);
	expect_closed(fd);
	/* an option without its magic */
	fd = raw_connect();
	greeting(fd);
	send_flags(fd);
	memset(junk, 'x', sizeof(junk));
	write_full(fd, junk, sizeof(junk));
	expect_closed(fd);
	/* GO whose lengths disagree: an error reply, and the connection goes on */
	fd = raw_connect();
	greeting(fd);
	send_flags(fd);
	wire_put_u32(d, 1000);
	memcpy(d + 4, "tank/h", 6);
	send_opt(fd, NBD_OPT_GO, d, 12);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_GO, d, sizeof(d), &len), NBD_REP_ERR_INVALID);
	send_opt(fd, 77, NULL, 0);
	cr_assert_eq(read_opt_reply(fd, 77, d, sizeof(d), &len), NBD_REP_ERR_UNSUP);
	send_opt(fd, NBD_OPT_ABORT, NULL, 0);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_ABORT, d, sizeof(d), &len), NBD_REP_ACK);
	expect_closed(fd);
	/* silence: closed at hello_timeout (5 s here) */
	fd = raw_connect();
	greeting(fd);
	expect_closed(fd);
	daemon_alive();
	cr_assert_eq(raw_go((fd = raw_connect()), "tank/h"), 1u << 20);
	close(fd);
}

/*
 * INFO opens its export only to describe it, and a GO refused after the
 * open (key not loaded) keeps nothing: both give the handle back with a
 * DS_CLOSE at once, so the pool is not busy while the peer negotiates on.
 */
Test(nbd, info_and_a_refused_go_give_their_handle_back_at_once)
{
	uint8_t r[512];
	uint32_t len;
	int fd;

	make_pool();
	COF_OK(NULL, "create -V 1M tank/vm");
	make_encrypted("tank/enc", "1M", "aes-128-gcm");
	COF_OK(NULL, "unload-key tank/enc");
	fd = raw_connect();
	greeting(fd);
	send_flags(fd);
	cr_assert_eq(raw_export_opt(fd, NBD_OPT_INFO, "tank/vm", NULL), NBD_REP_ACK);
	cr_assert_eq(raw_export_opt(fd, NBD_OPT_GO, "tank/enc", NULL), NBD_REP_ERR_UNKNOWN);
	cr_assert(strstr(tdaemon_log(&td), "ds_close"), "the closes are calls of the dispatcher:\n%s",
		  tdaemon_log(&td));
	COF_OK(NULL, "pool export tank");
	/* and the connection negotiates on */
	send_opt(fd, NBD_OPT_ABORT, NULL, 0);
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_ABORT, r, sizeof(r), &len), NBD_REP_ACK);
	expect_closed(fd);
	daemon_alive();
}

Test(nbd, an_oversized_option_is_refused_before_it_is_read)
{
	uint8_t h[NBD_OPT_HDR], d[512];
	uint32_t len;
	int fd;

	fd = raw_connect();
	greeting(fd);
	send_flags(fd);
	wire_put_u64(h, NBD_IHAVEOPT);
	wire_put_u32(h + 8, NBD_OPT_GO);
	wire_put_u32(h + 12, 0x7fffffffu);
	write_full(fd, h, sizeof(h));
	cr_assert_eq(read_opt_reply(fd, NBD_OPT_GO, d, sizeof(d), &len), NBD_REP_ERR_TOO_BIG);
	expect_closed(fd);
	daemon_alive();
}

Test(nbd, bad_requests_get_errors_and_the_export_goes_on)
{
	uint8_t buf[4096];
	int fd;

	make_pool();
	COF_OK(NULL, "create -V 1M tank/r");
	fd = raw_connect();
	cr_assert_eq(raw_go(fd, "tank/r"), 1u << 20);
	/* past the end, across the end, a zero length, an unknown command and flag */
	send_req(fd, NBD_CMD_READ, 0, 1, 1u << 20, 512);
	cr_assert_eq(read_simple(fd, 1), NBD_EINVAL);
	send_req(fd, NBD_CMD_READ, 0, 2, (1u << 20) - 512, 1024);
	cr_assert_eq(read_simple(fd, 2), NBD_EINVAL);
	send_req(fd, NBD_CMD_READ, 0, 3, 0, 0);
	cr_assert_eq(read_simple(fd, 3), NBD_EINVAL);
	send_req(fd, 99, 0, 4, 0, 512);
	cr_assert_eq(read_simple(fd, 4), NBD_EINVAL);
	send_req(fd, NBD_CMD_READ, 0x8000, 5, 0, 512);
	cr_assert_eq(read_simple(fd, 5), NBD_EINVAL);
	send_req(fd, NBD_CMD_TRIM, 0, 6, UINT64_MAX - 10, 100);
	cr_assert_eq(read_simple(fd, 6), NBD_EINVAL);
	/* a write past the end: its data is read and dropped, ENOSPC */
	send_req(fd, NBD_CMD_WRITE, 0, 7, (1u << 20) - 100, 4096);
	memset(buf, 0xee, sizeof(buf));
	write_full(fd, buf, sizeof(buf));
	cr_assert_eq(read_simple(fd, 7), NBD_ENOSPC);
	/* BLOCK_STATUS without a negotiated context */
	send_req(fd, NBD_CMD_BLOCK_STATUS, 0, 8, 0, 4096);
	cr_assert_eq(read_simple(fd, 8), NBD_EINVAL);
	/* still serving: an unaligned write and its read back */
	send_req(fd, NBD_CMD_WRITE, NBD_CMD_FLAG_FUA, 9, 1001, 3000);
	write_full(fd, buf, 3000);
	cr_assert_eq(read_simple(fd, 9), 0);
	send_req(fd, NBD_CMD_READ, 0, 10, 1001, 3000);
	cr_assert_eq(read_simple(fd, 10), 0);
	cr_assert_eq(read_full(fd, buf + 1000, 3000), 0);
	for (int i = 0; i < 3000; i++)
		cr_assert_eq(buf[1000 + i], 0xee, "byte %d", i);
	/* a write over the maximum block: EOVERFLOW, then closed (its data is never read) */
	send_req(fd, NBD_CMD_WRITE, 0, 11, 0, 0x7fffffffu);
	cr_assert_eq(read_simple(fd, 11), NBD_EOVERFLOW);
	expect_closed(fd);
	/* and a request without its magic closes too */
	fd = raw_connect();
	raw_go(fd, "tank/r");
	write_full(fd, "not a request at all, not at all", 28);
	expect_closed(fd);
	daemon_alive();
}

Test(nbd, a_client_that_sends_and_never_reads_holds_only_itself)
{
	unsigned sent = 0;
	int fd, fl, other;

	make_pool();
	COF_OK(NULL, "create -V 64M tank/flood");
	fd = raw_connect();
	raw_go(fd, "tank/flood");
	fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	/* 1 MiB reads until the daemon stops taking them: its reply queue is bounded */
	for (;;) {
		uint8_t q[NBD_REQ_SIZE];
		ssize_t w;

		wire_put_u32(q, NBD_REQUEST_MAGIC);
		wire_put_u16(q + 4, 0);
		wire_put_u16(q + 6, NBD_CMD_READ);
		wire_put_u64(q + 8, sent);
		wire_put_u64(q + 16, (uint64_t)(sent % 64) << 20);
		wire_put_u32(q + 24, 1u << 20);
		w = send(fd, q, sizeof(q), MSG_NOSIGNAL);
		if (w < 0 && errno == EAGAIN) {
			/* the socket is full: once the daemon has stopped reading it stays so */
			struct pollfd p = { .fd = fd, .events = POLLOUT };

			if (poll(&p, 1, 3000) == 0)
				break;
			continue;
		}
		cr_assert_eq(w, (ssize_t)sizeof(q), "send: %s", strerror(errno));
		sent++;
		cr_assert_lt(sent, 1u << 20, "the daemon read requests without bound");
	}
	cr_log_info("requests sent before the daemon stopped reading: %u", sent);
	/* the daemon serves others meanwhile */
	daemon_alive();
	other = raw_connect();
	raw_go(other, "tank/flood");
	send_req(other, NBD_CMD_FLUSH, 0, 1, 0, 0);
	cr_assert_eq(read_simple(other, 1), 0);
	close(other);
	close(fd);
	daemon_alive();
}

/*
 * Replies a client leaves unread fill its socket: the daemon writes what
 * fits at once (with every other connection's, in one system call) and the
 * rest later. Each must still arrive whole, with its own bytes.
 */
Test(nbd, replies_held_back_by_a_full_socket_arrive_whole_with_their_bytes)
{
	enum { N = 48, LEN = 256 << 10, VOL = 8 << 20 };
	static uint8_t want[VOL], got[LEN];
	char in[PATH_MAX];
	FILE *f;
	int fd;

	make_pool();
	COF_OK(NULL, "create -V 8M tank/late");
	tdaemon_random_file(&td, "in", VOL, in, sizeof(in));
	COF_OK(in, "write tank/late");
	f = fopen(in, "rb");
	cr_assert_not_null(f);
	cr_assert_eq(fread(want, 1, VOL, f), (size_t)VOL);
	fclose(f);
	fd = raw_connect();
	raw_go(fd, "tank/late");
	/* 12 MiB of replies asked for before one is read: far more than a socket holds */
	for (uint64_t i = 0; i < N; i++)
		send_req(fd, NBD_CMD_READ, 0, i, (i * 7 % (VOL / LEN)) * LEN, LEN);
	for (int i = 0; i < N; i++) {
		uint8_t r[NBD_SIMPLE_REPLY_SIZE];
		uint64_t cookie;

		cr_assert_eq(read_full(fd, r, sizeof(r)), 0, "reply %d of %d missing", i, N);
		cr_assert_eq(wire_get_u32(r), NBD_SIMPLE_REPLY_MAGIC, "reply %d: not a reply", i);
		cr_assert_eq(wire_get_u32(r + 4), 0);
		cookie = wire_get_u64(r + 8);
		cr_assert_lt(cookie, (uint64_t)N);
		cr_assert_eq(read_full(fd, got, LEN), 0);
		cr_assert(memcmp(got, want + (cookie * 7 % (VOL / LEN)) * LEN, LEN) == 0,
			  "reply to request %llu has other bytes", (unsigned long long)cookie);
	}
	close(fd);
	daemon_alive();
}

Test(nbd, connections_past_the_per_uid_limit_are_closed)
{
	int fds[24], fd;
	double end;

	for (int i = 0; i < 24; i++) {
		fds[i] = raw_connect();
		greeting(fds[i]);
	}
	/* the 25th of this uid gets no greeting */
	fd = raw_connect();
	expect_closed(fd);
	for (int i = 0; i < 24; i++)
		close(fds[i]);
	/* the slots come back once the daemon has seen the closes */
	end = tdaemon_deadline(TDAEMON_WAIT_S);
	while (cof(NULL, "version") != 0 && tdaemon_poll(end))
		;
	daemon_alive();
}

/* One structured chunk's header: its flags, type and length, for @cookie. */
static void read_chunk(int fd, uint64_t cookie, uint16_t *flags, uint16_t *type, uint32_t *len)
{
	uint8_t h[NBD_CHUNK_HDR];

	cr_assert_eq(read_full(fd, h, sizeof(h)), 0, "no chunk");
	cr_assert_eq(wire_get_u32(h), NBD_STRUCTURED_REPLY_MAGIC);
	cr_assert_eq(wire_get_u64(h + 8), cookie);
	*flags = wire_get_u16(h + 4);
	*type = wire_get_u16(h + 6);
	*len = wire_get_u32(h + 16);
}

/*
 * A 64 KiB volume @ds of 8 KiB records whose first record alone is written,
 * exported on a raw connection (raw_go_with's @structured). @return its fd
 */
static int raw_one_record(const char *ds, int structured)
{
	char in[PATH_MAX];
	int fd;

	make_pool();
	COF_OK(NULL, "create -V 64K -o recordsize=8K %s", ds);
	tdaemon_random_file(&td, "in", 8192, in, sizeof(in));
	COF_OK(in, "write %s", ds);
	fd = raw_connect();
	raw_go_with(fd, ds, structured);
	return fd;
}

/* NBD_CMD_FLAG_DF: a read across data and a hole is one data chunk, as the client asked. */
Test(nbd, a_read_that_may_not_fragment_is_one_chunk)
{
	uint8_t buf[16384 + 12];
	uint16_t flags, type;
	uint32_t len;
	int fd = raw_one_record("tank/df", 1);

	send_req(fd, NBD_CMD_READ, NBD_CMD_FLAG_DF, 7, 0, 16384);
	read_chunk(fd, 7, &flags, &type, &len);
	cr_assert_eq(type, NBD_REPLY_TYPE_OFFSET_DATA);
	cr_assert_eq(flags, NBD_REPLY_FLAG_DONE);
	cr_assert_eq(len, 8 + 16384);
	cr_assert_eq(read_full(fd, buf, len), 0);
	/* without it: the data, then the hole */
	send_req(fd, NBD_CMD_READ, 0, 8, 0, 16384);
	read_chunk(fd, 8, &flags, &type, &len);
	cr_assert_eq(type, NBD_REPLY_TYPE_OFFSET_DATA);
	cr_assert_eq(flags, 0);
	cr_assert_eq(len, 8 + 8192);
	cr_assert_eq(read_full(fd, buf, len), 0);
	read_chunk(fd, 8, &flags, &type, &len);
	cr_assert_eq(type, NBD_REPLY_TYPE_OFFSET_HOLE);
	cr_assert_eq(flags, NBD_REPLY_FLAG_DONE);
	cr_assert_eq(len, 12);
	cr_assert_eq(read_full(fd, buf, len), 0);
	cr_assert_eq(wire_get_u64(buf), 8192);
	cr_assert_eq(wire_get_u32(buf + 8), 8192);
	close(fd);
}

/* BLOCK_STATUS of @len bytes at @off: its descriptors into @d. @return how many */
static uint32_t block_status(int fd, uint64_t cookie, uint16_t flags, uint64_t off, uint32_t len,
			     uint8_t *d, size_t cap)
{
	uint16_t cflags, type;
	uint32_t n;

	send_req(fd, NBD_CMD_BLOCK_STATUS, flags, cookie, off, len);
	read_chunk(fd, cookie, &cflags, &type, &n);
	cr_assert_eq(type, NBD_REPLY_TYPE_BLOCK_STATUS);
	cr_assert_eq(cflags, NBD_REPLY_FLAG_DONE);
	cr_assert(n >= 4 && n - 4 <= cap && (n - 4) % 8 == 0, "a chunk of %u bytes", n);
	cr_assert_eq(read_full(fd, d, 4), 0);
	cr_assert_eq(wire_get_u32(d), NBD_META_ALLOCATION_ID);
	cr_assert_eq(read_full(fd, d, n - 4), 0);
	return (n - 4) / 8;
}

/*
 * BLOCK_STATUS is the dispatcher's MAP: a descriptor per run of the range,
 * one with REQ_ONE, counted (maps) and logged like every other command.
 */
Test(nbd, block_status_is_a_map_counted_and_logged)
{
	const uint32_t hole = NBD_STATE_HOLE | NBD_STATE_ZERO;
	uint8_t d[8 * 8];
	json_t *j;
	int fd = raw_one_record("tank/bs", RAW_ALLOC);

	/* the data, then the hole */
	cr_assert_eq(block_status(fd, 1, 0, 0, 65536, d, sizeof(d)), 2);
	cr_assert(wire_get_u32(d) == 8192 && wire_get_u32(d + 4) == 0);
	cr_assert(wire_get_u32(d + 8) == 65536 - 8192 && wire_get_u32(d + 12) == hole);
	/* REQ_ONE: one descriptor */
	cr_assert_eq(block_status(fd, 2, NBD_CMD_FLAG_REQ_ONE, 0, 65536, d, sizeof(d)), 1);
	cr_assert(wire_get_u32(d) == 8192 && wire_get_u32(d + 4) == 0);
	/* the hole alone */
	cr_assert_eq(block_status(fd, 3, 0, 16384, 8192, d, sizeof(d)), 1);
	cr_assert(wire_get_u32(d) == 8192 && wire_get_u32(d + 4) == hole);
	close(fd);
	j = tdaemon_coffer_json(&td, "stats --json-int");
	cr_assert_eq(json_integer_value(json_object_get(json_object_get(j, "io"), "maps")), 3);
	json_decref(j);
	cr_assert(strstr(tdaemon_log(&td), ": map handle 0 at 16384+8192"),
		  "not in the debug log:\n%s", tdaemon_log(&td));
}
