import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { Registry } from '@keyflow/observability';
import { workerMetrics } from '@keyflow/task-runtime';
import { orchestratorMetrics } from '../../services/orchestrator/src/engine/metrics';

/**
 * Checks the alert rules and the Grafana dashboard against the services (run by scripts/test-all.sh):
 *  1. `promtool check rules` accepts prometheus-alerts.yml (Debian's `prometheus` package);
 *  2. every `keyflow_*` metric an expression names is one the services export (histogram series `_bucket`,
 *     `_count`, `_sum` of an exported histogram included), so a renamed metric cannot leave a silent panel or alert.
 * Exit 0 when both hold; 1 with the reasons otherwise.
 */
const here = __dirname;
const problems: string[] = [];

try {
  execFileSync('promtool', ['check', 'rules', join(here, 'prometheus-alerts.yml')], { stdio: 'pipe' });
} catch (e) {
  const err = e as { code?: string; stdout?: Buffer; stderr?: Buffer };
  problems.push(
    err.code === 'ENOENT'
      ? 'promtool not found (Debian: apt-get install prometheus)'
      : `promtool check rules: ${err.stdout?.toString() ?? ''}${err.stderr?.toString() ?? ''}`,
  );
}

const registry = new Registry();
orchestratorMetrics(registry);
workerMetrics(registry);
const exported = new Set<string>();
for (const m of registry.getMetricsAsArray()) {
  exported.add(m.name);
  if (m.type === 'histogram') for (const s of ['_bucket', '_count', '_sum']) exported.add(`${m.name}${s}`);
}

const rules = parse(readFileSync(join(here, 'prometheus-alerts.yml'), 'utf8')) as {
  groups: Array<{ rules: Array<{ alert: string; expr: string }> }>;
};
const dashboard = JSON.parse(readFileSync(join(here, 'grafana-dashboard.json'), 'utf8')) as {
  panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
};
const uses: Array<{ where: string; expr: string }> = [
  ...rules.groups.flatMap((g) => g.rules.map((r) => ({ where: `alert ${r.alert}`, expr: r.expr }))),
  ...dashboard.panels.flatMap((p) => p.targets.map((t) => ({ where: `panel "${p.title}"`, expr: t.expr }))),
];
let named = 0;
for (const { where, expr } of uses)
  for (const name of expr.match(/\bkeyflow_[a-z0-9_]+/g) ?? []) {
    named++;
    if (!exported.has(name)) problems.push(`${where} uses ${name}, which no service exports`);
  }

if (problems.length) {
  console.error(problems.join('\n'));
  process.exit(1);
}
console.log(
  `observability: alert rules pass promtool; ${uses.length} expressions name ${named} metrics, all exported`,
);
