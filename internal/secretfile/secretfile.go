// Package secretfile reads secrets given as files, the way Kubernetes and
// Compose mount them: a --x-file flag (FLOODGATE_X_FILE) beside --x.
package secretfile

import (
	"fmt"
	"os"
	"strings"
)

// Read returns value, or the content of file when file is given (it wins),
// trailing newlines and spaces trimmed, as `echo` and editors leave them.
// Errors name the flag (--flag-file) and the file, never the content.
func Read(flag, value, file string) (string, error) {
	if file == "" {
		return value, nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--%s-file: %w", flag, err)
	}
	v := strings.TrimRight(string(b), "\r\n\t ")
	if v == "" {
		return "", fmt.Errorf("--%s-file %s is empty", flag, file)
	}
	return v, nil
}
