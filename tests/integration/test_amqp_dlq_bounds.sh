# Dead-letter pages on RabbitMQ are bounded as on Redis: with 20 dead
# letters of 1 MiB each, GET .../dead-letters?limit=1000 answers every
# entry newest first with its body cut at 64 KiB ("truncated": true,
# "body_bytes"), the daemon's peak RSS (VmHWM) grows by far less than the
# bodies' size (the browse keeps a cut copy of each message it reads, one
# message at a time), every message stays in the queue, and paging with
# the Link rel="next" cursor (after=, exclusive) visits each entry once;
# GET .../dead-letters/ID gives the whole body.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=amqp-bounds-token
AUTH=(-H "Authorization: Bearer $TOKEN")
N=20
MIB=1048576
CONF=$TEST_DIR/taskmill.yaml
write_amqp_config "$CONF" <<YAML
tasks:
  rej: { plugin: fail.so, queue: $AQ.bounds, on_error: reject, max_payload: 2MiB }
YAML
sed -i "s|^http: { listen: \\(.*\\) }\$|http: { listen: \\1, token: \"$TOKEN\" }|" "$CONF"
grep -q 'token:' "$CONF" || fail "no token in the config"
# under ASan freed memory stays resident in its quarantine (256 MiB by
# default), which peak RSS would count: keep it small here
if [[ $TM_BUILD == *build-asan ]]; then
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4"
fi
start_daemon "$CONF"
wait_ping

pad=$(head -c "$MIB" /dev/zero | tr '\0' x)
for ((k = 1; k <= N; k++)); do
	printf '{"mode":"reject","n":%d,"pad":"%s"}' "$k" "$pad" >"$TEST_DIR/body.json"
	expect_code 201 "${AUTH[@]}" -X POST --data-binary "@$TEST_DIR/body.json" "/api/v1/tasks/rej/messages"
	# one at a time, so that "newest first" has an order to check
	wait_metric taskmill_dead_letter_total 'task="rej"' "$k" 30
done
full=$(stat -c %s "$TEST_DIR/body.json")
rm -f "$TEST_DIR/body.json"
expect_code 200 "${AUTH[@]}" "/api/v1/tasks/rej/dead-letters?limit=1"
hwm0=$(daemon_hwm)

expect_code 200 "${AUTH[@]}" "/api/v1/tasks/rej/dead-letters?limit=1000"
hwm1=$(daemon_hwm)
size=$(stat -c %s "$RESP_BODY")
note "answer of $size bytes; VmHWM $hwm0 KiB before, $hwm1 KiB after (+$(((hwm1 - hwm0) / 1024)) MiB)"
assert_le $((4 * MIB + 4096)) "$size" "the answer stays within 4 MiB"
assert_le $((40 * 1024)) "$((hwm1 - hwm0))" "VmHWM growth in KiB (bodies: $N MiB)"
expect_json "length == $N" "every entry listed"
expect_json "[.[] | .truncated == true and .body_bytes > $MIB and .body_bytes <= $full and (.body | length) == 65536] | all" "bodies cut at 64 KiB and flagged"
expect_json "[.[].body[0:40] | capture(\"\\\"n\\\":(?<n>[0-9]+)\").n | tonumber] == [range($N; 0; -1)]" "newest first"
all=$(jqr '.[].id' | tr '\n' ' ')
id=$(jqr '.[0].id')

expect_code 200 "${AUTH[@]}" "/api/v1/tasks/rej/dead-letters/$id"
expect_json ".id == \"$id\" and .truncated == false and .body_bytes == $full and (.body | fromjson | .n) == $N" "the whole body at the entry's own URL"
expect_code 404 "${AUTH[@]}" "/api/v1/tasks/rej/dead-letters/no-such-id"

# page by 3, following Link rel="next"
path="/api/v1/tasks/rej/dead-letters?limit=3" got= pages=0
while [[ -n $path ]]; do
	pages=$((pages + 1))
	((pages <= 50)) || fail "more than 50 pages: the cursor does not advance"
	expect_code 200 "${AUTH[@]}" "$path"
	got+=$(jqr '.[].id' | tr '\n' ' ')
	path=$(resp_header Link | sed -n 's/^<\([^>]*\)>; rel="next"$/\1/p')
done
assert_eq "$all" "$got" "paging by 3 visits every entry once, newest first"
assert_eq 7 "$pages" "pages of 3 for $N entries"
hwm2=$(daemon_hwm)
assert_le $((40 * 1024)) "$((hwm2 - hwm0))" "VmHWM growth in KiB after every page"

# browsing left every message in place
expect_code 200 "${AUTH[@]}" "/api/v1/tasks/rej/dead-letters?limit=1000"
assert_eq "$all" "$(jqr '.[].id' | tr '\n' ' ')" "the same entries after browsing"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
