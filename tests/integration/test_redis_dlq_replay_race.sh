# Dead letters on Redis, replayed and purged by several operators at once,
# and replayed whole.
# 1. Metadata: messages carrying reply_to, correlation_id, dedup_key,
#    traceparent, tracestate and a workflow field are dead-lettered by the
#    daemon (both dead-letter scripts: a request, and a plain message);
#    the dead letters carry those fields, and a replay gives them back on
#    the queue (without the failure fields).
# 2. Replay race: 1,000 dead letters, 4 replays at once (2 CLI `taskmill
#    dlq replay`, 2 HTTP API replays) while a counting task runs what
#    comes back: the replay counts add up to 1,000, exactly 1,000 entries
#    come back to the queue, each body once, the dead-letter stream ends
#    empty, and the task runs each body once.
# 3. Purge race: rounds of 4 purges at once (CLI and API) over dead
#    letters, every command of the CLI and the daemon delayed 100 ms
#    each way by a proxy (so that a purge of several steps would overlap
#    another): the purge counts of a round add up to what was there.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"
need_tools jq curl

TOKEN=replay-race-token
AUTH=(-H "Authorization: Bearer $TOKEN")
N=1000
CONF_A=$TEST_DIR/broken.yaml
CONF_B=$TEST_DIR/fixed.yaml
JOURNAL=$TEST_DIR/journal.txt
write_http_config "$CONF_A" token="$TOKEN" <<YAML
tasks:
  add: { plugin: add.so, queue: q.add, on_error: reject }
YAML
write_http_config "$CONF_B" token="$TOKEN" http_port="$HTTP_PORT" <<YAML
tasks:
  add: { plugin: journal.so, queue: q.add, on_error: reject, config: { path: $JOURNAL } }
YAML

# ---- 1: metadata through a dead letter and back
start_daemon "$CONF_A"
wait_ping
TP1=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01
TP2=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
id1=$(rcall XADD q.add '*' body '{"a":1}' reply_to r.meta correlation_id corr-1 \
	dedup_key dk-1 traceparent "$TP1" tracestate "ts=1")
id2=$(rcall XADD q.add '*' body '{"a":2}' dedup_key dk-2 traceparent "$TP2" \
	tracestate "ts=2" workflow_id wf-2 workflow_step 3)
wait_until '[[ $(xlen q.add.dlq) == 2 ]]' 20
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the broken daemon"
declare -A DLQ_OF=()
for dlq_id in $(xids q.add.dlq); do
	DLQ_OF[$(xfield q.add.dlq "$dlq_id" origin_id)]=$dlq_id
done
d1=${DLQ_OF[$id1]:-}
d2=${DLQ_OF[$id2]:-}
[[ -n $d1 && -n $d2 ]] || fail "no dead letter for $id1 or $id2: $(xids q.add.dlq | paste -sd ' ')"
PROBLEMS=()
# check_fields STREAM ID WHAT FIELD=VALUE...: the entry's fields hold these.
check_fields() {
	local stream=$1 id=$2 what=$3 kv got
	shift 3
	for kv in "$@"; do
		got=$(xfield "$stream" "$id" "${kv%%=*}")
		if [[ $got != "${kv#*=}" ]]; then
			PROBLEMS+=("$what: field ${kv%%=*} is '$got', not '${kv#*=}'")
		fi
	done
}
META1=(body='{"a":1}' reply_to=r.meta correlation_id=corr-1 dedup_key=dk-1
	traceparent="$TP1" tracestate=ts=1)
META2=(body='{"a":2}' dedup_key=dk-2 traceparent="$TP2" tracestate=ts=2
	workflow_id=wf-2 workflow_step=3)
check_fields q.add.dlq "$d1" "dead letter of a request" "${META1[@]}" task=add origin_id="$id1"
check_fields q.add.dlq "$d2" "dead letter of a plain message" "${META2[@]}" task=add origin_id="$id2"

tm dlq -c "$CONF_A" replay add "$d1"
assert_eq 0 "$TM_RC" "exit status of dlq replay ID"
assert_eq "replayed 1 message" "$(cat "$TM_OUT")" "output of dlq replay ID"
r1=$(xids q.add | tail -n 1)
tm dlq -c "$CONF_A" replay add
assert_eq 0 "$TM_RC" "exit status of dlq replay"
assert_eq "replayed 1 message" "$(cat "$TM_OUT")" "output of dlq replay"
r2=$(xids q.add | tail -n 1)
assert_eq 4 "$(xlen q.add)" "entries of q.add after the replays"
check_fields q.add "$r1" "replayed request" "${META1[@]}"
check_fields q.add "$r2" "replayed plain message" "${META2[@]}"
for r in "$r1" "$r2"; do
	fields=$(xfields q.add "$r" | paste -sd ' ')
	for f in task error attempts failed_at origin_id; do
		[[ " $fields " != *" $f "* ]] || PROBLEMS+=("replayed entry $r kept the failure field $f (fields: $fields)")
	done
done
# (reported now, failed at the end: the races are checked all the same)
((${#PROBLEMS[@]} == 0)) || printf 'PROBLEM: %s\n' "${PROBLEMS[@]}" >&2
rcall DEL q.add q.add.dlq >/dev/null

# dead_letters COUNT TAG: COUNT dead letters of task add in q.add.dlq,
# bodies {"a":I,"b":TAG}, written in one script.
dead_letters() {
	rcall EVAL "for i = 1, tonumber(ARGV[1]) do
		redis.call('XADD', KEYS[1], '*', 'body',
			'{\"a\":' .. i .. ',\"b\":' .. ARGV[2] .. '}', 'task', 'add',
			'error', 'x', 'attempts', '1', 'failed_at', '1', 'origin_id', i .. '-0')
	end
	return redis.call('XLEN', KEYS[1])" 1 q.add.dlq "$1" "$2" >/dev/null
	assert_eq "$1" "$(xlen q.add.dlq)" "dead letters written"
}

# race OP: 2 CLI `dlq OP add` (with CLI_CONF) and 2 API calls at once;
# prints the four counts they reported, one a line (an error is fatal).
CLI_CONF=$CONF_B
race() {
	local op=$1 i path
	if [[ $op == replay ]]; then path=/api/v1/tasks/add/dead-letters/replay; else path=/api/v1/tasks/add/dead-letters; fi
	local method=POST
	[[ $op == purge ]] && method=DELETE
	local pids=()
	for i in 1 2; do
		timeout -k 2 60 "$TM_BIN" dlq -c "$CLI_CONF" "$op" add >"$TEST_DIR/race.cli$i.out" 2>"$TEST_DIR/race.cli$i.err" &
		pids+=($!)
		curl -s -m 60 -o "$TEST_DIR/race.api$i.out" -w '%{http_code}' "${AUTH[@]}" -X "$method" \
			"http://127.0.0.1:$HTTP_PORT$path" >"$TEST_DIR/race.api$i.code" 2>/dev/null &
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i" || fail "a concurrent $op failed (exit $?): $(cat "$TEST_DIR"/race.cli*.err "$TEST_DIR"/race.api*.out | head -c 600)"
	done
	local past=${op}ed
	[[ $op == purge ]] && past=purged
	for i in 1 2; do
		local out
		out=$(cat "$TEST_DIR/race.cli$i.out")
		[[ $out =~ ^$past\ ([0-9]+)\ messages?$ ]] || fail "CLI $op $i printed '$out'"
		echo "${BASH_REMATCH[1]}"
		assert_eq 200 "$(cat "$TEST_DIR/race.api$i.code")" "HTTP status of API $op $i: $(head -c 300 "$TEST_DIR/race.api$i.out")"
		jq -er ".$past" "$TEST_DIR/race.api$i.out" || fail "API $op $i answered $(head -c 300 "$TEST_DIR/race.api$i.out")"
	done
}

# ---- 2: four replays at once, a counting task running what comes back
dead_letters "$N" 1
start_daemon "$CONF_B"
wait_ping
race replay >"$TEST_DIR/replay.counts"
note "replay counts: $(paste -sd ' ' "$TEST_DIR/replay.counts")"
sum=$(($(paste -sd + "$TEST_DIR/replay.counts")))
came=$(xlen q.add)
note "entries back on q.add: $came, dead letters left: $(xlen q.add.dlq)"
assert_eq "$N" "$came" "entries replayed to q.add by 4 concurrent replays of $N dead letters"
assert_eq "$N" "$sum" "sum of the counts the 4 replays reported"
assert_eq 0 "$(xlen q.add.dlq)" "dead letters left after the replays"
rcall EVAL "local n, seen = 0, {}
	for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
		local f = e[2]
		for i = 1, #f, 2 do
			if f[i] == 'body' and not seen[f[i + 1]] then seen[f[i + 1]] = true; n = n + 1 end
		end
	end
	return n" 1 q.add >"$TEST_DIR/distinct"
assert_eq "$N" "$(cat "$TEST_DIR/distinct")" "distinct bodies back on q.add"
wait_until "[[ -f $JOURNAL && \$(wc -l <$JOURNAL) -ge $N && \$(xpending q.add) == 0 ]]" 60
assert_eq "$N" "$(wc -l <"$JOURNAL")" "runs of the replayed messages"
assert_eq "$N" "$(cut -d' ' -f2- "$JOURNAL" | sort -u | wc -l)" "distinct bodies run"

# ---- 3: four purges at once, in rounds; each entry counted once
fault_proxy_start R "$REDIS_PORT"
CLI_CONF=$TEST_DIR/slow.yaml
sed "s|redis://127.0.0.1:$REDIS_PORT/|redis://127.0.0.1:$FAULT_PORT_R/|" "$CONF_B" >"$CLI_CONF"
grep -q "$FAULT_PORT_R" "$CLI_CONF" || fail "no proxy port in $CLI_CONF"
fault_proxy R "delay 100"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the fixed daemon"
start_daemon "$CLI_CONF"
wait_ping
for round in 1 2 3 4 5; do
	dead_letters 200 "$((round + 1))"
	race purge >"$TEST_DIR/purge.counts"
	sum=$(($(paste -sd + "$TEST_DIR/purge.counts")))
	note "purge round $round: counts $(paste -sd ' ' "$TEST_DIR/purge.counts")"
	assert_eq 200 "$sum" "sum of the counts 4 concurrent purges of 200 dead letters reported (round $round)"
	assert_eq 0 "$(xlen q.add.dlq)" "dead letters left after purge round $round"
done

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "exit status of the fixed daemon"
if ((${#PROBLEMS[@]} > 0)); then
	fail "metadata lost: $(printf '%s; ' "${PROBLEMS[@]}")"
fi
