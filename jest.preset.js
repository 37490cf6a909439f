// Shared Jest settings. SWC transforms TypeScript with legacy decorators and decorator metadata,
// which NestJS dependency injection needs (esbuild-based runners drop the metadata).
const path = require('node:path');
const swcrc = JSON.parse(require('node:fs').readFileSync(path.join(__dirname, '.swcrc'), 'utf8'));
delete swcrc.$schema;

const transform = { '^.+\\.(t|j)s$': ['@swc/jest', { ...swcrc, swcrc: false }] };

/** Unit suite: pure logic, no network. Files: `src/**\/*.spec.ts`, `test/unit/**\/*.spec.ts`. */
function unit(rootDir) {
  return {
    displayName: 'unit',
    rootDir,
    testEnvironment: 'node',
    transform,
    testMatch: ['<rootDir>/src/**/*.spec.ts', '<rootDir>/test/unit/**/*.spec.ts'],
  };
}

/**
 * Integration suite: talks to the real broker, registry and Redis that libs/testing resolves
 * (environment, else testcontainers, else a clear error). Files: `test/integration/**\/*.int.spec.ts`.
 */
function integration(rootDir) {
  return {
    displayName: 'integration',
    rootDir,
    testEnvironment: 'node',
    transform,
    testMatch: ['<rootDir>/test/integration/**/*.int.spec.ts'],
    globalSetup: path.join(__dirname, 'libs/testing/src/jest-global-setup.ts'),
    globalTeardown: path.join(__dirname, 'libs/testing/src/jest-global-teardown.ts'),
    testTimeout: 120_000,
  };
}

/** Root-level options (reporters are global in Jest, not per project). */
const root = { reporters: ['default', path.join(__dirname, 'scripts/jest-summary-reporter.js')] };

module.exports = { unit, integration, transform, root };
