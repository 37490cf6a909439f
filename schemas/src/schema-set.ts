import { readdirSync, readFileSync, existsSync } from 'node:fs';
import { join } from 'node:path';

/** Avro namespace of every event record. */
export const EVENT_NAMESPACE = 'dev.keyflow.events';

/** JSON form of an Avro schema (Avro 1.11 spec, "Schema Declaration"). */
export type AvroSchema = string | AvroSchema[] | { [key: string]: unknown };

/** One published version of one event: `schemas/avro/<event>/v<version>.avsc`. */
export interface EventVersion {
  event: string;
  version: number;
  file: string;
  /** As written in the file: shared types (EventMetadata) appear by full name. */
  schema: Record<string, unknown>;
}

/** The directory holding `avro/` and `catalog.yaml`. */
export const SCHEMAS_DIR = join(__dirname, '..');

/** Every version of every event, sorted by event then version. Throws on a gap in version numbers. */
export function loadEventVersions(dir = join(SCHEMAS_DIR, 'avro')): Map<string, EventVersion[]> {
  const out = new Map<string, EventVersion[]>();
  for (const event of readdirSync(dir).sort()) {
    const eventDir = join(dir, event);
    if (!existsSync(eventDir)) continue;
    const versions = readdirSync(eventDir)
      .map((f) => /^v(\d+)\.avsc$/.exec(f))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => {
        const file = join(eventDir, m[0]);
        return { event, version: Number(m[1]), file, schema: JSON.parse(readFileSync(file, 'utf8')) };
      })
      .sort((a, b) => a.version - b.version);
    versions.forEach((v, i) => {
      if (v.version !== i + 1)
        throw new Error(
          `${event}: versions must be v1..vN without gaps; found v${v.version} at position ${i + 1}`,
        );
      if (v.schema.name !== event)
        throw new Error(`${v.file}: record name ${String(v.schema.name)} does not match the folder ${event}`);
    });
    if (versions.length) out.set(event, versions);
  }
  return out;
}

function fullName(schema: Record<string, unknown>, ns: string | undefined): string {
  const name = String(schema.name);
  if (name.includes('.')) return name;
  const n = (schema.namespace as string | undefined) ?? ns;
  return n ? `${n}.${name}` : name;
}

/**
 * Makes a self-contained schema from event records that reference shared named types (EventMetadata) by name:
 * the first use of a named type carries its definition, later uses its full name, as the Avro spec requires
 * ("a name may only be defined once", Avro 1.11 spec, Names). A record defined in several event files
 * (TaskError) is likewise defined once.
 * @param roots event schemas; one root gives that record, several give a union of them, in order.
 * @param shared definitions of the shared types, by full name.
 */
export function composeSchema(
  roots: Array<Record<string, unknown>>,
  shared: Map<string, Record<string, unknown>>,
): AvroSchema {
  const defined = new Set<string>();
  const walk = (node: unknown, ns: string | undefined): unknown => {
    if (typeof node === 'string') {
      const full = node.includes('.') ? node : ns ? `${ns}.${node}` : node;
      const def = shared.get(full) ?? shared.get(node);
      if (def && !defined.has(full)) return walk(def, ns);
      return node;
    }
    if (Array.isArray(node)) return node.map((n) => walk(n, ns));
    if (node && typeof node === 'object') {
      const obj = node as Record<string, unknown>;
      if (obj.type === 'record' || obj.type === 'enum' || obj.type === 'fixed') {
        const full = fullName(obj, ns);
        if (defined.has(full)) return full;
        defined.add(full);
        const innerNs = full.includes('.') ? full.slice(0, full.lastIndexOf('.')) : ns;
        if (obj.type !== 'record') return { ...obj };
        return {
          ...obj,
          fields: (obj.fields as Array<Record<string, unknown>>).map((f) => ({
            ...f,
            type: walk(f.type, innerNs),
          })),
        };
      }
      if (obj.type === 'array') return { ...obj, items: walk(obj.items, ns) };
      if (obj.type === 'map') return { ...obj, values: walk(obj.values, ns) };
      return { ...obj };
    }
    return node;
  };
  const composed = roots.map((r) => walk(r, undefined));
  return (composed.length === 1 ? composed[0] : composed) as AvroSchema;
}

/** The shared named types: the latest version of each event listed in the catalog's `shared_types`. */
export function sharedTypes(
  versions: Map<string, EventVersion[]>,
  names: string[],
): Map<string, Record<string, unknown>> {
  const out = new Map<string, Record<string, unknown>>();
  for (const n of names) {
    const v = versions.get(n)?.at(-1);
    if (!v) throw new Error(`shared type ${n} has no schema in schemas/avro/${n}/`);
    out.set(fullName(v.schema, undefined), v.schema);
  }
  return out;
}
