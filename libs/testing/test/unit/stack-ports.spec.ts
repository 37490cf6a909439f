import { ephemeralPortRange, stackEnvOnPorts } from '../../src/cluster';

describe('a separate stack on its own ports', () => {
  it('refuses ports inside the ephemeral range (an outgoing connection may hold one), accepts ports below it', () => {
    const [low] = ephemeralPortRange();
    expect(() => stackEnvOnPorts(low + 100, 'x')).toThrow(/overlap the OS's ephemeral range/);
    expect(() => stackEnvOnPorts(low - 10, 'x')).toThrow(/ephemeral/); // base+24 reaches into it
    expect(stackEnvOnPorts(29100, 'x')).toMatchObject({ KAFKA_PORT: '29100', KEYFLOW_REDIS_PORT: '29104' });
  });
});
