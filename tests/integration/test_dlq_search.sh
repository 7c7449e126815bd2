# Dead-letter search and filtered bulk actions on Redis
# (lib_dlq_search.sh): 30 dead letters of mixed errors, bodies and times;
# each filter (q, since, until, and together, paged) lists exactly its
# entries; a filtered replay moves exactly those; two filtered replays or
# purges at once count each entry once; the CLI takes the same filter.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=dlq-search-token
DLQS_CONF=$TEST_DIR/search.yaml
write_http_config "$DLQS_CONF" token="$TOKEN" <<YAML
tasks:
  s: { plugin: add.so, queue: q.s, on_error: reject }
YAML
. "$TM_SRCDIR/tests/integration/lib_dlq_search.sh"

dlqs_seed() {
	rcall XADD q.s.dlq '*' body "$3" task s error "$2" attempts 1 \
		failed_at "$4" origin_id "o-$1" >/dev/null
}
dlqs_queued() {
	local id
	for id in $(xids q.s); do
		xfield q.s "$id" body | jq -r .n
	done
}

dlqs_main
