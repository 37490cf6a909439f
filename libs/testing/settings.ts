/**
 * `@keyflow/testing/settings`: the connection settings' test helpers (./src/settings) without the containers and
 * clients the package's main entry loads.
 */
export { PEM_TEXT, tempFiles, settingsIssues } from './src/settings';
