package loadgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/event"
)

// LineError is a bad NDJSON line: it is skipped and reading goes on.
type LineError struct {
	Line int   // 1-based line number
	Err  error // wraps an *event.Error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// NDJSON reads one JSON event per line. Blank lines are skipped. Unlike
// event.Decode it fills in what a hand-written line is likely to omit:
// "v" (1), "id" (a new id), "ts" (now); "n" defaults to 1 as usual. Every
// other field, "attrs" included, is the event contract's.
type NDJSON struct {
	r    *bufio.Reader
	line int
	long []byte
}

// NewNDJSON reads events from r.
func NewNDJSON(r io.Reader) *NDJSON {
	return &NDJSON{r: bufio.NewReaderSize(r, 64<<10)}
}

// Next returns the next event, a *LineError for a bad line (call Next again
// to go on), io.EOF at the end, or another error from the reader.
func (s *NDJSON) Next(now time.Time) (event.Event, error) {
	for {
		raw, err := s.readLine()
		if err != nil {
			return event.Event{}, err
		}
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		e, perr := ParseLine(raw, now)
		if perr != nil {
			return event.Event{}, &LineError{Line: s.line, Err: perr}
		}
		return e, nil
	}
}

// readLine returns the next line without its end; a line longer than the
// reader's buffer is kept up to event.MaxSize+1 bytes (enough to be
// rejected as too large) and the rest discarded.
func (s *NDJSON) readLine() ([]byte, error) {
	s.long = s.long[:0]
	for {
		chunk, err := s.r.ReadSlice('\n')
		switch {
		case err == nil:
			s.line++
			if len(s.long) > 0 {
				return bytes.TrimRight(append(s.long, chunk...), "\r\n"), nil
			}
			return bytes.TrimRight(chunk, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			if len(s.long) <= event.MaxSize {
				s.long = append(s.long, chunk...)
			}
		case errors.Is(err, io.EOF):
			if len(chunk) == 0 && len(s.long) == 0 {
				return nil, io.EOF
			}
			s.line++
			return append(s.long, chunk...), nil
		default:
			return nil, fmt.Errorf("read line %d: %w", s.line+1, err)
		}
	}
}

// ParseLine decodes one hand-written event: like event.Decode, but an
// absent "v" is 1, an absent (or null) "id" a new id and an absent (or
// null) "ts" now. Errors wrap an *event.Error.
func ParseLine(line []byte, now time.Time) (event.Event, error) {
	if len(line) > event.MaxSize {
		return event.Decode(line) // too_large
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(line, &fields); err != nil || fields == nil {
		return event.Decode(line) // the precise invalid_json reason
	}
	changed := false
	if isAbsent(fields["v"]) {
		fields["v"] = json.RawMessage(strconv.Itoa(event.Version))
		changed = true
	}
	if isAbsent(fields["id"]) {
		fields["id"] = json.RawMessage(`"` + event.NewID() + `"`)
		changed = true
	}
	if isAbsent(fields["ts"]) {
		fields["ts"] = json.RawMessage(strconv.FormatInt(now.UnixMilli(), 10))
		changed = true
	}
	if !changed {
		return event.Decode(line)
	}
	filled, err := json.Marshal(fields)
	if err != nil {
		return event.Event{}, fmt.Errorf("fill defaults: %w", err)
	}
	return event.Decode(filled)
}

func isAbsent(raw json.RawMessage) bool {
	return raw == nil || string(raw) == "null"
}
