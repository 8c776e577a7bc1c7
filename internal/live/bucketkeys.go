package live

import (
	"strconv"

	"github.com/floodgate-dev/floodgate/internal/window"
)

// bucketKeys builds a subject's bucket keys (window.BucketKey of
// Keys.SubjectPrefix) in one reused buffer. A cold subject's load and its
// checkpoint name several of its hashes each, and building every key by
// concatenation — slot, field, level, number — allocated four strings per
// key: a tenth of the aggregator's CPU on a flood of new subjects.
type bucketKeys struct {
	buf []byte
	pre int // the current subject's prefix: buf[:pre]
}

// subject starts the keys of a subject given as its field (window.Field, or
// fieldKey's bytes) in slot (window.Slot).
func (b *bucketKeys) subject(slot string, field []byte) {
	b.buf = append(append(append(append(b.buf[:0], slot...), ':'), field...), ':')
	b.pre = len(b.buf)
}

// key returns the current subject's bucket key of level and number n.
func (b *bucketKeys) key(level byte, n int64) string {
	b.buf = strconv.AppendInt(append(append(b.buf[:b.pre], level), ':'), n, 10)
	return string(b.buf)
}

// subjectOf is subject for a window.Subject (fk is scratch for its field).
func (b *bucketKeys) subjectOf(slot string, sub window.Subject, fk *[]byte) {
	*fk = fieldKey(*fk, sub)
	b.subject(slot, *fk)
}
