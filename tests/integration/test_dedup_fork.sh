# test_dedup.sh with the fork pool: duplicates are settled without
# reaching a child, answers and dedup records come from the parent.
DEDUP_POOL=fork
. "$TM_SRCDIR/tests/integration/test_dedup.sh"
