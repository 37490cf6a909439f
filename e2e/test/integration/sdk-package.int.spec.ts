import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { ROOT } from './support';

const run = promisify(execFile);
jest.setTimeout(120_000);

/**
 * The definitions SDK as a user gets it: `scripts/pack-sdk.ts` builds and packs @keyflow/errors and
 * @keyflow/workflow, a new TypeScript project outside the monorepo installs the tarballs (npm, from its cache when
 * it can), compiles an application against their published types (node16 resolution: the `exports` maps) and runs
 * it; a wrongly typed mapping in the same project fails to compile.
 */
describe('the packed definitions SDK in an application outside the monorepo', () => {
  const app = mkdtempSync(join(tmpdir(), 'keyflow-app-'));
  afterAll(() => rmSync(app, { recursive: true, force: true }));
  const root = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    devDependencies: Record<string, string>;
  };

  beforeAll(async () => {
    const { stdout } = await run(
      process.execPath,
      ['-r', '@swc-node/register', join(ROOT, 'scripts/pack-sdk.ts'), '--out', join(app, 'packages')],
      { cwd: ROOT },
    );
    const tarballs = JSON.parse(stdout.trim().split('\n').at(-1)!) as Record<string, string>;
    writeFileSync(
      join(app, 'package.json'),
      JSON.stringify({
        name: 'scratch-app',
        private: true,
        dependencies: Object.fromEntries(
          Object.entries(tarballs).map(([name, file]) => [name, `file:${file}`]),
        ),
        devDependencies: {
          typescript: root.devDependencies.typescript,
          '@types/node': root.devDependencies['@types/node'],
        },
      }),
    );
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          target: 'ES2022',
          module: 'node16',
          moduleResolution: 'node16',
          outDir: 'dist',
          types: ['node'],
        },
        include: ['src/app.ts'],
      }),
    );
    await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts'], {
      cwd: app,
      timeout: 300_000,
    });
  }, 360_000);

  const appSource = `
import { defineTask, maskPii, parseTaskInput, pii, TaskContractError, workflow, z } from '@keyflow/workflow';
import { KeyflowError } from '@keyflow/errors';

const charge = defineTask({
  type: 'payment.charge',
  input: z.object({ amount: z.number().positive(), card: pii(z.string()) }),
  output: z.object({ paymentId: z.string() }),
});
const receipt = defineTask({ type: 'payment.receipt', input: z.object({ paymentId: z.string() }), output: z.null() });

const order = workflow('order', 1, { input: z.object({ amount: z.number(), card: z.string() }) })
  .task('charge', charge, { input: (c) => ({ amount: c.input.amount, card: c.input.card }) })
  .task('receipt', receipt, { input: (c) => ({ paymentId: c.outputs.charge.paymentId }) })
  .build();

let refused: unknown;
try {
  parseTaskInput(charge, { amount: -1, card: '4111' });
} catch (e) {
  refused = e;
}
console.log(
  JSON.stringify({
    steps: [...order.stepIndex.keys()],
    types: [...order.stepIndex.values()].map((s) => (s.kind === 'task' ? s.type : s.kind)),
    masked: maskPii(charge.input, { amount: 5, card: '4111' }),
    refused: refused instanceof TaskContractError && refused instanceof KeyflowError && refused.code,
  }),
);
`;

  it('compiles against the published types and runs', async () => {
    mkdirSync(join(app, 'src'), { recursive: true });
    writeFileSync(join(app, 'src', 'app.ts'), appSource);
    await run(process.execPath, [join(app, 'node_modules/typescript/bin/tsc'), '-p', app], { cwd: app });
    const { stdout } = await run(process.execPath, [join(app, 'dist', 'app.js')], { cwd: app });
    expect(JSON.parse(stdout)).toEqual({
      steps: ['charge', 'receipt'],
      types: ['payment.charge', 'payment.receipt'],
      masked: { amount: 5, card: '[masked]' },
      refused: 'INPUT_SCHEMA',
    });
  });

  it('a mapping of the wrong type fails to compile against the published types (TS2322 at its line)', async () => {
    const wrong = appSource.replace(
      'input: (c) => ({ paymentId: c.outputs.charge.paymentId })',
      'input: (c) => ({ paymentId: c.input.amount })',
    );
    expect(wrong).not.toBe(appSource);
    writeFileSync(join(app, 'src', 'app.ts'), wrong);
    const line = wrong.split('\n').findIndex((l) => l.includes('paymentId: c.input.amount')) + 1;
    const failed = await run(process.execPath, [join(app, 'node_modules/typescript/bin/tsc'), '-p', app], {
      cwd: app,
    }).then(
      () => undefined,
      (e: { stdout: string }) => e.stdout,
    );
    expect(failed).toMatch(new RegExp(`src/app\\.ts\\(${line},\\d+\\): error TS2322`));
  });
});
