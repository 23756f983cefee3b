package edge

// warn is a per-request warning, rate-limited (internal/lograte).
func (e *Edge) warn(msg string, args ...any) { e.warns.Warn(e.log, msg, args...) }
