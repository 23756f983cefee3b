package edge

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/switchyard/switchyard/edge/cachecontrol"
	"github.com/switchyard/switchyard/edge/store"
)

// ObjectMediaType is the body of PUT /object: one HTTP/1.1 response message (RFC 9112 section
// 10.2), status line, header fields and a body framed by Content-Length, as the origin would
// have answered a GET for the URL.
const ObjectMediaType = "application/http; msgtype=response"

// maxPushedObject bounds one pushed body (the admin API reads it whole before storing it).
const maxPushedObject = 64 << 20

// StoreObject stores a response the origin pushed for an absolute URL, replacing every stored
// variant of it (a fetch of it in flight will not overwrite it). The response must be storable
// for a plain GET of the URL under the edge's rules, and must not vary (the edge could not tell
// which request variant it is for).
func (e *Edge) StoreObject(rawURL string, status int, header http.Header, body []byte) error {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return fmt.Errorf("store pushed object: %q is not an absolute URL; write it like http://www.example.com/app.js", rawURL)
	}
	primary := e.primaryKey(u.Host, u.RequestURI())
	if len(varyNames(header)) > 0 {
		return fmt.Errorf("store pushed object %s: it has Vary; push only objects that do not vary", rawURL)
	}
	req, _ := http.NewRequest(http.MethodGet, u.RequestURI(), nil)
	req.Host = u.Host
	cc := cachecontrol.Parse(header)
	if reason := cachecontrol.Storable(req, nil, status, header, cc); reason != "" {
		return fmt.Errorf("store pushed object %s: not storable (%s); send Cache-Control with a max-age", rawURL, reason)
	}
	life, _ := cachecontrol.Lifetime(status, header, cc, e.heuristic)
	stored := make(http.Header, len(header)+2)
	copyHeader(stored, header)
	for _, k := range []string{"Age", "X-Cache", "Content-Length"} {
		stored.Del(k)
	}
	addVia(stored)
	if !bodyless(status) {
		stored["Content-Length"] = []string{strconv.Itoa(len(body))}
	}
	now := e.now()
	e.invalidate(primary) // the pushed copy replaces every variant, and wins over fetches in flight
	w, err := e.store.NewWriter()
	if err != nil {
		return fmt.Errorf("store pushed object %s: %w", rawURL, err)
	}
	w.Write(body)
	m := &store.Meta{Key: primary, Primary: primary, Status: status, Header: stored, Tags: tagsOf(header),
		ResponseTime: now, InitialAge: cachecontrol.InitialAge(header, now, now), Lifetime: life,
		Directives: cachecontrol.Parse(stored)}
	if _, err := w.Commit(m); err != nil {
		return fmt.Errorf("store pushed object %s: %w", rawURL, err)
	}
	e.stats.Pushed.Add(1)
	return nil
}

// serveObjectPush answers PUT /object?url=ABSOLUTE-URL with an application/http body.
func (e *Edge) serveObjectPush(w http.ResponseWriter, r *http.Request) {
	target := r.URL.Query().Get("url")
	if target == "" {
		http.Error(w, "missing ?url=: name the absolute URL the object is stored for", http.StatusBadRequest)
		return
	}
	path := pushPathOf(r)
	for _, id := range path {
		if id == e.id { // the peers form a loop and the object has been here: stop
			writeJSON(w, PushResult{URL: target, Status: http.StatusOK, Cache: "ALREADY"})
			return
		}
	}
	resp, err := http.ReadResponse(bufio.NewReader(http.MaxBytesReader(w, r.Body, maxPushedObject+64<<10)), nil)
	if err != nil {
		http.Error(w, "read pushed object: the body must be an HTTP/1.1 response message ("+ObjectMediaType+")", http.StatusBadRequest)
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPushedObject+1))
	if err != nil || len(body) > maxPushedObject || (resp.ContentLength >= 0 && int64(len(body)) != resp.ContentLength) {
		http.Error(w, "read pushed object body: incomplete, or over 64 MiB", http.StatusBadRequest)
		return
	}
	if err := e.StoreObject(target, resp.StatusCode, resp.Header, body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	res := PushResult{URL: target, Status: resp.StatusCode, Cache: "PUSHED"}
	res.Forwarded = e.forwardPush(r.Context(), target, resp.StatusCode, resp.Header, body, path)
	writeJSON(w, res)
}

// ObjectMessage renders a response as the body of PUT /object.
func ObjectMessage(status int, header http.Header, body []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	h := header.Clone()
	h.Del("Transfer-Encoding")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Write(&b)
	b.WriteString("\r\n")
	b.Write(body)
	return b.Bytes()
}

// PushObject sends an object (status, header, body) for an absolute URL to the edge, which
// stores it as if it had fetched it.
func (c AdminClient) PushObject(ctx context.Context, rawURL string, status int, header http.Header, body []byte) (PushResult, error) {
	var res PushResult
	err := c.send(ctx, http.MethodPut, "/object?url="+url.QueryEscape(rawURL), ObjectMediaType,
		bytes.NewReader(ObjectMessage(status, header, body)), &res)
	return res, err
}
