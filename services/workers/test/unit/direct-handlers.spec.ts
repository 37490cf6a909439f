import 'reflect-metadata';
import {
  Controller,
  Injectable,
  Module,
  ParseIntPipe,
  Scope,
  UseFilters,
  UseGuards,
  UseInterceptors,
  UsePipes,
  createParamDecorator,
  type CallHandler,
  type CanActivate,
  type ExecutionContext,
  type NestInterceptor,
  type Type,
} from '@nestjs/common';
import { ModulesContainer, NestFactory } from '@nestjs/core';
import {
  BaseRpcExceptionFilter,
  Ctx,
  EventPattern,
  MessagePattern,
  Payload,
  Server,
  type CustomTransportStrategy,
  type MessageHandler,
} from '@nestjs/microservices';
import { EMPTY, isObservable, lastValueFrom, of, type Observable } from 'rxjs';
import { TaskHandler } from '@keyflow/nestjs';
import type { TaskContext } from '@keyflow/handler';
import { handlerCalls } from '../../src/transport/direct-handlers';

@Injectable()
class Tap implements NestInterceptor {
  intercept(_: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle();
  }
}
@Injectable()
class Allow implements CanActivate {
  canActivate(): boolean {
    return true;
  }
}
const Custom = createParamDecorator((_: unknown, ctx: ExecutionContext) => ctx.switchToRpc().getData());

class Boom extends Error {}

@Controller()
class Plain {
  readonly tag = 'plain';
  @TaskHandler('t.both')
  both(@Payload() input: unknown, @Ctx() ctx: TaskContext) {
    return Promise.resolve({ input, ctx, self: this.tag });
  }
  @TaskHandler('t.swapped')
  swapped(@Ctx() ctx: TaskContext, @Payload() input: unknown) {
    return { input, ctx };
  }
  @TaskHandler('t.bare')
  bare(...args: unknown[]) {
    return args;
  }
  @TaskHandler('t.observable')
  observable() {
    return of(1, 2, 3);
  }
  @TaskHandler('t.empty')
  empty() {
    return EMPTY;
  }
  @TaskHandler('t.throws')
  throws(): never {
    throw new Boom('sync');
  }
  @TaskHandler('t.rejects')
  async rejects(): Promise<never> {
    throw new Boom('async');
  }
  @TaskHandler('t.thenable')
  thenable() {
    return { then: (ok: (v: unknown) => void) => ok('from a thenable') };
  }
  @TaskHandler('t.ctx-only')
  ctxOnly(input: unknown, @Ctx() ctx: TaskContext) {
    return [input === undefined, arguments.length, ctx];
  }
  @TaskHandler('t.undefined')
  nothing() {
    return undefined;
  }
  @TaskHandler('t.throws-value')
  throwsValue(): never {
    throw 'a string';
  }
  @TaskHandler('t.observable-promise')
  async observablePromise() {
    return of('a', 'b');
  }
}

/** Nest's own way to a handler: a transport that only collects what Nest registers. */
class Collect extends Server implements CustomTransportStrategy {
  listen(cb: () => void) {
    cb();
  }
  close() {}
  on() {}
  unwrap<T>(): T {
    return undefined as T;
  }
}

/** What the worker's transport read from Nest's handler before: the value, or an Observable's last value. */
async function throughNest(h: MessageHandler, input: unknown, c: TaskContext): Promise<unknown> {
  const out: unknown = await h(input, c);
  return isObservable(out) ? lastValueFrom(out, { defaultValue: null }) : out;
}

const settled = (p: Promise<unknown>) =>
  p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );

@Controller()
@UseInterceptors(Tap)
class Intercepted {
  @TaskHandler('n.class-interceptor')
  a() {
    return 1;
  }
}

@Controller()
class Enhanced {
  @TaskHandler('n.guard')
  @UseGuards(Allow)
  guard() {
    return 1;
  }
  @TaskHandler('n.pipe')
  @UsePipes(ParseIntPipe)
  pipe() {
    return 1;
  }
  @TaskHandler('n.param-pipe')
  paramPipe(@Payload(ParseIntPipe) n: number) {
    return n;
  }
  @TaskHandler('n.property')
  property(@Payload('id') id: string) {
    return id;
  }
  @TaskHandler('n.custom')
  custom(@Custom() v: unknown) {
    return v;
  }
  @UseFilters(new BaseRpcExceptionFilter())
  @TaskHandler('n.filter')
  filter() {
    return 1;
  }
  @MessagePattern('n.no-task-handler')
  plainPattern() {
    return 1;
  }
  @EventPattern('n.event')
  event() {
    return 1;
  }
  @TaskHandler('n.twice')
  twiceHere() {
    return 1;
  }
}

@Controller()
class Twice {
  @TaskHandler('n.twice')
  twiceThere() {
    return 2;
  }
}

/** A mixin helper's class: its prototype's `constructor` overwritten (Nest finds its metadata another way). */
@Controller()
class Mixed {
  @TaskHandler('n.mixin')
  a() {
    return 1;
  }
}
Object.defineProperty(Mixed.prototype, 'constructor', { value: Object, writable: true, configurable: true });

@Controller({ scope: Scope.REQUEST })
class PerRequest {
  @TaskHandler('n.request-scoped')
  a() {
    return 1;
  }
}

async function callsOf(...controllers: Type<unknown>[]) {
  @Module({ controllers, providers: [Tap, Allow] })
  class M {}
  const app = await NestFactory.createApplicationContext(M, { logger: false });
  try {
    return handlerCalls(app.get(ModulesContainer));
  } finally {
    await app.close();
  }
}

const ctx = { attempt: 1 } as unknown as TaskContext;

describe('handlerCalls: which @TaskHandler methods skip Nest’s per-call pipeline', () => {
  it('calls a method with nothing of Nest bound directly, with the arguments Nest would pass', async () => {
    const { direct, viaNest } = await callsOf(Plain);
    expect([...viaNest.keys()]).toEqual([]);
    expect(await direct.get('t.both')!({ a: 1 }, ctx)).toEqual({ input: { a: 1 }, ctx, self: 'plain' });
    expect(await direct.get('t.swapped')!('in', ctx)).toEqual({ input: 'in', ctx });
    // Without parameter decorators Nest passes the payload alone (DEFAULT_CALLBACK_METADATA).
    expect(await direct.get('t.bare')!('in', ctx)).toEqual(['in']);
  });

  it('answers what the transport read through Nest: an Observable’s last value, null for none, a thenable’s value', async () => {
    const { direct } = await callsOf(Plain);
    expect(await direct.get('t.observable')!(null, ctx)).toBe(3);
    expect(await direct.get('t.empty')!(null, ctx)).toBeNull();
    expect(await direct.get('t.thenable')!(null, ctx)).toBe('from a thenable');
  });

  it('rejects with the very error the method throws or rejects with (the executor reads its class)', async () => {
    const { direct } = await callsOf(Plain);
    const sync = direct.get('t.throws')!(null, ctx);
    await expect(sync).rejects.toBeInstanceOf(Boom);
    await expect(sync).rejects.toThrow('sync');
    await expect(direct.get('t.rejects')!(null, ctx)).rejects.toBeInstanceOf(Boom);
  });

  it('answers each call as Nest’s pipeline does: the same value, or a rejection with the same error', async () => {
    @Module({ controllers: [Plain] })
    class M {}
    const app = await NestFactory.create(M, { logger: false });
    try {
      const collect = new Collect();
      app.connectMicroservice({ strategy: collect }, { inheritAppConfig: false });
      await app.init();
      const { direct } = handlerCalls(app.get(ModulesContainer));
      const nest = collect.getHandlers();
      expect([...direct.keys()].sort()).toEqual([...nest.keys()].sort());
      for (const [pattern, call] of direct)
        for (const input of [{ a: 1 }, undefined, null, 'text']) {
          const [viaNest, viaDirect] = await Promise.all([
            settled(throughNest(nest.get(pattern)!, input, ctx)),
            settled(call(input, ctx)),
          ]);
          expect({ pattern, input, ...viaDirect }).toStrictEqual({ pattern, input, ...viaNest });
        }
    } finally {
      await app.close();
    }
  });

  it('leaves to Nest every method a guard, interceptor, pipe, filter, custom or named parameter, scope or clash concerns', async () => {
    const { direct, viaNest } = await callsOf(Intercepted, Enhanced, Twice, PerRequest, Mixed);
    expect([...direct.keys()]).toEqual([]);
    expect(Object.fromEntries(viaNest)).toEqual({
      'n.class-interceptor': 'an interceptor is bound',
      'n.guard': 'a guard is bound',
      'n.pipe': 'a pipe is bound',
      'n.param-pipe': 'a parameter has a pipe',
      'n.property': 'a parameter decorator names a property',
      'n.custom': 'a parameter has a custom decorator',
      'n.filter': 'its exception filters are not only @TaskHandler’s',
      'n.no-task-handler': 'its exception filters are not only @TaskHandler’s',
      'n.event': 'it is an event pattern',
      'n.twice': 'more than one method has this pattern',
      'n.request-scoped': 'its controller is request-scoped',
      'n.mixin': 'its class is not the one Nest made it from (a mixin or a Proxy)',
    });
  });
});
