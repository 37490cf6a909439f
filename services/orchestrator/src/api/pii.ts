import type { DlqRecord } from '@keyflow/kafka';
import { maskPii, maskRunView, type AnyTaskContract } from '@keyflow/workflow';
import type { WorkflowRegistry } from '../workflows/registry';

/**
 * Views with the PII fields masked (libs/workflow `maskPii`: fields marked `pii()` in a task contract or a
 * workflow input schema): runs as GET /runs/:id shows them, and DLQ records as the ops API and console list them.
 */
export class PiiMasking {
  private readonly tasks = new Map<string, AnyTaskContract>();

  constructor(private readonly registry: WorkflowRegistry) {
    for (const def of registry.all())
      for (const s of def.stepIndex.values()) {
        if ((s.kind === 'task' || s.kind === 'map') && s.contract) this.tasks.set(s.type, s.contract);
        if (s.kind === 'task' && s.compensate?.contract)
          this.tasks.set(s.compensate.type, s.compensate.contract);
      }
  }

  /** A run view (`flatRunState`) of a workflow version with its PII fields masked. */
  run<
    T extends {
      workflow: string;
      version: number;
      input?: unknown;
      steps: Record<string, { output?: unknown }>;
    },
  >(view: T): T {
    const def = this.registry.get(view.workflow, view.version);
    return def ? maskRunView(def, view) : view;
  }

  /**
   * A DLQ record with the PII fields of its decoded event masked: a TaskCommand's input and a TaskCompleted's output
   * by their task's contract, a StartRun's input by its workflow's input schema (JSON texts stay JSON texts).
   */
  dlqRecord(r: DlqRecord): DlqRecord {
    const v = r.value as { event?: unknown; value?: unknown } | string | null;
    if (!v || typeof v !== 'object' || typeof v.event !== 'string') return r;
    const e = v.value as Record<string, unknown>;
    const json = (text: unknown, schema: Parameters<typeof maskPii>[0]) =>
      typeof text === 'string' && schema ? JSON.stringify(maskPii(schema, parseOr(text))) : text;
    let masked: Record<string, unknown> | undefined;
    if (v.event === 'TaskCommand')
      masked = { ...e, input: json(e.input, this.tasks.get(String(e.taskType))?.input) };
    else if (v.event === 'TaskCompleted')
      masked = { ...e, output: json(e.output, this.tasks.get(String(e.taskType))?.output) };
    else if (v.event === 'StartRun') {
      const def = this.registry.get(String(e.workflow), (e.workflowVersion as number | null) ?? undefined);
      masked = { ...e, input: json(e.input, def?.inputSchema) };
    }
    return masked ? { ...r, value: { ...v, value: masked } } : r;
  }
}

function parseOr(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
