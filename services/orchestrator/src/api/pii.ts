import type { DlqRecord } from '@keyflow/ops';
import { marksPii, maskPii, maskRunView, PII_MASK, type AnyTaskContract, type z } from '@keyflow/workflow';
import type { WorkflowRegistry } from '../workflows/registry';

/**
 * Views with the PII fields masked (libs/workflow `maskPii`: fields marked `pii()` in a task contract or a
 * workflow input schema): runs as GET /runs/:id shows them, and DLQ records as the ops API and console list them.
 */
export class PiiMasking {
  private readonly tasks = new Map<string, AnyTaskContract>();
  /** Whether any registered schema marks PII (then raw text no schema decodes is not shown either). */
  private readonly marksAny: boolean;

  constructor(private readonly registry: WorkflowRegistry) {
    let any = false;
    for (const def of registry.all()) {
      any ||= marksPii(def.inputSchema);
      for (const s of def.stepIndex.values()) {
        const contracts = [
          ...((s.kind === 'task' || s.kind === 'map') && s.contract ? [[s.type, s.contract] as const] : []),
          ...(s.kind === 'task' && s.compensate?.contract
            ? [[s.compensate.type, s.compensate.contract] as const]
            : []),
        ];
        for (const [type, c] of contracts) {
          this.tasks.set(type, c);
          any ||= marksPii(c.input) || marksPii(c.output);
        }
      }
    }
    this.marksAny = any;
  }

  /** The definition a view names, else the workflow's latest (a version no longer registered). */
  private definition(workflow: string, version?: number | null) {
    return this.registry.get(workflow, version) ?? this.registry.get(workflow);
  }

  /** A run view (`flatRunState`) of a workflow version with its PII fields masked. */
  run<
    T extends {
      workflow: string;
      version: number;
      input?: unknown;
      output?: unknown;
      steps: Record<string, { output?: unknown; map?: { outputs?: unknown[] } }>;
    },
  >(view: T): T {
    const def = this.definition(view.workflow, view.version);
    return def ? maskRunView(def, view) : view;
  }

  /**
   * A DLQ record with the PII fields of its decoded event masked: a TaskCommand's input and a TaskCompleted's output
   * by their task's contract, a StartRun's input by its workflow's input schema (JSON texts stay JSON texts; a text
   * that is not JSON, under a schema that marks PII, is masked whole; an empty one, a claim-checked input, is left).
   * The raw text of a record no schema decodes is not shown when any schema marks PII.
   */
  dlqRecord(r: DlqRecord): DlqRecord {
    const v = r.value as
      { event?: unknown; value?: unknown; undecodable?: unknown; text?: unknown } | string | null;
    if (!v || typeof v !== 'object') return r;
    if (typeof v.event !== 'string')
      return this.marksAny && typeof v.text === 'string' ? { ...r, value: { ...v, text: PII_MASK } } : r;
    const e = v.value as Record<string, unknown>;
    const json = (text: unknown, schema: z.ZodType | undefined) => {
      if (typeof text !== 'string' || text === '' || !schema || !marksPii(schema)) return text;
      try {
        return JSON.stringify(maskPii(schema, JSON.parse(text)));
      } catch {
        return PII_MASK;
      }
    };
    let masked: Record<string, unknown> | undefined;
    if (v.event === 'TaskCommand')
      masked = { ...e, input: json(e.input, this.tasks.get(String(e.taskType))?.input) };
    else if (v.event === 'TaskCompleted')
      masked = { ...e, output: json(e.output, this.tasks.get(String(e.taskType))?.output) };
    else if (v.event === 'StartRun')
      masked = {
        ...e,
        input: json(
          e.input,
          this.definition(String(e.workflow), e.workflowVersion as number | null)?.inputSchema,
        ),
      };
    return masked ? { ...r, value: { ...v, value: masked } } : r;
  }
}
