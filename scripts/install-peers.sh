#!/usr/bin/env bash
# Install what `make bench-peers` runs besides taskmill (scripts/bench-peers.sh):
#   Debian 12: python3-celery, python3-redis, python3-pika (and nodejs, npm
#              when there is no node or npm yet)
#   npm:       bench/peers/node's locked dependencies (bullmq, amqplib),
#              by `npm ci` from the committed package-lock.json into
#              bench/peers/node/node_modules (gitignored)
# Nothing else is fetched. Idempotent: when everything is present it prints
# one line and touches nothing. `make check` needs none of this.
#
#   scripts/install-peers.sh          install what is missing
#   scripts/install-peers.sh --list   print the Debian packages, then a line
#                                     "npm: ci bench/peers/node"; install nothing
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NODE_DIR=$ROOT/bench/peers/node

PACKAGES=(python3-celery python3-redis python3-pika)
command -v node >/dev/null 2>&1 || PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

case ${1:-} in
--list)
	printf '%s\n' "${PACKAGES[@]}"
	echo "npm: ci bench/peers/node"
	exit 0
	;;
'') ;;
*)
	echo "usage: scripts/install-peers.sh [--list]" >&2
	exit 2
	;;
esac

is_installed() {
	local status
	status=$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null) || return 1
	[[ $status == installed ]]
}

command -v dpkg-query >/dev/null 2>&1 ||
	{ echo "peers: dpkg-query not found; this script supports Debian 12 only" >&2; exit 1; }

missing=()
for pkg in "${PACKAGES[@]}"; do
	is_installed "$pkg" || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
	if ((EUID == 0)); then
		SUDO=()
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		SUDO=(sudo -n)
	else
		echo "peers: missing packages: ${missing[*]}; run as root:" >&2
		echo "  apt-get update && apt-get install -y --no-install-recommends ${missing[*]}" >&2
		exit 1
	fi
	echo "peers: installing: ${missing[*]}"
	"${SUDO[@]}" apt-get update -q
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm ci when node_modules is missing or older than the lock file (npm
# writes node_modules/.package-lock.json on every install)
node_deps_current() {
	local hidden=$NODE_DIR/node_modules/.package-lock.json
	[[ -f $NODE_DIR/node_modules/bullmq/package.json &&
		-f $NODE_DIR/node_modules/amqplib/package.json &&
		-f $hidden && ! $NODE_DIR/package-lock.json -nt $hidden ]]
}
npm_ran=0
if ! node_deps_current; then
	echo "peers: npm ci in bench/peers/node"
	(cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
	npm_ran=1
	node_deps_current || { echo "peers: npm ci did not install bullmq and amqplib" >&2; exit 1; }
fi
if ((${#missing[@]} == 0 && npm_ran == 0)); then
	echo "peers: all present"
fi
