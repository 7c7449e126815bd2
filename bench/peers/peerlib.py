"""Helpers shared by the Python peers of `make bench-peers`.

The driver (scripts/bench-peers.sh) talks to every peer the same way,
through the environment:

  BENCH_READY_FILE  created once the consumer is consuming (idle RSS is
                    taken from then on)
  BENCH_LAT_FILE    latency mode: one line per message, microseconds
                    from the publisher's clock reading (the "t_us" the
                    producer put in the message) to the instant named by
                    the peer (after the ack on Redis, the handler's start
                    on RabbitMQ, as for the taskmill rows)
  BENCH_DONE_FD     RabbitMQ throughput mode: one byte is written there
                    once the broker has taken the ack of the N-th message
                    (bench/measure.c --done-pipe)
"""
import os
import time


def now_us():
    return time.time_ns() // 1000


def mark_ready():
    path = os.environ.get("BENCH_READY_FILE")
    if path:
        with open(path, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")


class LatencyLog:
    """Appends one latency a line, unbuffered: the consumer is ended by a
    signal, and what it measured must be on disk by then."""

    def __init__(self):
        path = os.environ.get("BENCH_LAT_FILE")
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if path else -1

    def __bool__(self):
        return self.fd >= 0

    def record(self, t_us):
        if self.fd >= 0 and t_us:
            os.write(self.fd, b"%d\n" % (now_us() - t_us))


def signal_done():
    fd = os.environ.get("BENCH_DONE_FD")
    if fd:
        os.write(int(fd), b"x")


def paced(rate, seconds):
    """Yields once per message on a fixed schedule (open loop): rate per
    second for the given seconds; a late message goes at once, the ones
    after it keep their times."""
    n = int(rate * seconds)
    t0 = time.monotonic()
    for k in range(n):
        delay = t0 + k / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        yield k
