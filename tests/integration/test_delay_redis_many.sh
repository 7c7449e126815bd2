# 10,000 delayed messages on Redis with random due times over 20 s, two
# daemons promoting the same scheduled set: each message runs exactly
# once, none before its time; the lateness (run start minus due time) is
# reported, p50/p99/max (reported, not asserted: the machine is shared).
. "$TM_SRCDIR/tests/integration/lib_delay.sh"
N=10000
for w in 1 2; do
	delay_config "$TEST_DIR/w$w.yaml" write=write_config queue=q.many \
		task='prefetch: 64' instance=w$w http_port="$(free_port)" \
		log_level=info
	eval "PORT$w=\$HTTP_PORT"
done
delay_start_two

base=$(($(now_ms) + 1000))
out=$(
	for ((i = 1; i <= N; i++)); do
		due=$((base + RANDOM % 20000))
		resp ZADD q.many.scheduled "$due" "{\"id\":\"m$i\",\"body\":{\"i\":$i,\"due\":$due}}"
	done | rcli --pipe 2>&1
) || fail "redis-cli --pipe: $out"
[[ $out =~ errors:\ 0,\ replies:\ $N ]] || fail "ZADD: $out"
note "$N members added, due from $base over 20 s"
delay_wait_runs "$N" 120
assert_eq 0 "$(rcall ZCARD q.many.scheduled)" "members left in the set"
delay_lateness "$N"
delay_stop_two
