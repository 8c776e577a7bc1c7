// Package docs_test holds the documentation to what a newcomer needs from
// it: pages short enough to finish, lines a diff can show, and links that
// lead somewhere. It reads README.md and docs/ of the repository.
package docs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

const (
	root     = "../.."
	maxLines = 450  // a page answers one question
	maxLine  = 1000 // characters: longer lines defeat diffs and reviews
)

// generated pages are written by a program, not edited: their length is
// the length of what they describe.
var generated = map[string]bool{
	"docs/cli.md": true, // go test ./cmd/floodgate -run TestCLIReference -update
}

// longAllowed are pages over maxLines kept whole for now: redis.md's
// structure is edited with the live path's code (its file references).
var longAllowed = map[string]bool{
	"docs/redis.md": true,
}

// pages is every Markdown page of the docs: README.md and docs/**.md,
// as slash paths relative to the repository.
func pages(t *testing.T) []string {
	t.Helper()
	out := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatalf("list docs: %v", err)
	}
	return out
}

func read(t *testing.T, page string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(page)))
	if err != nil {
		t.Fatalf("read %s: %v", page, err)
	}
	return string(b)
}

func TestPagesAreShortAndTheirLinesToo(t *testing.T) {
	for _, page := range pages(t) {
		lines := strings.Split(strings.TrimSuffix(read(t, page), "\n"), "\n")
		if len(lines) > maxLines && !generated[page] && !longAllowed[page] {
			t.Errorf("%s: %d lines, more than %d: split it by the questions it answers", page, len(lines), maxLines)
		}
		for i, l := range lines {
			if n := utf8.RuneCountInString(l); n > maxLine {
				t.Errorf("%s:%d: %d characters, more than %d", page, i+1, n, maxLine)
			}
		}
	}
}

// link is a Markdown inline link's target: [text](target) or ![alt](target).
var link = regexp.MustCompile(`\]\(([^()\s]+)\)`)

func TestRelativeLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		a := headingAnchors(read(t, page))
		anchors[page] = a
		return a
	}
	for _, page := range pages(t) {
		for i, l := range proseLines(read(t, page)) {
			for _, m := range link.FindAllStringSubmatch(l, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := page
				if file != "" {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(page), file)))
					if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(dest))); err != nil {
						t.Errorf("%s:%d: link %s: no file %s", page, i+1, target, dest)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading #%s", page, i+1, target, dest, anchor)
				}
			}
		}
	}
}

// proseLines is the page's lines with those of fenced code blocks blanked
// (their brackets are code, not links), numbered as in the file.
func proseLines(doc string) []string {
	lines := strings.Split(doc, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
			continue
		}
		if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors is the set of anchors GitHub gives a page's headings:
// lower case, punctuation dropped, spaces to hyphens, a repeated anchor
// numbered -1, -2…
func headingAnchors(doc string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(doc) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(l, "#"))
		if title == "" || len(l)-len(strings.TrimLeft(l, "#")) > 6 {
			continue
		}
		a := slug(title)
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func slug(title string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"The demo: a URL shortener in front":       "the-demo-a-url-shortener-in-front",
		"Strict mode (`Take`)":                     "strict-mode-take",
		"What is stored where, and for how long":   "what-is-stored-where-and-for-how-long",
		"Owner takes (`aggregator --owner-takes`)": "owner-takes-aggregator---owner-takes",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}

// mention is a page named in prose ("see docs/takes.md"), not linked.
var mention = regexp.MustCompile(`\bdocs/[a-z0-9_/-]+\.md\b`)

// TestNamedPagesExist: a page moved or renamed leaves no prose pointing at
// a file that is gone.
func TestNamedPagesExist(t *testing.T) {
	for _, page := range pages(t) {
		for i, l := range strings.Split(read(t, page), "\n") {
			for _, m := range mention.FindAllString(l, -1) {
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m))); err != nil {
					t.Errorf("%s:%d: names %s, which does not exist", page, i+1, m)
				}
			}
		}
	}
}
