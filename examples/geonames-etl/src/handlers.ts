import { Controller, Inject, type OnApplicationShutdown } from '@nestjs/common';
import { Ctx, Payload } from '@nestjs/microservices';
import {
  chunkRecords,
  confinePostgresUrl,
  confineSource,
  confineSqlitePath,
  createPostgresSink,
  createSqliteSink,
  emptyStats,
  EtlError,
  loadReferenceData,
  mergeStats,
  naturalKey,
  NotAllowedError,
  postgresSinkError,
  PostgresPools,
  processChunk,
  readDefaultCities,
  readRecords,
  regionLabel,
  type CitySink,
  type EtlConfinement,
  type EnrichedCity,
  type EtlStats,
  type ReferenceData,
} from './lib';
import { derivedEventId, newMetadata } from '@keyflow/contracts';
import type { CityEnriched } from '@keyflow/schemas';
import { blobJson, blobRetentionMs, type BlobStore, type PutOptions } from '@keyflow/blobs';
import { BLOB_STORE, EventPublisher, WORKER_RUNTIME, type WorkerRuntime } from '@keyflow/workers';
import { TaskHandler } from '@keyflow/nestjs';
import { NonRetryableTaskError, TaskInputError, type TaskContext } from '@keyflow/handler';
import {
  etlDedupe,
  etlExtract,
  etlLoad,
  etlReport,
  etlTransform,
  type ChunkRef,
  type RejectSample,
  type SinkSpec,
} from './tasks';
import type { ParsedTaskInputOf, TaskOutputOf } from '@keyflow/workflow';
import { etlConfinementOf, loadEtlSettings } from './settings';
import { Topic } from '@keyflow/schemas';

/**
 * Task handlers of the `geonames-etl` workflow. Records travel between steps as JSON Lines blobs (claim check):
 * commands and results carry `blob:` references and counts, never the records. Every blob key is derived from the
 * run and chunk, so a re-executed task rewrites the same blob; sinks upsert by natural key, so a re-executed load
 * changes nothing.
 */

export type { SinkSpec, ChunkRef, RejectSample } from './tasks';
export type TransformOutput = TaskOutputOf<typeof etlTransform>;
export type DedupeOutput = TaskOutputOf<typeof etlDedupe>;

/** Rejected records the report shows with their reason and detail (the first ones, in chunk order). */
export const REJECT_SAMPLES = 20;

/** The ETL topic new consumers can subscribe to. */
export const ENRICHED_TOPIC = Topic.ETL_CITIES_ENRICHED;

let reference: ReferenceData | undefined;
const ref = () => (reference ??= loadReferenceData());

/**
 * Expiry of an ETL blob: its references travel in task results, commands and StepCompleted events, so it is kept
 * as long as the longest of those topics (docs/contracts.md "Claim check"), then swept.
 */
const etlBlob = (): PutOptions => ({ expiresAt: Date.now() + blobRetentionMs() + DAY_MS });
const DAY_MS = 24 * 3600 * 1000;

@Controller()
export class EtlHandlers implements OnApplicationShutdown {
  /** One pool per PostgreSQL sink URL for this process's load and report tasks (at most POSTGRES_POOL_MAX each). */
  private readonly pgPools: PostgresPools;
  /** Where a run's source and sinks may point (ETL_INPUT_ROOTS, ETL_SQLITE_ROOTS, ETL_POSTGRES_URLS: ./settings). */
  private readonly confinement: EtlConfinement;

  constructor(
    @Inject(BLOB_STORE) private readonly blobs: BlobStore,
    @Inject(EventPublisher) private readonly events: EventPublisher,
    @Inject(WORKER_RUNTIME) rt: WorkerRuntime,
  ) {
    this.confinement = etlConfinementOf(loadEtlSettings());
    this.pgPools = new PostgresPools((err) =>
      rt.logger.warn({ err }, 'an idle connection to a PostgreSQL sink failed; the next query opens another'),
    );
  }

  /** After the transport drained (`app.close()`): no task uses the pools any more. */
  onApplicationShutdown(): Promise<void> {
    return this.pgPools.end();
  }

  /**
   * The sink a run's input names, once the worker's settings allow it.
   * @throws NonRetryableTaskError with code SINK_NOT_ALLOWED for a SQLite path outside ETL_SQLITE_ROOTS or a
   * PostgreSQL URL no entry of ETL_POSTGRES_URLS allows
   */
  private openSink(spec: SinkSpec): CitySink {
    return refusedAsInput(() => {
      if (spec.kind === 'sqlite')
        return createSqliteSink({
          path: confineSqlitePath(spec.path, this.confinement.sqliteRoots),
          table: spec.table,
        });
      confinePostgresUrl(spec.url, this.confinement.postgresUrls);
      return createPostgresSink({ pool: this.pgPools.get(spec.url), table: spec.table });
    });
  }

  /**
   * Runs `f` on a sink: a PostgreSQL failure reaches the run as SINK_FAILED naming the target and the error's code
   * only (postgresSinkError), never the server's text; its retryability follows the error.
   */
  private async onSink<T>(spec: SinkSpec, f: () => Promise<T>): Promise<T> {
    try {
      return await f();
    } catch (e) {
      if (spec.kind !== 'postgres' || e instanceof EtlError) throw e;
      const err = postgresSinkError(e, spec.url);
      if (!err.retryable) throw new NonRetryableTaskError(err.message, { code: err.code, cause: err });
      throw err;
    }
  }

  private putLines(key: string, records: readonly unknown[]): Promise<string> {
    return blobJson.putLines(this.blobs, key, records, etlBlob());
  }

  private putJson(key: string, value: unknown): Promise<string> {
    return blobJson.put(this.blobs, key, value, etlBlob());
  }

  /**
   * Reads the input into chunk blobs, one chunk in memory at a time (`readRecords`: a JSON array file of at most
   * 32 MiB is parsed whole). Input: { source: 'default' | path, format?, chunkSize? }
   * (the contract checks chunkSize: an integer in [1, 50000], default 1000).
   * A file the readers refuse (malformed, a CSV header with a duplicated or empty column name, unknown format)
   * fails the step with a non-retryable TaskInputError carrying the reader's code (e.g. DUPLICATE_COLUMN) and
   * message; a record that is not UTF-8 is not an error here: it travels as the reader's stand-in and is
   * rejected by transform with its reason (INVALID_ENCODING, NUL_CHARACTER, NESTED_TOO_DEEP).
   */
  @TaskHandler(etlExtract)
  async extract(@Payload() input: ParsedTaskInputOf<typeof etlExtract>, @Ctx() ctx: TaskContext) {
    const { source, chunkSize } = input;
    // A path of the run's input is read only where ETL_INPUT_ROOTS allows, resolved (realpath) first.
    const records =
      source === 'default'
        ? readDefaultCities()
        : readRecords(
            refusedAsInput(() => confineSource(source, this.confinement.inputRoots)),
            { format: input.format },
          );
    const chunks: ChunkRef[] = [];
    let total = 0;
    try {
      for await (const chunk of chunkRecords(records, chunkSize)) {
        if (ctx.signal.aborted) throw ctx.signal.reason;
        const r = await this.putLines(
          `runs/${ctx.runId}/raw/chunk-${String(chunk.index).padStart(5, '0')}.jsonl`,
          chunk.records,
        );
        chunks.push({ index: chunk.index, ref: r, count: chunk.records.length });
        total += chunk.records.length;
      }
    } catch (e) {
      // A malformed file, a duplicated or empty CSV column, an unknown format: the same file fails the same way.
      if (e instanceof EtlError && !e.retryable)
        throw new TaskInputError(e.message, { code: e.code, cause: e });
      if ((e as NodeJS.ErrnoException).code === 'ENOENT')
        throw new TaskInputError(`input not found: ${source}`, { cause: e });
      throw e;
    }
    return { source, total, chunkSize, chunks };
  }

  /**
   * Validates, normalises and enriches one chunk (dedupe inside the chunk), writes the accepted records and the
   * chunk's stats as blobs, and publishes each accepted record as a CityEnriched event keyed by its natural key.
   */
  @TaskHandler(etlTransform)
  async transform(@Payload() chunk: ChunkRef, @Ctx() ctx: TaskContext): Promise<TransformOutput> {
    const raw = await blobJson.getLines<unknown>(this.blobs, chunk.ref);
    const out = processChunk(raw, ref(), { offset: 0 });
    const key = `runs/${ctx.runId}/enriched/chunk-${String(chunk.index).padStart(5, '0')}`;
    const accepted = await this.putLines(`${key}.jsonl`, out.accepted);
    const rejectSamples: RejectSample[] = out.rejects
      .slice(0, REJECT_SAMPLES)
      .map((r) => ({ chunk: chunk.index, ...r }));
    const statsRef = await this.putJson(`${key}.stats.json`, { ...out.stats, rejectSamples });
    await this.events.publish(
      ENRICHED_TOPIC,
      'CityEnriched',
      out.accepted.map((c, i) => {
        const k = out.acceptedKeys[i]!;
        const value: CityEnriched = {
          metadata: newMetadata('CityEnriched', {
            key: k,
            correlationId: ctx.runId,
            eventId: derivedEventId(ctx.runId, k),
          }),
          runId: ctx.runId,
          naturalKey: k,
          name: c.name,
          country: c.country,
          countryName: c.countryName || null,
          region: c.region || null,
          subregion: c.subregion || null,
          currencies: [...c.currencies],
          admin1: c.admin1 || null,
          admin1Name: c.admin1Name,
          admin2: c.admin2 || null,
          admin2Name: c.admin2Name,
          lat: c.lat,
          lng: c.lng,
        };
        return { key: k, value };
      }),
    );
    return {
      index: chunk.index,
      ref: accepted,
      count: out.accepted.length,
      statsRef,
      rejected: out.stats.rejected,
      duplicates: out.stats.duplicates,
    };
  }

  /**
   * Removes records whose natural key an earlier chunk already had (chunks in index order), and counts per country
   * and region. Each chunk's unique records are written as a blob of this step (its expiry counts from now: the
   * retention rule of `etlBlob`), from the bytes read: the same bytes when the chunk loses nothing, its kept lines
   * as they were otherwise, so no record is stringified again.
   */
  @TaskHandler(etlDedupe)
  async dedupe(
    @Payload() input: ParsedTaskInputOf<typeof etlDedupe>,
    @Ctx() ctx: TaskContext,
  ): Promise<DedupeOutput> {
    const seen = new Set<string>();
    const chunks: ChunkRef[] = [];
    const byCountry: Record<string, number> = {};
    const byRegion: Record<string, number> = {};
    let cross = 0;
    for (const c of [...input.chunks].sort((a, b) => a.index - b.index)) {
      const bytes = await this.blobs.get(c.ref);
      const lines = blobJson.lines(bytes);
      const kept: string[] = [];
      for (const line of lines) {
        const r = JSON.parse(line) as EnrichedCity;
        const k = naturalKey(r);
        if (seen.has(k)) continue;
        seen.add(k);
        kept.push(line);
        byCountry[r.country] = (byCountry[r.country] ?? 0) + 1;
        const region = regionLabel(r.region);
        byRegion[region] = (byRegion[region] ?? 0) + 1;
      }
      cross += lines.length - kept.length;
      const key = `runs/${ctx.runId}/unique/chunk-${String(c.index).padStart(5, '0')}.jsonl`;
      const ref =
        kept.length === lines.length
          ? (await this.blobs.put(key, bytes, etlBlob())).ref
          : await blobJson.putLineTexts(this.blobs, key, kept, etlBlob());
      chunks.push({ index: c.index, ref, count: kept.length });
    }
    const statsRef = await this.putJson(`runs/${ctx.runId}/unique/counts.json`, {
      byCountry: sortKeys(byCountry),
      byRegion: sortKeys(byRegion),
    });
    return { chunks, unique: seen.size, crossChunkDuplicates: cross, statsRef };
  }

  /** Upserts one chunk into the sink by natural key, in one transaction. */
  @TaskHandler(etlLoad)
  async load(@Payload() input: ParsedTaskInputOf<typeof etlLoad>, @Ctx() ctx: TaskContext) {
    const records = await blobJson.getLines<EnrichedCity>(this.blobs, input.ref);
    const sink = this.openSink(input.sink);
    try {
      return await this.onSink(input.sink, async () => {
        await sink.init();
        const r = await sink.upsert(records, { signal: ctx.signal });
        return { index: input.index, loaded: r.rows, changed: r.changed };
      });
    } finally {
      await sink.close();
    }
  }

  /**
   * The run's report: per country and region counts, rejects by reason, the first REJECT_SAMPLES rejects with
   * their reason and detail (e.g. INVALID_ENCODING with the line and byte offset), duplicates, loaded, and the
   * sink's own counts and checksum. `balanced` says read = rejected + duplicates + accepted and loaded = accepted = sink rows.
   */
  @TaskHandler(etlReport)
  async report(@Payload() input: ParsedTaskInputOf<typeof etlReport>, @Ctx() ctx: TaskContext) {
    let t: EtlStats = emptyStats();
    const samples: RejectSample[] = [];
    for (const c of [...input.transform].sort((a, b) => a.index - b.index)) {
      const stats = await blobJson.get<EtlStats & { rejectSamples?: RejectSample[] }>(this.blobs, c.statsRef);
      t = mergeStats(t, stats);
      samples.push(...(stats.rejectSamples ?? []).slice(0, REJECT_SAMPLES - samples.length));
    }
    const counts = await blobJson.get<{
      byCountry: Record<string, number>;
      byRegion: Record<string, number>;
    }>(this.blobs, input.dedupe.statsRef);
    const loaded = input.load.reduce((n, l) => n + l.loaded, 0);
    const sink = this.openSink(input.sink);
    let summary;
    try {
      summary = await this.onSink(input.sink, async () => {
        await sink.init();
        return sink.summary();
      });
    } finally {
      await sink.close();
    }
    const duplicates = t.duplicates + input.dedupe.crossChunkDuplicates;
    const accepted = t.accepted - input.dedupe.crossChunkDuplicates;
    const report = {
      read: t.read,
      extracted: input.extract.total,
      rejected: t.rejected,
      rejectsByReason: t.rejectsByReason,
      rejectSamples: samples,
      duplicates,
      accepted,
      loaded,
      byCountry: counts.byCountry,
      byRegion: counts.byRegion,
      topCountries: Object.entries(counts.byCountry)
        .sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1))
        .slice(0, 10)
        .map(([country, count]) => ({ country, count })),
      sink: { ...input.sink, rows: summary.rows, checksum: summary.checksum },
      sinkMatches:
        JSON.stringify(summary.byCountry) === JSON.stringify(counts.byCountry) &&
        JSON.stringify(summary.byRegion) === JSON.stringify(counts.byRegion),
      balanced:
        t.read === input.extract.total &&
        t.read === t.rejected + duplicates + accepted &&
        loaded === accepted,
    };
    const reportRef = await this.putJson(`runs/${ctx.runId}/report.json`, {
      ...report,
      sinkByCountry: summary.byCountry,
      sinkByRegion: summary.byRegion,
    });
    return { ...report, reportRef };
  }
}

/**
 * `f`, with a refusal of the run's input (NotAllowedError: a source or sink the worker's settings do not allow) as a
 * NonRetryableTaskError carrying its code: the step fails at once with SOURCE_NOT_ALLOWED or SINK_NOT_ALLOWED. Not a
 * TaskInputError: the command is well-formed, and a redrive from the DLQ would be refused the same way.
 */
function refusedAsInput<T>(f: () => T): T {
  try {
    return f();
  } catch (e) {
    if (e instanceof NotAllowedError) throw new NonRetryableTaskError(e.message, { code: e.code, cause: e });
    throw e;
  }
}

function sortKeys(o: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}
