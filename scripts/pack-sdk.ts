/**
 * Builds the publishable keyflow packages to `dist` and packs them with `npm pack`:
 *
 *   node -r @swc-node/register scripts/pack-sdk.ts [--out <dir>]     (default: .keyflow/packages)
 *
 * Packed today: `@keyflow/errors` (the error base) and `@keyflow/workflow` (task contracts, the typed definitions
 * DSL, PII masking, the reducer): what an application needs to define tasks and workflows. Each is compiled by
 * `tsc` (CommonJS, declarations) into a staging folder with a package.json for publication: `main`/`types`/
 * `exports` on `dist`, `files`, and its `dependencies` (its keyflow packages at this version, third-party ones at
 * the monorepo's ranges), then packed. The runtime packages (the worker and orchestrator bootstraps) are not packed
 * yet: they need keyflow's kafkajs patches, which a published package cannot apply (README "Packages").
 * Prints the tarballs' paths as JSON. Exits non-zero when a build or a pack fails.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';

const ROOT = resolve(__dirname, '..');
/** The packages packed, in dependency order, with the folder each lives in. */
export const SDK_PACKAGES = [
  { name: '@keyflow/errors', dir: 'libs/errors' },
  { name: '@keyflow/workflow', dir: 'libs/workflow' },
] as const;

const { values } = parseArgs({ options: { out: { type: 'string', default: '.keyflow/packages' } } });
const out = resolve(ROOT, values.out!);
const root = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  license: string;
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

/** Bare module names a compiled file requires (`zod/v4` -> `zod`, `@scope/x/y` -> `@scope/x`). */
function requiredPackages(dir: string): Set<string> {
  const found = new Set<string>();
  for (const f of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
    if (!f.endsWith('.js') && !f.endsWith('.d.ts')) continue;
    const text = readFileSync(join(dir, f), 'utf8');
    for (const m of text.matchAll(/(?:require\(|from )["']([^"'.][^"']*)["']/g)) {
      const parts = m[1].split('/');
      const name = m[1].startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
      if (!name.startsWith('node:')) found.add(name);
    }
  }
  return found;
}

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const tarballs: Record<string, string> = {};
for (const p of SDK_PACKAGES) {
  const src = join(ROOT, p.dir);
  const stage = join(out, 'stage', p.name.replace('/', '__'));
  mkdirSync(stage, { recursive: true });
  const tsconfig = join(stage, 'tsconfig.build.json');
  writeFileSync(
    tsconfig,
    JSON.stringify({
      extends: join(ROOT, 'tsconfig.base.json'),
      compilerOptions: {
        rootDir: join(src, 'src'),
        outDir: join(stage, 'dist'),
        noEmit: false,
        declaration: true,
        sourceMap: false,
        types: ['node'],
        typeRoots: [join(ROOT, 'node_modules', '@types')],
      },
      include: [join(src, 'src', '**', '*.ts')],
      exclude: [join(src, 'src', '**', '*.spec.ts')],
    }),
  );
  execFileSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', tsconfig], {
    stdio: 'inherit',
  });
  const own = JSON.parse(readFileSync(join(src, 'package.json'), 'utf8')) as {
    description: string;
    dependencies?: Record<string, string>;
  };
  const dependencies = Object.fromEntries(
    [...requiredPackages(join(stage, 'dist'))].sort().map((name) => {
      if (name.startsWith('@keyflow/')) return [name, root.version];
      // The package's own range first (what it supports), else the monorepo's.
      const range = own.dependencies?.[name] ?? root.dependencies[name] ?? root.devDependencies[name];
      if (!range) throw new Error(`${p.name} requires ${name}, which the monorepo does not depend on`);
      return [name, range];
    }),
  );
  writeFileSync(
    join(stage, 'package.json'),
    `${JSON.stringify(
      {
        name: p.name,
        version: root.version,
        description: own.description,
        license: root.license,
        main: 'dist/index.js',
        types: 'dist/index.d.ts',
        exports: {
          '.': { types: './dist/index.d.ts', default: './dist/index.js' },
          './package.json': './package.json',
        },
        files: ['dist'],
        engines: { node: '>=20.11' },
        dependencies,
      },
      null,
      2,
    )}\n`,
  );
  const packed = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--pack-destination', out], { cwd: stage, encoding: 'utf8' }),
  ) as Array<{ filename: string }>;
  tarballs[p.name] = join(out, packed[0].filename);
}
console.log(JSON.stringify(tarballs));
