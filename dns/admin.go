package dns

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/switchyard/switchyard/dns/config"
	"github.com/switchyard/switchyard/internal/adminauth"
)

// ConfigReload is what a reload of the whole configuration did.
type ConfigReload struct {
	// Zones is the number of zones served after it.
	Zones int `json:"zones"`
}

// ReloadHandler is the admin endpoint POST /reload, served beside /metrics (`dns run
// --metrics`): with ?zone=NAME it reloads that zone alone (ReloadZone), without it the whole
// configuration read by load (ReloadWith, as SIGHUP does). It changes the served state, so it
// needs "Authorization: Bearer <token>" like the L7 and edge admin endpoints
// (adminauth.Require); with token "" it refuses every request. The answer is a ZoneReload or a
// ConfigReload as JSON; an error is 404 (no such zone), 409 (a zone without a file to read) or
// 422 (the data was refused), its text naming the problem and the fix.
func (s *Server) ReloadHandler(token string, load func() (*config.Config, error)) http.Handler {
	return adminauth.Require(func() string { return token }, "switchyard-dns", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "reload: use POST", http.StatusMethodNotAllowed)
			return
		}
		var out any
		var err error
		if name := r.URL.Query().Get("zone"); name != "" {
			out, err = s.ReloadZone(name)
		} else if err = s.ReloadWith(load); err == nil {
			out = ConfigReload{Zones: len(s.state.Load().cfg.Zones)}
		}
		switch {
		case errors.Is(err, ErrUnknownZone):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, ErrNotReloadable):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		default:
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(out)
		}
	})
}
