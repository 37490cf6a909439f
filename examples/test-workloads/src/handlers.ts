import { Controller } from '@nestjs/common';
import { Payload, Ctx } from '@nestjs/microservices';
import { echo, noop } from '@keyflow/testing';
import type { TaskContext } from '@keyflow/handler';
import { TaskHandler } from '@keyflow/nestjs';

/** The test workloads' tasks: `noop` (benchmarks) and `echo` (returns its input). */
@Controller()
export class EchoHandlers {
  @TaskHandler(noop)
  async noop(): Promise<null> {
    return null;
  }

  @TaskHandler(echo)
  async echo(@Payload() input: unknown, @Ctx() _ctx: TaskContext): Promise<unknown> {
    return input;
  }
}
