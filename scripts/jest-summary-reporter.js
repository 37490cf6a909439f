// Appends this Jest run's totals to $KEYFLOW_TEST_SUMMARY (one JSON line per run), so scripts/test-all.sh
// can print one closing line for the whole suite: "tests: N passed, N failed, N skipped".
// A suite that failed without a failing test (it could not load or compile, or a hook outside any test such as
// afterAll threw) counts as one failed test, so a suite that could not run never reads as passed. A Jest run that
// ends before reporting (its global setup threw, e.g. no Kafka: "none were found") writes nothing here:
// scripts/test-steps.sh's test_step counts that one.
const fs = require('node:fs');

/** The summary line of a Jest AggregatedResult: { passed, failed, skipped } test counts. */
function summaryLine(results) {
  const suitesFailedOutsideTests = (results.testResults ?? []).filter(
    (s) => s.numFailingTests === 0 && (s.testExecError || s.failureMessage),
  ).length;
  return {
    passed: results.numPassedTests,
    failed:
      results.numFailedTests + Math.max(suitesFailedOutsideTests, results.numRuntimeErrorTestSuites ?? 0),
    skipped: results.numPendingTests + results.numTodoTests,
  };
}

class SummaryReporter {
  onRunComplete(_contexts, results) {
    const file = process.env.KEYFLOW_TEST_SUMMARY;
    if (!file) return;
    fs.appendFileSync(file, JSON.stringify({ cwd: process.cwd(), ...summaryLine(results) }) + '\n');
  }
}
module.exports = SummaryReporter;
module.exports.summaryLine = summaryLine;
