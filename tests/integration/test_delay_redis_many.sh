# 10,000 delayed messages on Redis with random due times over 20 s, two
# daemons promoting the same scheduled set: each message runs exactly
# once, none before its time; the lateness (run start minus due time) is
# reported, p50/p99/max (reported, not asserted: the machine is shared).
CONF1=$TEST_DIR/w1.yaml
CONF2=$TEST_DIR/w2.yaml
OUT=$TEST_DIR/stamps
N=10000
: >"$OUT"
for w in 1 2; do
	write_config "$TEST_DIR/w$w.yaml" instance=w$w http_port="$(free_port)" log_level=info <<YAML
tasks:
  stamp:
    plugin: $TM_BUILD/test-plugins/stamp.so
    queue: q.many
    prefetch: 64
    config: { path: $OUT }
YAML
	eval "PORT$w=\$HTTP_PORT"
done
start_daemon "$CONF1"
PID1=$DAEMON_PID
wait_ping "$PORT1"
start_daemon "$CONF2"
PID2=$DAEMON_PID
wait_ping "$PORT2"

base=$(($(now_ms) + 1000))
out=$(
	for ((i = 1; i <= N; i++)); do
		due=$((base + RANDOM % 20000))
		resp ZADD q.many.scheduled "$due" "{\"id\":\"m$i\",\"body\":{\"i\":$i,\"due\":$due}}"
	done | rcli --pipe 2>&1
) || fail "redis-cli --pipe: $out"
[[ $out =~ errors:\ 0,\ replies:\ $N ]] || fail "ZADD: $out"
note "$N members added, due from $base over 20 s"
wait_until "[[ \$(wc -l <'$OUT') -ge $N ]]" 120
sleep 1 # anything run twice would show now
assert_eq 0 "$(rcall ZCARD q.many.scheduled)" "members left in the set"
assert_eq "$N" "$(wc -l <"$OUT")" "runs"
uniq=$(sed -n 's/.*"i":\([0-9]*\),.*/\1/p' "$OUT" | sort -u | wc -l)
assert_eq "$N" "$uniq" "distinct messages run"
sed -n 's/^\([0-9]*\) .*"due":\([0-9]*\)}.*/\1 \2/p' "$OUT" |
	awk '{print $1 - $2}' | sort -n >"$TEST_DIR/late"
assert_eq "$N" "$(wc -l <"$TEST_DIR/late")" "lateness of every run"
early=$(head -n 1 "$TEST_DIR/late")
assert_ge 0 "$early" "no run before its time (least lateness, ms)"
p50=$(sed -n "$((N / 2))p" "$TEST_DIR/late")
p99=$(sed -n "$((N * 99 / 100))p" "$TEST_DIR/late")
max=$(tail -n 1 "$TEST_DIR/late")
echo "# lateness over $N delayed messages, 2 daemons: p50 $p50 ms, p99 $p99 ms, max $max ms" >&2
for pid in "$PID1" "$PID2"; do
	DAEMON_PID=$pid
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "daemon exit status"
done
