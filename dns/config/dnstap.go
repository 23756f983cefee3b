package config

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// Dnstap logs queries and responses as dnstap messages (AUTH_QUERY, AUTH_RESPONSE) over Frame
// Streams to a reader: `dnstap -u`, `fstrm_capture`, a collector (docs/dns.md "dnstap").
type Dnstap struct {
	// Socket is the Unix socket path of the reader (relative to the configuration file).
	Socket string `yaml:"socket"`
	// TCP is the reader's host:port, instead of Socket.
	TCP string `yaml:"tcp"`
	// Identity and Version go into every message (default: the host name and "switchyard").
	Identity string `yaml:"identity"`
	Version  string `yaml:"version"`
	// Queries and Responses choose the messages logged (default both).
	Queries   *bool `yaml:"queries"`
	Responses *bool `yaml:"responses"`
	// Queue bounds the messages waiting for the reader (default 16384): beyond it they are
	// dropped and counted, so a slow or absent reader never delays an answer.
	Queue int `yaml:"queue"`

	// Line is the line of the block in the YAML file, for error messages.
	Line int `yaml:"-"`
}

// UnmarshalYAML decodes a dnstap block strictly and records its line.
func (d *Dnstap) UnmarshalYAML(n *yaml.Node) error {
	type plain Dnstap
	if err := strict(n, (*plain)(d)); err != nil {
		return err
	}
	d.Line = n.Line
	return nil
}

// LogQueries and LogResponses report which messages are logged (both unless turned off).
func (d *Dnstap) LogQueries() bool   { return d.Queries == nil || *d.Queries }
func (d *Dnstap) LogResponses() bool { return d.Responses == nil || *d.Responses }

// Target returns the reader's network ("unix" or "tcp") and address; a relative socket path
// resolves from the configuration file's directory.
func (d *Dnstap) Target(dir string) (network, addr string) {
	if d.TCP != "" {
		return "tcp", d.TCP
	}
	if filepath.IsAbs(d.Socket) || dir == "" {
		return "unix", d.Socket
	}
	return "unix", filepath.Join(dir, d.Socket)
}

func (c *Config) validateDnstap() error {
	d := c.Dnstap
	if d == nil {
		return nil
	}
	where := fmt.Sprintf("line %d: field dnstap", d.Line)
	switch {
	case d.Socket == "" && d.TCP == "":
		return errors.New(where + ": no reader; set socket: /run/dnstap.sock or tcp: host:port")
	case d.Socket != "" && d.TCP != "":
		return errors.New(where + ": both socket and tcp; keep one")
	case d.Queue < 0:
		return fmt.Errorf("%s.queue: %d must be positive (default 16384)", where, d.Queue)
	case !d.LogQueries() && !d.LogResponses():
		return errors.New(where + ": queries and responses are both false; remove the block to log nothing")
	}
	if d.TCP != "" {
		if _, _, err := net.SplitHostPort(d.TCP); err != nil {
			return fmt.Errorf("%s.tcp: parse %q: write host:port, e.g. 127.0.0.1:6000", where, d.TCP)
		}
	}
	return nil
}
