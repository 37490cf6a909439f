import 'reflect-metadata';
import { Controller } from '@nestjs/common';
import { Ctx, Payload } from '@nestjs/microservices';
import { Pool } from 'pg';
import { bootstrapWorker, type TaskContext } from '@keyflow/workers';
import { TaskHandler } from '@keyflow/nestjs';
import type { ParsedTaskInputOf } from '@keyflow/workflow';
import { soakStep } from './workflows';

const pool = new Pool({ connectionString: process.env.POSTGRES_URL, max: 4 });
/** `<SOAK_TABLE>(idempotency_key, run_id, step, version, data, at)`: one row per execution, made by bench/soak.ts. */
const table = process.env.SOAK_TABLE ?? 'soak_exec';

@Controller()
class SoakHandlers {
  @TaskHandler(soakStep)
  async step(@Payload() input: ParsedTaskInputOf<typeof soakStep>, @Ctx() ctx: TaskContext) {
    await pool.query(
      `insert into ${table}(idempotency_key, run_id, step, version, data) values ($1, $2, $3, $4, $5)`,
      [ctx.idempotencyKey, ctx.runId, input.step, input.version, JSON.stringify(input.data ?? null)],
    );
    return input;
  }
}

bootstrapWorker([SoakHandlers]).catch((err) => {
  console.error(err instanceof Error ? err.stack : err);
  process.exit(1);
});
