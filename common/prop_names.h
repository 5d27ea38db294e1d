/* SPDX-License-Identifier: MIT */
/* The dataset property table: names, flags, defaults, and words for help and refusals. */
#ifndef COFFER_PROP_NAMES_H
#define COFFER_PROP_NAMES_H

#include <stddef.h>

#define PROP_INHERIT 0x1u  /* children inherit the value unless set locally */
#define PROP_READONLY 0x2u /* computed; never set */
#define PROP_CREATE 0x4u   /* set at creation only */
#define PROP_KEY 0x8u      /* changed by change-key only, on an encryption root */

#define PROPS_XX(XX)                                                                       \
	XX(TYPE, "type", PROP_READONLY, "volume")                                          \
	XX(GUID, "guid", PROP_READONLY, NULL)                                              \
	XX(CREATETXG, "createtxg", PROP_READONLY, NULL)                                    \
	XX(CREATION, "creation", PROP_READONLY, NULL)                                      \
	XX(VOLSIZE, "volsize", 0, NULL)                                                    \
	XX(RECORDSIZE, "recordsize", PROP_READONLY, NULL)                                  \
	XX(REFRESERVATION, "refreservation", 0, "none")                                    \
	XX(RESERVATION, "reservation", 0, "none")                                          \
	XX(USED, "used", PROP_READONLY, NULL)                                              \
	XX(AVAILABLE, "available", PROP_READONLY, NULL)                                    \
	XX(REFERENCED, "referenced", PROP_READONLY, NULL)                                  \
	XX(USEDBYDATASET, "usedbydataset", PROP_READONLY, NULL)                            \
	XX(USEDBYCHILDREN, "usedbychildren", PROP_READONLY, NULL)                          \
	XX(USEDBYREFRESERVATION, "usedbyrefreservation", PROP_READONLY, NULL)              \
	XX(USEDBYSNAPSHOTS, "usedbysnapshots", PROP_READONLY, NULL)                        \
	XX(WRITTEN, "written", PROP_READONLY, NULL)                                        \
	XX(LOGICALUSED, "logicalused", PROP_READONLY, NULL)                                \
	XX(COMPRESSRATIO, "compressratio", PROP_READONLY, NULL)                            \
	XX(COMPRESSION, "compression", PROP_INHERIT, "off")                                \
	XX(CHECKSUM, "checksum", PROP_INHERIT, "on")                                       \
	XX(SYNC, "sync", PROP_INHERIT, "standard")                                         \
	XX(PRIMARYCACHE, "primarycache", PROP_INHERIT, "all")                              \
	XX(OWNER, "owner", PROP_INHERIT, "-")                                              \
	XX(ENCRYPTION, "encryption", PROP_INHERIT | PROP_CREATE, "off")                    \
	XX(KEYFORMAT, "keyformat", PROP_INHERIT | PROP_CREATE | PROP_KEY, "none")          \
	XX(KEYLOCATION, "keylocation", PROP_INHERIT | PROP_KEY, "none")                    \
	XX(PBKDF2ITERS, "pbkdf2iters", PROP_INHERIT | PROP_CREATE | PROP_KEY, "0")         \
	XX(ENCRYPTIONROOT, "encryptionroot", PROP_READONLY, "-")                           \
	XX(KEYSTATUS, "keystatus", PROP_READONLY, "-")                                     \
	XX(REKEYSTATUS, "rekeystatus", PROP_READONLY, "-")                                 \
	XX(ORIGIN, "origin", PROP_READONLY, "-")                                           \
	XX(RECEIVE_RESUME_TOKEN, "receive_resume_token", PROP_READONLY, "-")

enum prop_id {
#define XX(id, name, flags, def) PROP_##id,
	PROPS_XX(XX)
#undef XX
	PROP_COUNT
};

struct prop_def {
	const char *name;
	unsigned flags;
	const char *def;
};

extern const struct prop_def prop_table[PROP_COUNT];

/** @return the id of property @name, or -1 */
int prop_lookup(const char *name);
/** prop_lookup() for a name a person gave: when it is none, the reason (a
 *  ZFS property coffer lacks, or the name it is a typo of) is written to @why. */
int prop_find(const char *name, char *why, size_t whylen);
/** What property @id takes, in words ("one of on | off"); NULL if it is not set by hand. */
const char *prop_values(int id);

/*
 * User properties, as zfs's: a name with a colon (module:property, e.g.
 * com.example:owner) of lowercase letters, digits and "-_.:", at most
 * PROP_USER_NAME_MAX bytes; a value of at most PROP_USER_VALUE_MAX bytes.
 */
#define PROP_USER_NAME_MAX 255
#define PROP_USER_VALUE_MAX 8191

/** Is @name a user property's name: it has a colon (it may still break the rule). */
int prop_is_user(const char *name);
/** 0 if @name is a valid user property name, else -1 with the reason in @why. */
int prop_user_name_check(const char *name, char *why, size_t whylen);
/** 0 if @value may be a user property's value (length, no control bytes), else -1 and @why. */
int prop_user_value_check(const char *value, char *why, size_t whylen);

#endif
