export { retryPolicy, backoffCapMs, backoffDelayMs, shouldRetry, InvalidRetryPolicyError } from './retry';
export type { RetryPolicy, RetryPolicyInput } from './retry';
export { workflow, InvalidDefinitionError, COMPENSATION_SUFFIX } from './dsl';
export type {
  Step,
  TaskStep,
  MapStep,
  ChoiceStep,
  WaitStep,
  StepContext,
  TaskOptions,
  MapOptions,
  StepPolicyOptions,
  ContractTaskOptions,
  ContractMapOptions,
  ContractMapItemsOptions,
  ContractCompensation,
  InputMapping,
  DefaultFits,
  NoExtra,
  UnionToIntersection,
  BranchOutputs,
  WithOutput,
  NoOutputs,
  WorkflowDefinition,
  StepsBuilder,
  WorkflowBuilder,
  StepMethods,
} from './dsl';
export {
  reduce,
  reduceInPlace,
  copyRunState,
  flatRunState,
  normalizeRunState,
  stepStateOf,
  itemOf,
  SEGMENT_ITEMS,
  dueTimers,
  seededRandom,
  stepOf,
  idempotencyKeyOf,
  TERMINAL,
  RUN_STATUSES,
  TIMELINE_MAX,
  DEAD_LETTERED,
  STEP_TIMEOUT_ERROR,
  DEFAULT_SIGNAL_BUFFER_LIMIT,
  SIGNAL_BUFFER_FULL,
  RUN_ENDED,
  IGNORE_REASONS,
  type IgnoreReason,
} from './reducer';
export type {
  RunState,
  RunStatus,
  StepState,
  MapProgress,
  ItemSegment,
  TimerState,
  WorkflowInput,
  CommandSpec,
  LifecycleSpec,
  Decision,
  StepError,
  TimelineEntry,
  ReduceOptions,
} from './reducer';
export { PendingRuns } from './pending';
export { snapshotParts, assembleRunState, segmentKey, runOfSegmentKey } from './snapshot';
export type { SnapshotParts } from './snapshot';
export {
  defineTask,
  parseTaskInput,
  checkTaskOutput,
  runInputIssues,
  TaskContractError,
  z,
  type TaskContract,
  type AnyTaskContract,
  type TaskInputOf,
  type ParsedTaskInputOf,
  type TaskOutputOf,
  type TaskContractErrorCode,
  type SchemaIssue,
} from './contract';
export { pii, maskPii, marksPii, maskRunView, PII_MASK } from './pii';
export { rerunVerdict, fenceExpiryMarginMs, RERUN_CODES } from './rerun';
export type { RerunVerdict, RerunFacts, RerunCode, RunView, TaskCommandRef } from './rerun';
