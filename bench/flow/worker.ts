import { Controller } from '@nestjs/common';
import { Payload, Ctx } from '@nestjs/microservices';
import Redis from 'ioredis';
import type { TaskContext } from '@keyflow/handler';
import { TaskHandler } from '@keyflow/nestjs';
import { bootstrapWorker } from '@keyflow/workers';

/** Where the calls are recorded: the Redis list BENCH_FLOW_LIST on REDIS_URL, one `start end customer` per call. */
const redis = new Redis(process.env.REDIS_URL!);
const list = process.env.BENCH_FLOW_LIST!;

/** The flow bench's `charge`: sleeps `ms` and records when it ran (this machine's clock, shared by every worker). */
@Controller()
export class FlowBenchHandlers {
  @TaskHandler('charge')
  async charge(@Payload() input: { customerId: string; ms: number }, @Ctx() ctx: TaskContext) {
    const start = Date.now();
    await new Promise((r) => setTimeout(r, input.ms));
    const end = Date.now();
    await redis.rpush(list, `${start} ${end} ${input.customerId}`);
    return { key: ctx.idempotencyKey };
  }
}

bootstrapWorker([FlowBenchHandlers]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
