import { loadOrchestratorConfig, requestKeyTtlMs } from '../../src/config';

const base = { KAFKA_BROKERS: 'k:9092', SCHEMA_REGISTRY_URL: 'http://r:8081/apis/ccompat/v7' };
const ttlOf = (env: Record<string, string>) => requestKeyTtlMs(loadOrchestratorConfig({ ...base, ...env }));

describe('Idempotency-Keys', () => {
  it('live at least as long as runs are kept (ORCHESTRATOR_RUN_RETENTION_MS), by default 72 h', () => {
    expect(ttlOf({})).toBe(72 * 3600 * 1000);
    expect(ttlOf({ IDEMPOTENCY_KEY_TTL_MS: '3600000', ORCHESTRATOR_RUN_RETENTION_MS: '7200000' })).toBe(
      7_200_000,
    );
    expect(ttlOf({ IDEMPOTENCY_KEY_TTL_MS: '9000000', ORCHESTRATOR_RUN_RETENTION_MS: '7200000' })).toBe(
      9_000_000,
    );
    // Runs kept for ever: the engine's per-run request ids take over past the key's own TTL.
    expect(ttlOf({ ORCHESTRATOR_RUN_RETENTION_MS: '0' })).toBe(86_400_000);
  });
});
