// Appends this Jest run's totals to $KEYFLOW_TEST_SUMMARY (one JSON line per run), so scripts/test-all.sh
// can print one closing line for the whole suite: "tests: N passed, N failed, N skipped".
const fs = require('node:fs');

class SummaryReporter {
  onRunComplete(_contexts, results) {
    const file = process.env.KEYFLOW_TEST_SUMMARY;
    if (!file) return;
    const line = {
      cwd: process.cwd(),
      passed: results.numPassedTests,
      failed: results.numFailedTests + results.numRuntimeErrorTestSuites,
      skipped: results.numPendingTests + results.numTodoTests,
    };
    fs.appendFileSync(file, JSON.stringify(line) + '\n');
  }
}
module.exports = SummaryReporter;
