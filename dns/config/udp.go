package config

import "fmt"

// XDP modes of udp.xdp.
const (
	XDPOff     = "off"
	XDPGeneric = "generic"
	XDPNative  = "native"
	XDPAuto    = "auto"
)

// UDP tunes the UDP listener.
type UDP struct {
	// XDP answers static names in the driver (bpf/dnsxdp.c, docs/dns.md "XDP answer path"):
	// off (default), generic (any interface, lo included), native (the driver's XDP; fails
	// where the driver has none) or auto (native, else generic).
	XDP string `yaml:"xdp"`
}

func (u *UDP) validate() error {
	switch u.XDP {
	case "", XDPOff, XDPGeneric, XDPNative, XDPAuto:
		return nil
	}
	return fmt.Errorf("field udp.xdp: %q is unknown; use off, generic, native or auto", u.XDP)
}

// XDPEnabled reports whether udp.xdp asks for the XDP answer path.
func (u UDP) XDPEnabled() bool { return u.XDP != "" && u.XDP != XDPOff }
