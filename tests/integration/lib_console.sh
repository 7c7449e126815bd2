# shellcheck shell=bash
# What the console's browser tests (tests/integration/test_http_console*.sh)
# share. Sourced by them, after lib.sh (run.sh sources lib.sh first):
#
#   . "$TM_SRCDIR/tests/integration/lib_console.sh"
#
# Sources lib_http.sh; skips the test without node, Debian's chromium
# (TM_CHROMIUM, default /usr/bin/chromium) or puppeteer-core in
# tests/integration/node_modules; gives Chromium a HOME of its own in
# TEST_DIR (its profile and crash files); adds TOKEN, console_start,
# console_browser and console_stop.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq curl node
CHROMIUM=${TM_CHROMIUM:-/usr/bin/chromium}
[[ -x $CHROMIUM ]] || skip "chromium not found; run scripts/install-deps.sh"
[[ -f $TMH_NODE_DIR/node_modules/puppeteer-core/package.json ]] ||
	skip "puppeteer-core not installed in tests/integration/node_modules; run scripts/install-deps.sh"
export TM_CHROMIUM=$CHROMIUM
export HOME=$TEST_DIR/home
mkdir -p "$HOME"

# the http.token of the daemons console_start starts with a token
TOKEN='console-T0ken'
# shellcheck disable=SC2034 # used by the tests that source this file
AUTH=(-H "Authorization: Bearer $TOKEN")

# console_start NAME [open]: start a daemon with the tasks (and schedules)
# given as YAML on stdin, in TEST_DIR/NAME.yaml, with http.token = TOKEN
# (none with "open"), and wait until it is ready.
console_start() {
	local conf=$TEST_DIR/$1.yaml
	if [[ ${2:-} == open ]]; then
		write_http_config "$conf"
	else
		write_http_config "$conf" token="$TOKEN"
	fi
	start_daemon "$conf"
	wait_ping
}

# console_browser NAME SECONDS SCRIPT [ARGS...]: run node SCRIPT ARGS...
# (a script of tests/integration) for at most SECONDS; its lines go to
# TEST_DIR/browser.NAME.log and to the test's log. Fails the test, naming
# the first FAIL line, unless it exits 0.
console_browser() {
	local name=$1 secs=$2 script=$3 rc=0
	shift 3
	timeout -k 5 "$secs" node "$TMH_NODE_DIR/$script" "$@" \
		>"$TEST_DIR/browser.$name.log" 2>&1 || rc=$?
	sed 's/^/# browser: /' "$TEST_DIR/browser.$name.log" >&2
	((rc == 0)) || fail "$script ($name) failed (status $rc): $(grep -m1 FAIL "$TEST_DIR/browser.$name.log" || true)"
}

# console_stop: stop the daemon; it must exit 0 on SIGTERM.
console_stop() {
	local rc=0
	stop_daemon || rc=$?
	assert_eq 0 "$rc" "daemon exit status after SIGTERM"
}
