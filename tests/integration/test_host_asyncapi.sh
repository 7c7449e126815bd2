# /asyncapi.json for the language hosts' tasks: the request and response
# schemas a task declares in its config (request_schema, response_schema)
# are its payload and reply; a host task without them gets the permissive
# payload and no reply. The official parser accepts the document.
. "$TM_SRCDIR/tests/integration/lib_http.sh"
need_tools jq
need_asyncapi_parser
[[ -f $TM_PLUGINS/lua.so ]] || fail "lua.so not built (liblua5.4-dev)"
cp "$TM_SRCDIR/tests/hosts/task.lua" "$TEST_DIR/task.lua"

# RabbitMQ (request/reply, so replies are listed); the document comes from
# the task map alone, so a broker that is not there will do
CONF=$TEST_DIR/taskmill.yaml
HTTP_PORT=$(free_port)
cat >"$CONF" <<YAML
broker: { url: "amqp://127.0.0.1:$(free_port)/" }
plugin_dir: $TM_PLUGINS
http: { listen: 127.0.0.1:$HTTP_PORT }
shutdown_timeout: 5s
tasks:
  count:
    plugin: lua.so
    queue: q.count
    config:
      script: $TEST_DIR/task.lua
      request_schema:
        type: object
        properties: { text: { type: string, description: the text } }
        required: [text]
      response_schema:
        type: object
        properties: { words: { type: integer } }
  shell:
    plugin: exec.so
    queue: q.shell
    config: { command: [$TM_SRCDIR/tests/hosts/task.sh] }
YAML
start_daemon "$CONF"
wait_until "[[ \$(http_code /asyncapi.json) == 200 ]]" 20
expect_code 200 /asyncapi.json
cp "$RESP_BODY" "$TEST_DIR/asyncapi.json"
asyncapi_check "$TEST_DIR/asyncapi.json"

expect_json '.channels.count.messages.request.payload.required == ["text"]' "count request schema"
expect_json '.channels.count.messages.request.payload.properties.text.type == "string"' "count request property"
expect_json '.channels.count.messages.request.payload.title == "CountRequest"' "count request title"
expect_json '.operations.count.reply.messages == [{"$ref":"#/channels/count_reply/messages/reply"}]' "count reply"
expect_json '.channels.count_reply.messages.reply.payload.properties.words.type == "integer"' "count response schema"
expect_json '.channels.shell.messages.request.payload == {"title":"ShellRequest","type":"object"}' "shell payload"
expect_json '.operations.shell | has("reply") | not' "shell has no reply"

rc=0
stop_daemon || rc=$?
assert_eq 0 "$rc" "daemon exit status"
