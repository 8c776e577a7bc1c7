package operator

import "github.com/floodgate-dev/floodgate/internal/adminapi"

// The requests and results of the operator controls are package adminapi's
// (their wire form, which Client speaks without importing Redis); these
// names keep them where the Operator is.
type (
	Request           = adminapi.Request
	Result            = adminapi.Result
	SubjectResult     = adminapi.SubjectResult
	Inspection        = adminapi.Inspection
	SubjectInspection = adminapi.SubjectInspection
	RuleView          = adminapi.RuleView
	LimitView         = adminapi.LimitView
	DenyView          = adminapi.DenyView
	BanView           = adminapi.BanView
	StateView         = adminapi.StateView
	StateLimitView    = adminapi.StateLimitView
	CheckView         = adminapi.CheckView
)
