import { Controller } from '@nestjs/common';
import { Payload, Ctx } from '@nestjs/microservices';
import { echo, noop } from '@keyflow/tasks';
import { TaskHandler } from '../transport/task-handler.decorator';
import type { TaskContext } from '../runtime/task-executor';

/** Built-in tasks: `noop` (benchmarks) and `echo` (returns its input). */
@Controller()
export class BuiltinHandlers {
  @TaskHandler(noop)
  async noop(): Promise<null> {
    return null;
  }

  @TaskHandler(echo)
  async echo(@Payload() input: unknown, @Ctx() _ctx: TaskContext): Promise<unknown> {
    return input;
  }
}
