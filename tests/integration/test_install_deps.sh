# scripts/install-deps.sh: `make demo` (--demo) installs only the build
# dependencies, redis-server and curl, never Node or an npm package, and
# stops no service; `make check` (the full mode) installs everything the
# tests need, the AsyncAPI parser and modelina included. Run against a copy
# of the script with stand-ins for dpkg-query, apt-get, node and npm that
# only record their calls, so nothing on this machine changes.
SCRIPT=$TM_SRCDIR/scripts/install-deps.sh
TREE=$TEST_DIR/tree
FAKES=$TEST_DIR/fakes
CALLS=$TEST_DIR/calls.log
mkdir -p "$TREE/scripts" "$TREE/tests/integration" "$FAKES"
cp "$SCRIPT" "$TREE/scripts/"
: >"$CALLS"

# stand_in NAME BODY: a stand-in command that logs its call, then runs BODY
stand_in() {
	printf '#!/bin/sh\necho "%s $*" >>"%s"\n%s\n' "$1" "$CALLS" "$2" >"$FAKES/$1"
	chmod +x "$FAKES/$1"
}
stand_in dpkg-query 'echo installed'   # every Debian package is there
stand_in apt-get 'exit 1'
stand_in sudo 'exit 1'
stand_in systemctl 'exit 0'
stand_in service 'exit 0'
stand_in node 'exit 1'
# npm "installs" by writing the package.json files the script checks
stand_in npm 'while [ $# -gt 0 ]; do [ "$1" = --prefix ] && d=$2; shift; done
for p in @asyncapi/parser @asyncapi/modelina puppeteer-core ioredis amqplib @opentelemetry/api @opentelemetry/sdk-trace-base @opentelemetry/core protobufjs; do mkdir -p "$d/node_modules/$p" && echo "{}" >"$d/node_modules/$p/package.json"; done'

# a PATH with the stand-ins first, and one without any node or npm at all
TOOLS=$TEST_DIR/tools
mkdir -p "$TOOLS"
for t in bash dirname cat mkdir chmod rm tee; do
	ln -s "$(command -v "$t")" "$TOOLS/$t"
done
NO_NODE_PATH=$TOOLS
FAKE_PATH=$FAKES:$TOOLS

# ---- the package lists of each mode
demo=$(PATH=$NO_NODE_PATH "$TREE/scripts/install-deps.sh" --demo --list) ||
	fail "install-deps.sh --demo --list failed"
full=$(PATH=$NO_NODE_PATH "$TREE/scripts/install-deps.sh" --list) ||
	fail "install-deps.sh --list failed"
note "demo: $(paste -sd ' ' <<<"$demo")"
note "full: $(paste -sd ' ' <<<"$full")"
for pkg in build-essential pkg-config libhiredis-dev librabbitmq-dev libcjson-dev \
	libyaml-dev libmicrohttpd-dev libprotobuf-c-dev protobuf-c-compiler \
	libcurl4-openssl-dev redis-server curl; do
	grep -qx "$pkg" <<<"$demo" || fail "the demo mode does not install $pkg"
	grep -qx "$pkg" <<<"$full" || fail "the full mode does not install $pkg"
done
for pkg in nodejs npm rabbitmq-server prometheus check jq; do
	grep -qx "$pkg" <<<"$demo" && fail "the demo mode installs $pkg"
	grep -qx "$pkg" <<<"$full" || fail "the full mode (no node here) does not install $pkg"
done
grep -q '^npm:' <<<"$demo" && fail "the demo mode installs npm packages: $(grep '^npm:' <<<"$demo")"
npm_line=$(grep '^npm:' <<<"$full") || fail "the full mode installs no npm package"
[[ $npm_line == *@asyncapi/parser* && $npm_line == *@asyncapi/modelina* ]] ||
	fail "the full mode's npm packages: $npm_line"

# ---- demo mode, all Debian packages present: no npm, no apt, no service
rc=0
PATH=$FAKE_PATH "$TREE/scripts/install-deps.sh" --demo >"$TEST_DIR/demo.out" 2>&1 || rc=$?
assert_eq 0 "$rc" "install-deps.sh --demo ($(cat "$TEST_DIR/demo.out"))"
grep -q '^npm' "$CALLS" && fail "the demo mode ran npm: $(cat "$CALLS")"
grep -qE '^(apt-get|sudo|systemctl|service)' "$CALLS" && fail "the demo mode ran: $(cat "$CALLS")"
[[ -e $TREE/tests/integration/node_modules ]] && fail "the demo mode created node_modules"

# ---- full mode: the npm packages are installed, both in one command
rc=0
PATH=$FAKE_PATH "$TREE/scripts/install-deps.sh" >"$TEST_DIR/full.out" 2>&1 || rc=$?
assert_eq 0 "$rc" "install-deps.sh ($(cat "$TEST_DIR/full.out"))"
grep '^npm' "$CALLS" >"$TEST_DIR/npm.calls" || fail "the full mode did not run npm: $(cat "$CALLS")"
assert_eq 1 "$(wc -l <"$TEST_DIR/npm.calls")" "npm runs of the full mode"
grep -q '@asyncapi/parser' "$TEST_DIR/npm.calls" && grep -q '@asyncapi/modelina' "$TEST_DIR/npm.calls" ||
	fail "npm was not asked for both packages: $(cat "$TEST_DIR/npm.calls")"
# once installed, a second run leaves them alone
PATH=$FAKE_PATH "$TREE/scripts/install-deps.sh" >/dev/null 2>&1 || fail "second full run failed"
assert_eq 1 "$(grep -c '^npm' "$CALLS")" "npm runs after a second full run"

# make demo uses the demo mode
make -s -C "$TM_SRCDIR" -n demo BUILD="$TM_BUILD" >"$TEST_DIR/make-demo.txt" 2>&1 ||
	fail "make -n demo failed: $(head -c 300 "$TEST_DIR/make-demo.txt")"
grep -q 'install-deps.sh --demo' "$TEST_DIR/make-demo.txt" ||
	fail "make demo does not run scripts/install-deps.sh --demo: $(head -c 300 "$TEST_DIR/make-demo.txt")"
