/**
 * One series' value from a service's Prometheus exposition (`GET <url>/metrics`), by metric name (with its
 * `keyflow_` prefix) and labels, all of which must match (a service adds its own `service` label to every series);
 * 0 when no such series is exposed yet.
 * @throws what fetch throws when the service does not answer
 */
export async function metricValue(
  url: string,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text
    .split('\n')
    .find(
      (l) => l.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)),
    );
  return line ? Number(line.split(' ').at(-1)) : 0;
}
