# Shared by the bench scripts (sourced, not run).

# ensure_packages installs the Debian packages that are missing, quietly; a no-op when all are there.
ensure_packages() {
	local need="" p
	for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"; done
	if [ -n "$need" ]; then
		echo "installing:$need" >&2
		apt-get update -qq
		# shellcheck disable=SC2086
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
	fi
}

# require_binary stops with the command that builds the switchyard binary when it is missing.
require_binary() {
	[ -x "$1" ] || { echo "$2 bench: $1 missing; run: go build -o bin/switchyard ./cmd/switchyard" >&2; exit 1; }
}
