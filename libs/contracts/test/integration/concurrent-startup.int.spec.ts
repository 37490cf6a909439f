import { asLogicalTopic, schemaSet } from '@keyflow/schemas';
import { TestNamespace } from '@keyflow/testing';
import { EventCodec, subjectFor } from '../../src';

/**
 * Issue "Scale-out": services started at the same moment on a fresh deployment crashed with
 * `setting compatibility BACKWARD_TRANSITIVE: HTTP 409 A rule named 'COMPATIBILITY' already exists`.
 */
describe('codec startup under concurrency, against the real registry', () => {
  const ns = new TestNamespace('codec-race');
  afterAll(() => ns.cleanup());

  it('6 codecs registering the same fresh topics at the same moment all succeed with the same schema ids', async () => {
    const registryUrl = ns.infra.schemaRegistryUrl;
    const topicPrefix = `${ns.prefix}.`;
    const topics = schemaSet().catalog.topics.map((t) => asLogicalTopic(t.topic.replace('<type>', 'echo'))!);
    const codecs = Array.from({ length: 6 }, () => new EventCodec({ registryUrl, topicPrefix }));

    const results = await Promise.allSettled(codecs.map((c) => c.registerTopics(topics)));

    expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
    const ids = results.map((r) =>
      Object.fromEntries((r as PromiseFulfilledResult<Map<string, number>>).value),
    );
    expect(Object.keys(ids[0]).sort()).toEqual([...topics].sort());
    ids.slice(1).forEach((other) => expect(other).toEqual(ids[0]));
    // Every subject ended with the catalog's mode, whichever codec's PUT won.
    for (const t of schemaSet().catalog.topics.slice(0, 3)) {
      const subject = subjectFor(codecs[0].physical(asLogicalTopic(t.topic.replace('<type>', 'echo'))!));
      const res = await fetch(`${registryUrl}/config/${encodeURIComponent(subject)}`);
      expect(((await res.json()) as { compatibilityLevel: string }).compatibilityLevel).toBe(t.compatibility);
    }
  });
});
