// Package deploy holds what `make install` and `make deb` ship besides the binary: the systemd
// units (deploy/systemd), the example configurations (deploy/etc/switchyard) and the Debian
// package's control files (deploy/debian). Its test installs them into a scratch root, checks
// the units with systemd-analyze and every example with its stop's loader, and installs the
// package with dpkg.
package deploy
