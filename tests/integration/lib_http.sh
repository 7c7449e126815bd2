# shellcheck shell=bash
# Extra helpers for the HTTP tests (tests/integration/test_http_*.sh).
# Sourced by those tests, after lib.sh (run.sh sources lib.sh first):
#
#   . "$TM_SRCDIR/tests/integration/lib_http.sh"
#
# Adds: the tools these tests need (jq, promtool, node with the AsyncAPI
# parser: scripts/install-deps.sh installs them), requests with status,
# headers and body kept apart, JSON field checks, a config writer with an
# http.token, and a private redis-server that a test may stop and start.

: "${TM_BIN:?lib_http.sh needs lib.sh sourced first}"

TMH_NODE_DIR=$TM_SRCDIR/tests/integration

# ------------------------------------------------------------- clean-up

# What these tests start themselves (a private redis-server, background
# request loops) is ended by lib.sh's clean-up, through tm_on_exit.
tmh_on_exit() {
	tm_on_exit "$1"
}

# ---------------------------------------------------------------- tools

# need_tools TOOL...: skip the test (a failure under CI) when one is missing.
need_tools() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 ||
			skip "'$t' not found; run scripts/install-deps.sh"
	done
}

# need_asyncapi_parser: node and @asyncapi/parser in tests/integration.
need_asyncapi_parser() {
	need_tools node
	[[ -f $TMH_NODE_DIR/node_modules/@asyncapi/parser/package.json ]] ||
		skip "@asyncapi/parser not installed in tests/integration/node_modules; run scripts/install-deps.sh"
}

# asyncapi_check FILE: run the official parser on FILE; its report goes to
# TEST_DIR/asyncapi.log (shown on failure). Fails the test on any error.
asyncapi_check() {
	local rc=0
	node "$TMH_NODE_DIR/asyncapi-check.mjs" "$1" >"$TEST_DIR/asyncapi.log" 2>&1 || rc=$?
	sed 's/^/# asyncapi: /' "$TEST_DIR/asyncapi.log" >&2
	((rc == 0)) || fail "@asyncapi/parser found errors in $1 (status $rc)"
}

# ------------------------------------------------------------- requests

# req [CURL_ARGS...] PATH: one request to the daemon (HTTP_PORT). Sets
# RESP_CODE ("000" without an answer), RESP_BODY (a file) and RESP_HEADERS
# (a file, header names as sent). Never fails.
RESP_BODY=$TEST_DIR/resp.body
RESP_HEADERS=$TEST_DIR/resp.headers
RESP_CODE=000
req() {
	local path=${*: -1} args=("${@:1:$#-1}")
	RESP_CODE=$(curl -s -m 10 -o "$RESP_BODY" -D "$RESP_HEADERS" \
		-w '%{http_code}' "${args[@]}" \
		"http://127.0.0.1:$HTTP_PORT$path" 2>/dev/null) || true
	[[ -n $RESP_CODE ]] || RESP_CODE=000
}

# expect_code CODE [CURL_ARGS...] PATH: req, and fail unless it answered
# CODE.
expect_code() {
	local want=$1
	shift
	req "$@"
	if [[ $RESP_CODE != "$want" ]]; then
		fail "${*: -1}: expected HTTP $want, got $RESP_CODE: $(head -c 300 "$RESP_BODY" 2>/dev/null)"
	fi
}

# resp_header NAME: the value of a header of the last response ("" if none).
resp_header() {
	awk -v n="$(tr '[:upper:]' '[:lower:]' <<<"$1")" '
		{ sub(/\r$/, "") }
		{ i = index($0, ":"); if (i == 0) next
		  if (tolower(substr($0, 1, i - 1)) == n) {
			v = substr($0, i + 1); sub(/^[ \t]+/, "", v); print v; exit } }
	' "$RESP_HEADERS"
}

# jqr EXPR: evaluate a jq expression on the last response body (raw output).
jqr() {
	jq -r "$1" "$RESP_BODY"
}

# expect_json EXPR [WHAT]: the jq expression is true on the last body.
expect_json() {
	local v
	v=$(jq -e "$1" "$RESP_BODY" 2>&1) ||
		fail "${2:-JSON check} failed: $1 (got ${v:-nothing}) on: $(head -c 600 "$RESP_BODY")"
}

# has_sample LINE: a fresh /metrics scrape holds exactly this line (unlike
# lib.sh's metric, which reads an absent series as 0).
has_sample() {
	local body
	body=$(curl -sf -m 5 "http://127.0.0.1:$HTTP_PORT/metrics" 2>/dev/null) || return 1
	grep -qxF "$1" <<<"$body"
}

# ---------------------------------------------------------------- config

# write_http_config FILE [token=TOKEN] [write_config options...] < TASKS:
# lib.sh's write_config, with `http.token: TOKEN` when given (written as
# is, so "\${VAR}" reaches the daemon's own expansion).
write_http_config() {
	local file=$1 token= opts=() kv
	shift
	for kv in "$@"; do
		case $kv in
		token=*) token=${kv#*=} ;;
		*) opts+=("$kv") ;;
		esac
	done
	write_config "$file" "${opts[@]}"
	if [[ -n $token ]]; then
		sed -i "s|^http: { listen: \\(.*\\) }\$|http: { listen: \\1, token: \"$token\" }|" "$file"
		grep -q 'token:' "$file" || fail "write_http_config: no http line to add the token to"
	fi
}

# ---------------------------------------------------------- private redis

# ------------------------------------------------------------ raw sockets

# raw_send NAME: send stdin to the HTTP port as raw bytes, keep whatever
# comes back in TEST_DIR/raw.NAME.out; at most 5 s. Never fails.
raw_send() {
	timeout -k 1 5 nc -N -w 3 127.0.0.1 "$HTTP_PORT" \
		>"$TEST_DIR/raw.$1.out" 2>/dev/null || true
}
