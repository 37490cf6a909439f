import { readFileSync } from 'node:fs';

/**
 * The marker of `patches/kafkajs+2.2.4.patch` (applied by `patch-package` on `npm install`/`npm ci`): kafkajs 2.2.4
 * keeps a send's responses per broker across retries, so a partition whose leader moved to a broker that had
 * already answered was never sent again and the send resolved without it (kafkajs issue 1303; in a transaction the
 * rest committed without it). The patch keeps them per topic-partition, assigns each message's partition once and
 * lets every request of an attempt settle before the retry.
 */
export const KAFKAJS_PATCH_MARKER = 'keyflow patch (kafkajs issue 1303)';

/** kafkajs runs without the project's patch (installed with `--ignore-scripts`, or another copy). Not retryable. */
export class KafkajsUnpatchedError extends Error {
  readonly code = 'KAFKAJS_UNPATCHED' as const;
  readonly retryable = false;
  constructor(readonly file: string) {
    super(
      `${file} lacks "${KAFKAJS_PATCH_MARKER}": without it a send can lose a partition's records when its leader ` +
        'moves (a broker dies). Run `npm ci` (its postinstall applies patches/ with patch-package), not --ignore-scripts',
    );
    this.name = 'KafkajsUnpatchedError';
  }
}

let checked = false;

/**
 * Throws {@link KafkajsUnpatchedError} unless the kafkajs this process loads carries the project's patch. Reads
 * one file once per process.
 */
export function assertKafkajsPatched(): void {
  if (checked) return;
  const file = require.resolve('kafkajs/src/producer/sendMessages.js');
  if (!readFileSync(file, 'utf8').includes(KAFKAJS_PATCH_MARKER)) throw new KafkajsUnpatchedError(file);
  checked = true;
}
