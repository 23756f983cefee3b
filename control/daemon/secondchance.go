package daemon

import (
	"time"

	"github.com/switchyard/switchyard/control/config"
)

// secondChance is the second_chance switch after defaults (on unless set false).
func secondChance(cfg *config.Config) bool {
	return cfg.SecondChance == nil || *cfg.SecondChance
}

// retirePrevious empties the previous Maglev tables older than second_chance_retire (nothing
// when it is 0): called every second from the daemon's loop.
func (d *Daemon) retirePrevious(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, err := d.rec.RetirePrevious(now)
	if err != nil {
		d.log.Error("retire previous rings", "err", err)
		return
	}
	if n > 0 {
		d.log.Info("previous rings retired", "slots_written", n, "after", d.cfg.SecondChanceRetire.D())
	}
}
