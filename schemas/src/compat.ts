import * as avsc from 'avsc';
import type { AvroSchema } from './schema-set';

/** Compatibility modes, as the Confluent Schema Registry defines them (docs: "Schema Evolution and Compatibility"). */
export type CompatibilityMode =
  'NONE' | 'BACKWARD' | 'BACKWARD_TRANSITIVE' | 'FORWARD' | 'FORWARD_TRANSITIVE' | 'FULL' | 'FULL_TRANSITIVE';

export const COMPATIBILITY_MODES: readonly CompatibilityMode[] = [
  'NONE',
  'BACKWARD',
  'BACKWARD_TRANSITIVE',
  'FORWARD',
  'FORWARD_TRANSITIVE',
  'FULL',
  'FULL_TRANSITIVE',
];

/** One reason a reader schema cannot read data written with a writer schema. `path` names the field. */
export interface ReadProblem {
  /** Dotted path from the root record, e.g. `TaskFailed.error.errorClass`. */
  path: string;
  reason: string;
}

type Node = string | Node[] | { [k: string]: unknown };
const PRIMITIVES = new Set(['null', 'boolean', 'int', 'long', 'float', 'double', 'bytes', 'string']);
// Avro 1.11 spec, Schema Resolution: "the writer's schema may be promoted to the reader's".
const PROMOTIONS: Record<string, string[]> = {
  int: ['long', 'float', 'double'],
  long: ['float', 'double'],
  float: ['double'],
  string: ['bytes'],
  bytes: ['string'],
};

function collectNames(
  node: unknown,
  ns: string | undefined,
  into: Map<string, Record<string, unknown>>,
): void {
  if (Array.isArray(node)) return node.forEach((n) => collectNames(n, ns, into));
  if (!node || typeof node !== 'object') return;
  const o = node as Record<string, unknown>;
  if (o.type === 'record' || o.type === 'enum' || o.type === 'fixed') {
    const name = String(o.name);
    const full = name.includes('.')
      ? name
      : ((o.namespace as string | undefined) ?? ns)
        ? `${(o.namespace as string) ?? ns}.${name}`
        : name;
    into.set(full, o);
    into.set(name.split('.').pop()!, o);
    const inner = full.includes('.') ? full.slice(0, full.lastIndexOf('.')) : ns;
    if (o.type === 'record')
      (o.fields as Array<{ type: unknown }>).forEach((f) => collectNames(f.type, inner, into));
    return;
  }
  if (o.type === 'array') collectNames(o.items, ns, into);
  if (o.type === 'map') collectNames(o.values, ns, into);
  if (typeof o.type === 'object') collectNames(o.type, ns, into);
}

function kind(
  n: Node,
  names: Map<string, Record<string, unknown>>,
): { t: string; o?: Record<string, unknown> } {
  if (Array.isArray(n)) return { t: 'union' };
  if (typeof n === 'string') {
    if (PRIMITIVES.has(n)) return { t: n };
    const o = names.get(n) ?? names.get(n.split('.').pop()!);
    if (!o) return { t: `unknown:${n}` };
    return { t: String(o.type), o };
  }
  const o = n as Record<string, unknown>;
  if (typeof o.type === 'string' && PRIMITIVES.has(o.type)) return { t: o.type }; // logical types resolve by their underlying type
  if (typeof o.type === 'object') return kind(o.type as Node, names);
  return { t: String(o.type), o };
}

const shortName = (o: Record<string, unknown>) => String(o.name).split('.').pop()!;
const aliasesOf = (o: Record<string, unknown>) =>
  ((o.aliases as string[] | undefined) ?? []).map((a) => a.split('.').pop()!);
const describe = (n: Node, names: Map<string, Record<string, unknown>>) => {
  const k = kind(n, names);
  return k.o ? `${k.t} ${shortName(k.o)}` : k.t;
};

/**
 * Lists why `reader` cannot read data written with `writer`, by the Avro 1.11 specification's schema-resolution
 * rules (records by field name or alias, missing reader fields need a default, numeric promotion, union branch
 * matching, enum symbols). Empty when it can. Cross-checked with avsc's resolver, so a rule this walker misses is
 * still reported (at the root path).
 */
export function readProblems(reader: AvroSchema, writer: AvroSchema): ReadProblem[] {
  const rNames = new Map<string, Record<string, unknown>>();
  const wNames = new Map<string, Record<string, unknown>>();
  collectNames(reader, undefined, rNames);
  collectNames(writer, undefined, wNames);
  const problems: ReadProblem[] = [];
  const seen = new Set<string>();

  const matches = (r: Node, w: Node): boolean => {
    const sub: ReadProblem[] = [];
    walk(r, w, '', sub);
    return sub.length === 0;
  };

  function walk(r: Node, w: Node, path: string, out: ReadProblem[]): void {
    const rk = kind(r, rNames);
    const wk = kind(w, wNames);
    const guard = `${path}|${JSON.stringify(r)}|${JSON.stringify(w)}`;
    if (rk.o && wk.o && seen.has(guard)) return; // recursive types
    if (rk.o && wk.o) seen.add(guard);

    if (wk.t === 'union') {
      (w as Node[]).forEach((branch) => walk(r, branch, path, out));
      return;
    }
    if (rk.t === 'union') {
      const branches = r as Node[];
      if (branches.some((rb) => matches(rb, w))) return;
      // A named writer type resolves to the reader branch of the same name (Avro spec): report inside it.
      const named = wk.o
        ? branches.find((rb) => kind(rb, rNames).o && shortName(kind(rb, rNames).o!) === shortName(wk.o!))
        : undefined;
      if (named !== undefined) return walk(named, w, path ? path : shortName(wk.o!), out);
      out.push({
        path: path || '(root)',
        reason: `the reader's union has no branch for the writer's ${describe(w, wNames)}`,
      });
      return;
    }
    if (PRIMITIVES.has(rk.t) || PRIMITIVES.has(wk.t)) {
      if (rk.t !== wk.t && !(PROMOTIONS[wk.t] ?? []).includes(rk.t))
        out.push({
          path: path || '(root)',
          reason: `type changed: the writer has ${wk.t}, the reader wants ${rk.t}`,
        });
      return;
    }
    if (rk.t !== wk.t) {
      out.push({
        path: path || '(root)',
        reason: `type changed: the writer has ${describe(w, wNames)}, the reader wants ${describe(r, rNames)}`,
      });
      return;
    }
    const ro = rk.o!;
    const wo = wk.o!;
    switch (rk.t) {
      case 'record': {
        if (shortName(ro) !== shortName(wo) && !aliasesOf(ro).includes(shortName(wo))) {
          out.push({
            path: path || shortName(ro),
            reason: `record name changed from ${shortName(wo)} to ${shortName(ro)} without an alias`,
          });
          return;
        }
        const base = path ? path : shortName(ro);
        const wFields = wo.fields as Array<Record<string, unknown>>;
        for (const rf of ro.fields as Array<Record<string, unknown>>) {
          const names = [rf.name, ...((rf.aliases as string[] | undefined) ?? [])];
          const wf = wFields.find((f) => names.includes(f.name));
          const fpath = `${base}.${String(rf.name)}`;
          if (!wf) {
            if (!('default' in rf))
              out.push({
                path: fpath,
                reason: `field ${String(rf.name)} is missing from the writer's data and has no default in the reader`,
              });
            continue;
          }
          walk(rf.type as Node, wf.type as Node, fpath, out);
        }
        return;
      }
      case 'enum': {
        const rs = ro.symbols as string[];
        const missing = (wo.symbols as string[]).filter((s) => !rs.includes(s));
        if (missing.length && !('default' in ro))
          out.push({
            path: path || shortName(ro),
            reason: `enum symbols ${missing.join(', ')} unknown to the reader, which has no default symbol`,
          });
        return;
      }
      case 'fixed':
        if (ro.size !== wo.size)
          out.push({
            path: path || shortName(ro),
            reason: `fixed size changed from ${wo.size} to ${ro.size}`,
          });
        return;
      case 'array':
        return walk(ro.items as Node, wo.items as Node, `${path}[]`, out);
      case 'map':
        return walk(ro.values as Node, wo.values as Node, `${path}{}`, out);
      default:
        out.push({ path: path || '(root)', reason: `unsupported schema kind ${rk.t}` });
    }
  }

  walk(reader as Node, writer as Node, '', problems);
  if (problems.length === 0) {
    try {
      avsc.Type.forSchema(reader as avsc.Schema).createResolver(avsc.Type.forSchema(writer as avsc.Schema));
    } catch (e) {
      problems.push({ path: '(root)', reason: `avsc cannot resolve: ${(e as Error).message}` });
    }
  }
  return problems;
}

/** A version that breaks the mode against an earlier one, with the fields that break. */
export interface CompatibilityViolation {
  version: number;
  against: number;
  /** `backward`: the new schema cannot read the old data; `forward`: the old schema cannot read the new data. */
  direction: 'backward' | 'forward';
  problems: ReadProblem[];
}

/**
 * Checks the last of `versions` (oldest first) against the earlier ones under `mode`: the non-transitive modes
 * compare with the previous version only, the transitive ones with every earlier version (Confluent semantics).
 */
export function checkLatest(versions: AvroSchema[], mode: CompatibilityMode): CompatibilityViolation[] {
  if (mode === 'NONE' || versions.length < 2) return [];
  const latestIndex = versions.length - 1;
  const latest = versions[latestIndex];
  const earlier = mode.endsWith('_TRANSITIVE')
    ? versions.slice(0, latestIndex).map((s, i) => [s, i] as const)
    : [[versions[latestIndex - 1], latestIndex - 1] as const];
  const backward = mode.startsWith('BACKWARD') || mode.startsWith('FULL');
  const forward = mode.startsWith('FORWARD') || mode.startsWith('FULL');
  const out: CompatibilityViolation[] = [];
  for (const [old, i] of earlier) {
    if (backward) {
      const p = readProblems(latest, old);
      if (p.length)
        out.push({ version: latestIndex + 1, against: i + 1, direction: 'backward', problems: p });
    }
    if (forward) {
      const p = readProblems(old, latest);
      if (p.length) out.push({ version: latestIndex + 1, against: i + 1, direction: 'forward', problems: p });
    }
  }
  return out;
}

/** Every version checked as it was introduced: version k against versions 1..k-1. */
export function checkHistory(versions: AvroSchema[], mode: CompatibilityMode): CompatibilityViolation[] {
  return versions.flatMap((_, k) => (k === 0 ? [] : checkLatest(versions.slice(0, k + 1), mode)));
}
