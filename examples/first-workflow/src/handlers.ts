import { Controller } from '@nestjs/common';
import { Ctx, Payload } from '@nestjs/microservices';
import type { TaskContext } from '@keyflow/handler';
import { TaskHandler } from '@keyflow/nestjs';
import type { ParsedTaskInputOf } from '@keyflow/workflow';
import { composeGreeting, sendGreeting } from './tasks';

/** 2. The handlers: typed by the contracts (a wrong input or output type does not compile). */
@Controller()
export class GreetingHandlers {
  @TaskHandler(composeGreeting)
  compose(@Payload() input: ParsedTaskInputOf<typeof composeGreeting>) {
    return { text: input.language === 'fr' ? `Bonjour ${input.name} !` : `Hello ${input.name}!` };
  }

  @TaskHandler(sendGreeting)
  async send(@Payload() input: ParsedTaskInputOf<typeof sendGreeting>, @Ctx() ctx: TaskContext) {
    // A real sender passes ctx.idempotencyKey to its provider, so a retried step never sends twice.
    ctx.logger.info({ chars: input.text.length }, 'greeting sent');
    return { messageId: `msg-${ctx.idempotencyKey}` };
  }
}
