/**
 * The GeoNames ETL example, an application of keyflow: its task contracts (`./tasks`), its handlers
 * (`EtlHandlers`, for `bootstrapWorker`), its workflow (`geonamesEtl`, for `bootstrapOrchestrator`) and its library
 * (`./lib`: readers, transforms, sinks, report; no Kafka). `main.ts` drives a run end to end (`npm start`);
 * `orchestrator.ts` and `worker.ts` are the processes it starts.
 */
export * from './tasks';
export * from './lib';
export { EtlHandlers } from './handlers';
export { geonamesEtl, geonamesEtlInput } from './workflow';
export { etlConfinementOf, etlSettingsSchema, loadEtlSettings, type EtlSettings } from './settings';
