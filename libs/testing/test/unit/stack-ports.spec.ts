import { ephemeralPortRange, stackEnvOnPorts } from '../../src/cluster';

describe('a separate stack on its own ports', () => {
  it('refuses ports inside the ephemeral range (an outgoing connection may hold one), accepts ports below it', () => {
    const [low] = ephemeralPortRange();
    expect(() => stackEnvOnPorts(low + 100, 'x')).toThrow(/overlap the OS's ephemeral range/);
    expect(() => stackEnvOnPorts(low - 10, 'x')).toThrow(/ephemeral/); // base+24 reaches into it
    const below = low - 100;
    expect(stackEnvOnPorts(below, 'x')).toMatchObject({
      KAFKA_PORT: String(below),
      KEYFLOW_REDIS_PORT: String(below + 4),
    });
  });
});
