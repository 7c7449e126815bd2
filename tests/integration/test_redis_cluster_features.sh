# The Redis features beyond intake and settlement, in a cluster (three
# masters with a replica each, one daemon given one seed node), each task
# with a hash tag of its own, the tags spread over the three masters:
#   - a delayed message (emit --delay) runs, after its time;
#   - a schedule (every: 1s) fires each slot once;
#   - pause and resume: nothing of a paused task runs, all of it after
#     the resume (the task is one of the polling lane's two slots: the
#     first four slots of a group get blocking lanes, by configuration
#     order, and the pause read covers each slot apart);
#   - a rate limit of 5/s holds: 20 runs take at least 3 s;
#   - a request gets its answer (emit --wait), and a request whose
#     reply_to is in a slot of another master gets it there, unless that
#     key is no reply stream (a queue, a string): then it is refused;
#   - a dedup key runs once, its later copies are duplicates.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
. "$TM_SRCDIR/tests/integration/lib_redis_topology.sh"

topo_cluster_setup
P0=${TOPO_CLUSTER_PORTS[0]}

# ccli ARGS...: redis-cli in cluster mode (follows MOVED and ASK)
ccli() {
	redis-cli -c -p "$P0" "$@"
}

# six hash tags, two in slots of each master: TAG[0..5]
TAG=()
declare -A PER_MASTER=()
declare -A MASTER_OF=()
for ((n = 0; ${#TAG[@]} < 6 && n < 200; n++)); do
	t="{f$n}"
	port=$(topo_slot_port "$(redis-cli -p "$P0" CLUSTER KEYSLOT "$t")")
	((${PER_MASTER[$port]:-0} < 2)) || continue
	PER_MASTER[$port]=$((${PER_MASTER[$port]:-0} + 1))
	MASTER_OF[$t]=$port
	TAG+=("$t")
done
assert_eq 6 "${#TAG[@]}" "hash tags picked"
assert_eq 3 "${#PER_MASTER[@]}" "masters holding them"
# a tag on another master than TAG[4] (the add task): the cross-slot answer
OTHER=
for t in "${TAG[@]}"; do
	[[ ${MASTER_OF[$t]} == "${MASTER_OF[${TAG[4]}]}" ]] || OTHER=$t
done
[[ -n $OTHER ]] || fail "no tag on another master than ${TAG[4]}"
note "tags ${TAG[*]}; the answer in another slot goes to $OTHER"

JOURNAL=$TEST_DIR/journal.txt
FLOW=$TEST_DIR/flow.txt
: >"$JOURNAL"
: >"$FLOW"
HP=$(free_port)
HTTP_PORT=$HP
CONF=$TEST_DIR/taskmill.yaml
cat >"$CONF" <<YAML
broker:
  url: [redis://127.0.0.1:$P0]
  redis: { mode: cluster }
pool: { kind: thread, size: 4 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HP }
log: { level: debug }
tasks:
  delayed:
    plugin: journal.so
    queue: '${TAG[0]}'
    config: { path: $JOURNAL }
  tick:
    plugin: journal.so
    queue: '${TAG[1]}'
    config: { path: $JOURNAL }
  limited:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: '${TAG[3]}'
    rate_limit: 5/s
    config: { path: $FLOW }
  add: { plugin: add.so, queue: '${TAG[4]}', reply_ttl: 30s }
  work:
    plugin: journal.so
    queue: '${TAG[2]}'
    config: { path: $JOURNAL }
  once:
    plugin: journal.so
    queue: '${TAG[5]}'
    dedup_ttl: 1m
    config: { path: $JOURNAL }
schedules:
  every-second: { task: tick, every: 1s, body: { from: schedule } }
YAML

runs() { grep -c "$1" "$JOURNAL" || true; }

start_daemon "$CONF"
wait_ping "$HP" 60

# ---- a delayed message runs after its time
tm emit -c "$CONF" delayed '{"n":"later"}' --delay 2s
assert_eq 0 "$TM_RC" "emit --delay exit status: $(cat "$TM_ERR")"
t0=$(now_ms)
assert_eq 1 "$(ccli ZCARD "${TAG[0]}.scheduled")" "member in the scheduled set"
wait_until '[[ $(runs later) == 1 ]]' 30
(($(now_ms) - t0 >= 1500)) || fail "the delayed message ran before its time"
assert_eq 0 "$(ccli ZCARD "${TAG[0]}.scheduled")" "members left"
note "delayed message ran"

# ---- the schedule fires each slot once
slots() {
	ccli EVAL "local out = {}
		for _, e in ipairs(redis.call('XRANGE', KEYS[1], '-', '+')) do
			for i = 1, #e[2] - 1, 2 do
				if e[2][i] == 'slot' then out[#out + 1] = e[2][i + 1] end
			end
		end
		return out" 1 "${TAG[1]}"
}
wait_until '[[ $(slots | wc -l) -ge 3 ]]' 30
assert_eq "" "$(slots | sort | uniq -d | paste -sd ' ')" "slots fired twice"
last=$(ccli GET "${TAG[1]}.sched.every-second")
assert_eq "$last" "$(slots | sort -n | tail -n 1)" "last slot fired"
wait_until '[[ $(runs schedule) -ge 3 ]]' 30
note "schedule fired $(slots | wc -l) slots, each once"

# ---- pause and resume
tm pause -c "$CONF" work
assert_eq 0 "$TM_RC" "pause exit status: $(cat "$TM_ERR")"
wait_metric taskmill_task_paused 'task="work"' 1 30
for i in 1 2 3; do
	ccli XADD "${TAG[2]}" '*' body "{\"n\":\"held-$i\"}" >/dev/null
done
sleep 2
assert_eq 0 "$(runs held-)" "runs of a paused task"
tm resume -c "$CONF" work
assert_eq 0 "$TM_RC" "resume exit status: $(cat "$TM_ERR")"
wait_until '[[ $(runs held-) == 3 ]]' 30
note "pause held the task's messages, resume ran them"

# ---- a rate limit of 5/s holds: 20 runs take at least 3 s
for i in $(seq 1 20); do
	ccli XADD "${TAG[3]}" '*' body "{\"n\":$i}" >/dev/null
done
wait_until "[[ \$(wc -l <'$FLOW') -ge 20 ]]" 60
assert_eq hash "$(ccli TYPE "${TAG[3]}.rate.taskmill")" "type of the bucket"
span=$(awk 'NR == 1 || $3 < lo { lo = $3 } $3 > hi { hi = $3 }
	END { print int((hi - lo) / 1000) }' "$FLOW")
((span >= 3000)) || fail "20 runs at 5/s started within $span ms"
note "rate limit: 20 runs started over $span ms"

# ---- request/reply: emit --wait, and an answer in another master's slot
tm emit -c "$CONF" add '{"a":2,"b":3}' --wait 20
assert_eq 0 "$TM_RC" "emit --wait exit status: $(cat "$TM_ERR")"
assert_eq '{"sum":5}' "$(cat "$TM_OUT")" "emit --wait answer"
ccli XADD "${TAG[4]}" '*' body '{"a":1,"b":1}' reply_to "$OTHER.answers" \
	correlation_id c1 >/dev/null
wait_until "[[ \$(ccli XLEN '$OTHER.answers') == 1 ]]" 30
answer=$(ccli XRANGE "$OTHER.answers" - + | paste -sd ' ')
assert_match 'body \{"sum":2\} outcome success' "$answer" "the answer"
assert_match 'correlation_id c1' "$answer" "the answer's correlation id"
wait_until "[[ \$(ccli XPENDING '${TAG[4]}' taskmill | sed -n 1p) == 0 ]]" 30
note "answers written, in the queue's slot and in $OTHER's"
# refused in another slot: a queue with a backlog and a group, a string;
# a second answer to the reply stream there is written
ccli XADD "$OTHER.q" '*' body '{"n":1}' >/dev/null
ccli XGROUP CREATE "$OTHER.q" grp 0 >/dev/null
ccli SET "$OTHER.str" keep >/dev/null
for k in "$OTHER.q" "$OTHER.str" "$OTHER.answers"; do
	ccli XADD "${TAG[4]}" '*' body '{"a":1,"b":1}' reply_to "$k" >/dev/null
done
wait_until "[[ \$(ccli XLEN '$OTHER.answers') == 2 ]]" 30
wait_until "[[ \$(ccli XPENDING '${TAG[4]}' taskmill | sed -n 1p) == 0 ]]" 30
assert_eq 1 "$(ccli XLEN "$OTHER.q")" "entries of $OTHER.q"
assert_eq -1 "$(ccli PTTL "$OTHER.q")" "PTTL of $OTHER.q"
assert_eq 1 "$(ccli XINFO GROUPS "$OTHER.q" | grep -cx grp)" "group of $OTHER.q"
assert_eq keep "$(ccli GET "$OTHER.str")" "$OTHER.str"
assert_eq -1 "$(ccli PTTL "$OTHER.str")" "PTTL of $OTHER.str"
wait_metric taskmill_replies_refused_total 'task="add"' 2 30
grep -q "reply_to '$OTHER.q' refused: it is a stream with consumer groups" "$DAEMON_LOG" ||
	fail "no refusal logged for $OTHER.q"
grep -q "reply_to '$OTHER.str' refused: it holds a string" "$DAEMON_LOG" ||
	fail "no refusal logged for $OTHER.str"
note "answers to keys in $OTHER's slot that are no reply streams refused"

# ---- a dedup key runs once
ccli XADD "${TAG[5]}" '*' body '{"n":"dd-1"}' dedup_key k1 >/dev/null
wait_until '[[ $(runs dd-1) == 1 ]]' 30
wait_until "[[ \$(ccli EXISTS '${TAG[5]}.dedup.k1') == 1 ]]" 30
for i in 1 2; do
	ccli XADD "${TAG[5]}" '*' body '{"n":"dd-1"}' dedup_key k1 >/dev/null
done
wait_metric taskmill_tasks_total 'task="once",outcome="duplicate"' 2 30
assert_eq 1 "$(runs dd-1)" "runs of dedup key k1"
note "dedup key ran once"

stop_daemon
