/* SPDX-License-Identifier: MIT */
/*
 * User properties (module:property, as zfs's): strings an operator hangs
 * on a dataset for his own tools, inherited down the tree unless set
 * locally, meaning nothing to coffer. The name rule and the bounds are
 * common/prop_names.c's, shared with the client.
 *
 * They live in the dataset's record, after its creation time: u16 n |
 * n x (u16 len | name | u16 len | value), sorted by name. The record is
 * unkeyed metadata (the MACs cover block pointers and the lists of
 * encrypted children, the wrapped keys cover GUID and crypto parameters),
 * so a user property of an encrypted dataset is set without its key and
 * changes nothing that is authenticated; like compression or owner, it is
 * only as trustworthy as the metadata. Nothing coffer decides reads them.
 *
 * A dataset's user properties together stay under UPROPS_BYTES_MAX, so a
 * record stays small enough for every listing and the metadata log.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/pool_error.h"
#include "base/stor_assert.h"
#include "ds/dataset.h"
#include "ds/userprops.h"
#include "prop_names.h"
#include "store.h"

#define UPROPS_BYTES_MAX (256u * 1024)

void uprops_free(struct stor_ds *ds)
{
	for (size_t i = 0; i < ds->nuprops; i++) {
		free(ds->uprops[i].name);
		free(ds->uprops[i].value);
	}
	free(ds->uprops);
	ds->uprops = NULL;
	ds->nuprops = 0;
}

size_t uprops_record_len(const struct stor_ds *ds)
{
	size_t n = 2;

	for (size_t i = 0; i < ds->nuprops; i++)
		n += 4 + strlen(ds->uprops[i].name) + strlen(ds->uprops[i].value);
	return n;
}

void uprops_record(const struct stor_ds *ds, uint8_t **w)
{
	put_u16(w, (uint16_t)ds->nuprops);
	for (size_t i = 0; i < ds->nuprops; i++) {
		size_t nl = strlen(ds->uprops[i].name), vl = strlen(ds->uprops[i].value);

		put_u16(w, (uint16_t)nl);
		put_bytes(w, ds->uprops[i].name, nl);
		put_u16(w, (uint16_t)vl);
		put_bytes(w, ds->uprops[i].value, vl);
	}
}

/* A string of u16 length at *@r, checked against @max; NULL if it does not fit. */
static char *get_str(const uint8_t **r, const uint8_t *end, size_t max, int *nomem)
{
	uint16_t n;
	char *s;

	if (end - *r < 2 || (n = get_u16(r)) > max || end - *r < n || memchr(*r, 0, n))
		return NULL;
	s = malloc((size_t)n + 1);
	if (!s) {
		*nomem = 1;
		return NULL;
	}
	get_bytes(r, s, n);
	s[n] = '\0';
	return s;
}

int uprops_parse(struct stor_ds *ds, const uint8_t **r, const uint8_t *end)
{
	char why[256];
	uint16_t n;
	int nomem = 0;

	if (end - *r < 2)
		return STOR_ECORRUPT;
	n = get_u16(r);
	ds->uprops = n ? calloc(n, sizeof(*ds->uprops)) : NULL;
	if (n && !ds->uprops)
		return -ENOMEM;
	for (uint16_t i = 0; i < n; i++) {
		struct stor_uprop *u = &ds->uprops[i];

		u->name = get_str(r, end, PROP_USER_NAME_MAX, &nomem);
		u->value = u->name ? get_str(r, end, PROP_USER_VALUE_MAX, &nomem) : NULL;
		ds->nuprops = i + 1u;
		if (nomem)
			return -ENOMEM;
		/* what set refuses is not taken from disk either; sorted, each once */
		if (!u->value || prop_user_name_check(u->name, why, sizeof(why)) < 0 ||
		    prop_user_value_check(u->value, why, sizeof(why)) < 0 ||
		    (i && strcmp(ds->uprops[i - 1].name, u->name) >= 0))
			return STOR_ECORRUPT;
	}
	return 0;
}

static size_t find(const struct stor_ds *ds, const char *name, int *found);

const char *uprops_local(const struct stor_ds *ds, const char *name)
{
	int found;
	size_t i = find(ds, name, &found);

	return found ? ds->uprops[i].value : NULL;
}

/* The index of @name in @ds's sorted list, or where it would go (*@found 0). */
static size_t find(const struct stor_ds *ds, const char *name, int *found)
{
	size_t lo = 0, hi = ds->nuprops;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(ds->uprops[mid].name, name);

		if (c == 0) {
			*found = 1;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = 0;
	return lo;
}

int uprops_set_locked(struct stor_pool *p, struct stor_ds *ds, const char *name,
		      const char *value)
{
	struct stor_uprop *t, was = { 0 };
	char why[256], *nv = NULL, *nn = NULL;
	int found, ret;
	size_t i;

	STOR_ASSERT_HELD(&p->admin);
	i = find(ds, name, &found);
	if (prop_user_name_check(name, why, sizeof(why)) < 0 ||
	    (value && prop_user_value_check(value, why, sizeof(why)) < 0)) {
		pool_set_error("%s", why);
		return STOR_EBADPROP;
	}
	if (!value && !found)
		return 0; /* nothing local: inherited already, as zfs inherit */
	if (value && uprops_record_len(ds) + strlen(name) + strlen(value) + 4 > UPROPS_BYTES_MAX) {
		pool_set_error("%s: its user properties would pass %u KiB together", ds->name,
			       UPROPS_BYTES_MAX / 1024);
		return -E2BIG;
	}
	if (value && (!(nv = strdup(value)) || (!found && !(nn = strdup(name))))) {
		free(nv);
		return -ENOMEM;
	}
	if (value && found) {
		was = ds->uprops[i];
		ds->uprops[i].value = nv;
	} else if (value) {
		t = realloc(ds->uprops, (ds->nuprops + 1) * sizeof(*t));
		if (!t) {
			free(nv);
			free(nn);
			return -ENOMEM;
		}
		ds->uprops = t;
		memmove(&t[i + 1], &t[i], (ds->nuprops - i) * sizeof(*t));
		t[i] = (struct stor_uprop){ nn, nv };
		ds->nuprops++;
	} else {
		was = ds->uprops[i];
		memmove(&ds->uprops[i], &ds->uprops[i + 1], (ds->nuprops - i - 1) * sizeof(was));
		ds->nuprops--;
	}
	ret = ds_save(p, ds);
	if (ret == 0) {
		if (!value)
			free(was.name); /* a value replaced keeps its name */
		free(was.value);
		return 0;
	}
	/* not saved: not changed */
	if (value && found) {
		ds->uprops[i].value = was.value;
		free(nv);
	} else if (value) {
		memmove(&ds->uprops[i], &ds->uprops[i + 1], (ds->nuprops - i - 1) * sizeof(was));
		ds->nuprops--;
		free(nn);
		free(nv);
	} else {
		memmove(&ds->uprops[i + 1], &ds->uprops[i], (ds->nuprops - i) * sizeof(was));
		ds->uprops[i] = was;
		ds->nuprops++;
	}
	return ret;
}
