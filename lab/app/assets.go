package app

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// The page of the content-delivery lesson's "Static Content Hosting" (seed 000): twenty assets
// of 216,000 bytes in all (its T13), whose shell references the other nineteen by relative URL
// (so they come from whichever name served the shell) and the tracking query by the app's name,
// and the tracking query's 480-byte answer (K01 V5).
const (
	// TrackingBytes is the body size of /tracking/NUM (K01 V5).
	TrackingBytes = 480
	// AssetMaxAge is the assets' Cache-Control max-age: they never change under their name.
	AssetMaxAge = 86400
	// ShellAsset is the page's entry point, the first of Assets.
	ShellAsset = "shell.html"
	// PageTracking is the tracking query the shell makes, on the app's name PageAppHost.
	PageTracking = "/tracking/TR900011"
	// PageAppHost is the app's name in the lab's zone (lab.WWWName): the shell names it so that
	// the tracking query goes to the app whichever name served the shell.
	PageAppHost = "www.lab.test"
)

// Asset is one file of the page.
type Asset struct {
	Name  string
	Bytes int
}

// Assets are the lesson's twenty assets (static/server.mjs), the shell first.
var Assets = func() []Asset {
	a := []Asset{{ShellAsset, 6000}, {"style.css", 40000}, {"app.js", 120000}, {"font.woff2", 28000}, {"logo.svg", 4000}}
	for i := 1; i <= 15; i++ {
		a = append(a, Asset{"icon-" + strconv.Itoa(i) + ".svg", 1200})
	}
	return a
}()

// shell is the page's HTML padded to the shell's size: the other assets relative to where it
// was served from, the tracking query on PageAppHost.
func shell() string {
	var b strings.Builder
	b.WriteString("<!doctype html>\n<html><head>\n")
	for _, a := range Assets[1:] {
		switch {
		case strings.HasSuffix(a.Name, ".css"), strings.HasSuffix(a.Name, ".woff2"):
			fmt.Fprintf(&b, "<link rel=\"preload\" href=\"%s\">\n", a.Name)
		case strings.HasSuffix(a.Name, ".js"):
			fmt.Fprintf(&b, "<script src=\"%s\"></script>\n", a.Name)
		default:
			fmt.Fprintf(&b, "<img src=\"%s\">\n", a.Name)
		}
	}
	fmt.Fprintf(&b, "</head><body data-api=\"http://%s%s\">\n", PageAppHost, PageTracking)
	s := b.String()
	tail := "</body></html>\n"
	return s + strings.Repeat(" ", max(0, Assets[0].Bytes-len(s)-len(tail))) + tail
}

// serveAsset answers /asset/NAME with the asset's bytes, cacheable for a day, and reports
// whether the path was an asset.
func serveAsset(w http.ResponseWriter, path string) bool {
	name, ok := strings.CutPrefix(path, "/asset/")
	if !ok {
		return false
	}
	for _, a := range Assets {
		if a.Name != name {
			continue
		}
		body := strings.Repeat("x", a.Bytes)
		if a.Name == ShellAsset {
			body = shell()
			w.Header().Set("Content-Type", "text/html")
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Header().Set("Cache-Control", "public, max-age="+strconv.Itoa(AssetMaxAge)+", immutable")
		io.WriteString(w, body)
		return true
	}
	http.Error(w, "no such asset: the page's assets are "+ShellAsset+" and the files it references", http.StatusNotFound)
	return true
}

// serveTracking answers /tracking/NUM with the lesson's 480-byte JSON body (not cacheable: it is
// the app's answer) and reports whether the path was one.
func serveTracking(w http.ResponseWriter, path string) bool {
	num, ok := strings.CutPrefix(path, "/tracking/")
	if !ok {
		return false
	}
	head := fmt.Sprintf(`{"tracking":%q,"state":"in-transit"}`, num)
	body := head + strings.Repeat(" ", max(0, TrackingBytes-len(head)))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.Header().Set("Cache-Control", "no-store")
	io.WriteString(w, body)
	return true
}
