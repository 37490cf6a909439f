import { OrchestratorHarness } from './support';

jest.setTimeout(180_000);

/**
 * The platform is not the demo: an application's orchestrator registers only the workflows the application gives
 * it, so the task topics it creates (`task.<type>` and their `.dlq`) are those of its own definitions, none of the
 * examples' (GeoNames ETL, order saga) or of the test workflows.
 */
describe('an application with one workflow', () => {
  const h = new OrchestratorHarness('own-only');
  afterAll(() => h.teardown(), 60_000);

  it('an application with one workflow creates only its own task topics', async () => {
    await h.startOrchestrator({}, 'services/orchestrator/test/fixtures/one-workflow-orchestrator.ts');
    const admin = await h.ns.getAdmin();
    const taskTopics = (await admin.listTopics())
      .filter((t) => t.startsWith(`${h.prefix}task.`) && t !== `${h.prefix}task.results`)
      .filter((t) => !t.startsWith(`${h.prefix}task.results.`))
      .map((t) => t.slice(h.prefix.length))
      .sort();
    expect(taskTopics).toEqual(['task.solo.only', 'task.solo.only.dlq']);
  });
});
