import { pii, workflow, z } from '@keyflow/workflow';
import { composeGreeting, sendGreeting } from './tasks';

/** 3. The workflow: its input is checked by the API; each step's output is typed in the steps after it. */
export const greet = workflow('greet', 1, { input: z.object({ name: z.string(), email: pii(z.email()) }) })
  .task('compose', composeGreeting, { input: (c) => ({ name: c.input.name }) })
  .task('send', sendGreeting, { input: (c) => ({ to: c.input.email, text: c.outputs.compose.text }) })
  .output((c) => ({ text: c.outputs.compose.text, messageId: c.outputs.send.messageId }))
  .build();

/**
 * 6. Child workflows (docs/workflows.md "Child workflows"): one `greet` run per person, started by this run as its
 * children (each on the partition of its own run id, `<run>~greetings[<i>]~<attempt>`); the step's output is the
 * children's outputs, typed (`greet`'s output), in item order.
 */
export const greetAll = workflow('greet-all', 1, {
  input: z.object({ people: z.array(z.object({ name: z.string(), email: pii(z.email()) })) }),
})
  .childMap('greetings', greet, { items: (c) => c.input.people, input: (person) => person, concurrency: 10 })
  .output((c) => ({ messageIds: c.outputs.greetings.map((g) => g.messageId) }))
  .build();
