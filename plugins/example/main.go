// Command jsonpost is an example third-party channel plugin for outbox: it
// POSTs each notification as JSON to every target URL of its list.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

type jsonPost struct{ client *http.Client }

// newJSONPost builds the channel. Its HTTP client obeys the delivery network
// policy central passes to the plugin: loopback, link-local and cloud
// metadata addresses, and central's machine's own addresses, are refused
// unless central's configuration allows them.
func newJSONPost() jsonPost {
	return jsonPost{client: channel.NetworkPolicyFromEnv().HTTPClient()}
}

func (jsonPost) Describe(context.Context) (channel.Description, error) {
	return channel.Description{Name: "jsonpost", Version: "0.1.0"}, nil
}

// Deliver posts to each target on its own and answers for each: central
// then retries only the targets that failed, so that a receiver that got the
// notification never gets it again because another one was down.
func (j jsonPost) Deliver(ctx context.Context, req channel.Request) channel.Result {
	if len(req.Targets) == 0 {
		return channel.Fail(errors.New("the list has no target URL"))
	}
	n := req.Notification
	body, _ := json.Marshal(map[string]string{"id": n.ID, "subject": n.Subject, "body": n.Body})
	rs := make([]channel.TargetResult, len(req.Targets))
	for i, target := range req.Targets {
		rs[i] = j.post(ctx, target, body)
	}
	return channel.PerTarget(rs)
}

// post sends body to one target URL and classifies the answer. Its error
// texts name the host at most, never the URL: it may hold a token.
func (j jsonPost) post(ctx context.Context, target string, body []byte) channel.TargetResult {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return channel.TargetResult{Outcome: channel.Permanent, Error: "not an http(s) URL"}
	}
	hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := j.client.Do(hreq)
	var denied *channel.DeniedError
	switch {
	case errors.As(err, &denied): // the policy refuses this address: a retry would too
		return channel.TargetResult{Outcome: channel.Permanent, Error: fmt.Sprintf("post to %s: %v", u.Host, denied)}
	case err != nil:
		return channel.TargetResult{Outcome: channel.Transient, Error: fmt.Sprintf("post to %s: %v", u.Host, cause(err))}
	}
	resp.Body.Close()
	switch {
	case resp.StatusCode >= 500 || resp.StatusCode == 429:
		return channel.TargetResult{Outcome: channel.Transient, Error: fmt.Sprintf("%s answered %s", u.Host, resp.Status)}
	case resp.StatusCode >= 300:
		return channel.TargetResult{Outcome: channel.Permanent, Error: fmt.Sprintf("%s answered %s", u.Host, resp.Status)}
	}
	return channel.TargetResult{Outcome: channel.Success}
}

// cause is what went wrong in err, a failed request, without what the
// message names already or must not: the URL (which may hold a token) and
// the address ("dial tcp 127.0.0.1:8099: connect: connection refused" is
// "connect: connection refused").
func cause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

func main() { channel.Serve(newJSONPost()) }
