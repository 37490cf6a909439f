/**
 * Builds the publishable keyflow packages to `dist` and packs them with `npm pack`:
 *
 *   node -r @swc-node/register scripts/pack-sdk.ts [--out <dir>]     (default: .keyflow/packages)
 *
 * Packed: every package an application on keyflow installs, in dependency order (SDK_PACKAGES): the definitions
 * SDK (`@keyflow/errors`, `@keyflow/workflow`), the handler author's package (`@keyflow/handler`), the runtime libraries, the two services' runtimes
 * (`@keyflow/orchestrator`, `@keyflow/workers`: each package's own folder, whole; the examples live under examples/) and
 * `@keyflow/nestjs`, the NestJS modules in one import. Each is compiled by `tsc` (CommonJS, declarations) into a
 * staging folder with a package.json for publication: `main`/`types`/`exports` on `dist`, `files`, its
 * `dependencies` (found in the compiled files: keyflow packages at this version, third-party ones at the package's
 * own range or the monorepo's), NestJS and its companions as `peerDependencies` (the major in use and the current
 * one), then packed. `@keyflow/kafka` bundles kafkajs with this repository's patches (`bundleDependencies`: npm ships
 * the patched copy inside the tarball, so no install script patches a user's node_modules); no other package may
 * load kafkajs (they import its classes and types from @keyflow/kafka: one copy per process).
 * The packages build and pack as many at once as the machine has cores (each compiles from the sources, not from
 * another's output). Prints the tarballs' paths as JSON. Exits non-zero when a build or a pack fails.
 */
import { execFile } from 'node:child_process';
import { cpSync, mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { availableParallelism } from 'node:os';
import { KAFKAJS_PATCHES } from '@keyflow/kafka';
import { join, resolve } from 'node:path';
import { parseArgs, promisify } from 'node:util';

const ROOT = resolve(__dirname, '..');
interface PackedPackage {
  name: string;
  /** The folder it lives in, from the repository's root. */
  dir: string;
  /** Files and folders of `dir` shipped next to `dist` (read at run time relative to the compiled code). */
  assets?: string[];
  /** Dependencies shipped inside the tarball from the monorepo's node_modules, as installed (and patched). */
  bundle?: string[];
  /** Peers the compiled files do not name but need at run time (a platform Nest loads by itself). */
  peers?: string[];
}

/** The packages packed, in dependency order. */
export const SDK_PACKAGES: readonly PackedPackage[] = [
  { name: '@keyflow/errors', dir: 'libs/errors' },
  { name: '@keyflow/workflow', dir: 'libs/workflow' },
  { name: '@keyflow/schemas', dir: 'schemas', assets: ['avro', 'catalog.yaml'] },
  { name: '@keyflow/contracts', dir: 'libs/contracts' },
  { name: '@keyflow/observability', dir: 'libs/observability' },
  { name: '@keyflow/handler', dir: 'libs/handler' },
  { name: '@keyflow/kafka', dir: 'libs/kafka', bundle: ['kafkajs'] },
  { name: '@keyflow/idempotency', dir: 'libs/idempotency' },
  { name: '@keyflow/ops', dir: 'libs/ops' },
  { name: '@keyflow/blobs', dir: 'libs/blobs' },
  { name: '@keyflow/task-runtime', dir: 'libs/task-runtime' },
  { name: '@keyflow/orchestrator', dir: 'services/orchestrator', assets: ['console'] },
  {
    name: '@keyflow/workers',
    dir: 'services/workers',
    peers: ['@nestjs/platform-express'], // its HTTP side (/health, /metrics)
  },
  { name: '@keyflow/nestjs', dir: 'libs/nestjs' },
];

/** The one package that loads kafkajs (the patched copy it bundles). */
const KAFKAJS_OWNER = '@keyflow/kafka';
/**
 * Peers: the application's own copies (one Nest container, one reflect-metadata, one rxjs), in ranges covering the
 * NestJS major the monorepo uses and the current one (12).
 */
const PEERS: Record<string, string> = {
  '@nestjs/common': '^11.0.0 || ^12.0.0',
  '@nestjs/core': '^11.0.0 || ^12.0.0',
  '@nestjs/microservices': '^11.0.0 || ^12.0.0',
  '@nestjs/platform-express': '^11.0.0 || ^12.0.0',
  '@nestjs/swagger': '^11.0.0 || ^12.0.0',
  'reflect-metadata': '^0.2.0',
  rxjs: '^7.8.0',
};

const { values } = parseArgs({ options: { out: { type: 'string', default: '.keyflow/packages' } } });
const out = resolve(ROOT, values.out!);
const root = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  license: string;
  /** The Node lines every package supports: the repo's own (docs/operating.md "Prerequisites"). */
  engines: { node: string };
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

/**
 * Bare module names the compiled files load (`.js`) or name in their declarations (`.d.ts`), without Node's
 * built-ins (`zod/v4` -> `zod`, `@scope/x/y` -> `@scope/x`); a name only the declarations use and whose types come
 * from DefinitelyTyped (the monorepo has `@types/<name>`) stands for that types package.
 */
function requiredPackages(dir: string): Set<string> {
  const found = new Set<string>();
  const typesOnly = new Set<string>();
  for (const f of readdirSync(dir, { recursive: true, encoding: 'utf8' })) {
    const declaration = f.endsWith('.d.ts');
    if (!f.endsWith('.js') && !declaration) continue;
    const text = readFileSync(join(dir, f), 'utf8');
    for (const m of text.matchAll(/(?:require\(|from |import\()["']([^"'.][^"']*)["']/g)) {
      const parts = m[1].split('/');
      const name = m[1].startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
      if (name.startsWith('node:') || builtinModules.includes(name)) continue;
      (declaration ? typesOnly : found).add(name);
    }
  }
  for (const name of typesOnly) {
    if (found.has(name)) continue;
    const types = `@types/${name}`;
    found.add(types in root.devDependencies || types in root.dependencies ? types : name);
  }
  return found;
}

/** The version of `name` installed in the monorepo's node_modules. */
function installedVersion(name: string): string {
  return (
    JSON.parse(readFileSync(join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }
  ).version;
}

const run = promisify(execFile);

/**
 * Compiles one package with `tsc -p <tsconfig>`; on failure its diagnostics go to this process's stdout and stderr.
 * @throws Error naming the tsconfig and tsc's exit code when tsc fails
 */
async function tsc(tsconfig: string): Promise<void> {
  try {
    await run(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', tsconfig]);
  } catch (e) {
    const { stdout = '', stderr = '', code } = e as { stdout?: string; stderr?: string; code?: unknown };
    process.stdout.write(stdout);
    process.stderr.write(stderr);
    throw new Error(`tsc -p ${tsconfig} exited with ${String(code)}`);
  }
}

/** Builds, stages and packs `p` into `out`; resolves with its tarball's path. */
async function packOne(p: PackedPackage): Promise<string> {
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
  await tsc(tsconfig);
  const own = JSON.parse(readFileSync(join(src, 'package.json'), 'utf8')) as {
    description: string;
    dependencies?: Record<string, string>;
  };
  const required = [...requiredPackages(join(stage, 'dist'))].sort();
  if (p.name !== KAFKAJS_OWNER && required.includes('kafkajs'))
    throw new Error(`${p.name} loads kafkajs: import its classes and types from ${KAFKAJS_OWNER}`);
  const dependencies = Object.fromEntries(
    required
      .filter((name) => !(name in PEERS))
      .map((name) => {
        if (name.startsWith('@keyflow/')) return [name, root.version];
        // Bundled: the exact version shipped.
        if (p.bundle?.includes(name)) return [name, installedVersion(name)];
        // The package's own range first (what it supports), else the monorepo's.
        const range = own.dependencies?.[name] ?? root.dependencies[name] ?? root.devDependencies[name];
        if (!range) throw new Error(`${p.name} requires ${name}, which the monorepo does not depend on`);
        return [name, range];
      }),
  );
  const peerDependencies = Object.fromEntries(
    [...new Set([...required.filter((name) => name in PEERS), ...(p.peers ?? [])])]
      .sort()
      .map((name) => [name, PEERS[name]]),
  );
  for (const dep of p.bundle ?? [])
    cpSync(join(ROOT, 'node_modules', dep), join(stage, 'node_modules', dep), { recursive: true });
  if (p.bundle?.includes('kafkajs'))
    // A monorepo installed with --ignore-scripts has kafkajs unpatched: never ship that.
    for (const [file, marker] of Object.entries(KAFKAJS_PATCHES))
      if (!readFileSync(join(stage, 'node_modules', 'kafkajs', 'src', file), 'utf8').includes(marker))
        throw new Error(
          `the kafkajs to bundle lacks the project's patch in src/${file}: run npm ci (not --ignore-scripts)`,
        );
  for (const asset of p.assets ?? []) cpSync(join(src, asset), join(stage, asset), { recursive: true });
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
        files: ['dist', ...(p.assets ?? [])],
        engines: { node: root.engines.node },
        dependencies,
        ...(Object.keys(peerDependencies).length ? { peerDependencies } : {}),
        ...(p.bundle ? { bundleDependencies: p.bundle } : {}),
      },
      null,
      2,
    )}\n`,
  );
  const packed = JSON.parse(
    (await run('npm', ['pack', '--json', '--pack-destination', out], { cwd: stage, maxBuffer: 64 << 20 }))
      .stdout,
  ) as Array<{ filename: string }>;
  return join(out, packed[0].filename);
}

/**
 * Packs every package, as many at once as the machine has cores: each build reads the sources, never another's
 * output, so the order does not matter. Resolves with the tarballs by package name, in SDK_PACKAGES order.
 */
async function packAll(): Promise<Record<string, string>> {
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  const files: string[] = [];
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < SDK_PACKAGES.length) {
      const i = next++;
      files[i] = await packOne(SDK_PACKAGES[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(availableParallelism(), SDK_PACKAGES.length) }, lane));
  return Object.fromEntries(SDK_PACKAGES.map((p, i) => [p.name, files[i]]));
}

packAll().then(
  (tarballs) => console.log(JSON.stringify(tarballs)),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
