# Delayed messages through the admin API on Redis (lib_delayed_api.sh):
# list soonest first with bodies and paging, run-now within about a second
# and once, delete, run-now and delete at once on one id, unknown and
# hostile ids.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=delayed-api-token
JOURNAL=$TEST_DIR/journal.txt
DLY_CONF=$TEST_DIR/delayed.yaml
write_http_config "$DLY_CONF" token="$TOKEN" <<YAML
tasks:
  d: { plugin: journal.so, queue: q.d, config: { path: $JOURNAL } }
YAML
. "$TM_SRCDIR/tests/integration/lib_delayed_api.sh"

dly_main
