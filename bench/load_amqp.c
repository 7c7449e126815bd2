/* load_amqp.c - pre-load a RabbitMQ queue with N messages, fast.
 *
 *   load_amqp [--declare] [--persistent] HOST PORT QUEUE N
 *
 * The queue must exist: the daemon declares it, with its own arguments;
 * --declare declares it here (durable, no arguments) for a run without
 * the daemon. Publishes N messages to the default exchange with routing
 * key QUEUE: body {}, content_type application/json, a message_id, and
 * delivery_mode 1 (transient) or, with --persistent, 2. Then waits until
 * the queue holds every one of them as ready (up to 120 s). */
#include "bench_amqp.h"

#define PROG "load_amqp"

int main(int argc, char **argv)
{
    int declare = 0, persistent = 0, a = 1;
    for (; a < argc && strncmp(argv[a], "--", 2) == 0; a++) {
        if (strcmp(argv[a], "--declare") == 0)
            declare = 1;
        else if (strcmp(argv[a], "--persistent") == 0)
            persistent = 1;
        else
            break;
    }
    if (argc - a != 4) {
        fprintf(stderr, "usage: %s [--declare] [--persistent] HOST PORT "
                        "QUEUE N\n", PROG);
        return 2;
    }
    const char *host = argv[a];
    int port = (int)bench_parse_long(PROG, "PORT", argv[a + 1]);
    const char *queue = argv[a + 2];
    long long n = bench_parse_long(PROG, "N", argv[a + 3]);
    const char *body = "{}";

    amqp_connection_state_t c = bench_amqp_open(PROG, host, port);
    if (declare) {
        amqp_queue_declare(c, 1, amqp_cstring_bytes(queue),
                           /* passive = */ 0, /* durable = */ 1,
                           /* exclusive = */ 0, /* auto_delete = */ 0,
                           amqp_empty_table);
        bench_amqp_check(PROG, amqp_get_rpc_reply(c), "queue.declare");
    }
    long long before = bench_amqp_ready(PROG, c, queue);

    amqp_basic_properties_t props;
    memset(&props, 0, sizeof props);
    props._flags = AMQP_BASIC_CONTENT_TYPE_FLAG |
                   AMQP_BASIC_DELIVERY_MODE_FLAG |
                   AMQP_BASIC_MESSAGE_ID_FLAG;
    props.content_type = amqp_cstring_bytes("application/json");
    props.delivery_mode = persistent ? 2 : 1;
    char idbuf[48];
    int64_t t0 = bench_mono_ns();
    for (long long i = 0; i < n; i++) {
        int len = snprintf(idbuf, sizeof idbuf, "bench-%lld", i);
        props.message_id.bytes = idbuf;
        props.message_id.len = (size_t)len;
        int rc = amqp_basic_publish(c, 1, amqp_empty_bytes,
                                    amqp_cstring_bytes(queue),
                                    /* mandatory = */ 0, /* immediate = */ 0,
                                    &props, amqp_cstring_bytes(body));
        if (rc != AMQP_STATUS_OK)
            bench_die(PROG, "basic.publish: %s", amqp_error_string2(rc));
    }
    int64_t t1 = bench_mono_ns();
    long long have = 0;
    for (int64_t until = t1 + 120000000000LL; bench_mono_ns() < until;) {
        have = bench_amqp_ready(PROG, c, queue);
        if (have >= before + n)
            break;
        bench_sleep_until(bench_mono_ns() + 20000000LL);
    }
    int64_t t2 = bench_mono_ns();
    if (have < before + n)
        bench_die(PROG, "the queue holds %lld of %lld messages after 120 s",
                  have, before + n);
    fprintf(stderr, "%s: %lld messages published in %.2f s, all queued "
            "after %.2f s (%.0f/s)\n", PROG, n, (double)(t1 - t0) / 1e9,
            (double)(t2 - t0) / 1e9, (double)n / ((double)(t2 - t0) / 1e9));
    bench_amqp_close(c);
    return 0;
}
