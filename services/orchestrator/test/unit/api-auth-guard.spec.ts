import 'reflect-metadata';
import { HttpException, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { AnyScope, ApiAuthGuard, ApiKeys, callerOf, Public } from '../../src/api/auth';

class Routes {
  list() {}
  @Public()
  health() {}
}

/** An HTTP request to `handler` that arrived on the local address `localAddress`, without credentials. */
function request(localAddress: string, handler: keyof Routes = 'list'): ExecutionContext {
  const req = {
    method: 'GET',
    headers: { host: '127.0.0.1:3000' },
    socket: { localAddress, localPort: 3000 },
  };
  const res = { setHeader: () => undefined };
  return {
    getHandler: () => Routes.prototype[handler],
    getClass: () => Routes,
    switchToHttp: () => ({ getRequest: () => req, getResponse: () => res }),
  } as unknown as ExecutionContext;
}

const refusal = (guard: ApiAuthGuard, ctx: ExecutionContext) => {
  try {
    return guard.canActivate(ctx);
  } catch (e) {
    return e instanceof HttpException ? [e.getStatus(), (e.getResponse() as { code: string }).code] : e;
  }
};

describe('the API guard without API keys (an application that listens where it wants: KeyflowOrchestratorModule)', () => {
  const open = new ApiAuthGuard(new Reflector(), new ApiKeys([]));

  it('a request that reached a loopback address passes', () => {
    for (const address of ['127.0.0.1', '::1', '::ffff:127.0.0.1'])
      expect([address, open.canActivate(request(address))]).toEqual([address, true]);
  });

  it('a request that reached another address is refused (403 API_KEYS_REQUIRED): an API without keys answers only on loopback', () => {
    for (const address of ['10.1.2.3', '::ffff:192.168.0.7', 'fe80::1'])
      expect([address, refusal(open, request(address))]).toEqual([address, [403, 'API_KEYS_REQUIRED']]);
  });

  it('public routes (health, the webhook) and KEYFLOW_API_INSECURE=true pass from anywhere', () => {
    expect(open.canActivate(request('10.1.2.3', 'health'))).toBe(true);
    const insecure = new ApiAuthGuard(new Reflector(), new ApiKeys([], false, true));
    expect(insecure.canActivate(request('10.1.2.3'))).toBe(true);
  });
});

describe('the API guard records who passed (GET /ops/me answers it)', () => {
  class Keyed {
    list() {}
    @AnyScope()
    me() {}
  }
  const READER = 'reader-key-0123456789abcdefghij';
  const keyed = new ApiAuthGuard(
    new Reflector(),
    new ApiKeys([{ name: 'dashboards', key: READER, scopes: ['read'] }]),
  );
  /** A GET (or POST) to `handler` of Keyed with `key`, and the request object the guard sees. */
  function call(handler: keyof Keyed, key?: string, method = 'GET') {
    const req = {
      method,
      headers: {
        host: '127.0.0.1:3000',
        'content-type': 'application/json',
        ...(key ? { authorization: `Bearer ${key}` } : {}),
      },
      socket: { localAddress: '127.0.0.1', localPort: 3000 },
    };
    const ctx = {
      getHandler: () => Keyed.prototype[handler],
      getClass: () => Keyed,
      switchToHttp: () => ({ getRequest: () => req, getResponse: () => ({ setHeader: () => undefined }) }),
    } as unknown as ExecutionContext;
    return { req, ctx };
  }

  it("a known key's name and scopes, never the key; nothing recorded for a refused request", () => {
    const ok = call('list', READER);
    expect(keyed.canActivate(ok.ctx)).toBe(true);
    expect(callerOf(ok.req)).toEqual({ authentication: true, name: 'dashboards', scopes: ['read'] });
    expect(JSON.stringify(callerOf(ok.req))).not.toContain(READER);
    const unknown = call('me', 'x'.repeat(30));
    expect(refusal(keyed, unknown.ctx)).toEqual([401, 'UNAUTHENTICATED']);
    expect(callerOf(unknown.req)).toBeUndefined();
  });

  it('an AnyScope route passes any known key whatever the scope its method would need; others still need it', () => {
    const me = call('me', READER, 'POST');
    expect(keyed.canActivate(me.ctx)).toBe(true);
    expect(callerOf(me.req)?.scopes).toEqual(['read']);
    expect(refusal(keyed, call('list', READER, 'POST').ctx)).toEqual([403, 'FORBIDDEN']);
    expect(refusal(keyed, call('me').ctx)).toEqual([401, 'UNAUTHENTICATED']);
  });

  it('without keys (authentication off, loopback) the caller is nobody with every scope', () => {
    const open = new ApiAuthGuard(new Reflector(), new ApiKeys([]));
    const r = call('me');
    expect(open.canActivate(r.ctx)).toBe(true);
    expect(callerOf(r.req)).toEqual({ authentication: false, name: null, scopes: ['read', 'control'] });
  });
});
