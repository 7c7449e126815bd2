# 1,000 delayed messages on RabbitMQ (x-not-before, published with pika)
# with random due times over 10 s, two daemons: each message runs exactly
# once, none before its time; the lateness (run start minus due time) is
# reported, p50/p99/max (reported, not asserted: the machine is shared).
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
PY=/usr/bin/python3
[[ -x $PY ]] && $PY -c 'import pika' 2>/dev/null ||
	skip "python3-pika is not installed (scripts/install-deps.sh installs it)"
Q=$AQ.stamp
OUT=$TEST_DIR/stamps
N=1000
: >"$OUT"
for w in 1 2; do
	write_amqp_config "$TEST_DIR/w$w.yaml" http_port="$(free_port)" log_level=info <<YAML
tasks:
  stamp:
    plugin: $TM_BUILD/test-plugins/stamp.so
    queue: $Q
    prefetch: 64
    config: { path: $OUT }
YAML
	eval "PORT$w=\$HTTP_PORT"
done
start_daemon "$TEST_DIR/w1.yaml"
PID1=$DAEMON_PID
start_daemon "$TEST_DIR/w2.yaml"
PID2=$DAEMON_PID
wait_ping "$PORT1" 60
wait_ping "$PORT2" 60

"$PY" - "$RABBIT_PORT" "$Q" "$N" <<'PYEOF' || fail "publishing with pika failed"
import json, random, sys, time
import pika
port, queue, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port))
ch = conn.channel()
ch.confirm_delivery()
base = int(time.time() * 1000) + 1000
for i in range(1, n + 1):
    due = base + random.randrange(10000)
    ch.basic_publish("", queue, json.dumps({"i": i, "due": due}),
                     pika.BasicProperties(content_type="application/json",
                                          delivery_mode=2,
                                          message_id="m%d" % i,
                                          headers={"x-not-before": due}))
conn.close()
PYEOF
note "$N messages published"
wait_until "[[ \$(wc -l <'$OUT') -ge $N ]]" 120
sleep 1 # anything run twice would show now
assert_eq "$N" "$(wc -l <"$OUT")" "runs"
uniq=$(sed -n 's/.*"i": \([0-9]*\),.*/\1/p' "$OUT" | sort -u | wc -l)
assert_eq "$N" "$uniq" "distinct messages run"
sed -n 's/^\([0-9]*\) .*"due": \([0-9]*\)}.*/\1 \2/p' "$OUT" |
	awk '{print $1 - $2}' | sort -n >"$TEST_DIR/late"
assert_eq "$N" "$(wc -l <"$TEST_DIR/late")" "lateness of every run"
assert_ge 0 "$(head -n 1 "$TEST_DIR/late")" "no run before its time (least lateness, ms)"
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
