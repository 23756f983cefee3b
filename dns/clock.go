package dns

import "time"

// clockTick is how often the coarse clock is refreshed while the server runs.
const clockTick = 100 * time.Millisecond

// now is the clock of signatures: the wall clock, moved by skew in tests.
func (s *Server) now() time.Time { return time.Now().Add(time.Duration(s.skew.Load())) }

// unixNow is now in Unix seconds from the coarse clock, which the answer cache reads on every
// hit of a signed answer: time.Now costs about 190 ns on this VM, as much as the whole cached
// answer, and a signed entry's expiry (the end of its signing window) needs no finer clock.
// Before Start (an embedded server answering Respond directly) it reads the wall clock.
func (s *Server) unixNow() int64 {
	if c := s.coarse.Load(); c != 0 {
		return c + s.skew.Load()/int64(time.Second)
	}
	return s.now().Unix()
}

// runClock refreshes the coarse clock until the server stops.
func (s *Server) runClock() {
	defer s.wg.Done()
	t := time.NewTicker(clockTick)
	defer t.Stop()
	for {
		select {
		case <-s.serveCtx.Done():
			return
		case now := <-t.C:
			s.coarse.Store(now.Unix())
		}
	}
}
