# HTTP readers across quick reloads. /metrics, /status and GET
# /api/v1/tasks (rendered on the HTTP thread) and GET
# /api/v1/tasks/work/dead-letters (run by the admin API worker on a broker
# connection of its own) are requested in loops, one loop each, while
# messages flow and the configuration is reloaded 20 times in a row, each
# reload adding or removing tasks, so that consecutive generations differ
# in their number of tasks. Every reader holds the generation it renders
# by a reference of its own, and the last reference frees it: no answer
# may come from a freed generation (the ASan build reports a use after
# free; LeakSanitizer, a generation never freed) or mix two of them (a
# task whose queue is not its own configuration's). Every answer is a
# complete 200, the daemon serves throughout and stops with status 0.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl

TOKEN=hammer-token
AUTH=(-H "Authorization: Bearer $TOKEN")
Q=q.hammer
RELOADS=20
# tasks in every configuration besides work and the extras: renders long
# enough for a reload to retire a generation during one
FILL=100
CONF=$TEST_DIR/taskmill.yaml
HTTP_PORT=$(free_port)
# write_conf N: tasks work, fill1..fillFILL and extra1..extraN, each on a
# queue of its own: Q, or Q.NAME with "extra" taken off the name
write_conf() {
	local k
	{
		echo "tasks:"
		echo "  work: { plugin: noop.so, queue: $Q }"
		for ((k = 1; k <= FILL; k++)); do
			echo "  fill$k: { plugin: noop.so, queue: $Q.fill$k }"
		done
		for ((k = 1; k <= $1; k++)); do
			echo "  extra$k: { plugin: noop.so, queue: $Q.$k }"
		done
	} >"$TEST_DIR/tasks.yaml"
	write_http_config "$CONF" token="$TOKEN" pool_size=2 <"$TEST_DIR/tasks.yaml"
}
write_conf 2
start_daemon "$CONF"
wait_ping "$HTTP_PORT" 60

# a few dead letters for the API worker's reads
for k in 1 2 3; do
	rcli XADD "$Q.dlq" '*' body "{\"n\":$k}" task work error test \
		attempts 1 >/dev/null
done

STOP=$TEST_DIR/stop
BAD=$TEST_DIR/bad
: >"$BAD"
# check NAME BODY_FILE: whether the answer is complete and of one
# configuration
check() {
	case $1 in
	metrics)
		grep -q '^taskmill_build_info{' "$2" &&
			grep -q '^process_start_time_seconds ' "$2" ;;
	status)
		jq -e '(.config.generation | type == "number") and
			.tasks.work.queue == "'$Q'" and
			([.tasks | to_entries[] | select(.key != "work") |
				.value.queue == ("'$Q'." + (.key | ltrimstr("extra")))] |
				all)' "$2" >/dev/null ;;
	tasks)
		jq -e '(.tasks | map(.name) | index("work")) != null and
			([.tasks[] | .queue == (if .name == "work" then "'$Q'"
				else "'$Q'." + (.name | ltrimstr("extra")) end)] |
				all)' "$2" >/dev/null ;;
	dlq)
		jq -e 'type == "array" and length >= 1' "$2" >/dev/null ;;
	esac
}
# reader NAME PATH K: request PATH until STOP exists; counts answers in
# TEST_DIR/n.NAME.K, and notes a bad one (not 200, or failing check) in BAD
reader() {
	local name=$1 path=$2 n=0 code body=$TEST_DIR/body.$1.$3
	while [[ ! -e $STOP ]]; do
		code=$(curl -s -m 20 -o "$body" -w '%{http_code}' "${AUTH[@]}" \
			"http://127.0.0.1:$HTTP_PORT$path" 2>/dev/null) || code=000
		if [[ $code != 200 ]] || ! check "$name" "$body"; then
			echo "$name $path: $code $(head -c 300 "$body")" >>"$BAD"
		fi
		n=$((n + 1))
		echo "$n" >"$TEST_DIR/n.$name.$3"
	done
}
# producer: messages for every task, so that their counters move
producer() {
	local k
	while [[ ! -e $STOP ]]; do
		rcli XADD "$Q" '*' body '{}' >/dev/null
		for k in 1 2 3; do
			rcli XADD "$Q.$k" '*' body '{}' >/dev/null
		done
		sleep 0.05
	done
}
# two loops of each reader, so that one's request waits while the
# other's is answered
PIDS=()
for k in 1 2; do
	reader metrics /metrics $k & PIDS+=($!)
	reader status /status $k & PIDS+=($!)
	reader tasks /api/v1/tasks $k & PIDS+=($!)
	reader dlq "/api/v1/tasks/work/dead-letters?limit=10" $k & PIDS+=($!)
done
producer & PIDS+=($!)
tm_on_exit "touch '$STOP'; kill ${PIDS[*]} 2>/dev/null"
for name in metrics status tasks dlq; do
	wait_until "[[ -s '$TEST_DIR/n.$name.1' && -s '$TEST_DIR/n.$name.2' ]]" 30
done

# 20 reloads back to back: each one takes effect (its own configuration
# number) before the next SIGHUP; 0 to 3 extra tasks
for ((i = 1; i <= RELOADS; i++)); do
	write_conf $((i % 4))
	kill -HUP "$DAEMON_PID"
	wait_until "grep -q 'as configuration $((i + 1)):' '$DAEMON_LOG'" 60
	daemon_alive || fail "the daemon died at reload $i"
done
touch "$STOP"
wait "${PIDS[@]}" 2>/dev/null || true
for name in metrics status tasks dlq; do
	note "$name: $(($(cat "$TEST_DIR/n.$name.1") + $(cat "$TEST_DIR/n.$name.2"))) answers"
done
if [[ -s $BAD ]]; then
	head -20 "$BAD" >&2
	fail "$(wc -l <"$BAD") bad answers during the reloads"
fi
assert_eq $((RELOADS + 1)) "$(metric taskmill_config_generation)" \
	"taskmill_config_generation after $RELOADS reloads"
# the last configuration (20 % 4 = 0 extra tasks) is the one rendered
expect_code 200 "${AUTH[@]}" /api/v1/tasks
expect_json '[.tasks[].name | select(startswith("extra"))] == []' \
	"tasks after the last reload"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
