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

/** Marks a schema's values as personal data: masked in views (see the module doc). */
export function pii<T extends z.ZodType>(schema: T): T {
  return schema.meta({ pii: true }) as T;
}

/** A JSON Schema node as zod's conversion writes it (the parts masking reads). */
interface Node {
  pii?: boolean;
  properties?: Record<string, Node>;
  additionalProperties?: Node | boolean;
  items?: Node | Node[];
  prefixItems?: Node[];
  anyOf?: Node[];
  oneOf?: Node[];
  allOf?: Node[];
  $ref?: string;
  $defs?: Record<string, Node>;
}

const compiled = new WeakMap<z.ZodType, Node | null>();

/** The schema as JSON Schema (zod 4's conversion keeps `.meta()` fields), or null when it marks nothing. */
function compile(schema: z.ZodType): Node | null {
  if (compiled.has(schema)) return compiled.get(schema)!;
  let node: Node | null;
  try {
    node = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any', cycles: 'ref' }) as Node;
    if (!JSON.stringify(node).includes('"pii":true')) node = null;
  } catch {
    node = null;
  }
  compiled.set(schema, node);
  return node;
}

/**
 * A copy of `value` with every field its schema marks as PII replaced by {@link PII_MASK} (the value itself when
 * nothing is marked, or no schema is given). Unions mask what any branch marks; a record's values follow its value
 * schema; unknown fields are left as they are.
 */
export function maskPii(schema: z.ZodType | undefined, value: unknown): unknown {
  const root = schema && compile(schema);
  if (!root) return value;
  const walk = (node: Node | undefined, v: unknown, depth: number): unknown => {
    if (!node || v === undefined || v === null || depth > 64) return v;
    if (node.$ref) {
      const name = node.$ref.startsWith('#/$defs/') ? node.$ref.slice('#/$defs/'.length) : undefined;
      return walk(node.$ref === '#' ? root : name ? root.$defs?.[name] : undefined, v, depth + 1);
    }
    if (node.pii) return PII_MASK;
    let out: unknown = v;
    for (const branch of [...(node.anyOf ?? []), ...(node.oneOf ?? []), ...(node.allOf ?? [])])
      out = walk(branch, out, depth + 1);
    if (Array.isArray(out)) {
      const tuple = node.prefixItems ?? (Array.isArray(node.items) ? node.items : undefined);
      const each = Array.isArray(node.items) ? undefined : node.items;
      if (tuple || each) out = out.map((x, i) => walk(tuple?.[i] ?? each, x, depth + 1));
    } else if (
      typeof out === 'object' &&
      (node.properties || typeof node.additionalProperties === 'object')
    ) {
      const extra = typeof node.additionalProperties === 'object' ? node.additionalProperties : undefined;
      out = Object.fromEntries(
        Object.entries(out as Record<string, unknown>).map(([k, x]) => [
          k,
          walk(node.properties?.[k] ?? extra, x, depth + 1),
        ]),
      );
    }
    return out;
  };
  return walk(root, value, 0);
}

/** Whether the schema marks any field as PII. */
export const marksPii = (schema: z.ZodType | undefined): boolean => !!schema && compile(schema) !== null;

/** What {@link maskRunView} needs of a definition (a WorkflowDefinition has it). */
interface MaskableDefinition {
  inputSchema?: z.ZodType;
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

/**
 * A run as the API shows it (`flatRunState`: map items among the steps as `<map>[<index>]`, compensations as
 * `<step>.compensate`), with the PII fields masked: the run input by the workflow's input schema, each step's and
 * item's output by its task contract's output schema, a map step's default aggregate as an array of those. Steps
 * without a contract, signals and the run's own output are shown as they are.
 */
export function maskRunView<T extends { input?: unknown; steps: Record<string, { output?: unknown }> }>(
  def: MaskableDefinition,
  view: T,
): T {
  const outputSchema = (id: string): z.ZodType | undefined => {
    const item = ITEM.exec(id);
    if (item) {
      const s = def.stepIndex.get(item[1]);
      return s?.kind === 'map' ? s.contract?.output : undefined;
    }
    const undone = id.endsWith(COMPENSATION_SUFFIX)
      ? def.stepIndex.get(id.slice(0, -COMPENSATION_SUFFIX.length))
      : undefined;
    if (undone) return undone.kind === 'task' ? undone.compensate?.contract?.output : undefined;
    const s = def.stepIndex.get(id);
    if (s?.kind === 'task') return s.contract?.output;
    if (s?.kind === 'map' && s.contract && s.defaultAggregate) return arrayOf(s.contract.output);
    return undefined;
  };
  return {
    ...view,
    ...('input' in view ? { input: maskPii(def.inputSchema, view.input) } : {}),
    steps: Object.fromEntries(
      Object.entries(view.steps).map(([id, st]) => {
        const schema = st.output === undefined ? undefined : outputSchema(id);
        return [id, schema ? { ...st, output: maskPii(schema, st.output) } : st];
      }),
    ),
  };
}
