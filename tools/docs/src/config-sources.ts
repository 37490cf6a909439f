import { BlobConfigSchema } from '@keyflow/blobs';
import { CONNECTION_ENV } from '@keyflow/idempotency';
import { z } from 'zod';
import { OrchestratorSettingsSchema } from '@keyflow/orchestrator';
import { WorkerSettingsSchema } from '@keyflow/workers';
import type { SettingsSource } from './config-reference';

/**
 * The settings schemas the configuration reference is generated from, in the order of its sections: the shared
 * schemas first (spread into the services' schemas, listed once), then each service's. A new schema of settings is
 * added here, with the file(s) its JSDoc is written in.
 */
export const configurationSources: SettingsSource[] = [
  {
    title: 'Connections',
    about:
      'Read by the orchestrator, the workers and the CLI (libs/idempotency `CONNECTION_ENV`, spread into both ' +
      "services' schemas and the CLI's): Kafka, the schema registry, the topic prefix, Redis. Kafka TLS/SASL settings " +
      'and the rules across these settings: see [security](../security.md).',
    schema: z.object(CONNECTION_ENV),
    docFiles: ['libs/idempotency/src/connections.ts'],
    shared: true,
  },
  {
    title: 'Blob store and payload sizes',
    about:
      'Read by the orchestrator and the workers (libs/blobs `BlobConfigSchema`): where claim-checked payloads live, ' +
      'and the size limits. See [contracts: the claim check](../contracts.md#claim-check-payload-sizes-and-shared-blobs).',
    schema: BlobConfigSchema,
    docFiles: ['libs/blobs/src/config.ts'],
    shared: true,
  },
  {
    title: 'Orchestrator',
    about:
      'The orchestrator service and `KeyflowOrchestratorModule` (services/orchestrator/src/config.ts). See ' +
      '[workflows and steps](../workflows.md).',
    schema: OrchestratorSettingsSchema,
    docFiles: ['services/orchestrator/src/config.ts'],
  },
  {
    title: 'Workers',
    about:
      'The worker service and `KeyflowWorkerModule` (services/workers/src/config.ts). See ' +
      '[workers and handlers](../workers.md).',
    schema: WorkerSettingsSchema,
    docFiles: ['services/workers/src/config.ts'],
  },
];
