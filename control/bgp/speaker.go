// Package bgp announces the balancer's VIPs to routers over BGP with an embedded GoBGP
// (github.com/osrg/gobgp/v4, the library Cilium and MetalLB embed). The speaker dials the
// routers and never listens on port 179; it announces one /32 or /128 per prefix it is given and
// withdraws what it is no longer given. Per peer it can run BFD (RFC 5880/5881, single hop, inside
// GoBGP) and announce graceful restart (RFC 4724, with RFC 8538's notification flag). It knows nothing of health or readiness: the daemon
// decides what to announce (control/daemon/announce.go). A router that never answers never blocks
// anything: sessions retry in the background and announcements wait in the local RIB.
package bgp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	api "github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	gbgp "github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"
)

// Peer is one router the speaker dials.
type Peer struct {
	Addr netip.Addr
	ASN  uint32
	// Port is the router's BGP port (179 when 0).
	Port uint16
	// HoldTime is the hold time offered (90s when 0); keepalives go every third of it.
	HoldTime time.Duration
	// Password turns on TCP MD5 signatures.
	Password string
	// BFD runs a BFD session with the peer (nil: none); when it goes down GoBGP resets the BGP
	// session at once instead of waiting for the hold timer.
	BFD *BFD
}

// BFD is a peer's BFD timers (RFC 5880): packets are sent every MinTx and the session goes down
// after Multiplier x MinRx without one.
type BFD struct {
	MinRx, MinTx time.Duration
	Multiplier   uint8
}

// BFDPort is the UDP port of single-hop BFD (RFC 5881); GoBGP listens on it while a peer has BFD.
const BFDPort = 3784

// Options configure a speaker.
type Options struct {
	ASN      uint32
	RouterID netip.Addr
	Peers    []Peer
	// NextHop4 and NextHop6 are announced with IPv4 and IPv6 prefixes; a prefix whose family has
	// no next hop is not announced (and Status says why).
	NextHop4, NextHop6 netip.Addr
	// RestartTime, when set, announces the graceful restart capability with it: a router that
	// helps keeps this node's routes that long after the session drops without a NOTIFICATION
	// (a crash, kill -9), until the restarted speaker sends End-of-RIB.
	RestartTime time.Duration
	Logger      *slog.Logger
}

// Speaker is a running BGP speaker.
type Speaker struct {
	opt Options
	log *slog.Logger
	srv *server.BgpServer

	mu   sync.Mutex // guards want and kick
	want map[netip.Prefix]Attrs

	applyMu sync.Mutex // serialises apply; guards have and the counters
	have    map[netip.Prefix]announced
	counts  Counts

	// renewMu serialises renew with Stop's shutdown of the peers.
	renewMu sync.Mutex
	// bfdBase holds, per peer address, the BFD counts GoBGP does not keep: failures, and the
	// packets of sessions renew replaced.
	bfdMu   sync.Mutex
	bfdBase map[string]BFDState
	bfdLast map[string]string // the state watchBFD read last

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// Attrs are the path attributes of one prefix besides origin and next hop (the daemon's route
// policy, control/config/routepolicy.go).
type Attrs struct {
	// Communities are RFC 1997 communities (32-bit values).
	Communities []uint32
	// LargeCommunities are RFC 8092 large communities.
	LargeCommunities [][3]uint32
	// LocalPref, when set, is sent to iBGP peers (GoBGP drops it toward eBGP peers, as RFC 4271
	// requires).
	LocalPref *uint32
	// MED, when set, is the MULTI_EXIT_DISC.
	MED *uint32
}

// Equal reports whether two attribute sets announce the same path.
func (a Attrs) Equal(o Attrs) bool {
	return slices.Equal(a.Communities, o.Communities) && slices.Equal(a.LargeCommunities, o.LargeCommunities) &&
		eqPtr(a.LocalPref, o.LocalPref) && eqPtr(a.MED, o.MED)
}

// String renders the attributes for logs: "communities 65001:100, large 65001:1:2, med 10".
func (a Attrs) String() string {
	var parts []string
	if len(a.Communities) > 0 {
		cs := make([]string, len(a.Communities))
		for i, c := range a.Communities {
			cs[i] = fmt.Sprintf("%d:%d", c>>16, c&0xffff)
		}
		parts = append(parts, "communities "+strings.Join(cs, " "))
	}
	if len(a.LargeCommunities) > 0 {
		cs := make([]string, len(a.LargeCommunities))
		for i, c := range a.LargeCommunities {
			cs[i] = fmt.Sprintf("%d:%d:%d", c[0], c[1], c[2])
		}
		parts = append(parts, "large "+strings.Join(cs, " "))
	}
	if a.LocalPref != nil {
		parts = append(parts, fmt.Sprintf("local_pref %d", *a.LocalPref))
	}
	if a.MED != nil {
		parts = append(parts, fmt.Sprintf("med %d", *a.MED))
	}
	return strings.Join(parts, ", ")
}

func eqPtr(a, b *uint32) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

// announced is a prefix in the local RIB: GoBGP's id of its path and the attributes it carries.
type announced struct {
	id    uuid.UUID
	attrs Attrs
}

// Counts are the speaker's own event counters.
type Counts struct {
	// Announcements and Withdrawals count prefixes added to and removed from the local RIB.
	Announcements, Withdrawals uint64
	// Replacements counts prefixes announced again with changed attributes.
	Replacements uint64
	// Errors counts RIB changes GoBGP refused.
	Errors uint64
}

var (
	famV4 = &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
	famV6 = &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
)

// Start runs GoBGP with the node's ASN and router id, listening on no port. It dials no peer
// until Connect: a restarting node first puts its announcements back into the local RIB.
func Start(opt Options) (*Speaker, error) {
	if opt.ASN == 0 || !opt.RouterID.Is4() {
		return nil, errors.New("start bgp: need an ASN and an IPv4 router id")
	}
	log := opt.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Speaker{opt: opt, log: log, want: map[netip.Prefix]Attrs{}, have: map[netip.Prefix]announced{}, bfdBase: map[string]BFDState{}, bfdLast: map[string]string{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.srv = server.NewBgpServer(server.LoggerOption(gobgpLogger(log), nil))
	go s.srv.Serve()
	ctx := context.Background()
	if err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: opt.ASN, RouterId: opt.RouterID.String(), ListenPort: -1, // dial only: never listen on 179
	}}); err != nil {
		s.srv.Stop()
		return nil, fmt.Errorf("start bgp: %w", err)
	}
	s.watchSessions()
	go s.run()
	go s.watchBFD()
	return s, nil
}

// Connect puts the wanted set into the local RIB, then dials every peer. restarting says that
// this node kept forwarding through a restart of the speaker (its program stayed attached): the
// OPEN then carries the Restart State and Forwarding State bits, and a router that kept this
// node's routes keeps forwarding to it until End-of-RIB replaces them. Without it a router
// flushes the routes it kept at once.
func (s *Speaker) Connect(restarting bool) error {
	if err := s.apply(); err != nil {
		s.log.Warn("bgp: announce before connecting", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range s.opt.Peers {
		if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: peerConf(p, s.opt.RestartTime, restarting)}); err != nil {
			return fmt.Errorf("connect bgp peer %s: %w", p.Addr, err)
		}
	}
	return nil
}

// watchSessions logs a session coming up and going down at info, the retries of a session that
// is down at debug (GoBGP's own logs of them go out as debug).
func (s *Speaker) watchSessions() {
	up := map[string]bool{} // only the watch callback touches it
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-s.stop
		cancel()
	}()
	err := s.srv.WatchEvent(ctx, server.WatchEventMessageCallbacks{OnPeerUpdate: func(p *apiutil.WatchEventMessage_PeerEvent, _ time.Time) {
		if p == nil || p.Type != apiutil.PEER_EVENT_STATE {
			return
		}
		st := p.Peer.State
		peer := st.NeighborAddress.String()
		switch est := st.SessionState == gbgp.BGP_FSM_ESTABLISHED; {
		case est:
			s.log.Info("bgp: session established", "peer", peer, "asn", st.PeerASN)
		case up[peer]:
			s.log.Warn("bgp: session down", "peer", peer, "state", stateName(api.PeerState_SessionState(st.SessionState+1)),
				"reason", st.DisconnectMessage)
			if bp, ok := s.peerByAddr(st.NeighborAddress); ok && bp.BFD != nil {
				go s.renew(bp)
			}
		default:
			s.log.Debug("bgp: session not established", "peer", peer, "state", stateName(api.PeerState_SessionState(st.SessionState+1)))
		}
		up[peer] = st.SessionState == gbgp.BGP_FSM_ESTABLISHED
	}}, server.WatchPeer())
	if err != nil {
		s.log.Warn("bgp: watch sessions", "err", err)
	}
}

func (s *Speaker) peerByAddr(a netip.Addr) (Peer, bool) {
	for _, p := range s.opt.Peers {
		if p.Addr == a.Unmap() {
			return p, true
		}
	}
	return Peer{}, false
}

// renew works around GoBGP v4.8.0 (fixed in v4.9.0, osrg/gobgp#3561): a BFD expiry while the BGP
// session is down queues a reset NOTIFICATION in the peer's FSM that ends the next session the
// moment it is established. A router that removes its BFD session with its BGP session (bird)
// lets our BFD expire after every drop, so a node that hung or lost its link once never stayed
// up again (TestBGPBFDWithBird). Once a detection time has passed after a session of a BFD peer
// went down (the stale reset is queued by then), the peer is recreated: a fresh FSM and a fresh
// BFD session. It costs the reconnection that detection time.
func (s *Speaker) renew(p Peer) {
	wait := time.Duration(max(p.BFD.Multiplier, 1))*max(p.BFD.MinRx, p.BFD.MinTx) + 100*time.Millisecond
	select {
	case <-s.stop:
		return
	case <-time.After(wait):
	}
	s.renewMu.Lock()
	defer s.renewMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	established := false
	err := s.srv.ListPeer(ctx, &api.ListPeerRequest{Address: p.Addr.String()}, func(ap *api.Peer) {
		established = ap.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED
	})
	if err != nil || established {
		return // up again before the wait ended: a stale reset, if any, ends it and renews then
	}
	select {
	case <-s.stop:
		return
	default:
	}
	var old BFDState
	_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{Address: p.Addr.String()}, func(ap *api.Peer) {
		if b := bfdState(ap); b != nil {
			old = BFDState{Sent: b.Sent, Received: b.Received}
		}
	})
	if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: p.Addr.String()}); err != nil {
		s.log.Warn("bgp: renew peer after its session went down", "peer", p.Addr, "err", err)
		return
	}
	if err := s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: peerConf(p, s.opt.RestartTime, false)}); err != nil {
		s.log.Error("bgp: renew peer after its session went down: the peer is gone until a restart", "peer", p.Addr, "err", err)
		return
	}
	s.addBFDBase(p.Addr.String(), old) // the new BFD session counts from 0
	s.bfdMu.Lock()
	s.bfdLast[p.Addr.String()] = "renewed" // not a failure when watchBFD next reads "down"
	s.bfdMu.Unlock()

	s.log.Debug("bgp: peer renewed after its session went down (a fresh BFD session)", "peer", p.Addr)
}

// watchBFD counts BFD failures, which GoBGP does not: it reads every BFD peer's state a third
// of the shortest detection time apart (at most 100 ms) and counts each change from up to
// anything else.
func (s *Speaker) watchBFD() {
	interval := 100 * time.Millisecond
	hasBFD := false
	for _, p := range s.opt.Peers {
		if b := p.BFD; b != nil {
			hasBFD = true
			interval = min(interval, max(time.Duration(b.Multiplier)*b.MinRx/3, 10*time.Millisecond))
		}
	}
	if !hasBFD {
		return
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.srv.ListPeer(ctx, &api.ListPeerRequest{}, func(ap *api.Peer) {
			b := bfdState(ap)
			if b == nil {
				return
			}
			addr := ap.GetConf().GetNeighborAddress()
			s.bfdMu.Lock()
			if s.bfdLast[addr] == "up" && b.State != "up" {
				b := s.bfdBase[addr]
				b.Failures++
				s.bfdBase[addr] = b
			}
			s.bfdLast[addr] = b.State
			s.bfdMu.Unlock()
		})
		cancel()
	}
}

// addBFDBase adds to what the peer's BFD counters carry over (failures, and the packets of BFD
// sessions that renew replaced).
func (s *Speaker) addBFDBase(peer string, d BFDState) {
	s.bfdMu.Lock()
	defer s.bfdMu.Unlock()
	b := s.bfdBase[peer]
	b.Failures += d.Failures
	b.Sent += d.Sent
	b.Received += d.Received
	s.bfdBase[peer] = b
}

func peerConf(p Peer, restartTime time.Duration, restarting bool) *api.Peer {
	hold := p.HoldTime
	if hold == 0 {
		hold = 90 * time.Second
	}
	port := p.Port
	if port == 0 {
		port = 179
	}
	secs := uint64(hold / time.Second)
	gr := restartTime > 0
	conf := &api.Peer{
		Conf: &api.PeerConf{NeighborAddress: p.Addr.String(), PeerAsn: p.ASN, AuthPassword: p.Password},
		Timers: &api.Timers{Config: &api.TimersConfig{
			HoldTime: secs, KeepaliveInterval: max(secs/3, 1),
			// Retry often: a router that comes back should learn the VIPs within seconds.
			ConnectRetry: 2, IdleHoldTimeAfterReset: 1,
		}},
		Transport: &api.Transport{RemotePort: uint32(port)},
		AfiSafis: []*api.AfiSafi{
			{Config: &api.AfiSafiConfig{Family: famV4, Enabled: true}, MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: gr}}},
			{Config: &api.AfiSafiConfig{Family: famV6, Enabled: true}, MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: gr}}},
		},
	}
	if gr {
		// A restarted node sends its routes and End-of-RIB on the router's End-of-RIB, or after
		// DeferralTime when it sends none: it learns nothing from the routers, so it waits for little.
		conf.GracefulRestart = &api.GracefulRestart{Enabled: true, RestartTime: uint32(restartTime / time.Second),
			NotificationEnabled: true, LocalRestarting: restarting, DeferralTime: 1}
	}
	if b := p.BFD; b != nil {
		conf.Bfd = &api.BfdPeerConfig{Enabled: true, Port: BFDPort, DetectionMultiplier: uint32(b.Multiplier),
			DesiredMinimumTxInterval: uint32(b.MinTx / time.Microsecond), RequiredMinimumReceive: uint32(b.MinRx / time.Microsecond)}
	}
	return conf
}

// Set makes prefixes the announced set, each with its attributes: new ones are announced,
// missing ones withdrawn, changed ones announced again (the new path replaces the old), in the
// background (it never blocks on GoBGP). Addresses are announced as /32 or /128.
func (s *Speaker) Set(prefixes map[netip.Prefix]Attrs) {
	want := make(map[netip.Prefix]Attrs, len(prefixes))
	for p, a := range prefixes {
		want[p.Masked()] = a
	}
	s.mu.Lock()
	s.want = want
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// Flush applies the wanted set now and returns once GoBGP has it (the UPDATEs are queued to
// the established peers).
func (s *Speaker) Flush() error { return s.apply() }

func (s *Speaker) run() {
	defer close(s.done)
	retry := time.NewTicker(5 * time.Second)
	defer retry.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.kick:
		case <-retry.C: // a refused change is tried again
		}
		if err := s.apply(); err != nil {
			s.log.Error("bgp: update the local RIB", "err", err)
		}
	}
}

// apply adds, replaces and deletes paths until the RIB holds the wanted set.
func (s *Speaker) apply() error {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	s.mu.Lock()
	want := s.want
	s.mu.Unlock()
	var errs []error
	for p, h := range s.have {
		if _, ok := want[p]; ok {
			continue
		}
		if err := s.srv.DeletePath(apiutil.DeletePathRequest{UUIDs: []uuid.UUID{h.id}}); err != nil {
			s.counts.Errors++
			errs = append(errs, fmt.Errorf("withdraw %s: %w", p, err))
			continue
		}
		delete(s.have, p)
		s.counts.Withdrawals++
		s.log.Info("bgp: withdrawn", "prefix", p)
	}
	for _, p := range sortedPrefixes(want) {
		attrs := want[p]
		h, ok := s.have[p]
		if ok && h.attrs.Equal(attrs) {
			continue
		}
		path, err := s.path(p, attrs)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		res, err := s.srv.AddPath(apiutil.AddPathRequest{Paths: []*apiutil.Path{path}})
		if err == nil && len(res) == 1 {
			err = res[0].Error
		}
		if err != nil {
			s.counts.Errors++
			errs = append(errs, fmt.Errorf("announce %s: %w", p, err))
			continue
		}
		// GoBGP keys its paths by prefix: a changed path replaces the old one (and its id).
		s.have[p] = announced{id: res[0].UUID, attrs: attrs}
		if ok {
			s.counts.Replacements++
			s.log.Info("bgp: announced with new attributes", "prefix", p, "attrs", attrs.String())
			continue
		}
		s.counts.Announcements++
		s.log.Info("bgp: announced", "prefix", p, "attrs", attrs.String())
	}
	return errors.Join(errs...)
}

// path is the announcement of one prefix: origin IGP, the family's next hop, the attributes.
func (s *Speaker) path(p netip.Prefix, a Attrs) (*apiutil.Path, error) {
	nlri, err := gbgp.NewIPAddrPrefix(p)
	if err != nil {
		return nil, fmt.Errorf("announce %s: %w", p, err)
	}
	attrs := []gbgp.PathAttributeInterface{gbgp.NewPathAttributeOrigin(0)}
	fam := gbgp.RF_IPv4_UC
	if p.Addr().Is4() {
		if !s.opt.NextHop4.IsValid() {
			return nil, fmt.Errorf("announce %s: no IPv4 next hop: set bgp.next_hop or give the interface an IPv4 address", p)
		}
		nh, err := gbgp.NewPathAttributeNextHop(s.opt.NextHop4)
		if err != nil {
			return nil, fmt.Errorf("announce %s: %w", p, err)
		}
		attrs = append(attrs, nh)
	} else {
		if !s.opt.NextHop6.IsValid() {
			return nil, fmt.Errorf("announce %s: no IPv6 next hop: set bgp.next_hop6 or give the interface an IPv6 address", p)
		}
		fam = gbgp.RF_IPv6_UC
		mp, err := gbgp.NewPathAttributeMpReachNLRI(fam, []gbgp.PathNLRI{{NLRI: nlri}}, s.opt.NextHop6)
		if err != nil {
			return nil, fmt.Errorf("announce %s: %w", p, err)
		}
		attrs = append(attrs, mp)
	}
	return &apiutil.Path{Family: fam, Nlri: nlri, Attrs: append(attrs, a.pathAttributes()...)}, nil
}

// pathAttributes are the attributes' BGP encodings.
func (a Attrs) pathAttributes() []gbgp.PathAttributeInterface {
	var out []gbgp.PathAttributeInterface
	if a.MED != nil {
		out = append(out, gbgp.NewPathAttributeMultiExitDisc(*a.MED))
	}
	if a.LocalPref != nil {
		out = append(out, gbgp.NewPathAttributeLocalPref(*a.LocalPref))
	}
	if len(a.Communities) > 0 {
		out = append(out, gbgp.NewPathAttributeCommunities(a.Communities))
	}
	if len(a.LargeCommunities) > 0 {
		lc := make([]*gbgp.LargeCommunity, len(a.LargeCommunities))
		for i, c := range a.LargeCommunities {
			lc[i] = gbgp.NewLargeCommunity(c[0], c[1], c[2])
		}
		out = append(out, gbgp.NewPathAttributeLargeCommunities(lc))
	}
	return out
}

func sortedPrefixes[V any](m map[netip.Prefix]V) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// Announced lists the prefixes in the local RIB (sent to every established peer).
func (s *Speaker) Announced() []netip.Prefix {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return sortedPrefixes(s.have)
}

// Counts returns the event counters.
func (s *Speaker) Counts() Counts {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.counts
}

// Session is the state of one peer.
type Session struct {
	Peer  string `json:"peer"`
	ASN   uint32 `json:"asn"`
	State string `json:"state"`
	// Established is true when the session is up; Uptime counts from then.
	Established bool          `json:"established"`
	Uptime      time.Duration `json:"uptime_ns,omitempty"`
	// PrefixesSent is what the peer was sent and still holds; UpdatesSent counts UPDATE messages.
	PrefixesSent   uint64 `json:"prefixes_sent"`
	UpdatesSent    uint64 `json:"updates_sent"`
	UpdatesRecv    uint64 `json:"updates_received"`
	HoldTime       uint64 `json:"hold_time_s,omitempty"`
	LastDownReason string `json:"last_down_reason,omitempty"`
	// BFD is the BFD session's state (nil when the peer has no BFD).
	BFD *BFDState `json:"bfd,omitempty"`
	// GracefulRestart is set when both sides announced the capability on this session: the
	// router keeps this node's routes for RestartTime if the speaker dies.
	GracefulRestart bool `json:"graceful_restart"`
	// RestartTime is the time announced (0 without graceful restart).
	RestartTime uint32 `json:"restart_time_s,omitempty"`
}

// BFDState is a peer's BFD session.
type BFDState struct {
	// State is up, down, init or admin-down.
	State string `json:"state"`
	// Failures counts the times the session went down from up (each resets BGP: a timeout or the
	// router's Down); GoBGP keeps no count, the speaker reads the state every detection time / 3.
	Failures uint64 `json:"failures"`
	// Sent and Received count control packets.
	Sent     uint64 `json:"packets_sent"`
	Received uint64 `json:"packets_received"`
	// DetectTime is the configured detection time (multiplier x min_rx).
	DetectTime time.Duration `json:"detect_time_ns"`
}

// BFDStates lists every BFD state name, for metrics.
var BFDStates = []string{"down", "init", "up", "admin-down"}

func bfdState(p *api.Peer) *BFDState {
	c := p.GetBfd()
	if !c.GetEnabled() {
		return nil
	}
	st := p.GetState().GetBfdState()
	out := &BFDState{State: "down",
		Sent: st.GetBfdAsync().GetTransmittedPackets(), Received: st.GetBfdAsync().GetReceivedPackets(),
		DetectTime: time.Duration(c.GetDetectionMultiplier()) * time.Duration(c.GetRequiredMinimumReceive()) * time.Microsecond}
	switch st.GetSessionState() {
	case api.BfdSessionState_BFD_SESSION_STATE_UP:
		out.State = "up"
	case api.BfdSessionState_BFD_SESSION_STATE_INIT:
		out.State = "init"
	case api.BfdSessionState_BFD_SESSION_STATE_ADMIN_DOWN:
		out.State = "admin-down"
	}
	return out
}

// grNegotiated says whether both sides announced graceful restart on the current session.
func grNegotiated(p *api.Peer) bool {
	local, remote := false, false
	for _, c := range p.GetState().GetLocalCap() {
		local = local || c.GetGracefulRestart() != nil
	}
	for _, c := range p.GetState().GetRemoteCap() {
		remote = remote || c.GetGracefulRestart() != nil
	}
	return local && remote
}

// Sessions reads the state of every peer from GoBGP.
func (s *Speaker) Sessions(ctx context.Context) ([]Session, error) {
	var out []Session
	err := s.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: true}, func(p *api.Peer) {
		se := Session{Peer: p.GetConf().GetNeighborAddress(), ASN: p.GetConf().GetPeerAsn()}
		if p.Transport != nil && p.Transport.RemotePort != 0 && p.Transport.RemotePort != 179 {
			se.Peer = netip.AddrPortFrom(netip.MustParseAddr(se.Peer), uint16(p.Transport.RemotePort)).String()
		}
		st := p.GetState()
		se.State = stateName(st.GetSessionState())
		se.Established = st.GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED
		if m := st.GetMessages().GetSent(); m != nil {
			se.UpdatesSent = m.Update
		}
		if m := st.GetMessages().GetReceived(); m != nil {
			se.UpdatesRecv = m.Update
		}
		if ts := p.GetTimers().GetState(); ts != nil {
			se.HoldTime = ts.NegotiatedHoldTime
			if se.Established && ts.Uptime != nil {
				se.Uptime = time.Since(ts.Uptime.AsTime()).Round(time.Second)
			}
		}
		for _, a := range p.GetAfiSafis() {
			se.PrefixesSent += a.GetState().GetAdvertised()
		}
		se.BFD = bfdState(p)
		if se.BFD != nil {
			s.bfdMu.Lock()
			b := s.bfdBase[p.GetConf().GetNeighborAddress()]
			s.bfdMu.Unlock()
			se.BFD.Failures, se.BFD.Sent, se.BFD.Received = b.Failures, se.BFD.Sent+b.Sent, se.BFD.Received+b.Received
		}
		se.RestartTime = p.GetGracefulRestart().GetRestartTime()
		se.GracefulRestart = se.Established && se.RestartTime > 0 && grNegotiated(p)
		se.LastDownReason = st.GetDisconnectMessage()
		out = append(out, se)
	})
	if err != nil {
		return nil, fmt.Errorf("list bgp peers: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Peer < out[j].Peer })
	return out, nil
}

// stateName is the RFC 4271 name of a session state.
func stateName(s api.PeerState_SessionState) string {
	switch s {
	case api.PeerState_SESSION_STATE_IDLE:
		return "idle"
	case api.PeerState_SESSION_STATE_CONNECT:
		return "connect"
	case api.PeerState_SESSION_STATE_ACTIVE:
		return "active"
	case api.PeerState_SESSION_STATE_OPENSENT:
		return "opensent"
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		return "established"
	}
	return "unknown(" + strconv.Itoa(int(s)) + ")"
}

// States lists every session state name, for metrics.
var States = []string{"idle", "connect", "active", "opensent", "openconfirm", "established"}

// Stop withdraws everything (the UPDATEs go to the established peers), closes every session with
// a CEASE notification and stops GoBGP.
func (s *Speaker) Stop() {
	select {
	case <-s.stop:
		return
	default:
	}
	s.Set(nil)
	if err := s.apply(); err != nil {
		s.log.Warn("bgp: withdraw on stop", "err", err)
	}
	close(s.stop)
	<-s.done
	s.renewMu.Lock() // a renew under way finishes first; later ones see stop closed
	defer s.renewMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, p := range s.opt.Peers {
		_ = s.srv.ShutdownPeer(ctx, &api.ShutdownPeerRequest{Address: p.Addr.String(), Communication: "switchyard stopping"})
	}
	_ = s.srv.StopBgp(ctx, &api.StopBgpRequest{})
	s.srv.Stop()
}
