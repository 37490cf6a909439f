import { readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { render } from './render';
import { loadCatalog } from '../src/catalog';
import { checkHistory, type CompatibilityMode } from '../src/compat';
import { composeSchema, loadEventVersions, sharedTypes } from '../src/schema-set';

/**
 * The compatibility gate (`npm run schemas:check`, run by CI):
 *  1. every version of every event is compatible with every earlier one under its topic's mode
 *     (default BACKWARD_TRANSITIVE), by Avro's schema-resolution rules; a failure names the subject, the versions
 *     and the field;
 *  2. every event has a catalog entry and every catalog event has a schema;
 *  3. the generated types and CATALOG.md are up to date.
 * Exits 1 with every failure listed.
 */
const root = join(__dirname, '..');
const failures: string[] = [];
const catalog = loadCatalog();
const versions = loadEventVersions();
const shared = sharedTypes(versions, catalog.sharedTypes);

const strictness: CompatibilityMode[] = [
  'NONE',
  'BACKWARD',
  'FORWARD',
  'BACKWARD_TRANSITIVE',
  'FORWARD_TRANSITIVE',
  'FULL',
  'FULL_TRANSITIVE',
];
const modeOf = (event: string): { mode: CompatibilityMode; topics: string[] } => {
  const topics = catalog.topics.filter(
    (t) => t.events.includes(event) || catalog.sharedTypes.includes(event),
  );
  const modes = topics.map((t) => t.compatibility);
  const mode =
    modes.sort((a, b) => strictness.indexOf(b) - strictness.indexOf(a))[0] ?? catalog.defaultCompatibility;
  return { mode, topics: topics.map((t) => t.topic) };
};

let checked = 0;
for (const [event, vs] of versions) {
  const { mode, topics } = modeOf(event);
  if (!catalog.sharedTypes.includes(event) && topics.length === 0) {
    failures.push(
      `${event}: schemas/avro/${event}/ has no topic in schemas/catalog.yaml (add it to a topic's events)`,
    );
  }
  const composed = vs.map((v) => composeSchema([v.schema], shared));
  for (const violation of checkHistory(composed, mode)) {
    const subjects = topics.map((t) => `${t}-value`).join(', ') || event;
    for (const p of violation.problems) {
      failures.push(
        `${event} v${violation.version} breaks ${mode} against v${violation.against} (subject ${subjects}; ` +
          `${violation.direction === 'backward' ? 'the new schema cannot read old data' : 'old readers cannot read the new data'}): ` +
          `${p.path}: ${p.reason}`,
      );
    }
  }
  checked += vs.length;
}
for (const t of catalog.topics) {
  for (const e of t.events)
    if (!versions.has(e))
      failures.push(`catalog topic ${t.topic} lists ${e}, which has no schemas/avro/${e}/v1.avsc`);
}

const { types, catalogPage } = render();
const stale = (file: string, expected: string) =>
  !existsSync(file) || readFileSync(file, 'utf8') !== expected;
if (stale(join(root, 'src/generated/events.ts'), types))
  failures.push('schemas/src/generated/events.ts is stale: run `npm run -w @keyflow/schemas generate`');
if (stale(join(root, 'CATALOG.md'), catalogPage))
  failures.push('schemas/CATALOG.md is stale: run `npm run -w @keyflow/schemas generate`');

if (failures.length) {
  console.error(`schemas:check failed (${failures.length}):\n${failures.map((f) => `  - ${f}`).join('\n')}`);
  process.exit(1);
}
console.log(
  `schemas:check: ${versions.size} events, ${checked} schema versions, ${catalog.topics.length} topics: compatible, catalogued, generated files current`,
);
