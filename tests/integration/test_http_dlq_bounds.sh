# One dead-letter request cannot take the daemon's memory (Redis): with
# 50 dead letters of 1 MiB each, GET .../dead-letters?limit=1000 answers
# every entry with its body cut at 64 KiB ("truncated": true, the full
# size in "body_bytes"), the answer stays under its 4 MiB budget, and the
# daemon's peak RSS (VmHWM) grows by far less than the bodies' size: the
# cut is made inside Redis, so no whole body reaches the daemon. A cut
# never splits a UTF-8 character. GET .../dead-letters/ID gives the whole
# body. Entries whose JSON text is large (quotes escape to two bytes)
# fill the 4 MiB budget before limit=1000: the page stops early with a
# Link rel="next" whose after= cursor (exclusive) continues it; paging
# that way, and with a small limit, visits every entry exactly once,
# newest first.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=bounds-token
AUTH=(-H "Authorization: Bearer $TOKEN")
BIG=q.bounds.big
ESC=q.bounds.esc
CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" token="$TOKEN" pool_size=2 <<YAML
tasks:
  big: { plugin: noop.so, queue: $BIG }
  esc: { plugin: noop.so, queue: $ESC }
YAML

MIB=1048576
# 50 bodies of 1 MiB and a little (valid JSON), made inside Redis
rcall EVAL "for i = 1, 50 do redis.call('XADD', KEYS[1], '*', 'body',
  '{\"n\":\"' .. string.format('%03d', i) .. '\",\"pad\":\"' .. string.rep('x', $MIB) .. '\"}',
  'task', 'big', 'error', 'test', 'attempts', '1') end return 1" 1 "$BIG.dlq" >/dev/null
# one whose cut at 64 KiB falls inside a two-byte character
rcall EVAL "redis.call('XADD', KEYS[1], '*', 'body',
  string.rep('x', 65535) .. 'é' .. string.rep('y', 10), 'task', 'big',
  'error', 'test', 'attempts', '1') return 1" 1 "$BIG.dlq" >/dev/null
# 60 bodies of 100 KiB of quotes: 128 KiB of JSON each once cut
rcall EVAL "for i = 1, 60 do redis.call('XADD', KEYS[1], '*', 'body',
  string.rep('\"', 102400), 'task', 'esc', 'error', 'test',
  'attempts', '1') end return 1" 1 "$ESC.dlq" >/dev/null
assert_eq 51 "$(xlen "$BIG.dlq")" "big dead letters written"
assert_eq 60 "$(xlen "$ESC.dlq")" "escaped dead letters written"

# under ASan freed memory stays resident in its quarantine (256 MiB by
# default), which peak RSS would count: keep it small here
if [[ $TM_BUILD == *build-asan ]]; then
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=4"
fi
start_daemon "$CONF"
wait_ping
expect_code 200 "${AUTH[@]}" "/api/v1/tasks/big/dead-letters?limit=1"
hwm0=$(daemon_hwm)

# ---- limit=1000 on 51 large entries
expect_code 200 "${AUTH[@]}" "/api/v1/tasks/big/dead-letters?limit=1000"
hwm1=$(daemon_hwm)
size=$(stat -c %s "$RESP_BODY")
note "answer of $size bytes; VmHWM $hwm0 KiB before, $hwm1 KiB after (+$(((hwm1 - hwm0) / 1024)) MiB)"
assert_le $((4 * MIB + 4096)) "$size" "the answer stays within 4 MiB"
assert_le $((40 * 1024)) "$((hwm1 - hwm0))" "VmHWM growth in KiB (bodies: 51 MiB)"
expect_json 'length == 51' "every entry listed"
expect_json '.[0].truncated == true and .[0].body_bytes == 65547 and (.[0].body | length) == 65535 and (.[0].body | test("^x+$"))' "a cut inside a UTF-8 character backs off to its start"
expect_json '[.[1:][] | .truncated == true and .body_bytes == 1048596 and (.body | length) == 65536] | all' "the 1 MiB bodies cut at 64 KiB and flagged"
want=$(rcall XREVRANGE "$BIG.dlq" + - | grep -E '^[0-9]+-[0-9]+$' | tr '\n' ' ')
assert_eq "$want" "$(jqr '.[].id' | tr '\n' ' ')" "newest first"
assert_eq "" "$(resp_header Link)" "no next page after the last entry"
id=$(jqr '.[1].id')

# ---- one dead letter, whole
expect_code 200 "${AUTH[@]}" "/api/v1/tasks/big/dead-letters/$id"
expect_json '.id == "'"$id"'" and .truncated == false and .body_bytes == 1048596 and (.body | fromjson | .n) == "050" and (.body | length) == 1048596' "the whole body at the entry's own URL"
expect_code 404 "${AUTH[@]}" "/api/v1/tasks/big/dead-letters/1-1"
expect_json '.error | test("no dead letter")' "an id that is not there"
expect_code 400 "${AUTH[@]}" "/api/v1/tasks/big/dead-letters?after=nope"
expect_json '.error | test("after")' "a bad after= refused"

# ---- the byte budget cuts a page; the Link continues it
want=$(rcall XREVRANGE "$ESC.dlq" + - | grep -E '^[0-9]+-[0-9]+$' | tr '\n' ' ')
expect_code 200 "${AUTH[@]}" "/api/v1/tasks/esc/dead-letters?limit=1000"
size=$(stat -c %s "$RESP_BODY")
n=$(jqr 'length')
note "first page of the escaped entries: $n entries, $size bytes"
assert_le $((4 * MIB)) "$size" "a page of escaped bodies stays within 4 MiB"
assert_le 59 "$n" "the budget stops the page before limit=1000"
assert_ge 1 "$n" "at least one entry"
link=$(resp_header Link)
last=$(jqr '.[-1].id')
assert_eq "</api/v1/tasks/esc/dead-letters?limit=1000&after=$last>; rel=\"next\"" "$link" "Link rel=next after the last entry"

# page_all TASK LIMIT: follow the Link headers from the first page; prints
# every id seen, in order
page_all() {
	local path="/api/v1/tasks/$1/dead-letters?limit=$2" pages=0
	while [[ -n $path ]]; do
		pages=$((pages + 1))
		((pages <= 200)) || fail "more than 200 pages: the cursor does not advance"
		expect_code 200 "${AUTH[@]}" "$path"
		jqr '.[].id'
		path=$(resp_header Link | sed -n 's/^<\([^>]*\)>; rel="next"$/\1/p')
	done
}
got=$(page_all esc 1000 | tr '\n' ' ')
assert_eq "$want" "$got" "paging by the budget visits every entry once, newest first"
got=$(page_all esc 7 | tr '\n' ' ')
assert_eq "$want" "$got" "paging by 7 visits every entry once, newest first"
want=$(rcall XREVRANGE "$BIG.dlq" + - | grep -E '^[0-9]+-[0-9]+$' | tr '\n' ' ')
got=$(page_all big 10 | tr '\n' ' ')
assert_eq "$want" "$got" "paging the large entries by 10"
# after the oldest entry there is nothing
oldest=$(rcall XRANGE "$BIG.dlq" - + COUNT 1 | awk 'NR == 1')
expect_code 200 "${AUTH[@]}" "/api/v1/tasks/big/dead-letters?after=$oldest"
expect_json '. == []' "nothing after the oldest"
assert_eq "" "$(resp_header Link)" "no next page after the oldest"

hwm2=$(daemon_hwm)
note "VmHWM after paging: $hwm2 KiB"
assert_le $((40 * 1024)) "$((hwm2 - hwm0))" "VmHWM growth in KiB after every page"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
