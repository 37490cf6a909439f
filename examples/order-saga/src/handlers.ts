import { Controller } from '@nestjs/common';
import { Ctx, Payload } from '@nestjs/microservices';
import {
  cancelShipment,
  chargePayment,
  createShipment,
  refundPayment,
  releaseInventory,
  reserveInventory,
  sendApology,
  sendConfirmation,
  type OrderInput,
} from './tasks';
import type { ParsedTaskInputOf } from '@keyflow/workflow';
import { NonRetryableTaskError, type TaskContext } from '@keyflow/handler';
import { TaskHandler } from '@keyflow/nestjs';

/**
 * The order saga example's tasks (contracts in ./tasks): reserve inventory, charge payment, create
 * shipment, send confirmation, each with a compensation. `failAt` in the run input (reserve, charge, ship or
 * confirm) makes that step fail for good, so the orchestrator runs the compensations of the completed steps in
 * reverse order.
 */
type Undo = ParsedTaskInputOf<typeof releaseInventory>;

function step<R extends object>(name: string, input: OrderInput, ctx: TaskContext, result: R) {
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
  @TaskHandler(reserveInventory)
  reserve(@Payload() i: OrderInput, @Ctx() c: TaskContext) {
    return step('reserve', i, c, { reservation: `res-${c.idempotencyKey}` });
  }

  @TaskHandler(chargePayment)
  charge(@Payload() i: OrderInput, @Ctx() c: TaskContext) {
    return step('charge', i, c, { payment: `pay-${c.idempotencyKey}`, amount: i.amount ?? 0 });
  }

  @TaskHandler(createShipment)
  ship(@Payload() i: OrderInput, @Ctx() c: TaskContext) {
    return step('ship', i, c, { shipment: `shp-${c.idempotencyKey}` });
  }

  @TaskHandler(sendConfirmation)
  confirm(@Payload() i: OrderInput, @Ctx() c: TaskContext) {
    return step('confirm', i, c, { sent: true });
  }

  @TaskHandler(releaseInventory)
  release(@Payload() i: Undo, @Ctx() c: TaskContext) {
    return step('release', i.input, c, { released: true });
  }

  @TaskHandler(refundPayment)
  refund(@Payload() i: Undo, @Ctx() c: TaskContext) {
    return step('refund', i.input, c, { refunded: true });
  }

  @TaskHandler(cancelShipment)
  cancelShipment(@Payload() i: Undo, @Ctx() c: TaskContext) {
    return step('cancel-shipment', i.input, c, { cancelled: true });
  }

  @TaskHandler(sendApology)
  apologise(@Payload() i: Undo, @Ctx() c: TaskContext) {
    return step('apology', i.input, c, { apologised: true });
  }
}
