"""redis-py peer: a consumer-group loop over a stream with batched XACK.

  redispy_peer.py load URL STREAM N          N entries {body: "{}"}
  redispy_peer.py pub URL STREAM RATE SECS   entries {body: '{"t_us": ..}'}
  redispy_peer.py consume URL STREAM GROUP   until SIGTERM

The loop is the one redis-py's documentation shows for consumer groups:
XREADGROUP a batch (COUNT), handle each entry (its body decoded from JSON),
then one XACK naming the whole batch. In latency mode each entry's latency
is taken after that XACK has answered: publish to ack.
"""
import json
import os
import sys

import redis

import peerlib

COUNT = 500  # entries per XREADGROUP


def handle(fields):
    return json.loads(fields[b"body"])


def load(url, stream, n):
    r = redis.Redis.from_url(url)
    pipe = r.pipeline(transaction=False)
    for i in range(n):
        pipe.xadd(stream, {"body": "{}"})
        if (i + 1) % 1000 == 0:
            pipe.execute()
    pipe.execute()


def pub(url, stream, rate, seconds):
    r = redis.Redis.from_url(url)
    for _ in peerlib.paced(rate, seconds):
        r.xadd(stream, {"body": json.dumps({"t_us": peerlib.now_us()})})


def consume(url, stream, group):
    r = redis.Redis.from_url(url)
    name = f"redispy-{os.getpid()}"
    lat = peerlib.LatencyLog()
    peerlib.mark_ready()
    while True:
        reply = r.xreadgroup(group, name, {stream: ">"}, count=COUNT, block=1000)
        if not reply:
            continue
        entries = reply[0][1]
        bodies = [handle(fields) for _, fields in entries]
        r.xack(stream, group, *[eid for eid, _ in entries])
        if lat:
            for b in bodies:
                lat.record(b.get("t_us"))


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "load" and len(argv) == 5:
        load(argv[2], argv[3], int(argv[4]))
    elif cmd == "pub" and len(argv) == 6:
        pub(argv[2], argv[3], float(argv[4]), float(argv[5]))
    elif cmd == "consume" and len(argv) == 5:
        consume(argv[2], argv[3], argv[4])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
