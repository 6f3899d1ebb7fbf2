// Command jsonpost is an example third-party channel plugin for outbox: it
// POSTs each notification as JSON to every target URL of its list.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

func (j jsonPost) Deliver(ctx context.Context, req channel.Request) channel.Result {
	if len(req.Targets) == 0 {
		return channel.Fail(errors.New("the list has no target URL"))
	}
	n := req.Notification
	body, _ := json.Marshal(map[string]string{"id": n.ID, "subject": n.Subject, "body": n.Body})
	var sent []string
	for _, target := range req.Targets {
		u, err := url.Parse(target)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
			return channel.Fail(errors.New("a target is not an http(s) URL"))
		}
		hreq, _ := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		hreq.Header.Set("Content-Type", "application/json")
		resp, err := j.client.Do(hreq)
		var denied *channel.DeniedError
		switch {
		case errors.As(err, &denied): // the policy refuses this address: a retry would too
			return channel.Fail(fmt.Errorf("post to %s: %w", u.Host, denied))
		case err != nil: // never show the URL: it may hold a token
			return channel.Retry(fmt.Errorf("post to %s: %w", u.Host, errors.Unwrap(err)))
		}
		resp.Body.Close()
		switch {
		case resp.StatusCode >= 500 || resp.StatusCode == 429:
			return channel.Retry(fmt.Errorf("%s answered %s", u.Host, resp.Status))
		case resp.StatusCode >= 300:
			return channel.Fail(fmt.Errorf("%s answered %s", u.Host, resp.Status))
		}
		sent = append(sent, u.Scheme+"://"+u.Host)
	}
	return channel.Delivered(sent...)
}

func main() { channel.Serve(newJSONPost()) }
