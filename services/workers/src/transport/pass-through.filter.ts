import { Catch, type ArgumentsHost } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { throwError, type Observable } from 'rxjs';

/**
 * Lets a task handler's exception reach the task executor unchanged. Nest's default RPC filter would turn it into
 * `{ status: 'error', message }`, losing the class that says whether it is retryable. HTTP exceptions keep Nest's
 * default handling.
 */
@Catch()
export class PassThroughRpcFilter extends BaseExceptionFilter {
  override catch(exception: unknown, host: ArgumentsHost): Observable<never> | void {
    if (host.getType() === 'rpc') return throwError(() => exception);
    return super.catch(exception, host);
  }
}
