# run.sh: serial
# The RabbitMQ page's shell blocks run as written (lib_docs.sh), against the
# test node: its quick start takes the broker URL from TASKMILL_AMQP_URL.
. "$TM_SRCDIR/tests/integration/lib_docs.sh"
. "$TM_SRCDIR/tests/integration/lib_amqp.sh"

port_is_free 9999 || fail "port 9999, which the quick start uses, is taken"
DOCS_ENV=("TASKMILL_AMQP_URL=amqp://guest:guest@127.0.0.1:$RABBIT_PORT/")
docs_run "$TM_SRCDIR/docs/rabbitmq.md"
