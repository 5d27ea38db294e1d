/* SPDX-License-Identifier: MIT */
/*
 * Who is calling: the credentials a transport learnt of its peer
 * (SO_PEERCRED, SO_PEERGROUPS, or the local user a TLS session names).
 * A plain header, so that a transport fills them in (dispatch.h) and the
 * registry judges them (registry.h) without either including the other.
 */
#ifndef COFFERD_PEER_H
#define COFFERD_PEER_H

#include <sys/types.h>

struct peer {
	uid_t uid;
	gid_t gid;
	pid_t pid;
	const gid_t *groups; /* supplementary groups (SO_PEERGROUPS) */
	int ngroups;         /* -1: the kernel did not say */
	int admin;           /* reg_is_admin(), decided once per connection */
};

#endif
