"""pika peer: a blocking consumer with manual acks on RabbitMQ.

  pika_peer.py load URL QUEUE N              N messages "{}" (transient)
  pika_peer.py pub URL QUEUE RATE SECS       messages '{"t_us": ..}'
  pika_peer.py consume URL QUEUE PREFETCH N  until SIGTERM

The consumer is the one pika's documentation shows (basic_qos, then
basic_consume with a callback that acks each message), with the prefetch
that RabbitMQ's documentation suggests for throughput (a few hundred).
Each body is decoded from JSON. After the N-th ack, a synchronous
basic.qos makes sure the broker has taken it; then a byte goes to
BENCH_DONE_FD. In latency mode the latency is taken as the callback starts:
publish to run, like the taskmill RabbitMQ row.
"""
import json
import sys
import time

import pika

import peerlib


def channel(url, queue):
    conn = pika.BlockingConnection(pika.URLParameters(url))
    ch = conn.channel()
    ch.queue_declare(queue=queue, durable=True)
    return conn, ch


def load(url, queue, n):
    conn, ch = channel(url, queue)
    for _ in range(n):
        ch.basic_publish(exchange="", routing_key=queue, body=b"{}")
    # the publishes are asynchronous: wait until the queue holds them all
    for _ in range(6000):
        if ch.queue_declare(queue=queue, passive=True).method.message_count >= n:
            break
        time.sleep(0.05)
    conn.close()


def pub(url, queue, rate, seconds):
    conn, ch = channel(url, queue)
    for _ in peerlib.paced(rate, seconds):
        body = json.dumps({"t_us": peerlib.now_us()}).encode()
        ch.basic_publish(exchange="", routing_key=queue, body=body)
    conn.close()


def consume(url, queue, prefetch, n):
    conn, ch = channel(url, queue)
    lat = peerlib.LatencyLog()
    done = [0]

    def on_message(chan, method, _props, body):
        if lat:
            lat.record(json.loads(body).get("t_us"))
        else:
            json.loads(body)
        chan.basic_ack(delivery_tag=method.delivery_tag)
        done[0] += 1
        if done[0] == n:
            chan.basic_qos(prefetch_count=prefetch)  # synchronous
            peerlib.signal_done()

    ch.basic_qos(prefetch_count=prefetch)
    ch.basic_consume(queue=queue, on_message_callback=on_message)
    peerlib.mark_ready()
    ch.start_consuming()


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "load" and len(argv) == 5:
        load(argv[2], argv[3], int(argv[4]))
    elif cmd == "pub" and len(argv) == 6:
        pub(argv[2], argv[3], float(argv[4]), float(argv[5]))
    elif cmd == "consume" and len(argv) == 6:
        consume(argv[2], argv[3], int(argv[4]), int(argv[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
