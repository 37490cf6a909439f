import { readFileSync } from 'node:fs';

const PEM = /-----BEGIN [A-Z0-9 ]+-----/;

/**
 * Reads the files connection settings name (a password file, PEM certificates and keys), for the startup checks of
 * the Kafka, registry and Redis settings: a problem is added to `issues` (naming the variable and the path, never
 * the content) instead of thrown, so one error can list every bad setting. Returns the variable `name`'s file:
 * a `pem` file whole (it must hold a `-----BEGIN ...-----` block), a `secret` without its trailing newline (it must
 * not be empty); undefined when the variable is unset or empty, or the file cannot be used.
 */
export function settingFileReader(
  env: Record<string, string | undefined>,
  issues: string[],
): (name: string, kind: 'pem' | 'secret') => string | undefined {
  return (name, kind) => {
    const path = env[name]?.trim();
    if (!path) return undefined;
    let text: string;
    try {
      text = readFileSync(path, 'utf8');
    } catch (e) {
      issues.push(`${name}: cannot read ${path}: ${(e as Error).message}`);
      return undefined;
    }
    if (kind === 'pem' && !PEM.test(text)) {
      issues.push(`${name}: ${path} holds no PEM block (-----BEGIN ...-----)`);
      return undefined;
    }
    if (kind === 'secret' && text.trim() === '') {
      issues.push(`${name}: ${path} is empty`);
      return undefined;
    }
    return kind === 'pem' ? text : text.replace(/\r?\n$/, '');
  };
}
