# The console's live controls in a real browser (Debian's chromium,
# headless, puppeteer-core: console-check.mjs live), against a daemon with
# two tasks, a schedule and http.token, strictly (no console error, no
# failed request): the schedules view (#/schedules) shows the configured
# schedule with its next slot as /api/v1/schedules gives it; Pause in the page stops the
# task's intake (its queue grows while messages are published, shown in
# the page) and Resume, pressed by keyboard, drains it; a message sent from
# the form with a delay shows in the Scheduled column and runs only after
# its delay. A screenshot of the page with live figures goes to the build
# directory (console.png). (docs/console.png is test_http_console_views.sh's
# dashboard.png.)
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl node
CHROMIUM=${TM_CHROMIUM:-/usr/bin/chromium}
[[ -x $CHROMIUM ]] || skip "chromium not found; run scripts/install-deps.sh"
[[ -f $TMH_NODE_DIR/node_modules/puppeteer-core/package.json ]] ||
	skip "puppeteer-core not installed in tests/integration/node_modules; run scripts/install-deps.sh"
export TM_CHROMIUM=$CHROMIUM
# Chromium keeps its profile and crash files under HOME
export HOME=$TEST_DIR/home
mkdir -p "$HOME"

TOKEN='console-T0ken'
CONF=$TEST_DIR/live.yaml
# the schedule's next slot is months away: it never fires during the test
write_http_config "$CONF" token="$TOKEN" <<YAML
tasks:
  add: { plugin: add.so, queue: q.live.add }
  rej: { plugin: fail.so, queue: q.live.rej, on_error: reject }
schedules:
  yearly: { task: add, cron: "0 3 1 1 *", body: { a: 1, b: 1 } }
YAML
start_daemon "$CONF"
wait_ping

rc=0
timeout -k 5 100 node "$TMH_NODE_DIR/console-check.mjs" live \
	"http://127.0.0.1:$HTTP_PORT" "$TOKEN" "$TM_BUILD/console.png" \
	>"$TEST_DIR/browser.live.log" 2>&1 || rc=$?
sed 's/^/# browser: /' "$TEST_DIR/browser.live.log" >&2
((rc == 0)) || fail "console-check.mjs live failed (status $rc): $(grep -m1 FAIL "$TEST_DIR/browser.live.log")"
[[ -s $TM_BUILD/console.png ]] || fail "no screenshot in $TM_BUILD/console.png"
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
