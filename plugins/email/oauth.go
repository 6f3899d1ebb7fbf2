package email

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	channel "github.com/siteline/outbox/plugins/channel/v1"
)

// tokenMargin is how long before its expiry a token is no longer used, so
// that it does not expire between the fetch and the SMTP AUTH.
const tokenMargin = time.Minute

// oauthErrorCode matches an RFC 6749 error code worth repeating in a
// Result's Error ("invalid_client").
var oauthErrorCode = regexp.MustCompile(`^[a-z_]{1,64}$`)

// tokenSource hands out the access token of one OAuth2 client (token
// endpoint, client id and secret, scopes), fetched with the client
// credentials grant and cached until shortly before it expires. It is safe
// for concurrent use; concurrent callers wait for one fetch.
type tokenSource struct {
	config clientcredentials.Config
	client *http.Client
	now    func() time.Time

	fetch chan struct{} // holds one token while a fetch runs

	mu  sync.Mutex
	tok *oauth2.Token
}

// newTokenSource returns the token source of cfg's OAuth2 client.
func newTokenSource(cfg *config, client *http.Client, now func() time.Time) *tokenSource {
	return &tokenSource{
		config: clientcredentials.Config{
			ClientID:     cfg.clientID,
			ClientSecret: cfg.clientSecret,
			TokenURL:     cfg.tokenURL,
			Scopes:       cfg.scopes,
		},
		client: client,
		now:    now,
		fetch:  make(chan struct{}, 1),
	}
}

// cached returns the cached access token if it is still good for a while.
func (s *tokenSource) cached() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok == nil || s.tok.AccessToken == "" {
		return ""
	}
	if !s.tok.Expiry.IsZero() && !s.now().Add(tokenMargin).Before(s.tok.Expiry) {
		return ""
	}
	return s.tok.AccessToken
}

// current returns the cached access token, expired or not, for masking.
func (s *tokenSource) current() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok == nil {
		return ""
	}
	return s.tok.AccessToken
}

// forget drops the cached token if it is token, so that the next call
// fetches a new one (the SMTP server refused it).
func (s *tokenSource) forget(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok != nil && s.tok.AccessToken == token {
		s.tok = nil
	}
}

// token returns a valid access token, fetching one when none is cached. An
// error is marked Permanent when the endpoint refused the client (HTTP 4xx
// but 408 and 429) and Transient otherwise (HTTP 5xx, network, ctx ended).
func (s *tokenSource) token(ctx context.Context) (string, error) {
	if t := s.cached(); t != "" {
		return t, nil
	}
	select {
	case s.fetch <- struct{}{}:
	case <-ctx.Done():
		return "", transient(fmt.Errorf("waiting for the XOAUTH2 token: %w", ctx.Err()))
	}
	defer func() { <-s.fetch }()
	if t := s.cached(); t != "" { // fetched while this call waited
		return t, nil
	}

	tok, err := s.config.Token(context.WithValue(ctx, oauth2.HTTPClient, s.client))
	if err != nil {
		return "", tokenError(err)
	}
	if tok.AccessToken == "" {
		return "", transient(errors.New("fetching the XOAUTH2 token: the token endpoint answered no access token"))
	}
	if !tok.Expiry.IsZero() {
		// The expiry on the channel's clock, the one cached compares with.
		tok.Expiry = s.now().Add(time.Until(tok.Expiry))
	}
	s.mu.Lock()
	s.tok = tok
	s.mu.Unlock()
	return tok.AccessToken, nil
}

// tokenError classifies and describes a failed token fetch. It never
// repeats the endpoint's response body, which may echo the request.
func tokenError(err error) error {
	var denied *channel.DeniedError
	if errors.As(err, &denied) {
		// Permanent, and named by its address alone (the wrapped error
		// quotes the token URL).
		return permanent(fmt.Errorf("fetching the XOAUTH2 token: %w", denied))
	}
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) || re.Response == nil {
		return transient(fmt.Errorf("fetching the XOAUTH2 token: %w", err))
	}
	status := re.Response.StatusCode
	detail := ""
	if oauthErrorCode.MatchString(re.ErrorCode) {
		detail = " (" + re.ErrorCode + ")"
	}
	e := fmt.Errorf("fetching the XOAUTH2 token: the token endpoint answered HTTP %d%s", status, detail)
	if status >= 400 && status < 500 && status != http.StatusRequestTimeout && status != http.StatusTooManyRequests {
		return permanent(e)
	}
	return transient(e)
}
