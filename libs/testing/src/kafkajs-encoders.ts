/**
 * A kafkajs copy's produce request encoder (Produce v3, the request kafkajs writes for v3-v7) and its request framing,
 * loaded from `root`: `kafkajs` (this workspace's, patches/kafkajs+2.2.4.patch applied) or `kafkajs-pristine` (the
 * same 2.2.4 unpatched, an npm alias devDependency). Returns a function writing one request, acks=all, correlation id
 * 7, as it goes on the wire: the encoder's buffer, not a copy (a view of the encoder's memory).
 * @throws what kafkajs throws for topic data it cannot encode
 */
export function produceRequestEncoder(root: 'kafkajs' | 'kafkajs-pristine') {
  /* eslint-disable @typescript-eslint/no-require-imports */
  const produce = require(`${root}/src/protocol/requests/produce/v3/request`) as (r: {
    acks: number;
    timeout: number;
    compression: number;
    transactionalId: string | null;
    topicData: unknown[];
  }) => unknown;
  const framed = require(`${root}/src/protocol/request`) as (r: {
    correlationId: number;
    clientId: string | null;
    request: unknown;
  }) => Promise<{ buffer: Buffer }>;
  /* eslint-enable @typescript-eslint/no-require-imports */
  return async (
    topicData: unknown[],
    compression: number,
    transactionalId: string | null,
    clientId: string | null,
  ): Promise<Buffer> => {
    const request = produce({ acks: -1, timeout: 30_000, compression, transactionalId, topicData });
    return (await framed({ correlationId: 7, clientId, request })).buffer;
  };
}
