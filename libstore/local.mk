# SPDX-License-Identifier: MIT
# libstore, by layer: a folder uses only its own layer and those before it
# (base, crypt, kv, dev, txg, ds, io, pool, send; tests/layers.sh checks it).
noinst_LIBRARIES += libstore/libstore.a
libstore_libstore_a_CPPFLAGS = $(AM_CPPFLAGS) $(STORE_INC)
libstore_libstore_a_CFLAGS = $(AM_CFLAGS) $(CRYPTO_CFLAGS) $(LMDB_CFLAGS) $(ZSTD_CFLAGS) $(XXHASH_CFLAGS) $(URING_CFLAGS) $(RADOS_CFLAGS)
libstore_libstore_a_SOURCES = \
	%D%/store.h %D%/pool_impl.h \
	%D%/base/pool_error.h %D%/dev/errlog.h %D%/dev/lunset.h %D%/dev/mirror.h \
	%D%/ds/clone.h %D%/ds/dataset.h %D%/ds/dskeys.h %D%/ds/keyfile.h %D%/ds/space.h \
	%D%/io/record.h %D%/kv/statedir.h %D%/pool/pool_rename.h \
	%D%/pool/resilver.h %D%/pool/scrub.h %D%/send/recv.h \
	%D%/base/events.h %D%/base/events.c \
	%D%/base/pool_error.c %D%/base/stor_assert.h %D%/base/stor_assert.c %D%/base/array.h %D%/base/bytes.h \
	%D%/base/cache.h %D%/base/cache.c %D%/base/seen_bits.h %D%/base/seen_bits.c \
	%D%/crypt/crypt.h %D%/crypt/crypt_backend.h %D%/crypt/crypt.c %D%/crypt/crypt_openssl.c \
	%D%/crypt/keys.h %D%/crypt/keys.c %D%/crypt/hash.h %D%/crypt/compress.h %D%/crypt/compress.c \
	%D%/kv/format.h %D%/kv/meta.h %D%/kv/meta_lmdb.c %D%/kv/bp.h %D%/kv/bp.c %D%/kv/statedir.c \
	%D%/dev/lun.h %D%/dev/lun_impl.h %D%/dev/lun.c %D%/dev/lun_file.c %D%/dev/lun_rados.c \
	%D%/dev/lunset.c %D%/dev/mirror.c %D%/dev/alloc.h %D%/dev/alloc.c %D%/dev/hostid.c \
	%D%/dev/search.c %D%/dev/errlog.c \
	%D%/txg/txg.h %D%/txg/txg.c %D%/txg/metalog.h %D%/txg/metalog.c \
	%D%/txg/spacemap.h %D%/txg/spacemap.c \
	%D%/txg/bpmac.h %D%/txg/bpmac.c %D%/txg/pool_record.h %D%/txg/pool_record.c \
	%D%/ds/dataset.c %D%/ds/props.h %D%/ds/props.c %D%/ds/userprops.h %D%/ds/userprops.c %D%/ds/space.c %D%/ds/snapshot.h \
	%D%/ds/snapshot.c %D%/ds/clone.c %D%/ds/dskeys.c %D%/ds/keyfile.c \
	%D%/ds/children.h %D%/ds/children.c %D%/ds/recv_state.h %D%/ds/recv_state.c %D%/ds/rekey.h %D%/ds/rekey.c %D%/ds/rename.c %D%/ds/owners.h %D%/ds/owners.c \
	%D%/ds/snapnames.h %D%/ds/snapnames.c \
	%D%/io/record.c %D%/io/map.c %D%/io/stats.h %D%/io/stats.c \
	%D%/pool/pool.c %D%/pool/promote.c %D%/pool/pool_rename.c %D%/pool/scrub.c %D%/pool/resilver.c \
	%D%/pool/verify.c %D%/pool/expand.c \
	%D%/send/stream.h %D%/send/stream.c %D%/send/send.c %D%/send/recv.c
if HAVE_IPSEC_MB
libstore_libstore_a_SOURCES += %D%/crypt/crypt_ipsecmb.c
endif
EXTRA_DIST += %D%/crypt/crypt_ipsecmb.c
