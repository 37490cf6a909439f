import { MAX_DEPTH, PII_MASK } from './pii';

/**
 * PII masking driven by Avro schemas: a field marked `"pii": true` in an `.avsc` (on the field, or on its type:
 * `{ "type": "string", "pii": true }`) is shown as {@link PII_MASK} wherever keyflow shows a decoded event to people (the
 * DLQ records of the ops API, the console and the CLI). Avro keeps attributes it does not know (Avro 1.11
 * specification, "Schema Declaration": "attributes not defined in this document are permitted as metadata"), so the
 * mark travels with the schema into the registry and changes neither the encoding nor compatibility.
 */

/** An Avro schema as JSON (`.avsc`): a type name, a union (array) or a type object. */
export type AvroSchemaJson = string | AvroSchemaJson[] | { [key: string]: unknown };

type TypeObject = { [key: string]: unknown };

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

const PRIMITIVES = new Set(['null', 'boolean', 'int', 'long', 'float', 'double', 'bytes', 'string']);

/** Full name of a named type (Avro specification, "Names": a dotted name is full; else the enclosing namespace). */
function fullName(name: string, namespace: string | undefined): string {
  return name.includes('.') || !namespace ? name : `${namespace}.${name}`;
}

/** Every named type (record, error, enum, fixed) of `schema` by full name and by short name. */
function namedTypes(schema: AvroSchemaJson): Map<string, TypeObject> {
  const named = new Map<string, TypeObject>();
  const visit = (node: AvroSchemaJson, ns: string | undefined, depth: number): void => {
    if (depth > MAX_DEPTH) return;
    if (Array.isArray(node)) return node.forEach((n) => visit(n, ns, depth + 1));
    if (!isObject(node)) return;
    let inner = ns;
    if (typeof node.name === 'string') {
      const full = fullName(node.name, typeof node.namespace === 'string' ? node.namespace : ns);
      named.set(full, node);
      named.set(full.slice(full.lastIndexOf('.') + 1), node);
      inner = full.includes('.') ? full.slice(0, full.lastIndexOf('.')) : undefined;
    }
    if (Array.isArray(node.fields))
      for (const f of node.fields) if (isObject(f)) visit(f.type as AvroSchemaJson, inner, depth + 1);
    if (node.items !== undefined) visit(node.items as AvroSchemaJson, inner, depth + 1);
    if (node.values !== undefined) visit(node.values as AvroSchemaJson, inner, depth + 1);
    if (isObject(node.type) || Array.isArray(node.type)) visit(node.type as AvroSchemaJson, inner, depth + 1);
  };
  visit(schema, undefined, 0);
  return named;
}

/** Whether `schema` marks any field or type `"pii": true`. */
export function marksAvroPii(schema: AvroSchemaJson): boolean {
  return JSON.stringify(schema).includes('"pii":true');
}

/**
 * A copy of `value` (an Avro datum as avsc decodes it, unions unwrapped or wrapped as `{ <branch>: value }`) with every
 * value the schema marks `"pii": true` replaced by {@link PII_MASK} (null stays null). `record` picks the branch of a
 * union schema the value is (full or short name), as a topic carrying several events needs. Returns `value` itself when
 * the schema marks nothing. Fails closed: a value nested deeper than 64 levels is masked whole.
 */
export function maskAvroPii(schema: AvroSchemaJson, value: unknown, record?: string): unknown {
  if (!marksAvroPii(schema)) return value;
  const named = namedTypes(schema);
  const mask = (v: unknown) => (v === null || v === undefined ? v : PII_MASK);
  const nameOf = (node: AvroSchemaJson): string | undefined =>
    typeof node === 'string' ? node : isObject(node) && typeof node.name === 'string' ? node.name : undefined;

  const walk = (node: AvroSchemaJson, v: unknown, depth: number): unknown => {
    if (depth > MAX_DEPTH) return mask(v);
    if (v === null || v === undefined) return v;
    if (typeof node === 'string') {
      if (PRIMITIVES.has(node)) return v;
      const target = named.get(node);
      return target ? walk(target, v, depth + 1) : v;
    }
    if (Array.isArray(node)) {
      // Wrapped (avsc wrapUnions for ambiguous unions): { "<branch name>": value }.
      if (isObject(v) && Object.keys(v).length === 1) {
        const [k] = Object.keys(v);
        const branch = node.find((b) => {
          const n = nameOf(b);
          return n !== undefined && (n === k || named.get(n) === named.get(k));
        });
        if (branch !== undefined && !(isObject(branch) && branch.type === 'map'))
          return { [k]: walk(branch, v[k], depth + 1) };
      }
      // Unwrapped: the branch whose kind fits the value (avsc unwraps only unions it can tell apart that way).
      const kind = (b: AvroSchemaJson): string => {
        const t = typeof b === 'string' ? (named.get(b)?.type ?? b) : isObject(b) ? b.type : 'union';
        return typeof t === 'string' ? t : 'union';
      };
      const fits = (b: AvroSchemaJson) => {
        const k = kind(b);
        if (k === 'record' || k === 'error' || k === 'map') return isObject(v) && !Buffer.isBuffer(v);
        if (k === 'array') return Array.isArray(v);
        return !isObject(v) && !Array.isArray(v);
      };
      const branch = node.find((b) => kind(b) !== 'null' && fits(b));
      return branch === undefined ? v : walk(branch, v, depth + 1);
    }
    if (node.pii === true) return mask(v);
    const type = node.type;
    if (type === 'record' || type === 'error') {
      if (!isObject(v) || !Array.isArray(node.fields)) return v;
      const out: Record<string, unknown> = { ...v };
      for (const f of node.fields) {
        if (!isObject(f) || typeof f.name !== 'string' || !(f.name in v)) continue;
        out[f.name] = f.pii === true ? mask(v[f.name]) : walk(f.type as AvroSchemaJson, v[f.name], depth + 1);
      }
      return out;
    }
    if (type === 'array')
      return Array.isArray(v) ? v.map((x) => walk(node.items as AvroSchemaJson, x, depth + 1)) : v;
    if (type === 'map')
      return isObject(v)
        ? Object.fromEntries(
            Object.entries(v).map(([k, x]) => [k, walk(node.values as AvroSchemaJson, x, depth + 1)]),
          )
        : v;
    // A type object naming another type ({ "type": "string", "logicalType": ... } or { "type": [union] }).
    return typeof type === 'string' || Array.isArray(type) || isObject(type)
      ? walk(type as AvroSchemaJson, v, depth + 1)
      : v;
  };

  let root: AvroSchemaJson = schema;
  if (record !== undefined && Array.isArray(schema)) {
    const target = named.get(record);
    const branch = schema.find((b) => {
      const n = nameOf(b);
      return n !== undefined && named.get(n) === target;
    });
    if (branch === undefined) return mask(value); // the value's record is not in the schema: shown masked
    root = branch;
  }
  return walk(root, value, 0);
}
