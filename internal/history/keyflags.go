package history

import (
	"fmt"
	"sync"

	"github.com/floodgate-dev/floodgate/internal/rules"
	"github.com/floodgate-dev/floodgate/internal/secretfile"
)

// KeyFlags carry the key of the subjects history stores hashed (the
// rules file's kinds: {K: {history: hash}}; docs/md, "What is
// stored where, and for how long"). Every command that writes history or
// looks a subject up in it takes it.
type KeyFlags struct {
	HistoryKeyFile string `name:"history-key-file" env:"FLOODGATE_HISTORY_KEY_FILE" help:"File holding the key of the subjects history stores hashed (kinds with history: hash; at least 16 bytes, e.g. openssl rand -base64 32). Writers need it for those kinds, and key the unique visitors' sketches with it; queries and erase need it to find a hashed subject by its value."`
}

// Hasher returns the Hasher of the key file; nil without one.
func (f KeyFlags) Hasher() (*Hasher, error) {
	if f.HistoryKeyFile == "" {
		return nil, nil
	}
	key, err := secretfile.Read("history-key", "", f.HistoryKeyFile)
	if err != nil {
		return nil, err
	}
	h, err := NewHasher([]byte(key))
	if err != nil {
		return nil, fmt.Errorf("--history-key-file %s: %w", f.HistoryKeyFile, err)
	}
	return h, nil
}

// PrivacyOf is the subject policy of set's kinds: normalization and
// storage.
func PrivacyOf(set *rules.Set, h *Hasher) (*Privacy, error) {
	kinds := map[string]Storage{}
	for k, s := range set.HistoryStorages() {
		st, err := ParseStorage(string(s))
		if err != nil {
			return nil, fmt.Errorf("kind %s: %w", k, err)
		}
		kinds[k] = st
	}
	// Subjects and visitor values as the live path counts them: the
	// normalization of set's kinds (rules.Set.Normalize).
	return NewPrivacy(kinds, h, set)
}

// PrivacySource is the history sink's policy, following the rules file:
// rebuilt when a reload gives a new set. A reloaded set that hashes a kind
// while no key is given fails the history batches (retried, nothing
// written raw) until the file or the flag is fixed.
type PrivacySource struct {
	// Rules are the rules in force; Hasher the key's, nil without one.
	Rules  func() *rules.Set
	Hasher *Hasher

	mu   sync.Mutex
	set  *rules.Set
	last *Privacy
	err  error
}

func (p *PrivacySource) Get() (*Privacy, error) {
	set := p.Rules()
	p.mu.Lock()
	defer p.mu.Unlock()
	if set != p.set || (p.last == nil && p.err == nil) {
		p.set = set
		p.last, p.err = PrivacyOf(set, p.Hasher)
	}
	return p.last, p.err
}
