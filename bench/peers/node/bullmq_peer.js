// BullMQ peer: a Worker with concurrency 50 on a Redis queue.
//
//   bullmq_peer.js load URL QUEUE N             N jobs "noop" {} (Queue.addBulk)
//   bullmq_peer.js pub URL QUEUE RATE SECS      jobs {t_us} (Queue.add)
//   bullmq_peer.js consume URL QUEUE            until SIGTERM
//
// Configured as BullMQ's documentation recommends: concurrency 50 for
// jobs that wait on nothing, completed jobs removed (removeOnComplete),
// the worker's connection with maxRetriesPerRequest null. In latency mode
// each job's latency is taken on the worker's "completed" event, which
// comes after the job was moved to completed in Redis: publish to ack.
'use strict';
const { Queue, Worker } = require('bullmq');
const peer = require('./peerlib');

function connection(url) {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null };
}

async function load(url, name, n) {
  const q = new Queue(name, { connection: connection(url) });
  for (let done = 0; done < n; ) {
    const k = Math.min(1000, n - done);
    await q.addBulk(Array.from({ length: k }, () => ({ name: 'noop', data: {} })));
    done += k;
  }
  await q.close();
}

async function pub(url, name, rate, seconds) {
  const q = new Queue(name, { connection: connection(url) });
  await q.waitUntilReady();
  await peer.paced(rate, seconds, () => q.add('noop', { t_us: peer.nowUs() }));
  await q.close();
}

async function consume(url, name) {
  const lat = peer.latencyLog();
  const worker = new Worker(name, async () => null, {
    connection: connection(url),
    concurrency: 50,
    removeOnComplete: { count: 0 },
  });
  if (lat) worker.on('completed', (job) => lat.record(job.data.t_us));
  worker.on('error', (err) => process.stderr.write(`bullmq: ${err}\n`));
  await worker.waitUntilReady();
  peer.markReady();
  const stop = async () => {
    await worker.close(true);
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

const [cmd, ...args] = process.argv.slice(2);
let run;
if (cmd === 'load' && args.length === 3) run = load(args[0], args[1], Number(args[2]));
else if (cmd === 'pub' && args.length === 4) run = pub(args[0], args[1], Number(args[2]), Number(args[3]));
else if (cmd === 'consume' && args.length === 2) run = consume(args[0], args[1]);
else peer.usage('usage: bullmq_peer.js load URL QUEUE N | pub URL QUEUE RATE SECS | consume URL QUEUE\n');
run.catch((err) => {
  process.stderr.write(`bullmq_peer: ${err.stack || err}\n`);
  process.exit(1);
});
