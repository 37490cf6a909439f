/** The order triggers example: the start trigger (`ordersTrigger`) that starts the order saga from the orders topic. */
export { ordersTrigger, orderInputOf, ORDERS_TOPIC } from './triggers';
