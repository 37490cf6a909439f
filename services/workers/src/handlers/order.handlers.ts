import { Controller } from '@nestjs/common';
import { Ctx, Payload } from '@nestjs/microservices';
import { NonRetryableTaskError } from '../runtime/errors';
import type { TaskContext } from '../runtime/task-executor';
import { TaskHandler } from '../transport/task-handler.decorator';

/**
 * The order saga example's tasks: reserve inventory, charge payment, create shipment, send confirmation, each
 * with a compensation. `failAt` in the run input (reserve, charge, ship or confirm) makes that step fail for good,
 * so the orchestrator runs the compensations of the completed steps in reverse order.
 */
type OrderInput = { orderId?: string; amount?: number; failAt?: string };

function step(name: string, input: OrderInput, ctx: TaskContext, result: Record<string, unknown>) {
  if (input.failAt === name)
    throw new NonRetryableTaskError(`injected failure at ${name}`, { code: 'INJECTED' });
  ctx.logger.info(
    { orderId: input.orderId, step: name, idempotencyKey: ctx.idempotencyKey },
    `order ${name}`,
  );
  return { orderId: input.orderId, ...result };
}

@Controller()
export class OrderHandlers {
  @TaskHandler('order.reserve-inventory')
  reserve(@Payload() i: OrderInput, @Ctx() c: TaskContext) {
    return step('reserve', i, c, { reservation: `res-${c.idempotencyKey}` });
  }

  @TaskHandler('order.charge-payment')
  charge(@Payload() i: OrderInput, @Ctx() c: TaskContext) {
    return step('charge', i, c, { payment: `pay-${c.idempotencyKey}`, amount: i.amount ?? 0 });
  }

  @TaskHandler('order.create-shipment')
  ship(@Payload() i: OrderInput, @Ctx() c: TaskContext) {
    return step('ship', i, c, { shipment: `shp-${c.idempotencyKey}` });
  }

  @TaskHandler('order.send-confirmation')
  confirm(@Payload() i: OrderInput, @Ctx() c: TaskContext) {
    return step('confirm', i, c, { sent: true });
  }

  @TaskHandler('order.release-inventory')
  release(@Payload() i: { input: OrderInput }, @Ctx() c: TaskContext) {
    return step('release', i.input ?? {}, c, { released: true });
  }

  @TaskHandler('order.refund-payment')
  refund(@Payload() i: { input: OrderInput }, @Ctx() c: TaskContext) {
    return step('refund', i.input ?? {}, c, { refunded: true });
  }

  @TaskHandler('order.cancel-shipment')
  cancelShipment(@Payload() i: { input: OrderInput }, @Ctx() c: TaskContext) {
    return step('cancel-shipment', i.input ?? {}, c, { cancelled: true });
  }

  @TaskHandler('order.send-apology')
  apologise(@Payload() i: { input: OrderInput }, @Ctx() c: TaskContext) {
    return step('apology', i.input ?? {}, c, { apologised: true });
  }
}
