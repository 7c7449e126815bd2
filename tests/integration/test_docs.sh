# run.sh: serial
# The documentation's shell blocks run as written (lib_docs.sh): the README's
# tour with its own Redis, and every other page's runnable blocks. Blocks
# that cannot run here carry a "not run" reason, listed in the log.
# RabbitMQ's page runs in test_amqp_docs.sh, against the test node.
. "$TM_SRCDIR/tests/integration/lib_docs.sh"

command -v redis-server >/dev/null || fail "redis-server is needed"
port_is_free 6390 || fail "port 6390, which the README's tour uses, is taken"
port_is_free 9999 || fail "port 9999, which conf/taskmill.yaml uses, is taken"

DOCS_ENV=()
for f in "$TM_SRCDIR/README.md" "$TM_SRCDIR"/docs/*.md; do
	docs_skipped "$f" | while read -r line; do note "not run: ${line#"$TM_SRCDIR"/}"; done
	[[ $f == */docs/rabbitmq.md ]] && continue
	docs_run "$f"
done
# the tour stopped what it started
port_is_free 6390 || fail "the tour left its redis-server running"
