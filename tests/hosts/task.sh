#!/bin/sh
# Test task for the exec host: the body's "mode" picks the behaviour.
case ${1:-} in
count)
	# the body's size, read in full (a large body crosses the socket
	# buffer many times)
	printf '{"bytes":%s}\n' "$(wc -c | tr -d ' ')"
	exit 0 ;;
esac
body=$(cat)
mode=$(printf '%s' "$body" | sed -n 's/.*"mode" *: *"\([a-z]*\)".*/\1/p')
case $mode in
ok) printf '{"ok":true,"task":"%s","attempt":%s,"id":"%s","deadline":%s}\n' \
	"$TASKMILL_TASK" "$TASKMILL_ATTEMPT" "$TASKMILL_MESSAGE_ID" \
	"${TASKMILL_DEADLINE_MS:-0}" ;;
env) printf '{"greeting":"%s","cwd":"%s"}\n' "$GREETING" "$(pwd)" ;;
empty) ;;
error) echo "something broke" >&2; exit 3 ;;
reject) echo "bad input" >&2; exit 65 ;;
invalid) echo "this is not json" ;;
signal) kill -SEGV $$ ;;
spam) i=0; while [ $i -lt 100 ]; do echo "line $i" >&2; i=$((i + 1)); done ;;
fds)
	# a fresh shell (sh keeps a script open on a descriptor of its own)
	/bin/sh -c 'ls /proc/$$/fd' | tr '\n' ' ' >&2
	echo >&2
	echo '{}' ;;
sleep)
	# a child of the command, to see the whole group go
	sleep 100 &
	echo "$!" >"$PIDFILE.bg"
	echo $$ >"$PIDFILE"
	sleep 100 ;;
big) head -c 200000 /dev/zero | tr '\0' 'a' | sed 's/.*/"&"/' ;;
*) echo "unknown mode '$mode'" >&2; exit 65 ;;
esac
