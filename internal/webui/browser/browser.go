// Package browser drives a headless Chromium (Debian's chromium) over the DevTools protocol on
// --remote-debugging-pipe (NUL-terminated JSON on descriptors 3 and 4, no WebSocket), for the
// tests that load switchyard's web UI in a real browser: open a page, evaluate script, collect
// console errors and uncaught exceptions, take a screenshot.
package browser

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Find returns the path of a Chromium binary, or an error naming the package to install.
func Find() (string, error) {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", errors.New("find chromium: not installed (apt-get install -y chromium, or `make deps`)")
}

// Browser is one headless Chromium with one page (a flat DevTools session).
type Browser struct {
	cmd     *exec.Cmd
	dir     string
	w       *os.File
	mu      sync.Mutex
	nextID  int
	pending map[int]chan reply
	session string
	errs    []string
	done    chan struct{}
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

type message struct {
	ID        int             `json:"id"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	SessionID string          `json:"sessionId"`
	reply
}

// Start runs Chromium headless with a fresh profile and a page of width x height pixels.
func Start(ctx context.Context, width, height int) (*Browser, error) {
	exe, err := Find()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "switchyard-chromium-")
	if err != nil {
		return nil, fmt.Errorf("start chromium: %w", err)
	}
	toChrome, ourW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start chromium: %w", err)
	}
	ourR, fromChrome, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start chromium: %w", err)
	}
	b := &Browser{dir: dir, w: ourW, pending: map[int]chan reply{}, done: make(chan struct{})}
	b.cmd = exec.Command(exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
		"--user-data-dir="+dir, "--remote-debugging-pipe", fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	b.cmd.ExtraFiles = []*os.File{toChrome, fromChrome} // descriptors 3 (it reads) and 4 (it writes)
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start chromium: %w", err)
	}
	toChrome.Close()
	fromChrome.Close()
	go b.read(ourR)
	if err := b.open(ctx, width, height); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// open makes the page and attaches a flat session to it with the domains the tests use.
func (b *Browser) open(ctx context.Context, width, height int) error {
	var t struct {
		TargetID string `json:"targetId"`
	}
	if err := b.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &t); err != nil {
		return err
	}
	var s struct {
		SessionID string `json:"sessionId"`
	}
	if err := b.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": t.TargetID, "flatten": true}, &s); err != nil {
		return err
	}
	b.session = s.SessionID
	for _, m := range []string{"Runtime.enable", "Log.enable", "Page.enable"} {
		if err := b.Call(ctx, m, nil, nil); err != nil {
			return err
		}
	}
	return b.Call(ctx, "Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}, nil)
}

func (b *Browser) read(r *os.File) {
	defer close(b.done)
	defer r.Close()
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var m message
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		if m.ID != 0 {
			b.mu.Lock()
			ch := b.pending[m.ID]
			delete(b.pending, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m.reply
			}
			continue
		}
		b.event(m)
	}
}

// event records what the page reports as an error: console.error/assert, uncaught
// exceptions and log entries of level error (failed loads among them).
func (b *Browser) event(m message) {
	var e string
	switch m.Method {
	case "Runtime.consoleAPICalled":
		var p struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		if json.Unmarshal(m.Params, &p) == nil && (p.Type == "error" || p.Type == "assert") {
			e = fmt.Sprintf("console.%s: %v", p.Type, p.Args)
		}
	case "Runtime.exceptionThrown":
		e = "exception: " + string(m.Params)
	case "Log.entryAdded":
		var p struct {
			Entry struct {
				Level, Text, URL string
			} `json:"entry"`
		}
		if json.Unmarshal(m.Params, &p) == nil && p.Entry.Level == "error" {
			e = fmt.Sprintf("log: %s %s", p.Entry.Text, p.Entry.URL)
		}
	}
	if e != "" {
		b.mu.Lock()
		b.errs = append(b.errs, e)
		b.mu.Unlock()
	}
}

// Call sends a DevTools command to the page and decodes its result into out (nil: ignored).
func (b *Browser) Call(ctx context.Context, method string, params, out any) error {
	return b.call(ctx, b.session, method, params, out)
}

func (b *Browser) call(ctx context.Context, session, method string, params, out any) error {
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan reply, 1)
	b.pending[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, _ := json.Marshal(msg)
	if _, err := b.w.Write(append(raw, 0)); err != nil {
		return fmt.Errorf("devtools %s: %w", method, err)
	}
	select {
	case r := <-ch:
		if r.Error != nil {
			return fmt.Errorf("devtools %s: %s", method, r.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-b.done:
		return fmt.Errorf("devtools %s: chromium exited", method)
	case <-ctx.Done():
		return fmt.Errorf("devtools %s: %w", method, ctx.Err())
	}
}

// Navigate loads url and waits for its load event to have fired (document.readyState).
func (b *Browser) Navigate(ctx context.Context, url string) error {
	var r struct {
		ErrorText string `json:"errorText"`
	}
	if err := b.Call(ctx, "Page.navigate", map[string]any{"url": url}, &r); err != nil {
		return err
	}
	if r.ErrorText != "" {
		return fmt.Errorf("navigate to %s: %s", url, r.ErrorText)
	}
	for {
		var state string
		if err := b.Eval(ctx, "document.readyState", &state); err == nil && state == "complete" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("navigate to %s: page not loaded: %w", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Eval evaluates a JavaScript expression in the page and decodes its value into out.
func (b *Browser) Eval(ctx context.Context, expr string, out any) error {
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := b.Call(ctx, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true}, &r); err != nil {
		return err
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("evaluate %q: %s", expr, r.ExceptionDetails.Text)
	}
	if out == nil || len(r.Result.Value) == 0 {
		return nil
	}
	return json.Unmarshal(r.Result.Value, out)
}

// Screenshot returns a PNG of the page's viewport.
func (b *Browser) Screenshot(ctx context.Context) ([]byte, error) {
	var r struct {
		Data string `json:"data"`
	}
	if err := b.Call(ctx, "Page.captureScreenshot", map[string]any{"format": "png"}, &r); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(r.Data)
}

// Errors are the console errors, exceptions and error log entries seen so far.
func (b *Browser) Errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errs...)
}

// Close ends Chromium and every process it started (its process group) and removes its profile.
func (b *Browser) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = b.call(ctx, "", "Browser.close", nil, nil)
	b.w.Close()
	exited := make(chan struct{})
	go func() { b.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(3 * time.Second):
	}
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL) // helpers left in the group
	select {
	case <-exited:
	case <-time.After(2 * time.Second):
	}
	os.RemoveAll(b.dir)
}
