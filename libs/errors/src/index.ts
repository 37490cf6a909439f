/** @keyflow/errors: the one error base, the closed list of error codes and the failure record of a thrown value. */
export { isKeyflowError, isRetryable, KeyflowError, SettingsError } from './base';
export { ERROR_CODES, isErrorCode, retryableOf, type ErrorCode, type FixedErrorCode } from './codes';
export { failureCode, textOf, toFailure, type Failure, type FailureOptions } from './failure';
/** Reads the files connection settings name, collecting issues (see ./setting-files). */
export { settingFileReader } from './setting-files';
