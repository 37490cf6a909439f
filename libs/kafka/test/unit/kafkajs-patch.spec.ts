import { readFileSync } from 'node:fs';
import { assertKafkajsPatched, KAFKAJS_PATCH_MARKER } from '../../src';

describe('the kafkajs patch', () => {
  it('is applied to the kafkajs this workspace loads (npm ci runs patch-package)', () => {
    const source = readFileSync(require.resolve('kafkajs/src/producer/sendMessages.js'), 'utf8');
    expect(source).toContain(KAFKAJS_PATCH_MARKER);
    expect(() => assertKafkajsPatched()).not.toThrow();
  });
});
