import { InvalidArgumentError } from 'commander';

/** commander parser of an option that must be a positive integer. @throws InvalidArgumentError otherwise */
export function positiveInt(v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError('a positive integer');
  return n;
}
