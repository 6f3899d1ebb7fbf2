package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// TLSFiles names the PEM files of one TLS endpoint, a record setting
// (link.tls, http.tls, raft.tls, ...) whose keys are its yaml tags. Cert and
// Key are this side's certificate and private key; CA holds the
// certificates that sign the other side's (a server checks client
// certificates against it, a client the server's).
type TLSFiles struct {
	Cert string `yaml:"cert"`
	Key  string `yaml:"key"`
	CA   string `yaml:"ca"`
	// ServerName, on a client, is the name expected in the server's
	// certificate when it differs from the host dialled.
	ServerName string `yaml:"server_name"`
}

// set reports whether any file is named.
func (t TLSFiles) set() bool { return t.Cert != "" || t.Key != "" || t.CA != "" }

// validate checks that the files come in usable sets and exist. needCert
// says this side must present a certificate.
func (t TLSFiles) validate(key string, needCert bool) rules {
	var r rules
	if !t.set() {
		return r
	}
	if (t.Cert == "") != (t.Key == "") {
		r.Add(key, "cert and key go together: give both or neither")
	}
	if needCert && t.Cert == "" {
		r.Add(key+".cert", "required: this side presents a certificate")
	}
	for name, path := range map[string]string{"cert": t.Cert, "key": t.Key, "ca": t.CA} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			r.Add(key+"."+name, "%v", err)
		}
	}
	return r
}

// load reads the files into a tls.Config for both directions: its
// certificate is presented as a server or a client, and CA verifies the
// peer. When CA is set a server requires and verifies client certificates.
func (t TLSFiles) load() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.Cert != "" {
		pair, err := tls.LoadX509KeyPair(t.Cert, t.Key)
		if err != nil {
			return nil, fmt.Errorf("load certificate %s: %w", t.Cert, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if t.CA != "" {
		pem, err := os.ReadFile(t.CA)
		if err != nil {
			return nil, fmt.Errorf("read CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", t.CA)
		}
		cfg.RootCAs = pool
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
