package rules

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// DefaultPath is the default of every --rules flag: relative to the
// repository, so that make demo, scripts/ and bench/ find it in a checkout;
// images and manifests set FLOODGATE_RULES.
const DefaultPath = "examples/rules.yaml"

// Found says why a missing rules file is missing when it is DefaultPath:
// run outside the repository, "open examples/rules.yaml" alone does not
// tell what to do. Any other path is left to Load's error.
func Found(path string) error {
	if path != DefaultPath {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rules file %s not found (the default is relative to the repository; pass --rules or FLOODGATE_RULES)", path)
	}
	return nil
}

// LoadFile is Load with Found's hint first: for commands that read the
// rules once.
func LoadFile(path string) (*Set, error) {
	if err := Found(path); err != nil {
		return nil, err
	}
	return Load(path)
}
