# lib_fault.sh's RabbitMQ helpers: rabbit_mem_alarm and rabbit_disk_alarm
# raise the node's alarm (publishers are blocked: a confirmed publish does
# not complete) and clear it again (the same publish goes through).
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"
. "$TM_SRCDIR/tests/integration/lib_fault.sh"

Q=$AQ.alarm
amqptool declare "$Q" 0

# publish_within SECONDS: one confirmed publish to Q completes in time.
publish_within() {
	timeout "$1" "$AMQPTOOL" "$RABBIT_PORT" publish "$Q" 1 '{"n":%d}' >/dev/null 2>&1
}

publish_within 30 || fail "publish before any alarm"
for kind in mem disk; do
	"rabbit_${kind}_alarm" on
	alarms=$(rabbit_alarms | paste -sd ' ')
	note "alarms with $kind on: $alarms"
	[[ " $alarms " == *" ${kind/mem/memory} "* ]] || fail "no $kind alarm listed: '$alarms'"
	if publish_within 5; then
		fail "a publish completed during the $kind alarm"
	fi
	"rabbit_${kind}_alarm" off
	assert_eq "" "$(rabbit_alarms)" "alarms after $kind off"
	publish_within 30 || fail "publish after the $kind alarm was cleared"
done
