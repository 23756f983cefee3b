// Command prof runs one stop (the L7 proxy, the edge cache, the DNS server or the L4 balancer's
// daemon) from its configuration file with Go's profiler on a second address, for looking at where
// the stop's CPU goes under its bench's load:
//
//	go run ./bench/prof -stop l7 -config l7.yaml -pprof 127.0.0.1:6060 &
//	wrk -t2 -c64 -d10s http://127.0.0.1:18181/ &
//	go tool pprof -top http://127.0.0.1:6060/debug/pprof/profile?seconds=5
//
//	go run ./bench/prof -stop edge -config edge.yaml -pprof 127.0.0.1:6060 &
//	wrk -t2 -c64 -d10s -s bench/edge/mixed.lua http://127.0.0.1:18181/ &
//	go tool pprof -top http://127.0.0.1:6060/debug/pprof/profile?seconds=5
//
//	go run ./bench/prof -stop dns -config dns.yaml -pprof 127.0.0.1:21760 &
//	dnsperf -s 127.0.0.1 -p 5353 -d queries.txt -l 10 &
//	go tool pprof -top http://127.0.0.1:21760/debug/pprof/profile?seconds=5
//
// The L4 daemon's start is over before a profile could be fetched, so -start-profile records
// one from the first instruction until the daemon serves its socket, and -run-profile one from
// then until it stops (SIGTERM): bench/l4scale.sh writes both for every start with PROF_DIR=dir.
//
//	go run ./bench/prof -stop lb -config lb.yaml -pprof "" -start-profile start.pprof -run-profile run.pprof
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	_ "net/http/pprof" //nolint:gosec // opt-in profiling helper, loopback only
	"os/signal"
	"syscall"

	"github.com/switchyard/switchyard/dns"
	dnsconfig "github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/edge"
	"github.com/switchyard/switchyard/l7"
)

func main() {
	stop := flag.String("stop", "", "the stop to run: l7, edge, dns or lb")
	file := flag.String("config", "", "the stop's configuration file")
	pprof := flag.String("pprof", "127.0.0.1:6060", "address for /debug/pprof (\"\": none)")
	startProf := flag.String("start-profile", "", "lb: write a CPU profile of the start (until the socket is served) to `FILE`")
	runProf := flag.String("run-profile", "", "lb: write a CPU profile from then until the daemon stops to `FILE`")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	if *pprof != "" {
		go func() { log.Println(http.ListenAndServe(*pprof, nil)) }()
	}
	var err error
	if *stop == "lb" {
		err = runLB(ctx, *file, *startProf, *runProf)
	} else {
		err = run(ctx, *stop, *file)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// run serves the named stop until ctx ends.
func run(ctx context.Context, stop, file string) error {
	switch stop {
	case "l7":
		cfg, err := l7.LoadConfig(file)
		if err != nil {
			return err
		}
		s, err := l7.NewServer(cfg)
		if err != nil {
			return err
		}
		return s.ListenAndServe(ctx)
	case "edge":
		cfg, err := edge.LoadConfig(file)
		if err != nil {
			return err
		}
		e, err := edge.New(cfg)
		if err != nil {
			return err
		}
		if err := e.Start(); err != nil {
			return err
		}
		<-ctx.Done()
		return e.Close()
	case "dns":
		cfg, err := dnsconfig.Load(file)
		if err != nil {
			return err
		}
		s, err := dns.NewServer(cfg, dns.Options{})
		if err != nil {
			return err
		}
		if err := s.Start(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		s.Close()
		return nil
	default:
		return fmt.Errorf("profile stop %q: unknown; pass -stop l7, -stop edge, -stop dns or -stop lb", stop)
	}
}
