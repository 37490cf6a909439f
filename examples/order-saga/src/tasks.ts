import { defineTask, z, type AnyTaskContract } from '@keyflow/workflow';

/**
 * The order saga example's tasks: reserve inventory, charge payment, create shipment, send confirmation, each with
 * a compensation. `failAt` names the step that fails for good (to watch the compensations run).
 */
export const ORDER_STEPS = ['reserve', 'charge', 'ship', 'confirm'] as const;

/** The order saga's run input, which every step gets. */
export const orderInput = z.object({
  orderId: z.string().optional(),
  amount: z.number().optional(),
  /** One of ORDER_STEPS makes that step fail; any other value changes nothing. */
  failAt: z.string().optional(),
});
export type OrderInput = z.infer<typeof orderInput>;

/** A compensation's input: the undone step's input and output (the DSL's default). */
const undoInput = z.object({ input: orderInput, output: z.unknown() });

const orderTask = <const T extends string, O extends z.ZodType>(type: T, output: O, description: string) =>
  defineTask({ type, input: orderInput, output, description });
const undoTask = <const T extends string, O extends z.ZodType>(type: T, output: O, description: string) =>
  defineTask({ type, input: undoInput, output, description });

const withOrder = <S extends z.ZodRawShape>(shape: S) =>
  z.object({ orderId: z.string().optional(), ...shape });

export const reserveInventory = orderTask(
  'order.reserve-inventory',
  withOrder({ reservation: z.string() }),
  'reserves the order’s stock',
);
export const chargePayment = orderTask(
  'order.charge-payment',
  withOrder({ payment: z.string(), amount: z.number() }),
  'charges the order’s amount',
);
export const createShipment = orderTask(
  'order.create-shipment',
  withOrder({ shipment: z.string() }),
  'creates the shipment',
);
export const sendConfirmation = orderTask(
  'order.send-confirmation',
  withOrder({ sent: z.boolean() }),
  'sends the confirmation',
);
export const releaseInventory = undoTask(
  'order.release-inventory',
  withOrder({ released: z.boolean() }),
  'compensates reserve-inventory',
);
export const refundPayment = undoTask(
  'order.refund-payment',
  withOrder({ refunded: z.boolean() }),
  'compensates charge-payment',
);
export const cancelShipment = undoTask(
  'order.cancel-shipment',
  withOrder({ cancelled: z.boolean() }),
  'compensates create-shipment',
);
export const sendApology = undoTask(
  'order.send-apology',
  withOrder({ apologised: z.boolean() }),
  'compensates send-confirmation',
);

/** Every order saga task, in saga order then compensation order. */
export const ORDER_TASKS: readonly AnyTaskContract[] = [
  reserveInventory,
  chargePayment,
  createShipment,
  sendConfirmation,
  releaseInventory,
  refundPayment,
  cancelShipment,
  sendApology,
];
