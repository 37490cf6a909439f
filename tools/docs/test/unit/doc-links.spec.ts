import * as path from 'node:path';
import { brokenLinks, markdownFiles } from '../../src';

const root = path.resolve(__dirname, '../../../..');

describe('the docs links', () => {
  it('checks README.md, BENCHMARKS.md and docs/', () => {
    const files = markdownFiles(root);
    expect(files).toEqual(
      expect.arrayContaining(['README.md', 'BENCHMARKS.md', 'docs/guarantees/README.md']),
    );
    expect(files.some((f) => f.startsWith('docs/api/'))).toBe(false);
  });

  it('every relative link of README.md, BENCHMARKS.md and docs/**/*.md names a file (and anchor) that exists', () => {
    const broken = brokenLinks(root).map((b) => `${b.file}:${b.line}: ${b.target} (${b.reason})`);
    expect(broken).toEqual([]);
  });
});
