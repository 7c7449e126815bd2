# /asyncapi.json: an AsyncAPI 3.0.0 document of the task map that the
# official parser (@asyncapi/parser) accepts with zero errors; add declares
# request and response schemas (payload and reply), noop declares none
# (any JSON object, no reply); the server names the broker without
# credentials.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq
need_asyncapi_parser

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

# add: payload = the plugin's request schema; a reply with its response
expect_json '.channels.add.messages.request.payload.required == ["a","b"]' "add request schema"
expect_json '.channels.add.messages.request.payload.properties.a.type == "integer"' "add request schema a"
expect_json '.operations.add.action == "receive"' "add operation"
expect_json '.operations.add.channel["$ref"] == "#/channels/add"' "add operation channel"
expect_json '.operations.add.messages == [{"$ref":"#/channels/add/messages/request"}]' "add operation messages"
reply_ref=$(jqr '.operations.add.reply.channel["$ref"]')
assert_match '^#/channels/[A-Za-z0-9_-]+$' "$reply_ref" "add reply channel ref"
reply_id=${reply_ref#\#/channels/}
expect_json ".channels[\"$reply_id\"].messages | to_entries[0].value.payload.required == [\"sum\"]" "add response schema"
expect_json ".operations.add.reply.messages[0][\"\$ref\"] | startswith(\"#/channels/$reply_id/messages/\")" "add reply message ref"

# noop: permissive payload, no reply
expect_json '.channels.noop.messages.request.payload == {"type":"object"}' "noop payload"
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
