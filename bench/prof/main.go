// Command prof runs one stop (the L7 proxy, the edge cache or the DNS server) from its configuration file with
// Go's profiler on a second address, for looking at where the stop's CPU goes under its bench's
// load:
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
	stop := flag.String("stop", "", "the stop to run: l7, edge or dns")
	file := flag.String("config", "", "the stop's configuration file")
	pprof := flag.String("pprof", "127.0.0.1:6060", "address for /debug/pprof")
	flag.Parse()
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	go func() { log.Println(http.ListenAndServe(*pprof, nil)) }()
	if err := run(ctx, *stop, *file); err != nil {
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
		return fmt.Errorf("profile stop %q: unknown; pass -stop l7, -stop edge or -stop dns", stop)
	}
}
