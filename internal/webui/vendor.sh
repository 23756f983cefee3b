#!/usr/bin/env bash
# vendor.sh refreshes the committed copy of uPlot (https://github.com/leeoniya/uPlot, MIT) that the
# web UI embeds: it fetches the package with npm, copies its minified dist files and licence into
# internal/webui/vendor/ and records the version and the files' sha256 in vendor/VERSION. The
# build never runs it and nothing is fetched at run time: the committed files are what ships.
#
#   internal/webui/vendor.sh            # the pinned version below
#   UPLOT_VERSION=1.6.33 internal/webui/vendor.sh
set -euo pipefail
version=${UPLOT_VERSION:-1.6.32}
dir=$(cd "$(dirname "$0")" && pwd)/vendor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "uplot@$version" >/dev/null && tar xzf "uplot-$version.tgz")
mkdir -p "$dir"
cp "$tmp/package/dist/uPlot.iife.min.js" "$tmp/package/dist/uPlot.min.css" "$tmp/package/LICENSE" "$dir/"
{
	echo "uplot $version (npm: uplot@$version, licence: MIT, see LICENSE)"
	(cd "$dir" && sha256sum uPlot.iife.min.js uPlot.min.css LICENSE)
} >"$dir/VERSION"
cat "$dir/VERSION"
