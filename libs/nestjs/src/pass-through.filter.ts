import { Catch, type RpcExceptionFilter } from '@nestjs/common';
import { throwError, type Observable } from 'rxjs';

/**
 * Lets a task handler's exception reach the task executor unchanged. Nest's default RPC filter would turn it into
 * `{ status: 'error', message }`, losing the class that says whether it is retryable (which the worker's
 * task executor reads). Applied by `@TaskHandler` to
 * each handler method, so the application's own filters (global or not) keep handling its HTTP routes.
 */
@Catch()
export class PassThroughRpcFilter implements RpcExceptionFilter<unknown> {
  catch(exception: unknown): Observable<never> {
    return throwError(() => exception);
  }
}
