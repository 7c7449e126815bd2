# shellcheck shell=bash
# Bench rows: what many tasks cost RabbitMQ (issue 28, item 10), measured
# from the broker's side, so that a change in how the daemon connects
# shows here without any knowledge of it.
#
# amqp_idle: one daemon with AMQP_IDLE_TASKS idle noop tasks. The AMQP
# connections the node holds (rabbitmqctl list_connections) and the
# packets they exchange: recv_cnt and send_cnt of every connection, read
# twice AMQP_IDLE_S apart. Per connection and direction, the heartbeats
# its negotiated heartbeat (the "timeout" item) allows in the window are
# taken off, never more than that connection itself counted; the rest,
# over the window, is "frames/s beyond heartbeats" (bench/README.md,
# "RabbitMQ idle cost", has the computation). Targets: <= 8 connections,
# <= 50 frames/s. Every connection's figures go to results."amqp_idle".
#
# amqp_spread: AMQP_SPREAD_N messages spread over AMQP_SPREAD_TASKS
# queues, one noop task each, against the same number on one task, on a
# thread pool of AMQP_SPREAD_POOL; target >= 0.8 of the one task's rate
# (the RabbitMQ side of the scale part's "load over 100 tasks" row).
#
# Both need the RabbitMQ adapter and the private node (AMQP full).
# Sourced by scripts/bench.sh (see "Extra rows" there).

AMQP_IDLE_TASKS=${BENCH_AMQP_IDLE_TASKS:-500}
AMQP_IDLE_S=${BENCH_AMQP_IDLE_S:-10}
AMQP_SPREAD_TASKS=${BENCH_AMQP_SPREAD_TASKS:-100}
AMQP_SPREAD_N=${BENCH_AMQP_SPREAD_N:-300000}
AMQP_SPREAD_POOL=4

# amqp_conn_snapshot FILE: every connection of the node, one a line:
# name, timeout, recv_cnt, send_cnt (tab-separated) into FILE; prints
# the instant half way through the call, in ms (the call reads the
# connections one after the other). 1 when rabbitmqctl failed.
amqp_conn_snapshot() {
	local a b
	a=$(now_ms)
	rabbitctl list_connections --no-table-headers \
		name timeout recv_cnt send_cnt >"$1" || return 1
	b=$(now_ms)
	echo $(((a + b) / 2))
}

# amqp_conn_count: the connections the node holds now
amqp_conn_count() {
	rabbitctl list_connections --no-table-headers name | grep -c . || true
}

bench_row_amqp_idle() {
	if [[ $AMQP != full ]]; then
		row "$AMQP_IDLE_TASKS idle RabbitMQ tasks: AMQP connections <= 8" skipped - - - - - - - "$AMQP_NOTE"
		row "$AMQP_IDLE_TASKS idle RabbitMQ tasks: frames/s beyond heartbeats <= 50" skipped - - - - - - - "$AMQP_NOTE"
		return 0
	fi
	local http i n prev same deadline t1 t2 w conns fps raw hb per ok_c ok_f
	http=$(free_port)
	write_cfg "$DIR/amqp-idle.yaml" "$AMQP_URL" thread 2 "$http" \
		"$(for ((i = 0; i < AMQP_IDLE_TASKS; i++)); do
			echo "  t$i: { plugin: noop.so, queue: bench.aidle.$i }"
		done)"
	start_daemon "$DIR/amqp-idle.yaml" "$DIR/amqp-idle.log" "$http" || return 1
	# /ping answers before the daemon has connected: wait until the
	# node's connection count has stayed the same for three looks
	prev=-1 same=0 deadline=$(($(now_ms) + 180000))
	while ((same < 3)); do
		sleep 2
		n=$(amqp_conn_count)
		if ((n == prev && n > 0)); then same=$((same + 1)); else same=0; fi
		prev=$n
		(($(now_ms) < deadline)) || break
	done
	# past the start: declarations and the first consumes are done
	sleep 5
	log "amqp idle: $AMQP_IDLE_TASKS idle tasks, $prev connections, $AMQP_IDLE_S s"
	t1=$(amqp_conn_snapshot "$DIR/amqp-idle.c1") || { echo "bench: rabbitmqctl list_connections failed" >&2; return 1; }
	sleep "$AMQP_IDLE_S"
	t2=$(amqp_conn_snapshot "$DIR/amqp-idle.c2") || { echo "bench: rabbitmqctl list_connections failed" >&2; return 1; }
	# the daemon's roles, by the connection_name it gives each connection
	rabbitctl list_connections --no-table-headers name client_properties >"$DIR/amqp-idle.names" || true
	stop_daemon
	w=$(calc "($t2 - $t1) / 1000")
	# per connection (by name, in both snapshots): the packets of each
	# direction, the heartbeats its interval allows in the window (the
	# broker sends one when it has sent nothing for timeout/2, and a
	# client may do the same: ceil(w / (timeout / 2)) a direction), and what
	# is beyond them
	read -r raw hb fps < <(awk -F'\t' -v w="$w" -v out="$DIR/amqp-idle.per" '
		function ceil(x) { return (x == int(x)) ? x : int(x) + 1 }
		FILENAME ~ /names$/ {
			# client_properties: [...,{"connection_name","NAME"},...]
			if (match($2, /\{"connection_name","[^"]*"/))
				who[$1] = substr($2, RSTART + 20, RLENGTH - 21)
			next
		}
		FILENAME ~ /c1$/ { r[$1] = $3; s[$1] = $4; next }
		($1 in r) {
			dr = $3 - r[$1]; ds = $4 - s[$1]
			h = ($2 > 0) ? ceil(w * 2 / $2) : 0
			br = dr > h ? dr - h : 0; bs = ds > h ? ds - h : 0
			raw += dr + ds
			hb += (dr - br) + (ds - bs)
			beyond += br + bs
			n = $1; c = who[$1]
			gsub(/["\\]/, "", n); gsub(/["\\]/, "", c)
			printf "%s{\"name\":\"%s\",\"client\":\"%s\",\"heartbeat_s\":%d,\"recv\":%d,\"send\":%d,\"heartbeats_allowed\":%d,\"beyond\":%d}", sep, n, c, $2, dr, ds, 2 * h, br + bs >out
			sep = ","
		}
		END { printf "%.2f %.2f %.2f\n", raw / w, hb / w, beyond / w }' \
		"$DIR/amqp-idle.names" "$DIR/amqp-idle.c1" "$DIR/amqp-idle.c2")
	per=$(cat "$DIR/amqp-idle.per" 2>/dev/null || true)
	conns=$(grep -c . "$DIR/amqp-idle.c2" || true)
	((conns > 0)) || { echo "bench: the node listed no connection of the idle daemon" >&2; return 1; }
	echo "{\"tasks\":$AMQP_IDLE_TASKS,\"seconds\":$w,\"connections\":$conns,\"packets_per_s\":$raw,\"heartbeats_per_s\":$hb,\"beyond_heartbeats_per_s\":$fps,\"by_connection\":[$per]}" \
		>"$R/amqp_idle.json"
	ok_c=$((conns <= 8 ? 1 : 0))
	ok_f=$(awk -v f="$fps" 'BEGIN { print (f <= 50) ? 1 : 0 }')
	log "amqp idle: $conns connections, $raw packets/s, $fps beyond heartbeats"
	row "$AMQP_IDLE_TASKS idle RabbitMQ tasks: AMQP connections <= 8" "$conns" "503 (issue 28)" - "<= 8" \
		"$(verdict "$ok_c")" - - - "rabbitmqctl list_connections; per connection in results.amqp_idle"
	target_json amqp_idle.connections "$conns" "<= 8" "$(verdict "$ok_c")"
	row "$AMQP_IDLE_TASKS idle RabbitMQ tasks: frames/s beyond heartbeats <= 50" "$fps/s" "~2,200 packets/s (issue 28)" - "<= 50/s" \
		"$(verdict "$ok_f")" - - - \
		"recv_cnt + send_cnt over $w s: $raw packets/s, of which $hb/s heartbeats the negotiated intervals allow"
	target_json amqp_idle.beyond_heartbeats_per_s "$fps" "<= 50" "$(verdict "$ok_f")"
}

# amqp_spread_tasks N: the tasks: yaml of N noop tasks on bench.aspreadN.I
amqp_spread_tasks() {
	local i pf=$((AMQP_PREFETCH / $1 < 16 ? 16 : AMQP_PREFETCH / $1))
	for ((i = 0; i < $1; i++)); do
		echo "  t$i: { plugin: noop.so, queue: bench.aspread$1.$i, prefetch: $pf, timeout: 0 }"
	done
}

# amqp_spread_done HTTP: the successes of every task, from /metrics; -1
# while it does not answer
amqp_spread_done() {
	local body
	body=$(curl -s -f -m 2 "http://127.0.0.1:$1/metrics" 2>/dev/null) || { echo -1; return 0; }
	awk '/^taskmill_tasks_total\{.*outcome="success"/ { n += $NF } END { printf "%d\n", n }' <<<"$body"
}

# amqp_spread_run NTASKS REP: the queues (declared by a first daemon, with
# its own arguments) loaded with AMQP_SPREAD_N / NTASKS messages each,
# then a daemon with NTASKS tasks, its /metrics read in a loop. A read
# may wait up to a second while the daemon refreshes the queue depths
# (every 5 s at most), and the successes it shows are counted after that
# wait; so each reading is stamped when it returns, and the rate is taken
# between the first reading that shows a success and the last one before
# all are done: the messages run between two instants of the daemon's own
# counter, ramp-up and tail left out alike for one task and for many.
AMQP_SPREAD_DECLARED=" "
amqp_spread_run() {
	local nt=$1 rep=$2 http i per total got deadline polls rate ta ga tb gb
	per=$((AMQP_SPREAD_N / nt))
	total=$((per * nt))
	if [[ $AMQP_SPREAD_DECLARED != *" $nt "* ]]; then
		http=$(free_port)
		write_cfg "$DIR/amqp-spread$nt-declare.yaml" "$AMQP_URL" thread "$AMQP_SPREAD_POOL" "$http" \
			"$(amqp_spread_tasks "$nt")"
		start_daemon "$DIR/amqp-spread$nt-declare.yaml" "$DIR/amqp-spread$nt.log" "$http" || return 1
		# a message published to a queue not there yet would be dropped
		deadline=$(($(now_ms) + 120000))
		while (($(rabbitctl list_queues --no-table-headers name | grep -c "^bench\.aspread$nt\." || true) < nt)); do
			(($(now_ms) < deadline)) ||
				{ echo "bench: the daemon did not declare the $nt bench.aspread$nt queues" >&2; return 1; }
			sleep 1
		done
		stop_daemon
		AMQP_SPREAD_DECLARED+="$nt "
	fi
	for ((i = 0; i < nt; i++)); do
		"$BB/load_amqp" 127.0.0.1 "$AMQP_PORT" "bench.aspread$nt.$i" "$per" 2>>"$DIR/load.log" ||
			{ echo "bench: loading bench.aspread$nt.$i failed" >&2; return 1; }
	done
	http=$(free_port)
	write_cfg "$DIR/amqp-spread$nt.yaml" "$AMQP_URL" thread "$AMQP_SPREAD_POOL" "$http" \
		"$(amqp_spread_tasks "$nt")"
	"$TM" run -c "$DIR/amqp-spread$nt.yaml" 2>>"$DIR/amqp-spread$nt.log" &
	DAEMON_PID=$!
	deadline=$(($(now_ms) + 300000))
	polls=$DIR/amqp-spread$nt.run$rep.polls
	: >"$polls"
	while :; do
		got=$(amqp_spread_done "$http")
		echo "$(now_ms) $got" >>"$polls"
		((got >= total)) && break
		if (($(now_ms) > deadline)) || ! kill -0 "$DAEMON_PID" 2>/dev/null; then
			echo "bench: RabbitMQ spread run of $nt tasks stuck, $got of $total done" >&2
			return 1
		fi
		sleep 0.02
	done
	stop_daemon
	# first reading with a success (a), last one short of all (b)
	read -r ta ga tb gb < <(awk -v total="$total" '
		$2 > 0 && $2 < total { if (!seen) { ta = $1; ga = $2; seen = 1 } tb = $1; gb = $2 }
		END { printf "%.0f %d %.0f %d\n", ta, ga, tb, gb }' "$polls")
	if ((tb - ta < 500)); then
		echo "bench: RabbitMQ spread run of $nt tasks: under 0.5 s between readings inside the run (raise BENCH_AMQP_SPREAD_N)" >&2
		return 1
	fi
	rate=$(calc "($gb - $ga) * 1000 / ($tb - $ta)")
	echo "{\"tasks\":$nt,\"n\":$total,\"counted\":$((gb - ga)),\"ms\":$((tb - ta)),\"readings\":$(grep -c . "$polls"),\"rate\":$rate}" \
		>"$R/amqp_spread.r$nt.run$rep.json"
	log "amqp spread: $nt task(s): $(fmt_int "$(jget "$R/amqp_spread.r$nt.run$rep.json" rate)") msgs/s"
}

bench_row_amqp_spread() {
	local label="RabbitMQ: load over $AMQP_SPREAD_TASKS tasks vs one task, thread x$AMQP_SPREAD_POOL"
	if [[ $AMQP != full ]]; then
		row "$label" skipped - - - - - - - "$AMQP_NOTE"
		return 0
	fi
	local rep reps=$((REPEAT < 2 ? 2 : REPEAT)) r1 rs ratio mr v pf
	log "amqp spread: $(fmt_int "$AMQP_SPREAD_N") messages on 1 task, then on $AMQP_SPREAD_TASKS"
	for ((rep = 1; rep <= reps; rep++)); do
		amqp_spread_run 1 "$rep" || return 1
		amqp_spread_run "$AMQP_SPREAD_TASKS" "$rep" || return 1
	done
	best amqp_spread.r1
	best "amqp_spread.r$AMQP_SPREAD_TASKS"
	r1=$(jget "$R/amqp_spread.r1.json" rate)
	rs=$(jget "$R/amqp_spread.r$AMQP_SPREAD_TASKS.json" rate)
	ratio=$(calc "$rs / $r1")
	mr=$(calc "$(med_of "$R/amqp_spread.r$AMQP_SPREAD_TASKS.json") / $(med_of "$R/amqp_spread.r1.json")")
	v=$(verdict "$(at_least "$ratio" 0.8)")
	pf=$((AMQP_PREFETCH / AMQP_SPREAD_TASKS < 16 ? 16 : AMQP_PREFETCH / AMQP_SPREAD_TASKS))
	row "$label" "$(rate_cell "$R/amqp_spread.r$AMQP_SPREAD_TASKS.json")" \
		"$(rate_cell "$R/amqp_spread.r1.json") (1 task)" \
		"$(ratio_cell "$R/amqp_spread.r$AMQP_SPREAD_TASKS.json" "$R/amqp_spread.r1.json")" ">= 0.8" "$v" - - - \
		"$(fmt_int "$AMQP_SPREAD_N") msgs, rate between readings of /metrics inside the run; prefetch $AMQP_PREFETCH on 1 task, $pf each on $AMQP_SPREAD_TASKS; runs $(runs_of "$R/amqp_spread.r$AMQP_SPREAD_TASKS.json") vs $(runs_of "$R/amqp_spread.r1.json")"
	target_json amqp_spread.ratio "$(printf %.3f "$ratio")" ">= 0.8" "$v" "$(printf %.3f "$mr")"
}
BENCH_ROWS+=(bench_row_amqp_idle bench_row_amqp_spread)
