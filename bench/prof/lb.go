package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"

	"github.com/switchyard/switchyard/control/config"
	"github.com/switchyard/switchyard/control/daemon"
)

// runLB runs the L4 daemon as `switchyard lb run --config file` does, recording the CPU of its
// start (until the socket is served) in startProf and of the rest of its run in runProf (either
// may be empty).
func runLB(ctx context.Context, file, startProf, runProf string) error {
	var cur *os.File
	begin := func(path string) error {
		if path == "" {
			return nil
		}
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("profile: %w", err)
		}
		cur = f
		return nil
	}
	end := func() {
		if cur != nil {
			pprof.StopCPUProfile()
			cur.Close()
			cur = nil
		}
	}
	defer end()
	if err := begin(startProf); err != nil {
		return err
	}
	cfg, err := config.LoadSnapshotted(file) // as lb run reads it
	if err != nil {
		return err
	}
	if file, err = filepath.Abs(file); err != nil {
		return err
	}
	cfg.ApplyDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	d, err := daemon.New(daemon.Options{Config: cfg, ConfigPath: file, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Ready: func() {
			end()
			if err := begin(runProf); err != nil {
				log.Print(err)
			}
		}})
	if err != nil {
		return err
	}
	return d.Run(ctx)
}
