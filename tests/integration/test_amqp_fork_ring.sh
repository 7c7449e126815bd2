# Fork pool on RabbitMQ, request/reply through the shared rings (fork/ring.h)
# and, past their size, the worker's socket: `taskmill emit --wait` sends
# bodies from a few bytes to 5 MiB to an echo task and gets each back byte
# for byte. Bodies over 1 MiB are larger than the request ring, results
# over 2 KiB do not fit an answer ring slot: both sides take the socket.
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
CONF=$TEST_DIR/taskmill.yaml
Q=$AQ.echo
ECHO=$TM_BUILD/test-plugins/echo.so
[[ -f $ECHO ]] || fail "$ECHO not built (make test-plugins)"
write_amqp_config "$CONF" pool_kind=fork pool_size=2 <<YAML
tasks:
  echo: { plugin: $ECHO, queue: $Q, max_payload: 8MiB, timeout: 60s }
YAML

start_daemon "$CONF"
wait_ping

n=0
for size in 10 1000 9000 100000 1048000 3145728 5242880 20; do
	body=$TEST_DIR/body.$size
	{
		printf '{"pad":"'
		head -c "$size" /dev/zero | tr '\0' x
		printf '"}'
	} >"$body"
	tm emit -c "$CONF" echo - --wait 60 <"$body"
	assert_eq 0 "$TM_RC" "emit --wait of a body of $size bytes: $(head -c 300 "$TM_ERR")"
	# emit prints the answer and a newline
	if ! { cat "$body"; echo; } | cmp -s - "$TM_OUT"; then
		fail "the answer to a body of $size bytes differs: $(stat -c %s "$TM_OUT") bytes, starting $(head -c 40 "$TM_OUT")"
	fi
	n=$((n + 1))
done
assert_eq "$n" "$(metric taskmill_tasks_total 'task="echo",outcome="success"')" "echo successes"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
