/**
 * Docs that cannot drift: the configuration reference generated from the settings schemas
 * (`npm run docs:config` writes docs/reference/configuration.md; a unit test fails when the committed file is
 * stale), and a check that the relative links of README.md, BENCHMARKS.md and docs/ resolve.
 */
export {
  renderConfigurationReference,
  settingDocs,
  settingCommentsOf,
  undescribed,
  anchorOf,
  type SettingsSource,
  type SettingsSchema,
  type SettingDoc,
} from './config-reference';
export { configurationSources } from './config-sources';
export { brokenLinks, markdownFiles, type BrokenLink } from './doc-links';

/** The generated configuration reference, relative to the repository root. */
export const CONFIGURATION_REFERENCE_PATH = 'docs/reference/configuration.md';
