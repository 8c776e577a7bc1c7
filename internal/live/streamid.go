package live

import (
	"fmt"
	"strconv"
	"strings"
)

// streamID is a Redis stream entry id, "<ms>-<seq>".
type streamID struct{ ms, seq uint64 }

// parseStreamID reads an id Redis gave.
func parseStreamID(s string) (streamID, error) {
	ms, seq, ok := strings.Cut(s, "-")
	m, err1 := strconv.ParseUint(ms, 10, 64)
	q, err2 := strconv.ParseUint(seq, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return streamID{}, fmt.Errorf("stream id %q: want <ms>-<seq>", s)
	}
	return streamID{m, q}, nil
}

// looseStreamID reads an id, a part it cannot read as 0: for ids floodgate
// wrote itself (a cursor) or found in a record's header, where a malformed
// one only orders first.
func looseStreamID(s string) streamID {
	ms, seq, _ := strings.Cut(s, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	q, _ := strconv.ParseUint(seq, 10, 64)
	return streamID{m, q}
}

func (a streamID) less(b streamID) bool { return a.ms < b.ms || (a.ms == b.ms && a.seq < b.seq) }

func (a streamID) String() string {
	return strconv.FormatUint(a.ms, 10) + "-" + strconv.FormatUint(a.seq, 10)
}

// streamIDLess orders Redis stream ids "<ms>-<seq>".
func streamIDLess(a, b string) bool { return looseStreamID(a).less(looseStreamID(b)) }

// nextStreamID is the least id after id: trimming below it keeps nothing
// up to id.
func nextStreamID(id string) string {
	n := looseStreamID(id)
	n.seq++
	return n.String()
}
