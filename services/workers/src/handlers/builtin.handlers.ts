import { Controller } from '@nestjs/common';
import { Payload, Ctx } from '@nestjs/microservices';
import { TaskHandler } from '../transport/task-handler.decorator';
import type { TaskContext } from '../runtime/task-executor';

/** Built-in task types: `noop` (benchmarks) and `echo` (returns its input). */
@Controller()
export class BuiltinHandlers {
  @TaskHandler('noop')
  async noop(): Promise<null> {
    return null;
  }

  @TaskHandler('echo')
  async echo(@Payload() input: unknown, @Ctx() _ctx: TaskContext): Promise<unknown> {
    return input;
  }
}
