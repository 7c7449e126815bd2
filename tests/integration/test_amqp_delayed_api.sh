# Delayed messages through the admin API on RabbitMQ (lib_delayed_api.sh):
# the delay queues browsed soonest first with bodies and paging, run-now
# within about a second and once, delete, run-now and delete at once on one
# id, unknown and hostile ids.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=amqp-delayed-api-token
JOURNAL=$TEST_DIR/journal.txt
DLY_CONF=$TEST_DIR/delayed.yaml
write_amqp_config "$DLY_CONF" <<YAML
tasks:
  d: { plugin: journal.so, queue: $AQ.d, config: { path: $JOURNAL } }
YAML
sed -i "s|^http: { listen: \\(.*\\) }\$|http: { listen: \\1, token: \"$TOKEN\" }|" "$DLY_CONF"
grep -q 'token:' "$DLY_CONF" || fail "no token in $DLY_CONF"
. "$TM_SRCDIR/tests/integration/lib_delayed_api.sh"

dly_main
