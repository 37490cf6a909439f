import { createHash, timingSafeEqual } from 'node:crypto';
import {
  HttpException,
  Inject,
  Injectable,
  SetMetadata,
  type CanActivate,
  type ExecutionContext,
} from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { Request, Response } from 'express';
import { z } from 'zod';
import { crossSiteRefusal, type HostPolicy } from './cross-site';

/**
 * What an API key may do: `read` (runs, DLQ records, lag: every GET) and `control` (start, cancel, terminate, signal,
 * retry runs; redrive and discard DLQ records).
 */
export const API_SCOPES = ['read', 'control'] as const;
export type ApiScope = (typeof API_SCOPES)[number];

/** Shortest API key accepted, in characters (a key is a bearer secret: guessing must be out of reach). */
export const API_KEY_MIN_CHARS = 24;

/** The JSON of KEYFLOW_API_KEYS (or of the file KEYFLOW_API_KEYS_FILE names): one entry per caller. */
export const ApiKeysSchema = z
  .array(
    z
      .object({
        /** Who the key is for: named in 403 answers, never the key. */
        name: z.string().min(1).max(100),
        /** A bearer token (RFC 6750 b64token characters), so it can travel in `Authorization: Bearer`. */
        key: z
          .string()
          .min(API_KEY_MIN_CHARS, `at least ${API_KEY_MIN_CHARS} characters`)
          .regex(/^[A-Za-z0-9._~+/-]+=*$/, 'letters, digits and -._~+/ only (a bearer token)'),
        scopes: z.array(z.enum(API_SCOPES)).min(1),
      })
      .strict(),
  )
  .min(1, 'at least one key (an empty list would turn authentication off)')
  .refine((keys) => new Set(keys.map((k) => k.name)).size === keys.length, 'names must be distinct')
  .refine((keys) => new Set(keys.map((k) => k.key)).size === keys.length, 'each key must be different');
export type ApiKeyEntry = z.infer<typeof ApiKeysSchema>[number];

/** Injection token of the API's {@link ApiKeys}. */
export const API_KEYS = Symbol('API_KEYS');

const PUBLIC = 'keyflow:public';
const SCOPES = 'keyflow:scopes';
const METRICS = 'keyflow:metrics';
const SIGNED = 'keyflow:signed';
const ANY_KEY = 'keyflow:any-key';
/** A route anyone may call (health, the signed webhook door). */
export const Public = () => SetMetadata(PUBLIC, true);
/**
 * A route that authenticates each request by a signature over its body (the Standard Webhooks door): exempt from the
 * Origin and content-type rules of `crossSiteRefusal` (a page cannot sign), not from the Host rule.
 */
export const SignedRequest = () => SetMetadata(SIGNED, true);
/** The metrics route: public unless KEYFLOW_METRICS_AUTH (decided by the route, not by its URL's spelling). */
export const MetricsRoute = () => SetMetadata(METRICS, true);
/**
 * A loopback address, as a socket reports it (IPv4 127/8, IPv6 ::1, IPv4-mapped 127/8) or as a host setting names
 * it (`localhost`): an API reached there is reachable from this machine alone.
 */
export const LOOPBACK_ADDRESS =
  /^(127\.\d+\.\d+\.\d+|::1|0:0:0:0:0:0:0:1|::ffff:127\.\d+\.\d+\.\d+|localhost\.?)$/i;

/** The scope a route needs; without this decorator a GET needs `read` and anything else `control`. */
export const RequireScope = (scope: ApiScope) => SetMetadata(SCOPES, scope);
/**
 * A route any known key may call, whatever its scopes (`GET /ops/me`: a key must learn what it may do even when it
 * lacks `read`). Still 401 without a known key, and still under the cross-site rules.
 */
export const AnyScope = () => SetMetadata(ANY_KEY, true);

/**
 * Who the guard let through (`GET /ops/me` answers it): with API keys, the key's `name` from KEYFLOW_API_KEYS (never
 * the key) and its scopes, in {@link API_SCOPES} order; without keys (authentication off, loopback or
 * KEYFLOW_API_INSECURE) `name` null and every scope, since every route then passes.
 */
export interface ApiCaller {
  authentication: boolean;
  name: string | null;
  scopes: ApiScope[];
}
const callers = new WeakMap<object, ApiCaller>();
/** The caller {@link ApiAuthGuard} recorded for `req`, or undefined on a public route (nobody was identified). */
export const callerOf = (req: object): ApiCaller | undefined => callers.get(req);

const digest = (key: string) => createHash('sha256').update(key, 'utf8').digest();

/**
 * The API keys, kept as SHA-256 digests and compared in constant time. Credentials come as
 * `Authorization: Bearer <key>` (RFC 6750) or `X-API-Key: <key>`. With no keys configured authentication is off
 * (`enabled` false): the API then answers only requests that reached a loopback address (the guard), and
 * `bootstrapOrchestrator` listens only on one (see config `requireApiSettings`), unless `insecure`.
 */
export class ApiKeys {
  private readonly entries: Array<{ name: string; digest: Buffer; scopes: ReadonlySet<ApiScope> }>;

  constructor(
    keys: ApiKeyEntry[],
    /** Whether GET /metrics needs `read` too (KEYFLOW_METRICS_AUTH). */
    readonly metricsNeedAuth = false,
    /** Without keys, whether requests that reached a non-loopback address pass (KEYFLOW_API_INSECURE). */
    readonly insecure = false,
    /** The names a request's Host may give besides the listener's address (KEYFLOW_API_ALLOWED_HOSTS). */
    readonly hosts: HostPolicy = { allowed: [] },
  ) {
    this.entries = keys.map((k) => ({ name: k.name, digest: digest(k.key), scopes: new Set(k.scopes) }));
  }

  get enabled(): boolean {
    return this.entries.length > 0;
  }

  /** The key's owner and scopes, or undefined when it matches none. Every entry is compared (no early exit). */
  identify(key: string): { name: string; scopes: ReadonlySet<ApiScope> } | undefined {
    const d = digest(key);
    let found: (typeof this.entries)[number] | undefined;
    for (const e of this.entries) if (timingSafeEqual(e.digest, d)) found ??= e;
    return found && { name: found.name, scopes: found.scopes };
  }
}

/** The key a request carries: `Authorization: Bearer <key>` or `X-API-Key: <key>`, else undefined. */
export function credentialsOf(req: Pick<Request, 'headers'>): string | undefined {
  const auth = req.headers.authorization;
  if (typeof auth === 'string') {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    if (m) return m[1];
  }
  const key = req.headers['x-api-key'];
  return typeof key === 'string' && key.length > 0 ? key : undefined;
}

/**
 * Guards keyflow's controllers (runs, ops, health). First, on every route: a request a web page of another origin
 * could have sent is refused (`crossSiteRefusal`: 421 HOST_NOT_ALLOWED for a Host that does not name the listener,
 * without keys 403 CROSS_ORIGIN_REFUSED for another Origin, 415 UNSUPPORTED_MEDIA_TYPE for a body that is not JSON).
 * Then public routes pass (and metrics unless KEYFLOW_METRICS_AUTH);
 * others need a known key (401 UNAUTHENTICATED, with `WWW-Authenticate: Bearer`, RFC 6750 section 3) with the
 * route's scope (403 FORBIDDEN naming the scope; any scope on an {@link AnyScope} route), and records who passed
 * ({@link callerOf}). Without keys configured, a request that reached a loopback
 * address passes and any other gets 403 API_KEYS_REQUIRED, unless KEYFLOW_API_INSECURE.
 */
@Injectable()
export class ApiAuthGuard implements CanActivate {
  constructor(
    @Inject(Reflector) private readonly reflector: Reflector,
    @Inject(API_KEYS) private readonly keys: ApiKeys,
  ) {}

  canActivate(ctx: ExecutionContext): boolean {
    const targets = [ctx.getHandler(), ctx.getClass()];
    const req = ctx.switchToHttp().getRequest<Request>();
    const refused = crossSiteRefusal(
      req,
      this.keys.hosts,
      this.keys.enabled,
      this.reflector.getAllAndOverride<boolean>(SIGNED, targets) === true,
    );
    if (refused) throw new HttpException({ message: refused.message, code: refused.code }, refused.status);
    const isMetrics = this.reflector.getAllAndOverride<boolean>(METRICS, targets) === true;
    if (isMetrics ? !this.keys.metricsNeedAuth : this.reflector.getAllAndOverride<boolean>(PUBLIC, targets))
      return true;
    if (!this.keys.enabled) {
      // An application on KeyflowOrchestratorModule listens where it wants: without keys, loopback only.
      if (this.keys.insecure || LOOPBACK_ADDRESS.test(req.socket?.localAddress ?? '')) {
        callers.set(req, { authentication: false, name: null, scopes: [...API_SCOPES] });
        return true;
      }
      throw new HttpException(
        {
          message:
            'this API has no API keys and answers only on a loopback address: set KEYFLOW_API_KEYS ' +
            '(or KEYFLOW_API_INSECURE=true)',
          code: 'API_KEYS_REQUIRED',
        },
        403,
      );
    }
    const needed =
      this.reflector.getAllAndOverride<ApiScope | undefined>(SCOPES, targets) ??
      (req.method === 'GET' || req.method === 'HEAD' ? 'read' : 'control');
    const key = credentialsOf(req);
    const who = key === undefined ? undefined : this.keys.identify(key);
    if (!who) {
      ctx
        .switchToHttp()
        .getResponse<Response>()
        .setHeader(
          'WWW-Authenticate',
          `Bearer realm="keyflow"${key === undefined ? '' : ', error="invalid_token"'}`,
        );
      throw new HttpException(
        {
          message:
            key === undefined
              ? 'authentication required: send Authorization: Bearer <API key> (or X-API-Key)'
              : 'unknown API key',
          code: 'UNAUTHENTICATED',
        },
        401,
      );
    }
    if (this.reflector.getAllAndOverride<boolean>(ANY_KEY, targets) !== true && !who.scopes.has(needed)) {
      ctx
        .switchToHttp()
        .getResponse<Response>()
        .setHeader(
          'WWW-Authenticate',
          `Bearer realm="keyflow", error="insufficient_scope", scope="${needed}"`,
        );
      throw new HttpException(
        { message: `the API key ${who.name} lacks the ${needed} scope`, code: 'FORBIDDEN', scope: needed },
        403,
      );
    }
    callers.set(req, {
      authentication: true,
      name: who.name,
      scopes: API_SCOPES.filter((s) => who.scopes.has(s)),
    });
    return true;
  }
}
