import { bootstrapOrchestrator } from './bootstrap';

bootstrapOrchestrator().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
