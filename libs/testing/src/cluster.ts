import { execFile } from 'node:child_process';
import { KeyflowError, retryableOf } from '@keyflow/errors';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** `infra/local/stack.sh` of this repository. */
export const STACK_SCRIPT = resolve(__dirname, '../../../infra/local/stack.sh');

/** One broker of a local stack, as `stack.sh brokers` prints it. */
export interface BrokerInfo {
  /** 1-based index, as `kill-broker`/`start-broker` take it. */
  index: number;
  /** `host:port` of its PLAINTEXT listener. */
  address: string;
  /** Process id while up, `undefined` when down. */
  pid?: number;
  up: boolean;
}

/** A `stack.sh` command failed (exit code non-zero); `stderr` holds its `[infra]` lines. Not retryable. */
export class StackCommandError extends KeyflowError {
  readonly code = 'STACK_COMMAND_FAILED' as const;
  readonly retryable = retryableOf('STACK_COMMAND_FAILED');
  constructor(
    readonly args: string[],
    readonly stderr: string,
  ) {
    super(
      `infra/local/stack.sh ${args.join(' ')} failed: ${stderr.trim().split('\n').slice(-5).join(' | ')}`,
    );
  }
}

export interface ClusterControl {
  /** `stack.sh up` with `brokers` brokers; resolves with the exports `stack.sh env` prints (KAFKA_BROKERS, ...). */
  up(brokers: number): Promise<Record<string, string>>;
  /** `stack.sh down`: stops what this stack started; `purge` also deletes its run dir (data, logs). */
  down(opts?: { purge?: boolean }): Promise<void>;
  /** The brokers of the running stack (`stack.sh brokers`). */
  brokers(): Promise<BrokerInfo[]>;
  /** SIGKILL broker `index` (1-based) and resolve once its process is gone. */
  killBroker(index: number): Promise<void>;
  /** SIGTERM broker `index` (controlled shutdown). */
  stopBroker(index: number): Promise<void>;
  /** Start broker `index` again (same data and ports) and resolve once it answers a metadata request. */
  startBroker(index: number): Promise<void>;
}

/** The ports a stack of {@link stackEnvOnPorts} uses above its base (three brokers 10 apart, their controllers). */
const STACK_PORT_SPAN = 24;

/**
 * The range the OS picks outgoing connections' local ports from (Linux: /proc/sys/net/ipv4/ip_local_port_range;
 * elsewhere the IANA dynamic range, 49152-65535). A listener's fixed port inside it can be taken at any moment.
 */
export function ephemeralPortRange(): [number, number] {
  try {
    const [low, high] = readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
      .trim()
      .split(/\s+/)
      .map(Number);
    if (Number.isInteger(low) && Number.isInteger(high)) return [low, high];
  } catch {
    /* not Linux */
  }
  return [49152, 65535];
}

/**
 * The environment of a separate local stack on its own ports, for a test that starts one beside the suite's stack:
 * brokers on `base`, `base+10`, `base+20` (controllers one above each), registry `base+2` (management `base+3`),
 * its own Redis on `base+4`, and a fresh run dir under the OS temp dir named after `label`.
 */
export function stackEnvOnPorts(base: number, label: string): Record<string, string> {
  const [low, high] = ephemeralPortRange();
  if (base + STACK_PORT_SPAN > low && base <= high)
    throw new RangeError(
      `ports ${base}-${base + STACK_PORT_SPAN} overlap the OS's ephemeral range ${low}-${high}: an outgoing ` +
        'connection may hold one of them when the stack starts (bind: Address already in use); pick a base below ' +
        `${low - STACK_PORT_SPAN}`,
    );
  return {
    KEYFLOW_RUN_DIR: mkdtempSync(join(tmpdir(), `keyflow-${label}-`)),
    KAFKA_PORT: String(base),
    KAFKA_CONTROLLER_PORT: String(base + 1),
    REGISTRY_PORT: String(base + 2),
    REGISTRY_MANAGEMENT_PORT: String(base + 3),
    KEYFLOW_REDIS_PORT: String(base + 4),
    REDIS_URL: '', // the stack's own Redis on KEYFLOW_REDIS_PORT, not the suite's
  };
}

/**
 * Drives `infra/local/stack.sh` for tests and chaos runs. `env` is laid over `process.env` and must name the stack:
 * `KEYFLOW_RUN_DIR`, `KAFKA_PORT`, `KAFKA_CONTROLLER_PORT` (and registry/Redis ports for `up`), as the stack was
 * started with; the broker count is read from the run dir (`KEYFLOW_BROKERS` only matters for `up`).
 * Every method throws {@link StackCommandError} when the script exits non-zero.
 */
export function clusterControl(env: Record<string, string | undefined> = {}): ClusterControl {
  const stack = async (args: string[], extra: Record<string, string> = {}): Promise<string> => {
    try {
      const { stdout } = await run(STACK_SCRIPT, args, {
        env: { ...process.env, ...env, ...extra },
        maxBuffer: 16 * 1024 * 1024,
      });
      return stdout;
    } catch (e) {
      throw new StackCommandError(args, String((e as { stderr?: string }).stderr ?? (e as Error).message));
    }
  };
  return {
    async up(brokers) {
      const out = await stack(['up'], { KEYFLOW_BROKERS: String(brokers) });
      return Object.fromEntries(
        [...out.matchAll(/^export (\w+)=(.*)$/gm)].map((m) => [m[1], m[2].replace(/^'(.*)'$/, '$1')]),
      );
    },
    async down(opts) {
      await stack(opts?.purge ? ['down', '--purge'] : ['down']);
    },
    async brokers() {
      const out = await stack(['brokers']);
      return out
        .trim()
        .split('\n')
        .filter(Boolean)
        .map((line) => {
          const [index, address, pid, state] = line.split('\t');
          return {
            index: Number(index),
            address,
            pid: pid === '-' ? undefined : Number(pid),
            up: state === 'up',
          };
        });
    },
    async killBroker(index) {
      await stack(['kill-broker', String(index)]);
    },
    async stopBroker(index) {
      await stack(['stop-broker', String(index)]);
    },
    async startBroker(index) {
      await stack(['start-broker', String(index)]);
    },
  };
}
