// asyncapi-models.mjs - generate code models from an AsyncAPI document
// with @asyncapi/modelina (installed by scripts/install-deps.sh into
// tests/integration/node_modules), as a user generating producer code
// would.
//
//   node tests/integration/asyncapi-models.mjs FILE
//
// Prints one line per model: LANGUAGE, the type name modelina gave the
// schema, and the name of the generated code ("-" when that language
// renders no code of its own for it, as Python for a plain dictionary),
// tab-separated; then the generated code itself after a line "--- code".
// Exits 1 when generation fails, 2 on usage errors.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const { TypeScriptGenerator, PythonGenerator } = require('@asyncapi/modelina');

if (process.argv.length !== 3) {
  console.error('usage: asyncapi-models.mjs FILE');
  process.exit(2);
}
const doc = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const code = [];
try {
  for (const [lang, Gen] of [['typescript', TypeScriptGenerator],
                             ['python', PythonGenerator]]) {
    for (const m of await new Gen().generate(doc)) {
      const rendered = m.result.trim() !== '';
      console.log(`${lang}\t${m.model.name}\t${rendered ? m.modelName : '-'}`);
      if (rendered) code.push(`# ${lang}`, m.result);
    }
  }
} catch (e) {
  console.error(`modelina failed: ${e.message}`);
  process.exit(1);
}
console.log('--- code');
console.log(code.join('\n'));
