# Trimming never removes entries another group has not read, even while
# that group's pending list changes between reads. Group g2 consumes a
# large backlog one entry at a time, acknowledging each before reading the
# next, so its pending count flips between 1 and 0 thousands of times a
# second; meanwhile the daemon (its own group, maxlen 100) drains the
# stream and trims it every few hundred ms. At the end every entry g2 has
# not read yet must still be in the stream.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N=100000
CONF=$TEST_DIR/taskmill.yaml
write_config "$CONF" <<YAML
tasks:
  noop: { plugin: noop.so, queue: q.trim, maxlen: 100, claim_idle: 200ms }
YAML
rcall XGROUP CREATE q.trim g2 0 MKSTREAM >/dev/null
xadd_bulk q.trim "$N" '{"n":%d}'
note "published $N entries"

ACK=$(resp EVAL "local p = redis.call('XPENDING', KEYS[1], 'g2', '-', '+', 10)
	for _, e in ipairs(p) do redis.call('XACK', KEYS[1], 'g2', e[1]) end
	return #p" 1 q.trim)
READ=$(resp XREADGROUP GROUP g2 c2 COUNT 1 STREAMS q.trim '>')
PAIRS=
for i in $(seq 1 20); do PAIRS+=$ACK$'\n'$READ$'\n'; done
(
	while :; do
		printf '%s' "$PAIRS"
		sleep 0.004
	done | rcli --pipe >/dev/null 2>&1
) &
FLIPPER=$!
tmr_on_exit "tmr_kill $FLIPPER"
tmr_on_exit "pkill -P $FLIPPER 2>/dev/null || true"

start_daemon "$CONF"
wait_ping
# the daemon drains its group, then trims as g2 goes on
wait_until "[[ \$(stream_state q.trim | cut -d' ' -f3) == 0 ]]" 60
sleep 4
kill "$FLIPPER" 2>/dev/null || true
pkill -P "$FLIPPER" 2>/dev/null || true
wait "$FLIPPER" 2>/dev/null || true

# what g2 has read (entries-read) and what must remain after its position
read -r last nread <<<"$(rcall EVAL "
	for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
		local name, last, nread
		for i = 1, #g, 2 do
			if g[i] == 'name' then name = g[i + 1] end
			if g[i] == 'last-delivered-id' then last = g[i + 1] end
			if g[i] == 'entries-read' then nread = g[i + 1] end
		end
		if name == 'g2' then return {last, nread} end
	end
	return {}" 1 q.trim | paste -sd ' ')"
left=$(rcall EVAL "local n = 0
	for _, e in ipairs(redis.call('XRANGE', KEYS[1], '(' .. ARGV[1], '+')) do n = n + 1 end
	return n" 1 q.trim "$last")
note "g2 read $nread of $N (last $last); $left entries after it; XLEN $(xlen q.trim)"
(( nread < N )) || fail "g2 read the whole backlog: the race had no time to happen"
# Bodies are {"n":1} .. {"n":N} in stream order. The trim bound keeps g2's
# last-delivered entry itself, so its n says how many entries follow it.
# (entries-read above is only Redis's estimate once a stream was trimmed:
# it is not used for the count.)
body=$(rcall XRANGE q.trim "$last" "$last" | sed -n 's/.*"n":\([0-9]*\).*/\1/p' | head -n 1)
[[ -n $body ]] || fail "g2's last-delivered entry $last was trimmed"
assert_eq $((N - body)) "$left" "entries g2 has not read, still in the stream"
grep -q 'trimmed' "$DAEMON_LOG" || fail "the daemon never trimmed"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
