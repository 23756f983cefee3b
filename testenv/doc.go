// Package testenv holds switchyard's end-to-end suites (its _test.go files) on the
// network-namespace lab. The lab itself is a product feature (`switchyard lab`) and lives in lab/
// (topo, app, fwd, bird and the lab package); the seeds' measurements live in lab/experiment.
// Nothing outside this directory imports it.
package testenv
