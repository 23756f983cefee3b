// Command l7prof runs the L7 proxy from a configuration file with Go's profiler on a second
// address, for looking at where the proxy's CPU goes under bench/l7.sh's load:
//
//	go run ./bench/l7 -config l7.yaml -pprof 127.0.0.1:6060 &
//	wrk -t2 -c64 -d10s http://127.0.0.1:18181/ &
//	go tool pprof -top http://127.0.0.1:6060/debug/pprof/profile?seconds=5
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	_ "net/http/pprof" //nolint:gosec // opt-in profiling helper, loopback only
	"os/signal"
	"syscall"

	"github.com/switchyard/switchyard/l7"
)

func main() {
	config := flag.String("config", "", "L7 configuration file")
	pprof := flag.String("pprof", "127.0.0.1:6060", "address for /debug/pprof")
	flag.Parse()
	cfg, err := l7.LoadConfig(*config)
	if err != nil {
		log.Fatal(err)
	}
	s, err := l7.NewServer(cfg)
	if err != nil {
		log.Fatal(err)
	}
	go func() { log.Println(http.ListenAndServe(*pprof, nil)) }()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := s.ListenAndServe(ctx); err != nil {
		log.Fatal(err)
	}
}
