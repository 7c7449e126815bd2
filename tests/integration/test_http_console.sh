# The console at GET / in a real browser: Debian's chromium, headless,
# driven by puppeteer-core (tests/integration/console-check.mjs). Against
# a daemon with two tasks and http.token: the page asks for the token and
# shows an error for a wrong one; with it, the page loads with no console
# error, no failed request and no request to another origin; its figures
# match /api/v1/tasks; the dashboard's charts have axes and labels ("no
# data yet" while the daemon has no history); dead letters made with
# fail.so are listed from the task's link (a body holding markup renders
# as text), a row opens the message's page with its whole body, back and
# forward work, a search filters or says it cannot, "purge all" asks first
# naming the count, one is replayed through the page, Tab reaches every
# control, nothing passes a 640 px screen, and the send form sends add
# {"a":2,"b":3}. Without a token no control that changes something is
# shown and no body is asked for, the reasons given. The page's answers
# carry the security headers. (Pause, delays, schedules:
# test_http_console_live.sh; the other views: test_http_console_views.sh.)
. "$TM_SRCDIR/tests/integration/lib_console.sh"

TASKS=$(
	cat <<YAML
tasks:
  add: { plugin: add.so, queue: q.console.add }
  rej: { plugin: fail.so, queue: q.console.rej, on_error: reject }
YAML
)

# ---- 1: with http.token
console_start token <<<"$TASKS"

# the page and its assets, with the security headers, under 100 KiB
total=0
for p in / /console.css /console.js; do
	expect_code 200 "$p"
	assert_match "script-src 'self'" "$(resp_header Content-Security-Policy)" "$p Content-Security-Policy"
	assert_match "default-src 'none'" "$(resp_header Content-Security-Policy)" "$p Content-Security-Policy"
	assert_eq nosniff "$(resp_header X-Content-Type-Options)" "$p X-Content-Type-Options"
	assert_eq DENY "$(resp_header X-Frame-Options)" "$p X-Frame-Options"
	total=$((total + $(wc -c <"$RESP_BODY")))
done
expect_code 200 /
assert_match '^text/html' "$(resp_header Content-Type)" "/ Content-Type"
expect_code 200 /console.js
assert_match '^text/javascript' "$(resp_header Content-Type)" "/console.js Content-Type"
assert_le 102400 "$total" "the console's size in bytes"
expect_code 405 -X POST /
expect_code 404 /console.map

# work for the figures, and dead letters made with fail.so
for i in 1 2 3; do
	expect_code 201 "${AUTH[@]}" -X POST -d "{\"a\":$i,\"b\":1}" /api/v1/tasks/add/messages
done
expect_code 201 "${AUTH[@]}" -X POST -d '{"mode":"reject","n":1}' /api/v1/tasks/rej/messages
wait_metric taskmill_dead_letter_total 'task="rej"' 1 30
expect_code 201 "${AUTH[@]}" -X POST -d '{"mode":"reject","note":"<img src=x onerror=alert(1)>"}' /api/v1/tasks/rej/messages
wait_metric taskmill_dead_letter_total 'task="rej"' 2 30
wait_metric taskmill_tasks_total 'task="add",outcome="success"' 3 30
# and one whose body (100010 bytes) is over the 64 KiB a page shows
rcall EVAL "redis.call('XADD', KEYS[1], '*', 'body',
  '{\"big\":\"' .. string.rep('z', 100000) .. '\"}', 'task', 'rej',
  'error', 'test', 'attempts', '1') return 1" 1 q.console.rej.dlq >/dev/null

console_browser token 180 console-check.mjs token "http://127.0.0.1:$HTTP_PORT" \
	"$TOKEN" "$TEST_DIR/console-token.png"
stop_daemon

# ---- 2: without a token the page is read-only
console_start open open <<<"$TASKS"
console_browser readonly 180 console-check.mjs readonly \
	"http://127.0.0.1:$HTTP_PORT"
console_stop
