import type { IncomingHttpHeaders } from 'node:http';
import type { NextFunction, Request, Response } from 'express';

/**
 * What the API refuses because a web page, not its operator, could have sent it (docs/guarantees/browser-requests.md).
 *
 * - **Host** (every request, with or without API keys): the `Host` header must name the listener: the address the
 *   connection reached, `localhost`, `127.0.0.1`, `[::1]` or ORCHESTRATOR_HTTP_HOST, each with the listener's port;
 *   or a name of KEYFLOW_API_ALLOWED_HOSTS (a proxy's public name). Otherwise 421 `HOST_NOT_ALLOWED`: a page under a
 *   DNS name rebound to this machine (DNS rebinding) is same-origin with the API for its browser, and would read it.
 * - **Origin** (without API keys, except routes a signature authenticates): an `Origin` header that is not the API's
 *   own (`http(s)://<Host>`), `Origin: null`, or `Sec-Fetch-Site: cross-site | same-site` on anything but a GET
 *   navigation: 403 `CROSS_ORIGIN_REFUSED`. Browsers send Origin with every POST, also a form's or a no-cors fetch's.
 *   With API keys the rule is off: a page cannot send `Authorization` or `X-API-Key` cross-site without a CORS
 *   preflight, which the API never grants (it sends no CORS headers).
 * - **Content type** (every state-changing request, with or without keys, except signed routes): a body must be
 *   `application/json` (or `application/<x>+json`); a form (`application/x-www-form-urlencoded`,
 *   `multipart/form-data`) or `text/plain`, which pages send cross-site without a preflight, is 415
 *   `UNSUPPORTED_MEDIA_TYPE`. A request without a body (no content-length, or 0, and no transfer-encoding) needs none.
 *
 * Sources: Fetch Standard, CORS-safelisted request headers and `Origin` on non-GET requests
 * (https://fetch.spec.whatwg.org/#cors-safelisted-request-header, https://fetch.spec.whatwg.org/#origin-header);
 * Fetch Metadata (https://w3c.github.io/webappsec-fetch-metadata/); RFC 9110 section 7.2 (Host) and 15.5.20 (421).
 */
export const HOST_NOT_ALLOWED = 'HOST_NOT_ALLOWED';
export const CROSS_ORIGIN_REFUSED = 'CROSS_ORIGIN_REFUSED';
export const UNSUPPORTED_MEDIA_TYPE = 'UNSUPPORTED_MEDIA_TYPE';

/** Where the API may be reached by name, beyond the listener's own address. */
export interface HostPolicy {
  /**
   * KEYFLOW_API_ALLOWED_HOSTS, lowercased: `name` (any port), `name:port`, `[v6]` or `[v6]:port`; `*` turns the Host
   * check off (a proxy in front checks it).
   */
  allowed: readonly string[];
  /** ORCHESTRATOR_HTTP_HOST when it is a name: allowed with the listener's port. */
  listen?: string;
}

/** A refusal: the HTTP status, the error list's code and a message for the caller. */
export interface CrossSiteRefusal {
  status: 403 | 415 | 421;
  code: string;
  message: string;
}

/** What the checks read of a request (Express's, or Node's IncomingMessage). */
export interface RequestLike {
  method?: string;
  headers: IncomingHttpHeaders;
  socket?: { localAddress?: string; localPort?: number };
}

const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '::1']);
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const JSON_TYPE = /^application\/([a-z0-9.!#$&^_-]+\+)?json\s*(;|$)/i;

/** A Host header's name (IPv6 without brackets) and port (undefined when absent), lowercased; undefined if malformed. */
export function parseHost(host: string): { name: string; port?: number } | undefined {
  const m = /^(?:\[([0-9a-f:.]+)\]|([a-z0-9._~-]+))(?::(\d{1,5}))?$/i.exec(host.trim());
  if (!m) return undefined;
  return { name: (m[1] ?? m[2]).toLowerCase(), port: m[3] === undefined ? undefined : Number(m[3]) };
}

/** The address a socket reports, as a Host header would name it (IPv4-mapped IPv6 as IPv4). */
const addressName = (a: string | undefined) =>
  a?.toLowerCase().replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, '$1');

/** Whether `host` (a Host header) names this listener or an allowed name. */
export function hostAllowed(
  host: string | undefined,
  localAddress: string | undefined,
  localPort: number | undefined,
  policy: HostPolicy,
): boolean {
  if (policy.allowed.includes('*')) return true;
  const h = host === undefined ? undefined : parseHost(host);
  if (!h) return false;
  // A name of the allow-list: any port (a proxy's public port), or the one it names.
  if (
    policy.allowed.includes(h.name) ||
    policy.allowed.includes(h.name.includes(':') ? `[${h.name}]` : h.name)
  )
    return true;
  const port = h.port ?? 80;
  const entry = h.name.includes(':') ? `[${h.name}]:${port}` : `${h.name}:${port}`;
  if (policy.allowed.includes(entry)) return true;
  if (localPort === undefined || port !== localPort) return false;
  return (
    LOOPBACK_NAMES.has(h.name) ||
    h.name === addressName(localAddress) ||
    h.name === policy.listen?.toLowerCase()
  );
}

const header = (headers: IncomingHttpHeaders, name: string): string | undefined => {
  const v = headers[name];
  return Array.isArray(v) ? v[0] : v;
};

/**
 * The refusal a request gets, or undefined when it passes (the rules above).
 * @param keysEnabled API keys are configured (the Origin rule is off)
 * @param signed the route authenticates the request by a signature over its body (Standard Webhooks): the Origin and
 *   content-type rules do not apply to it, the Host rule does
 */
export function crossSiteRefusal(
  req: RequestLike,
  policy: HostPolicy,
  keysEnabled: boolean,
  signed = false,
): CrossSiteRefusal | undefined {
  const host = header(req.headers, 'host');
  if (!hostAllowed(host, req.socket?.localAddress, req.socket?.localPort, policy))
    return {
      status: 421,
      code: HOST_NOT_ALLOWED,
      message:
        `the Host header (${host ?? 'none'}) does not name this API's listener: use its address, localhost or ` +
        '127.0.0.1 with its port, or add the name to KEYFLOW_API_ALLOWED_HOSTS',
    };
  if (signed) return undefined;
  const method = (req.method ?? 'GET').toUpperCase();
  if (!keysEnabled) {
    const origin = header(req.headers, 'origin');
    if (origin !== undefined && !sameOrigin(origin, host!))
      return {
        status: 403,
        code: CROSS_ORIGIN_REFUSED,
        message: `a request from another origin (${origin.slice(0, 200)}) is refused by an API without API keys`,
      };
    const site = header(req.headers, 'sec-fetch-site');
    const navigation =
      (method === 'GET' || method === 'HEAD') && header(req.headers, 'sec-fetch-mode') === 'navigate';
    if ((site === 'cross-site' || site === 'same-site') && !navigation)
      return {
        status: 403,
        code: CROSS_ORIGIN_REFUSED,
        message: `a request another site's page made (Sec-Fetch-Site: ${site}) is refused by an API without API keys`,
      };
  }
  if (!SAFE_METHODS.has(method)) {
    const type = header(req.headers, 'content-type');
    const length = header(req.headers, 'content-length');
    const hasBody =
      (length !== undefined && length !== '0') || header(req.headers, 'transfer-encoding') !== undefined;
    if (type === undefined ? hasBody : !JSON_TYPE.test(type))
      return {
        status: 415,
        code: UNSUPPORTED_MEDIA_TYPE,
        message: `the body must be JSON (content-type: application/json), not ${type ?? 'untyped'}`,
      };
  }
  return undefined;
}

function sameOrigin(origin: string, host: string): boolean {
  try {
    const u = new URL(origin);
    return (u.protocol === 'http:' || u.protocol === 'https:') && u.host === host.trim().toLowerCase();
  } catch {
    return false; // `null` (a sandboxed frame, a file: page) or garbage
  }
}

/**
 * Express middleware applying the Host rule to every request of the application (the console's files, /docs, the
 * application's own routes); keyflow's controllers apply all three rules in their guard (`ApiAuthGuard`).
 * Answers `{message, code}` JSON with the refusal's status.
 */
export function hostCheck(policy: HostPolicy) {
  return (req: Request, res: Response, next: NextFunction) => {
    const host = req.headers.host;
    if (hostAllowed(host, req.socket.localAddress, req.socket.localPort, policy)) return next();
    const r = crossSiteRefusal(req, policy, true, true)!;
    res.status(r.status).json({ message: r.message, code: r.code });
  };
}
