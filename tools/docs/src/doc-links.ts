import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { anchorOf } from './config-reference';

/** A relative link of a Markdown file that points nowhere. */
export interface BrokenLink {
  /** The file, relative to the repository root. */
  file: string;
  line: number;
  target: string;
  /** `no such file` or `no such anchor`. */
  reason: string;
}

/**
 * README.md, BENCHMARKS.md and every `.md` under docs/ (but the generated docs/api/), relative to `root`, sorted.
 */
export function markdownFiles(root: string): string[] {
  const found = ['README.md', 'BENCHMARKS.md'].filter((f) => existsSync(path.join(root, f)));
  const walk = (dir: string) => {
    for (const entry of readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = path.posix.join(dir, entry.name);
      if (entry.isDirectory()) {
        if (rel !== 'docs/api') walk(rel);
      } else if (entry.name.endsWith('.md')) found.push(rel);
    }
  };
  if (existsSync(path.join(root, 'docs'))) walk('docs');
  return found.sort();
}

/** The anchors a Markdown file defines: its headings' (GitHub's rule, repeats numbered) and `<a id="...">`. */
function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (heading) {
      const base = anchorOf(heading[1].replace(/`/g, '').replace(/\[([^\]]*)\]\([^)]*\)/g, '$1'));
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      anchors.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const m of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(m[1]);
  }
  return anchors;
}

/** `[text](target)` links outside code (fenced blocks and inline code spans), with their line numbers. */
function linksOf(text: string): { line: number; target: string }[] {
  const links: { line: number; target: string }[] = [];
  let fenced = false;
  text.split('\n').forEach((line, i) => {
    if (/^\s*```/.test(line)) {
      fenced = !fenced;
      return;
    }
    if (fenced) return;
    const outsideCode = line.replace(/`[^`]*`/g, '');
    for (const m of outsideCode.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g))
      links.push({ line: i + 1, target: m[1] });
  });
  return links;
}

/**
 * The relative links of `files` (relative to `root`) whose file does not exist, or whose `#anchor` the Markdown file
 * they name (or the file itself, for `#anchor` alone) does not define. Links with a scheme (`https:`, `mailto:`)
 * are not checked.
 */
export function brokenLinks(root: string, files: string[] = markdownFiles(root)): BrokenLink[] {
  const broken: BrokenLink[] = [];
  const anchorCache = new Map<string, Set<string>>();
  const anchorsIn = (abs: string) => {
    let a = anchorCache.get(abs);
    if (!a) anchorCache.set(abs, (a = anchorsOf(readFileSync(abs, 'utf8'))));
    return a;
  };
  for (const file of files) {
    const abs = path.join(root, file);
    for (const { line, target } of linksOf(readFileSync(abs, 'utf8'))) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue;
      const [pathPart, fragment] = target.split('#', 2);
      const dest = pathPart === '' ? abs : path.resolve(path.dirname(abs), decodeURIComponent(pathPart));
      if (!existsSync(dest)) {
        broken.push({ file, line, target, reason: 'no such file' });
        continue;
      }
      if (fragment && dest.endsWith('.md') && statSync(dest).isFile() && !anchorsIn(dest).has(fragment))
        broken.push({ file, line, target, reason: 'no such anchor' });
    }
  }
  return broken;
}
