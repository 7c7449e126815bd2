#!/usr/bin/env bash
# A short tour of taskmill: a private redis-server on a free loopback port,
# the daemon running the example plugins, ~20 sample tasks, then /status,
# a /metrics excerpt and the dead-letter queue. Everything it starts is
# stopped on exit and its temp dir removed.
#
#   scripts/demo.sh BUILD_DIR        (make demo does this)
# shellcheck disable=SC2016  # single-quoted conditions are eval'ed later
set -euo pipefail

BUILD=${1:?usage: scripts/demo.sh BUILD_DIR}
BUILD=$(cd "$BUILD" && pwd)
TM=$BUILD/taskmill
for f in "$TM" "$BUILD"/plugins/{noop,add,sleep,fail,journal}.so; do
	[[ -e $f ]] || { echo "demo: $f not found; run make first" >&2; exit 1; }
done
for tool in redis-server redis-cli curl; do
	command -v "$tool" >/dev/null 2>&1 ||
		{ echo "demo: '$tool' not found; run scripts/install-deps.sh" >&2; exit 1; }
done

DIR=$(mktemp -d "${TMPDIR:-/tmp}/taskmill-demo.XXXXXX")
REDIS_PID=
DAEMON_PID=

cleanup() {
	local rc=$?
	if [[ -n $DAEMON_PID ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
		kill -TERM "$DAEMON_PID" 2>/dev/null || true
		wait_gone "$DAEMON_PID" 15 || kill -KILL "$DAEMON_PID" 2>/dev/null || true
	fi
	if [[ -n $REDIS_PID ]]; then
		kill -TERM "$REDIS_PID" 2>/dev/null || true
		wait_gone "$REDIS_PID" 5 || kill -KILL "$REDIS_PID" 2>/dev/null || true
	fi
	if ((rc != 0)) && [[ -s $DIR/taskmill.log ]]; then
		echo "--- daemon log (last 20 lines)"
		tail -n 20 "$DIR/taskmill.log"
	fi
	rm -rf "$DIR"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

heading() {
	printf '\n== %s\n' "$*"
}

now_ms() {
	local t=${EPOCHREALTIME/./}
	echo $((t / 1000))
}

# wait_for CMD SECONDS WHAT: poll CMD every 0.1 s, bounded.
wait_for() {
	local deadline=$(($(now_ms) + $2 * 1000))
	until eval "$1" >/dev/null 2>&1; do
		if (($(now_ms) >= deadline)); then
			echo "demo: timed out waiting for $3" >&2
			return 1
		fi
		sleep 0.1
	done
}

# wait_gone PID SECONDS: wait for a child to exit; 1 if it did not.
wait_gone() {
	local deadline=$(($(now_ms) + $2 * 1000))
	while kill -0 "$1" 2>/dev/null; do
		(($(now_ms) < deadline)) || return 1
		sleep 0.1
	done
	wait "$1" 2>/dev/null || true
}

free_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40001))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	echo "demo: no free port" >&2
	return 1
}

rcli() {
	redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}

# Sum of taskmill_tasks_total over every task and outcome.
tasks_done() {
	curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/metrics" |
		awk '/^taskmill_tasks_total[{ ]/ { n += $NF } END { print n + 0 }'
}

heading "redis"
REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --dir "$DIR" --save '' \
	--appendonly no --daemonize no --logfile "$DIR/redis.log" &
REDIS_PID=$!
wait_for '[[ $(rcli ping) == PONG ]]' 10 "redis-server to answer"
echo "redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') on 127.0.0.1:$REDIS_PORT (data in $DIR)"

heading "config ($DIR/taskmill.yaml)"
HTTP_PORT=$(free_port)
cat >"$DIR/taskmill.yaml" <<YAML
broker: { url: redis://127.0.0.1:$REDIS_PORT/0 }
pool: { kind: thread, size: 4 }
plugin_dir: $BUILD/plugins
http: { listen: 127.0.0.1:$HTTP_PORT }
shutdown_timeout: 10s
log: { level: info, format: text }
tasks:
  add:     { plugin: add.so, queue: demo.add, on_error: reject }
  noop:    { plugin: noop.so, queue: demo.noop }
  sleep:   { plugin: sleep.so, queue: demo.sleep }
  fail:    { plugin: fail.so, queue: demo.fail, on_error: reject }
  journal: { plugin: journal.so, queue: demo.journal, config: { path: $DIR/journal.txt } }
YAML
cat "$DIR/taskmill.yaml"
if ! "$TM" check -c "$DIR/taskmill.yaml" 2>"$DIR/check.log"; then
	cat "$DIR/check.log" >&2
	exit 1
fi
echo "taskmill check: config valid"

heading "daemon"
"$TM" run -c "$DIR/taskmill.yaml" 2>"$DIR/taskmill.log" &
DAEMON_PID=$!
wait_for '[[ $(curl -s -o /dev/null -w "%{http_code}" http://127.0.0.1:$HTTP_PORT/ping) == 200 ]]' \
	20 "/ping to answer 200"
echo "$("$TM" --version) running, pid $DAEMON_PID, http://127.0.0.1:$HTTP_PORT (/ping is 200)"

heading "emitting sample tasks"
emitted=0
emit() {
	local id
	id=$("$TM" emit -c "$DIR/taskmill.yaml" "$1" "$2")
	printf '  %-8s %-28s -> %s\n' "$1" "$2" "$id"
	emitted=$((emitted + 1))
}
for i in 1 2 3 4 5 6; do
	emit add "{\"a\":$i,\"b\":$((i * 10))}"
done
emit add '{"a":1,"b":"two"}'
# a body from standard input (-), as for bodies too large for an argument
id=$(printf '{"a":100,"b":1}' | "$TM" emit -c "$DIR/taskmill.yaml" add -)
printf '  %-8s %-28s -> %s\n' add "- < {\"a\":100,\"b\":1}" "$id"
emitted=$((emitted + 1))
for i in 1 2 3 4 5; do
	emit noop "{\"n\":$i}"
done
emit sleep '{"ms":200}'
emit sleep '{"ms":400}'
for i in 1 2 3; do
	emit journal "{\"line\":$i}"
done
emit fail '{"mode":"error"}'
emit fail '{"mode":"reject"}'
echo "$emitted tasks emitted"

wait_for "[[ \$(tasks_done) -ge $emitted ]]" 30 "the tasks to be processed"
echo "all $emitted processed"

heading "GET /status"
code=$(curl -s -o "$DIR/status.json" -w '%{http_code}' "http://127.0.0.1:$HTTP_PORT/status" || true)
if [[ $code == 200 ]]; then
	cat "$DIR/status.json"
	echo
else
	echo "(/status answered $code; skipped)"
fi

heading "GET /metrics (taskmill_tasks_total, non-zero series)"
curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" |
	awk '/^taskmill_tasks_total[{ ]/ && $NF != 0' | grep . || echo "(none)"

heading "dead-letter queues (taskmill dlq list)"
"$TM" dlq -c "$DIR/taskmill.yaml" list | sed 's/^/  /'
for task in add fail; do
	echo "$task:"
	"$TM" dlq -c "$DIR/taskmill.yaml" list "$task" | sed 's/^/  /'
done
echo "journal ($DIR/journal.txt):"
sed 's/^/  /' "$DIR/journal.txt" 2>/dev/null || echo "  (not written)"

heading "stopping"
kill -TERM "$DAEMON_PID"
if wait_gone "$DAEMON_PID" 15; then
	echo "daemon stopped"
	DAEMON_PID=
else
	echo "daemon did not stop within 15s" >&2
	exit 1
fi
