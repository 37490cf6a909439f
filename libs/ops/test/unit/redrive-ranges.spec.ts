import fc from 'fast-check';
import { matchesRedriveFilter, rangesFor, type RedriveFilter } from '../../src/redrive';

/** Every (partition, offset) of `ends` that the filter matches, by checking each record as a full scan does. */
function byFullScan(ends: Array<{ partition: number; low: bigint; end: bigint }>, filter: RedriveFilter) {
  const out: string[] = [];
  for (const e of ends)
    for (let o = e.low; o < e.end; o++)
      if (matchesRedriveFilter({ key: null, headers: {}, offset: o.toString() }, filter, e.partition))
        out.push(`${e.partition}:${o}`);
  return out;
}

const inRanges = (rs: ReturnType<typeof rangesFor>) =>
  rs.flatMap((r) =>
    Array.from({ length: Number(r.to - r.from) }, (_, i) => `${r.partition}:${r.from + BigInt(i)}`),
  );

describe('rangesFor: the DLQ ranges a redrive or a records view reads', () => {
  it('holds exactly the records a full scan would match by partition and offset', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.nat(20), fc.nat(20)), { maxLength: 4 }),
        fc.option(fc.nat(5), { nil: undefined }),
        fc.option(fc.oneof(fc.nat(45).map(String), fc.constantFrom('-1', '07', 'x', '')), { nil: undefined }),
        (parts, partition, offset) => {
          const ends = parts.map(([low, n], p) => ({ partition: p, low: BigInt(low), end: BigInt(low + n) }));
          const filter: RedriveFilter = { partition, offset };
          expect(inRanges(rangesFor('t.dlq', ends, filter))).toEqual(byFullScan(ends, filter));
        },
      ),
    );
  });

  it('reads every record of every partition when the filter names neither', () => {
    const ends = [
      { partition: 0, low: 5n, end: 9n },
      { partition: 1, low: 0n, end: 0n },
    ];
    expect(rangesFor('t.dlq', ends, { key: 'k' })).toEqual([
      { topic: 't.dlq', partition: 0, from: 5n, to: 9n },
    ]);
  });
});
