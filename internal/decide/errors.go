package decide

import (
	"errors"
	"fmt"

	"github.com/floodgate-dev/floodgate/limiter/limitapi"
)

// Code says that an error is the request's fault, not the limiter's, so
// that each surface answers it in its own protocol without reading the
// message: errorToConnect and errorToGRPC map a Code to a status code, the
// HTTP handler answers 400 for any Code. An error without one is the
// limiter's own (HTTP 500, Internal).
type Code int

const (
	// CodeInvalid: the request is malformed or past a bound (too many
	// subjects, n beyond every limit): HTTP 400, InvalidArgument. It is
	// returned only when none of the request's valid subjects is denied.
	CodeInvalid Code = iota + 1
	// CodeUnauthenticated: missing or wrong bearer token. Only the RLS
	// server raises it, to map it like the rest; Connect and plain HTTP
	// answer their own Unauthenticated and 401 before a request is read.
	CodeUnauthenticated
)

// Error is a limiter error with a Code and a message safe to show clients.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Is makes a refused request match limitapi.ErrRefused, so that an
// in-process caller (limitermw over a *Limiter) tells it from an outage as
// a caller over limiterclient does: no failure mode lets it through.
func (e *Error) Is(target error) bool {
	return target == limitapi.ErrRefused && e.Code == CodeInvalid
}

func invalidf(format string, args ...any) error {
	return &Error{Code: CodeInvalid, Msg: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the Code of err, 0 for other errors.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}
