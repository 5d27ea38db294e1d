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
#include <stdarg.h>
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

/* Fill @h from one format: the status, a newline, the action. @return 1 */
__attribute__((format(printf, 2, 3))) static int say(struct pool_health *h, const char *fmt, ...)
{
	char both[sizeof(h->status) + sizeof(h->action)], *nl;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(both, sizeof(both), fmt, ap);
	va_end(ap);
	nl = strchr(both, '\n');
	if (nl)
		*nl++ = '\0';
	/* each line is cut at its field's size */
	snprintf(h->status, sizeof(h->status), "%.*s", (int)sizeof(h->status) - 1, both);
	snprintf(h->action, sizeof(h->action), "%.*s", (int)sizeof(h->action) - 1, nl ? nl : "");
	return 1;
}

int pool_health(json_t *p, struct pool_health *h)
{
	const char *name = str(p, "name"), *state = str(p, "state");
	json_t *l, *v;
	size_t i;

	memset(h, 0, sizeof(*h));
	if (!json_object_get(p, "guid") && json_object_get(p, "error"))
		return say(h,
			   "The pool could not be opened, so none of its datasets serve.\n"
			   "Fix or restore the LUN it names, then run 'coffer pool import %s'.",
			   name);
	if (!strcmp(state, "SUSPENDED")) {
		if (!strcmp(str(p, "suspended"), "metadata"))
			return say(h,
				   "Writes to the pool are suspended: %s\n"
				   "Free space where the daemon keeps its state, then run 'coffer "
				   "flush' on a dataset of %s: the first commit that succeeds lifts it.",
				   str(p, "error"), name);
		if (!strcmp(str(p, "suspended"), "fenced"))
			return say(h,
				   "Another host has taken the pool over: %s\n"
				   "Run 'coffer pool export %s' here; what this host wrote after it "
				   "was fenced is not in the pool.",
				   str(p, "error"), name);
		return say(h,
			   "Writes to the pool are suspended: %s\n"
			   "Export and import %s; check what the datasets wrote last, and restore "
			   "it from a snapshot or backup if it is gone.",
			   str(p, "error"), name);
	}
	json_array_foreach(json_object_get(p, "vdevs"), i, v) {
		/* a LUN of no mirror is the check after the next */
		if (strcmp(str(v, "state"), "FAULTED") || !json_object_get(v, "name"))
			continue;
		return say(h,
			   "No side of %s can serve: the records on it cannot be read or written.\n"
			   "Bring a side back (restore its file, then 'coffer pool online %s LUN'); "
			   "what cannot come back must be restored from a backup.",
			   str(v, "name"), name);
	}
	if (num(p, "data_errors"))
		return say(h,
			   "%lld records have errors no copy could repair: what they held is lost.\n"
			   "Restore the records 'coffer pool status -v %s' names from a snapshot or "
			   "backup, then run 'coffer pool clear %s'.",
			   num(p, "data_errors"), name, name);
	json_array_foreach(json_object_get(p, "luns"), i, l) {
		if (in_mirror(p, l) || !strcmp(str(l, "state"), "ONLINE") ||
		    !strcmp(str(l, "state"), "DETACHED"))
			continue;
		return say(h,
			   "LUN %s is %s and in no mirror: the records on it cannot be read, and no "
			   "new data goes to it.\n"
			   "Find out why (the daemon's log names the errors), fix or restore the LUN, "
			   "then run 'coffer pool clear %s'.",
			   str(l, "path"), str(l, "state"), name);
	}
	if ((l = lun_in(p, "OFFLINE")))
		return say(h,
			   "LUN %s was taken offline; its mirror serves from the other sides, with "
			   "less redundancy.\n"
			   "Bring it online with 'coffer pool online %s %s', or replace it with "
			   "'coffer pool replace'.",
			   str(l, "path"), name, str(l, "path"));
	if ((l = lun_in(p, "UNAVAIL")) || (l = lun_in(p, "FAULTED")))
		return say(h,
			   "LUN %s is %s; its mirror serves from the other sides, with less "
			   "redundancy.\n"
			   "Restore the LUN and run 'coffer pool online %s %s', or replace it with "
			   "'coffer pool replace %s %s NEW'.",
			   str(l, "path"), str(l, "state"), name, str(l, "path"), name,
			   str(l, "path"));
	if (lun_in(p, "RESILVERING"))
		return say(h,
			   "A mirror side is being resilvered: it gets the writes it lacks.\n"
			   "Wait for the resilver to end ('coffer pool status %s').",
			   name);
	/* a scrub's repairs are counted on the LUNs too, and clear resets them */
	if (lun_sum(p, "read_errors") + lun_sum(p, "write_errors") + lun_sum(p, "cksum_errors") +
		    lun_sum(p, "repaired") >
	    0)
		return say(h,
			   "A LUN had errors, and each was repaired from another copy: the data is "
			   "whole.\n"
			   "Find out whether the LUN needs replacing (the daemon's log and the counts "
			   "above), then clear the errors with 'coffer pool clear %s', or replace it "
			   "with 'coffer pool replace'.",
			   name);
	if (json_object_get(p, "metadata") || json_object_get(p, "key_file"))
		return say(h,
			   "The import repaired copies of the pool's %s: %s\n"
			   "Check the state directory's disk; run 'coffer pool scrub %s' to read "
			   "every record.",
			   json_object_get(p, "metadata") ? "metadata" : "key file",
			   json_object_get(p, "metadata") ? str(p, "metadata") : str(p, "key_file"),
			   name);
	if (num(p, "bad_frees"))
		return say(h,
			   "The allocator refused %lld double frees since the import.\n"
			   "Run 'coffer pool check %s' and keep its output for a report.",
			   num(p, "bad_frees"), name);
	return 0;
}
