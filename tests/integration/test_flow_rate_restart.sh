# rate_limit on Redis survives the broker going away: a daemon limited to
# 20/s loses its Redis half-way (the token requests fail with the
# connection), reconnects with the other reads when it is back and goes on
# at the limit. Every message runs, nothing fails, nothing stays pending,
# and the limit still holds over every window after the restart.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N=200
RATE=20
WINDOW_S=5
JOURNAL=$TEST_DIR/runs.txt
CONF=$TEST_DIR/taskmill.yaml

priv_redis_start "$TEST_DIR/redis"
# shellcheck disable=SC2034 # read by lib.sh: rcall, write_config, ...
REDIS_PORT=$PRIV_REDIS_PORT

write_config "$CONF" <<YAML
tasks:
  limited:
    plugin: $TM_BUILD/test-plugins/flowlog.so
    queue: q.rr
    prefetch: 16
    rate_limit: $RATE/s
    config: { path: $JOURNAL }
YAML
xadd_bulk q.rr "$N" '{"n":%d}'
start_daemon "$CONF"
wait_ping
wait_until "[[ \$(wc -l <'$JOURNAL') -ge 40 ]]" 60

priv_redis_stop
wait_metric taskmill_broker_up '' 0 30
# long enough for the lane to fail a request and back off
sleep 1
priv_redis_start "$TEST_DIR/redis"
wait_metric taskmill_broker_up '' 1 60
T_BACK=$(now_ms)

wait_until "[[ \$(cut -d' ' -f1 '$JOURNAL' | sort -u | wc -l) -ge $N ]]" 120
wait_until '[[ $(xpending q.rr taskmill) == 0 ]]' 30
for o in error rejected timeout crashed invalid; do
	assert_eq 0 "$(metric taskmill_tasks_total "task=\"limited\",outcome=\"$o\"")" "outcome $o"
done
assert_eq 0 "$(metric taskmill_retries_total 'task="limited"')" "retries"

# after the restart: at most 20/s + 10% over every window
MAX=$(awk -v from=$((T_BACK * 1000)) '$3 >= from { print $3 }' "$JOURNAL" | sort -n |
	awk -v w=$((WINDOW_S * 1000000)) '
		{ t[NR] = $1 }
		END {
			j = 1; best = 0
			for (i = 1; i <= NR; i++) {
				while (t[i] - t[j] >= w) j++
				if (i - j + 1 > best) best = i - j + 1
			}
			print best
		}')
note "most runs started in a ${WINDOW_S}s window after the restart: $MAX"
assert_le $((RATE * WINDOW_S * 110 / 100)) "$MAX" "runs in one ${WINDOW_S}s window after the restart"
stop_daemon
