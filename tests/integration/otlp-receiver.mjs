// otlp-receiver.mjs - a test OTLP/HTTP trace receiver: decodes each
// POST /v1/traces (protobuf) with the official definitions vendored in
// vendor/opentelemetry-proto (through protobufjs) and appends one JSON
// line per span to OUT; ids as lower-case hex, kind and status code as
// numbers, attributes as an object.
//
//   node otlp-receiver.mjs PORT OUT [MODE]
//
// MODE: ok (200, the default), 503 (answers 503 and records nothing),
// slow (answers 200 after 5 s; a line in OUT.held as each such request
// arrives). MODE may be changed while running by writing it to OUT.mode.
// Each answer is counted in OUT.requests (one line: "<status> <spans>").
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);
const protobuf = require("protobufjs");
const here = path.dirname(fileURLToPath(import.meta.url));
const protoRoot = path.resolve(here, "../../vendor/opentelemetry-proto");

const [port, out, startMode] = process.argv.slice(2);
const root = new protobuf.Root();
root.resolvePath = (_origin, target) => path.join(protoRoot, target);
root.loadSync("opentelemetry/proto/collector/trace/v1/trace_service.proto");
const Request = root.lookupType(
  "opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest");
const Response = root.lookupType(
  "opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse");

const hex = (b) => Buffer.from(b || []).toString("hex");
// an AnyValue by its oneof's member (protobufjs names it in .value)
function value(v) {
  const k = v && v.value;
  if (!k) return null;
  return k === "intValue" ? Number(v.intValue) : v[k];
}
function attrs(list) {
  const o = {};
  for (const kv of list || []) o[kv.key] = value(kv.value);
  return o;
}
function mode() {
  try {
    return fs.readFileSync(out + ".mode", "utf8").trim() || startMode || "ok";
  } catch {
    return startMode || "ok";
  }
}

http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    const m = mode();
    const answer = (status, n) => {
      fs.appendFileSync(out + ".requests", `${status} ${n}\n`);
      res.writeHead(status, { "Content-Type": "application/x-protobuf" });
      res.end(status === 200 ? Response.encode(Response.create({})).finish()
                             : "");
    };
    if (req.method !== "POST" || req.url !== "/v1/traces") return answer(404, 0);
    if (req.headers["content-type"] !== "application/x-protobuf")
      return answer(415, 0);
    if (m === "503") return answer(503, 0);
    let msg;
    try {
      msg = Request.decode(Buffer.concat(chunks));
    } catch (e) {
      fs.appendFileSync(out + ".errors", String(e) + "\n");
      return answer(400, 0);
    }
    const lines = [];
    for (const rs of msg.resourceSpans || []) {
      const resource = attrs(rs.resource && rs.resource.attributes);
      for (const ss of rs.scopeSpans || []) {
        for (const s of ss.spans || []) {
          lines.push(JSON.stringify({
            service: resource["service.name"],
            scope: ss.scope && ss.scope.name,
            trace_id: hex(s.traceId),
            span_id: hex(s.spanId),
            parent_span_id: hex(s.parentSpanId),
            trace_state: s.traceState || "",
            flags: s.flags || 0,
            name: s.name,
            kind: s.kind,
            start_ns: String(s.startTimeUnixNano),
            end_ns: String(s.endTimeUnixNano),
            attributes: attrs(s.attributes),
            status_code: (s.status && s.status.code) || 0,
            status_message: (s.status && s.status.message) || "",
            header: req.headers["x-test-header"] || "",
          }));
        }
      }
    }
    const finish = () => {
      if (lines.length > 0) fs.appendFileSync(out, lines.join("\n") + "\n");
      answer(200, lines.length);
    };
    if (m === "slow") {
      fs.appendFileSync(out + ".held", `${lines.length}\n`);
      setTimeout(finish, 5000);
    }
    else finish();
  });
}).listen(Number(port), "127.0.0.1", () => {
  fs.writeFileSync(out + ".ready", "1");
});
