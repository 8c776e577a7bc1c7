package decide

import "github.com/floodgate-dev/floodgate/limiter/limitapi"

// The request and decision types live in limitapi, which clients import
// without the server's dependencies; these names keep the limiter's own
// API readable.
type (
	Subject  = limitapi.Subject
	Request  = limitapi.Request
	Limit    = limitapi.Limit
	Denial   = limitapi.Denial
	Decision = limitapi.Decision
)
