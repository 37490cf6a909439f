import type avsc from 'avsc';
import type { AvroSchema } from '@keyflow/schemas';
import { PII_MASK } from '@keyflow/workflow';
import { avroType } from './avro-type';

/**
 * PII masking driven by Avro schemas: a field marked `"pii": true` in an `.avsc`, a named type marked so (every value
 * of it), or an anonymous type marked so inside a field's type (`["null", { "type": "string", "pii": true }]`: the
 * field's values are masked) is shown as {@link PII_MASK} wherever keyflow shows a decoded event to people (the DLQ
 * views of the ops API, the console and the CLI). Avro keeps attributes it does not define (Avro 1.11 specification,
 * "Schema Declaration": they are permitted as metadata), so the mark travels with the schema into the registry and
 * changes neither the encoding nor compatibility. avsc drops such attributes when it builds a type, so the marks are
 * read from the schema JSON and the value is walked with the avsc type (which knows how it wrapped each union).
 */

/** The PII marks of a schema: marked fields by record full name, and marked named types by full name. */
export interface PiiMarks {
  readonly fields: ReadonlyMap<string, ReadonlySet<string>>;
  readonly types: ReadonlySet<string>;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** Longest depth walked, in schema or value levels; a value deeper than this under a marking schema is masked whole. */
const MAX_DEPTH = 64;

/** Full name of a named type (Avro specification, "Names": a dotted name is full; else the enclosing namespace's). */
function fullName(name: string, namespace: string | undefined): string {
  return name.includes('.') || !namespace ? name : `${namespace}.${name}`;
}

/** The marks of `schema` (JSON as written: named types defined at first use, referenced by name after). */
export function avroPiiMarks(schema: AvroSchema): PiiMarks {
  const fields = new Map<string, Set<string>>();
  const types = new Set<string>();
  /** Whether an anonymous part of a field's type is marked (named types carry their own marks). */
  const anonymousMark = (node: unknown, depth: number): boolean => {
    if (depth > MAX_DEPTH) return true;
    if (Array.isArray(node)) return node.some((n) => anonymousMark(n, depth + 1));
    if (!isObject(node) || typeof node.name === 'string') return false;
    if (node.pii === true) return true;
    return [node.type, node.items, node.values].some((n) => n !== undefined && anonymousMark(n, depth + 1));
  };
  const visit = (node: unknown, ns: string | undefined, depth: number): void => {
    if (depth > MAX_DEPTH) return;
    if (Array.isArray(node)) return node.forEach((n) => visit(n, ns, depth + 1));
    if (!isObject(node)) return;
    let inner = ns;
    if (typeof node.name === 'string') {
      const full = fullName(node.name, typeof node.namespace === 'string' ? node.namespace : ns);
      if (node.pii === true) types.add(full);
      inner = full.includes('.') ? full.slice(0, full.lastIndexOf('.')) : undefined;
      if (Array.isArray(node.fields)) {
        const marked = new Set<string>();
        for (const f of node.fields) {
          if (!isObject(f) || typeof f.name !== 'string') continue;
          if (f.pii === true || anonymousMark(f.type, depth + 1)) marked.add(f.name);
          visit(f.type, inner, depth + 1);
        }
        if (marked.size) fields.set(full, marked);
      }
    }
    for (const n of [node.type, node.items, node.values]) if (n !== undefined) visit(n, inner, depth + 1);
  };
  visit(schema, undefined, 0);
  return { fields, types };
}

/** Whether `marks` mark anything. */
export function marksAny(marks: PiiMarks): boolean {
  return marks.fields.size > 0 || marks.types.size > 0;
}

/** The union of several schemas' marks (a reader's and a writer's). */
export function mergeMarks(...all: PiiMarks[]): PiiMarks {
  const fields = new Map<string, Set<string>>();
  const types = new Set<string>();
  for (const m of all) {
    m.types.forEach((t) => types.add(t));
    for (const [r, fs] of m.fields)
      fs.forEach((f) => (fields.get(r) ?? fields.set(r, new Set()).get(r)!).add(f));
  }
  return { fields, types };
}

/** avsc's type objects as this walk reads them (avsc 5: `typeName`, `types`, `fields`, `itemsType`...). */
interface TypeView {
  typeName: string;
  name?: string;
  branchName?: string;
  aliases?: string[];
  types?: TypeView[];
  fields?: Array<{ name: string; type: TypeView; aliases?: string[] }>;
  itemsType?: TypeView;
  valuesType?: TypeView;
  underlyingType?: TypeView;
  isValid(v: unknown): boolean;
}

/**
 * A copy of `value` (a datum of avsc `type`, as the codec decodes it: unions unwrapped or `{ <branch>: value }` as avsc
 * wrapped them) with every value `marks` mark replaced by {@link PII_MASK}; null stays null. `record` picks the record
 * of a union type the value is (full name, as a topic carrying several events needs; one not in the union masks the
 * value whole). A record's marks are found by its full name or an alias, a field's by its name or an alias (so a
 * writer's marks apply to a reader that renamed the field). Fails closed: a value deeper than 64 levels, or in a union
 * no branch of which takes it, is masked whole. Returns `value` itself when `marks` mark nothing.
 */
export function maskWithType(type: avsc.Type, marks: PiiMarks, value: unknown, record?: string): unknown {
  if (!marksAny(marks)) return value;
  const mask = (v: unknown) => (v === null || v === undefined ? v : PII_MASK);
  const recordMarks = (t: TypeView): Set<string> => {
    const out = new Set<string>();
    for (const n of [t.name, ...(t.aliases ?? [])]) marks.fields.get(n ?? '')?.forEach((f) => out.add(f));
    return out;
  };
  const walk = (t: TypeView, v: unknown, depth: number): unknown => {
    if (v === null || v === undefined) return v;
    if (depth > MAX_DEPTH) return mask(v);
    if (t.name && (marks.types.has(t.name) || (t.aliases ?? []).some((a) => marks.types.has(a))))
      return mask(v);
    switch (t.typeName) {
      case 'record':
      case 'error': {
        if (!isObject(v)) return v;
        const marked = recordMarks(t);
        const out: Record<string, unknown> = { ...v };
        for (const f of t.fields ?? []) {
          if (!(f.name in v)) continue;
          const hit = marked.has(f.name) || (f.aliases ?? []).some((a) => marked.has(a));
          out[f.name] = hit ? mask(v[f.name]) : walk(f.type, v[f.name], depth + 1);
        }
        return out;
      }
      case 'union:wrapped': {
        if (!isObject(v)) return mask(v);
        const [k] = Object.keys(v);
        const branch = t.types?.find((b) => b.branchName === k);
        return branch ? { [k]: walk(branch, v[k], depth + 1) } : mask(v);
      }
      case 'union:unwrapped': {
        const branch = t.types?.find((b) => b.typeName !== 'null' && b.isValid(v));
        return branch ? walk(branch, v, depth + 1) : mask(v);
      }
      case 'array':
        return Array.isArray(v) ? v.map((x) => walk(t.itemsType!, x, depth + 1)) : v;
      case 'map':
        return isObject(v)
          ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(t.valuesType!, x, depth + 1)]))
          : v;
      default:
        return t.underlyingType ? walk(t.underlyingType, v, depth + 1) : v;
    }
  };
  let root = type as unknown as TypeView;
  if (record !== undefined && root.typeName.startsWith('union')) {
    const branch = root.types?.find((b) => b.name === record);
    if (!branch) return mask(value);
    root = branch;
  }
  return walk(root, value, 0);
}

/**
 * A copy of `value` with what `schema` (JSON, `.avsc`) marks `"pii": true` masked ({@link maskWithType} over the
 * schema's avsc type, built as the codec builds it). Returns `value` itself when the schema marks nothing.
 */
export function maskAvroPii(schema: AvroSchema, value: unknown, record?: string): unknown {
  const marks = avroPiiMarks(schema);
  return marksAny(marks) ? maskWithType(avroType(schema), marks, value, record) : value;
}
