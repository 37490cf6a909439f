// ESLint flat config. Module boundaries (Nx tags): libs never import services, services never import
// each other (they share only topics and schemas), nothing imports bench.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import nx from '@nx/eslint-plugin';

/** A deep import into another keyflow package (`@keyflow/<package>/src/...`): import its public entry instead. */
const DEEP_IMPORT = {
  group: ['@keyflow/*/src', '@keyflow/*/src/**'],
  message:
    "import the package's public entry (@keyflow/<package>); export what you need from its src/index.ts",
};

export default tseslint.config(
  {
    ignores: [
      '**/node_modules/**',
      '**/dist/**',
      '**/.nx/**',
      'infra/local/.run/**',
      '**/*.js',
      '**/*.mjs',
      'schemas/src/generated/**',
    ],
  },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    plugins: { '@nx': nx },
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          allow: [],
          depConstraints: [
            { sourceTag: 'type:lib', onlyDependOnLibsWithTags: ['type:lib', 'type:schemas'] },
            { sourceTag: 'type:schemas', onlyDependOnLibsWithTags: [] },
            { sourceTag: 'type:service', onlyDependOnLibsWithTags: ['type:lib', 'type:schemas'] },
            // A bench measures the services: it may read their settings' defaults from their public API, and its
            // soak worker marks its handler with @TaskHandler (@keyflow/nestjs).
            {
              sourceTag: 'type:bench',
              onlyDependOnLibsWithTags: [
                'type:lib',
                'type:schemas',
                'type:service',
                'type:sdk',
                'type:example',
              ],
            },
            // The end-to-end tests run the examples (the GeoNames ETL) and read their contracts.
            { sourceTag: 'type:e2e', onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:example'] },
            // The CLI folds in the services' one-shot commands (rebuild needs the orchestrator's projection).
            { sourceTag: 'type:cli', onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:service'] },
            // The NestJS SDK: the services' public API in one package.
            { sourceTag: 'type:sdk', onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:service'] },
            // Docs generators and checks (tools/docs): read the services' settings schemas from their public API.
            {
              sourceTag: 'type:tools',
              onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:service'],
            },
            // An application on keyflow (the tutorial, examples/*): the libs, the services' public API (their
            // src/index.ts) and the NestJS package (@TaskHandler); examples/test-workloads gathers the other
            // examples into one process of each service.
            {
              sourceTag: 'type:example',
              onlyDependOnLibsWithTags: [
                'type:lib',
                'type:schemas',
                'type:service',
                'type:sdk',
                'type:example',
              ],
            },
          ],
        },
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-console': 'off',
    },
  },
  // Import boundaries (issue 41): a package is used through its public entry (its package.json `main`, or a path
  // it gives for that, such as @keyflow/testing/settings), never by reaching into another package's src/. Applies
  // to every TypeScript file, tests included. The kafkajs rule below repeats this pattern: a file's
  // no-restricted-imports is the last matching block's, not a merge.
  {
    files: ['**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [DEEP_IMPORT] }],
    },
  },
  // A service's tests run the examples as workloads (the order saga in the tests' orchestrator): the one place a
  // service's folder may import an example, or @keyflow/nestjs (the workers' test handlers carry @TaskHandler).
  // Its source stays free of them (the rule above).
  {
    files: ['services/*/test/**/*.ts'],
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          allow: [],
          depConstraints: [
            {
              sourceTag: 'type:service',
              onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:sdk', 'type:example'],
            },
          ],
        },
      ],
    },
  },
  // libs/kafka is the one place that imports the Kafka client (issue 40): everything else takes kafkajs's classes and
  // types from @keyflow/kafka, which re-exports them (one patched copy loaded). The plain-client baselines of bench/
  // measure the client itself (bench/transaction-v2.ts: the transaction protocol version 2 kafkajs lacks), and
  // bench-clients/ compares clients.
  {
    files: ['**/*.ts'],
    ignores: [
      'libs/kafka/**',
      'bench/*.bench.ts',
      'bench/chain.ts',
      'bench/transaction-v2.ts',
      'bench/peers/**',
      'bench-clients/**',
    ],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            {
              name: 'kafkajs',
              message: 'import it from @keyflow/kafka (the only place that imports kafkajs)',
            },
          ],
          patterns: [
            { group: ['kafkajs/*'], message: 'kafkajs internals belong to libs/kafka' },
            DEEP_IMPORT,
          ],
        },
      ],
    },
  },
  // The handler author's package (issue 41 item 1) stays framework-free: no Kafka client, no Redis client, no
  // NestJS, no worker runtime (which imports it). Repeats the two rules above (the last matching block wins).
  {
    files: ['libs/handler/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: [
            { name: 'kafkajs', message: '@keyflow/handler imports no Kafka client' },
            { name: '@keyflow/kafka', message: '@keyflow/handler imports no Kafka client' },
            { name: 'ioredis', message: '@keyflow/handler imports no Redis client' },
            { name: '@keyflow/idempotency', message: '@keyflow/handler imports no Redis client' },
            {
              name: '@keyflow/workers',
              message: '@keyflow/handler imports no worker runtime (the worker imports it)',
            },
          ],
          patterns: [
            {
              group: ['kafkajs/*', 'ioredis/*'],
              message: '@keyflow/handler imports no Kafka or Redis client',
            },
            {
              group: ['@nestjs/*'],
              message: '@keyflow/handler is framework-free: NestJS belongs to @keyflow/nestjs',
            },
            DEEP_IMPORT,
          ],
        },
      ],
    },
  },
  // Each unit does one thing (issue 41): a function at most 80 lines, blank lines and comments not counted
  // (a method's decorators count: they are part of it). Source of packages, services, apps and examples; tests,
  // benches and generated code are not held to it. A function that must stay longer gets its own override after
  // this one, naming the function and the reason.
  {
    files: [
      'libs/**/src/**/*.ts',
      'services/**/src/**/*.ts',
      'apps/**/src/**/*.ts',
      'examples/**/src/**/*.ts',
    ],
    // libs/testing is test code in a package (the harness and the chaos and scale scenarios moved out of the tests'
    // folders as they were, issue 41 item 6): held to the tests' rules, not to this one.
    ignores: ['**/test/**', '**/*.spec.ts', '**/*.bench.ts', '**/generated/**', 'libs/testing/**'],
    rules: {
      'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true }],
    },
  },
  {
    files: ['**/test/**/*.ts', '**/*.spec.ts'],
    rules: { '@typescript-eslint/no-non-null-assertion': 'off' },
  },
);
