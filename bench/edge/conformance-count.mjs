// Counts the results of the HTTP caching conformance suite (http-tests/cache-tests) by kind, with
// the suite's own verdict rules (dependencies honoured): required, optional ("optimal") and the
// informational checks. Usage: node conformance-count.mjs SUITE_DIR RESULTS.json [verbose]
import fs from 'fs'
import path from 'path'
import { pathToFileURL } from 'url'

const [dir, resultsFile, verbose] = process.argv.slice(2)
const load = p => import(pathToFileURL(path.join(dir, p)).href)
const tests = (await load('tests/index.mjs')).default
const { determineTestResult, resultTypes } = await load('test-engine/lib/results.mjs')
const results = JSON.parse(fs.readFileSync(resultsFile, 'utf8'))

const count = { required: [0, 0], optimal: [0, 0], check: [0, 0] }
const failed = { required: [], optimal: [] }
for (const suite of tests) {
  for (const t of suite.tests) {
    const kind = t.kind || 'required'
    const r = determineTestResult(tests, t.id, results, true)
    count[kind][1]++
    if (r === resultTypes.pass || r === resultTypes.yes) count[kind][0]++
    else if (kind !== 'check') failed[kind].push(`${t.id}${t.browser_only ? ' (browser-only)' : ''} ${r[2]}`)
  }
}
console.log(`required ${count.required[0]}/${count.required[1]}  optional ${count.optimal[0]}/${count.optimal[1]}  checks ${count.check[0]}/${count.check[1]}`)
if (verbose) {
  console.log('not passed, required:\n  ' + failed.required.join('\n  '))
  console.log('not passed, optional:\n  ' + failed.optimal.join('\n  '))
}
