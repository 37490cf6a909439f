import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { workflow, z } from '@keyflow/workflow';
import { loadOrchestratorConfig, OrchestratorConfigError, requireApiSettings } from '../../src/config';
import { toWorkflowInput } from '../../src/engine/mapping';
import { WorkflowRegistry } from '../../src/workflows/registry';

const meta = {
  eventId: 'e1',
  eventType: 'StartRun',
  schemaVersion: 1,
  occurredAt: 5,
  key: 'r',
  correlationId: 'r',
  causationId: null,
  traceparent: null,
  tracestate: null,
};
const start = (input: string, workflowVersion: number | null = null) =>
  ({
    event: 'StartRun',
    schemaId: 1,
    value: {
      metadata: meta,
      runId: 'r',
      workflow: 'w',
      workflowVersion,
      businessKey: 'b',
      input,
      idempotencyKey: null,
      trigger: 'api',
    },
  }) as const;

describe('workflow registry', () => {
  const reg = new WorkflowRegistry().register(
    workflow('w', 1).task('a', { type: 'x' }).build(),
    workflow('w', 2).task('a', { type: 'x' }).build(),
  );

  it('resolves the latest version, or the one asked for; a run keeps the version it started with', () => {
    expect(reg.get('w')!.version).toBe(2);
    expect(reg.get('w', 1)!.version).toBe(1);
    expect(reg.get('w', 3)).toBeUndefined();
    expect(() => reg.register(workflow('w', 1).task('a', { type: 'x' }).build())).toThrow(/registered twice/);
  });

  it('maps a StartRun to a reducer input with a concrete version, and refuses what it cannot apply', () => {
    const resolve = (n: string, v: number | null) => reg.get(n, v);
    expect(toWorkflowInput(start('{"a":1}') as never, resolve)).toMatchObject({
      kind: 'start',
      version: 2,
      input: { a: 1 },
      at: 5,
      eventId: 'e1',
    });
    expect(toWorkflowInput(start('{}', 1) as never, resolve)).toMatchObject({ version: 1 });
    // An unknown version is named, for the engine to park the StartRun (a newer deployment may have it).
    expect(toWorkflowInput(start('{}', 9) as never, resolve)).toMatchObject({
      invalid: 'unknown workflow w v9',
      unknownDefinition: { workflow: 'w', version: 9 },
    });
    expect(toWorkflowInput(start('not json') as never, resolve)).toEqual({
      invalid: 'StartRun.input is not JSON',
    });
  });

  it('a StartRun whose input does not match the workflow input schema is refused with each issue, never run', () => {
    const typed = new WorkflowRegistry().register(
      workflow('w', 1, { input: z.object({ orderId: z.string(), amount: z.number().positive() }) })
        .task('a', { type: 'x' })
        .build(),
    );
    const resolve = (n: string, v: number | null) => typed.get(n, v);
    const refused = toWorkflowInput(start('{"orderId":7,"amount":-1}') as never, resolve);
    expect(refused).toEqual({ invalid: expect.stringContaining("workflow w v1's input schema") });
    expect((refused as { invalid: string }).invalid).toMatch(/orderId: .*expected string.*; amount: /);
    // The input is kept as sent: unknown keys stay, nothing is filled in.
    expect(toWorkflowInput(start('{"orderId":"o","amount":2,"note":"n"}') as never, resolve)).toMatchObject({
      kind: 'start',
      input: { orderId: 'o', amount: 2, note: 'n' },
    });
  });
});

describe('orchestrator configuration', () => {
  it('names every bad variable', () => {
    expect(() => loadOrchestratorConfig({ KAFKA_BROKERS: '', SCHEMA_REGISTRY_URL: 'x' })).toThrow(
      OrchestratorConfigError,
    );
    expect(() => loadOrchestratorConfig({ KAFKA_BROKERS: '', SCHEMA_REGISTRY_URL: 'x' })).toThrow(
      /KAFKA_BROKERS[\s\S]*SCHEMA_REGISTRY_URL/,
    );
    expect(
      loadOrchestratorConfig({ KAFKA_BROKERS: 'a:1,b:2', SCHEMA_REGISTRY_URL: 'http://r' }).brokers,
    ).toEqual(['a:1', 'b:2']);
  });

  const base = { KAFKA_BROKERS: 'a:1', SCHEMA_REGISTRY_URL: 'http://r', REDIS_URL: 'redis://127.0.0.1:6379' };
  it('refuses to serve webhooks without a secret, and the API without Redis', () => {
    expect(() => requireApiSettings(loadOrchestratorConfig({ ...base, WEBHOOKS_ENABLED: 'true' }))).toThrow(
      'WEBHOOK_SECRETS: WEBHOOKS_ENABLED=true needs a secret for at least one workflow',
    );
    expect(() => requireApiSettings(loadOrchestratorConfig({ ...base, REDIS_URL: undefined }))).toThrow(
      'REDIS_URL: required (the API keeps Idempotency-Keys and webhook delivery ids in Redis)',
    );
    expect(() => loadOrchestratorConfig({ ...base, WEBHOOK_SECRETS: '{"w": 5}' })).toThrow(/WEBHOOK_SECRETS/);
    const ok = requireApiSettings(
      loadOrchestratorConfig({
        ...base,
        WEBHOOKS_ENABLED: 'true',
        WEBHOOK_SECRETS: '{"w":"whsec_c2VjcmV0"}',
      }),
    );
    expect(ok.WEBHOOK_SECRETS).toEqual({ w: 'whsec_c2VjcmV0' });
  });

  it('API keys: validated without echoing a key, required beyond loopback, from the environment or a file', () => {
    const keys = (v: unknown) => ({ ...base, KEYFLOW_API_KEYS: JSON.stringify(v) });
    const secret = 'short-secret';
    expect(() =>
      requireApiSettings(loadOrchestratorConfig(keys([{ name: 'a', key: secret, scopes: ['read'] }]))),
    ).toThrow(/KEYFLOW_API_KEYS: 0\.key: at least 24 characters/);
    try {
      requireApiSettings(loadOrchestratorConfig(keys([{ name: 'a', key: secret, scopes: ['read'] }])));
    } catch (e) {
      expect((e as Error).message).not.toContain(secret);
    }
    const long = 'k'.repeat(24);
    expect(() =>
      requireApiSettings(loadOrchestratorConfig(keys([{ name: 'a', key: long, scopes: ['admin'] }]))),
    ).toThrow(/KEYFLOW_API_KEYS: 0\.scopes\.0/);
    expect(() =>
      requireApiSettings(
        loadOrchestratorConfig(
          keys([
            { name: 'a', key: long, scopes: ['read'] },
            { name: 'a', key: long + 'x', scopes: ['read'] },
          ]),
        ),
      ),
    ).toThrow(/names must be distinct/);
    expect(() =>
      requireApiSettings(loadOrchestratorConfig({ ...base, ORCHESTRATOR_HTTP_HOST: '0.0.0.0' })),
    ).toThrow(/ORCHESTRATOR_HTTP_HOST=0\.0\.0\.0: an API reachable from other machines needs API keys/);
    expect(
      requireApiSettings(
        loadOrchestratorConfig({ ...base, ORCHESTRATOR_HTTP_HOST: '0.0.0.0', KEYFLOW_API_INSECURE: 'true' }),
      ).apiKeys,
    ).toEqual([]);
    const file = join(mkdtempSync(join(tmpdir(), 'keyflow-keys-')), 'keys.json');
    writeFileSync(file, JSON.stringify([{ name: 'ops', key: long, scopes: ['read', 'control'] }]));
    const fromFile = requireApiSettings(
      loadOrchestratorConfig({ ...base, ORCHESTRATOR_HTTP_HOST: '0.0.0.0', KEYFLOW_API_KEYS_FILE: file }),
    );
    expect(fromFile.apiKeys.map((k) => [k.name, k.scopes])).toEqual([['ops', ['read', 'control']]]);
    expect(() =>
      requireApiSettings(
        loadOrchestratorConfig({
          ...keys([{ name: 'x', key: long, scopes: ['read'] }]),
          KEYFLOW_API_KEYS_FILE: file,
        }),
      ),
    ).toThrow(/give one of them/);
    // Set but empty: authentication would be off, so it is refused; an empty string is unset.
    expect(() => requireApiSettings(loadOrchestratorConfig(keys([])))).toThrow(/at least one key/);
    expect(
      requireApiSettings(
        loadOrchestratorConfig({ ...base, KEYFLOW_API_KEYS: ' ', KEYFLOW_API_KEYS_FILE: file }),
      ).apiKeys,
    ).toHaveLength(1);
    expect(() =>
      requireApiSettings(
        loadOrchestratorConfig(
          keys([
            { name: 'a', key: long, scopes: ['read'] },
            { name: 'b', key: long, scopes: ['read'] },
          ]),
        ),
      ),
    ).toThrow(/each key must be different/);
    expect(() =>
      requireApiSettings(loadOrchestratorConfig({ ...base, KEYFLOW_METRICS_AUTH: 'true' })),
    ).toThrow(/KEYFLOW_METRICS_AUTH=true: needs API keys/);
    const pasted = 'a-secret-pasted-as-a-scope-0123456789';
    let message = '';
    try {
      requireApiSettings(loadOrchestratorConfig(keys([{ name: 'a', key: long, scopes: [pasted] }])));
    } catch (e) {
      message = (e as Error).message;
    }
    expect(message).toMatch(/0\.scopes\.0: one of read, control/);
    expect(message).not.toContain(pasted);
    expect(
      requireApiSettings(loadOrchestratorConfig({ ...base, ORCHESTRATOR_HTTP_HOST: '::ffff:127.0.0.1' }))
        .apiKeys,
    ).toEqual([]);
  });

  it('refuses the old single WEBHOOK_SECRET, pointing to its replacement', () => {
    expect(() => loadOrchestratorConfig({ ...base, WEBHOOK_SECRET: 's' })).toThrow(
      /WEBHOOK_SECRET: replaced by WEBHOOK_SECRETS/,
    );
  });
});

describe('rebuild comparison', () => {
  it('reports each field where the rebuilt state differs from the live one', async () => {
    const { diffRun } = await import('../../src/rebuild');
    const def = workflow('w', 1).task('a', { type: 'x' }).build();
    const { reduce } = await import('@keyflow/workflow');
    const s = reduce(def, undefined, {
      kind: 'start',
      eventId: 'e',
      at: 1,
      runId: 'r',
      workflow: 'w',
      version: 1,
      businessKey: 'b',
      input: {},
    }).state!;
    expect(diffRun(s, s)).toEqual([]);
    const changed = { ...s, status: 'failed' as const };
    expect(diffRun(s, changed)).toEqual([
      { runId: 'r', field: 'status', live: 'running', rebuilt: 'failed' },
    ]);
  });
});

describe('transaction sends', () => {
  it('split into requests under the size limit, keeping per-topic order', async () => {
    const { splitBySize } = await import('../../src/engine/engine');
    const m = (n: number, k: string) => ({ key: k, value: Buffer.alloc(n) });
    const parts = splitBySize(
      [
        ['a', [m(400, 'a1'), m(400, 'a2')]],
        ['b', [m(300, 'b1'), m(2000, 'b2')]],
      ],
      1000,
    );
    expect(
      parts.map((p) => p.topicMessages.map((t) => `${t.topic}:${t.messages.map((x) => x.key).join(',')}`)),
    ).toEqual([['a:a1,a2'], ['b:b1'], ['b:b2']]);
  });
});
