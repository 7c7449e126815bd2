# Dead-letter search and filtered bulk actions on RabbitMQ
# (lib_dlq_search.sh): 30 dead letters of mixed errors, bodies and times;
# each filter (q, since, until, and together, paged) lists exactly its
# entries; a filtered replay moves exactly those; two filtered replays or
# purges at once count each entry once; the CLI takes the same filter.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=amqp-dlq-search-token
Q=$AQ.s
DLQS_CONF=$TEST_DIR/search.yaml
write_amqp_config "$DLQS_CONF" <<YAML
tasks:
  s: { plugin: add.so, queue: $Q, on_error: reject }
YAML
sed -i "s|^http: { listen: \\(.*\\) }\$|http: { listen: \\1, token: \"$TOKEN\" }|" "$DLQS_CONF"
grep -q 'token:' "$DLQS_CONF" || fail "no token in $DLQS_CONF"
. "$TM_SRCDIR/tests/integration/lib_dlq_search.sh"

dlqs_seed() {
	amqptool dead "$Q.dlq" "$3" "o-$1" s "$2" "$4" || fail "amqptool dead $1"
}
# the queue is read (and emptied) into QUEUED: each message once, as it
# came
QUEUED=$TEST_DIR/queued
: >"$QUEUED"
dlqs_queued() {
	local out
	while out=$(amqptool props "$Q") && [[ $out != empty ]]; do
		sed -n 's/^message_id=o-//p' <<<"$out" >>"$QUEUED"
	done
	cat "$QUEUED"
}

dlqs_main
