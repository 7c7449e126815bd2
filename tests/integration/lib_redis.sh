# shellcheck shell=bash
# Extra helpers for the Redis delivery tests (tests/integration/test_redis_*.sh).
# Sourced by those tests, after lib.sh (run.sh sources lib.sh first):
#
#   . "$TM_SRCDIR/tests/integration/lib_redis.sh"
#
# Adds: clean-up hooks that keep lib.sh's daemon clean-up, a bounded "holds
# for a while" check, log timestamp parsing, free ports outside the kernel's
# ephemeral range (also the default HTTP_PORT of write_config), a private
# redis-server, a FIFO that stalls the journal plugin on demand, binary-safe
# XADD and journal comparisons.

: "${TM_BIN:?lib_redis.sh needs lib.sh sourced first}"

# ------------------------------------------------------------- clean-up

# Tests that start processes of their own (a redis-server, a FIFO reader)
# register them with lib.sh's tm_on_exit, through this name.
tmr_on_exit() {
	tm_on_exit "$1"
}

# tmr_kill PID: SIGTERM a process this test started, SIGKILL it after 5 s,
# and reap it. Never fails.
tmr_kill() {
	local pid=$1 i
	[[ -n $pid ]] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

# --------------------------------------------------------------- timing

# hold_for SECONDS CMD: the opposite of wait_until. Evaluate CMD every 0.1 s
# for SECONDS and fail the test the first time it does not succeed: "this
# stays true for a while" (used for things that must NOT happen, e.g. a
# trim; there is no event to wait for).
hold_for() {
	local secs=$1 cmd=$2
	local deadline=$(($(now_ms) + secs * 1000))
	note "checking for ${secs}s that it holds: $cmd"
	while (($(now_ms) < deadline)); do
		if ! eval "$cmd" >/dev/null 2>&1; then
			fail "stopped holding: $cmd"
		fi
		sleep 0.1
	done
}

# iso_to_ms STAMP: 2026-11-29T08:55:41.622Z -> epoch milliseconds.
iso_to_ms() {
	date -u -d "$1" +%s%3N
}

# log_attempts LOG ID: the daemon's "attempt N OUTCOME" lines for message ID
# (text log format), one per line as "N EPOCH_MS OUTCOME DELAY_MS", DELAY_MS
# being the "retry in X ms" the daemon announced (- for a dead letter).
log_attempts() {
	local log=$1 id=$2 stamp n out rest delay
	grep -aF " id=$id attempt " "$log" | while read -r stamp _ _ _ _ n out rest; do
		delay=-
		if [[ $rest =~ retry\ in\ ([0-9]+)\ ms ]]; then
			delay=${BASH_REMATCH[1]}
		fi
		echo "$n $(iso_to_ms "$stamp") ${out%:} $delay"
	done
}

# ------------------------------------------------------------- daemons

# metric_at PORT NAME [LABELS]: metric of the daemon listening on PORT.
metric_at() {
	metric "$2" "${3:-}" "$1"
}

# --------------------------------------------------- a stallable journal

# The journal plugin appends each line with one write(2). Pointing its path
# at a FIFO that this test holds open read-write (so nothing blocks on open)
# makes those writes block once the pipe buffer (64 KiB) is full: the tasks
# stall in the middle of their run, holding pending entries, until the test
# reads lines out of the FIFO. Lines under PIPE_BUF (4 KiB) are written
# atomically, so nothing interleaves.
FIFO_FD=
FIFO_DRAIN_PID=

# fifo_open PATH: create the FIFO and open it read-write as FIFO_FD.
fifo_open() {
	mkfifo "$1"
	exec {FIFO_FD}<>"$1"
	tmr_on_exit 'fifo_drain_stop'
}

# fifo_read LINES OUTFILE [TIMEOUT]: move LINES lines out of the FIFO into
# OUTFILE; fails when they do not come within TIMEOUT seconds (default 20).
fifo_read() {
	local n=$1 out=$2 timeout=${3:-20} i line acc
	local deadline=$(($(now_ms) + timeout * 1000))
	for ((i = 0; i < n; i++)); do
		acc=
		while :; do
			line=
			if IFS= read -r -t 0.2 -u "$FIFO_FD" line; then
				acc+=$line
				break
			fi
			# on a timeout, read keeps the partial line it consumed
			acc+=$line
			(($(now_ms) < deadline)) || fail "fifo_read: only $i of $n lines within ${timeout}s"
		done
		printf '%s\n' "$acc" >>"$out"
	done
}

# fifo_drain_start OUTFILE: copy everything from the FIFO to OUTFILE in the
# background from now on (the tasks no longer stall).
fifo_drain_start() {
	cat <&"$FIFO_FD" >>"$1" &
	FIFO_DRAIN_PID=$!
	note "draining the FIFO into $1 (pid $FIFO_DRAIN_PID)"
}

# fifo_drain_stop: end the background copy (it never sees an end of file,
# since this test keeps the FIFO open for writing too).
fifo_drain_stop() {
	if [[ -n $FIFO_DRAIN_PID ]]; then
		tmr_kill "$FIFO_DRAIN_PID"
		FIFO_DRAIN_PID=
	fi
}

# ------------------------------------------------------------ publishing

# xadd_file STREAM FIELD FILE [FIELD VALUE...]: XADD an entry whose FIELD is
# the exact bytes of FILE (binary-safe, any size), after the other given
# field/value pairs. Prints the new id.
xadd_file() {
	local stream=$1 field=$2 file=$3 out
	shift 3
	out=$(rcli -x XADD "$stream" '*' "$@" "$field" <"$file") ||
		fail "redis-cli -x XADD $stream failed"
	[[ $out =~ ^[0-9]+-[0-9]+$ ]] || fail "XADD $stream from $file: $(head -c 200 <<<"$out")"
	echo "$out"
}

# pad_json FILE BYTES: write the JSON object {"pad":"ppp..."} with BYTES of
# padding to FILE.
pad_json() {
	{
		printf '{"pad":"'
		head -c "$2" /dev/zero | tr '\0' 'p'
		printf '"}'
	} >"$1"
}

# ------------------------------------------------------------- journals

# journal_ids JOURNAL: the ids of the journal's lines, sorted (with repeats).
journal_ids() {
	if [[ -f $1 ]]; then
		cut -d' ' -f1 "$1" | sort
	fi
}

# assert_journal_covers IDS_FILE JOURNAL [WHAT]: every id listed in
# IDS_FILE (one per line) appears in JOURNAL at least once. Notes how many
# ran more than once.
assert_journal_covers() {
	local ids=$1 journal=$2 what=${3:-journal} missing dups
	sort -u "$ids" >"$TEST_DIR/.want.ids"
	journal_ids "$journal" >"$TEST_DIR/.got.ids"
	comm -23 "$TEST_DIR/.want.ids" <(sort -u "$TEST_DIR/.got.ids") >"$TEST_DIR/.missing.ids"
	missing=$(wc -l <"$TEST_DIR/.missing.ids")
	if ((missing > 0)); then
		sed -n 1,10p "$TEST_DIR/.missing.ids" >&2
		fail "$what: $missing published ids never ran (first ones above)"
	fi
	dups=$(comm -12 "$TEST_DIR/.want.ids" <(uniq -d "$TEST_DIR/.got.ids") | wc -l)
	note "$what: all $(wc -l <"$TEST_DIR/.want.ids") ids ran; $dups of them more than once"
}

# assert_journal_only IDS_FILE JOURNAL [WHAT]: the journal holds no id that
# IDS_FILE does not list.
assert_journal_only() {
	local ids=$1 journal=$2 what=${3:-journal} extra
	sort -u "$ids" >"$TEST_DIR/.want.ids"
	comm -13 "$TEST_DIR/.want.ids" <(journal_ids "$journal" | sort -u) >"$TEST_DIR/.extra.ids"
	extra=$(wc -l <"$TEST_DIR/.extra.ids")
	if ((extra > 0)); then
		sed -n 1,10p "$TEST_DIR/.extra.ids" >&2
		fail "$what: $extra journaled ids were never published (first ones above)"
	fi
}

# journal_count_covered IDS_FILE JOURNAL: how many distinct ids of IDS_FILE
# the journal holds (for wait_until).
journal_count_covered() {
	comm -12 <(sort -u "$1") <(journal_ids "$2" | sort -u) | wc -l
}

# wait_all_ran IDS_FILE JOURNAL STREAM SECONDS WHAT: wait until every id of
# IDS_FILE is in JOURNAL and nothing of STREAM is pending; fails after
# SECONDS (counted from WHAT, named in the failure) or when the daemon
# exits.
wait_all_ran() {
	local ids=$1 journal=$2 stream=$3 secs=$4 what=$5 n
	local deadline=$(($(now_ms) + secs * 1000))
	n=$(sort -u "$ids" | wc -l)
	while (($(journal_count_covered "$ids" "$journal") < n ||
		$(xpending "$stream") != 0)); do
		if (($(now_ms) >= deadline)); then
			fail "$secs s after $what: $(journal_count_covered "$ids" "$journal") of $n entries ran, $(xpending "$stream") pending"
		fi
		daemon_alive || fail "daemon exited"
		sleep 0.2
	done
	assert_journal_covers "$ids" "$journal"
}

# runs_at_once JOURNAL [AWK_CONDITION]: the most runs in progress at once
# among the lines of a flowlog journal ("<id> <attempt> <start_us>
# <end_us> <task>") that match AWK_CONDITION (default: every line), e.g.
# '$5 == "capped"'; an end and a start at the same microsecond do not
# overlap.
runs_at_once() {
	awk "${2:-1} { print \$3, 1; print \$4, 0 }" "$1" |
		sort -k1,1n -k2,2n | awk '
			{ if ($2 == 1) { n++; if (n > best) best = n } else n-- }
			END { print best + 0 }'
}
