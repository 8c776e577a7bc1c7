package limiter

import (
	"errors"
	"fmt"

	"floodgate/limitapi"
)

// Code classifies the errors of the limiter; each surface maps it once
// (errorToConnect, httpStatus, and the RLS server's gRPC status).
type Code int

const (
	// CodeInvalid: the request is malformed (HTTP 400, InvalidArgument).
	CodeInvalid Code = iota + 1
	// CodeUnauthenticated: missing or wrong bearer token (HTTP 401,
	// Unauthenticated).
	CodeUnauthenticated
	// CodeTooLarge: the request is over a size limit (HTTP 413 or 400,
	// ResourceExhausted).
	CodeTooLarge
)

// Error is a limiter error with a Code and a message safe to show clients.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Is makes an invalid or too large request match limitapi.ErrRefused.
func (e *Error) Is(target error) bool {
	return target == limitapi.ErrRefused && (e.Code == CodeInvalid || e.Code == CodeTooLarge)
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
