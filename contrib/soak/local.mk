# SPDX-License-Identifier: MIT
# The soak: soak.py drives the real cofferd with seeded random operations,
# crashes and state loss against a model; make check runs a short share of it.
TESTS += %D%/soak_short.sh
EXTRA_DIST += %D%/soak.py %D%/soak_short.sh
