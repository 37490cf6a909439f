/**
 * Writes the configuration reference, docs/reference/configuration.md, from the settings schemas
 * (tools/docs: `configurationSources`). Run it after adding or changing a setting: `npm run docs:config`.
 * With `--check` it writes nothing and exits 1 when the committed file differs (the unit test
 * tools/docs/test/unit/configuration-reference.spec.ts does the same in `npm test`).
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import {
  CONFIGURATION_REFERENCE_PATH,
  configurationSources,
  renderConfigurationReference,
  undescribed,
} from '@keyflow/docs-tools';

const root = path.resolve(__dirname, '..');
const file = path.join(root, CONFIGURATION_REFERENCE_PATH);
const text = renderConfigurationReference(configurationSources, root);
const missing = undescribed(configurationSources, root);
if (missing.length > 0)
  console.error(`settings without a description (shown as —):\n  ${missing.join('\n  ')}`);
if (process.argv.includes('--check')) {
  let committed = '';
  try {
    committed = readFileSync(file, 'utf8');
  } catch {
    // missing: stale
  }
  if (committed !== text) {
    console.error(`${CONFIGURATION_REFERENCE_PATH} is stale: run npm run docs:config`);
    process.exit(1);
  }
} else {
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, text);
  console.error(`wrote ${CONFIGURATION_REFERENCE_PATH}`);
}
// The services' modules keep handles (metrics, timers) open: end here.
process.exit(0);
