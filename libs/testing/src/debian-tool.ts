/**
 * Test tools from Debian's packages (kcat, chromium): found on PATH, or installed with apt-get when missing and we
 * are root (CI is a fresh machine, run as root): `apt-get install -y --no-install-recommends <package>`, then once
 * more after `apt-get update` if that fails. Memoised per command and process.
 */
import { spawnSync } from 'node:child_process';
import { KeyflowError, retryableOf } from '@keyflow/errors';

/** A tool is missing and could not be installed; `message` says why. */
export class ToolUnavailableError extends KeyflowError {
  readonly code = 'TOOL_UNAVAILABLE';
  readonly retryable = retryableOf('TOOL_UNAVAILABLE');
  constructor(tool: string, reason: string) {
    super(`${tool} is not available and could not be installed: ${reason}`);
  }
}

/** How long one apt-get call may take, ms (a fresh machine downloads chromium's dependencies). */
const APT_TIMEOUT_MS = 600_000;
const resolved = new Map<string, Promise<string>>();

const onPath = (command: string): string | undefined => {
  const r = spawnSync('sh', ['-c', `command -v ${command}`], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : undefined;
};

/**
 * The path of `command`, installing Debian's `pkg` when it is missing.
 * @throws ToolUnavailableError when it is missing and cannot be installed (not root, no apt-get, apt failed).
 */
export function ensureDebianTool(command: string, pkg: string): Promise<string> {
  let found = resolved.get(command);
  if (!found) {
    found = (async () => {
      const there = onPath(command);
      if (there) return there;
      if (process.getuid?.() !== 0)
        throw new ToolUnavailableError(command, 'not root, so apt-get cannot install it');
      const apt = (args: string[]) =>
        spawnSync('apt-get', args, {
          encoding: 'utf8',
          env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
          timeout: APT_TIMEOUT_MS,
        });
      const install = ['install', '-y', '--no-install-recommends', pkg];
      let r = apt(install);
      if (r.status !== 0) {
        apt(['update']);
        r = apt(install);
      }
      const installed = onPath(command);
      if (!installed)
        throw new ToolUnavailableError(
          command,
          `apt-get install -y ${pkg} failed (${r.error?.message ?? `exit ${r.status}`}): ${(r.stderr ?? '').slice(-400)}`,
        );
      return installed;
    })();
    resolved.set(command, found);
  }
  return found;
}
