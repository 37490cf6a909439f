import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  confinePostgresUrl,
  confineSource,
  confineSqlitePath,
  EtlError,
  postgresSinkError,
} from '../../src/lib';

const refusal = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return e instanceof EtlError ? { code: e.code, retryable: e.retryable, message: e.message } : e;
  }
  return 'allowed';
};

describe('run input confined to the allowed roots and hosts', () => {
  const dir = mkdtempSync(join(tmpdir(), 'kf-confine-unit-'));
  const roots = [join(dir, 'in')];
  beforeAll(() => {
    mkdirSync(join(dir, 'in', 'sub'), { recursive: true });
    mkdirSync(join(dir, 'out'));
    writeFileSync(join(dir, 'in', 'a.csv'), 'name\n');
    writeFileSync(join(dir, 'out', 'b.csv'), 'name\n');
    symlinkSync(join(dir, 'out', 'b.csv'), join(dir, 'in', 'link.csv'));
    symlinkSync(join(dir, 'in', 'a.csv'), join(dir, 'in', 'inner-link.csv'));
    symlinkSync(join(dir, 'out'), join(dir, 'in', 'door'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('a source is a regular file under a root once every symlink and .. is resolved', () => {
    expect(confineSource(join(dir, 'in', 'a.csv'), roots)).toBe(join(dir, 'in', 'a.csv'));
    expect(confineSource(join(dir, 'in', 'inner-link.csv'), roots)).toBe(join(dir, 'in', 'a.csv'));
    for (const path of [
      '/dev/urandom',
      '/etc/passwd',
      join(dir, 'in', '..', 'out', 'b.csv'),
      join(dir, 'in', 'link.csv'),
      join(dir, 'in', 'door', 'b.csv'),
      join(dir, 'in', 'sub'),
      join(dir, 'out', 'missing.csv'),
      'relative.csv',
    ])
      expect([path, refusal(() => confineSource(path, roots))]).toEqual([
        path,
        expect.objectContaining({ code: 'SOURCE_NOT_ALLOWED', retryable: false }),
      ]);
    expect(refusal(() => confineSource(join(dir, 'in', 'a.csv'), []))).toMatchObject({
      code: 'SOURCE_NOT_ALLOWED',
      message: expect.stringMatching(/ETL_INPUT_ROOTS/),
    });
  });

  it('a SQLite path lies under a root, the file itself (when it exists) a regular file', () => {
    expect(confineSqlitePath(join(dir, 'in', 'new.sqlite'), roots)).toBe(join(dir, 'in', 'new.sqlite'));
    for (const path of [
      join(dir, 'out', 'x.sqlite'),
      join(dir, 'in', 'door', 'x.sqlite'),
      join(dir, 'in', 'link.csv'),
    ])
      expect([path, refusal(() => confineSqlitePath(path, roots))]).toEqual([
        path,
        expect.objectContaining({ code: 'SINK_NOT_ALLOWED', retryable: false }),
      ]);
  });

  it('a PostgreSQL URL names an allowed host, port and database (an entry without a database allows any)', () => {
    const allowed = ['postgres://postgres@db.internal:5432/etl', 'postgresql://127.0.0.1'];
    expect(refusal(() => confinePostgresUrl('postgres://postgres@db.internal/etl', allowed))).toBe('allowed');
    expect(refusal(() => confinePostgresUrl('postgres://u:p@127.0.0.1:5432/anything', allowed))).toBe(
      'allowed',
    );
    for (const url of [
      'postgres://postgres@db.internal:5432/other',
      'postgres://postgres@db.internal:6543/etl',
      'postgres://admin@db.internal:5432/etl',
      'postgres://postgres@169.254.169.254:5432/etl',
      'postgres://127.0.0.1:5433/x',
      'not a url',
    ])
      expect([url, refusal(() => confinePostgresUrl(url, allowed))]).toEqual([
        url,
        expect.objectContaining({ code: 'SINK_NOT_ALLOWED', retryable: false }),
      ]);
  });

  it("a PostgreSQL URL's query cannot override the allowed target or make the worker read files", () => {
    // node-postgres (pg-connection-string) lets query parameters override the URL: `host`, `port`, `user` pick
    // another server or role, `sslcert` / `sslkey` / `sslrootcert` are files it reads (synchronously, whole),
    // `sslmode` downgrades TLS, `options` sets server settings.
    const allowed = [
      'postgres://postgres@db.internal:5432/etl',
      'postgresql://127.0.0.1',
      'postgres://%2Ftmp%2Fpg/etl',
    ];
    expect(
      refusal(() =>
        confinePostgresUrl('postgres://postgres@db.internal:5432/etl?sslmode=require', [
          'postgres://postgres@db.internal:5432/etl?sslmode=require',
        ]),
      ),
    ).toBe('allowed');
    for (const url of [
      'postgres://postgres@db.internal:5432/etl?host=169.254.169.254',
      'postgres://127.0.0.1:5432/x?host=evil.example',
      'postgres://127.0.0.1/x?port=6379',
      'postgres://127.0.0.1/x?host=%2Fvar%2Frun%2Fpostgresql',
      'postgres://postgres@db.internal:5432/etl?user=admin',
      'postgres://127.0.0.1/x?sslrootcert=/proc/self/environ',
      'postgres://127.0.0.1/x?sslcert=/dev/zero',
      'postgres://127.0.0.1/x?options=-c%20statement_timeout%3D1',
      // a socket path is case-sensitive: /TMP/PG is another directory
      'postgres://%2FTMP%2FPG/etl',
    ])
      expect([url, refusal(() => confinePostgresUrl(url, allowed))]).toEqual([
        url,
        expect.objectContaining({ code: 'SINK_NOT_ALLOWED', retryable: false }),
      ]);
    // TLS an entry asks for cannot be dropped by the run
    expect(
      refusal(() =>
        confinePostgresUrl('postgres://postgres@db.internal:5432/etl?sslmode=disable', [
          'postgres://postgres@db.internal:5432/etl?sslmode=require',
        ]),
      ),
    ).toEqual(expect.objectContaining({ code: 'SINK_NOT_ALLOWED' }));
    expect(
      refusal(() =>
        confinePostgresUrl('postgres://postgres@db.internal:5432/etl', [
          'postgres://postgres@db.internal:5432/etl?sslmode=require',
        ]),
      ),
    ).toEqual(expect.objectContaining({ code: 'SINK_NOT_ALLOWED' }));
  });

  it("a PostgreSQL failure names the allowed target and the error's code, never the server's text", () => {
    const e = postgresSinkError(
      Object.assign(new Error('FATAL: database "x" does not exist; banner: SSH-2.0-OpenSSH'), {
        code: '3D000',
      }),
      'postgres://postgres:hunter2@127.0.0.1:5432/x',
    );
    expect(e).toMatchObject({ code: 'SINK_FAILED', retryable: false });
    expect(e.message).toContain('127.0.0.1:5432/x');
    expect(e.message).toContain('3D000');
    expect(e.message).not.toMatch(/does not exist|OpenSSH|hunter2/);
    const refused = postgresSinkError(
      Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }),
      'postgres://127.0.0.1:5432/x',
    );
    expect(refused).toMatchObject({ code: 'SINK_FAILED', retryable: true });
  });
});
