// otel-producer.js - a producer traced with the OpenTelemetry SDK: it
// starts a PRODUCER span "send <queue>", injects its context with the W3C
// Trace Context propagator (traceparent, and tracestate when the span has
// one) and sends one message carrying it, then prints one JSON line:
// {"trace_id", "span_id", "traceparent", "id"}.
//
//   node otel-producer.js redis REDIS_URL STREAM BODY
//   node otel-producer.js amqp AMQP_URL QUEUE BODY
//
// TRACESTATE (optional): a tracestate the producer's remote parent
// carried, which its span inherits and the propagator injects.
const api = require("@opentelemetry/api");
const {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
} = require("@opentelemetry/sdk-trace-base");
const { W3CTraceContextPropagator, TraceState } = require("@opentelemetry/core");

async function main() {
  const [broker, url, queue, body] = process.argv.slice(2);
  const exporter = new InMemorySpanExporter();
  const provider = new BasicTracerProvider({
    spanProcessors: [new SimpleSpanProcessor(exporter)],
  });
  const tracer = provider.getTracer("taskmill-test-producer");
  let parent = api.ROOT_CONTEXT;
  if (process.env.TRACESTATE) {
    // a remote parent (sampled) carrying the tracestate
    parent = api.trace.setSpanContext(api.ROOT_CONTEXT, {
      traceId: "0af7651916cd43dd8448eb211c80319c",
      spanId: "b7ad6b7169203331",
      traceFlags: api.TraceFlags.SAMPLED,
      isRemote: true,
      traceState: new TraceState(process.env.TRACESTATE),
    });
  }
  const span = tracer.startSpan(
    `send ${queue}`,
    {
      kind: api.SpanKind.PRODUCER,
      attributes: {
        "messaging.system": broker === "amqp" ? "rabbitmq" : "redis",
        "messaging.destination.name": queue,
        "messaging.operation.type": "send",
      },
    },
    parent,
  );
  const carrier = {};
  new W3CTraceContextPropagator().inject(
    api.trace.setSpan(parent, span),
    carrier,
    api.defaultTextMapSetter,
  );
  let id;
  if (broker === "redis") {
    const Redis = require("ioredis");
    const redis = new Redis(url);
    const fields = ["body", body];
    for (const k of Object.keys(carrier)) fields.push(k, carrier[k]);
    id = await redis.xadd(queue, "*", ...fields);
    await redis.quit();
  } else {
    const amqp = require("amqplib");
    const conn = await amqp.connect(url);
    const ch = await conn.createConfirmChannel();
    id = `otel-${span.spanContext().spanId}`;
    ch.sendToQueue(queue, Buffer.from(body), {
      contentType: "application/json",
      persistent: true,
      messageId: id,
      headers: carrier,
    });
    await ch.waitForConfirms();
    await conn.close();
  }
  span.end();
  const sc = span.spanContext();
  console.log(JSON.stringify({
    trace_id: sc.traceId,
    span_id: sc.spanId,
    traceparent: carrier.traceparent,
    tracestate: carrier.tracestate || "",
    id,
  }));
  await provider.shutdown();
}
main().catch((err) => {
  console.error(err);
  process.exit(1);
});
