/* SPDX-License-Identifier: MIT */
/*
 * What a pool status reply means for its operator: the status: and action:
 * lines of zpool status, decided on the client from the reply as libzfs's
 * zpool_get_status decides them from the config, so the daemon's reply
 * stays facts and the advice lives in one place.
 *
 * The checks run from the gravest down and the first that holds speaks, as
 * zpool status names one problem: a pool that did not open, writes
 * suspended, a vdev with no side serving, records lost, a LUN of no
 * mirror faulted, a mirror side gone or out of service, a resilver under
 * way, errors repaired from another copy, metadata or key file copies
 * repaired at import, frees the allocator refused. A pool none of them
 * holds for is healthy (pool status -x leaves it out).
 */
#include <stdio.h>
#include <string.h>

#include "pool_health.h"

static const char *str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

static long long num(json_t *o, const char *key)
{
	return (long long)json_integer_value(json_object_get(o, key));
}

/* The first LUN of @p in state @state (NULL: none). */
static json_t *lun_in(json_t *p, const char *state)
{
	json_t *l;
	size_t i;

	json_array_foreach(json_object_get(p, "luns"), i, l)
		if (!strcmp(str(l, "state"), state))
			return l;
	return NULL;
}

/* Is LUN @l of @p a side of a mirror (its vdev has more than one LUN)? */
static int in_mirror(json_t *p, json_t *l)
{
	json_t *v, *k;
	size_t i, j;
	long long vdev = num(l, "vdev");

	json_array_foreach(json_object_get(p, "vdevs"), i, v) {
		json_array_foreach(json_object_get(v, "luns"), j, k) {
			if (json_integer_value(k) == vdev)
				return json_array_size(json_object_get(v, "luns")) > 1;
		}
	}
	return 0;
}

static long long lun_sum(json_t *p, const char *key)
{
	json_t *l;
	size_t i;
	long long n = 0;

	json_array_foreach(json_object_get(p, "luns"), i, l)
		n += num(l, key);
	return n;
}

static int say(struct pool_health *h, const char *status, const char *action)
{
	snprintf(h->status, sizeof(h->status), "%s", status);
	snprintf(h->action, sizeof(h->action), "%s", action);
	return 1;
}

int pool_health(json_t *p, struct pool_health *h)
{
	const char *name = str(p, "name"), *state = str(p, "state");
	char s[1024], a[1024];
	json_t *l, *v;
	size_t i;

	memset(h, 0, sizeof(*h));
	if (!json_object_get(p, "guid") && json_object_get(p, "error")) {
		snprintf(a, sizeof(a),
			 "Fix or restore the LUN it names, then run 'coffer pool import %s'.", name);
		return say(h, "The pool could not be opened, so none of its datasets serve.", a);
	}
	if (!strcmp(state, "SUSPENDED")) {
		snprintf(s, sizeof(s), "Writes to the pool are suspended: %s", str(p, "error"));
		if (!strcmp(str(p, "suspended"), "metadata"))
			snprintf(a, sizeof(a),
				 "Free space where the daemon keeps its state, then run 'coffer "
				 "flush' on a dataset of %s: the first commit that succeeds lifts it.",
				 name);
		else
			snprintf(a, sizeof(a),
				 "Export and import %s; check what the datasets wrote last, and "
				 "restore it from a snapshot or backup if it is gone.",
				 name);
		return say(h, s, a);
	}
	json_array_foreach(json_object_get(p, "vdevs"), i, v) {
		/* a LUN of no mirror is the check after the next */
		if (strcmp(str(v, "state"), "FAULTED") || !json_object_get(v, "name"))
			continue;
		snprintf(s, sizeof(s),
			 "No side of %s can serve: the records on it cannot be read or written.",
			 str(v, "name"));
		snprintf(a, sizeof(a),
			 "Bring a side back (restore its file, then 'coffer pool online %s LUN'); "
			 "what cannot come back must be restored from a backup.",
			 name);
		return say(h, s, a);
	}
	if (num(p, "data_errors")) {
		snprintf(s, sizeof(s),
			 "%lld records have errors no copy could repair: what they held is lost.",
			 num(p, "data_errors"));
		snprintf(a, sizeof(a),
			 "Restore the records 'coffer pool status -v %s' names from a snapshot or "
			 "backup, then run 'coffer pool clear %s'.",
			 name, name);
		return say(h, s, a);
	}
	json_array_foreach(json_object_get(p, "luns"), i, l) {
		if (in_mirror(p, l) || !strcmp(str(l, "state"), "ONLINE") ||
		    !strcmp(str(l, "state"), "DETACHED"))
			continue;
		snprintf(s, sizeof(s),
			 "LUN %s is %s and in no mirror: the records on it cannot be read, and no "
			 "new data goes to it.",
			 str(l, "path"), str(l, "state"));
		snprintf(a, sizeof(a),
			 "Find out why (the daemon's log names the errors), fix or restore the LUN, "
			 "then run 'coffer pool clear %s'.",
			 name);
		return say(h, s, a);
	}
	if ((l = lun_in(p, "OFFLINE"))) {
		snprintf(s, sizeof(s),
			 "LUN %s was taken offline; its mirror serves from the other sides, with "
			 "less redundancy.",
			 str(l, "path"));
		snprintf(a, sizeof(a),
			 "Bring it online with 'coffer pool online %s %s', or replace it with "
			 "'coffer pool replace'.",
			 name, str(l, "path"));
		return say(h, s, a);
	}
	if ((l = lun_in(p, "UNAVAIL")) || (l = lun_in(p, "FAULTED"))) {
		snprintf(s, sizeof(s),
			 "LUN %s is %s; its mirror serves from the other sides, with less "
			 "redundancy.",
			 str(l, "path"), str(l, "state"));
		snprintf(a, sizeof(a),
			 "Restore the LUN and run 'coffer pool online %s %s', or replace it with "
			 "'coffer pool replace %s %s NEW'.",
			 name, str(l, "path"), name, str(l, "path"));
		return say(h, s, a);
	}
	if (lun_in(p, "RESILVERING")) {
		snprintf(a, sizeof(a), "Wait for the resilver to end ('coffer pool status %s').",
			 name);
		return say(h, "A mirror side is being resilvered: it gets the writes it lacks.", a);
	}
	/* a scrub's repairs are counted on the LUNs too, and clear resets them */
	if (lun_sum(p, "read_errors") + lun_sum(p, "write_errors") + lun_sum(p, "cksum_errors") +
		    lun_sum(p, "repaired") >
	    0) {
		snprintf(a, sizeof(a),
			 "Find out whether the LUN needs replacing (the daemon's log and the "
			 "counts above), then clear the errors with 'coffer pool clear %s', or "
			 "replace it with 'coffer pool replace'.",
			 name);
		return say(h,
			   "A LUN had errors, and each was repaired from another copy: the data "
			   "is whole.",
			   a);
	}
	if (json_object_get(p, "metadata") || json_object_get(p, "key_file")) {
		snprintf(s, sizeof(s), "The import repaired copies of the pool's %s: %s",
			 json_object_get(p, "metadata") ? "metadata" : "key file",
			 json_object_get(p, "metadata") ? str(p, "metadata") : str(p, "key_file"));
		snprintf(a, sizeof(a),
			 "Check the state directory's disk; run 'coffer pool scrub %s' to read "
			 "every record.",
			 name);
		return say(h, s, a);
	}
	if (num(p, "bad_frees")) {
		snprintf(s, sizeof(s), "The allocator refused %lld double frees since the import.",
			 num(p, "bad_frees"));
		snprintf(a, sizeof(a), "Run 'coffer pool check %s' and keep its output for a report.",
			 name);
		return say(h, s, a);
	}
	return 0;
}
