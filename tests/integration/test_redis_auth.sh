# AUTH and SELECT from the broker URL: a password-protected Redis with an
# ACL user, the password given by password_file (never in the URL), and a
# database other than 0. Credentials never show in logs or metrics.
PRIV_REDIS_PASS=adminsecret
priv_redis_start
PORT=$PRIV_REDIS_PORT
ra() { priv_rcli "$@"; }
ra ACL SETUSER worker on '>s3cr3t-pw' '~*' '&*' '+@all' >/dev/null

printf 's3cr3t-pw\n' >"$TEST_DIR/secret"
chmod 0600 "$TEST_DIR/secret"
HP=$(free_port)
CONF=$TEST_DIR/taskmill.yaml
cat >"$CONF" <<YAML
broker:
  url: redis://worker@127.0.0.1:$PORT/3
  password_file: $TEST_DIR/secret
pool: { kind: thread, size: 2 }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HP }
log: { level: debug }
tasks:
  noop: { plugin: noop.so, queue: q.auth }
YAML
HTTP_PORT=$HP

id=$("$TM_BIN" emit -c "$CONF" noop '{"x":1}')
assert_match '^[0-9]+-[0-9]+$' "$id" "emit through AUTH"
assert_eq 1 "$(ra -n 3 XLEN q.auth)" "entry in database 3"
assert_eq 0 "$(ra -n 0 XLEN q.auth)" "nothing in database 0"

start_daemon "$CONF"
wait_ping
wait_metric taskmill_tasks_total 'task="noop",outcome="success"' 1 10
assert_eq 0 "$(ra -n 3 XPENDING q.auth taskmill | head -1)" "pending in db 3"
stop_daemon

# A wrong password: emit fails with a clear error (exit 1), the daemon
# keeps retrying and /ping stays 503, and no password shows anywhere.
printf 'wrong-pw\n' >"$TEST_DIR/secret"
rc=0
err=$("$TM_BIN" emit -c "$CONF" noop '{}' 2>&1) || rc=$?
assert_eq 1 "$rc" "emit exit status with a wrong password"
assert_match 'AUTH' "$err" "emit error names AUTH"
start_daemon "$CONF"
wait_until "[[ \$(http_code /healthz) == 200 ]]" 10
assert_eq 503 "$(http_code /ping)" "/ping with a refused AUTH"
stop_daemon
if grep -rq -e 's3cr3t-pw' -e 'wrong-pw' -e adminsecret "$TEST_DIR"/daemon.*.log; then
	fail "a password shows in the daemon log"
fi
true
