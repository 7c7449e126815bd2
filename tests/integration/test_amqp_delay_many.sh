# 1,000 delayed messages on RabbitMQ (x-not-before, published with pika)
# with random due times over 10 s, two daemons: each message runs exactly
# once, none before its time; the lateness (run start minus due time) is
# reported, p50/p99/max (reported, not asserted: the machine is shared).
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
PY=/usr/bin/python3
[[ -x $PY ]] && $PY -c 'import pika' 2>/dev/null ||
	skip "python3-pika is not installed (scripts/install-deps.sh installs it)"
. "$TM_SRCDIR/tests/integration/lib_delay.sh"
N=1000
for w in 1 2; do
	delay_config "$TEST_DIR/w$w.yaml" task='prefetch: 64' \
		http_port="$(free_port)" log_level=info
	eval "PORT$w=\$HTTP_PORT"
done
delay_start_two

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
delay_wait_runs "$N" 120
delay_lateness "$N"
delay_stop_two
