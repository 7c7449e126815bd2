# Dead-letter search and filtered bulk actions, the same checks on either
# broker (test_dlq_search.sh, test_amqp_dlq_search.sh). The test defines,
# before calling dlqs_main:
#   dlqs_seed I ERROR BODY FAILED_AT: write one dead letter of task s, its
#     origin id o-I (oldest first: I = 1..30 in order);
#   dlqs_queued: the I of every message on task s's queue (o-I, or the
#     body's n), one a line, each time it is there;
# and sets DLQS_CONF (the daemon's configuration: HTTP_PORT, token $TOKEN;
# also the CLI's). dlqs_main runs the daemon with task s paused, so that
# what is replayed stays on the queue.

DLQS_BASE=1764547200000 # 2025-12-01T00:00:00Z
DLQS_AUTH=(-H "Authorization: Bearer $TOKEN")
DLQS_PATH=/api/v1/tasks/s/dead-letters

# dlqs_error I / dlqs_body I / dlqs_at I: entry I's error text, body and
# failed_at (epoch ms, a minute apart).
dlqs_error() {
	case $(($1 % 3)) in
	0) echo "ValueError: bad input $1" ;;
	1) echo "timeout after 5s" ;;
	2) echo "connection refused by upstream" ;;
	esac
}
dlqs_body() {
	local user=bob note=
	(($1 % 4 == 0)) && user=alice
	(($1 % 7 == 0)) && note=',"note":"timeout in body"'
	printf '{"n":%d,"user":"%s"%s}' "$1" "$user" "$note"
}
dlqs_at() {
	echo $((DLQS_BASE + $1 * 60000))
}

# dlqs_want EXPR: the I in 1..30 for which the arithmetic EXPR (on i)
# holds and that are in DLQS_LEFT, sorted, space-separated.
declare -A DLQS_LEFT=()
dlqs_want() {
	local i out=()
	for ((i = 1; i <= 30; i++)); do
		[[ -n ${DLQS_LEFT[$i]:-} ]] || continue
		if (($1)); then out+=("$i"); fi
	done
	echo "${out[*]}"
}

# dlqs_list QUERY [LIMIT]: the I of every entry a filtered list returns,
# following its Link rel="next" pages (LIMIT entries each, default 1000:
# one page), checked newest first; sorted, space-separated.
dlqs_list() {
	local limit=${2:-1000}
	local path="$DLQS_PATH?limit=$limit${1:+&$1}" all=() page link pages=0
	while [[ -n $path ]]; do
		expect_code 200 "${DLQS_AUTH[@]}" "$path"
		mapfile -t page < <(jqr '.[].origin_id | sub("^o-"; "")')
		((${#page[@]} <= limit)) || fail "$path: ${#page[@]} entries for limit=$limit"
		all+=("${page[@]}")
		link=$(resp_header link)
		path=
		if [[ $link =~ ^\<([^>]*)\>\;\ rel=\"next\"$ ]]; then
			path=${BASH_REMATCH[1]}
		fi
		pages=$((pages + 1))
		((pages < 20)) || fail "$1: more than 20 pages"
	done
	local prev=999 i
	for i in "${all[@]}"; do
		((i < prev)) || fail "$1: entries not newest first: ${all[*]}"
		prev=$i
	done
	printf '%s\n' "${all[@]}" | grep . | sort -n | paste -sd ' ' || true
}

# dlqs_check QUERY EXPR [LIMIT]: the filtered list is exactly the entries
# EXPR picks.
dlqs_check() {
	local got want
	got=$(dlqs_list "$1" "${3:-}")
	want=$(dlqs_want "$2")
	assert_eq "$want" "$got" "entries listed for ?$1"
}

# dlqs_act METHOD PATH_SUFFIX QUERY KEY N: N calls at once (METHOD on
# dead-letters$PATH_SUFFIX?QUERY); prints the sum of their .KEY.
dlqs_act() {
	local method=$1 suffix=$2 query=$3 key=$4 n=$5 i pids=() sum=0 v
	for ((i = 1; i <= n; i++)); do
		curl -s -m 30 -o "$TEST_DIR/act.$i.out" -w '%{http_code}' \
			"${DLQS_AUTH[@]}" -X "$method" \
			"http://127.0.0.1:$HTTP_PORT$DLQS_PATH$suffix?$query" \
			>"$TEST_DIR/act.$i.code" 2>/dev/null &
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i" || fail "$method $suffix?$query failed"
	done
	for ((i = 1; i <= n; i++)); do
		assert_eq 200 "$(cat "$TEST_DIR/act.$i.code")" \
			"$method $suffix?$query ($i): $(head -c 300 "$TEST_DIR/act.$i.out")"
		v=$(jq -er ".$key" "$TEST_DIR/act.$i.out") ||
			fail "$method $suffix?$query answered $(head -c 300 "$TEST_DIR/act.$i.out")"
		sum=$((sum + v))
	done
	echo "$sum"
}

# dlqs_drop I...: those entries are no longer dead letters.
dlqs_drop() {
	local i
	for i in "$@"; do unset "DLQS_LEFT[$i]"; done
}

# dlqs_main: start the daemon on DLQS_CONF (wait for /ping, pause task s), run dlqs_run,
# stop the daemon (exit status 0).
dlqs_main() {
	start_daemon "$DLQS_CONF"
	wait_ping
	expect_code 200 "${DLQS_AUTH[@]}" -X POST /api/v1/tasks/s/pause
	dlqs_run
	local rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "exit status of the daemon"
}

dlqs_run() {
	local i want got n
	for ((i = 1; i <= 30; i++)); do
		dlqs_seed "$i" "$(dlqs_error "$i")" "$(dlqs_body "$i")" "$(dlqs_at "$i")"
		DLQS_LEFT[$i]=1
	done

	# ---- each filter lists exactly its entries
	dlqs_check "" "1"
	dlqs_check "q=ValueError" "i % 3 == 0"
	dlqs_check "q=alice" "i % 4 == 0"
	dlqs_check "q=timeout" "i % 3 == 1 || i % 7 == 0"
	dlqs_check "q=timeout&since=$(dlqs_at 2)" "(i % 3 == 1 || i % 7 == 0) && i >= 2" 3
	dlqs_check "q=valueerror" "0"
	dlqs_check "q=%22user%22%3A%22bob%22" "i % 4 != 0"
	dlqs_check "since=2025-12-01T00:10:00Z&until=$(dlqs_at 20)" "i >= 10 && i <= 20"
	dlqs_check "since=$(dlqs_at 25)" "i >= 25"
	dlqs_check "until=2025-12-01T01:00:05%2B01:00" "i <= 0"
	dlqs_check "until=2025-12-01T00:05:00.000Z" "i <= 5"
	dlqs_check "q=bob&since=2025-12-01T00:12:00Z&until=2025-12-01T00:18:00Z" \
		"i % 4 != 0 && i >= 12 && i <= 18"
	expect_code 400 "${DLQS_AUTH[@]}" "$DLQS_PATH?since=yesterday"
	expect_code 400 "${DLQS_AUTH[@]}" -X POST "$DLQS_PATH/replay?until=12:00"
	expect_code 400 "${DLQS_AUTH[@]}" -X DELETE "$DLQS_PATH?since=2025-13-01T00:00:00Z"
	expect_code 400 "${DLQS_AUTH[@]}" "$DLQS_PATH?q=$(head -c 1100 /dev/zero | tr '\0' x)"
	dlqs_check "" "1"

	# ---- a filtered replay moves exactly its entries
	want=$(dlqs_want "i % 3 == 0 && i <= 15")
	n=$(dlqs_act POST /replay "q=ValueError&until=2025-12-01T00:15:00Z" replayed 1)
	assert_eq "$(wc -w <<<"$want")" "$n" "count of the filtered replay"
	# shellcheck disable=SC2086
	dlqs_drop $want
	wait_until "[[ \$(dlqs_queued | wc -l) -ge $n ]]" 10
	assert_eq "$want" "$(dlqs_queued | sort -n | paste -sd ' ')" "queue after the filtered replay"
	dlqs_check "" "1"

	# ---- two filtered replays at once: each entry once
	local before
	before=$(dlqs_queued | sort -n | paste -sd ' ')
	want=$(dlqs_want "i % 4 == 0")
	n=$(dlqs_act POST /replay "q=alice" replayed 2)
	assert_eq "$(wc -w <<<"$want")" "$n" "sum of two concurrent filtered replays"
	# shellcheck disable=SC2086
	dlqs_drop $want
	want=$(printf '%s\n' $before $want | sort -n | paste -sd ' ')
	wait_until "[[ \$(dlqs_queued | wc -l) -ge $(wc -w <<<"$want") ]]" 10
	assert_eq "$want" "$(dlqs_queued | sort -n | paste -sd ' ')" "queue after the concurrent replays"
	dlqs_check "" "1"

	# ---- two filtered purges at once: each entry once, the rest stays
	want=$(dlqs_want "i >= 20 || i % 3 == 2 && i <= 8")
	local p1 p2
	p1=$(dlqs_act DELETE "" "since=2025-12-01T00:20:00Z" purged 2)
	p2=$(dlqs_act DELETE "" "q=connection&until=$(dlqs_at 8)" purged 2)
	assert_eq "$(wc -w <<<"$want")" "$((p1 + p2))" "sum of the concurrent filtered purges"
	# shellcheck disable=SC2086
	dlqs_drop $want
	dlqs_check "" "1"

	# ---- q searches the error and the body only, not the ids
	expect_code 200 "${DLQS_AUTH[@]}" "$DLQS_PATH?q=o-2"
	assert_eq "[]" "$(jq -c . "$RESP_BODY")" "search for an origin id"

	# ---- the CLI: the same filter
	want=$(dlqs_want "i % 3 == 1 || i % 7 == 0")
	tm dlq -c "$DLQS_CONF" list s --grep timeout --until "$(dlqs_at 30)"
	assert_eq 0 "$TM_RC" "dlq list --grep: $(head -c 300 "$TM_ERR")"
	assert_eq "$(wc -w <<<"$want")" "$(grep -c . "$TM_OUT")" "lines of dlq list --grep timeout"
	tm dlq -c "$DLQS_CONF" list s --grep timeout --since nope
	assert_eq 2 "$TM_RC" "dlq list --since nope"
	tm dlq -c "$DLQS_CONF" replay s o-1 --grep timeout
	assert_eq 2 "$TM_RC" "dlq replay ID --grep"
	want=$(dlqs_want "(i % 3 == 1 || i % 7 == 0) && i <= 10")
	tm dlq -c "$DLQS_CONF" purge s --grep timeout --until 2025-12-01T00:10:00Z --yes
	assert_eq 0 "$TM_RC" "dlq purge --grep: $(head -c 300 "$TM_ERR")"
	n=$(wc -w <<<"$want")
	assert_match "^purged $n messages?\$" "$(cat "$TM_OUT")" "output of dlq purge --grep"
	# shellcheck disable=SC2086
	dlqs_drop $want
	dlqs_check "" "1"

	# ---- without a filter: as before, everything left
	want=$(dlqs_want 1 | wc -w)
	n=$(dlqs_act DELETE "" "" purged 1)
	assert_eq "$want" "$n" "purge without a filter"
	expect_code 200 "${DLQS_AUTH[@]}" "$DLQS_PATH"
	assert_eq "[]" "$(jq -c . "$RESP_BODY")" "dead letters after the purge"
}
