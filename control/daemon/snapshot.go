package daemon

// writeSnapshot keeps, beside the configuration file, the snapshot of the configuration the
// daemon last saved there (config.Saver.Snapshot), so that the next start over the unchanged
// file reads it instead of decoding the YAML (an adopt at 4,096 VIPs spent two thirds of its CPU
// there). Written once when the daemon stops, not at every change.
func (d *Daemon) writeSnapshot() {
	if d.opt.ConfigPath == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.saver.Snapshot(d.opt.ConfigPath); err != nil {
		d.log.Warn("configuration snapshot not written: the next start decodes the YAML", "err", err)
	}
}
