# A delayed message on Redis survives kill -9 of every daemon and of
# redis-server itself (append-only file, fsync always): after both come
# back, each delayed message runs exactly once, no earlier than its time.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"
priv_redis_start
REDIS_PORT=$PRIV_REDIS_PORT
. "$TM_SRCDIR/tests/integration/lib_delay.sh"
for w in 1 2; do
	delay_config "$TEST_DIR/w$w.yaml" write=write_config queue=q.durable \
		instance=w$w http_port="$(free_port)"
	eval "PORT$w=\$HTTP_PORT"
done
delay_start_two

tm emit -c "$TEST_DIR/w1.yaml" stamp '{"n":"a"}' --delay 6s
assert_eq 0 "$TM_RC" "emit --delay 6s"
tm emit -c "$TEST_DIR/w1.yaml" stamp '{"n":"b"}' --delay 7s
assert_eq 0 "$TM_RC" "emit --delay 7s"
assert_eq 2 "$(rcall ZCARD q.durable.scheduled)" "members waiting"
due_a=$(rcall ZSCORE q.durable.scheduled "$(rcall ZRANGE q.durable.scheduled 0 0)")

kill -KILL "$PID1" "$PID2"
wait "$PID1" "$PID2" 2>/dev/null || true
priv_redis_kill
note "every daemon and redis-server killed with SIGKILL"
priv_redis_start
assert_eq 2 "$(rcall ZCARD q.durable.scheduled)" "members after the restart"
delay_start_two
delay_wait_runs 2 60
assert_eq 2 "$(wc -l <"$OUT")" "each delayed message ran once"
ran_a=$(awk '/"a"/ {print $1; exit}' "$OUT")
assert_ge "$due_a" "$ran_a" "not before its time"
assert_eq 0 "$(rcall ZCARD q.durable.scheduled)" "nothing left waiting"
delay_stop_two
