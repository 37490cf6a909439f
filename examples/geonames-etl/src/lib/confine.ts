import { lstatSync, realpathSync, statSync } from 'node:fs';
import { basename, dirname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import { NotAllowedError, SinkFailedError } from './errors';

/**
 * Where a run's input may point (the handlers' settings, not the run's): a run names its source file, SQLite file and
 * PostgreSQL URL, and those are data, confined here to what the worker's operator allowed. Paths are compared once
 * every symlink and `..` is resolved (realpath), so neither can lead out of a root.
 *
 * - `inputRoots` (ETL_INPUT_ROOTS): directories a source file may lie under; it must be a regular file (no device,
 *   FIFO or directory: `/dev/urandom` would fill the blob store).
 * - `sqliteRoots` (ETL_SQLITE_ROOTS): directories a SQLite sink file may lie under (its directory must exist).
 * - `postgresUrls` (ETL_POSTGRES_URLS): PostgreSQL URLs a sink may use: the same host and port (default 5432), the
 *   entry's database when it names one, its user when it names one, and exactly the entry's query parameters (none
 *   when it has none: node-postgres lets them override the host, port and user, and read certificate files).
 */
export interface EtlConfinement {
  inputRoots: readonly string[];
  sqliteRoots: readonly string[];
  postgresUrls: readonly string[];
}

/** `path` with its symlinks resolved as far as it exists (the rest appended as given), absolute. */
function resolvedAsFarAsExists(path: string): string {
  const abs = resolve(path);
  const rest: string[] = [];
  let at = abs;
  for (;;) {
    try {
      return join(realpathSync(at), ...rest.reverse());
    } catch {
      const parent = dirname(at);
      if (parent === at) return abs;
      rest.push(basename(at));
      at = parent;
    }
  }
}

/** The roots as they are on disk (realpath); roots that do not exist allow nothing. */
function realRoots(roots: readonly string[]): string[] {
  return roots.flatMap((r) => {
    try {
      return [realpathSync(resolve(r))];
    } catch {
      return [];
    }
  });
}

const within = (path: string, root: string) => {
  const rel = relative(root, path);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
};

/**
 * The file a run's `source` names, resolved (realpath), when it is a regular file under one of `roots`.
 * @returns the resolved path: read that one, not the name given (a symlink swapped afterwards is not followed again)
 * @throws NotAllowedError SOURCE_NOT_ALLOWED for a relative path, a path outside every root (also one that does not
 *   exist: existence outside the roots is not revealed), or anything but a regular file
 */
export function confineSource(source: string, roots: readonly string[]): string {
  const refuse = (why: string) =>
    new NotAllowedError(
      'SOURCE_NOT_ALLOWED',
      `input ${source} is not allowed: ${why} (the worker reads only regular files under ETL_INPUT_ROOTS${
        roots.length ? '' : ', which is empty'
      })`,
    );
  if (!isAbsolute(source)) throw refuse('not an absolute path');
  const real = resolvedAsFarAsExists(source);
  if (!realRoots(roots).some((r) => within(real, r))) throw refuse('outside the allowed directories');
  let isFile: boolean;
  try {
    isFile = statSync(real).isFile();
  } catch {
    throw refuse('no such file');
  }
  if (!isFile) throw refuse('not a regular file');
  return real;
}

/**
 * The SQLite file a run's sink names, resolved (its existing part realpath'd), when it lies under one of `roots`; when
 * the file exists it must be a regular file.
 * @throws NotAllowedError SINK_NOT_ALLOWED otherwise
 */
export function confineSqlitePath(path: string, roots: readonly string[]): string {
  const refuse = (why: string) =>
    new NotAllowedError(
      'SINK_NOT_ALLOWED',
      `SQLite sink ${path} is not allowed: ${why} (the worker writes SQLite files only under ETL_SQLITE_ROOTS${
        roots.length ? '' : ', which is empty'
      })`,
    );
  if (!isAbsolute(path)) throw refuse('not an absolute path');
  const real = resolvedAsFarAsExists(path);
  if (!realRoots(roots).some((r) => within(real, r) && real !== r))
    throw refuse('outside the allowed directories');
  try {
    if (!lstatSync(real).isFile()) throw refuse('not a regular file');
  } catch (e) {
    if (e instanceof NotAllowedError) throw e;
    // Not there yet: SQLite creates it.
  }
  return real;
}

const PG_DEFAULT_PORT = '5432';
/**
 * What a PostgreSQL URL connects to. The host is compared decoded, as node-postgres uses it: a name case-insensitively,
 * a Unix socket directory (`%2Fvar%2Frun%2Fpostgresql`) exactly. `query` is the URL's parameters, sorted: node-postgres
 * (pg-connection-string) lets them override the URL (`host`, `port`, `user`), read files (`sslcert`, `sslkey`,
 * `sslrootcert`), set TLS (`sslmode`) and server settings (`options`), so a run's must be its entry's, exactly.
 */
const pgTarget = (u: URL) => {
  const host = decodeURIComponent(u.hostname);
  return {
    host: host.startsWith('/') ? host : host.toLowerCase(),
    port: u.port || PG_DEFAULT_PORT,
    database: decodeURIComponent(u.pathname.replace(/^\//, '')),
    user: decodeURIComponent(u.username),
    query: JSON.stringify(
      [...u.searchParams].sort(([a, x], [b, y]) => (a < b ? -1 : a > b ? 1 : x < y ? -1 : x > y ? 1 : 0)),
    ),
  };
};

/** `host:port/database` of a PostgreSQL URL (no credentials), or `a PostgreSQL URL` when it cannot be parsed. */
export function describePostgres(url: string): string {
  try {
    const t = pgTarget(new URL(url));
    return `${t.host}:${t.port}/${t.database}`;
  } catch {
    return 'a PostgreSQL URL';
  }
}

/**
 * Checks a run's PostgreSQL sink URL against `allowed` (see {@link EtlConfinement}).
 * @throws NotAllowedError SINK_NOT_ALLOWED when no entry allows it; the message names only the setting
 */
export function confinePostgresUrl(url: string, allowed: readonly string[]): void {
  let t: ReturnType<typeof pgTarget> | undefined;
  try {
    const u = new URL(url);
    if (u.protocol === 'postgres:' || u.protocol === 'postgresql:') t = pgTarget(u);
  } catch {
    /* refused below */
  }
  const ok =
    t !== undefined &&
    allowed.some((entry) => {
      try {
        const a = pgTarget(new URL(entry));
        return (
          a.host === t!.host &&
          a.port === t!.port &&
          (a.database === '' || a.database === t!.database) &&
          (a.user === '' || a.user === t!.user) &&
          a.query === t!.query
        );
      } catch {
        return false;
      }
    });
  if (!ok)
    throw new NotAllowedError(
      'SINK_NOT_ALLOWED',
      `PostgreSQL sink ${t ? `${t.host}:${t.port}/${t.database}` : '(not a postgres:// URL)'} is not allowed: ` +
        `the worker loads only into the databases of ETL_POSTGRES_URLS${allowed.length ? '' : ', which is empty'}`,
    );
}

/** SQLSTATE classes of failures that can pass: connection (08), rollback (40), resources (53), operator (57). */
const TRANSIENT_SQLSTATE = /^(08|40|53|57)/;
const TRANSIENT_ERRNO = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/**
 * The error a run sees for a PostgreSQL sink failure `e` on `url` (an allowed one): {@link SinkFailedError} naming
 * the target and the error's code only; the original is its `cause`, for the worker's own log.
 */
export function postgresSinkError(e: unknown, url: string): SinkFailedError {
  const code = (e as { code?: unknown } | null)?.code;
  const c = typeof code === 'string' && /^[A-Z0-9_]{1,32}$/.test(code) ? code : undefined;
  const retryable = c === undefined ? true : TRANSIENT_ERRNO.has(c) || TRANSIENT_SQLSTATE.test(c);
  return new SinkFailedError(describePostgres(url), c, retryable, { cause: e });
}
