# Trimming never removes entries another group has not read, even while
# that group's pending list changes between reads. Group g2 consumes a
# large backlog one entry at a time, acknowledging each before reading the
# next, so its pending count flips between 1 and 0 thousands of times a
# second; meanwhile the daemon (its own group, maxlen 100) drains the
# stream and trims it every few hundred ms. At the end every entry g2 has
# not read yet must still be in the stream. g2 reads at most 80,000 of the
# 100,000 entries (4,000 rounds of 20, one every 4 ms or more): on a fast
# machine it is stopped long before, and on a loaded one, where the
# daemon's start and drain can take longer than g2's whole pass, it still
# never reaches the end, so there is always something left to protect.
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
	for ((k = 0; k < 4000; k++)); do
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

# g2's position, taken in one script with what must remain after it. Redis
# may still run commands the killed pipe had sent, so wait until g2 stands
# still: its position then bounds every later trim.
G2_STATE="
	local last, nread
	for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
		local name, l, r
		for i = 1, #g, 2 do
			if g[i] == 'name' then name = g[i + 1] end
			if g[i] == 'last-delivered-id' then l = g[i + 1] end
			if g[i] == 'entries-read' then r = g[i + 1] end
		end
		if name == 'g2' then last, nread = l, r end
	end
	local at = redis.call('XRANGE', KEYS[1], last, last)
	local n = at[1] and string.match(at[1][2][2], '\"n\":(%d+)') or 'gone'
	local left = 0
	for _, e in ipairs(redis.call('XRANGE', KEYS[1], '(' .. last, '+')) do
		left = left + 1
	end
	return {last, tostring(nread), n, left}"
prev=
for ((i = 0; i < 50; i++)); do
	state=$(rcall EVAL "$G2_STATE" 1 q.trim | paste -sd ' ')
	[[ $state == "$prev" ]] && break
	prev=$state
	sleep 0.2
done
read -r last nread body left <<<"$state"
note "g2 read about $nread of $N (last $last, n=$body); $left entries after it; XLEN $(xlen q.trim)"
(( nread < N )) || fail "g2 read the whole backlog: nothing was left to protect"
# Bodies are {"n":1} .. {"n":N} in stream order. The trim bound keeps g2's
# last-delivered entry itself, so its n says how many entries follow it
# (entries-read is only Redis's estimate once a stream was trimmed).
[[ $body != gone ]] || fail "g2's last-delivered entry $last was trimmed"
assert_eq $((N - body)) "$left" "entries g2 has not read, still in the stream"
# the race happened: the daemon trimmed, more than once, with g2 behind
trims=$(grep -c 'trimmed [0-9]* entries' "$DAEMON_LOG" || true)
note "the daemon trimmed $trims times"
((trims >= 2)) || fail "the daemon trimmed only $trims times with g2 behind"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
