export { testInfra, infraFromEnv, InfraUnavailableError, ENV_KEYS, type InfraEndpoints } from './infra';
export { dockerAvailable, startContainers, type StartedInfra } from './containers';
export { TestNamespace } from './namespace';
export { eventually, Collector, AwaitTimeoutError } from './await';
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
export { rejectLz4Batches } from './codec-gap';
export { ensureDebianTool, ToolUnavailableError } from './debian-tool';
export { RegistryProxy } from './registry-proxy';
export { healthOf, degradedWith, type HealthAnswer } from './health';
export {
  clusterControl,
  stackEnvOnPorts,
  StackCommandError,
  STACK_SCRIPT,
  type BrokerInfo,
  type ClusterControl,
} from './cluster';
export { startServiceProcess, type ServiceProcess } from './service-process';
export { noop, echo, threeStep, fanOut, testWorkflows } from './workloads';
