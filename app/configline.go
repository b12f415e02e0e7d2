package app

import (
	"strings"

	"go.yaml.in/yaml/v3"
)

// FieldLine returns the line of a YAML document on which the field a
// *domain.ConfigError names is written ("profiles[login].windows.ip[0].limit":
// profiles and plans by name, other entries by index, as Validate names
// them), or of the nearest enclosing field written in the document; 0 when
// the document does not parse or names none of them. Like the loader it
// never follows an alias, so it is linear in the document whatever its
// anchors do. An operator's tool uses it to point at file:line.
func FieldLine(data []byte, field string) int {
	if len(data) > MaxConfigBytes {
		return 0
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil {
		return 0
	}
	lines := map[string]int{}
	for _, r := range indexFields(&doc) {
		if _, ok := lines[r.path]; !ok {
			lines[r.path] = r.key.Line
		}
	}
	for p := field; p != ""; p = parentPath(p) {
		if n, ok := lines[p]; ok {
			return n
		}
	}
	return 0
}

// parentPath drops the last element of a field path: "a.b[2]" → "a.b",
// "a.b" → "a", "a" → "".
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i > 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}
