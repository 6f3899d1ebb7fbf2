package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	channel "github.com/siteline/outbox/plugins/channel/v1"
	"github.com/siteline/outbox/plugins/channel/v1/plugintest"
)

func TestMain(m *testing.M) {
	plugintest.Main(m, map[string]func() channel.Channel{"jsonpost": func() channel.Channel { return newJSONPost() }})
}

// receiver is an HTTP server that records what it is sent, by id.
type receiver struct {
	mu  sync.Mutex
	got map[string]map[string]string
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	var m map[string]string
	if err := json.NewDecoder(req.Body).Decode(&m); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.got[m["id"]] = m
	r.mu.Unlock()
}

func (r *receiver) check(t *testing.T, req channel.Request, _ channel.Result) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.got[req.Notification.ID]
	if !ok {
		t.Errorf("notification %s never reached the server", req.Notification.ID)
		return
	}
	if m["subject"] != req.Notification.Subject || m["body"] != req.Notification.Body {
		t.Errorf("server got subject %q and a body of %d bytes; want %q and %d bytes",
			m["subject"], len(m["body"]), req.Notification.Subject, len(req.Notification.Body))
	}
}

func cases(t *testing.T) []plugintest.Case {
	rcv := &receiver{got: map[string]map[string]string{}}
	ok := httptest.NewServer(rcv)
	t.Cleanup(ok.Close)
	status := func(code int) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(code) }))
		t.Cleanup(s.Close)
		return s.URL + "/hook?token=s3cr3t"
	}
	release := make(chan struct{})
	hang := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(func() { close(release); hang.Close() })
	down := "http://" + plugintest.RefusedAddr(t)

	req := func(targets ...string) channel.Request {
		return channel.Request{
			Notification: channel.Notification{List: "ops", Subject: "Pump 3 stopped", Body: "Pressure low."},
			Targets:      targets,
		}
	}
	return []plugintest.Case{
		{Name: "Delivered", Request: req(ok.URL + "/hook"), Want: channel.Success, Check: rcv.check},
		{Name: "ServerError", Request: req(status(http.StatusServiceUnavailable)), Want: channel.Transient},
		{Name: "TooManyRequests", Request: req(status(http.StatusTooManyRequests)), Want: channel.Transient},
		{Name: "NotFound", Request: req(status(http.StatusNotFound)), Want: channel.Permanent},
		{Name: "ServerDown", Request: req(down + "/hook?token=s3cr3t"), Want: channel.Transient,
			Check: func(t *testing.T, _ channel.Request, res channel.Result) {
				// The address once, the token never.
				host := strings.TrimPrefix(down, "http://")
				if strings.Count(res.Error, host) != 1 || strings.Contains(res.Error, "s3cr3t") || !strings.Contains(res.Error, "connection refused") {
					t.Errorf("error %q: want %s once, why, and no token", res.Error, host)
				}
			}},
		{Name: "ServerHangs", Request: req(hang.URL + "/hook?token=s3cr3t"), Want: channel.Transient,
			Timeout: 300 * time.Millisecond},
		{Name: "NotAURL", Request: req("mailto:ops@example.com"), Want: channel.Permanent},
		// Two receivers, one of them busy: the other gets the notification,
		// and the answer says so target by target.
		{Name: "OneOfTwoBusy", Request: req(ok.URL+"/hook", status(http.StatusServiceUnavailable)), Want: channel.Transient,
			WantTargets: []channel.Outcome{channel.Success, channel.Transient}, Check: rcv.check},
		{Name: "OneOfTwoNotFound", Request: req(status(http.StatusNotFound), ok.URL+"/hook"), Want: channel.Permanent,
			WantTargets: []channel.Outcome{channel.Permanent, channel.Success}, Check: rcv.check},
	}
}

func TestKit(t *testing.T) {
	plugintest.Run(t, plugintest.Target{
		Name:    "jsonpost",
		New:     func(*testing.T) channel.Channel { return newJSONPost() },
		Command: plugintest.Reexec("jsonpost"),
		Cases:   cases,
	})
}
