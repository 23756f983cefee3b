//go:build !linux

package lowprio

import "errors"

func lower(int) error { return errors.New("per-thread priorities are Linux's") }
