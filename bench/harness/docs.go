package harness

import (
	"fmt"
	"os"
	"strings"
)

// ReplaceBlock rewrites the part of a Markdown file between the lines
// "<!-- NAME:begin -->" and "<!-- NAME:end -->" with body, preserving the
// rest of the file (other people's sections). When the markers are absent
// the block is inserted after the first "# " title line, or at the top; a
// missing file is created with title and block.
func ReplaceBlock(path, name, title, body string) error {
	begin, end := "<!-- "+name+":begin -->", "<!-- "+name+":end -->"
	block := begin + "\n" + strings.TrimRight(body, "\n") + "\n" + end + "\n"
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	s := string(old)
	var out string
	switch i, j := strings.Index(s, begin), strings.Index(s, end); {
	case i >= 0 && j > i:
		rest := s[j+len(end):]
		rest = strings.TrimPrefix(rest, "\n")
		out = s[:i] + block + rest
	case s == "":
		out = "# " + title + "\n\n" + block
	case strings.HasPrefix(s, "# "):
		nl := strings.IndexByte(s, '\n')
		if nl < 0 {
			nl = len(s)
		}
		out = s[:nl] + "\n\n" + block + "\n" + strings.TrimLeft(s[nl:], "\n")
	default:
		out = block + "\n" + s
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(out), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}
