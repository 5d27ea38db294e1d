/* SPDX-License-Identifier: MIT */
/*
 * Compression in the record pipeline: compressible records take less space
 * and read back identical, incompressible ones cost no more than raw, the
 * property is inherited and applies to new writes, and compression happens
 * before encryption (a compressed encrypted record round-trips a restart).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "fixture.h"

#define VOL (4u << 20)

TPOOL_FIXTURE(2, 64u << 20)
TestSuite(compress, .init = setup, .fini = teardown, .timeout = 240);

static long long prop_ll(const char *ds, const char *prop)
{
	struct stor_prop_value v;

	cr_assert_eq(stor_ds_get(tp.pool, ds, prop, &v), 0);
	return atoll(v.value);
}

static struct stor_ds *mk(const char *name, const char *const *props, size_t n,
			  const struct stor_key_material *key)
{
	struct stor_ds_opts o = { .volsize = VOL, .props = props, .nprops = n, .key = key };

	return tpool_ds_opts(&tp, name, &o);
}

static void text(uint8_t *buf, size_t len)
{
	static const char words[] = "the quick brown fox jumps over the lazy dog ";

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)words[(i * 7 / 5) % (sizeof(words) - 1)];
}

Test(compress, compressible_data_takes_less_space_and_reads_back)
{
	static const char *const z[] = { "compression=zstd" };
	uint8_t *in = malloc(VOL), *out = malloc(VOL);
	struct stor_ds *c = mk("tank/z", z, 1, NULL), *r = mk("tank/raw", NULL, 0, NULL);

	text(in, VOL);
	cr_assert_eq(stor_ds_write(c, 0, in, VOL), 0);
	cr_assert_eq(stor_ds_write(r, 0, in, VOL), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	/* 8 KiB records shrink to at best one 4 KiB sector */
	cr_assert_leq(prop_ll("tank/z", "referenced") * 2, prop_ll("tank/raw", "referenced"),
		     "compressed %lld vs raw %lld", prop_ll("tank/z", "referenced"),
		     prop_ll("tank/raw", "referenced"));
	cr_assert_eq(prop_ll("tank/z", "logicalused"), VOL);
	stor_ds_close(c);
	stor_ds_close(r);
	tpool_reopen(&tp);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/z", &c), 0);
	memset(out, 0, VOL);
	cr_assert_eq(stor_ds_read(c, 0, out, VOL), 0);
	cr_assert(memcmp(in, out, VOL) == 0, "compressed records read back different");
	/* an unaligned partial overwrite goes through decompress, merge, compress */
	memset(in + 5000, 0x5a, 10000);
	cr_assert_eq(stor_ds_write(c, 5000, in + 5000, 10000), 0);
	cr_assert_eq(stor_ds_read(c, 0, out, VOL), 0);
	cr_assert(memcmp(in, out, VOL) == 0);
	stor_ds_close(c);
	free(in);
	free(out);
}

Test(compress, incompressible_data_costs_no_more_than_raw)
{
	static const char *const z[] = { "compression=zstd-19" };
	uint8_t *in = malloc(VOL), *out = malloc(VOL);
	struct stor_ds *c = mk("tank/z", z, 1, NULL), *r = mk("tank/raw", NULL, 0, NULL);

	for (size_t i = 0; i < VOL; i += 8)
		tpat_fill(in + i, 8, i * 2654435761u, i ^ 0x5bd1e995u);
	for (size_t i = 0; i < VOL; i++)
		in[i] ^= (uint8_t)(i * 2654435761u >> 13);
	cr_assert_eq(stor_ds_write(c, 0, in, VOL), 0);
	cr_assert_eq(stor_ds_write(r, 0, in, VOL), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_eq(prop_ll("tank/z", "referenced"), prop_ll("tank/raw", "referenced"));
	cr_assert_eq(stor_ds_read(c, 0, out, VOL), 0);
	cr_assert(memcmp(in, out, VOL) == 0);
	stor_ds_close(c);
	stor_ds_close(r);
	free(in);
	free(out);
}

Test(compress, property_is_inherited_and_applies_to_new_writes)
{
	static const char *const z[] = { "compression=zstd-3" };
	struct stor_prop_value v;
	uint8_t *in = malloc(VOL);
	struct stor_ds *parent = mk("tank/p", z, 1, NULL), *child = mk("tank/p/c", NULL, 0, NULL);

	cr_assert_eq(stor_ds_get(tp.pool, "tank/p/c", "compression", &v), 0);
	cr_assert_str_eq(v.value, "zstd-3");
	cr_assert_eq(v.source, STOR_SRC_INHERITED);
	cr_assert_eq(stor_ds_set(tp.pool, "tank/p", "compression", "off"), 0);
	text(in, VOL);
	cr_assert_eq(stor_ds_write(child, 0, in, VOL), 0);
	cr_assert_eq(prop_ll("tank/p/c", "referenced"), VOL, "compression=off still compressed");
	cr_assert_eq(stor_ds_set(tp.pool, "tank/p", "compression", "zstd"), 0);
	cr_assert_eq(stor_ds_write(child, 0, in, VOL), 0);
	cr_assert_leq(prop_ll("tank/p/c", "referenced"), VOL / 2);
	cr_assert_eq(stor_ds_set(tp.pool, "tank/p", "compression", "lz4"), STOR_EBADPROP);
	stor_ds_close(parent);
	stor_ds_close(child);
	free(in);
}

Test(compress, compressed_encrypted_records_survive_a_restart)
{
	static const char *const p[] = { "compression=zstd", "encryption=aes-256-ccm",
					 "keyformat=raw" };
	uint8_t key[32], *in = malloc(VOL), *out = malloc(VOL);
	struct stor_key_material km = { key, sizeof(key) };
	struct stor_ds *ds;
	unsigned lun;
	uint64_t off;

	for (size_t i = 0; i < sizeof(key); i++)
		key[i] = (uint8_t)(0x42 + 37 * i); /* one byte repeated is refused as a key */
	ds = mk("tank/ez", p, 3, &km);
	text(in, VOL);
	cr_assert_eq(stor_ds_write(ds, 0, in, VOL), 0);
	cr_assert_eq(stor_pool_sync(tp.pool), 0);
	cr_assert_leq(prop_ll("tank/ez", "referenced"), VOL / 2);
	/* the LUNs hold neither the plaintext nor its zstd form in clear */
	cr_assert_eq(tpool_find(&tp, in, 64, &lun, &off), 0);
	stor_ds_close(ds);
	tpool_reopen(&tp);
	cr_assert_eq(stor_key_load(tp.pool, "tank/ez", &km, 0), 0);
	cr_assert_eq(stor_ds_open(tp.pool, "tank/ez", &ds), 0);
	cr_assert_eq(stor_ds_read(ds, 0, out, VOL), 0);
	cr_assert(memcmp(in, out, VOL) == 0);
	stor_ds_close(ds);
	free(in);
	free(out);
}
