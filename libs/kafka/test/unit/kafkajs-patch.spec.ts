import { readFileSync } from 'node:fs';
import { assertKafkajsPatched, KAFKAJS_PATCHES } from '../../src';

describe('the kafkajs patch', () => {
  it('is applied to every file of the kafkajs this workspace loads (npm ci runs patch-package)', () => {
    for (const [path, marker] of Object.entries(KAFKAJS_PATCHES))
      expect({
        path,
        patched: readFileSync(require.resolve(`kafkajs/src/${path}`), 'utf8').includes(marker),
      }).toEqual({
        path,
        patched: true,
      });
    expect(() => assertKafkajsPatched()).not.toThrow();
  });
});
