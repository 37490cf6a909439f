import { bootstrapOrchestrator } from '@keyflow/orchestrator';
import { geonamesEtl } from './workflow';

/** The GeoNames example's orchestrator: the `geonames-etl` workflow and nothing else (its task topics only). */
bootstrapOrchestrator([geonamesEtl]).catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
