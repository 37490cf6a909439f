import { z } from 'zod/v4';
import { COMPENSATION_SUFFIX } from './dsl';

/**
 * PII masking driven by the contracts: a field whose schema is marked (`pii(z.string())`, or any zod schema with
 * `.meta({ pii: true })`) is shown as {@link PII_MASK} wherever keyflow shows a value to people: the API's run
 * views (run input, step inputs and outputs, map items), the DLQ records the ops API and console list. The data
 * itself (commands, events, snapshots) is not changed: masking is for views, not storage.
 */

/** What a masked value is shown as. */
export const PII_MASK = '[masked]';

/**
 * The mark {@link pii} puts on a schema: a check that accepts everything. zod copies a schema's checks into every
 * schema derived from it (`.min()`, `.trim()`, `.refine()`, `.strict()`...), so the mark survives them, where
 * `.meta()` (kept on one instance) would not.
 */
const PII_CHECK = z.refine(() => true, { abort: false });

/**
 * Marks a schema's values as personal data: masked in views (see the module doc). Chain checks before or after it
 * (`pii(z.email()).max(100)`); `.meta({ pii: true })` on a schema marks it too, but only that instance.
 */
export function pii<T extends z.ZodType>(schema: T): T {
  return schema.check(PII_CHECK as never) as T;
}

/** A JSON Schema node as zod's conversion writes it (the parts masking reads). */
interface Node {
  pii?: boolean;
  properties?: Record<string, Node>;
  additionalProperties?: Node | boolean;
  propertyNames?: Node;
  items?: Node | Node[];
  prefixItems?: Node[];
  anyOf?: Node[];
  oneOf?: Node[];
  allOf?: Node[];
  $ref?: string;
  $defs?: Record<string, Node>;
}

/** A schema's JSON Schemas (input and output side: a pipe marks either), `[]` when it marks nothing, null when it cannot be converted. */
const compiled = new WeakMap<z.ZodType, Node[] | null>();

/** Whether a schema (zod's internal form, as the conversion hands it) carries the {@link pii} mark. */
const marked = (s: unknown) =>
  ((s as { _zod: { def: { checks?: unknown[] } } })._zod.def.checks ?? []).includes(PII_CHECK);

function compile(schema: z.ZodType): Node[] | null {
  if (compiled.has(schema)) return compiled.get(schema)!;
  let nodes: Node[] | null;
  try {
    nodes = (['input', 'output'] as const)
      .map(
        (io) =>
          z.toJSONSchema(schema, {
            io,
            unrepresentable: 'any',
            cycles: 'ref',
            override: (ctx) => {
              if (marked(ctx.zodSchema)) (ctx.jsonSchema as Node).pii = true;
            },
          }) as Node,
      )
      .filter((n) => JSON.stringify(n).includes('"pii":true'));
  } catch {
    nodes = null; // masking cannot see inside it: the whole value is masked (fail closed)
  }
  compiled.set(schema, nodes);
  return nodes;
}

/** Value depth past which a value under a marked schema is masked whole (deeper than any schema is walked). */
const MAX_DEPTH = 64;

/**
 * A copy of `value` with every field its schema marks as PII replaced by {@link PII_MASK} (the value itself when
 * nothing is marked, or no schema is given). Unions and pipes mask what any branch or side marks; a record's values
 * follow its value schema, and its keys are masked when its key schema is marked; unknown fields are left as they
 * are. Fails closed: a schema JSON Schema cannot express, or a value nested deeper than {@link MAX_DEPTH}, is masked
 * whole.
 */
export function maskPii(schema: z.ZodType | undefined, value: unknown): unknown {
  if (!schema) return value;
  const roots = compile(schema);
  if (roots === null) return value === undefined || value === null ? value : PII_MASK;
  let out = value;
  for (const root of roots) out = maskWith(root, out);
  return out;
}

function maskWith(root: Node, value: unknown): unknown {
  const walk = (node: Node | undefined, v: unknown, depth: number, hops = 0): unknown => {
    if (!node || v === undefined || v === null) return v;
    if (depth > MAX_DEPTH || hops > MAX_DEPTH) return PII_MASK;
    if (node.$ref) {
      const name = node.$ref.startsWith('#/$defs/') ? node.$ref.slice('#/$defs/'.length) : undefined;
      return walk(node.$ref === '#' ? root : name ? root.$defs?.[name] : undefined, v, depth, hops + 1);
    }
    if (node.pii) return PII_MASK;
    let out: unknown = v;
    for (const branch of [...(node.anyOf ?? []), ...(node.oneOf ?? []), ...(node.allOf ?? [])])
      out = walk(branch, out, depth, hops + 1);
    if (Array.isArray(out)) {
      const tuple = node.prefixItems ?? (Array.isArray(node.items) ? node.items : undefined);
      const each = Array.isArray(node.items) ? undefined : node.items;
      if (tuple || each) out = out.map((x, i) => walk(tuple?.[i] ?? each, x, depth + 1));
    } else if (
      typeof out === 'object' &&
      (node.properties || typeof node.additionalProperties === 'object' || node.propertyNames?.pii)
    ) {
      const extra = typeof node.additionalProperties === 'object' ? node.additionalProperties : undefined;
      const maskKeys = node.propertyNames?.pii === true;
      out = Object.fromEntries(
        Object.entries(out as Record<string, unknown>).map(([k, x], i) => [
          maskKeys && !node.properties?.[k] ? `${PII_MASK}#${i}` : k,
          walk(node.properties?.[k] ?? extra, x, depth + 1),
        ]),
      );
    }
    return out;
  };
  return walk(root, value, 0);
}

/** Whether the schema marks any field as PII. */
export const marksPii = (schema: z.ZodType | undefined): boolean => !!schema && compile(schema)?.length !== 0;

/** What {@link maskRunView} needs of a definition (a WorkflowDefinition has it). */
interface MaskableDefinition {
  inputSchema?: z.ZodType;
  /** Whether the run's output is the default (every step's output, by step id). */
  defaultOutput: boolean;
  stepIndex: Map<
    string,
    | { kind: 'task'; contract?: AnyContract; compensate?: { contract?: AnyContract } }
    | { kind: 'map'; contract?: AnyContract; defaultAggregate: boolean }
    | { kind: 'choice' | 'wait' }
  >;
}
type AnyContract = { input: z.ZodType; output: z.ZodType };

const ITEM = /^(.*)\[(\d+)\]$/;
const arrays = new WeakMap<z.ZodType, z.ZodType>();
const arrayOf = (s: z.ZodType) => arrays.get(s) ?? arrays.set(s, z.array(s)).get(s)!;

/** How a step's output is masked: by a schema, whole (no schema, but its contract marks PII), or not at all. */
type OutputMask = z.ZodType | 'whole' | undefined;

/**
 * A run as the API shows it (`flatRunState`: map items among the steps as `<map>[<index>]`, compensations as
 * `<step>.compensate`), with the PII fields masked: the run input by the workflow's input schema, each step's and
 * item's output (and a map's item outputs in its progress) by its task contract's output schema, a map step's
 * default aggregate as an array of those, the run's default output (every step's, by id) step by step. Fails
 * closed: a custom aggregate of a contract that marks PII, and a custom run output of a workflow whose schemas
 * mark any, are masked whole. Signals are shown as they are.
 */
export function maskRunView<
  T extends {
    input?: unknown;
    output?: unknown;
    steps: Record<string, { output?: unknown; map?: { outputs?: unknown[] } }>;
  },
>(def: MaskableDefinition, view: T): T {
  const contractOf = (id: string): { contract?: AnyContract; item: boolean; aggregate?: boolean } => {
    const item = ITEM.exec(id);
    if (item) {
      const s = def.stepIndex.get(item[1]);
      return { contract: s?.kind === 'map' ? s.contract : undefined, item: true };
    }
    const undone = id.endsWith(COMPENSATION_SUFFIX)
      ? def.stepIndex.get(id.slice(0, -COMPENSATION_SUFFIX.length))
      : undefined;
    if (undone)
      return { contract: undone.kind === 'task' ? undone.compensate?.contract : undefined, item: false };
    const s = def.stepIndex.get(id);
    if (s?.kind === 'task') return { contract: s.contract, item: false };
    if (s?.kind === 'map') return { contract: s.contract, item: false, aggregate: s.defaultAggregate };
    return { item: false };
  };
  const maskOf = (id: string): OutputMask => {
    const { contract, aggregate } = contractOf(id);
    if (!contract || !marksPii(contract.output)) return undefined;
    if (aggregate === undefined) return contract.output;
    return aggregate ? arrayOf(contract.output) : 'whole';
  };
  const apply = (m: OutputMask, v: unknown) =>
    m === undefined || v === undefined || v === null ? v : m === 'whole' ? PII_MASK : maskPii(m, v);
  const marksAny =
    marksPii(def.inputSchema) ||
    [...def.stepIndex.keys()].some((id) => {
      const c = contractOf(id).contract;
      return !!c && (marksPii(c.output) || marksPii(c.input));
    });
  let output: unknown = view.output;
  if (output !== undefined && output !== null) {
    if (!def.defaultOutput) output = marksAny ? PII_MASK : output;
    else if (typeof output === 'object')
      output = Object.fromEntries(
        Object.entries(output as Record<string, unknown>).map(([id, v]) => [id, apply(maskOf(id), v)]),
      );
  }
  return {
    ...view,
    ...('input' in view ? { input: maskPii(def.inputSchema, view.input) } : {}),
    ...('output' in view ? { output } : {}),
    steps: Object.fromEntries(
      Object.entries(view.steps).map(([id, st]) => {
        const m = maskOf(id);
        const { contract } = contractOf(id);
        const items =
          st.map?.outputs && contract && marksPii(contract.output)
            ? { map: { ...st.map, outputs: st.map.outputs.map((o) => apply(contract.output, o)) } }
            : {};
        return [id, m || items.map ? { ...st, output: apply(m, st.output), ...items } : st];
      }),
    ),
  };
}
