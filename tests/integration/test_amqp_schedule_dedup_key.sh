# On RabbitMQ each fired slot's message carries the header x-dedup-key
# "schedule:<name>:<slot>", next to x-schedule and x-slot (epoch ms). The
# task is paused, so that the messages stay in its queue; they are read
# back raw with pika.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
PY=/usr/bin/python3
$PY -c 'import pika' 2>/dev/null || fail "python3-pika is needed (scripts/install-deps.sh)"
Q=$AQ.sdk
SCH=sdk$$
write_amqp_config "$TEST_DIR/amqp.yaml" log_level=info <<YAML
tasks:
  tick: { plugin: add.so, queue: $Q }
schedules:
  $SCH: { task: tick, every: 1s }
YAML

tm pause -c "$TEST_DIR/amqp.yaml" tick
assert_eq 0 "$TM_RC" "pause tick ($(cat "$TM_ERR"))"
start_daemon "$TEST_DIR/amqp.yaml"
wait_ping
wait_until "[[ \$(ready_count $Q) -ge 3 ]]" 30
stop_daemon

got=$($PY - "$RABBIT_PORT" "$Q" <<'PY'
import sys, pika
c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", int(sys.argv[1])))
ch = c.channel()
while True:
    m, p, body = ch.basic_get(sys.argv[2], auto_ack=True)
    if m is None:
        break
    h = p.headers or {}
    print(h.get("x-schedule", "-"), h.get("x-slot", "-"), h.get("x-dedup-key", "-"))
c.close()
PY
)
note "messages: $(wc -l <<<"$got")"
n=0
while read -r sch slot dk; do
	assert_eq "$SCH" "$sch" "x-schedule"
	[[ $slot =~ ^[0-9]+$ ]] || fail "x-slot '$slot'"
	assert_eq "schedule:$SCH:$slot" "$dk" "x-dedup-key of slot $slot"
	n=$((n + 1))
done <<<"$got"
assert_ge "$n" 3 "messages read back"
