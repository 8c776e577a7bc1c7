package rules

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// reservedDistinct are the distinct kinds refused: a subject's distinct set
// is "<slot>:<field>:d:<kind>" (window/keys.go), and the subject "<s>:d"
// keeps its deny record, shadow record and arrival times at
// "<slot>:<field of s>:d:deny", ":shadow" and ":g". Refusing these names
// keeps every existing key of a valid rules file where it is, which
// escaping ':' in subjects would not.
var reservedDistinct = []string{"deny", "shadow", "g"}

// nameRE is the alphabet of actions and kinds (the event contract) and of
// rule names.
var nameRE = regexp.MustCompile(`^[a-z0-9_.-]{1,64}$`)

// Parse parses and validates a rules file:
//
//	rules:
//	  - name: login-failed
//	    action: login_failed
//	    kinds: [ip, email]
//	    limits: [2/s, 5/m, 10/h, 100/d]
//	    message: Too many failed logins. Try again later.
//	    allow: [10.0.0.0/8, ops@example.com]
//	    shadow: false
//	    strict: false
//	kinds:            # optional: how subjects of a kind are counted and kept
//	  ip: {normalize: [trim, ip], ipv6_prefix: 64}   # the defaults for kind ip
//	  user: {normalize: [trim, lower]}  # email's default; none for other kinds
//	  email: {history: hash, horizon: 90d}  # history: raw|hash|drop; horizon of a personal kind
//
// Errors are *Error with the line of the offending node.
func Parse(data []byte) (*Set, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{Reason: "file is empty: want a top-level \"rules:\" list"}
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, &Error{Line: extra.Line, Reason: "more than one YAML document"}
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Line: root.Line, Reason: "want a mapping with a \"rules:\" list at the top"}
	}
	var list *yaml.Node
	var kinds map[string]KindOptions
	var plans map[string]map[string]string
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "rules":
			list = v
		case "kinds":
			var err error
			if kinds, err = parseKinds(v); err != nil {
				return nil, err
			}
		case "plans":
			var err error
			if plans, err = parsePlans(v); err != nil {
				return nil, err
			}
		default:
			return nil, &Error{Line: k.Line, Reason: fmt.Sprintf("unknown top-level key %q (want \"rules\", \"kinds\" or \"plans\")", k.Value)}
		}
	}
	if list == nil {
		return nil, &Error{Line: root.Line, Reason: "missing \"rules:\" list"}
	}
	if list.Kind == yaml.ScalarNode && list.Tag == "!!null" {
		s := newSet(nil)
		s.kinds, s.source = kinds, bytes.Clone(data)
		if err := s.normalizePlans(plans); err != nil {
			return nil, err
		}
		return s, nil
	}
	if list.Kind != yaml.SequenceNode {
		return nil, &Error{Line: list.Line, Reason: "\"rules\" must be a list"}
	}
	var out []*Rule
	names := map[string]int{}
	for _, n := range list.Content {
		r, err := parseRule(n)
		if err != nil {
			return nil, err
		}
		if prev, dup := names[r.Name]; dup {
			return nil, &Error{Line: r.Line, Reason: fmt.Sprintf("rule %q: name already used on line %d", r.Name, prev)}
		}
		names[r.Name] = r.Line
		out = append(out, r)
	}
	s := newSet(out)
	s.kinds, s.source = kinds, bytes.Clone(data)
	if err := s.normalizePlans(plans); err != nil {
		return nil, err
	}
	for _, r := range out {
		r.normalizeAllow(s)
		r.normalizeOverrides(s)
	}
	return s, nil
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

func yamlError(err error) error {
	msg := err.Error()
	if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
		var line int
		fmt.Sscanf(m[1], "%d", &line)
		return &Error{Line: line, Reason: "YAML: " + m[2]}
	}
	return &Error{Reason: strings.TrimPrefix(msg, "yaml: ")}
}

func parseRule(n *yaml.Node) (*Rule, error) {
	if n.Kind != yaml.MappingNode {
		return nil, &Error{Line: n.Line, Reason: "each rule must be a mapping (name, action, kinds, limits, ...)"}
	}
	r := &Rule{Line: n.Line}
	fail := func(at *yaml.Node, format string, args ...any) error {
		reason := fmt.Sprintf(format, args...)
		if r.Name != "" {
			reason = fmt.Sprintf("rule %q: %s", r.Name, reason)
		}
		return &Error{Line: at.Line, Reason: reason}
	}
	// Read the name first so every later error can name the rule.
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := n.Content[i], n.Content[i+1]; k.Value == "name" {
			if err := scalar(v, &r.Name); err != nil {
				return nil, fail(v, "name: %v", err)
			}
			if !nameRE.MatchString(r.Name) {
				return nil, fail(v, "name %q: only [a-z0-9_.-], 1 to 64 bytes", r.Name)
			}
		}
	}
	seen := map[string]bool{}
	var allowNode *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			return nil, fail(k, "key %q given twice", k.Value)
		}
		seen[k.Value] = true
		if k.Value == "allow" {
			allowNode = v // read once the kinds are known
			continue
		}
		if err := r.parseKey(k, v, fail); err != nil {
			return nil, err
		}
	}
	if err := r.complete(n, fail); err != nil {
		return nil, err
	}
	if allowNode != nil {
		items, err := stringItems(allowNode)
		if err != nil {
			return nil, fail(allowNode, "allow: %v", err)
		}
		for _, it := range items {
			if err := r.addAllow(it.Value, r.Kinds); err != nil {
				return nil, fail(it, "%v", err)
			}
		}
	}
	return r, nil
}

// failAt makes a rule's parse error at a node of its text.
type failAt func(at *yaml.Node, format string, args ...any) error

// parseKey reads the rule's key k, of value v (allow aside).
func (r *Rule) parseKey(k, v *yaml.Node, fail failAt) error {
	switch k.Value {
	case "name":
	case "action":
		if err := scalar(v, &r.Action); err != nil {
			return fail(v, "action: %v", err)
		}
		if !nameRE.MatchString(r.Action) {
			return fail(v, "action %q: only [a-z0-9_.-], 1 to 64 bytes", r.Action)
		}
	case "kinds", "kind":
		return r.parseKinds(k, v, fail)
	case "limits", "limit":
		return r.parseLimits(k, v, fail)
	case "shadow":
		if err := v.Decode(&r.Shadow); err != nil || v.Kind != yaml.ScalarNode {
			return fail(v, "shadow: want true or false")
		}
	case "strict":
		if err := v.Decode(&r.Strict); err != nil || v.Kind != yaml.ScalarNode {
			return fail(v, "strict: want true or false")
		}
	case "bucket":
		b, err := parseBucket(v)
		if err != nil {
			return fail(v, "bucket: %v", err)
		}
		r.Bucket = &b
	case "distinct":
		return r.parseDistinct(v, fail)
	case "message":
		if err := scalar(v, &r.Message); err != nil {
			return fail(v, "message: %v", err)
		}
	case "overrides":
		return r.parseOverrides(v, fail)
	default:
		return fail(k, "unknown key %q (want name, action, kinds, limits, bucket, distinct, shadow, strict, message, allow, overrides)", k.Value)
	}
	return nil
}

func (r *Rule) parseKinds(k, v *yaml.Node, fail failAt) error {
	kinds, err := stringList(v)
	if err != nil {
		return fail(v, "%s: %v", k.Value, err)
	}
	for _, kind := range kinds {
		if !nameRE.MatchString(kind) {
			return fail(v, "kind %q: only [a-z0-9_.-], 1 to 64 bytes", kind)
		}
		if !containsStr(r.Kinds, kind) {
			r.Kinds = append(r.Kinds, kind)
		}
	}
	return nil
}

func (r *Rule) parseLimits(k, v *yaml.Node, fail failAt) error {
	items, err := stringItems(v)
	if err != nil {
		return fail(v, "%s: %v", k.Value, err)
	}
	for _, it := range items {
		l, err := ParseLimit(it.Value)
		if err != nil {
			return fail(it, "%v", err)
		}
		for _, prev := range r.Limits {
			if prev.Window == l.Window {
				return fail(it, "two limits with window %s", FormatWindow(l.Window))
			}
		}
		r.Limits = append(r.Limits, l)
	}
	return nil
}

func (r *Rule) parseDistinct(v *yaml.Node, fail failAt) error {
	if err := scalar(v, &r.Distinct); err != nil {
		return fail(v, "distinct: %v", err)
	}
	if !nameRE.MatchString(r.Distinct) {
		return fail(v, "distinct %q: a kind of the events' attrs, only [a-z0-9_.-], 1 to 64 bytes", r.Distinct)
	}
	if slices.Contains(reservedDistinct, r.Distinct) {
		return fail(v, "distinct %q: reserved (a subject's distinct set of this kind would share its key with the deny, shadow or bucket record of another subject); use another name, e.g. %q", r.Distinct, r.Distinct+"_value")
	}
	return nil
}

// complete checks what a rule needs as a whole, once its keys are read.
func (r *Rule) complete(n *yaml.Node, fail failAt) error {
	switch {
	case r.Name == "":
		return fail(n, "name is required")
	case r.Action == "":
		return fail(n, "action is required")
	case len(r.Kinds) == 0:
		return fail(n, "kinds is required (e.g. [ip, email])")
	case len(r.Limits) == 0 && r.Bucket == nil:
		return fail(n, "limits or bucket is required (e.g. limits: [2/s, 5/m, 10/h, 100/d])")
	case r.Distinct != "" && len(r.Limits) == 0:
		return fail(n, "distinct counts with limits: give limits (e.g. [20/1h])")
	case r.Distinct != "" && r.Bucket != nil:
		return fail(n, "distinct and bucket in one rule: a bucket counts events, not distinct values; use two rules")
	}
	if r.Distinct != "" {
		for _, l := range r.Limits {
			if l.Count >= MaxDistinct {
				return fail(n, "distinct limit %s: at most %d distinct values are kept per subject; use a count below that", l, MaxDistinct)
			}
		}
	}
	if r.Bucket != nil && r.Bucket.Refill() > MaxWindow {
		return fail(n, "bucket %s refills in %s, longer than the longest window %s", r.Bucket, r.Bucket.Refill(), FormatWindow(MaxWindow))
	}
	return r.completeOverrides(n, fail)
}

// parseBucket reads "{rate: 10/s, burst: 50}".
func parseBucket(v *yaml.Node) (Bucket, error) {
	var w struct {
		Rate  string `yaml:"rate"`
		Burst int64  `yaml:"burst"`
	}
	if v.Kind != yaml.MappingNode {
		return Bucket{}, errors.New("want a mapping {rate: 10/s, burst: 50}")
	}
	for i := 0; i+1 < len(v.Content); i += 2 {
		if k := v.Content[i].Value; k != "rate" && k != "burst" {
			return Bucket{}, fmt.Errorf("unknown key %q (want rate, burst)", k)
		}
	}
	if err := v.Decode(&w); err != nil {
		return Bucket{}, fmt.Errorf("want {rate: 10/s, burst: 50}: %v", err)
	}
	rate, err := ParseLimit(w.Rate)
	if err != nil {
		return Bucket{}, fmt.Errorf("rate: %w", err)
	}
	if w.Burst < 1 {
		return Bucket{}, errors.New("burst must be a whole number >= 1")
	}
	b := Bucket{Rate: rate, Burst: w.Burst}
	if b.Interval() < time.Microsecond {
		return Bucket{}, fmt.Errorf("rate %s: more than one token per microsecond", rate)
	}
	return b, nil
}

func scalar(v *yaml.Node, dst *string) error {
	if v.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a single value")
	}
	*dst = v.Value
	return nil
}

// stringItems accepts a list of scalars or one scalar.
func stringItems(v *yaml.Node) ([]*yaml.Node, error) {
	switch v.Kind {
	case yaml.ScalarNode:
		if v.Tag == "!!null" {
			return nil, nil
		}
		return []*yaml.Node{v}, nil
	case yaml.SequenceNode:
		for _, it := range v.Content {
			if it.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("line %d: want plain values in the list", it.Line)
			}
		}
		return v.Content, nil
	default:
		return nil, fmt.Errorf("want a list")
	}
}

func stringList(v *yaml.Node) ([]string, error) {
	items, err := stringItems(v)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		out = append(out, it.Value)
	}
	return out, nil
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
