import { cpuMeter, cpuSeconds, localStackPids, peakRssMiB } from '../../src';

describe('process figures from /proc', () => {
  it("read this process's CPU seconds and peak RSS, and answer null for a process that is not there", () => {
    expect(cpuSeconds(process.pid)).toBeGreaterThan(0);
    expect(peakRssMiB(process.pid)).toBeGreaterThan(10);
    expect(cpuSeconds(2 ** 22 + 1)).toBeNull();
    expect(peakRssMiB(2 ** 22 + 1)).toBeNull();
  });

  it('a CPU meter counts what each named process used since it started, leaving out the ones it cannot read', () => {
    const used = cpuMeter({ self: process.pid, gone: 2 ** 22 + 1 });
    // Busy until Node's own account (getrusage) shows 200 ms of CPU used: a wall-clock wait gives less CPU than that
    // on a loaded machine (CI runs suites side by side on two cores).
    const start = process.cpuUsage();
    const spent = () => {
      const d = process.cpuUsage(start);
      return (d.user + d.system) / 1e6;
    };
    while (spent() < 0.2);
    const figures = used();
    expect(Object.keys(figures)).toEqual(['self']);
    expect(figures.self).toBeGreaterThanOrEqual(0.1);
  });

  it('no local stack run directory: no processes', () => {
    const before = process.env.KEYFLOW_RUN_DIR;
    process.env.KEYFLOW_RUN_DIR = '/nonexistent/keyflow-run';
    try {
      expect(localStackPids('/nonexistent')).toEqual({});
    } finally {
      if (before === undefined) delete process.env.KEYFLOW_RUN_DIR;
      else process.env.KEYFLOW_RUN_DIR = before;
    }
  });
});
