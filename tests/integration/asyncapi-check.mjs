// asyncapi-check.mjs - validate an AsyncAPI document with the official
// parser (@asyncapi/parser, installed by scripts/install-deps.sh into
// tests/integration/node_modules).
//
//   node tests/integration/asyncapi-check.mjs FILE
//
// Prints every diagnostic (severity, path, message) and exits 1 when the
// parser reports an error or produced no document, 2 on usage errors.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { Parser, DiagnosticSeverity } = require('@asyncapi/parser');

if (process.argv.length !== 3) {
  console.error('usage: asyncapi-check.mjs FILE');
  process.exit(2);
}
const text = readFileSync(process.argv[2], 'utf8');
const parser = new Parser();
const { document, diagnostics } = await parser.parse(text);
const names = ['error', 'warning', 'info', 'hint'];
let errors = 0;
for (const d of diagnostics) {
  if (d.severity === DiagnosticSeverity.Error) errors++;
  console.log(`${names[d.severity] ?? d.severity}: ${d.path.join('.')}: ` +
              `${d.message} (${d.code})`);
}
if (document === undefined && errors === 0) errors = 1;
if (document !== undefined) {
  console.log(`channels: ${document.channels().length}, ` +
              `operations: ${document.operations().length}`);
}
console.log(`${errors} error(s), ${diagnostics.length} diagnostic(s)`);
process.exit(errors > 0 ? 1 : 0);
