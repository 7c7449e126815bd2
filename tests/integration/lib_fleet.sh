# shellcheck shell=bash
# Helpers for the fleet tests (tests/integration/test_*fleet*.sh): several
# daemons on one broker, each with its instance name and HTTP port, and
# their /api/v1/daemons and /api/v1/history answers. Sourced after lib.sh.
#
#   fleet_start I CONF: start daemon I (0, 1, ...) with CONF; FLEET_PID[I],
#       FLEET_PORT[I] (the port CONF listens on) are set.
#   fleet_stop I [SIGNAL]: stop it (TERM: cleanly) and wait for its exit.
#   fleet_names PORT: the instances GET /api/v1/daemons of PORT lists, one
#       line, sorted, space-separated.
#   fleet_agree WANT PORT...: every PORT's fleet_names is WANT (all asked
#       at the same time, so that each sees the same moment).
#   fleet_sum PORT QUERY: the sums over the points of GET /api/v1/history?QUERY
#       as "success failed dead_lettered retried".

: "${TM_BIN:?lib_fleet.sh needs lib.sh sourced first}"
command -v jq >/dev/null 2>&1 || skip "'jq' not found; run scripts/install-deps.sh"

declare -a FLEET_PID=() FLEET_PORT=()

fleet_start() {
	local i=$1 conf=$2
	FLEET_PORT[i]=$(sed -n 's/^http: { listen: 127.0.0.1:\([0-9]*\).*/\1/p' "$conf")
	start_daemon "$conf"
	FLEET_PID[i]=$DAEMON_PID
	DAEMON_PID=
	wait_ping "${FLEET_PORT[i]}" 30
}

fleet_stop() {
	local i=$1 sig=${2:-TERM} rc=0
	DAEMON_PID=${FLEET_PID[i]}
	stop_daemon 20 "$sig" || rc=$?
	FLEET_PID[i]=
	if [[ $sig == TERM ]] && ((rc != 0)); then
		fail "daemon $i exited with status $rc on SIGTERM"
	fi
	return 0
}

fleet_names() {
	curl -sf -m 5 "http://127.0.0.1:$1/api/v1/daemons" |
		jq -r '[.[].instance] | join(" ")' 2>/dev/null || echo "(no answer)"
}

fleet_agree() {
	local want=$1 p k=0 pids=()
	shift
	for p in "$@"; do
		fleet_names "$p" >"$TEST_DIR/agree.$p" &
		pids+=($!)
	done
	wait "${pids[@]}"
	for p in "$@"; do
		[[ $(cat "$TEST_DIR/agree.$p") == "$want" ]] || k=1
	done
	return "$k"
}

fleet_sum() {
	curl -sf -m 10 "http://127.0.0.1:$1/api/v1/history?$2" |
		jq -r '[([.points[].success] | add), ([.points[].failed] | add),
			([.points[].dead_lettered] | add), ([.points[].retried] | add)]
			| map(tostring) | join(" ")' 2>/dev/null || echo "(no answer)"
}
