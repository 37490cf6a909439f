// ESLint flat config. Module boundaries (Nx tags): libs never import services, services never import
// each other (they share only topics and schemas), nothing imports bench.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import nx from '@nx/eslint-plugin';

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
            // A bench measures the services: it may read their settings' defaults from their public API.
            {
              sourceTag: 'type:bench',
              onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:service', 'type:example'],
            },
            // The end-to-end tests run the examples (the GeoNames ETL) and read their contracts.
            { sourceTag: 'type:e2e', onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:example'] },
            // The CLI folds in the services' one-shot commands (rebuild needs the orchestrator's projection).
            { sourceTag: 'type:cli', onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:service'] },
            // The NestJS SDK: the services' public API in one package.
            { sourceTag: 'type:sdk', onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:service'] },
            // An application on keyflow (the tutorial, examples/*): the libs and the services' public API (their
            // src/index.ts); examples/test-workloads gathers the other examples into one process of each service.
            {
              sourceTag: 'type:example',
              onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:service', 'type:example'],
            },
          ],
        },
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'error',
      'no-console': 'off',
    },
  },
  // A service's tests run the examples as workloads (the order saga in the tests' orchestrator): the one place a
  // service's folder may import an example. Its source stays free of them (the rule above).
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
              onlyDependOnLibsWithTags: ['type:lib', 'type:schemas', 'type:example'],
            },
          ],
        },
      ],
    },
  },
  // libs/kafka is the one place that imports the Kafka client (issue 40): everything else takes kafkajs's classes and
  // types from @keyflow/kafka, which re-exports them (one patched copy loaded). The plain-client baselines of bench/
  // measure the client itself, and bench-clients/ compares clients.
  {
    files: ['**/*.ts'],
    ignores: ['libs/kafka/**', 'bench/*.bench.ts', 'bench/chain.ts', 'bench-clients/**'],
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
          patterns: [{ group: ['kafkajs/*'], message: 'kafkajs internals belong to libs/kafka' }],
        },
      ],
    },
  },
  {
    files: ['**/test/**/*.ts', '**/*.spec.ts'],
    rules: { '@typescript-eslint/no-non-null-assertion': 'off' },
  },
);
