// The orchestrator tests' harness lives in the test-support package (@keyflow/testing), beside the chaos and scale
// scenarios that use it; the specs keep importing it from here.
export {
  OrchestratorHarness,
  TEST_WEBHOOK_SECRET,
  TERMINAL_EVENTS,
  SCREENSHOTS_DIR,
  distinctEvents,
  keyflowCli,
  launchChromium,
  post,
  type CliRun,
  type Lifecycle,
  type ServiceProcess,
} from '@keyflow/testing';
