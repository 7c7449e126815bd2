// Helpers shared by the Node peers of `make bench-peers`; the same
// environment contract as ../peerlib.py (BENCH_READY_FILE, BENCH_LAT_FILE,
// BENCH_DONE_FD).
'use strict';
const fs = require('fs');
const { performance } = require('perf_hooks');

// nowUs: the wall clock in microseconds (the publishers' t_us)
function nowUs() {
  return Math.round((performance.timeOrigin + performance.now()) * 1000);
}

function markReady() {
  const path = process.env.BENCH_READY_FILE;
  if (path) fs.writeFileSync(path, `${process.pid}\n`);
}

// latencyLog: record(tUs) appends one line (unbuffered: the consumer is
// ended by a signal), or null when not in latency mode
function latencyLog() {
  const path = process.env.BENCH_LAT_FILE;
  if (!path) return null;
  const fd = fs.openSync(path, 'a');
  return {
    record(tUs) {
      if (tUs) fs.writeSync(fd, `${nowUs() - tUs}\n`);
    },
  };
}

function signalDone() {
  const fd = process.env.BENCH_DONE_FD;
  if (fd) fs.writeSync(Number(fd), 'x');
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// paced(rate, seconds, send): calls send() on a fixed schedule (open
// loop); a late message goes at once, the ones after it keep their times.
// send's promises are not awaited one by one: a slow answer must not hold
// the next message back.
async function paced(rate, seconds, send) {
  const n = Math.floor(rate * seconds);
  const t0 = performance.now();
  const pending = [];
  for (let k = 0; k < n; k++) {
    const delay = t0 + (k * 1000) / rate - performance.now();
    if (delay > 0) await sleep(delay);
    pending.push(send());
  }
  await Promise.all(pending);
}

function usage(text) {
  process.stderr.write(text);
  process.exit(2);
}

module.exports = { nowUs, markReady, latencyLog, signalDone, paced, sleep, usage };
