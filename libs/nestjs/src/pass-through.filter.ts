import { Catch, type RpcExceptionFilter } from '@nestjs/common';
import { throwError, type Observable } from 'rxjs';
import { PASS_THROUGH_FILTER } from '@keyflow/handler';

/**
 * Lets a task handler's exception reach the task executor unchanged. Nest's default RPC filter would turn it into
 * `{ status: 'error', message }`, losing the class that says whether it is retryable (which the worker's
 * task executor reads). Applied by `@TaskHandler` to each handler method, so the application's own
 * filters (global or not) keep handling its HTTP routes; the worker's transport calls a method whose only filter is
 * this one without Nest's pipeline (handlerCalls in @keyflow/workers).
 */
@Catch()
export class PassThroughRpcFilter implements RpcExceptionFilter<unknown> {
  /** The mark the worker's transport knows this filter by (PASS_THROUGH_FILTER, @keyflow/handler). */
  readonly [PASS_THROUGH_FILTER] = true;

  catch(exception: unknown): Observable<never> {
    return throwError(() => exception);
  }
}
