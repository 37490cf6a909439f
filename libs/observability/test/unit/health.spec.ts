import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { ComponentHealth } from '../../src';

describe('component health', () => {
  it('records the first failure of each component, in order, and calls listeners once per component', () => {
    const h = new ComponentHealth();
    const seen: string[] = [];
    h.onFailure((f) => seen.push(f.component));
    expect(h.healthy).toBe(true);
    h.fail('read model', Object.assign(new Error('gone'), { code: 'READ_MODEL_STOPPED' }));
    h.fail('read model', new Error('again'));
    h.fail('engine producer', new TypeError('fenced'));
    expect(h.healthy).toBe(false);
    expect(h.failures().map(({ component, error, code }) => ({ component, error, code }))).toEqual([
      { component: 'read model', error: 'gone', code: 'READ_MODEL_STOPPED' },
      { component: 'engine producer', error: 'fenced', code: 'TypeError' },
    ]);
    expect(seen).toEqual(['read model', 'engine producer']);
  });

  it('a process whose component fails for good logs it at fatal level and exits 1 after the delay', async () => {
    const script = `
      const { ComponentHealth, exitOnComponentFailure, createLogger } = require(${JSON.stringify(join(__dirname, '../../src'))});
      const h = new ComponentHealth();
      exitOnComponentFailure(h, createLogger('health-test'), 300);
      const t0 = Date.now();
      process.on('exit', () => process.stderr.write('after ' + (Date.now() - t0) + ' ms'));
      h.fail('task consumer', new Error('crashed for good'));
      setInterval(() => undefined, 1000); // would keep the process alive forever
    `;
    const p = spawn(process.execPath, ['-r', '@swc-node/register', '-e', script], {
      cwd: join(__dirname, '../../../..'),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    p.stdout!.on('data', (b: Buffer) => (out += b.toString()));
    p.stderr!.on('data', (b: Buffer) => (err += b.toString()));
    const code = await new Promise<number | null>((r) => p.once('exit', r));
    expect(code).toBe(1);
    const fatal = JSON.parse(out.split('\n').find((l) => l.includes('failed for good'))!);
    expect(fatal).toMatchObject({
      level: 60,
      component: 'task consumer',
      msg: 'task consumer failed for good; exiting',
    });
    expect(Number(err.match(/after (\d+) ms/)?.[1])).toBeGreaterThanOrEqual(300);
  }, 30_000);
});
