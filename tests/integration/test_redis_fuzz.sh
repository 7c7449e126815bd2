# Malformed stream entries: random bytes, no body field, bodies that are
# JSON but not objects, over max_payload (10 MiB against the default 1 MiB,
# and one byte over), invalid UTF-8 (bad bytes, overlong, surrogates,
# truncated sequences), empty, NUL bytes (trailing, inside a string, alone),
# trailing garbage, truncated JSON, JSON that lenient parsers accept (raw
# control characters in strings, 01, 1., a trailing comma), nesting 100000
# deep. Each is dead-lettered at once as invalid (attempts 0) with a reason
# and its body kept byte for byte; objects of the wrong shape are rejected
# by the `add` plugin (attempts 1); valid bodies, up to exactly max_payload,
# succeed. The daemon keeps serving and nothing stays pending.
. "$TM_SRCDIR/tests/integration/lib_redis.sh"

CONF=$TEST_DIR/taskmill.yaml
B=$TEST_DIR/bodies
mkdir -p "$B"

write_config "$CONF" <<YAML
tasks:
  add: { plugin: add.so, queue: q.fz, on_error: reject }
YAML

declare -A CLASS=() WHAT=()
n_invalid=0 n_rejected=0 n_success=0 n_either=0
# add_entry CLASS WHAT FILE [FIELD VALUE...]: XADD the file's bytes as the
# body (after the other fields); CLASS is what must become of it: invalid,
# rejected, success, or "either" (success or invalid/rejected: not pinned
# down by the contract; it must still be settled exactly once).
add_entry() {
	local class=$1 what=$2 file=$3 id
	shift 3
	id=$(xadd_file q.fz body "$file" "$@")
	CLASS[$id]=$class
	note "$id: $what ($class)"
	WHAT[$id]=$what
	case $class in
	invalid) n_invalid=$((n_invalid + 1)) ;;
	rejected) n_rejected=$((n_rejected + 1)) ;;
	success) n_success=$((n_success + 1)) ;;
	either) n_either=$((n_either + 1)) ;;
	esac
}
# body_file NAME FORMAT [ARGS...]: printf into a file (\xHH and \0 escapes
# are bytes), print its path.
body_file() {
	local f=$B/$1
	shift
	# shellcheck disable=SC2059
	printf "$@" >"$f"
	echo "$f"
}
# add_fields CLASS WHAT FIELD VALUE...: an entry with exactly these fields.
add_fields() {
	local class=$1 what=$2 id
	shift 2
	id=$(rcall XADD q.fz '*' "$@")
	CLASS[$id]=$class
	note "$id: $what ($class)"
	WHAT[$id]=$what
	n_invalid=$((n_invalid + 1))
}

# ---- random bytes ("x" first: never JSON)
for size in 1 100 1000 4096 65536; do
	{ printf x; head -c "$size" /dev/urandom; } >"$B/rand$size"
	add_entry invalid "random bytes ($size)" "$B/rand$size"
done
# ---- no body field
add_fields invalid "no body field" foo bar
add_fields invalid "fields Body and bodyx, no body" Body '{"a":1,"b":2}' bodyx '{"a":1,"b":2}'
# ---- JSON, not an object
add_entry invalid "array" "$(body_file arr '[1,2]')"
add_entry invalid "number" "$(body_file num '42')"
add_entry invalid "string" "$(body_file str '"{\\"a\\":1,\\"b\\":2}"')"
add_entry invalid "null" "$(body_file null 'null')"
add_entry invalid "true" "$(body_file true 'true')"
# ---- over max_payload (1 MiB by default)
{
	printf '{"a":1,"b":2,"pad":"'
	head -c $((10 * 1024 * 1024)) /dev/zero | tr '\0' 'p'
	printf '"}'
} >"$B/big10m"
add_entry invalid "10 MiB body" "$B/big10m"
pad_to() { # pad_to SIZE FILE: a valid add body of exactly SIZE bytes
	local fill=$(($1 - 22))
	{
		printf '{"a":1,"b":2,"pad":"'
		head -c "$fill" /dev/zero | tr '\0' 'p'
		printf '"}'
	} >"$2"
	assert_eq "$1" "$(stat -c %s "$2")" "size of $2"
}
pad_to $((1024 * 1024 + 1)) "$B/over1"
add_entry invalid "max_payload + 1 byte" "$B/over1"
pad_to $((1024 * 1024)) "$B/exact"
add_entry success "exactly max_payload" "$B/exact"
# ---- not UTF-8
add_entry invalid "byte 0xff" "$(body_file ff '{"a":1,"b":2,"s":"\xff"}')"
add_entry invalid "overlong /" "$(body_file overlong '{"a":1,"b":2,"s":"\xc0\xaf"}')"
add_entry invalid "UTF-8 surrogate" "$(body_file surrogate '{"a":1,"b":2,"s":"\xed\xa0\x80"}')"
add_entry invalid "truncated sequence" "$(body_file trunc8 '{"a":1,"b":2,"s":"\xe2\x82"}')"
add_entry invalid "latin-1" "$(body_file latin1 '{"a":1,"b":2,"s":"caf\xe9"}')"
# ---- empty, white space, NUL bytes
add_entry invalid "empty body" "$(body_file empty '')"
add_entry invalid "white space only" "$(body_file ws ' \n\t ')"
add_entry invalid "NUL then garbage" "$(body_file nul1 '{"a":1,"b":2}\0junk')"
add_entry invalid "trailing NUL" "$(body_file nul2 '{"a":1,"b":2}\0')"
add_entry invalid "NUL inside a string" "$(body_file nul3 '{"a":1,"b":2,"s":"x\0y"}')"
add_entry invalid "a lone NUL" "$(body_file nul4 '\0')"
# ---- broken JSON
add_entry invalid "trailing garbage" "$(body_file garbage '{"a":1,"b":2} xyz')"
add_entry invalid "two objects" "$(body_file two '{"a":1,"b":2}{"a":1,"b":2}')"
add_entry invalid "truncated JSON" "$(body_file truncated '{"a":1,"b":')"
add_entry invalid "single quotes" "$(body_file quotes "{'a':1,'b':2}")"
add_entry invalid "raw newline in a string" "$(body_file rawnl '{"a":1,"b":2,"s":"x\ny"}')"
add_entry invalid "raw tab in a string" "$(body_file rawtab '{"a":1,"b":2,"s":"x\ty"}')"
add_entry invalid "number with a leading zero" "$(body_file lead0 '{"a":1,"b":2,"x":01}')"
add_entry invalid "number ending in a dot" "$(body_file dot '{"a":1,"b":2,"x":1.}')"
add_entry invalid "trailing comma" "$(body_file comma '{"a":1,"b":2,}')"
{
	printf '{"a":1,"b":2,"x":'
	head -c 100000 /dev/zero | tr '\0' '['
	head -c 100000 /dev/zero | tr '\0' ']'
	printf '}'
} >"$B/deep"
add_entry invalid "nesting 100000 deep" "$B/deep"
# ---- objects of the wrong shape: the plugin rejects them
add_entry rejected "b missing" "$(body_file nob '{"a":1}')"
add_entry rejected "empty object" "$(body_file emptyobj '{}')"
add_entry rejected "a is a string" "$(body_file astr '{"a":"1","b":2}')"
add_entry rejected "a is not an integer" "$(body_file afloat '{"a":1.5,"b":2}')"
add_entry rejected "b is null" "$(body_file bnull '{"a":1,"b":null}')"
add_entry rejected "sum overflows" "$(body_file ovf '{"a":9223372036854775807,"b":1}')"
add_entry rejected "a beyond 64 bits" "$(body_file huge '{"a":99999999999999999999999,"b":1}')"
# ---- not pinned down: settled once, whichever way
add_entry either "body field twice" "$(body_file twice1 'not json')" body '{"a":1,"b":2}'
{
	printf '{"x":'
	head -c 500 /dev/zero | tr '\0' '['
	head -c 500 /dev/zero | tr '\0' ']'
	printf ',"a":1,"b":2}'
} >"$B/deep500"
add_entry either "nesting 500 deep before a and b" "$B/deep500"
# ---- valid
add_entry success "plain" "$(body_file ok1 '{"a":1,"b":2}')"
add_entry success "extra fields" "$(body_file ok2 '{"a":-5,"b":7,"extra":[1,{"x":null}],"s":"]}"}')"
add_entry success "escaped NUL" "$(body_file ok3 '{"a":1,"b":2,"s":"\\u0000"}')"
add_entry success "multi-byte UTF-8" "$(body_file ok4 '{"a":1,"b":2,"s":"h\xc3\xa9llo \xf0\x9f\x8e\x89"}')"
add_entry success "surrounding white space" "$(body_file ok5 ' \n{"a":1,"b":2}\t\n')"

N=${#CLASS[@]}
note "$N entries: $n_invalid invalid, $n_rejected rejected, $n_success valid, $n_either either way"
assert_eq "$N" "$(xlen q.fz)" "XLEN q.fz"

start_daemon "$CONF"
wait_ping
total() {
	local s=0 o
	for o in success error rejected timeout crashed invalid; do
		s=$((s + $(metric taskmill_tasks_total "task=\"add\",outcome=\"$o\"")))
	done
	echo "$s"
}
wait_until "[[ \$(total) -ge $N ]]" 40
wait_until '[[ $(xpending q.fz) == 0 ]]' 10
inv=$(metric taskmill_tasks_total 'task="add",outcome="invalid"')
rej=$(metric taskmill_tasks_total 'task="add",outcome="rejected"')
ok=$(metric taskmill_tasks_total 'task="add",outcome="success"')
note "outcomes: $inv invalid, $rej rejected, $ok success"
assert_eq "$N" "$(total)" "attempts in all (each entry settled once)"
assert_eq "$N 0 0" "$(stream_state q.fz)" "acked/pending/undelivered of q.fz"
assert_eq "$N" "$(xlen q.fz)" "XLEN q.fz"

# What became of each entry: its dead letter (attempts 0: invalid, never
# ran; 1: rejected by the plugin) or none (it succeeded).
same_body() { # same_body ORIGIN DLQ_ID: byte-for-byte, compared in redis
	rcall EVAL "local function body(k, id)
			local r = redis.call('XRANGE', k, id, id)
			local f = r[1][2]
			for i = 1, #f, 2 do if f[i] == 'body' then return f[i + 1] end end
			return false
		end
		if body(KEYS[1], ARGV[1]) == body(KEYS[2], ARGV[2]) then return 1 end
		return 0" 2 q.fz q.fz.dlq "$1" "$2"
}
declare -A DLQ_OF=()
for dlq_id in $(xids q.fz.dlq); do
	origin=$(xfield q.fz.dlq "$dlq_id" origin_id)
	[[ -n ${CLASS[$origin]:-} ]] || fail "DLQ entry $dlq_id: origin_id '$origin' is not a published id"
	[[ -z ${DLQ_OF[$origin]:-} ]] || fail "'${WHAT[$origin]}' dead-lettered twice"
	DLQ_OF[$origin]=$dlq_id
done
WRONG=()
for origin in $(printf '%s\n' "${!CLASS[@]}" | sort); do
	class=${CLASS[$origin]}
	what=${WHAT[$origin]}
	dlq_id=${DLQ_OF[$origin]:-}
	if [[ -z $dlq_id ]]; then
		got=success
		note "$what: succeeded"
	else
		attempts=$(xfield q.fz.dlq "$dlq_id" attempts)
		error=$(xfield q.fz.dlq "$dlq_id" error)
		case $attempts in
		0) got=invalid ;;
		1) got=rejected ;;
		*) got="dead-lettered after $attempts attempts" ;;
		esac
		note "$what: $got: $error"
		assert_ne "" "$error" "DLQ error of '$what'"
		assert_eq add "$(xfield q.fz.dlq "$dlq_id" task)" "DLQ task of '$what'"
		assert_match '^[0-9]{13}$' "$(xfield q.fz.dlq "$dlq_id" failed_at)" "DLQ failed_at of '$what'"
		if [[ $what != *"no body"* ]] && [[ $(same_body "$origin" "$dlq_id") != 1 ]]; then
			WRONG+=("the dead letter of '$what' does not keep its body byte for byte")
		fi
	fi
	if [[ $class == either ]]; then
		[[ $got == success || $got == invalid || $got == rejected ]] && continue
	elif [[ $got == "$class" ]]; then
		continue
	fi
	WRONG+=("'$what' ($origin) should be $class, was $got")
done
if ((${#WRONG[@]} > 0)); then
	printf 'WRONG: %s\n' "${WRONG[@]}" >&2
	fail "${#WRONG[@]} entries handled wrongly: $(printf '%s; ' "${WRONG[@]}")"
fi
assert_ge "$n_invalid" "$inv" "invalid outcomes"
assert_le "$((n_invalid + n_either))" "$inv" "invalid outcomes"
assert_ge "$n_rejected" "$rej" "rejected outcomes"
assert_le "$((n_rejected + n_either))" "$rej" "rejected outcomes"
assert_ge "$n_success" "$ok" "successes"
assert_le "$((n_success + n_either))" "$ok" "successes"
assert_eq 0 "$(metric taskmill_tasks_total 'task="add",outcome="error"')" "error outcomes"
assert_eq 0 "$(metric taskmill_tasks_total 'task="add",outcome="crashed"')" "crashed outcomes"
assert_eq "$((N - ok))" "${#DLQ_OF[@]}" "dead letters (every entry that did not succeed)"
assert_eq "$((inv + rej))" "$(metric taskmill_dead_letter_total 'task="add"')" "taskmill_dead_letter_total"

daemon_alive || fail "the daemon died"
assert_eq 200 "$(http_code /ping)" "/ping after the malformed entries"
# still working
id=$(rcall XADD q.fz '*' body '{"a":20,"b":22}')
wait_metric taskmill_tasks_total 'task="add",outcome="success"' $((ok + 1)) 10
rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"
