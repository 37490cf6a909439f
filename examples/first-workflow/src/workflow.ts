import { pii, workflow, z } from '@keyflow/workflow';
import { composeGreeting, sendGreeting } from './tasks';

/** 3. The workflow: its input is checked by the API; each step's output is typed in the steps after it. */
export const greet = workflow('greet', 1, { input: z.object({ name: z.string(), email: pii(z.email()) }) })
  .task('compose', composeGreeting, { input: (c) => ({ name: c.input.name }) })
  .task('send', sendGreeting, { input: (c) => ({ to: c.input.email, text: c.outputs.compose.text }) })
  .output((c) => ({ text: c.outputs.compose.text, messageId: c.outputs.send.messageId }))
  .build();
