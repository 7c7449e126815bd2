# Deduplication when the look-up before running fails (here: an ACL user
# that may not MGET): the batch runs, a warning says why, and the script
# that acknowledges each success still records only the first one, so the
# later copies count as duplicates and no key records two successes.
PRIV_REDIS_PASS=adminsecret
priv_redis_start
ra() { priv_rcli "$@"; }
ra ACL SETUSER worker on '>w-pw' '~*' '&*' '+@all' '-mget' >/dev/null

JOURNAL=$TEST_DIR/journal.txt
: >"$JOURNAL"
HTTP_PORT=$(free_port)
CONF=$TEST_DIR/taskmill.yaml
cat >"$CONF" <<YAML
broker: { url: "redis://worker:w-pw@127.0.0.1:$PRIV_REDIS_PORT/0" }
pool: { kind: thread, size: 2 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HTTP_PORT }
log: { level: debug }
tasks:
  journal:
    plugin: journal.so
    queue: q.ddf
    dedup_ttl: 1m
    config: { path: $JOURNAL }
YAML

start_daemon "$CONF"
wait_ping
ra XADD q.ddf '*' body '{"n":"k"}' dedup_key k >/dev/null
wait_metric taskmill_tasks_total 'task="journal",outcome="success"' 1 10
for i in 1 2; do
	ra XADD q.ddf '*' body '{"n":"k"}' dedup_key k >/dev/null
done
wait_metric taskmill_tasks_total 'task="journal",outcome="duplicate"' 2 10
wait_until "[[ \$(grep -c '\"k\"' $JOURNAL) == 3 ]]" 10
assert_eq 1 "$(metric taskmill_tasks_total 'task="journal",outcome="success"')" "successes of key k"
grep -q 'dedup look-up failed: NOPERM' "$DAEMON_LOG" ||
	fail "no warning about the failed look-up in $DAEMON_LOG"
wait_until "[[ \$(ra XPENDING q.ddf taskmill | head -1) == 0 ]]" 10
assert_eq 200 "$(http_code /ping)" "/ping"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
