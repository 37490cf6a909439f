import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import {
  CONFIGURATION_REFERENCE_PATH,
  configurationSources,
  renderConfigurationReference,
  settingDocs,
} from '../../src';
import { FixtureSettings } from './fixtures/settings';

const root = path.resolve(__dirname, '../../../..');

describe('the configuration reference (docs/reference/configuration.md)', () => {
  it('is what the settings schemas generate: the committed file is not stale', () => {
    const committed = readFileSync(path.join(root, CONFIGURATION_REFERENCE_PATH), 'utf8');
    const generated = renderConfigurationReference(configurationSources, root);
    if (committed !== generated)
      throw new Error(
        `the configuration reference is stale: run npm run docs:config (${CONFIGURATION_REFERENCE_PATH} differs ` +
          'from what the settings schemas generate)',
      );
  });

  it('is the same text every time', () => {
    expect(renderConfigurationReference(configurationSources, root)).toBe(
      renderConfigurationReference(configurationSources, root),
    );
  });
});

describe('settingDocs', () => {
  const docs = settingDocs(
    {
      title: 'Fixture',
      about: 'a test schema',
      schema: FixtureSettings,
      docFiles: [path.relative(root, path.join(__dirname, 'fixtures/settings.ts'))],
    },
    root,
  );
  const byName = Object.fromEntries(docs.map((d) => [d.name, d]));

  it('lists every setting in the schema order', () => {
    expect(docs.map((d) => d.name)).toEqual([
      'FIXTURE_URL',
      'FIXTURE_WAIT_MS',
      'FIXTURE_MODE',
      'FIXTURE_ON',
      'FIXTURE_NAME',
    ]);
  });

  it('gives type, default and unit from the schema', () => {
    expect(byName.FIXTURE_URL).toMatchObject({ type: 'URL', default: 'required', unit: '' });
    expect(byName.FIXTURE_WAIT_MS).toMatchObject({
      type: 'integer ≥ 10, ≤ 60000',
      default: '`30000` (30 s)',
      unit: 'ms',
    });
    expect(byName.FIXTURE_MODE).toMatchObject({ type: '`a` | `b`', default: '`a`' });
    expect(byName.FIXTURE_ON).toMatchObject({ type: 'boolean (`true` | `false`)', default: '`false`' });
    expect(byName.FIXTURE_NAME).toMatchObject({ type: 'string', default: 'unset' });
  });

  it("takes the description from .describe(), else the setting's JSDoc comment, else none", () => {
    expect(byName.FIXTURE_MODE.description).toBe('Which mode (a | b).');
    expect(byName.FIXTURE_URL.description).toBe('Where it listens.');
    expect(byName.FIXTURE_WAIT_MS.description).toBe('How long to wait, in ms. See `FixtureSettings`.');
    expect(byName.FIXTURE_ON.description).toBe('');
  });
});
