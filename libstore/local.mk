# SPDX-License-Identifier: MIT
noinst_LIBRARIES += libstore/libstore.a
# its own headers only: a file includes from its own folder
libstore_libstore_a_CPPFLAGS = $(AM_CPPFLAGS)
libstore_libstore_a_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS) $(LMDB_CFLAGS) $(ZSTD_CFLAGS) $(XXHASH_CFLAGS) $(URING_CFLAGS) $(RADOS_CFLAGS)
libstore_libstore_a_SOURCES = \
	%D%/store.h %D%/store_impl.h %D%/format.h \
	%D%/errors.c %D%/pool_error.c %D%/statedir.c %D%/stor_assert.h %D%/size.c %D%/name.c %D%/typo.c %D%/hex.c \
	%D%/lun.h %D%/lun_impl.h %D%/lun.c %D%/lun_rados.c %D%/lun_path.c %D%/lunset.c %D%/mirror.c %D%/scrub.c %D%/resilver.c %D%/errlog.c %D%/scan.c \
	%D%/hostid.c %D%/pool_rename.c \
	%D%/meta.h %D%/meta_lmdb.c %D%/metalog.h %D%/metalog.c \
	%D%/alloc.h %D%/alloc.c %D%/array.h %D%/space.c \
	%D%/pool.c \
	%D%/props.h %D%/props.c %D%/prop_names.c \
	%D%/dataset.c \
	%D%/bp.h %D%/bp.c %D%/txg.h %D%/txg.c %D%/hash.h \
	%D%/bpmac.h %D%/bpmac.c %D%/children.h %D%/children.c %D%/verify.c \
	%D%/record.c %D%/map.c %D%/snapshot.h %D%/snapshot.c %D%/clone.c \
	%D%/stream.h %D%/stream.c %D%/send.c %D%/recv.c \
	%D%/crypt.h %D%/crypt_backend.h %D%/crypt.c %D%/crypt_openssl.c \
	%D%/keys.h %D%/keys.c %D%/dskeys.c %D%/keyfile.c \
	%D%/compress.h %D%/compress.c \
	%D%/stats.h %D%/stats.c
libstore_libstore_a_SOURCES += %D%/cache.h %D%/cache.c
if HAVE_IPSEC_MB
libstore_libstore_a_SOURCES += %D%/crypt_ipsecmb.c
endif
EXTRA_DIST += %D%/crypt_ipsecmb.c
