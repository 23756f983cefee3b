#!/usr/bin/env bash
# go.sh prints the path of a Go that builds this module: the `go` on PATH when it is at least the
# version go.mod names, else the official toolchain module golang.org/toolchain
# v0.0.1-go<version>.linux-<arch>, fetched once from GOPROXY with curl, checked against the
# go.sum-style hash pinned in tools/go-toolchain.sum (taken from sum.golang.org by
# `tools/go.sh pin`), and unpacked into a cache directory. Progress goes to stderr; the Makefile
# runs it for every target that needs Go, so a fresh machine needs git, make and curl only.
#
#   tools/go.sh          print the path of a usable go (fetching it when needed)
#   tools/go.sh pin      (with a Go that has network access) pin the toolchain hashes of
#                        go.mod's version for linux-amd64 and linux-arm64, as sum.golang.org
#                        has them (go mod download checks them against it)
#
# Environment: GOPROXY (default https://proxy.golang.org), SWITCHYARD_GO_CACHE (default
# ${XDG_CACHE_HOME:-$HOME/.cache}/switchyard).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
sums=$top/tools/go-toolchain.sum
want=$(sed -n 's/^toolchain go\([0-9][0-9.]*\)\s*$/\1/p' "$top/go.mod")
[ -n "$want" ] || want=$(sed -n 's/^go \([0-9][0-9.]*\)\s*$/\1/p' "$top/go.mod")
[ -n "$want" ] || { echo "go.sh: no go version in $top/go.mod" >&2; exit 1; }
module=golang.org/toolchain

say() { echo "go.sh: $*" >&2; }
# at_least A B: version A >= version B.
at_least() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }

if [ "${1:-}" = pin ]; then
	for arch in amd64 arm64; do
		v=v0.0.1-go$want.linux-$arch
		sum=$(cd / && GOFLAGS=-mod=mod go mod download -json "$module@$v" | sed -n 's/.*"Sum": "\(h1:[^"]*\)".*/\1/p')
		[ -n "$sum" ] || { say "go mod download $module@$v gave no sum"; exit 1; }
		grep -v " $v " "$sums" 2>/dev/null > "$sums.new" || true
		echo "$module $v $sum" >> "$sums.new"
		sort -o "$sums" "$sums.new" && rm -f "$sums.new"
		say "pinned $module $v $sum"
	done
	exit 0
fi

# The go on PATH, when new enough (asked outside the module, so that it fetches nothing).
if g=$(command -v go 2>/dev/null); then
	have=$(cd / && GOTOOLCHAIN=local "$g" env GOVERSION 2>/dev/null | sed 's/^go//') || have=""
	if [ -n "$have" ] && at_least "$have" "$want"; then
		echo "$g"
		exit 0
	fi
	say "the go on PATH ($g) is ${have:-unknown}, older than go.mod's $want: using the official toolchain"
fi

case $(uname -m) in
x86_64) arch=amd64 ;;
aarch64 | arm64) arch=arm64 ;;
*) say "no pinned toolchain for $(uname -m): install Go $want or newer (https://go.dev/dl)"; exit 1 ;;
esac
version=v0.0.1-go$want.linux-$arch
cache=${SWITCHYARD_GO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/switchyard}
dir=$cache/go$want.linux-$arch
if [ -x "$dir/bin/go" ]; then
	echo "$dir/bin/go"
	exit 0
fi

sum=$(awk -v m="$module" -v v="$version" '$1 == m && $2 == v { print $3 }' "$sums")
if [ -z "$sum" ]; then
	say "no pinned checksum for $module@$version in tools/go-toolchain.sum: run \`tools/go.sh pin\` where a Go runs, or install Go $want or newer"
	exit 1
fi
for t in curl perl; do
	command -v $t >/dev/null || { say "$t not found: apt-get install -y $t"; exit 1; }
done

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.fetch-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fetched=""
IFS=',|' read -ra proxies <<<"${GOPROXY:-https://proxy.golang.org}"
for p in "${proxies[@]}"; do
	case $p in direct | off | "") continue ;; esac
	say "fetching $module@$version from ${p%/} (about 70 MB, once)"
	if curl -fsSL --retry 3 --connect-timeout 20 --max-time 900 -o "$tmp/go.zip" "${p%/}/$module/@v/$version.zip"; then
		fetched=$p
		break
	fi
	say "could not fetch it from $p"
done
[ -n "$fetched" ] || { say "no proxy in GOPROXY=${GOPROXY:-https://proxy.golang.org} served $module@$version"; exit 1; }

got=$(perl "$top/tools/unzip-h1.pl" "$tmp/go.zip" "$tmp/go" "$module@$version/")
if [ "$got" != "$sum" ]; then
	say "checksum mismatch for $module@$version from $fetched: got $got, tools/go-toolchain.sum has $sum: refusing it (nothing was installed)"
	exit 1
fi
"$tmp/go/bin/go" version >/dev/null || { say "the fetched go does not run"; exit 1; }
rm -rf "$dir"
mv "$tmp/go" "$dir"
say "verified ($sum) and unpacked into $dir"
echo "$dir/bin/go"
