// Command dnsprof runs the DNS stop from a configuration file with Go's profiler on a second
// address, for looking at where the server's CPU goes under bench/dns.sh's load:
//
//	go run ./bench/dnsprof -config dns.yaml -pprof 127.0.0.1:21760 &
//	dnsperf -s 127.0.0.1 -p 5353 -d queries.txt -l 10 &
//	go tool pprof -top http://127.0.0.1:21760/debug/pprof/profile?seconds=5
package main

import (
	"context"
	"flag"
	"log"
	"net/http"
	_ "net/http/pprof" //nolint:gosec // opt-in profiling helper, loopback only
	"os/signal"
	"syscall"

	"github.com/switchyard/switchyard/dns"
	"github.com/switchyard/switchyard/dns/config"
)

func main() {
	file := flag.String("config", "", "DNS configuration file")
	pprof := flag.String("pprof", "127.0.0.1:21760", "address for /debug/pprof")
	flag.Parse()
	cfg, err := config.Load(*file)
	if err != nil {
		log.Fatal(err)
	}
	s, err := dns.NewServer(cfg, dns.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := s.Start(ctx); err != nil {
		log.Fatal(err)
	}
	go func() { log.Println(http.ListenAndServe(*pprof, nil)) }()
	<-ctx.Done()
	s.Close()
}
