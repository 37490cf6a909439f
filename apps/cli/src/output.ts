/**
 * Characters a terminal may act on instead of showing: C0 controls (U+0000-U+001F: ESC starts ANSI/OSC sequences,
 * CR rewrites a line, BEL), DEL (U+007F), C1 controls (U+0080-U+009F: U+009B is an 8-bit CSI, U+009D an OSC), and
 * the Unicode bidirectional controls (U+061C, U+200E-U+200F, U+202A-U+202E, U+2066-U+2069) that reorder what is shown.
 */
/* eslint-disable no-control-regex -- matching control characters is what these are for */
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
const UNSAFE_BUT_NEWLINE =
  /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
/* eslint-enable no-control-regex */
const NAMED: Record<string, string> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };
const escapeOne = (c: string): string => {
  const code = c.charCodeAt(0);
  return NAMED[c] ?? (code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16)}`);
};

/**
 * `text` with every character of {@link UNSAFE} written as visible text (`\x1b`, `\x9b`, `\r`, `\n`, `\u202e`), so
 * nothing a value carries (a key, an error message, a signal name, a DLQ header) can move the cursor, retitle or clear
 * the terminal, or fake a line. With `keepNewlines`, LF is left as it is (for whole outputs whose lines are the CLI's).
 */
export function terminalSafe(text: string, o: { keepNewlines?: boolean } = {}): string {
  return text.replace(o.keepNewlines ? UNSAFE_BUT_NEWLINE : UNSAFE, escapeOne);
}

/** What JSON.stringify leaves raw of {@link UNSAFE} (it escapes C0 controls in strings): DEL, C1, bidi controls. */
const UNSAFE_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
/** JSON text with those as `\uXXXX` escapes (they occur only inside strings): the same data. */
const jsonSafe = (json: string): string =>
  json.replace(UNSAFE_IN_JSON, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/**
 * `data` with every string in it (plain objects' keys and values, arrays' items, at any depth) passed through
 * {@link terminalSafe}, newlines included; other values (numbers, class instances) as they are.
 */
function safeData<T>(data: T): T {
  if (typeof data === 'string') return terminalSafe(data) as T;
  if (Array.isArray(data)) return data.map(safeData) as T;
  if (data !== null && typeof data === 'object') {
    const proto = Object.getPrototypeOf(data);
    if (proto === Object.prototype || proto === null)
      return Object.fromEntries(Object.entries(data).map(([k, v]) => [terminalSafe(k), safeData(v)])) as T;
  }
  return data;
}

/**
 * Prints `data` as JSON (`--json`, for scripts) or as the human form `human` makes of it; either way no control
 * character of the data reaches the terminal (see {@link terminalSafe}; JSON keeps the same data, escaped). `human`
 * gets the data with its strings escaped, newlines too, so the lines it writes are its own: a value cannot fake one.
 */
export function print<T>(data: T, json: boolean | undefined, human: (data: T) => string): void {
  process.stdout.write(
    json
      ? `${jsonSafe(JSON.stringify(data, null, 2))}\n`
      : `${terminalSafe(human(safeData(data)), { keepNewlines: true })}\n`,
  );
}

/**
 * The line the CLI prints for an error `e` that ends it: `keyflow: <message>\n`, the message on one line with its
 * control characters (newlines included) escaped, since it may carry a value (a topic, a key, an API answer).
 */
export const errorLine = (e: unknown): string =>
  `keyflow: ${terminalSafe(e instanceof Error ? e.message : String(e))}\n`;

/** A text table: one line per row, columns padded to their widest cell. */
export function table(rows: Array<Record<string, unknown>>, columns?: string[]): string {
  if (rows.length === 0) return '(none)';
  const cols = columns ?? Object.keys(rows[0]);
  const cell = (v: unknown) => (v === null || v === undefined ? '-' : terminalSafe(String(v)));
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
