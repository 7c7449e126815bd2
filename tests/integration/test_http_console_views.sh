# The console's views in a real browser (Debian's chromium, headless,
# puppeteer-core: console-views.mjs) against a daemon with four tasks and
# http.token: the tasks table fits 1280x800 without horizontal scrolling
# and shows Pause at 1280, 1400 and 1920 px; the dashboard charts the
# fleet's history (lines, axes, values on hover and by keyboard); a task's
# page, the daemons table, delayed messages (run now, delete, a page per
# message), a dead-letter search with its bulk replay, and a dead letter's
# page replaying it; at 640 px (200 % zoom) no view passes the screen. The
# endpoints a daemon may not have yet (history, daemons, delayed, the
# search) are answered in the browser from fixtures of the documented
# contract; no request leaves the daemon's origin. Screenshots stay in the
# test's directory (dashboard.png, daemons.png, message.png,
# dashboard-640.png).
. "$TM_SRCDIR/tests/integration/lib_console.sh"

console_start views <<YAML
tasks:
  add: { plugin: add.so, queue: q.views.add }
  rej: { plugin: fail.so, queue: q.views.rej, on_error: reject }
  resize-thumbnails: { plugin: add.so, queue: q.views.resize }
  send-welcome-email: { plugin: fail.so, queue: q.views.mail, on_error: reject }
YAML
for i in 1 2 3; do
	expect_code 201 "${AUTH[@]}" -X POST -d "{\"a\":$i,\"b\":1}" /api/v1/tasks/add/messages
	expect_code 201 "${AUTH[@]}" -X POST -d "{\"a\":$i,\"b\":2}" /api/v1/tasks/resize-thumbnails/messages
done
expect_code 201 "${AUTH[@]}" -X POST -d '{"mode":"reject"}' /api/v1/tasks/send-welcome-email/messages
wait_metric taskmill_dead_letter_total 'task="send-welcome-email"' 1 30

console_browser views 90 console-views.mjs "http://127.0.0.1:$HTTP_PORT" "$TOKEN" \
	"$TEST_DIR"
[[ -s $TEST_DIR/dashboard.png ]] || fail "no screenshot in $TEST_DIR/dashboard.png"
console_stop
