// scripts/test-all.sh (issue 11, item 9): a failed step stops the script with that step's message, and a test
// step that could not run (no Kafka: "none were found", a suite that failed to load, a target that failed before
// Jest reported) is counted as failed in the closing "tests: N passed, N failed, N skipped" line.
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const ROOT = resolve(__dirname, '../../../..');
const STEPS = join(ROOT, 'scripts/test-steps.sh');
// eslint-disable-next-line @typescript-eslint/no-require-imports -- a plain Node script of the repo's tooling
const SummaryReporter = require(join(ROOT, 'scripts/jest-summary-reporter.js')) as new () => {
  onRunComplete(contexts: unknown, results: unknown): void;
};

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'etl-test-all-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Runs `script` in bash with scripts/test-steps.sh sourced, `set -euo pipefail` as test-all.sh has it. */
function bash(script: string, env: Record<string, string> = {}) {
  const r = spawnSync('bash', ['-c', `set -euo pipefail; source ${JSON.stringify(STEPS)}; ${script}`], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, KEYFLOW_TEST_SUMMARY: join(dir, 'summary.jsonl'), ...env },
  });
  return { status: r.status, out: r.stdout + r.stderr };
}

/** A stand-in for infra/local/stack.sh whose `up` prints part of its exports, then fails like a taken port. */
function failingStack(): string {
  const path = join(dir, 'stack.sh');
  writeFileSync(
    path,
    '#!/usr/bin/env bash\necho "export KAFKA_BROKERS=127.0.0.1:1"\necho "[infra] error: port 9092 is taken by a process this script did not start" >&2\nexit 1\n',
  );
  chmodSync(path, 0o755);
  return path;
}

describe('test-all.sh steps', () => {
  it('a failed stack.sh up stops the script with its message, and its partial exports are not applied', () => {
    const r = bash(
      `step "local infrastructure up" stack_up ${JSON.stringify(failingStack())}; echo "KAFKA_BROKERS=\${KAFKA_BROKERS:-unset}"; echo AFTER`,
      { KAFKA_BROKERS: '' },
    );
    expect(r.status).toBe(1);
    expect(r.out).toContain('port 9092 is taken by a process this script did not start');
    expect(r.out).toMatch(/step "local infrastructure up" failed \(exit 1\)/);
    expect(r.out).not.toContain('AFTER');
  });

  it('a step given as a header, then its command, still stops at that command naming the step', () => {
    const r = bash('step "3-broker smoke"; false; echo AFTER');
    expect(r.status).toBe(1);
    expect(r.out).toMatch(/step "3-broker smoke" failed \(exit 1\)/);
    expect(r.out).not.toContain('AFTER');
  });

  it('a test step that fails before Jest reports is counted as one failed test in the closing line', () => {
    writeFileSync(join(dir, 'summary.jsonl'), '{"passed":158,"failed":0,"skipped":2}\n');
    const r = bash(
      '(test_step "integration and e2e tests" bash -c "echo none were found >&2; exit 1") || true; summary',
    );
    expect(r.out).toContain('tests: 158 passed, 1 failed, 2 skipped');
  });

  it('a test step whose Jest run reported its own failures is not counted twice', () => {
    const jest = join(dir, 'jest.sh');
    writeFileSync(jest, `echo '{"passed":3,"failed":2,"skipped":0}' >>"$KEYFLOW_TEST_SUMMARY"\nexit 1\n`);
    const r = bash(`(test_step "unit tests" bash ${JSON.stringify(jest)}) || true; summary`);
    expect(r.out).toContain('tests: 3 passed, 2 failed, 0 skipped');
  });
});

describe('jest summary reporter', () => {
  function report(results: object): { passed: number; failed: number; skipped: number } {
    const file = join(dir, 'summary.jsonl');
    const before = process.env.KEYFLOW_TEST_SUMMARY;
    process.env.KEYFLOW_TEST_SUMMARY = file;
    try {
      new SummaryReporter().onRunComplete(new Set(), results);
    } finally {
      process.env.KEYFLOW_TEST_SUMMARY = before;
    }
    return JSON.parse(readFileSync(file, 'utf8').trim());
  }

  const base = {
    numPassedTests: 4,
    numFailedTests: 0,
    numPendingTests: 0,
    numTodoTests: 0,
    numRuntimeErrorTestSuites: 0,
  };

  it('a suite that failed to load or compile counts as failed', () => {
    const line = report({
      ...base,
      numRuntimeErrorTestSuites: 1,
      testResults: [
        { numFailingTests: 0, testExecError: { message: 'Cannot find module' }, failureMessage: 'x' },
      ],
    });
    expect(line.failed).toBe(1);
  });

  it('a suite whose afterAll failed (every test passed, the suite did not) counts as failed', () => {
    const line = report({
      ...base,
      testResults: [{ numFailingTests: 0, failureMessage: 'afterAll: connection reset' }],
    });
    expect(line).toMatchObject({ passed: 4, failed: 1 });
  });
});
