import { defineTask, z, type AnyTaskContract } from '@keyflow/workflow';

/**
 * The GeoNames ETL's tasks. Records travel between steps as JSON Lines blobs (claim check): inputs and outputs
 * carry `blob:` references and counts, never the records.
 */

/** Where the load step writes: a SQLite file or a PostgreSQL database (table default `cities`). */
export const sinkSpec = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('sqlite'), path: z.string().min(1), table: z.string().optional() }),
  z.object({ kind: z.literal('postgres'), url: z.string().min(1), table: z.string().optional() }),
]);
export type SinkSpec = z.infer<typeof sinkSpec>;

/** The input formats the extract step reads (default: from the file's extension). */
export const INPUT_FORMATS = ['json', 'jsonl', 'csv'] as const;

/** Largest chunk the extract step makes, in records. */
export const MAX_CHUNK_SIZE = 50_000;

/** One chunk of records in the blob store. */
export const chunkRef = z.object({
  index: z.number().int().nonnegative(),
  ref: z.string(),
  count: z.number().int().nonnegative(),
});
export type ChunkRef = z.infer<typeof chunkRef>;

const counts = z.record(z.string(), z.number());

/** A rejected record as the report shows it: its chunk, its 0-based position in the chunk, reason and detail. */
export const rejectSample = z.object({
  chunk: z.number().int(),
  position: z.number().int(),
  reason: z.string(),
  detail: z.string(),
});
export type RejectSample = z.infer<typeof rejectSample>;

/** Streams the input into chunk blobs. */
export const etlExtract = defineTask({
  type: 'etl.extract',
  input: z.object({
    /** `default` (the bundled cities) or a file path. */
    source: z.string().min(1).default('default'),
    format: z.enum(INPUT_FORMATS).optional(),
    chunkSize: z.number().int().min(1).max(MAX_CHUNK_SIZE).default(1000),
  }),
  output: z.object({
    source: z.string(),
    total: z.number().int(),
    chunkSize: z.number().int(),
    chunks: z.array(chunkRef),
  }),
  description: 'streams the input into chunk blobs',
});

/** Validates, normalises and enriches one chunk; publishes CityEnriched. */
export const etlTransform = defineTask({
  type: 'etl.transform',
  input: chunkRef,
  output: chunkRef.extend({
    statsRef: z.string(),
    rejected: z.number().int(),
    duplicates: z.number().int(),
  }),
  description: 'validates, normalises and enriches one chunk',
});

/** Removes records an earlier chunk had, and counts per country and region. */
export const etlDedupe = defineTask({
  type: 'etl.dedupe',
  input: z.object({ chunks: z.array(etlTransform.output) }),
  output: z.object({
    chunks: z.array(chunkRef),
    unique: z.number().int(),
    crossChunkDuplicates: z.number().int(),
    statsRef: z.string(),
  }),
  description: 'removes cross-chunk duplicates',
});

/** Upserts one chunk into the sink by natural key, in one transaction. */
export const etlLoad = defineTask({
  type: 'etl.load',
  input: chunkRef.extend({ sink: sinkSpec }),
  output: z.object({ index: z.number().int(), loaded: z.number().int(), changed: z.number().int() }),
  description: 'upserts one chunk into the sink',
});

/** The run's report (see the handler): counts, rejects, the sink's rows and checksum, and the balance checks. */
export const etlReport = defineTask({
  type: 'etl.report',
  input: z.object({
    extract: etlExtract.output,
    transform: z.array(etlTransform.output),
    dedupe: etlDedupe.output,
    load: z.array(etlLoad.output),
    sink: sinkSpec,
  }),
  output: z.object({
    read: z.number().int(),
    extracted: z.number().int(),
    rejected: z.number().int(),
    rejectsByReason: counts,
    rejectSamples: z.array(rejectSample),
    duplicates: z.number().int(),
    accepted: z.number().int(),
    loaded: z.number().int(),
    byCountry: counts,
    byRegion: counts,
    topCountries: z.array(z.object({ country: z.string(), count: z.number() })),
    sink: z.intersection(sinkSpec, z.object({ rows: z.number().int(), checksum: z.string() })),
    sinkMatches: z.boolean(),
    balanced: z.boolean(),
    reportRef: z.string(),
  }),
  description: 'the run report, checked against the sink',
});

/** The GeoNames ETL's task contracts, in the order the workflow runs them. */
export const ETL_TASKS: readonly AnyTaskContract[] = [
  etlExtract,
  etlTransform,
  etlDedupe,
  etlLoad,
  etlReport,
];
