# The producer snippets of docs/producers.md run as written: every
# ```python block with /usr/bin/python3 (Debian's python3-redis and
# python3-pika), every ```js block with node (ioredis and amqplib from
# tests/integration/node_modules, installed by scripts/install-deps.sh),
# against the run's Redis and RabbitMQ, while one daemon per broker
# consumes the task `report`. Each client's message for now and its
# delayed one both run, and its request gets the answer (outcome success,
# body null: the journal task returns no result). (RabbitMQ's queue gets this test's prefix: the
# node is shared by the run's tests.)
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
PAGE=$TM_SRCDIR/docs/producers.md
PY=/usr/bin/python3
[[ -x $PY ]] || fail "$PY is needed"
$PY -c 'import redis, pika' 2>/dev/null ||
	fail "python3-redis and python3-pika are needed (scripts/install-deps.sh)"
export NODE_PATH=$TM_SRCDIR/tests/integration/node_modules${TM_NODE_PATH:+:$TM_NODE_PATH}
node -e 'require("ioredis"); require("amqplib")' 2>/dev/null ||
	fail "npm ioredis and amqplib are needed in tests/integration/node_modules (scripts/install-deps.sh)"
AQUEUE=$AQ.reports
OUT=$TEST_DIR/reports.log
: >"$OUT"

write_config "$TEST_DIR/redis.yaml" http_port="$(free_port)" <<YAML
tasks:
  report: { plugin: journal.so, queue: reports, config: { path: $OUT } }
YAML
RPORT=$HTTP_PORT
write_amqp_config "$TEST_DIR/amqp.yaml" http_port="$(free_port)" <<YAML
tasks:
  report: { plugin: journal.so, queue: $AQUEUE, config: { path: $OUT } }
YAML
APORT=$HTTP_PORT
start_daemon "$TEST_DIR/redis.yaml"
RPID=$DAEMON_PID
start_daemon "$TEST_DIR/amqp.yaml"
APID=$DAEMON_PID
wait_ping "$RPORT" 60
wait_ping "$APORT" 60

# the page's python and js blocks, one file each
awk -v dir="$TEST_DIR" '
	/^```(python|js)$/ && !inblock {
		n++; ext = substr($0, 4) == "python" ? "py" : "js"
		file = sprintf("%s/snippet%d.%s", dir, n, ext); inblock = 1; next
	}
	/^```/ { inblock = !inblock; file = ""; next }
	inblock && file != "" { print > file }
' "$PAGE"
ls "$TEST_DIR"/snippet* >/dev/null 2>&1 || fail "no snippet found in $PAGE"
export REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
export AMQP_URL=amqp://guest:guest@127.0.0.1:$RABBIT_PORT/
count=0
for f in "$TEST_DIR"/snippet*; do
	# RabbitMQ snippets: the queue with this test's prefix
	if grep -qE 'pika|amqplib' "$f"; then
		sed -i "s/\"reports\"/\"$AQUEUE\"/g" "$f"
	fi
	case $f in
	*.py) run=("$PY" "$f") ;;
	*.js) run=(node "$f") ;;
	esac
	note "running ${f##*/}"
	timeout 60 "${run[@]}" >"$f.out" 2>&1 || {
		cat "$f.out" >&2
		fail "${f##*/} failed"
	}
	if grep -q 'when.*request' "$f"; then
		assert_eq 'success null' "$(cat "$f.out")" "${f##*/}: the answer printed"
	fi
	count=$((count + 1))
done
assert_eq 8 "$count" "snippets run (redis-py, ioredis, pika, amqplib; messages, requests)"
for client in redis-py ioredis pika amqplib; do
	for when in now later request; do
		wait_until "grep -qE '\"from\": ?\"$client\", ?\"when\": ?\"$when\"' '$OUT'" 30
	done
done
assert_eq 12 "$(grep -c . "$OUT")" "every message ran once"
for pid in "$RPID" "$APID"; do
	DAEMON_PID=$pid
	rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "daemon exit status"
done
