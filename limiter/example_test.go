package limiter_test

import (
	"fmt"

	"github.com/floodgate-dev/floodgate/limiter"
)

// A program that runs a limiter configures it as `floodgate limiter serve`
// does, from flags; New refuses what cannot run before anything is
// connected, and Run(ctx) serves until ctx ends.
func ExampleNew() {
	cfg, err := limiter.ParseFlags([]string{"--http-addr", "127.0.0.1:0", "--rls-addr", "off", "--state-max-subjects=-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = limiter.New(cfg, nil)
	fmt.Println(err)
	// Output: --state-max-subjects -1 is negative
}
