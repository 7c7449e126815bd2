# The harness's free_port (lib.sh): within one test it never prints the
# same port twice, even before anything binds the ports it printed (a
# test that writes three daemons' configurations and then starts them
# once got two daemons on one port; the second could not listen and
# exited). 150 picks in a slice of 2,000 ports: without the memory about
# five would repeat.
N=150
PORTS_SEEN=$(
	for ((k = 0; k < N; k++)); do
		TM_PORT_LO=24000 TM_PORT_SPAN=2000 free_port
	done
)
distinct=$(sort -u <<<"$PORTS_SEEN" | wc -l)
assert_eq "$N" "$distinct" "distinct ports among $N picks"
# each is in the slice
while read -r p; do
	((p >= 24000 && p < 26000)) || fail "port $p outside the slice 24000-25999"
done <<<"$PORTS_SEEN"
