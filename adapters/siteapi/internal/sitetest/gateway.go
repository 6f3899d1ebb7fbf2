package sitetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/siteline/outbox/ports"
)

// The targets a Script's gateways define, and what an attempt of each
// answers unless Script.Result says otherwise.
const (
	// System is the external system; its methods: MethodOK succeeds with
	// AnswerOK, MethodDown fails transiently (a 503), MethodRefuse fails
	// for good (a 400).
	System       = "erp"
	MethodOK     = "order"
	MethodDown   = "down"
	MethodRefuse = "refuse"
	// Connection is a database connection whose writes succeed with
	// AnswerRows; ConnectionDown one whose writes fail transiently and,
	// with no retries allowed, park at once.
	Connection     = "plant"
	ConnectionDown = "plant-down"
)

// The answers of the targets that succeed.
var (
	AnswerOK   = json.RawMessage(`{"order":42}`)
	AnswerRows = json.RawMessage(`{"rows_affected":1}`)
)

// Script is the behaviour of the scripted ports.OpGateway of every node of
// a test's site: the gateways one Script makes share it, and it counts the
// attempts of each node and of each operation.
type Script struct {
	// Result, when set (before use), answers every attempt instead of the
	// targets' defaults.
	Result func(node string, op ports.Operation) ports.OpResult

	mu     sync.Mutex
	byNode map[string]int
	byID   map[string]int
}

// Gateway returns the gateway of the node named node.
func (s *Script) Gateway(node string) ports.OpGateway { return &gateway{s: s, node: node} }

// Attempts returns how many attempts node's gateway made.
func (s *Script) Attempts(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byNode[node]
}

// AttemptsOf returns how many attempts were made of the operation id, on
// every node.
func (s *Script) AttemptsOf(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

// AllAttempts returns how many attempts were made in all.
func (s *Script) AllAttempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.byNode {
		n += c
	}
	return n
}

type gateway struct {
	s    *Script
	node string
}

func (g *gateway) Check(op ports.Operation) error {
	switch {
	case op.Kind == ports.OpCall && op.Target == System:
		switch op.Method {
		case MethodOK, MethodDown, MethodRefuse:
			return nil
		}
		return fmt.Errorf("system %s has no method %.64q: %w", System, op.Method, ports.ErrInvalid)
	case op.Kind == ports.OpWrite && (op.Target == Connection || op.Target == ConnectionDown):
		return nil
	case op.Kind == ports.OpCall:
		return fmt.Errorf("no external system %.64q: %w", op.Target, ports.ErrInvalid)
	}
	return fmt.Errorf("no database connection %.64q: %w", op.Target, ports.ErrInvalid)
}

func (g *gateway) Policy(kind ports.OpKind, target string) (ports.OpPolicy, error) {
	if target == ConnectionDown {
		return ports.OpPolicy{MaxRetries: 0, Interval: time.Hour}, nil
	}
	return ports.OpPolicy{MaxRetries: 3, Interval: time.Hour}, nil
}

func (g *gateway) Attempt(_ context.Context, op ports.Operation) ports.OpResult {
	g.s.mu.Lock()
	if g.s.byNode == nil {
		g.s.byNode, g.s.byID = make(map[string]int), make(map[string]int)
	}
	g.s.byNode[g.node]++
	g.s.byID[op.ID]++
	g.s.mu.Unlock()
	if g.s.Result != nil {
		return g.s.Result(g.node, op)
	}
	switch op.Summary() {
	case System + "." + MethodOK:
		return ports.OpResult{Outcome: ports.OutcomeSuccess, Answer: AnswerOK}
	case System + "." + MethodRefuse:
		return ports.OpResult{Outcome: ports.OutcomePermanent, Error: "HTTP 400: no such part"}
	case Connection:
		return ports.OpResult{Outcome: ports.OutcomeSuccess, Answer: AnswerRows}
	}
	return ports.OpResult{Outcome: ports.OutcomeTransient, Error: "HTTP 503: service unavailable"}
}
