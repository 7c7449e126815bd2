"""Celery peer: a noop task on a Redis broker, as Celery's documentation
recommends for reliability: acks_late (the message is acknowledged after
the task ran), prefetch multiplier 1, no result backend.

  celery_peer.py load N                 N noop tasks (Celery's protocol 2)
  celery_peer.py pub RATE SECS          noop tasks with t_us=...
  python3 -m celery -A celery_peer worker -c 4 ...   the consumer

The broker URL and the queue come from BENCH_CELERY_BROKER and
BENCH_CELERY_QUEUE. In latency mode (BENCH_LAT_FILE) the worker's request
class records each task's latency once its ack has been sent to Redis:
publish to ack.
"""
import os
import sys

from celery import Celery
from celery.signals import worker_ready
from celery.worker.request import Request

import peerlib

QUEUE = os.environ.get("BENCH_CELERY_QUEUE", "bench.celery")

app = Celery("celery_peer", broker=os.environ.get("BENCH_CELERY_BROKER", "redis://127.0.0.1:6379/0"))
# BENCH_CELERY_FAST=1: Celery's defaults instead, faster and less safe: the
# message is acknowledged as the worker takes it (a crash loses the tasks
# the worker holds), each process reserving 4
FAST = os.environ.get("BENCH_CELERY_FAST") == "1"

app.conf.update(
    task_acks_late=not FAST,
    worker_prefetch_multiplier=4 if FAST else 1,
    task_ignore_result=True,
    task_default_queue=QUEUE,
    worker_hijack_root_logger=False,
)

LAT = peerlib.LatencyLog()


class LatencyRequest(Request):
    """Takes the latency right after the ack (acks_late: after the run;
    BENCH_CELERY_FAST: before it)."""

    def acknowledge(self):
        super().acknowledge()
        LAT.record(self.kwargs.get("t_us"))


@app.task(name="noop", Request=LatencyRequest if LAT else Request)
def noop(t_us=None):
    return None


@worker_ready.connect
def _ready(**_kwargs):
    peerlib.mark_ready()


def load(n):
    with app.producer_or_acquire() as producer:
        for _ in range(n):
            noop.apply_async(producer=producer)


def pub(rate, seconds):
    with app.producer_or_acquire() as producer:
        for _ in peerlib.paced(rate, seconds):
            noop.apply_async(kwargs={"t_us": peerlib.now_us()}, producer=producer)


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "load" and len(argv) == 3:
        load(int(argv[2]))
    elif cmd == "pub" and len(argv) == 4:
        pub(float(argv[2]), float(argv[3]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
