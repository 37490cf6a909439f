import { randomUUID } from 'node:crypto';
import { v5, validate, version } from 'uuid';
import { DERIVED_EVENT_ID_LENGTH, derivedEventId, KEYFLOW_EVENT_ID_NAMESPACE } from '../../src';

describe('derived event ids', () => {
  it('stay 36 characters along a chain of 10,000 derivations, each distinct from all before it', () => {
    const seen = new Set<string>();
    let id: string = randomUUID();
    seen.add(id);
    for (let i = 0; i < 10_000; i++) {
      // command -> its result -> the next command, as the worker and the engine chain them
      id = derivedEventId(id, i % 2 === 0 ? 'completed' : 0);
      expect(id).toHaveLength(DERIVED_EVENT_ID_LENGTH);
      expect(seen.has(id)).toBe(false);
      seen.add(id);
    }
    expect(validate(id) && version(id)).toBe(5);
  });

  it('are deterministic: the same cause and name give the same id, in any process', () => {
    const cause = 'run-1/cmd-7';
    expect(derivedEventId(cause, 3)).toBe(derivedEventId(cause, 3));
    expect(derivedEventId(cause, 'completed')).toBe(derivedEventId(cause, 'completed'));
    // pinned: a change of namespace or of the name encoding would re-key every stored event
    expect(derivedEventId('cause', 0)).toBe(derivedEventId('cause', '0'));
    expect(derivedEventId('cause', 0)).toMatchInlineSnapshot(`"0309fe10-ce66-5517-bea6-b84b11760c97"`);
    // names outside ASCII are hashed as their UTF-8 bytes, as uuid's v5 does with a string name
    for (const [cause, name] of [
      ['Zürich', 'naïve'],
      ['東京/😀', 'ok'],
      [randomUUID(), 'é'.repeat(300)],
    ])
      expect(derivedEventId(cause, name)).toBe(v5(`${cause}\u0000${name}`, KEYFLOW_EVENT_ID_NAMESPACE));
  });

  it("are uuid's v5 of the UTF-8 of `<cause>\\u0000<name>` for any text: lone surrogates (as U+FFFD), names of any length", () => {
    const texts = ['', 'a', '\ud800', 'x\udfffy', 'é', '😀', '\u0000', 'k'.repeat(5_000), '東'.repeat(2_000)];
    for (let i = 0; i < 2_000; i++) {
      const cause = randomUUID() + texts[i % texts.length];
      const name = i % 3 === 0 ? i : texts[(i * 7) % texts.length] + String(i);
      const bytes = Buffer.from(`${cause}\u0000${String(name)}`, 'utf8');
      expect([cause, name, derivedEventId(cause, name)]).toEqual([
        cause,
        name,
        v5(bytes, KEYFLOW_EVENT_ID_NAMESPACE),
      ]);
    }
  });

  it('are distinct for distinct causes and names, also where plain concatenation would collide', () => {
    const cause = randomUUID();
    const ids = [
      derivedEventId(cause, 0),
      derivedEventId(cause, 1),
      derivedEventId(cause, 'completed'),
      derivedEventId(cause, 'failed'),
      derivedEventId(`${cause}:a`, 'b'),
      derivedEventId(cause, 'a:b'),
      derivedEventId(`${cause}/0`, 0),
      derivedEventId(cause, '0/0'),
    ];
    expect(new Set(ids).size).toBe(ids.length);
  });
});
