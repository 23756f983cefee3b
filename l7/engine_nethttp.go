package l7

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/internal/httppath"
	"github.com/switchyard/switchyard/internal/tlsconf"
	"github.com/switchyard/switchyard/l7/balance"
	"github.com/switchyard/switchyard/l7/core"
)

type ctxKey int

const (
	exchangeKey ctxKey = iota
	schemeKey
	certHeaderKey // a mutual-TLS listener's client-subject field (string)
)

// exchange carries one request's decisions through the reverse proxy and back to the logger.
type exchange struct {
	route  *routeRT
	t      tries // the backends tried, the last one current (tries.go)
	scheme string
	// broken is the error that cut the backend's response body short (not the client's abort).
	broken error
	// relaying is the status of the response being relayed (0 before RoundTrip returns one).
	relaying int
	// client are the client connection's addresses, for a pool's PROXY header (proxyDial).
	client clientEnds
	obs    observer // records the request (finish)
}

// ServeHTTP is net/http's request path: normalisation and routing of its http.Request, then the
// exchange's head side (begin: admission, the first backend, the attempts), the reverse proxy
// whose transport (RoundTrip) runs the exchange's steps, and finish, as on every engine.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if len(s.acme) > 0 && s.answerACME(w, r) {
		return
	}
	s.served.add(engineNetHTTP)
	start := time.Now()
	st := s.state.Load()
	rec := &recorder{ResponseWriter: w, code: http.StatusOK}
	ex := &exchange{scheme: schemeOf(r), client: clientEndsOf(r)}
	defer func() {
		// Deferred: ReverseProxy aborts the handler (panics) on a body the backend cut short.
		if ex.relaying != 0 {
			ex.t.relayed(ex.relaying, ex.broken)
		}
		// r is the request as routed by then: its path the clean one once normalised.
		s.finish(&ex.obs, &ex.t, logged{rt: ex.route, start: start, client: r.RemoteAddr, method: r.Method,
			host: r.Host, path: r.URL.Path, proto: r.Proto}, rec.code, rec.bytes)
	}()
	if r.ProtoMajor == 1 && r.ContentLength != 0 {
		// Let the response start while the request body still streams up (bidirectional
		// streaming); HTTP/1 in net/http is half duplex unless asked.
		_ = http.NewResponseController(w).EnableFullDuplex()
	}

	clean, err := httppath.Normalize(r.URL.Path, r.URL.EscapedPath())
	if err != nil {
		s.metrics.refused.WithLabelValues("400").Inc()
		fail(rec, r, http.StatusBadRequest, "bad request path: "+err.Error(), false)
		return
	}
	m := st.table.Match(r, clean)
	if m == nil {
		fail(rec, r, http.StatusNotFound, "no route matches "+r.Method+" "+clean, false)
		return
	}
	rt, policy := st.routeTo(m.Index, r)
	ex.route = rt
	if rt.redirect != nil {
		rec.code = rt.redirect.answer(rec, r, ex.scheme)
		return
	}
	// Admitted as on every engine (begin): RoundTrip moves the request on a retry, finish gives
	// back the last backend.
	if ref, ok := s.begin(&ex.t, rt, policy, r); !ok {
		ex.route = ref.route
		ref.setHeaders(rec.Header())
		fail(rec, r, ref.code, ref.msg, ref.shed)
		return
	}

	// An upgraded connection (WebSocket) lives as long as its peers keep it open; the total
	// timeout would cut it, so only requests with a response body of their own get it.
	total := grpcBound(r, rt.timeout)
	var ctx context.Context
	var cancel context.CancelFunc
	if r.Header.Get("Upgrade") == "" {
		ctx, cancel = context.WithTimeout(r.Context(), total)
	} else {
		ctx, cancel = context.WithCancel(r.Context())
	}
	defer cancel()
	r = r.WithContext(context.WithValue(ctx, exchangeKey, ex))
	r.URL.Path, r.URL.RawPath = clean, ""
	if policy != nil {
		s.bufferBody(rt, r)
	}
	// Retries start within the total time; a replay needs the body held (GetBody).
	// The transport replays a request on a stale connection itself (tries gets no connection).
	ex.t.hold(r.GetBody != nil, policy != nil && r.GetBody != nil, start.Add(total))
	s.proxy.ServeHTTP(rec, r)
	if ex.broken != nil && r.Context().Err() == nil {
		s.brokenResponse(rec, r, ex.broken)
	}
}

// brokenResponse ends a response whose backend failed after its head: to a gRPC client with the
// trailers of UNAVAILABLE (its status is read there, so a clean end would read as a success
// missing its status), to anyone else by aborting the stream or connection, as net/http's
// server does for ReverseProxy, so the cut is not taken for a whole response.
func (s *Server) brokenResponse(rec *recorder, r *http.Request, err error) {
	if core.IsGRPC(r.Header.Get("Content-Type")) {
		rec.Header().Set(http.TrailerPrefix+"Grpc-Status", strconv.Itoa(core.GRPCUnavailable))
		rec.Header().Set(http.TrailerPrefix+"Grpc-Message", core.GRPCMessage("upstream failed mid-response: "+err.Error()))
		return
	}
	panic(http.ErrAbortHandler)
}

// fail answers a request the proxy itself fails: the HTTP status with its reason as text, or,
// to a gRPC request, HTTP 200 in gRPC's trailers-only form with the grpc-status that stands for
// it (core.GRPCStatus), which is all a gRPC client reads. Metrics and the access log keep the
// HTTP status. shed marks deliberate refusals (load shedding, rate limits).
func fail(w http.ResponseWriter, r *http.Request, code int, msg string, shed bool) {
	if core.IsGRPC(r.Header.Get("Content-Type")) {
		h := w.Header()
		h.Del("Content-Length")
		h.Set("Content-Type", "application/grpc")
		h.Set("Grpc-Status", strconv.Itoa(core.GRPCStatus(code, shed)))
		h.Set("Grpc-Message", core.GRPCMessage(msg))
		w.WriteHeader(http.StatusOK)
		if rec, ok := w.(*recorder); ok {
			rec.code = code
		}
		return
	}
	if code == 499 { // nobody is listening: a status for the log only
		w.WriteHeader(code)
		return
	}
	http.Error(w, msg, code)
}

func schemeOf(r *http.Request) string {
	if v, ok := r.Context().Value(schemeKey).(string); ok {
		return v
	}
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// bufferBody reads a request body up to the route's buffer size so a retry can replay it. A body
// that does not fit streams on unbuffered and its request is never retried.
func (s *Server) bufferBody(rt *routeRT, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		r.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
		return
	}
	limit := rt.cfg.Retry.BufferBody
	if limit <= 0 || r.ContentLength > limit {
		return
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil || int64(len(buf)) > limit {
		// Too large (or broken): hand the upstream what was read plus the rest, unreplayable.
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
		return
	}
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(buf))
	r.ContentLength = int64(len(buf))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
}

// newReverseProxy builds the httputil.ReverseProxy that does header hygiene, streaming, trailers
// and upgrades; the Server is its transport, which is where backends are chosen and retried.
func (s *Server) newReverseProxy() *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      s,
		FlushInterval:  0, // streaming responses (unknown length, event streams) flush at once
		ModifyResponse: modifyResponse,
		ErrorHandler:   s.proxyError,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BufferPool:     bufferPool{},
	}
}

// rewrite sets the forwarding headers. ReverseProxy has already removed hop-by-hop headers and
// any inbound X-Forwarded-* and Forwarded; the proxy appends to the client's X-Forwarded-For
// chain like nginx's $proxy_add_x_forwarded_for, and sets its own proto and Forwarded element.
func rewrite(pr *httputil.ProxyRequest) {
	ex := pr.In.Context().Value(exchangeKey).(*exchange)
	if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
		pr.Out.Header["X-Forwarded-For"] = append([]string(nil), prior...)
	}
	pr.SetXForwarded()
	pr.Out.Header.Set("X-Forwarded-Proto", ex.scheme)
	client := balance.ClientIP(pr.In)
	if strings.Contains(client, ":") {
		client = `"[` + client + `]"`
	}
	fwd := "for=" + client + ";proto=" + ex.scheme
	if pr.In.Host != "" {
		fwd += ";host=" + strconv.Quote(pr.In.Host)
	}
	if prior := pr.In.Header.Get("Forwarded"); prior != "" {
		fwd = prior + ", " + fwd
	}
	pr.Out.Header.Set("Forwarded", fwd)
	via := fmt.Sprintf("%d.%d switchyard", pr.In.ProtoMajor, pr.In.ProtoMinor)
	if pr.In.ProtoMajor == 2 {
		via = "2 switchyard"
	}
	if prior := pr.In.Header.Get("Via"); prior != "" {
		via = prior + ", " + via
	}
	pr.Out.Header.Set("Via", via)
	pr.Out.Host = pr.In.Host
	if name, _ := pr.In.Context().Value(certHeaderKey).(string); name != "" {
		pr.Out.Header.Del(name) // never the client's own copy
		if subj := tlsconf.ClientSubject(pr.In.TLS); subj != "" {
			pr.Out.Header.Set(name, subj)
		}
	}
	if rw := ex.route.rewrite; rw != nil {
		if rw.Hostname != "" {
			pr.Out.Host = rw.Hostname
		}
		pr.Out.URL.Path = rw.rewritePath(pr.In.URL.Path, ex.route.cfg.Match.Path.Prefix)
		pr.Out.URL.RawPath = ""
	}
	ex.route.requestHeaders.Apply(pr.Out.Header)
}

// modifyResponse adds Via and the sticky-session cookie.
func modifyResponse(resp *http.Response) error {
	ex := resp.Request.Context().Value(exchangeKey).(*exchange)
	ex.route.responseHeaders.Apply(resp.Header)
	encodeResponse(ex.route.compress, resp)
	resp.Header.Add("Via", fmt.Sprintf("%d.%d switchyard", resp.ProtoMajor, resp.ProtoMinor))
	p := ex.route.pool
	if b := ex.t.backend(); p.sticky != nil && p.sticky.NeedsCookie(resp.Request, b) {
		c := &http.Cookie{Name: p.sticky.CookieName, Value: balance.ID(b), Path: "/", HttpOnly: true,
			Secure: ex.scheme == "https", SameSite: http.SameSiteLaxMode}
		if ttl := p.cfg.Sticky.TTL; ttl > 0 {
			c.MaxAge = int(ttl.Seconds())
		}
		resp.Header.Add("Set-Cookie", c.String())
	}
	return nil
}

// proxyError answers a request whose exchange failed before a response head, with the
// status every engine gives that failure (upstreamCode).
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	code, msg, extra := upstreamCode(err)
	ref := refusal{code: code, msg: msg, extra: extra, shed: core.LocalResource(err)}
	ref.setHeaders(w.Header())
	fail(w, r, ref.code, ref.msg, ref.shed)
}

// grpcBound is the total timeout of a request: the route's, or a gRPC client's shorter
// grpc-timeout (the deadline the client gives the whole call).
func grpcBound(r *http.Request, route time.Duration) time.Duration {
	if v := r.Header.Get("Grpc-Timeout"); v != "" && core.IsGRPC(r.Header.Get("Content-Type")) {
		if d, ok := core.GRPCTimeout(v); ok && d < route {
			return d
		}
	}
	return route
}

// RoundTrip forwards the request to the backend admission picked, and moves it to another one
// on connect errors and the route's retry statuses, as the core's retry policy and budget allow:
// the exchange's steps in its order (tries.after), as on every engine. net/http's transport
// connects and sends within its round trip (xAwait here) and replays a request on a stale
// connection itself (tries gets no connection).
func (s *Server) RoundTrip(req *http.Request) (*http.Response, error) {
	ex := req.Context().Value(exchangeKey).(*exchange)
	var resp *http.Response
	var failure error
	var o outcome
	for step := xAwait; ; step = ex.t.after(step, o, time.Now()) {
		o = outcome{}
		switch step {
		case xAwait:
			resp, o.err = s.roundTrip(req, ex)
			if o.err != nil {
				failure = fmt.Errorf("forward to %s: %w", ex.t.backend().Address, o.err)
			} else {
				o.code = resp.StatusCode
			}
		case xRetry:
			// Drain a little so the connection can be reused, then drop this response.
			io.CopyN(io.Discard, resp.Body, 4<<10)
			resp.Body.Close()
		case xRelay:
			ex.relaying = resp.StatusCode // passive health hears of it once relayed (ServeHTTP)
			if h := ex.route.cfg.Retry; h != nil && h.FailoverHeader != "" && ex.t.attempts() > 1 {
				resp.Header.Set(h.FailoverHeader, "1") // l7/failover.go
			}
			resp.Body = watchBody(resp.Body, ex)
			return resp, nil
		case xAnswer:
			return nil, failure // answered by proxyError
		}
		// xConnect, xSend: the transport's, within the round trip
	}
}

// roundTrip sends the request to the current backend of ex (its held body again on a retry)
// and returns the response head.
func (s *Server) roundTrip(req *http.Request, ex *exchange) (*http.Response, error) {
	p := ex.route.pool
	b := ex.t.backend()
	out := req
	if ex.t.attempts() > 1 {
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("replay request body: %w", err)
		}
		out = req.Clone(req.Context())
		out.Body = body
	}
	out.URL.Scheme, out.URL.Host = p.scheme, b.Address
	var resp *http.Response
	var err error
	if p.h2up != nil && out.Header.Get("Upgrade") != "" {
		resp, err = p.h2up.upgrade(out, b) // WebSocket to an HTTP/2 backend: extended CONNECT
	} else {
		resp, err = p.transport.RoundTrip(out)
	}
	if err != nil && errors.Is(req.Context().Err(), context.Canceled) {
		err = errors.Join(err, context.Canceled) // the client's own abort
	}
	return resp, err
}

// watchBody notes an error that cuts the response body short (ex.broken), for ServeHTTP to end
// the response as broken. An upgraded (101) body is also a writer and stays one, because
// ReverseProxy needs it to be.
func watchBody(body io.ReadCloser, ex *exchange) io.ReadCloser {
	wb := &watchedBody{ReadCloser: body, ex: ex}
	if rw, ok := body.(io.ReadWriteCloser); ok {
		return &watchedRWBody{watchedBody: wb, w: rw}
	}
	return wb
}

type watchedBody struct {
	io.ReadCloser
	ex *exchange
}

func (r *watchedBody) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && err != io.EOF && r.ex.broken == nil {
		r.ex.broken = err
	}
	return n, err
}

type watchedRWBody struct {
	*watchedBody
	w io.Writer
}

func (r *watchedRWBody) Write(p []byte) (int, error) { return r.w.Write(p) }

// recorder captures the status and size of a response for the log and metrics. It unwraps for
// http.ResponseController, so flushing and hijacking (upgrades) reach the real writer.
type recorder struct {
	http.ResponseWriter
	code    int
	bytes   int64
	written bool
}

func (r *recorder) WriteHeader(code int) {
	if !r.written || code < 200 {
		r.code = code
	}
	if code >= 200 || code == http.StatusSwitchingProtocols {
		r.written = true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	r.written = true
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// clientEndsOf are the addresses of r's client connection (dst nil where the server does not
// say: the PROXY header is then LOCAL).
func clientEndsOf(r *http.Request) clientEnds {
	var ends clientEnds
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		ends.src = net.TCPAddrFromAddrPort(ap)
	}
	ends.dst, _ = r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ends
}
