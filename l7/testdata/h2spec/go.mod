// h2spec, the HTTP/2 conformance suite TestH2Spec runs, pinned with all its dependencies:
// v2.2.1 has no go.mod of its own, so `go install ...@v2.2.1+incompatible` would take the
// newest version of each dependency (x/net's framer among them) and change under the test.
module switchyard.test/h2spec

go 1.26.8

tool github.com/summerwind/h2spec/cmd/h2spec

require github.com/summerwind/h2spec v2.2.1+incompatible // indirect

require (
	github.com/fatih/color v1.19.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
)
