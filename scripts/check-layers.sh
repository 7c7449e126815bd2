#!/usr/bin/env bash
# check-layers.sh BUILD - fails when a lower layer reaches up: config/ is
# the ground floor (docs/development.md, "Layers"). It checks
#   - the headers each src/config/ file and src/config.h reads, directly
#     or through other headers (cc -MM): only the config's own, util.h,
#     log.h, json.h, taskmill.h and the schedule spec (schedule/), never a
#     broker, pool, fork, http, daemon or CLI header;
#   - the config objects in BUILD/obj/config/ (nm -u): no reference to a
#     broker adapter, the broker seam, a pool, http or the daemon.
# Exit 0 when both hold; 1 with each offence on its own line.
set -euo pipefail

BUILD=${1:?usage: check-layers.sh BUILD}
cd "$(dirname "$0")/.."
CC=${CC:-cc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
# shellcheck disable=SC2086 # word splitting of the flags is wanted
DEP_CFLAGS=$($PKG_CONFIG --cflags libcjson yaml-0.1 2>/dev/null || true)

# the headers config/ may read, as paths under src/
allowed='^(src/config/[^/]+\.h|src/util/(util|log|json)\.h|include/taskmill\.h|src/schedule/[a-z_]+\.h)$'
# the symbols config/ must not reference
forbidden='^(tm_redis_|tm_amqp_|tm_rmq_|tm_broker_|tm_ssl_dl_|tm_dlib_|tm_pool_|tm_http_|tm_daemon_|tm_gen_)'

bad=0
for f in src/config/*.[ch]; do
	# shellcheck disable=SC2086
	deps=$($CC -MM -std=c11 -D_GNU_SOURCE -Iinclude -Isrc $DEP_CFLAGS "$f" |
		tr ' \\' '\n\n' | grep -E '^(src|include)/' | grep -vxF "$f" | sort -u || true)
	for h in $deps; do
		[[ $h == *.h ]] || continue
		if ! [[ $h =~ $allowed ]]; then
			echo "check-layers: $f reads $h, a header above config/" >&2
			bad=1
		fi
	done
done

objs=("$BUILD"/obj/config/*.o)
if [[ ! -e ${objs[0]} ]]; then
	echo "check-layers: no objects in $BUILD/obj/config/ (build first)" >&2
	exit 1
fi
for o in "${objs[@]}"; do
	while read -r sym; do
		echo "check-layers: $o calls $sym, above config/" >&2
		bad=1
	done < <(nm -u "$o" | awk '{print $NF}' | grep -E "$forbidden" || true)
done

if [[ $bad -ne 0 ]]; then
	echo "check-layers: config/ must read and call only what is below it" >&2
	exit 1
fi
echo "check-layers: config/ reads and calls nothing above it"
