import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import * as ts from 'typescript';
import type { z } from 'zod';

/** A zod schema of settings (zod 3, as the services' `config.ts` use): an object schema or its shape. */
export type SettingsSchema = z.AnyZodObject | Record<string, z.ZodTypeAny>;

/** One section of the configuration reference: the settings one schema defines. */
export interface SettingsSource {
  /** The section's heading, e.g. `Orchestrator`. */
  title: string;
  /** One paragraph under the heading: who reads these settings. */
  about: string;
  /** The schema (its keys are the environment variable names). */
  schema: SettingsSchema;
  /**
   * Source files, relative to the repository root, where the schema's properties are written: a setting without a
   * zod `.describe()` takes the JSDoc comment above its `NAME:` property in the first of these files that has one.
   */
  docFiles: string[];
  /**
   * A schema spread into other sections' schemas (the blob settings, the connection settings): its settings are
   * listed here once, and a later section whose setting of the same name is the very same zod object refers here.
   */
  shared?: boolean;
}

/** What the reference says of one setting. */
export interface SettingDoc {
  name: string;
  /** e.g. `integer ≥ 1`, `` `fs` \| `postgres` ``, `boolean`, `URL`. */
  type: string;
  /** The default as text, `required`, or `unset` (optional without a default). */
  default: string;
  /** `ms`, `bytes` or `` (from the name's suffix). */
  unit: string;
  description: string;
}

/** zod 3's internal definition, as far as the reference reads it. */
interface Def {
  typeName?: string;
  description?: string;
  innerType?: z.ZodTypeAny;
  schema?: z.ZodTypeAny;
  in?: z.ZodTypeAny;
  defaultValue?: () => unknown;
  values?: readonly string[];
  checks?: { kind: string; value?: number; inclusive?: boolean }[];
  coerce?: boolean;
  effect?: { type: string };
}

const defOf = (s: z.ZodTypeAny): Def => (s as unknown as { _def: Def })._def;

/** `schema` without its wrappers (optional, default, effects, pipelines), with what the wrappers said. */
function unwrap(schema: z.ZodTypeAny): {
  base: z.ZodTypeAny;
  optional: boolean;
  defaultValue?: unknown;
  hasDefault: boolean;
  transformed: boolean;
  description?: string;
} {
  let s = schema;
  let optional = false;
  let hasDefault = false;
  let defaultValue: unknown;
  let transformed = false;
  let description = defOf(s).description;
  for (;;) {
    const d = defOf(s);
    description ??= d.description;
    if (d.typeName === 'ZodOptional' || d.typeName === 'ZodNullable') {
      optional = true;
      s = d.innerType!;
    } else if (d.typeName === 'ZodDefault') {
      if (!hasDefault) defaultValue = d.defaultValue!();
      hasDefault = true;
      s = d.innerType!;
    } else if (d.typeName === 'ZodEffects') {
      if (d.effect?.type === 'transform') transformed = true;
      s = d.schema!;
    } else if (d.typeName === 'ZodPipeline') {
      s = d.in!;
    } else if (d.typeName === 'ZodBranded' || d.typeName === 'ZodReadonly' || d.typeName === 'ZodCatch') {
      s = d.innerType ?? d.schema ?? (d as { type?: z.ZodTypeAny }).type!;
    } else return { base: s, optional, defaultValue, hasDefault, transformed, description };
  }
}

/** The type column: the base type and its bounds. */
function typeText(base: z.ZodTypeAny, transformed: boolean): string {
  const d = defOf(base);
  switch (d.typeName) {
    case 'ZodEnum': {
      const values = d.values ?? [];
      if (transformed && values.length === 2 && values.includes('true') && values.includes('false'))
        return 'boolean (`true` | `false`)';
      return values.map((v) => `\`${v}\``).join(' | ');
    }
    case 'ZodNumber': {
      const checks = d.checks ?? [];
      const int = checks.some((c) => c.kind === 'int');
      const min = checks.find((c) => c.kind === 'min');
      const max = checks.find((c) => c.kind === 'max');
      const bounds = [
        min ? `${min.inclusive === false ? '>' : '≥'} ${min.value}` : '',
        max ? `${max.inclusive === false ? '<' : '≤'} ${max.value}` : '',
      ].filter(Boolean);
      return `${int ? 'integer' : 'number'}${bounds.length ? ` ${bounds.join(', ')}` : ''}`;
    }
    case 'ZodString': {
      const checks = d.checks ?? [];
      if (checks.some((c) => c.kind === 'url')) return 'URL';
      if (checks.some((c) => c.kind === 'regex')) return 'string (pattern)';
      return 'string';
    }
    case 'ZodBoolean':
      return 'boolean';
    default:
      return (d.typeName ?? 'unknown').replace(/^Zod/, '').toLowerCase();
  }
}

/** ms as a duration people read (`86400000` → `86400000 (24 h)`); other values as they are. */
function defaultText(name: string, value: unknown): string {
  if (value === '' || (Array.isArray(value) && value.length === 0)) return '(empty)';
  // A default computed per process: the same text on every machine, so the reference is deterministic.
  if (value === `${process.pid}`) return 'the process id';
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  if (typeof value === 'number' && /_MS$/.test(name) && value >= 1000) {
    const units: [number, string][] = [
      [3_600_000, 'h'],
      [60_000, 'min'],
      [1000, 's'],
    ];
    const fit = units.find(([ms]) => value % ms === 0);
    if (fit) return `\`${text}\` (${value / fit[0]} ${fit[1]})`;
  }
  if (typeof value === 'number' && /_BYTES$/.test(name) && value >= 1024 && value % (1024 * 1024) === 0)
    return `\`${text}\` (${value / (1024 * 1024)} MiB)`;
  return `\`${text}\``;
}

const unitOf = (name: string) =>
  /_MS$/.test(name) ? 'ms' : /_BYTES$/.test(name) ? 'bytes' : /_PORT$/.test(name) ? 'port' : '';

/** JSDoc text as one line: no comment markers, `{@link X}` as `X`. */
function jsDocText(comment: string): string {
  return comment
    .replace(/^\/\*\*/, '')
    .replace(/\*\/$/, '')
    .split('\n')
    .map((l) => l.replace(/^\s*\*\s?/, '').trim())
    .join(' ')
    .replace(/\{@link\s+([^}\s]+)\s*\}/g, '`$1`')
    .replace(/\s+/g, ' ')
    .trim();
}

/**
 * The JSDoc comment above each `NAME: ...` property (an upper-case name) of the object literals in `file`, by name;
 * the first one wins when a name is written twice.
 * @throws when the file cannot be read
 */
export function settingCommentsOf(file: string): Map<string, string> {
  const text = readFileSync(file, 'utf8');
  const sf = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found = new Map<string, string>();
  const visit = (node: ts.Node) => {
    if (
      (ts.isPropertyAssignment(node) || ts.isShorthandPropertyAssignment(node)) &&
      ts.isIdentifier(node.name) &&
      /^[A-Z][A-Z0-9_]*$/.test(node.name.text) &&
      !found.has(node.name.text)
    ) {
      const ranges = ts.getLeadingCommentRanges(text, node.getFullStart()) ?? [];
      const doc = ranges
        .map((r) => text.slice(r.pos, r.end))
        .filter((c) => c.startsWith('/**'))
        .pop();
      if (doc) found.set(node.name.text, jsDocText(doc));
    }
    ts.forEachChild(node, visit);
  };
  visit(sf);
  return found;
}

const shapeOf = (schema: SettingsSchema): Record<string, z.ZodTypeAny> =>
  '_def' in schema && defOf(schema as z.ZodTypeAny).typeName === 'ZodObject'
    ? (schema as z.AnyZodObject).shape
    : (schema as Record<string, z.ZodTypeAny>);

/**
 * Each setting of `source`, in the schema's order, described by its zod `.describe()` or else its JSDoc comment in
 * `source.docFiles` (read under `root`); an empty description when neither exists (see {@link undescribed}).
 */
export function settingDocs(source: SettingsSource, root: string): SettingDoc[] {
  const comments = new Map<string, string>();
  for (const f of source.docFiles)
    for (const [k, v] of settingCommentsOf(path.join(root, f))) if (!comments.has(k)) comments.set(k, v);
  return Object.entries(shapeOf(source.schema)).map(([name, schema]) => {
    const u = unwrap(schema);
    return {
      name,
      type: typeText(u.base, u.transformed),
      default: u.hasDefault ? defaultText(name, u.defaultValue) : u.optional ? 'unset' : 'required',
      unit: unitOf(name),
      description: u.description ?? comments.get(name) ?? '',
    };
  });
}

const cell = (s: string) => s.replace(/\|/g, '\\|').replace(/\n/g, ' ');

/** One section of the reference: its own settings, and the shared ones it reads by the shared section's title. */
interface Section {
  source: SettingsSource;
  rows: SettingDoc[];
  shared: Map<string, string[]>;
}

/**
 * The sections of `sources`, in order. A setting whose zod schema is the very object of the same-named setting of an
 * earlier shared section (a shared schema spread into a service's) is listed once, in the shared section, and the
 * later section refers to it.
 */
function sectionsOf(sources: SettingsSource[], root: string): Section[] {
  /** Settings of shared sections: name → zod object → the section's title. */
  const listed = new Map<string, Map<z.ZodTypeAny, string>>();
  return sources.map((source) => {
    const shape = shapeOf(source.schema);
    const shared = new Map<string, string[]>();
    const rows: SettingDoc[] = [];
    for (const d of settingDocs(source, root)) {
      const earlier = listed.get(d.name)?.get(shape[d.name]);
      if (earlier) shared.set(earlier, [...(shared.get(earlier) ?? []), d.name]);
      else rows.push(d);
    }
    if (source.shared)
      for (const [name, schema] of Object.entries(shape)) {
        const byObject = listed.get(name) ?? new Map<z.ZodTypeAny, string>();
        if (!byObject.has(schema)) byObject.set(schema, source.title);
        listed.set(name, byObject);
      }
    return { source, rows, shared };
  });
}

/**
 * The whole reference as Markdown: one section per source, a table of its settings (see {@link sectionsOf} for the
 * shared ones). Deterministic: the same schemas and comments give the same bytes.
 * @throws when a source's doc file cannot be read
 */
export function renderConfigurationReference(sources: SettingsSource[], root: string): string {
  const out: string[] = [
    '# Configuration reference',
    '',
    '<!-- Generated by `npm run docs:config` (scripts/gen-config-reference.ts) from the settings schemas: do not',
    '     edit by hand. tools/docs/test/unit/configuration-reference.spec.ts fails when it is stale. -->',
    '',
    'Every setting the services read, by its environment variable name, from the zod schemas that validate them at',
    'startup (a bad value stops the process with a configuration error naming each bad variable). Descriptions are the',
    "schemas' own (`.describe()` or the JSDoc comment above the setting). Type `boolean` takes the text `true` or",
    '`false`; a list is comma-separated. Default `unset`: optional, with no value; `required`: the process does not',
    'start without it. How settings are read, and the connection settings (Kafka SASL/TLS, registry and Redis',
    'credentials): [configuration](../configuration.md), [security](../security.md).',
    '',
  ];
  for (const { source, rows, shared } of sectionsOf(sources, root)) {
    out.push(`## ${source.title}`, '', source.about, '');
    for (const [title, names] of shared)
      out.push(
        `Also reads the settings of [${title}](#${anchorOf(title)}): ${names.map((n) => `\`${n}\``).join(', ')}.`,
        '',
      );
    if (rows.length > 0) {
      out.push('| setting | type | default | unit | description |', '|---|---|---|---|---|');
      for (const r of rows)
        out.push(
          `| \`${r.name}\` | ${cell(r.type)} | ${cell(r.default)} | ${r.unit} | ${cell(r.description || '—')} |`,
        );
      out.push('');
    }
  }
  return out.join('\n');
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes. */
export const anchorOf = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');

/** The settings the reference lists without a description (neither `.describe()` nor a JSDoc comment), as `section: NAME`. */
export function undescribed(sources: SettingsSource[], root: string): string[] {
  return sectionsOf(sources, root).flatMap(({ source, rows }) =>
    rows.filter((d) => d.description === '').map((d) => `${source.title}: ${d.name}`),
  );
}
