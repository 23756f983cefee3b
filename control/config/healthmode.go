package config

import "fmt"

// Health check modes (health_mode, vips[].health.mode).
const (
	// HealthTunnel probes the VIP, encapsulated toward the backend as real traffic: a backend
	// without the VIP on lo or without the decap program fails. The default.
	HealthTunnel = "tunnel"
	// HealthDirect probes the backend's own address: the host is up, nothing more.
	HealthDirect = "direct"
)

// validHealthMode accepts an empty mode (the default) and the two modes.
func validHealthMode(m string) error {
	switch m {
	case "", HealthTunnel, HealthDirect:
		return nil
	}
	return fmt.Errorf("unknown mode %q: use tunnel (probe the VIP through the tunnel, the default) or direct (probe the backend's own address)", m)
}

// HealthModeOf is the mode of a VIP's health check: its own, else the file's health_mode, else
// tunnel.
func (c *Config) HealthModeOf(v *VIP) string {
	if v.Health != nil && v.Health.Mode != "" {
		return v.Health.Mode
	}
	if c.HealthMode != "" {
		return c.HealthMode
	}
	return HealthTunnel
}
