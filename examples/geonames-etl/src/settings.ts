import { z } from 'zod';
import type { EtlConfinement } from './lib';

/** A comma-separated list setting (blanks dropped), `fallback` when unset. */
function listSetting(fallback: string) {
  return z
    .string()
    .default(fallback)
    .transform((v) =>
      v
        .split(',')
        .map((x) => x.trim())
        .filter(Boolean),
    );
}

/**
 * The GeoNames example's own settings (its workers read them; the platform's worker settings know nothing of them):
 * where a run's source and sinks may point (docs/guarantees/etl-run-input.md).
 */
export const etlSettingsSchema = z.object({
  /**
   * Directories the GeoNames ETL's extract may read a run's `source` file from (comma-separated; realpath-resolved,
   * regular files only). Default none: only the bundled `default` input. `npm start` sets it to its --input's
   * directory. Anything else: SOURCE_NOT_ALLOWED (examples/geonames-etl/src/lib/confine.ts).
   */
  ETL_INPUT_ROOTS: listSetting(''),
  /**
   * Directories the ETL's SQLite sink files may lie under (comma-separated, relative to the worker's working
   * directory). Default `.keyflow` (npm start's `.keyflow/geonames.sqlite`). Anything else: SINK_NOT_ALLOWED.
   */
  ETL_SQLITE_ROOTS: listSetting('.keyflow'),
  /**
   * PostgreSQL URLs the ETL's sink may use (comma-separated): a sink URL must name an entry's host and port, and its
   * database and user when the entry names them. Default none. Anything else: SINK_NOT_ALLOWED.
   */
  ETL_POSTGRES_URLS: listSetting(''),
});
export type EtlSettings = z.infer<typeof etlSettingsSchema>;

/**
 * The ETL's settings from `env` (default `process.env`), by their environment names: each a list, blanks dropped.
 * Unset lists take their defaults; no value is refused (a list of anything is a list).
 */
export function loadEtlSettings(env: NodeJS.ProcessEnv = process.env): EtlSettings {
  return etlSettingsSchema.parse(env);
}

/** The confinement the handlers apply, from the settings. */
export function etlConfinementOf(s: EtlSettings): EtlConfinement {
  return {
    inputRoots: s.ETL_INPUT_ROOTS,
    sqliteRoots: s.ETL_SQLITE_ROOTS,
    postgresUrls: s.ETL_POSTGRES_URLS,
  };
}
