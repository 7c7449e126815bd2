# taskmill emit --dedup-key on RabbitMQ: the message carries the key as
# header x-dedup-key (DESIGN.md, Messages), next to x-not-before with
# --delay. No daemon consumes it here: the messages are read back raw
# with pika. (A RabbitMQ daemon does not deduplicate: dedup_ttl > 0 is a
# configuration error there, see docs/replies.md.)
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
PY=/usr/bin/python3
$PY -c 'import pika' 2>/dev/null || fail "python3-pika is needed (scripts/install-deps.sh)"
Q=$AQ.edk
write_amqp_config "$TEST_DIR/amqp.yaml" <<YAML
tasks:
  add: { plugin: add.so, queue: $Q }
YAML

tm emit -c "$TEST_DIR/amqp.yaml" add '{"a":1,"b":2}' --dedup-key order-7
assert_eq 0 "$TM_RC" "emit --dedup-key ($(cat "$TM_ERR"))"
tm emit -c "$TEST_DIR/amqp.yaml" add '{"a":1,"b":2}' --delay 1h --dedup-key late-1
assert_eq 0 "$TM_RC" "emit --delay --dedup-key ($(cat "$TM_ERR"))"
tm emit -c "$TEST_DIR/amqp.yaml" add '{"a":1,"b":2}'
assert_eq 0 "$TM_RC" "emit without a key ($(cat "$TM_ERR"))"

got=$($PY - "$RABBIT_PORT" "$Q" <<'PY'
import sys, pika
c = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", int(sys.argv[1])))
ch = c.channel()
for _ in range(3):
    m, p, body = ch.basic_get(sys.argv[2], auto_ack=True)
    h = p.headers or {}
    print(h.get("x-dedup-key", "-"), "delayed" if "x-not-before" in h else "now")
c.close()
PY
)
assert_eq $'order-7 now\nlate-1 delayed\n- now' "$got" "the messages' headers"
