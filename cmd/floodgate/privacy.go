package main

import (
	"fmt"
	"sync"

	"floodgate/history"
	"floodgate/rules"
	"floodgate/secretfile"
)

// HistoryKeyFlags carry the key of the subjects history stores hashed (the
// rules file's kinds: {K: {history: hash}}; docs/history.md, "What is
// stored where, and for how long"). Every command that writes history or
// looks a subject up in it takes it.
type HistoryKeyFlags struct {
	HistoryKeyFile string `name:"history-key-file" env:"FLOODGATE_HISTORY_KEY_FILE" help:"File holding the key of the subjects history stores hashed (kinds with history: hash; at least 16 bytes, e.g. openssl rand -base64 32). Writers need it for those kinds, and key the unique visitors' sketches with it; queries and erase need it to find a hashed subject by its value."`
}

// hasher returns the Hasher of the key file; nil without one.
func (f HistoryKeyFlags) hasher() (*history.Hasher, error) {
	if f.HistoryKeyFile == "" {
		return nil, nil
	}
	key, err := secretfile.Read("history-key", "", f.HistoryKeyFile)
	if err != nil {
		return nil, err
	}
	h, err := history.NewHasher([]byte(key))
	if err != nil {
		return nil, fmt.Errorf("--history-key-file %s: %w", f.HistoryKeyFile, err)
	}
	return h, nil
}

// historyPrivacy is the subject policy of set's kinds: normalization and
// storage.
func historyPrivacy(set *rules.Set, h *history.Hasher) (*history.Privacy, error) {
	kinds := map[string]history.Storage{}
	for k, s := range set.HistoryStorages() {
		st, err := history.ParseStorage(string(s))
		if err != nil {
			return nil, fmt.Errorf("kind %s: %w", k, err)
		}
		kinds[k] = st
	}
	// Subjects and visitor values as the live path counts them: the
	// normalization of set's kinds (rules.Set.Normalize).
	return history.NewPrivacy(kinds, h, set)
}

// privacySource is the history sink's policy, following the rules file:
// rebuilt when a reload gives a new set. A reloaded set that hashes a kind
// while no key is given fails the history batches (retried, nothing
// written raw) until the file or the flag is fixed.
type privacySource struct {
	rules  func() *rules.Set
	hasher *history.Hasher

	mu   sync.Mutex
	set  *rules.Set
	last *history.Privacy
	err  error
}

func (p *privacySource) get() (*history.Privacy, error) {
	set := p.rules()
	p.mu.Lock()
	defer p.mu.Unlock()
	if set != p.set || (p.last == nil && p.err == nil) {
		p.set = set
		p.last, p.err = historyPrivacy(set, p.hasher)
	}
	return p.last, p.err
}
