import type { Type } from '@nestjs/common';
import {
  EXCEPTION_FILTERS_METADATA,
  GUARDS_METADATA,
  INTERCEPTORS_METADATA,
  PIPES_METADATA,
} from '@nestjs/common/constants';
import { MetadataScanner, type ModulesContainer } from '@nestjs/core';
import { PARAM_ARGS_METADATA } from '@nestjs/microservices/constants';
import { RpcParamtype } from '@nestjs/microservices/enums/rpc-paramtype.enum';
import { ListenerMetadataExplorer } from '@nestjs/microservices/listener-metadata-explorer';
import { transformPatternToRoute } from '@nestjs/microservices/utils';
import { isObservable, lastValueFrom } from 'rxjs';
import { PASS_THROUGH_FILTER, type TaskContext, type TaskHandlerFn } from '@keyflow/handler';

/** How the handler methods of an application's controllers are called: directly, or through Nest's pipeline. */
export interface HandlerCalls {
  /** Task type (the pattern as Nest keys it, transformPatternToRoute) -> the method called directly (its arguments built from its parameter decorators). */
  direct: Map<string, TaskHandlerFn>;
  /** Task types whose method needs Nest's per-call pipeline, each with the reason (log lines, tests). */
  viaNest: Map<string, string>;
}

/**
 * The task handler methods (message patterns, as `@TaskHandler` declares them) of the application's controllers
 * that can be called without Nest's per-call pipeline, and why the others cannot.
 *
 * Nest runs each call of a handler through its RPC context: guards, interceptors, parameter pipes, its proxy and
 * exception filters, some eight promises and their closures a call, whether or not any of them is bound
 * (`bench:worker`'s allocation profile: 12 % of the worker's allocations, BENCHMARKS.md "Workers"). A method is
 * called directly when that pipeline would do nothing but call it: its controller is a singleton whose dependency
 * tree is static (a request-scoped one is made per call by Nest), of a class whose prototype and `constructor` are
 * the ones Nest made it from (not a mixin's or a Proxy's, whose metadata Nest finds its own way); no guard, interceptor or pipe is bound to the
 * method or its class; its only exception filter is `@TaskHandler`'s (marked PASS_THROUGH_FILTER; it rethrows as is); its
 * parameters are `@Payload()` and `@Ctx()` without a property name or pipe (or none: the payload alone, as Nest passes
 * it); it is a message pattern named by a string, bound to no other transport, and no other method has that
 * pattern (Nest's own scan, ListenerMetadataExplorer, lists the methods; patterns compare as Nest keys them). Global enhancers need not be looked at: the worker's microservice does not inherit the application's
 * (startKeyflowWorker connects it with `inheritAppConfig: false`), and its own are not reachable from outside.
 * Called directly, a method gets the same arguments and `this`, and its result, a thrown error, a rejection or an
 * Observable (its last value) reach the executor as they do through Nest with that filter.
 */
export function handlerCalls(modules: ModulesContainer): HandlerCalls {
  // Nest's own scan of a controller's handler methods, as its ListenersController registers them.
  const explorer = new ListenerMetadataExplorer(new MetadataScanner());
  const found = new Map<string, Array<TaskHandlerFn | string>>();
  const add = (route: string, call: TaskHandlerFn | string) =>
    found.set(route, [...(found.get(route) ?? []), call]);
  for (const module of modules.values())
    for (const wrapper of module.controllers.values()) {
      const instance = wrapper.instance as object | undefined;
      if (!instance || typeof instance !== 'object') continue;
      const cls = wrapper.metatype as Type<unknown> | null;
      // Nest finds a class's metadata through its own registry of prototypes; where `constructor` is not that class
      // (a mixin helper overwrote it, a class decorator returned a Proxy) the metadata read here could miss a guard.
      const plainClass =
        typeof cls === 'function' &&
        instance.constructor === cls &&
        Object.getPrototypeOf(instance) === cls.prototype;
      for (const h of explorer.explore(instance))
        for (const pattern of h.patterns) {
          const method = h.targetCallback as AnyMethod;
          const why = !wrapper.isDependencyTreeStatic()
            ? 'its controller is request-scoped'
            : !plainClass
              ? 'its class is not the one Nest made it from (a mixin or a Proxy)'
              : typeof pattern !== 'string'
                ? 'its pattern is not a string'
                : h.isEventHandler
                  ? 'it is an event pattern'
                  : h.transport !== undefined
                    ? 'it names a transport'
                    : whyNotDirect(cls!, h.methodKey, method);
          add(
            transformPatternToRoute(pattern),
            why ?? directCall(instance, method, params(cls!, h.methodKey) as Param[]),
          );
        }
    }
  const calls: HandlerCalls = { direct: new Map(), viaNest: new Map() };
  for (const [route, all] of found) {
    if (all.length > 1) calls.viaNest.set(route, 'more than one method has this pattern');
    else if (typeof all[0] === 'string') calls.viaNest.set(route, all[0]);
    else calls.direct.set(route, all[0]);
  }
  return calls;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type AnyMethod = (...args: any[]) => unknown;

/** A bound enhancer's metadata: present and not empty. */
const bound = (key: string, target: object) => {
  const v = Reflect.getMetadata(key, target) as unknown[] | undefined;
  return Array.isArray(v) && v.length > 0;
};

/** Why Nest's pipeline would do more than call the method, or undefined when it would not. */
function whyNotDirect(cls: Type<unknown>, key: string, method: AnyMethod): string | undefined {
  for (const [key, what] of [
    [GUARDS_METADATA, 'a guard'],
    [INTERCEPTORS_METADATA, 'an interceptor'],
    [PIPES_METADATA, 'a pipe'],
  ] as const)
    if (bound(key, cls) || bound(key, method)) return `${what} is bound`;
  const filters = (Reflect.getMetadata(EXCEPTION_FILTERS_METADATA, method) as unknown[] | undefined) ?? [];
  if (filters.length !== 1 || (filters[0] as Record<symbol, unknown>)?.[PASS_THROUGH_FILTER] !== true)
    return 'its exception filters are not only @TaskHandler’s';
  for (const p of params(cls, key)) if (typeof p === 'string') return p;
  return undefined;
}

/** A parameter: its position, and whether it gets the payload (0) or the context (1), as Nest's `[payload, ctx]`. */
interface Param {
  index: number;
  arg: 0 | 1;
}

/** Method `key`'s parameters as Nest's RPC context reads them, or why one cannot be built without it. */
function params(cls: Type<unknown>, key: string): Array<Param | string> {
  const meta = Reflect.getMetadata(PARAM_ARGS_METADATA, cls, key) as
    Record<string, { index: number; data?: unknown; pipes?: unknown[] }> | undefined;
  // Without parameter decorators, Nest passes the payload alone (its DEFAULT_CALLBACK_METADATA).
  if (!meta) return [{ index: 0, arg: 0 }];
  return Object.entries(meta).map(([key, p]) => {
    const type = Number(key.split(':')[0]);
    if (p.data !== undefined) return 'a parameter decorator names a property';
    if (p.pipes && p.pipes.length > 0) return 'a parameter has a pipe';
    if (type === RpcParamtype.PAYLOAD) return { index: p.index, arg: 0 as const };
    if (type === RpcParamtype.CONTEXT) return { index: p.index, arg: 1 as const };
    return 'a parameter has a custom decorator';
  });
}

/** The method called with its parameters' values, as Nest's RPC context builds them, its result as the transport reads it. */
function directCall(instance: object, method: AnyMethod, ps: Param[]): TaskHandlerFn {
  const length = ps.reduce((n, p) => Math.max(n, p.index + 1), 0);
  const resolved = (out: unknown) => (isObservable(out) ? lastValueFrom(out, { defaultValue: null }) : out);
  return (input: unknown, ctx: TaskContext): Promise<unknown> => {
    // Nest fills a position no decorator names with undefined (ContextUtils.createNullArray, despite its name).
    const args: unknown[] = new Array(length).fill(undefined);
    for (const p of ps) args[p.index] = p.arg === 0 ? input : ctx;
    try {
      const out = method.apply(instance, args);
      // Nest awaits what the method returns: a promise or any thenable is followed, anything else is the value.
      return isThenable(out) ? Promise.resolve(out).then(resolved) : Promise.resolve(resolved(out));
    } catch (e) {
      return Promise.reject(e);
    }
  };
}

const isThenable = (v: unknown): v is PromiseLike<unknown> =>
  (typeof v === 'object' || typeof v === 'function') &&
  v !== null &&
  typeof (v as { then?: unknown }).then === 'function';
