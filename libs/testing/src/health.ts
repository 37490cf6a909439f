import { eventually } from './await';

/** A service's GET /health answer: the HTTP status and the body's fields the tests read. */
export interface HealthAnswer {
  status: number;
  body: {
    status: 'ok' | 'degraded' | 'unhealthy' | string;
    failed: Array<{ component: string; code: string; error: string }>;
    degraded: Array<{ id: string; code: string; error: string }>;
    [field: string]: unknown;
  };
}

/** GET `<url>/health` once. */
export async function healthOf(url: string): Promise<HealthAnswer> {
  const r = await fetch(`${url}/health`);
  return { status: r.status, body: (await r.json()) as HealthAnswer['body'] };
}

/**
 * Polls `<url>/health` until its `degraded` list names `code`.
 * @throws AwaitTimeoutError after `timeoutMs` (default 30 000 ms) with the last answer.
 */
export function degradedWith(url: string, code: string, timeoutMs = 30_000): Promise<HealthAnswer> {
  return eventually(`/health degraded with ${code}`, () => healthOf(url), {
    until: (h) => h.body.degraded?.some((d) => d.code === code) ?? false,
    timeoutMs,
  });
}
