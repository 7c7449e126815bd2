# scripts/bench/util.sh - the small helpers `make bench` (scripts/bench.sh)
# and `make bench-peers` (scripts/bench-peers.sh) share: free ports, JSON
# fields, arithmetic and number formatting, redis-cli on $REDIS_PORT.
# Sourced; BENCH_NAME names the caller in messages.

# free_port: a free loopback port below the ephemeral range, where no
# outgoing connection of a client can be holding it.
EPHEMERAL_LOW=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
((EPHEMERAL_LOW > 21000)) || EPHEMERAL_LOW=60000
free_port() {
	local p i
	for ((i = 0; i < 100; i++)); do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % (EPHEMERAL_LOW - 20000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	echo "${BENCH_NAME:-bench}: no free port" >&2
	return 1
}

# jget FILE KEY: a number or string field of a flat JSON object.
jget() {
	sed -n "s/.*\"$2\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" "$1" | tr -d '"'
}

# calc EXPR: floating point arithmetic (awk).
calc() {
	awk "BEGIN { x = $1; print x }"
}

fmt_int() { # thousands separators
	awk -v x="$1" 'BEGIN { s = sprintf("%.0f", x); o = "";
		while (length(s) > 3) { o = "," substr(s, length(s) - 2) o; s = substr(s, 1, length(s) - 3) }
		print s o }'
}

rcli() {
	redis-cli -h 127.0.0.1 -p "$REDIS_PORT" "$@"
}
