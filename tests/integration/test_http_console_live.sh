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
. "$TM_SRCDIR/tests/integration/lib_console.sh"

# the schedule's next slot is months away: it never fires during the test
console_start live <<YAML
tasks:
  add: { plugin: add.so, queue: q.live.add }
  rej: { plugin: fail.so, queue: q.live.rej, on_error: reject }
schedules:
  yearly: { task: add, cron: "0 3 1 1 *", body: { a: 1, b: 1 } }
YAML

console_browser live 100 console-check.mjs live "http://127.0.0.1:$HTTP_PORT" \
	"$TOKEN" "$TM_BUILD/console.png"
[[ -s $TM_BUILD/console.png ]] || fail "no screenshot in $TM_BUILD/console.png"
console_stop
