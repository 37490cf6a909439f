/**
 * The order saga example, an application of keyflow: its task contracts (`./tasks`), its handlers
 * (`OrderHandlers`, for `bootstrapWorker`) and its workflow (`orderSaga`, for `bootstrapOrchestrator`).
 */
export * from './tasks';
export { OrderHandlers } from './handlers';
export { orderSaga } from './workflow';
