import { CliError, type ApiEndpoint } from './context';

/** The orchestrator answered with an error status; `status` is the HTTP status, `body` its JSON (or text). */
export class ApiError extends CliError {
  constructor(
    readonly status: number,
    readonly body: unknown,
    what: string,
  ) {
    const msg = (body as { message?: unknown })?.message;
    super(
      'API_ERROR',
      `${what}: HTTP ${status}${msg ? `: ${Array.isArray(msg) ? msg.join('; ') : String(msg)}` : ''}`,
      status >= 500 || status === 429,
    );
  }
}

/**
 * Calls the orchestrator's run API (docs/workflows.md "API") with the endpoint's key, if any. `path` starts with `/`.
 * @throws ApiError on a non-2xx answer (401 without a valid key, 403 without the route's scope); fetch's TypeError
 *   when nothing answers at the endpoint's URL
 */
export async function api<T>(
  endpoint: ApiEndpoint,
  method: 'GET' | 'POST',
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<T> {
  const res = await fetch(`${endpoint.url}${path}`, {
    method,
    headers: {
      accept: 'application/json',
      ...(endpoint.key ? { authorization: `Bearer ${endpoint.key}` } : {}),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    /* keep the text */
  }
  if (!res.ok) throw new ApiError(res.status, parsed, `${method} ${path}`);
  return parsed as T;
}
