// Package httppath normalises request paths the one way every stop that forwards HTTP (the L7
// proxy, the edge cache) does, so that what a stop matches or caches is what the origin receives.
package httppath

import (
	"fmt"
	"path"
	"strings"
)

// Normalize returns the path a proxy both matches (or keys its cache by) and sends upstream: the
// percent-decoded path with "." and ".." segments resolved and repeated slashes merged, keeping a
// trailing slash. Because the backend receives this same path, "/tracking/../admin" is matched
// and forwarded as "/admin", never as a /tracking request the backend would resolve elsewhere.
// decoded is the request URL's Path, raw its EscapedPath.
// It refuses paths a backend could decode differently: an encoded slash or backslash, NUL, and
// anything not starting with "/".
func Normalize(decoded, raw string) (string, error) {
	if !strings.HasPrefix(decoded, "/") {
		return "", fmt.Errorf("normalize path %q: does not start with /", decoded)
	}
	lower := strings.ToLower(raw)
	if strings.Contains(lower, "%2f") || strings.Contains(lower, "%5c") || strings.Contains(decoded, "\\") {
		return "", fmt.Errorf("normalize path %q: encoded slash or backslash is ambiguous", raw)
	}
	if strings.ContainsRune(decoded, 0) {
		return "", fmt.Errorf("normalize path: contains NUL")
	}
	clean := path.Clean(decoded)
	if strings.HasSuffix(decoded, "/") && clean != "/" {
		clean += "/"
	}
	return clean, nil
}
