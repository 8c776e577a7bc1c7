package event

import (
	"crypto/sha256"
	"encoding/base64"
)

// DigestPrefix starts the digest of a subject that is not a valid subject
// itself (CanonicalSubject): "~sha256:" and the unpadded base64url SHA-256
// of the subject's bytes, 51 bytes in all.
const DigestPrefix = "~sha256:"

// digestLen is the length of a digest: the prefix and 43 base64url
// characters of 32 bytes.
const digestLen = len(DigestPrefix) + 43

// CanonicalSubject returns the subject s is decided and counted as: s
// itself when it is a valid subject (1..MaxSubjectLen bytes of UTF-8 without
// control characters), else its digest, DigestPrefix + base64url(SHA-256(s)),
// which is a valid subject. An empty s stays empty: it is no subject at all.
//
// Why not refuse: a subject comes from outside (an e-mail typed into a
// form, a header), and refusing it refused the whole request or event, the
// valid subjects with it — a 300-byte e-mail beside an IP over its limit
// was a way past the limit. The digest is stable, so the overlong or
// unprintable subject is limited and counted like any other.
//
// The digest is idempotent: a valid subject already of the digest's form
// is kept, so an event the limiter published with a digest is not digested
// again on the way through Kafka. No e-mail, IP or id has that form; a
// client that sends a digest itself names the same subject as the text it
// digests, which it could as well send.
func CanonicalSubject(s string) string {
	if s == "" || checkSubject(s) == nil {
		return s
	}
	return Digest(s)
}

// Digest returns DigestPrefix + base64url(SHA-256(s)) whatever s is: the
// form CanonicalSubject gives a subject that is not valid, and the form
// logs name a subject they must not hold (an operator's reset or erase).
// Whoever knows a subject finds its lines by its digest; a short subject
// (an IPv4 address) can be found by trying them all, so a log that must
// not allow that names the subject by a keyed hash instead.
func Digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return DigestPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// IsDigest reports whether s has the form of a CanonicalSubject digest.
func IsDigest(s string) bool {
	if len(s) != digestLen || s[:len(DigestPrefix)] != DigestPrefix {
		return false
	}
	for i := len(DigestPrefix); i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Canonical returns e with its subject and attr values replaced by their
// CanonicalSubject, as Encode writes them and Key keys them. e's Attrs map
// is not modified: a copy is made when a value changes.
func (e Event) Canonical() Event {
	e.Subject = CanonicalSubject(e.Subject)
	var attrs map[string]string
	for k, v := range e.Attrs {
		if c := CanonicalSubject(v); c != v {
			if attrs == nil {
				attrs = make(map[string]string, len(e.Attrs))
				for k2, v2 := range e.Attrs {
					attrs[k2] = v2
				}
			}
			attrs[k] = c
		}
	}
	if attrs != nil {
		e.Attrs = attrs
	}
	return e
}
