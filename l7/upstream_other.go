//go:build !unix

package l7

import "github.com/switchyard/switchyard/l7/core"

// peekFD cannot look at a socket here; idle connections are taken as quiet.
func peekFD(int) core.IdleProbe { return core.IdleQuiet }
