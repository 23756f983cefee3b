// Package testenv holds switchyard's end-to-end tests on the network-namespace lab; the lab
// itself is built by its subpackages (topo, app, fwd, lab) and the seeds' measurements live in
// testenv/experiment.
package testenv
