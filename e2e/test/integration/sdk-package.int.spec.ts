import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { eventually, startServiceProcess, type ServiceProcess } from '@keyflow/testing';
import { PII_MASK } from '@keyflow/workflow';
import { ROOT } from './support';

const run = promisify(execFile);
jest.setTimeout(120_000);

/** The NestJS packages a NestJS application has anyway, at the monorepo's versions (the packages' peers). */
const NEST_PACKAGES = [
  '@nestjs/common',
  '@nestjs/core',
  '@nestjs/microservices',
  '@nestjs/platform-express',
  '@nestjs/swagger',
  'reflect-metadata',
  'rxjs',
];

/**
 * keyflow as a user gets it: `scripts/pack-sdk.ts` builds and packs every package, a new TypeScript project outside
 * the monorepo installs the tarballs (npm, from its cache when it can) next to NestJS, compiles against their
 * published types (node16 resolution: the `exports` maps) and runs: a script on the definitions SDK, and a NestJS
 * orchestrator and worker of its own (`@keyflow/nestjs`) that run a workflow end to end against the stack; a wrongly
 * typed mapping or handler in the same project fails to compile.
 */
describe('the packed packages in an application outside the monorepo', () => {
  const app = mkdtempSync(join(tmpdir(), 'keyflow-app-'));
  afterAll(() => rmSync(app, { recursive: true, force: true }));
  const root = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
  };
  const tsc = () =>
    run(process.execPath, [join(app, 'node_modules/typescript/bin/tsc'), '-p', app], { cwd: app }).then(
      () => undefined,
      (e: { stdout: string }) => e.stdout,
    );

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
        dependencies: {
          ...Object.fromEntries(Object.entries(tarballs).map(([name, file]) => [name, `file:${file}`])),
          ...Object.fromEntries(NEST_PACKAGES.map((name) => [name, root.dependencies[name]])),
        },
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
          experimentalDecorators: true,
          emitDecoratorMetadata: true,
        },
        include: ['src/*.ts'],
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
    writeNestApp();
    expect(await tsc()).toBeUndefined();
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
    const failed = await tsc();
    writeFileSync(join(app, 'src', 'app.ts'), appSource);
    expect(failed).toMatch(new RegExp(`src/app\\.ts\\(${line},\\d+\\): error TS2322`));
  });

  const contractsSource = `
import { defineTask, pii, workflow, z } from '@keyflow/workflow';

export const greet = defineTask({
  type: 'scratch.greet',
  input: z.object({ name: z.string(), email: pii(z.email()) }),
  output: z.object({ greeting: z.string() }),
});
export const shout = defineTask({
  type: 'scratch.shout',
  input: z.object({ text: z.string() }),
  output: z.object({ text: z.string(), chars: z.number().int() }),
});

export const hello = workflow('scratch-hello', 1, { input: z.object({ name: z.string(), email: pii(z.email()) }) })
  .task('greet', greet, { input: (c) => ({ name: c.input.name, email: c.input.email }) })
  .task('shout', shout, { input: (c) => ({ text: c.outputs.greet.greeting }) })
  .output((c) => ({ text: c.outputs.shout.text, chars: c.outputs.shout.chars }))
  .build();
`;
  const orchestratorSource = `
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { KeyflowOrchestratorModule, setupKeyflowOrchestrator } from '@keyflow/nestjs';
import { hello } from './contracts';

@Module({ imports: [KeyflowOrchestratorModule.forRoot({ workflows: [hello] })] })
class OrchestratorApp {}

async function main() {
  const app = await NestFactory.create(OrchestratorApp, { rawBody: true, logger: ['error', 'warn'] });
  setupKeyflowOrchestrator(app);
  app.enableShutdownHooks();
  await app.listen(0, '127.0.0.1');
  console.log(JSON.stringify({ msg: 'scratch orchestrator ready', http: await app.getUrl() }));
}
main().catch((err) => {
  console.error(err);
  process.exit(1);
});
`;
  const workerSource = `
import 'reflect-metadata';
import { Controller, Injectable, Module, type CanActivate } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { Ctx, Payload } from '@nestjs/microservices';
import { KeyflowWorkerModule, startKeyflowWorker, TaskHandler, type TaskContext } from '@keyflow/nestjs';
import type { ParsedTaskInputOf } from '@keyflow/workflow';
import { greet, shout } from './contracts';

@Controller()
class GreetingHandlers {
  @TaskHandler(greet)
  greet(@Payload() input: ParsedTaskInputOf<typeof greet>) {
    return { greeting: 'Hello ' + input.name };
  }

  @TaskHandler(shout)
  async shout(@Payload() input: ParsedTaskInputOf<typeof shout>, @Ctx() ctx: TaskContext) {
    ctx.logger.info({ step: ctx.stepId }, 'shouting');
    return { text: input.text.toUpperCase() + '!', chars: input.text.length };
  }
}

// The application's own global guard, for its HTTP routes: it must not touch the task handlers.
@Injectable()
class RefuseEveryRequest implements CanActivate {
  canActivate() {
    return false;
  }
}

@Module({
  imports: [KeyflowWorkerModule.forRootAsync({ useFactory: async () => ({ env: process.env }) })],
  controllers: [GreetingHandlers],
  providers: [{ provide: APP_GUARD, useClass: RefuseEveryRequest }],
})
class WorkerApp {}

async function main() {
  const app = await NestFactory.create(WorkerApp, { logger: ['error', 'warn'] });
  app.enableShutdownHooks();
  await startKeyflowWorker(app);
  await app.listen(0, '127.0.0.1');
  console.log(JSON.stringify({ msg: 'scratch worker ready', http: await app.getUrl() }));
}
main().catch((err) => {
  console.error(err);
  process.exit(1);
});
`;
  function writeNestApp(): void {
    writeFileSync(join(app, 'src', 'contracts.ts'), contractsSource);
    writeFileSync(join(app, 'src', 'orchestrator.ts'), orchestratorSource);
    writeFileSync(join(app, 'src', 'worker.ts'), workerSource);
  }

  describe('a NestJS application on @keyflow/nestjs, against the stack', () => {
    const prefix = `scratch-${randomBytes(4).toString('hex')}.`;
    const env = {
      KEYFLOW_TOPIC_PREFIX: prefix,
      ORCHESTRATOR_GROUP_ID: `${prefix}orchestrator`,
      WORKER_GROUP_ID: `${prefix}workers`,
    };
    const started: ServiceProcess[] = [];
    const lines: string[] = [];
    afterAll(async () => {
      started.forEach((s) => s.proc.kill('SIGTERM'));
      await Promise.all(started.map((s) => s.exited));
    }, 60_000);

    it("runs a workflow of its own end to end: typed steps, the packed kafkajs, PII masked in the run view, the application's global guard kept off the task handlers", async () => {
      const onLine = (l: string) => lines.push(l);
      const orchestrator = startServiceProcess(
        join(app, 'dist', 'orchestrator.js'),
        env,
        'scratch orchestrator ready',
        {
          cwd: app,
          onLine,
        },
      );
      const worker = startServiceProcess(join(app, 'dist', 'worker.js'), env, 'scratch worker ready', {
        cwd: app,
        onLine,
      });
      started.push(orchestrator, worker);
      const [url, workerUrl] = await Promise.all([orchestrator.ready, worker.ready]);
      // The application's guard is in place on its HTTP routes (the worker module's /health included).
      expect((await fetch(`${workerUrl}/health`)).status).toBe(403);
      const email = `ada.${randomBytes(3).toString('hex')}@example.com`;
      const res = await fetch(`${url}/runs`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ workflow: 'scratch-hello', input: { name: 'Ada', email } }),
      });
      expect(res.status).toBe(202);
      const { runId } = (await res.json()) as { runId: string };
      const view = await eventually(
        'the ended run in the read model',
        async () => (await fetch(`${url}/runs/${runId}`)).text(),
        {
          until: (t) =>
            ['completed', 'failed'].includes(String((JSON.parse(t) as { status?: string }).status)),
          timeoutMs: 90_000,
        },
      );
      expect(JSON.parse(view)).toMatchObject({
        status: 'completed',
        input: { name: 'Ada', email: PII_MASK },
        steps: { shout: { output: { text: 'HELLO ADA!', chars: 9 } } },
      });
      expect(view).not.toContain(email);
      expect(lines.filter((l) => l.includes(email))).toEqual([]);
      // The worker ran the application's handler (its log line names the run), on the kafkajs @keyflow/kafka bundles.
      expect(lines.some((l) => l.includes('"shouting"') && l.includes(runId))).toBe(true);
      const kafkajs = require.resolve('kafkajs/package.json', {
        paths: [join(app, 'node_modules', '@keyflow', 'kafka')],
      });
      expect(kafkajs).toBe(
        join(app, 'node_modules', '@keyflow', 'kafka', 'node_modules', 'kafkajs', 'package.json'),
      );
      expect(() => require.resolve('kafkajs', { paths: [app] })).toThrow(); // no second copy for anything else
    }, 180_000);

    it('a handler whose output breaks its contract fails to compile against the published types (TS1241)', async () => {
      const wrong = workerSource.replace('chars: input.text.length }', 'chars: String(input.text.length) }');
      expect(wrong).not.toBe(workerSource);
      writeFileSync(join(app, 'src', 'worker.ts'), wrong);
      const line = wrong.split('\n').findIndex((l) => l.includes('@TaskHandler(shout)')) + 1;
      const failed = await tsc();
      writeFileSync(join(app, 'src', 'worker.ts'), workerSource);
      expect(failed).toMatch(new RegExp(`src/worker\\.ts\\(${line},\\d+\\): error TS1241`));
    });
  });
});
