import { defineTask, pii, z } from '@keyflow/workflow';

/** 1. The tasks: each defined once (type, input, output), for the workflow and the handler alike. */
export const composeGreeting = defineTask({
  type: 'tutorial.compose-greeting',
  input: z.object({ name: z.string().min(1), language: z.enum(['en', 'fr']).default('en') }),
  output: z.object({ text: z.string() }),
});

export const sendGreeting = defineTask({
  type: 'tutorial.send-greeting',
  // pii(): shown as [masked] in the API's run views and the DLQ records the ops API and console list.
  input: z.object({ to: pii(z.email()), text: z.string() }),
  output: z.object({ messageId: z.string() }),
});
