import 'reflect-metadata';
import { HttpException, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { ApiAuthGuard, ApiKeys, Public } from '../../src/api/auth';

class Routes {
  list() {}
  start() {}
  @Public()
  health() {}
}

const PORT = 3210;
const OPERATOR = 'operator-key-0123456789abcdefghij';

interface Req {
  method?: string;
  headers?: Record<string, string>;
  localAddress?: string;
  handler?: keyof Routes;
}

/** An HTTP request to `handler` that reached `localAddress`:PORT with `headers` (host defaults to 127.0.0.1:PORT). */
function request({ method = 'GET', headers = {}, localAddress = '127.0.0.1', handler = 'list' }: Req) {
  const req = {
    method,
    headers: { host: `127.0.0.1:${PORT}`, ...headers },
    socket: { localAddress, localPort: PORT },
  };
  const res = { setHeader: () => undefined };
  return {
    getHandler: () => Routes.prototype[handler],
    getClass: () => Routes,
    switchToHttp: () => ({ getRequest: () => req, getResponse: () => res }),
  } as unknown as ExecutionContext;
}

const outcome = (guard: ApiAuthGuard, r: Req) => {
  try {
    return guard.canActivate(request(r));
  } catch (e) {
    return e instanceof HttpException ? [e.getStatus(), (e.getResponse() as { code: string }).code] : e;
  }
};

const json = { 'content-type': 'application/json', 'content-length': '2' };
const form = { 'content-type': 'application/x-www-form-urlencoded', 'content-length': '12' };

describe('the API without keys refuses what a web page of another origin can send', () => {
  const open = new ApiAuthGuard(new Reflector(), new ApiKeys([]));

  it('a state-changing request whose body is not JSON is refused (415 UNSUPPORTED_MEDIA_TYPE): a form post or a text/plain fetch', () => {
    expect(outcome(open, { method: 'POST', handler: 'start', headers: form })).toEqual([
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    ]);
    for (const type of ['text/plain;charset=UTF-8', 'multipart/form-data; boundary=x'])
      expect([
        type,
        outcome(open, { method: 'POST', handler: 'start', headers: { 'content-type': type } }),
      ]).toEqual([type, [415, 'UNSUPPORTED_MEDIA_TYPE']]);
    // A body without any content-type is refused too; no body at all (the CLI's cancel) is not a form.
    expect(outcome(open, { method: 'POST', handler: 'start', headers: { 'content-length': '5' } })).toEqual([
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    ]);
    expect(outcome(open, { method: 'POST', handler: 'start' })).toBe(true);
    expect(outcome(open, { method: 'POST', handler: 'start', headers: json })).toBe(true);
  });

  it("an Origin that is not the API's own is refused (403 CROSS_ORIGIN_REFUSED), on every method; its own origin passes", () => {
    for (const method of ['POST', 'GET'])
      for (const origin of [
        'https://evil.example',
        'null',
        `http://127.0.0.1:${PORT + 1}`,
        `http://localhost:${PORT}`,
      ])
        expect([
          method,
          origin,
          outcome(open, { method, handler: 'start', headers: { ...json, origin } }),
        ]).toEqual([method, origin, [403, 'CROSS_ORIGIN_REFUSED']]);
    expect(
      outcome(open, {
        method: 'POST',
        handler: 'start',
        headers: { ...json, origin: `http://127.0.0.1:${PORT}` },
      }),
    ).toBe(true);
  });

  it('a browser request another site caused (Sec-Fetch-Site cross-site or same-site) is refused, public routes included; a navigation by the user is not', () => {
    for (const site of ['cross-site', 'same-site'])
      for (const handler of ['list', 'health'] as const)
        expect([
          site,
          handler,
          outcome(open, { handler, headers: { 'sec-fetch-site': site, 'sec-fetch-mode': 'no-cors' } }),
        ]).toEqual([site, handler, [403, 'CROSS_ORIGIN_REFUSED']]);
    expect(outcome(open, { headers: { 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors' } })).toBe(
      true,
    );
    expect(outcome(open, { headers: { 'sec-fetch-site': 'none', 'sec-fetch-mode': 'navigate' } })).toBe(true);
    expect(outcome(open, { headers: { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate' } })).toBe(
      true,
    );
  });

  it('a Host that does not name the listener is refused (421 HOST_NOT_ALLOWED) on every route, public ones included: DNS rebinding', () => {
    for (const host of ['evil.example', `evil.example:${PORT}`, `127.0.0.1:${PORT + 1}`, 'localhost', ''])
      for (const handler of ['list', 'health'] as const)
        expect([host, handler, outcome(open, { handler, headers: { host } })]).toEqual([
          host,
          handler,
          [421, 'HOST_NOT_ALLOWED'],
        ]);
    for (const host of [`127.0.0.1:${PORT}`, `localhost:${PORT}`, `LOCALHOST:${PORT}`, `[::1]:${PORT}`])
      expect([host, outcome(open, { headers: { host } })]).toEqual([host, true]);
    expect(outcome(open, { localAddress: '::1', headers: { host: `[::1]:${PORT}` } })).toBe(true);
  });
});

describe('the API with keys: a browser cannot send the bearer header cross-site, but Host is still checked', () => {
  const keyed = new ApiAuthGuard(
    new Reflector(),
    new ApiKeys([{ name: 'ops', key: OPERATOR, scopes: ['read', 'control'] }]),
  );
  const bearer = { authorization: `Bearer ${OPERATOR}` };

  it('a Host that does not name the listener is refused even with a valid key', () => {
    expect(outcome(keyed, { headers: { ...bearer, host: 'evil.example' } })).toEqual([
      421,
      'HOST_NOT_ALLOWED',
    ]);
    expect(outcome(keyed, { handler: 'health', headers: { host: 'evil.example' } })).toEqual([
      421,
      'HOST_NOT_ALLOWED',
    ]);
    expect(outcome(keyed, { headers: bearer })).toBe(true);
  });

  it('a state-changing request with a key still needs a JSON body', () => {
    expect(outcome(keyed, { method: 'POST', handler: 'start', headers: { ...bearer, ...form } })).toEqual([
      415,
      'UNSUPPORTED_MEDIA_TYPE',
    ]);
  });
});

describe('KEYFLOW_API_ALLOWED_HOSTS: the names a proxy forwards', () => {
  const behindProxy = new ApiAuthGuard(
    new Reflector(),
    new ApiKeys([], false, false, {
      allowed: ['api.example.com', 'other.example:8443'],
      listen: '127.0.0.1',
    }),
  );

  it('a listed name passes with any port, a listed name:port with that port only; others are refused', () => {
    for (const host of ['api.example.com', 'api.example.com:443', 'other.example:8443'])
      expect([host, outcome(behindProxy, { headers: { host } })]).toEqual([host, true]);
    for (const host of ['other.example', 'other.example:80', 'api.example.com.evil.example'])
      expect([host, outcome(behindProxy, { headers: { host } })]).toEqual([host, [421, 'HOST_NOT_ALLOWED']]);
  });

  it("the proxied page's own origin passes (Origin https://<its Host>)", () => {
    expect(
      outcome(behindProxy, {
        method: 'POST',
        handler: 'start',
        headers: { host: 'api.example.com', origin: 'https://api.example.com', ...json },
      }),
    ).toBe(true);
  });
});
