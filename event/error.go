package event

// Reasons of *Error: short stable codes, safe as metric labels and DLQ
// header values. docs/events.md describes each one.
const (
	ReasonTooLarge           = "too_large"           // value larger than MaxSize
	ReasonInvalidJSON        = "invalid_json"        // not UTF-8, not a JSON object, or not valid JSON
	ReasonUnsupportedVersion = "unsupported_version" // "v" present but not Version
	ReasonMissingField       = "missing_field"       // required field absent, null, empty, or ts = 0
	ReasonInvalidField       = "invalid_field"       // wrong JSON type, bad syntax, bad characters, too long
	ReasonOutOfRange         = "out_of_range"        // ts or n outside their range
	ReasonKeyMismatch        = "key_mismatch"        // message key is not "<kind>:<subject>" (CheckKey)
)

// Error is a rejected event. Reason is one of the Reason* codes, Field the
// JSON field at fault ("" for the whole message, "key" for the message key),
// and Detail a human explanation.
type Error struct {
	Reason string
	Field  string
	Detail string
}

// Error returns "event: <reason> <field>: <detail>".
func (e *Error) Error() string {
	msg := "event: " + e.Reason
	if e.Field != "" {
		msg += " " + e.Field
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}
