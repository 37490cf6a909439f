export { testInfra, infraFromEnv, InfraUnavailableError, ENV_KEYS, type InfraEndpoints } from './infra';
export { dockerAvailable, startContainers, type StartedInfra } from './containers';
export { TestNamespace } from './namespace';
export { eventually, Collector, AwaitTimeoutError, type EventuallyOptions } from './await';
export { OwnRedisServer, freePort, REDIS_AOF_ARGS, REDIS_NO_PERSISTENCE_ARGS } from './redis-server';
export {
  ensureKcat,
  produceWithKcat,
  produceLargeWithKcat,
  javaKafkaClient,
  produceWithJavaClient,
  kcatLibrdkafkaVersion,
  kcatMissing,
  consumeWithKcat,
  consumeWithJavaClient,
  longRangeRepeats,
  KCAT_CODECS,
  type KcatCodec,
} from './kcat';
export {
  produceJsonWithJavaClient,
  produceJsonWithKcat,
  createTopicWithJavaAdmin,
  resetGroupToEarliest,
  type JsonRecord,
} from './producers';
export { rejectLz4Batches } from './codec-gap';
export { ensureDebianTool, ToolUnavailableError } from './debian-tool';
export { RegistryProxy } from './registry-proxy';
export { healthOf, degradedWith, type HealthAnswer } from './health';
export { metricValue } from './metrics';
export {
  clusterControl,
  stackEnvOnPorts,
  StackCommandError,
  STACK_SCRIPT,
  type BrokerInfo,
  type ClusterControl,
} from './cluster';
export { startServiceProcess, type ServiceProcess, type ServiceProcessOptions } from './service-process';
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
} from './harness/orchestrator';
export {
  FAULT_KINDS,
  runChaos,
  lifecycleGaps,
  type ChaosOptions,
  type ChaosReport,
  type Fault,
  type FaultKind,
} from './scenarios/chaos';
export { CHAOS_TRIGGER, type TriggerStarts } from './scenarios/chaos-trigger';
export {
  runScaleScenario,
  THREE_STEP,
  ORDER_SAGA,
  type GroupSnapshot,
  type ScaleReport,
  type ScaleScenario,
  type ScaleWorkflow,
} from './scenarios/scale';
export { noop, echo, threeStep, threeStepLocal, fanOut, testWorkflows } from './workloads';
