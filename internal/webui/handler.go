package webui

import (
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

// AppRequestsMetric is the lab's app servers' request counter (lab/app serves it at
// /admin/metrics): the page's "requests per app backend".
const AppRequestsMetric = "switchyard_lab_app_requests_total"

//go:embed static vendor/uPlot.iife.min.js vendor/uPlot.min.css
var files embed.FS

var page = template.Must(template.ParseFS(files, "static/index.html"))

// Handler serves the page and its data:
//
//	GET /                      the page
//	GET /static/..., /vendor/  its script, style and uPlot (embedded)
//	GET /events                server-sent events: one Frame (JSON) per interval
//	GET /frame                 the latest Frame
//	GET /targets/NAME/metrics  the target's metrics text as scraped (a relay for Prometheus
//	                           when the stops listen where Prometheus cannot reach them)
func (c *Collector) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		page.Execute(w, map[string]any{"Title": c.opt.Title, "Interval": c.opt.Interval.Milliseconds()})
	})
	static, _ := fs.Sub(files, ".")
	fsrv := http.FileServerFS(static)
	mux.Handle("GET /static/", fsrv)
	mux.Handle("GET /vendor/", fsrv)
	mux.HandleFunc("GET /events", c.serveEvents)
	mux.HandleFunc("GET /frame", func(w http.ResponseWriter, r *http.Request) {
		f := c.Last()
		if f == nil {
			http.Error(w, "no frame yet: the first scrape runs within a second", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(f.encode())
	})
	mux.HandleFunc("GET /targets/{name}/metrics", c.serveRelay)
	return mux
}

// serveEvents streams frames until the page goes away.
func (c *Collector) serveEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	ch, done := c.subscribe()
	defer done()
	fmt.Fprintf(w, "retry: 2000\n\n")
	if f := c.Last(); f != nil {
		fmt.Fprintf(w, "data: %s\n\n", f.encode())
	}
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case b := <-ch:
			fmt.Fprintf(w, "data: %s\n\n", b)
			fl.Flush()
		case <-keep.C:
			fmt.Fprintf(w, ": keep-alive\n\n")
			fl.Flush()
		}
	}
}

func (c *Collector) serveRelay(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	for _, t := range c.targets {
		if t.Name != name {
			continue
		}
		b, err := Fetch(r.Context(), t)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(b)
		return
	}
	var names []string
	for _, t := range c.targets {
		names = append(names, t.Name)
	}
	http.Error(w, fmt.Sprintf("no target %q: the targets are %s", name, strings.Join(names, ", ")), http.StatusNotFound)
}
