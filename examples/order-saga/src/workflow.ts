import { workflow } from '@keyflow/workflow';
import {
  cancelShipment,
  chargePayment,
  createShipment,
  orderInput,
  refundPayment,
  releaseInventory,
  reserveInventory,
  sendApology,
  sendConfirmation,
} from './tasks';

/**
 * The order saga example: each step has a compensation; `failAt` in the input (reserve, charge, ship, confirm)
 * injects a failure there, and the completed steps are compensated in reverse order.
 */
export const orderSaga = workflow('order-saga', 1, { input: orderInput })
  .task('reserve', reserveInventory, { compensate: { task: releaseInventory } })
  .task('charge', chargePayment, { compensate: { task: refundPayment } })
  .task('ship', createShipment, { compensate: { task: cancelShipment } })
  .task('confirm', sendConfirmation, { compensate: { task: sendApology } })
  .build();
