package migrations_test

import (
	"fmt"
	"io/fs"
	"strings"

	"github.com/floodgate-dev/floodgate/migrations"
)

// The schema is goose's numbered SQL files, embedded: a team's own
// migration tool can apply the same files (Up does it with a lock).
func ExampleFS() {
	names, err := fs.Glob(migrations.FS(), "*.sql")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(len(names) > 0, strings.HasPrefix(names[0], "00001_"))
	// Output: true true
}
