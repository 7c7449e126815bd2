# maxlen never trims work another consumer group still needs. The stream has
# a second group g2 (made here) besides the daemon's; with maxlen 50 and the
# daemon done with all 200 entries, the stream keeps all 200 while g2 has
# not read them, and while g2 holds them pending. Once g2 acknowledges the
# first 100 the daemon trims exactly those; once it acknowledges the rest,
# the stream comes down to the cap: the newest 50.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

N=200
MAXLEN=50
CONF=$TEST_DIR/taskmill.yaml
JOURNAL=$TEST_DIR/journal.txt
# claim_idle 1s: upkeep every 250 ms, a trim round every second
write_config "$CONF" <<YAML
tasks:
  journal:
    plugin: journal.so
    queue: q.ml
    maxlen: $MAXLEN
    claim_idle: 1s
    config: { path: $JOURNAL }
YAML

rcall XGROUP CREATE q.ml g2 0 MKSTREAM >/dev/null
xadd_bulk q.ml "$N" '{"n":%d}'
xids q.ml >"$TEST_DIR/ids.all"

start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_total 'task="journal",outcome="success"' "$N" 20
wait_until '[[ $(xpending q.ml) == 0 ]]' 10
assert_eq "$N 0 0" "$(stream_state q.ml)" "the daemon's group: acked/pending/undelivered"
assert_eq "0 0 $N" "$(stream_state q.ml g2)" "g2: acked/pending/undelivered"

# g2 has read nothing: no trim, over several trim rounds.
hold_for 3 "[[ \$(xlen q.ml) == $N ]]"

# g2 reads everything but acknowledges nothing yet: still no trim.
rcall XREADGROUP GROUP g2 c2 COUNT "$N" STREAMS q.ml '>' >/dev/null
assert_eq "0 $N 0" "$(stream_state q.ml g2)" "g2 after reading: acked/pending/undelivered"
hold_for 3 "[[ \$(xlen q.ml) == $N ]]"

# g2 acknowledges the oldest 100: those (and only those) may go.
mapfile -t ids <"$TEST_DIR/ids.all"
assert_eq 100 "$(rcall XACK q.ml g2 "${ids[@]:0:100}")" "XACK of the first 100 by g2"
wait_until '[[ $(xlen q.ml) -le 100 ]]' 10
hold_for 2 '[[ $(xlen q.ml) == 100 ]]'
assert_eq "${ids[100]}" "$(xids q.ml | head -n 1)" "oldest entry left (g2's oldest pending)"

# g2 acknowledges the rest: down to the cap, the newest entries kept.
assert_eq 100 "$(rcall XACK q.ml g2 "${ids[@]:100}")" "XACK of the other 100 by g2"
wait_until "[[ \$(xlen q.ml) -le $((MAXLEN + 10)) ]]" 10
hold_for 2 "[[ \$(xlen q.ml) -ge $MAXLEN ]]"
len=$(xlen q.ml)
note "XLEN q.ml: $len"
assert_ge "$MAXLEN" "$len" "XLEN q.ml after g2 acknowledged everything"
assert_le "$((MAXLEN + 10))" "$len" "XLEN q.ml after g2 acknowledged everything"
assert_eq "$(tail -n "$len" "$TEST_DIR/ids.all" | paste -sd ' ')" "$(xids q.ml | paste -sd ' ')" \
	"entries kept (the newest)"

# New work still flows.
xadd_bulk q.ml 30 '{"n":%d,"late":true}'
wait_metric taskmill_tasks_total 'task="journal",outcome="success"' $((N + 30)) 10
assert_eq $((N + 30)) "$(wc -l <"$JOURNAL")" "journal lines"
assert_eq "$N" "$(cut -d' ' -f1 "$JOURNAL" | head -n "$N" | sort -u | wc -l)" "distinct ids journaled"
assert_eq 0 "$(xlen q.ml.dlq)" "XLEN q.ml.dlq"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
