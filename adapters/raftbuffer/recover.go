package raftbuffer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/siteline/outbox/adapters/internal/hclogslog"
)

// Recover rewrites the Raft state of a STOPPED node so that it forms a group
// of one: its log is replayed into its buffer, a snapshot is written whose
// configuration holds only this node, and the log is emptied. A two-node
// pair (with or without its witness) that lost a node for good thus accepts
// writes again once this node is opened.
//
// The risks are raft's (raft.RecoverCluster): entries this node had
// received but the lost quorum had not committed become committed here.
// Run it on one survivor only: two nodes recovered alone form two groups
// that never agree again. The lost node must not come back with its old
// data; wipe its directory before it returns (adding it back to the group
// is an operation this package does not offer yet).
func Recover(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = cfg.withDefaults()
	self := cfg.self()
	log := cfg.Logger.With("raft_node", cfg.NodeID)
	hl := hclogslog.New(log, raftLevel).Named("raft")

	if _, err := os.Stat(filepath.Join(cfg.Dir, raftFile)); err != nil {
		return fmt.Errorf("raftbuffer: recover: no raft state in %s: %w", cfg.Dir, err)
	}
	st, err := openStores(cfg.Dir, hl)
	if err != nil {
		return fmt.Errorf("raftbuffer: recover: %w", err)
	}
	f, err := openFSM(filepath.Join(cfg.Dir, bufferFile), log)
	if err != nil {
		st.store.Close()
		return fmt.Errorf("raftbuffer: recover: %w", err)
	}
	// Recovery talks to no peer: an in-memory transport only names the node
	// in the snapshot it writes.
	_, trans := raft.NewInmemTransport(raft.ServerAddress(self.Address))
	group := raft.Configuration{Servers: []raft.Server{{
		Suffrage: raft.Voter,
		ID:       raft.ServerID(self.ID),
		Address:  raft.ServerAddress(self.Address),
	}}}
	rerr := raft.RecoverCluster(raftConfig(cfg, hl), f, st.logs, st.store, st.snaps, trans, group)
	errs := []error{}
	if rerr != nil {
		errs = append(errs, fmt.Errorf("raftbuffer: recover %q: %w", self.ID, rerr))
	}
	if err := f.close(); err != nil {
		errs = append(errs, fmt.Errorf("raftbuffer: recover: %w", err))
	}
	if err := st.store.Close(); err != nil {
		errs = append(errs, fmt.Errorf("raftbuffer: recover: close %s: %w", raftFile, err))
	}
	if rerr == nil {
		log.Warn("raftbuffer: recovered the node as a group of one; wipe the lost node before it returns")
	}
	return errors.Join(errs...)
}
