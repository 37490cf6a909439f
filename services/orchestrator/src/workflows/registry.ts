import type { WorkflowDefinition } from '@keyflow/workflow';

/** Workflow definitions by name and version. A run keeps the version it started with. */
export class WorkflowRegistry {
  private readonly byName = new Map<string, Map<number, WorkflowDefinition>>();

  register(...defs: WorkflowDefinition[]): this {
    for (const d of defs) {
      const versions = this.byName.get(d.name) ?? new Map<number, WorkflowDefinition>();
      if (versions.has(d.version)) throw new Error(`workflow ${d.name} v${d.version} is registered twice`);
      versions.set(d.version, d);
      this.byName.set(d.name, versions);
    }
    return this;
  }

  /** The given version, or the latest when `version` is null/undefined. */
  get(name: string, version?: number | null): WorkflowDefinition | undefined {
    const versions = this.byName.get(name);
    if (!versions) return undefined;
    if (version !== undefined && version !== null) return versions.get(version);
    return versions.get(Math.max(...versions.keys()));
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  /** Every registered definition, every version. */
  all(): WorkflowDefinition[] {
    return [...this.byName.values()].flatMap((versions) => [...versions.values()]);
  }
}
