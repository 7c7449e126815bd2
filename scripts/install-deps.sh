#!/usr/bin/env bash
# Make sure the Debian 12 packages needed to build and test taskmill are
# installed. Idempotent: when everything is present it prints one line and
# touches nothing. Otherwise it runs `apt-get update` once and installs only
# what is missing, as root or through sudo.
#
#   scripts/install-deps.sh            everything `make check` needs
#   scripts/install-deps.sh --demo     only what `make demo` needs: the build
#                                      dependencies, redis-server and curl
#   scripts/install-deps.sh [--demo] --list
#                                      print what that mode installs, one
#                                      Debian package a line, then a line
#                                      "npm: PACKAGE..." when it installs
#                                      npm packages; install nothing
#
# The Debian redis-server and rabbitmq-server packages start system services
# on the default ports when installed. The tests start their own servers on
# free loopback ports, so in the full mode those services, when installed
# by this run, are stopped and disabled (best effort: containers often have
# no systemd). The demo mode stops no service: the demo's redis-server runs
# on a port of its own, beside any system one.
#
# The HTTP tests also need promtool (Debian package prometheus, whose own
# service is stopped and disabled the same way), jq, Node, and the official
# AsyncAPI parser, the modelina code generator and puppeteer-core (the
# console's browser test drives Debian's chromium with it), which npm
# installs into the test-only folder tests/integration/node_modules
# (gitignored) when they are not there yet. The demo mode installs neither Node nor npm packages.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NODE_DIR=$ROOT/tests/integration

MODE=check
LIST=0
for arg in "$@"; do
	case $arg in
	--demo) MODE=demo ;;
	--list) LIST=1 ;;
	*)
		echo "usage: scripts/install-deps.sh [--demo] [--list]" >&2
		exit 2
		;;
	esac
done

# What the build needs (make, make demo, make install).
BUILD_PACKAGES=(
	build-essential
	pkg-config
	libhiredis-dev
	librabbitmq-dev # headers; librabbitmq4 is opened when a config needs it
	libcjson-dev
	libyaml-dev
	libmicrohttpd-dev
	libssl-dev # headers; libssl3 is opened when a config needs it
	libprotobuf-c-dev # the OTLP trace export's wire format
	protobuf-c-compiler # protoc-c: C code from vendor/opentelemetry-proto
	libcurl4-openssl-dev # the OTLP/HTTP trace export
	tzdata # the zones of schedules (/usr/share/zoneinfo), read at run time
)
# What scripts/demo.sh runs besides the build.
DEMO_PACKAGES=(
	redis-server
	redis-tools
	curl
)
# What the tests need besides those (the language hosts' libraries too:
# make builds the lua and python plugins when they are there).
TEST_PACKAGES=(
	check
	rabbitmq-server
	netcat-openbsd
	jq
	prometheus
	procps
	socat
	openssl
	faketime # a daemon with its clock off (test_schedule_clock_skew)
	gawk
	liblua5.4-dev
	python3-dev
	python3-yaml
	python3-redis
	python3-pika
	chromium
)
# npm packages of the tests, each checked by its package.json.
# The OpenTelemetry SDK (api, sdk-trace-base, core's W3C propagator) is the
# traced producer of the trace tests; protobufjs decodes their collector's
# OTLP requests with the vendored .proto files.
NPM_PACKAGES=('@asyncapi/parser@^3' '@asyncapi/modelina@^5' 'puppeteer-core@^24'
	'ioredis@^6' 'amqplib@^2' '@opentelemetry/api@^1'
	'@opentelemetry/sdk-trace-base@^2' '@opentelemetry/core@^2'
	'protobufjs@^8')
NPM_DIRS=(@asyncapi/parser @asyncapi/modelina puppeteer-core ioredis amqplib
	@opentelemetry/api @opentelemetry/sdk-trace-base @opentelemetry/core
	protobufjs)

PACKAGES=("${BUILD_PACKAGES[@]}" "${DEMO_PACKAGES[@]}")
SERVICES=()
if [[ $MODE == check ]]; then
	PACKAGES+=("${TEST_PACKAGES[@]}")
	# node and npm: Debian's packages, unless some node is installed already
	command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs)
	command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)
	SERVICES=(redis-server rabbitmq-server prometheus)
fi

if ((LIST)); then
	printf '%s\n' "${PACKAGES[@]}"
	if [[ $MODE == check ]]; then
		echo "npm: ${NPM_PACKAGES[*]}"
	fi
	exit 0
fi

# node_deps_present: every npm package of the tests is installed.
node_deps_present() {
	local d
	for d in "${NPM_DIRS[@]}"; do
		[[ -f $NODE_DIR/node_modules/$d/package.json ]] || return 1
	done
}

# install_node_deps installs the tests' npm packages, once (full mode only).
# They are installed together: npm prunes from the folder what the command
# line does not name.
install_node_deps() {
	[[ $MODE == check ]] || return 0
	node_deps_present && return 0
	echo "deps: npm install ${NPM_PACKAGES[*]} into tests/integration/node_modules"
	npm install --prefix "$NODE_DIR" --no-save --no-audit --no-fund \
		--loglevel=error "${NPM_PACKAGES[@]}" >/dev/null
	node_deps_present || {
		echo "deps: npm did not install ${NPM_PACKAGES[*]}" >&2
		exit 1
	}
}

is_installed() {
	local status
	status=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) || return 1
	[[ $status == installed ]]
}

if ! command -v dpkg-query >/dev/null 2>&1; then
	echo "deps: dpkg-query not found; this script supports Debian 12 only" >&2
	exit 1
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
	is_installed "$pkg" || missing+=("$pkg")
done

if ((${#missing[@]} == 0)); then
	install_node_deps
	echo "deps: all present ($MODE)"
	exit 0
fi

if ((EUID == 0)); then
	SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
	SUDO=(sudo -n)
else
	echo "deps: missing packages: ${missing[*]}" >&2
	echo "deps: need root or password-less sudo to install them; run as root:" >&2
	echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
	exit 1
fi

echo "deps: installing: ${missing[*]}"

# Keep the packages' maintainer scripts from starting services while they are
# installed, where no policy is set already (policy-rc.d exit 101 = "action
# forbidden", honoured by invoke-rc.d and deb-systemd-invoke). Services are
# also stopped afterwards, for systems that ignore the policy.
POLICY=/usr/sbin/policy-rc.d
policy_added=0
remove_policy() {
	if ((policy_added)); then
		"${SUDO[@]}" rm -f "$POLICY" || true
	fi
}
trap remove_policy EXIT
if [[ ! -e $POLICY ]]; then
	if printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null &&
		"${SUDO[@]}" chmod 0755 "$POLICY"; then
		policy_added=1
	fi
fi

"${SUDO[@]}" apt-get update -q
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
	apt-get install -y -q --no-install-recommends "${missing[@]}"

remove_policy
policy_added=0

# Stop and disable the system services of the servers just installed; the
# tests never use them. Every step may fail harmlessly (no systemd, no init).
# None in the demo mode (SERVICES is empty).
for svc in ${SERVICES[@]+"${SERVICES[@]}"}; do
	installed_now=0
	for pkg in "${missing[@]}"; do
		[[ $pkg == "$svc" ]] && installed_now=1
	done
	((installed_now)) || continue
	if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
		"${SUDO[@]}" systemctl stop "$svc" >/dev/null 2>&1 || true
		"${SUDO[@]}" systemctl disable "$svc" >/dev/null 2>&1 || true
	elif command -v service >/dev/null 2>&1; then
		"${SUDO[@]}" service "$svc" stop >/dev/null 2>&1 || true
		if command -v update-rc.d >/dev/null 2>&1; then
			"${SUDO[@]}" update-rc.d "$svc" disable >/dev/null 2>&1 || true
		fi
	fi
done

still=()
for pkg in "${PACKAGES[@]}"; do
	is_installed "$pkg" || still+=("$pkg")
done
if ((${#still[@]})); then
	echo "deps: still missing after install: ${still[*]}" >&2
	exit 1
fi
install_node_deps
echo "deps: installed ${#missing[@]} package(s)"
