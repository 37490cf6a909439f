import { bootstrapOrchestrator } from '@keyflow/orchestrator';
import { startTrigger, workflow, z, type TriggerRecord } from '@keyflow/workflow';
import { allWorkflows } from './catalog';

/**
 * An orchestrator with the test workflows and a topic trigger `orders`: each record of the team topic
 * TRIGGER_SOURCE_TOPIC (keyed by order id, a JSON value `{ orderId, seq, amount }`) starts one `trigger-order` run.
 * The process the topic trigger's end-to-end test (e2e/test/integration/topic-trigger.int.spec.ts) starts, SIGKILLs
 * and restarts.
 *
 * Environment, besides the orchestrator's own: TRIGGER_SOURCE_TOPIC (required), TRIGGER_MAX_IN_FLIGHT (the trigger's
 * maxInFlight, default its own), TRIGGER_ACCEPT_POISON=1 (the "fix": the input mapping repairs a value that fails the
 * input schema instead of passing it on, so a redriven poison record starts a run).
 */

/** What a `trigger-order` run takes: one order record. */
export const triggerOrderInput = z.object({
  orderId: z.string(),
  seq: z.number().int().nonnegative(),
  amount: z.number().positive(),
});

/** Generous retries: a step must outlive an orchestrator SIGKILLed and restarted mid-run. */
const step = (seq: number) => ({
  type: 'seq',
  entityKey: (c: { runId: string }) => c.runId,
  input: (c: { runId: string }) => ({ entity: c.runId, seq }),
  timeoutMs: 10_000,
  stepTimeoutMs: 60_000,
  retry: { maxAttempts: 6, initialDelayMs: 200, maxDelayMs: 2_000 },
});

/**
 * Two `seq` steps, handled by the workers' test process (services/workers/test/fixtures/test-worker.ts), which appends
 * one `<TEST_TABLE_PREFIX>_exec` row per handler execution in PostgreSQL: a step executed twice shows there.
 */
export const triggerOrder = workflow('trigger-order', 1, { input: triggerOrderInput })
  .task('reserve', step(0))
  .task('ship', step(1))
  .build();

/** The fix of the poison records: any value made into a valid input (a missing or bad field gets a default). */
function repaired(value: unknown): z.infer<typeof triggerOrderInput> {
  const v = (typeof value === 'object' && value !== null ? value : {}) as Record<string, unknown>;
  return {
    orderId: typeof v.orderId === 'string' ? v.orderId : 'unknown',
    seq: Number.isInteger(v.seq) && (v.seq as number) >= 0 ? (v.seq as number) : 0,
    amount: typeof v.amount === 'number' && v.amount > 0 ? v.amount : 1,
  };
}

const topic = process.env.TRIGGER_SOURCE_TOPIC;
if (!topic) {
  console.error('TRIGGER_SOURCE_TOPIC is not set: the team topic the `orders` trigger reads');
  process.exit(1);
}
const accept = process.env.TRIGGER_ACCEPT_POISON === '1';
const maxInFlight = process.env.TRIGGER_MAX_IN_FLIGHT ? Number(process.env.TRIGGER_MAX_IN_FLIGHT) : undefined;

const orders = startTrigger({
  name: 'orders',
  topic,
  workflow: triggerOrder,
  format: 'json',
  maxInFlight,
  input: (r: TriggerRecord) => (accept ? repaired(r.value) : r.value),
});

bootstrapOrchestrator([...allWorkflows, triggerOrder], process.env, [], [orders]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
