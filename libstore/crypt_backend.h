/* SPDX-License-Identifier: MIT */
/* Interface between crypt.c and its backends (crypt_openssl.c, crypt_ipsecmb.c). */
#ifndef STOR_CRYPT_BACKEND_H
#define STOR_CRYPT_BACKEND_H
#include "crypt.h"
#endif
