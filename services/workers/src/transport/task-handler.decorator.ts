import { MessagePattern } from '@nestjs/microservices';

/**
 * Marks a method as the handler of a task type: `@TaskHandler('extract') async extract(input, ctx: TaskContext)`.
 * The method gets the command's input (parsed JSON) and a TaskContext, and returns the output (serialised to
 * JSON). Throw NonRetryableTaskError / TaskInputError / RetryableTaskError to say what kind of failure it is.
 */
export const TaskHandler = (taskType: string): MethodDecorator => MessagePattern(taskType);
