// amqplib peer: a consumer with manual acks on RabbitMQ.
//
//   amqplib_peer.js load URL QUEUE N                N messages "{}" (transient)
//   amqplib_peer.js pub URL QUEUE RATE SECS         messages {"t_us": ..}
//   amqplib_peer.js consume URL QUEUE PREFETCH N    until SIGTERM
//
// The consumer is the one amqplib's documentation shows (channel.prefetch,
// then channel.consume with a callback that acks each message), with the
// prefetch that RabbitMQ's documentation suggests for throughput (a few
// hundred). Each body is decoded from JSON. After the N-th ack, a
// synchronous checkQueue makes sure the broker has taken it; then a byte
// goes to BENCH_DONE_FD. In latency mode the latency is taken as the
// callback starts: publish to run, like the taskmill RabbitMQ row.
'use strict';
const { once } = require('events');
const amqp = require('amqplib');
const peer = require('./peerlib');

async function channel(url, queue) {
  const conn = await amqp.connect(url);
  const ch = await conn.createChannel();
  await ch.assertQueue(queue, { durable: true });
  return { conn, ch };
}

async function load(url, queue, n) {
  const { conn, ch } = await channel(url, queue);
  const body = Buffer.from('{}');
  for (let i = 0; i < n; i++) {
    if (!ch.sendToQueue(queue, body)) await once(ch, 'drain');
  }
  // the publishes are asynchronous: wait until the queue holds them all
  for (let i = 0; i < 6000; i++) {
    if ((await ch.checkQueue(queue)).messageCount >= n) break;
    await peer.sleep(50);
  }
  await conn.close();
}

async function pub(url, queue, rate, seconds) {
  const { conn, ch } = await channel(url, queue);
  await peer.paced(rate, seconds, () => {
    ch.sendToQueue(queue, Buffer.from(JSON.stringify({ t_us: peer.nowUs() })));
  });
  await ch.checkQueue(queue);
  await conn.close();
}

async function consume(url, queue, prefetch, n) {
  const { ch } = await channel(url, queue);
  const lat = peer.latencyLog();
  let done = 0;
  await ch.prefetch(prefetch);
  await ch.consume(queue, (msg) => {
    const body = JSON.parse(msg.content);
    if (lat) lat.record(body.t_us);
    ch.ack(msg);
    if (++done === n) {
      // a synchronous call: the broker has processed the acks before it
      ch.checkQueue(queue).then(peer.signalDone);
    }
  });
  peer.markReady();
  process.on('SIGTERM', () => process.exit(0));
}

const [cmd, ...args] = process.argv.slice(2);
let run;
if (cmd === 'load' && args.length === 3) run = load(args[0], args[1], Number(args[2]));
else if (cmd === 'pub' && args.length === 4) run = pub(args[0], args[1], Number(args[2]), Number(args[3]));
else if (cmd === 'consume' && args.length === 4) run = consume(args[0], args[1], Number(args[2]), Number(args[3]));
else peer.usage('usage: amqplib_peer.js load URL QUEUE N | pub URL QUEUE RATE SECS | consume URL QUEUE PREFETCH N\n');
run.catch((err) => {
  process.stderr.write(`amqplib_peer: ${err.stack || err}\n`);
  process.exit(1);
});
