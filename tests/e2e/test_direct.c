// SPDX-License-Identifier: MIT
/*
 * E2E: reads of pools on O_DIRECT LUNs (direct_io = yes), which the daemon
 * runs on its loop's own io_uring, each request finished as its own extents
 * arrive (daemon/work.c, stor_read_start). Pipelined reads of every shape -
 * whole, partial, spanning records, several records, never written, half
 * written, out of range - over two pools, clear and two suites, on several
 * connections at once, must read back what was written; reads after writes
 * and discards see them; a SIGTERM with reads in flight stops cleanly.
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "client.h"
#include "daemon.h"
#include "store.h"

TDAEMON_FIXTURE("direct_io = yes")
static char out[65536];

TestSuite(direct, .init = setup, .fini = teardown, .timeout = 240);

#define COF_OK(...) TDAEMON_COF_OK(&td, out, NULL, __VA_ARGS__)

#define RS 8192u
#define VOL (1u << 20)
#define WRITTEN (768u << 10) /* the rest of each volume is never written */
#define NDS 4
#define NCONN 3
#define NREQ 96
#define MAXLEN (3 * RS)
#define DEADLINE_MS 60000

static const char *const names[NDS] = { "pa/c", "pa/e", "pb/c", "pb/g" };

static uint8_t pat(int ds, uint64_t off)
{
	return (uint8_t)(off * 131 + (uint64_t)ds * 17 + (off >> 13) * 7 + 1);
}

/* What @len bytes at @off of dataset @ds hold: the pattern, zeros past WRITTEN. */
static void expect(int ds, uint64_t off, uint32_t len, uint8_t *buf)
{
	for (uint32_t i = 0; i < len; i++)
		buf[i] = off + i < WRITTEN ? pat(ds, off + i) : 0;
}

static void need_o_direct(void)
{
	char probe[PATH_MAX];
	void *buf = NULL;
	int fd, ok;

	snprintf(probe, sizeof(probe), "%s/odirect-probe", td.dir);
	fd = open(probe, O_RDWR | O_CREAT | O_DIRECT, 0600);
	ok = fd >= 0 && posix_memalign(&buf, 4096, 4096) == 0;
	if (ok) {
		memset(buf, 0, 4096);
		ok = pwrite(fd, buf, 4096, 0) == 4096;
	}
	free(buf);
	if (fd >= 0)
		close(fd);
	unlink(probe);
	if (!ok)
		cr_skip_test("no O_DIRECT on %s", td.dir);
}

static void make_pools(void)
{
	uint8_t k[32];
	const char *key;

	for (int i = 0; i < 32; i++)
		k[i] = (uint8_t)(0x5a ^ i * 41);
	key = tdaemon_file(&td, "key", k, sizeof(k));
	for (int p = 0; p < 2; p++)
		COF_OK("pool create -s 64M p%c %s/p%c-l0 %s/p%c-l1", 'a' + p, td.dir, 'a' + p,
		       td.dir, 'a' + p);
	COF_OK("create -V 1M pa/c");
	COF_OK("create -V 1M -o encryption=aes-256-ccm -o keyformat=raw -o keylocation=file://%s "
	       "pa/e",
	       key);
	COF_OK("create -V 1M pb/c");
	COF_OK("create -V 1M -o encryption=aes-256-gcm -o keyformat=raw -o keylocation=file://%s "
	       "pb/g",
	       key);
}

/* Open every dataset on @c into @h and write its pattern up to WRITTEN. */
static void open_all(struct coffer_conn *c, int *h, int fill)
{
	static uint8_t buf[64 << 10];

	for (int d = 0; d < NDS; d++) {
		uint64_t volsize;
		uint32_t rs;

		h[d] = coffer_ds_open(c, names[d], &volsize, &rs);
		cr_assert_geq(h[d], 0, "open %s: %d", names[d], h[d]);
		cr_assert_eq(rs, RS);
		for (uint64_t off = 0; fill && off < WRITTEN; off += sizeof(buf)) {
			for (size_t i = 0; i < sizeof(buf); i++)
				buf[i] = pat(d, off + i);
			cr_assert_eq(coffer_write(c, h[d], off, buf, sizeof(buf)), 0, "write %s",
				     names[d]);
		}
	}
}

struct shape {
	uint64_t off;
	uint32_t len;
	int fails;
};

/* Request @i's shape: every kind in turn, at places that move with @i. */
static struct shape shape_of(int i)
{
	uint64_t r = (uint64_t)(i * 7 % 90) * RS;

	switch (i % 7) {
	case 0: return (struct shape){ r, RS, 0 };                    /* a whole record */
	case 1: return (struct shape){ r + 100, 5000, 0 };            /* inside one */
	case 2: return (struct shape){ r + RS - 192, RS, 0 };         /* across two */
	case 3: return (struct shape){ r, MAXLEN, 0 };                /* three whole */
	case 4: return (struct shape){ WRITTEN + r % (VOL - WRITTEN - RS), RS, 0 }; /* never written */
	case 5: return (struct shape){ WRITTEN - RS / 2, RS, 0 };     /* half written */
	default: return (struct shape){ VOL - RS / 2, RS, 1 };        /* past the end */
	}
}

static long long io_stat(struct coffer_conn *c, const char *key)
{
	json_t *r = NULL;
	long long v;

	cr_assert_eq(coffer_call(c, "stats", NULL, &r, NULL, 0), 0);
	v = json_integer_value(json_object_get(json_object_get(r, "io"), key));
	json_decref(r);
	return v;
}

Test(direct, pipelined_reads_of_every_shape_on_three_connections_read_back_what_was_written)
{
	static uint8_t bufs[NCONN][NREQ][MAXLEN], want[MAXLEN];
	struct coffer_conn *c[NCONN];
	int h[NCONN][NDS], got = 0;
	long long before;

	need_o_direct();
	make_pools();
	for (int k = 0; k < NCONN; k++) {
		cr_assert_eq(coffer_connect(td.sock, &c[k]), 0);
		open_all(c[k], h[k], k == 0);
	}
	before = io_stat(c[0], "ring_reads");
	/* every connection's requests in flight together */
	for (int k = 0; k < NCONN; k++) {
		for (int i = 0; i < NREQ; i++) {
			struct shape s = shape_of(i + k);

			memset(bufs[k][i], 0xee, MAXLEN);
			cr_assert_eq(coffer_submit(c[k], (uint32_t)i, COFFER_READ,
						   h[k][(i + k) % NDS], s.off, s.len, bufs[k][i]),
				     0);
		}
		cr_assert_eq(coffer_flush_out(c[k]), 0);
	}
	for (int k = 0; k < NCONN; k++) {
		for (got = 0; got < NREQ;) {
			struct coffer_completion cc[NREQ];
			int n = coffer_reap(c[k], cc, NREQ, DEADLINE_MS);

			cr_assert_gt(n, 0, "connection %d: reap %d after %d", k, n, got);
			for (int j = 0; j < n; j++) {
				int i = (int)cc[j].id, d = (i + k) % NDS;
				struct shape s = shape_of(i + k);

				cr_assert_lt(i, NREQ);
				if (s.fails) {
					cr_assert_eq(cc[j].status, STOR_ERANGE, "%s past the end: %d",
						     names[d], cc[j].status);
					continue;
				}
				cr_assert_eq(cc[j].status, 0, "%s at %llu+%u: %s", names[d],
					     (unsigned long long)s.off, s.len,
					     stor_strerror(cc[j].status));
				expect(d, s.off, s.len, want);
				cr_assert_arr_eq(bufs[k][i], want, s.len, "%s at %llu+%u", names[d],
						 (unsigned long long)s.off, s.len);
			}
			got += n;
		}
	}
	/* they went through the ring, not the workers */
	cr_assert_geq(io_stat(c[0], "ring_reads") - before, NCONN * NREQ);
	for (int k = 0; k < NCONN; k++)
		coffer_close(c[k]);
}

Test(direct, a_read_after_a_write_or_a_discard_sees_it)
{
	static uint8_t buf[RS], back[2 * RS], zeros[RS];
	struct coffer_conn *c;
	int h[NDS];

	need_o_direct();
	make_pools();
	cr_assert_eq(coffer_connect(td.sock, &c), 0);
	open_all(c, h, 1);
	for (int d = 0; d < NDS; d++) {
		memset(buf, 0xa0 + d, sizeof(buf));
		cr_assert_eq(coffer_read(c, h[d], 5 * RS, back, RS), 0);
		cr_assert_eq(coffer_write(c, h[d], 5 * RS, buf, RS), 0);
		cr_assert_eq(coffer_read(c, h[d], 5 * RS, back, RS), 0);
		cr_assert_arr_eq(back, buf, RS, "%s: the rewritten record", names[d]);
		cr_assert_eq(coffer_write(c, h[d], 7 * RS + 1000, buf, 100), 0);
		cr_assert_eq(coffer_read(c, h[d], 7 * RS, back, RS), 0);
		expect(d, 7 * RS, RS, zeros);
		memcpy(zeros + 1000, buf, 100);
		cr_assert_arr_eq(back, zeros, RS, "%s: the record written in part", names[d]);
		memset(zeros, 0, sizeof(zeros));
		cr_assert_eq(coffer_discard(c, h[d], 6 * RS, RS), 0);
		cr_assert_eq(coffer_read(c, h[d], 5 * RS, back, 2 * RS), 0);
		cr_assert_arr_eq(back, buf, RS, "%s: the record before the hole", names[d]);
		cr_assert_arr_eq(back + RS, zeros, RS, "%s: the discarded record", names[d]);
	}
	coffer_close(c);
}

Test(direct, sigterm_with_reads_in_flight_stops_cleanly)
{
	static uint8_t bufs[2][NREQ][MAXLEN];
	struct coffer_conn *c[2];
	int h[2][NDS], st;

	need_o_direct();
	make_pools();
	for (int k = 0; k < 2; k++) {
		cr_assert_eq(coffer_connect(td.sock, &c[k]), 0);
		open_all(c[k], h[k], k == 0);
	}
	for (int k = 0; k < 2; k++) {
		for (int i = 0; i < NREQ; i++)
			cr_assert_eq(coffer_submit(c[k], (uint32_t)i, COFFER_READ, h[k][i % NDS],
						   (uint64_t)(i % 90) * RS, MAXLEN, bufs[k][i]),
				     0);
		cr_assert_eq(coffer_flush_out(c[k]), 0);
	}
	cr_assert_eq(kill(td.pid, SIGTERM), 0);
	st = tdaemon_stop(&td);
	cr_assert_eq(st, 0, "cofferd exit %d:\n%s", st, tdaemon_log(&td));
	for (int k = 0; k < 2; k++)
		coffer_close(c[k]);
}
