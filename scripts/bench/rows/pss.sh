# shellcheck shell=bash
# Extra rows (issue 19): idle memory as PSS, not RSS: a page shared with
# other processes (shared libraries, the fork pool's copy-on-write pages)
# counts for its share only. The daemon and every process under it (the
# fork pool's zygote and children) are summed from /proc/PID/smaps_rollup,
# idle: 2 s after /ping with the five example tasks (target <= 3 MiB),
# 8 s after it with 500 noop tasks (target <= 8 MiB), in a thread and a
# fork pool of 4. First, measured the same way and alone on the host, the
# floor: bench/floor/http_floor, libmicrohttpd started as the daemon
# starts it and nothing else of taskmill's.
#
#   BENCH_PSS_POOLS   "thread fork"

PSS_POOLS=${BENCH_PSS_POOLS:-"thread fork"}

# pss_tree PID: the PSS in KiB of PID and its descendants, its anonymous
# and its file-backed part, and how many processes that is
# ("KIB ANON_KIB FILE_KIB N"). The file part is mostly shared libraries:
# their pages count in full when no other process on the host maps them.
pss_tree() {
	local todo=("$1") all=() p k
	while ((${#todo[@]} > 0)); do
		p=${todo[0]}
		todo=("${todo[@]:1}")
		all+=("$p")
		# shellcheck disable=SC2013
		for k in $(cat /proc/"$p"/task/*/children 2>/dev/null); do
			todo+=("$k")
		done
	done
	local files=()
	for p in "${all[@]}"; do
		files+=("/proc/$p/smaps_rollup")
	done
	awk -v n="${#all[@]}" '
		/^Pss:/ { t += $2 }
		/^Pss_Anon:/ { a += $2 }
		/^Pss_File:/ { f += $2 }
		END { print t + 0, a + 0, f + 0, n }' "${files[@]}" 2>/dev/null
}

# pss_take NAME WAIT_S: wait, then measure the server started last
# (DAEMON_PID) and its descendants into $R/NAME.json, and stop it.
pss_take() {
	local name=$1 kib anon file procs
	sleep "$2"
	read -r kib anon file procs < <(pss_tree "$DAEMON_PID")
	echo "{\"pss_kib\":$kib,\"anon_kib\":$anon,\"file_kib\":$file,\"processes\":$procs}" >"$R/$name.json"
	stop_daemon
	log "$name: PSS $(mib "$kib") MiB in $procs processes"
}

# pss_idle NAME KIND TASKS_YAML WAIT_S: start a daemon, wait, measure
pss_idle() {
	local name=$1 http
	http=$(free_port)
	write_cfg "$DIR/$name.yaml" "$REDIS_URL" "$2" 4 "$http" "$3"
	start_daemon "$DIR/$name.yaml" "$DIR/$name.log" "$http"
	pss_take "$name" "$4"
}

# pss_floor: the floor program, started, waited for and measured as
# pss_idle does a daemon, into $R/pss.floor.json.
pss_floor() {
	local http
	http=$(free_port)
	start_server "$DIR/http_floor.log" "$http" "http_floor did not answer" \
		"$BB/http_floor" "$http"
	pss_take pss.floor 2
}

bench_row_pss() {
	local kind f kib procs ok v limit what anon file floor above
	pss_floor
	floor=$(jget "$R/pss.floor.json" pss_kib)
	row "idle PSS floor: libmicrohttpd alone" "$(mib "$floor") MiB" - - - reported - - - \
		"bench/floor/http_floor: the HTTP library started as the daemon starts it, nothing else; anonymous $(mib "$(jget "$R/pss.floor.json" anon_kib)") MiB, files $(mib "$(jget "$R/pss.floor.json" file_kib)") MiB (Debian's libmicrohttpd loads and initialises GnuTLS)"
	for kind in $PSS_POOLS; do
		pss_idle "pss.$kind.examples" "$kind" "$(
			cat <<YAML
  add: { plugin: add.so, queue: pss.add }
  noop: { plugin: noop.so, queue: pss.noop }
  sleep: { plugin: sleep.so, queue: pss.sleep }
  fail: { plugin: fail.so, queue: pss.fail }
  journal: { plugin: journal.so, queue: pss.journal, config: { path: "$DIR/pss-journal.txt" } }
YAML
		)" 2
		pss_idle "pss.$kind.500" "$kind" "$(scale_tasks 500 pss.idle)" 8
	done
	local i
	for ((i = 0; i < 500; i++)); do
		echo "DEL pss.idle.$i pss.idle.$i.retry.$GROUP"
	done | rcli >/dev/null
	for kind in $PSS_POOLS; do
		for what in examples 500; do
			f=$R/pss.$kind.$what.json
			kib=$(jget "$f" pss_kib)
			procs=$(jget "$f" processes)
			anon=$(jget "$f" anon_kib)
			file=$(jget "$f" file_kib)
			if [[ $what == examples ]]; then limit=3; else limit=8; fi
			ok=$(awk -v k="$kib" -v l="$limit" 'BEGIN { print (k <= l * 1024) ? 1 : 0 }')
			v=$(verdict "$ok")
			target_json "idle_pss.$kind.$what" "$(mib "$kib")" "<= $limit" "$v"
			if [[ $what == examples ]]; then what="5 example tasks"; else what="500 noop tasks"; fi
			above=$(mib $((kib - floor)))
			row "idle PSS, $kind x4, $what" "$(mib "$kib") MiB" "$(mib "$floor") MiB floor" - "<= $limit MiB" "$v" - - - \
				"smaps_rollup Pss of the daemon and its $((procs - 1)) descendant(s), idle: anonymous $(mib "$anon") MiB, files (the binary, shared libraries) $(mib "$file") MiB; $above MiB above the floor"
		done
	done
}
BENCH_ROWS+=(bench_row_pss)
