import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ERROR_CODES, isErrorCode, retryableOf, type ErrorCode } from '../../src';
import { ERROR_REFERENCE_PATH, errorReferenceMarkdown } from '../../src/reference';

const root = join(__dirname, '../../../..');
const codes = Object.keys(ERROR_CODES) as ErrorCode[];

/** Source files of the platform (not tests, not the examples' own error families). */
function platformSources(): Array<{ path: string; text: string }> {
  const out = execFileSync(
    'git',
    [
      'ls-files',
      '--',
      'libs/*/src/*.ts',
      'libs/*/src/**/*.ts',
      'services/*/src/**/*.ts',
      'apps/*/src/**/*.ts',
    ],
    { cwd: root, encoding: 'utf8' },
  );
  return out
    .split('\n')
    .filter(
      (p) => p && !p.startsWith('libs/etl/') && !p.startsWith('apps/etl-cli/') && !p.endsWith('.spec.ts'),
    )
    .map((path) => ({ path, text: readFileSync(join(root, path), 'utf8') }));
}

/** Each class of `text` that extends another, with its body (up to the first line that is a lone `}`). */
function classes(text: string): Array<{ name: string; body: string }> {
  return [
    ...text.matchAll(/^(?:export )?(?:abstract )?class (\w+)[^\n]* extends [^\n]*\{\n([\s\S]*?)^\}/gm),
  ].map((m) => ({ name: m[1], body: m[2] }));
}

describe('the closed list of error codes', () => {
  it('holds UPPER_SNAKE codes, each with a retry flag and a meaning', () => {
    for (const code of codes) {
      expect(code).toMatch(/^[A-Z][A-Z0-9]*(_[A-Z0-9]+)*$/);
      expect([true, false, 'per-instance']).toContain(ERROR_CODES[code].retryable);
      expect(ERROR_CODES[code].doc.length).toBeGreaterThan(10);
    }
    expect(isErrorCode('RUN_ENDED')).toBe(true);
    expect(isErrorCode('toString')).toBe(false);
    expect(retryableOf('LEASE_HELD')).toBe(true);
  });

  it("lists every code a platform error class sets, and each class's fixed retry flag agrees with it", () => {
    const seen: string[] = [];
    const disagree: string[] = [];
    for (const { path, text } of platformSources())
      for (const { name, body } of classes(text)) {
        const set = [
          ...body.matchAll(/readonly code(?::[^=]+)? = '([A-Z_0-9]+)'/g),
          ...body.matchAll(/defaultCode(?::[^=]+)? = '([A-Z_0-9]+)'/g),
          ...body.matchAll(/super\(\s*'([A-Z_0-9]+)'/g),
        ].map((m) => m[1]);
        seen.push(...set.map((c) => `${c} (${path} ${name})`));
        const flag = /readonly retryable(?::[^=]+)? = (true|false);/.exec(body)?.[1];
        for (const c of set)
          if (
            flag &&
            isErrorCode(c) &&
            ERROR_CODES[c].retryable !== 'per-instance' &&
            String(ERROR_CODES[c].retryable) !== flag
          )
            disagree.push(
              `${path} ${name}: ${c} retryable ${flag}, the list says ${ERROR_CODES[c].retryable}`,
            );
      }
    expect(seen.length).toBeGreaterThan(50);
    expect(seen.filter((s) => !isErrorCode(s.split(' ')[0]))).toEqual([]);
    expect(disagree).toEqual([]);
  });

  it(`is what ${ERROR_REFERENCE_PATH} shows (regenerate: npm run -w @keyflow/errors docs)`, () => {
    const page = readFileSync(join(root, ERROR_REFERENCE_PATH), 'utf8');
    expect(page).toBe(errorReferenceMarkdown());
    for (const code of codes) expect(page).toContain(`| \`${code}\` |`);
  });
});
