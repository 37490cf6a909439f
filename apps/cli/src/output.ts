/** Prints `data` as JSON (`--json`, for scripts) or as the human form `human` makes of it. */
export function print<T>(data: T, json: boolean | undefined, human: (data: T) => string): void {
  process.stdout.write(json ? `${JSON.stringify(data, null, 2)}\n` : `${human(data)}\n`);
}

/** A text table: one line per row, columns padded to their widest cell. */
export function table(rows: Array<Record<string, unknown>>, columns?: string[]): string {
  if (rows.length === 0) return '(none)';
  const cols = columns ?? Object.keys(rows[0]);
  const cell = (v: unknown) => (v === null || v === undefined ? '-' : String(v));
  const widths = cols.map((c) => Math.max(c.length, ...rows.map((r) => cell(r[c]).length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => c.padEnd(widths[i]))
      .join('  ')
      .trimEnd();
  return [line(cols), ...rows.map((r) => line(cols.map((c) => cell(r[c]))))].join('\n');
}

/** ms since epoch as ISO-8601, or '-'. */
export const iso = (ms: number | null | undefined) =>
  ms === null || ms === undefined ? '-' : new Date(ms).toISOString();

/** A duration in ms as `1.2 s`, `340 ms`, `2 h 3 min`. */
export function duration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '-';
  if (ms < 1_000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 3_600_000) return `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
  return `${Math.floor(ms / 3_600_000)} h ${Math.round((ms % 3_600_000) / 60_000)} min`;
}

/** A time option: ms since epoch, an ISO-8601 time, or a duration back from now (`15m`, `2h`, `7d`). */
export function parseTime(v: string, now = Date.now()): number {
  if (/^\d+$/.test(v)) return Number(v);
  const ago = /^(\d+)(s|m|h|d)$/.exec(v);
  if (ago) return now - Number(ago[1]) * { s: 1e3, m: 6e4, h: 3.6e6, d: 8.64e7 }[ago[2] as 's']!;
  const t = Date.parse(v);
  if (Number.isNaN(t)) throw new Error(`not a time: ${v} (ms since epoch, ISO-8601, or 15m / 2h / 7d ago)`);
  return t;
}
