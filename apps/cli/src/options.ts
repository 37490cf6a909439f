import { InvalidArgumentError } from 'commander';
import { parseTime } from './output';

/** Option parsers shared by the commands: each throws commander's InvalidArgumentError (exit 2, usage shown). */
export const opt = {
  /** ms since epoch, ISO-8601, or a duration back from now (`15m`, `2h`, `7d`). */
  time(v: string): number {
    try {
      return parseTime(v);
    } catch (e) {
      throw new InvalidArgumentError((e as Error).message);
    }
  },
  /** A positive integer. */
  positive(v: string): number {
    const n = Number(v);
    if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError('a positive integer');
    return n;
  },
  /** A non-negative integer. */
  nonNegative(v: string): number {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError('a non-negative integer');
    return n;
  },
  /** A Kafka offset (a non-negative integer), as a bigint. */
  offset(v: string): bigint {
    if (!/^\d+$/.test(v)) throw new InvalidArgumentError('an offset (a non-negative integer)');
    return BigInt(v);
  },
  /** JSON text. */
  json(v: string): unknown {
    try {
      return JSON.parse(v) as unknown;
    } catch {
      throw new InvalidArgumentError('not JSON');
    }
  },
};
