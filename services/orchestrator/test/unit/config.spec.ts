import { lagGroups, loadOrchestratorConfig } from '../../src/config';

const base = { KAFKA_BROKERS: 'k:9092', SCHEMA_REGISTRY_URL: 'http://r:8081/apis/ccompat/v7' };

describe('orchestrator configuration', () => {
  it('derives both default group ids from KEYFLOW_TOPIC_PREFIX, so prefixed deployments never share a group', () => {
    const a = loadOrchestratorConfig({ ...base, KEYFLOW_TOPIC_PREFIX: 'a.' });
    const b = loadOrchestratorConfig({ ...base, KEYFLOW_TOPIC_PREFIX: 'b.' });
    expect([a.ORCHESTRATOR_GROUP_ID, a.WORKER_GROUP_ID]).toEqual([
      'a.keyflow.orchestrator',
      'a.keyflow.workers',
    ]);
    expect(lagGroups(b)).toEqual(['b.keyflow.orchestrator', 'b.keyflow.workers']);
    const none = loadOrchestratorConfig(base);
    expect([none.ORCHESTRATOR_GROUP_ID, none.WORKER_GROUP_ID]).toEqual([
      'keyflow.orchestrator',
      'keyflow.workers',
    ]);
  });

  it('keeps group ids that are set, and takes blank ones for unset', () => {
    const c = loadOrchestratorConfig({
      ...base,
      KEYFLOW_TOPIC_PREFIX: 'a.',
      ORCHESTRATOR_GROUP_ID: 'engine',
      WORKER_GROUP_ID: '',
    });
    expect([c.ORCHESTRATOR_GROUP_ID, c.WORKER_GROUP_ID]).toEqual(['engine', 'a.keyflow.workers']);
  });
});

describe('KEYFLOW_API_ALLOWED_HOSTS', () => {
  it('is a lowercased list of host names (name or name:port, [v6], or *), empty by default; anything else is refused', () => {
    expect(loadOrchestratorConfig(base).KEYFLOW_API_ALLOWED_HOSTS).toEqual([]);
    expect(
      loadOrchestratorConfig({ ...base, KEYFLOW_API_ALLOWED_HOSTS: 'API.example.com, proxy:8443,[::1]:80' })
        .KEYFLOW_API_ALLOWED_HOSTS,
    ).toEqual(['api.example.com', 'proxy:8443', '[::1]:80']);
    expect(() =>
      loadOrchestratorConfig({ ...base, KEYFLOW_API_ALLOWED_HOSTS: 'http://api.example.com' }),
    ).toThrow(/KEYFLOW_API_ALLOWED_HOSTS/);
  });
});
