/* ceiling_amqp.c - the leanest correct RabbitMQ consumer we can write with
 * rabbitmq-c: the ceiling that taskmill's AMQP figures are divided by.
 *
 *   ceiling_amqp HOST PORT QUEUE PREFETCH N
 *
 * basic.qos PREFETCH, basic.consume with manual acks, then frame by frame
 * (no envelope, no body copy): basic.deliver, content header, body. The
 * body is looked at, no handler runs. Acks are cumulative (multiple=true):
 * one when a quarter of the window is unacknowledged, and one whenever
 * nothing more is buffered, before blocking on the socket. After N
 * messages, a synchronous basic.qos makes sure the broker has taken the
 * last ack; then a byte goes to fd $BENCH_DONE_FD if set (see measure.c).
 * Prints "consumed=... seconds=... rate=..." (its own view, first delivery
 * to the last ack taken) on stdout. */
#include "bench_amqp.h"

#define PROG "ceiling_amqp"

static void wait_frame(amqp_connection_state_t c, amqp_frame_t *f)
{
    int rc = amqp_simple_wait_frame(c, f);
    if (rc != AMQP_STATUS_OK)
        bench_die(PROG, "reading a frame: %s", amqp_error_string2(rc));
}

static void ack(amqp_connection_state_t c, uint64_t tag)
{
    int rc = amqp_basic_ack(c, 1, tag, /* multiple = */ 1);
    if (rc != AMQP_STATUS_OK)
        bench_die(PROG, "basic.ack: %s", amqp_error_string2(rc));
}

int main(int argc, char **argv)
{
    bench_hold_init();
    if (argc != 6) {
        fprintf(stderr, "usage: %s HOST PORT QUEUE PREFETCH N\n", PROG);
        return 2;
    }
    const char *host = argv[1];
    int port = (int)bench_parse_long(PROG, "PORT", argv[2]);
    const char *queue = argv[3];
    long long prefetch = bench_parse_long(PROG, "PREFETCH", argv[4]);
    long long n = bench_parse_long(PROG, "N", argv[5]);
    if (prefetch < 1 || prefetch > 65535)
        bench_die(PROG, "PREFETCH must be 1 to 65535");
    long long ack_every = prefetch / 4 > 0 ? prefetch / 4 : 1;

    amqp_connection_state_t c = bench_amqp_open(PROG, host, port);
    amqp_basic_qos(c, 1, 0, (uint16_t)prefetch, /* global = */ 0);
    bench_amqp_check(PROG, amqp_get_rpc_reply(c), "basic.qos");
    amqp_basic_consume(c, 1, amqp_cstring_bytes(queue), amqp_empty_bytes,
                       /* no_local = */ 0, /* no_ack = */ 0,
                       /* exclusive = */ 0, amqp_empty_table);
    bench_amqp_check(PROG, amqp_get_rpc_reply(c), "basic.consume");

    long long consumed = 0, unacked = 0, body_bytes = 0;
    uint64_t last_tag = 0;
    int64_t first_ns = 0;
    while (consumed < n) {
        amqp_frame_t f;
        if (unacked > 0 && amqp_frames_enqueued(c) == 0 &&
            amqp_data_in_buffer(c) == 0) {
            /* nothing more to read without blocking: ack what is done */
            ack(c, last_tag);
            unacked = 0;
        }
        amqp_maybe_release_buffers(c);
        wait_frame(c, &f);
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        if (f.payload.method.id != AMQP_BASIC_DELIVER_METHOD) {
            if (f.payload.method.id == AMQP_CHANNEL_CLOSE_METHOD ||
                f.payload.method.id == AMQP_CONNECTION_CLOSE_METHOD)
                bench_die(PROG, "the broker closed the channel");
            continue;
        }
        const amqp_basic_deliver_t *d = f.payload.method.decoded;
        uint64_t tag = d->delivery_tag;
        if (first_ns == 0)
            first_ns = bench_mono_ns();
        wait_frame(c, &f);
        if (f.frame_type != AMQP_FRAME_HEADER)
            bench_die(PROG, "expected a content header");
        uint64_t size = f.payload.properties.body_size, got = 0;
        while (got < size) {
            wait_frame(c, &f);
            if (f.frame_type != AMQP_FRAME_BODY)
                bench_die(PROG, "expected a body frame");
            got += f.payload.body_fragment.len;
        }
        body_bytes += (long long)got;
        consumed++;
        unacked++;
        last_tag = tag;
        if (unacked >= ack_every || consumed == n) {
            ack(c, last_tag);
            unacked = 0;
        }
    }
    /* a synchronous call: the broker has processed the acks before it */
    amqp_basic_qos(c, 1, 0, (uint16_t)prefetch, /* global = */ 0);
    bench_amqp_check(PROG, amqp_get_rpc_reply(c), "basic.qos (final)");
    int64_t last_ns = bench_mono_ns();
    const char *fd = getenv("BENCH_DONE_FD");
    if (fd != NULL) {
        char b = 'x';
        if (write(atoi(fd), &b, 1) != 1)
            bench_die(PROG, "BENCH_DONE_FD: %s", strerror(errno));
    }
    double sec = (double)(last_ns - first_ns) / 1e9;
    printf("consumed=%lld seconds=%.6f rate=%.0f body_bytes=%lld\n",
           consumed, sec, sec > 0 ? (double)consumed / sec : 0.0,
           body_bytes);
    fflush(stdout);
    bench_hold();
    bench_amqp_close(c);
    return 0;
}
