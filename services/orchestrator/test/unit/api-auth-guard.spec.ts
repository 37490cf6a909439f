import 'reflect-metadata';
import { HttpException, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { ApiAuthGuard, ApiKeys, Public } from '../../src/api/auth';

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
