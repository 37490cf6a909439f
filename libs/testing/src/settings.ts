import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { SettingsError } from '@keyflow/errors';

/**
 * Helpers of the connection settings' unit tests (Kafka, registry, Redis). A module of its own, without the
 * containers and clients the rest of this lib loads: import it as `@keyflow/testing/settings` (../settings.ts).
 */

/** A text with PEM certificate headers (what the settings checks look for in a CA or certificate file). */
export const PEM_TEXT = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

/** A new temporary folder (`dir`) and a writer of files in it: `file(name, text)` returns the file's path. */
export function tempFiles(prefix: string): { dir: string; file: (name: string, text: string) => string } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return {
    dir,
    file: (name, text) => {
      const p = join(dir, name);
      writeFileSync(p, text);
      return p;
    },
  };
}

/**
 * The issues of the settings error `read` throws, after asserting its class and that it is not retryable.
 * @throws Error when `read` throws nothing
 */
export function settingsIssues(
  read: () => unknown,
  cls: abstract new (...args: never[]) => SettingsError,
): string[] {
  try {
    read();
  } catch (e) {
    expect(e).toBeInstanceOf(cls);
    expect((e as SettingsError).retryable).toBe(false);
    return (e as SettingsError).issues;
  }
  throw new Error('no error thrown');
}
