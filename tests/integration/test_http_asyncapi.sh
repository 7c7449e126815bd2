# /asyncapi.json: an AsyncAPI 3.0.0 document of the task map that the
# official parser (@asyncapi/parser) accepts with zero errors; add declares
# request and response schemas (payload and reply), noop declares none
# (any JSON object, no reply); the server names the broker without
# credentials. Both brokers list add's reply, addressed by the request's
# reply_to. Every message and
# payload is named after its task, so that code generators (modelina, for
# TypeScript and Python) produce AddRequest / AddResponse, never
# AnonymousSchema.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq
need_asyncapi_parser
[[ -f $TMH_NODE_DIR/node_modules/@asyncapi/modelina/package.json ]] ||
	skip "@asyncapi/modelina not installed in tests/integration/node_modules; run scripts/install-deps.sh"

# asyncapi_models FILE OUT: generate TypeScript and Python models from FILE
# with modelina, as a user generating producer code would; OUT gets
# "LANG<TAB>TYPE<TAB>CODE_NAME" lines (see asyncapi-models.mjs), the code
# goes to OUT.code. Fails the test when generation fails.
asyncapi_models() {
	local rc=0
	node "$TMH_NODE_DIR/asyncapi-models.mjs" "$1" >"$2.all" 2>"$2.err" || rc=$?
	((rc == 0)) || fail "modelina could not generate models from $1: $(head -c 500 "$2.err")"
	sed '/^--- code$/,$d' "$2.all" >"$2"
	sed '1,/^--- code$/d' "$2.all" >"$2.code"
	sed 's/^/# models: /' "$2" >&2
}

# expect_models OUT LANG TYPE...: modelina's LANG models are exactly the
# TYPEs (in any order), none anonymous, and each rendered one has code of
# that name.
expect_models() {
	local out=$1 lang=$2 got want
	shift 2
	got=$(awk -F'\t' -v l="$lang" '$1 == l { print $2 }' "$out" | sort | paste -sd ' ')
	want=$(printf '%s\n' "$@" | sort | paste -sd ' ')
	assert_eq "$want" "$got" "$lang model names"
	awk -F'\t' -v l="$lang" '$1 == l && $3 != "-" && $3 != $2 { bad = 1 } END { exit bad }' "$out" ||
		fail "$lang: generated code named apart from its model: $(grep "^$lang" "$out" | tr '\t\n' ' ;')"
	grep -qi 'anonymous' "$out" "$out.code" && fail "anonymous models from modelina: $(grep -i anonymous "$out" "$out.code" | head -5)"
	true
}

CONF=$TEST_DIR/taskmill.yaml
write_http_config "$CONF" pool_size=2 <<YAML
tasks:
  add: { plugin: add.so }
  noop: { plugin: noop.so, queue: q.noop }
  noop.v2: { plugin: noop.so, queue: q.noop.v2 }
YAML
start_daemon "$CONF"
wait_ping

expect_code 200 /asyncapi.json
assert_match '^application/json' "$(resp_header Content-Type)" "Content-Type"
cp "$RESP_BODY" "$TEST_DIR/asyncapi.json"
asyncapi_check "$TEST_DIR/asyncapi.json"

expect_json '.asyncapi == "3.0.0"' "asyncapi version"
expect_json '.info.title == "taskmill" and (.info.version | length > 0)' "info"
expect_json '.servers | length == 1' "one server"
expect_json "[.servers[]][0] | .host == \"127.0.0.1:$REDIS_PORT\" and .protocol == \"redis\"" "server host and protocol"
expect_json '[.. | strings | select(test("@"))] | length == 0' "no credentials anywhere"

# a channel per task, addressed by its queue; ids fit AsyncAPI's pattern
expect_json '[.channels | keys[] | test("^[A-Za-z0-9_-]+$")] | all' "channel ids"
expect_json '[.channels[] | select(.address == "taskmill.add")] | length == 1' "add channel"
expect_json '[.channels[] | select(.address == "q.noop")] | length == 1' "noop channel"
expect_json '[.channels[] | select(.address == "q.noop.v2")] | length == 1' "noop.v2 channel"

# add: payload = the plugin's request schema
expect_json '.channels.add.messages.request.payload.required == ["a","b"]' "add request schema"
expect_json '.channels.add.messages.request.payload.properties.a.type == "integer"' "add request schema a"
expect_json '.operations.add.action == "receive"' "add operation"
expect_json '.operations.add.channel["$ref"] == "#/channels/add"' "add operation channel"
expect_json '.operations.add.messages == [{"$ref":"#/channels/add/messages/request"}]' "add operation messages"

# names: every message, and every payload, after its task
expect_json '.channels.add.messages.request.name == "AddRequest" and .channels.add.messages.request.payload.title == "AddRequest"' "add request names"
expect_json '.channels.noop.messages.request.name == "NoopRequest" and .channels.noop.messages.request.payload.title == "NoopRequest"' "noop request names"
expect_json '.channels.noop_v2.messages.request.name == "NoopV2Request"' "noop.v2 request name"
expect_json '[.channels[].messages[] | (.name | length > 0) and (.title | length > 0) and (.payload.title | length > 0)] | all' \
	"a name and title on every message, a title on every payload"

# a reply on Redis too (add declares a response schema): an entry on the
# stream the request's reply_to names
printf '{"a":1,"b":2}' >"$TEST_DIR/one.json"
tm emit -c "$CONF" add - --wait 5 <"$TEST_DIR/one.json"
assert_eq 0 "$TM_RC" "emit --wait on Redis (stderr: $(head -c 300 "$TM_ERR"))"
expect_json '.operations.add | has("reply")' "a reply on Redis"
expect_json '.operations.add.reply.address.location == "$message.header#/reply_to"' "the reply's address on Redis"
expect_json '[.channels[] | select(.address == null) | .description | test("reply_to")] == [true]' "one reply channel on Redis, saying where answers go"
redis_models=(AddRequest AddResponse NoopRequest NoopV2Request)
asyncapi_models "$TEST_DIR/asyncapi.json" "$TEST_DIR/models.redis"
expect_models "$TEST_DIR/models.redis" typescript "${redis_models[@]}"
expect_models "$TEST_DIR/models.redis" python "${redis_models[@]}"
grep -q '^class AddRequest' "$TEST_DIR/models.redis.code" || fail "no class AddRequest generated"

# noop: permissive payload, no reply
expect_json '.channels.noop.messages.request.payload == {"title":"NoopRequest","type":"object"}' "noop payload"
expect_json '.operations.noop.action == "receive" and (.operations.noop | has("reply") | not)' "noop operation"
expect_json '[.operations[] | select(.action == "receive")] | length == 3' "one receive per task"

# every $ref resolves inside the document
for ref in $(jqr '[.. | objects | .["$ref"]? | strings] | unique[]'); do
	path=${ref#\#}
	jq -e --arg p "$path" 'getpath($p | ltrimstr("/") | split("/")) != null' "$TEST_DIR/asyncapi.json" >/dev/null ||
		fail "\$ref $ref does not resolve"
done

# HEAD works too, with no body
expect_code 200 -I /asyncapi.json

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status after SIGTERM"

# On RabbitMQ (request/reply): add's reply, named AddResponse. The document
# comes from the task map alone, so a broker that is not there will do.
ACONF=$TEST_DIR/amqp.yaml
HTTP_PORT=$(free_port)
cat >"$ACONF" <<YAML
broker: { url: "amqp://127.0.0.1:$(free_port)/" }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HTTP_PORT }
shutdown_timeout: 5s
tasks:
  add: { plugin: add.so }
  noop: { plugin: noop.so, queue: q.noop }
YAML
start_daemon "$ACONF"
wait_until "[[ \$(http_code /asyncapi.json) == 200 ]]" 20
expect_code 200 /asyncapi.json
cp "$RESP_BODY" "$TEST_DIR/asyncapi-amqp.json"
asyncapi_check "$TEST_DIR/asyncapi-amqp.json"
reply_ref=$(jqr '.operations.add.reply.channel["$ref"]')
assert_match '^#/channels/[A-Za-z0-9_-]+$' "$reply_ref" "add reply channel ref"
reply_id=${reply_ref#\#/channels/}
expect_json ".channels[\"$reply_id\"].messages | to_entries[0].value.payload.required == [\"sum\"]" "add response schema"
expect_json ".operations.add.reply.messages[0][\"\$ref\"] | startswith(\"#/channels/$reply_id/messages/\")" "add reply message ref"
expect_json ".channels[\"$reply_id\"].messages | to_entries[0].value | .name == \"AddResponse\" and .payload.title == \"AddResponse\"" "add response names"
expect_json '.operations.add.reply.address.location == "$message.header#/reply_to"' "the reply's address on RabbitMQ"
asyncapi_models "$TEST_DIR/asyncapi-amqp.json" "$TEST_DIR/models.amqp"
expect_models "$TEST_DIR/models.amqp" typescript AddRequest AddResponse NoopRequest
expect_models "$TEST_DIR/models.amqp" python AddRequest AddResponse NoopRequest
grep -q '^class AddResponse' "$TEST_DIR/models.amqp.code" || fail "no class AddResponse generated"
rc=0
stop_daemon || rc=$?
note "the daemon without its broker stopped with status $rc"
