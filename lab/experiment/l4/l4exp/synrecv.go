package l4exp

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/internal/namednetns"
	"github.com/switchyard/switchyard/lab/topo"
)

// synSysctlNames are the sysctls of a namespace that bound its SYN_RECV sockets: with
// tcp_syncookies 1 a listener answers with a cookie (no state) once its queue of half-open
// connections holds its backlog (Go listens with somaxconn), and tcp_max_syn_backlog matters
// only without cookies.
var synSysctlNames = []string{"net/ipv4/tcp_syncookies", "net/core/somaxconn", "net/ipv4/tcp_max_syn_backlog", "net/ipv4/tcp_synack_retries"}

// synSysctls reads synSysctlNames in namespace ns.
func synSysctls(ns string) (map[string]string, error) {
	return namednetns.In(ns, func() (map[string]string, error) {
		out := map[string]string{}
		for _, n := range synSysctlNames {
			// /proc/sys/net is the namespace of the thread that opens it: this one.
			b, err := os.ReadFile("/proc/sys/" + n)
			if err != nil {
				return nil, fmt.Errorf("read sysctl %s in %s: %w", n, ns, err)
			}
			out[strings.ReplaceAll(n, "/", ".")] = strings.TrimSpace(string(b))
		}
		return out, nil
	})
}

// tcpExtNames are the TcpExt counters of the backends that say what the flood did to them.
var tcpExtNames = []string{"SyncookiesSent", "SyncookiesRecv", "TCPReqQFullDoCookies", "TCPReqQFullDrop", "ListenOverflows", "ListenDrops"}

// tcpExt sums tcpExtNames over the nodes' namespaces (/proc/net/netstat of a thread there).
func tcpExt(nodes []topo.Node) (map[string]uint64, error) {
	sum := map[string]uint64{}
	for _, n := range nodes {
		b, err := namednetns.In(n.NS, func() ([]byte, error) { return os.ReadFile("/proc/thread-self/net/netstat") })
		if err != nil {
			return nil, fmt.Errorf("read TCP counters in %s: %w", n.NS, err)
		}
		v, err := parseTCPExt(b)
		if err != nil {
			return nil, fmt.Errorf("read TCP counters in %s: %w", n.NS, err)
		}
		for _, k := range tcpExtNames {
			sum[k] += v[k]
		}
	}
	return sum, nil
}

// parseTCPExt reads the TcpExt lines of /proc/net/netstat: a line of names, then one of values.
func parseTCPExt(b []byte) (map[string]uint64, error) {
	var names []string
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) == 0 || f[0] != "TcpExt:" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		if len(f)-1 != len(names) {
			return nil, fmt.Errorf("TcpExt has %d names and %d values", len(names), len(f)-1)
		}
		out := map[string]uint64{}
		for i, x := range f[1:] {
			out[names[i]], _ = strconv.ParseUint(x, 10, 64)
		}
		return out, nil
	}
	return nil, fmt.Errorf("no TcpExt lines in /proc/net/netstat")
}

// synRecv samples the backends' SYN_RECV sockets (`ss state syn-recv` in each namespace) every
// 200 ms until finished, and keeps each backend's highest count.
type synRecv struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	max     map[string]int
	samples int
}

func startSynRecv(nodes []topo.Node) *synRecv {
	s := &synRecv{stop: make(chan struct{}), done: make(chan struct{}), max: map[string]int{}}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 600; i++ { // at most 2 minutes
			for _, n := range nodes {
				c := countSynRecv(n.NS)
				s.mu.Lock()
				s.max[n.Name] = max(s.max[n.Name], c)
				s.mu.Unlock()
			}
			s.mu.Lock()
			s.samples++
			s.mu.Unlock()
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// finish stops the sampling and returns the highest counts and the number of samples.
func (s *synRecv) finish() (map[string]int, int) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.samples
}

// countSynRecv is the number of SYN_RECV sockets in namespace ns (-1: ss failed).
func countSynRecv(ns string) int {
	out, err := exec.Command("nsenter", "--net="+namednetns.Path(ns), "--", "ss", "-Htn", "state", "syn-recv").Output()
	if err != nil {
		return -1
	}
	return bytes.Count(out, []byte("\n"))
}
