package app

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/domain"
)

// fieldRef is one key of a YAML mapping with its full path, e.g.
// "profiles[login].windows.ip[0].limit".
type fieldRef struct {
	key, val *yaml.Node
	path     string
}

// indexFields lists every mapping key of doc with its path, in document
// order. It visits each node once and never follows an alias, so it is
// linear in the document whatever its anchors and merge keys do.
func indexFields(doc *yaml.Node) []fieldRef {
	var refs []fieldRef
	type item struct {
		n    *yaml.Node
		path string
	}
	stack := []item{{doc, ""}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		switch it.n.Kind {
		case yaml.DocumentNode:
			for _, c := range it.n.Content {
				stack = append(stack, item{c, it.path})
			}
		case yaml.MappingNode:
			for i := len(it.n.Content) - 2; i >= 0; i -= 2 {
				k, v := it.n.Content[i], it.n.Content[i+1]
				p := joinPath(it.path, k.Value)
				if k.Value == "<<" {
					p = it.path // a merge key brings fields into this mapping
				}
				refs = append(refs, fieldRef{key: k, val: v, path: p})
				stack = append(stack, item{v, p})
			}
		case yaml.SequenceNode:
			for i := len(it.n.Content) - 1; i >= 0; i-- {
				stack = append(stack, item{it.n.Content[i], it.path + "[" + entryName(it.path, it.n.Content[i], i) + "]"})
			}
		}
	}
	return refs
}

// entryName names an entry of a sequence in a path: profiles and plans by
// their name when it is a valid one (profiles[login]), anything else by
// its index, as Validate does.
func entryName(path string, n *yaml.Node, i int) string {
	if (path == "profiles" || path == "plans") && n.Kind == yaml.MappingNode {
		for j := 0; j+1 < len(n.Content); j += 2 {
			if n.Content[j].Value == "name" && n.Content[j+1].Kind == yaml.ScalarNode && routeKeyRE.MatchString(n.Content[j+1].Value) {
				return n.Content[j+1].Value
			}
		}
	}
	return strconv.Itoa(i)
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

var (
	unknownFieldRE = regexp.MustCompile(`^line (\d+): field (.+) not found in type `)
	mismatchRE     = regexp.MustCompile("^line (\\d+): cannot unmarshal (\\S+) `(.*)` into (.+)$")
)

// decodeError turns a decoding failure into ConfigErrors naming the YAML
// path of each offending field.
func decodeError(doc *yaml.Node, err error) error {
	var te *yaml.TypeError
	var ne *domain.UnknownNameError
	switch {
	case errors.As(err, &te):
		refs := indexFields(doc)
		errs := make([]error, 0, len(te.Errors))
		for _, msg := range te.Errors {
			errs = append(errs, typeError(refs, msg))
		}
		return errors.Join(errs...)
	case errors.As(err, &ne):
		for _, r := range indexFields(doc) {
			if r.val.Kind == yaml.ScalarNode && r.val.Value == ne.Name && enumFields[r.key.Value] {
				return &domain.ConfigError{Field: r.path, Reason: fmt.Sprintf("%s (line %d)", ne.Error(), r.val.Line), Err: ne}
			}
		}
	}
	return &domain.ConfigError{Field: "(document)", Reason: "does not decode", Err: err}
}

// enumFields are the keys whose values are names of a closed set.
var enumFields = map[string]bool{"algorithm": true, "family": true, "read": true, "auth": true, "costly": true, "degraded": true}

// typeError maps one message of a *yaml.TypeError to a ConfigError.
func typeError(refs []fieldRef, msg string) error {
	if m := unknownFieldRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		for _, r := range refs {
			if r.key.Line == line && r.key.Value == m[2] {
				return &domain.ConfigError{Field: r.path, Reason: fmt.Sprintf("unknown field (line %d)", line), Err: ErrUnknownField}
			}
		}
		return &domain.ConfigError{Field: m[2], Reason: fmt.Sprintf("unknown field (line %d)", line), Err: ErrUnknownField}
	}
	if m := mismatchRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		reason := fmt.Sprintf("cannot be read as %s (line %d)", strings.TrimPrefix(m[4], "app."), line)
		// The scalar that failed, else the innermost collection on its line
		// (a sequence or mapping given where a scalar belongs).
		var found *fieldRef
		for i := range refs {
			r := &refs[i]
			if r.val.Line != line {
				continue
			}
			if r.val.Kind == yaml.ScalarNode && r.val.Value == m[3] {
				return &domain.ConfigError{Field: r.path, Reason: reason}
			}
			if r.val.Kind != yaml.ScalarNode {
				found = r
			}
		}
		if found != nil {
			return &domain.ConfigError{Field: found.path, Reason: reason}
		}
		return &domain.ConfigError{Field: "(document)", Reason: reason}
	}
	return &domain.ConfigError{Field: "(document)", Reason: "does not decode", Err: errors.New(msg)}
}
