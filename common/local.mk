# SPDX-License-Identifier: MIT
# The rules every program shares (common.h): libstore, cofferd, coffer and
# the tests link libcommon.a; libcoffer.a, installed for other programs,
# carries the part a client needs in itself (client/local.mk).
noinst_LIBRARIES += %D%/libcommon.a
%C%_libcommon_a_SOURCES = %D%/common.h %D%/errors.c %D%/size.c %D%/name.c %D%/typo.c %D%/hex.c \
	%D%/lun_path.c %D%/prop_names.h %D%/prop_names.c %D%/proto.h %D%/proto.c \
	%D%/sockpath.h %D%/sockpath.c %D%/resume_token.c %D%/heap.c
%C%_libcommon_a_CPPFLAGS = $(AM_CPPFLAGS) $(COMMON_INC)
