import { workflow, z } from '@keyflow/workflow';
import {
  etlDedupe,
  etlExtract,
  etlLoad,
  etlReport,
  etlTransform,
  INPUT_FORMATS,
  MAX_CHUNK_SIZE,
  sinkSpec,
} from './tasks';

/**
 * The ETL's run input: what to read, how to chunk it, where to load it. Checked, never rewritten: the defaults
 * (source `default`, chunkSize 1000) are the extract task's (its contract fills them in).
 */
export const geonamesEtlInput = z.object({
  source: z.string().min(1).optional(),
  format: z.enum(INPUT_FORMATS).optional(),
  chunkSize: z.number().int().min(1).max(MAX_CHUNK_SIZE).optional(),
  sink: sinkSpec,
});

/**
 * The GeoNames ETL: extract (stream the input into chunk blobs), transform each chunk in parallel (validate,
 * normalise, enrich, publish CityEnriched), dedupe across chunks, load each chunk into the sink, report.
 * Input: { source: 'default' | path, format?, chunkSize?, sink: { kind: 'sqlite', path } | { kind: 'postgres', url } }.
 */
export const geonamesEtl = workflow('geonames-etl', 1, { input: geonamesEtlInput })
  .task('extract', etlExtract, {
    input: (c) => ({ source: c.input.source, format: c.input.format, chunkSize: c.input.chunkSize }),
    timeoutMs: 600_000,
  })
  .map('transform', etlTransform, {
    items: (c) => c.outputs.extract.chunks,
    entityKey: (_chunk, index, c) => `${c.runId}/${index}`,
    concurrency: 16,
    timeoutMs: 120_000,
  })
  .task('dedupe', etlDedupe, { input: (c) => ({ chunks: c.outputs.transform }), timeoutMs: 600_000 })
  .map('load', etlLoad, {
    items: (c) => c.outputs.dedupe.chunks,
    input: (chunk, _index, c) => ({ ...chunk, sink: c.input.sink }),
    entityKey: (_chunk, index, c) => `${c.runId}/${index}`,
    concurrency: 16,
    timeoutMs: 120_000,
  })
  .task('report', etlReport, {
    input: (c) => ({
      extract: c.outputs.extract,
      transform: c.outputs.transform,
      dedupe: c.outputs.dedupe,
      load: c.outputs.load,
      sink: c.input.sink,
    }),
    timeoutMs: 300_000,
  })
  .output((c) => c.outputs.report)
  .build();
