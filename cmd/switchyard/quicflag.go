package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/switchyard/switchyard/control/config"
)

// quicFlagUsage documents `vip add --quic`.
const quicFlagUsage = "route QUIC by connection ID: `SCHEME[:SERVER_ID_LEN[:CONFIG_ID]]`, quic-lb (the QUIC-LB draft's plaintext IDs; length 1..4 bytes, default 2; config id 0..6, default 0) or katran; needs --protocol udp"

// parseQUICFlag reads `--quic SCHEME[:SERVER_ID_LEN[:CONFIG_ID]]` into a VIP's quic block, as the
// YAML's quic: {enabled, scheme, server_id_len, config_id} says it. Ranges are checked here with
// the flag's own words (the daemon checks them again as it checks the file).
func parseQUICFlag(s string) (config.QUIC, error) {
	parts := strings.Split(s, ":")
	q := config.QUIC{Enabled: true, Scheme: parts[0]}
	switch q.Scheme {
	case config.QUICSchemeLB:
	case config.QUICSchemeKatran:
		if len(parts) > 1 {
			return config.QUIC{}, fmt.Errorf("invalid --quic %q: katran connection IDs carry their own ID length; give just --quic katran", s)
		}
		return q, nil
	default:
		return config.QUIC{}, fmt.Errorf("invalid --quic %q: the scheme is quic-lb or katran, as in --quic quic-lb:2 or --quic katran", s)
	}
	if len(parts) > 3 {
		return config.QUIC{}, fmt.Errorf("invalid --quic %q: use quic-lb[:SERVER_ID_LEN[:CONFIG_ID]], such as quic-lb:2:0", s)
	}
	if len(parts) > 1 {
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 || n > 4 {
			return config.QUIC{}, fmt.Errorf("invalid --quic %q: the server ID length %q is not 1..4 bytes", s, parts[1])
		}
		q.ServerIDLen = n
	}
	if len(parts) > 2 {
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 0 || n > 6 {
			return config.QUIC{}, fmt.Errorf("invalid --quic %q: the config id %q is not 0..6 (7 marks unroutable connection IDs)", s, parts[2])
		}
		q.ConfigID = n
	}
	return q, nil
}
