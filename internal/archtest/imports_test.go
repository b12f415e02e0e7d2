// Package archtest enforces the import rule of docs/adr/001 with go list.
package archtest

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/sluicehq/sluice"

// pkgImports lists every package of the module with its non-test imports.
func pkgImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 {
			pkgs[f[0]] = f[1:]
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("go list returned no package")
	}
	return pkgs
}

func rel(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }

func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

func stdlib(p string) bool { return !strings.Contains(strings.SplitN(p, "/", 2)[0], ".") }

// violation returns why pkg may not import imp, or "".
func violation(pkg, imp string) string {
	own := strings.HasPrefix(imp, module)
	r, ri := rel(pkg), rel(imp)
	if own && within(ri, "examples") && !within(r, "examples") {
		return "nothing imports examples/"
	}
	switch {
	case within(r, "domain"):
		if !stdlib(imp) && !(own && within(ri, "domain")) {
			return "domain imports the standard library only"
		}
	case within(r, "ports"):
		if own && !within(ri, "domain") && !within(ri, "ports") {
			return "ports imports domain only"
		}
	case within(r, "app"):
		if own && !within(ri, "domain") && !within(ri, "ports") && !within(ri, "app") {
			return "app imports domain and ports, never an adapter"
		}
	case within(r, "conformance"):
		if own && !within(ri, "domain") && !within(ri, "ports") && !within(ri, "conformance") {
			return "the conformance suite depends on the ports only"
		}
	case within(r, "adapters"):
		if own && within(ri, "adapters") && strings.SplitN(ri, "/", 3)[1] != strings.SplitN(r, "/", 3)[1] {
			return "an adapter does not import another adapter"
		}
	}
	return ""
}

func TestImportRule(t *testing.T) {
	pkgs := pkgImports(t)
	if _, ok := pkgs[module+"/domain"]; !ok {
		t.Fatalf("domain package missing from go list output")
	}
	for pkg, imps := range pkgs {
		for _, imp := range imps {
			if why := violation(pkg, imp); why != "" {
				t.Errorf("%s imports %s: %s", rel(pkg), imp, why)
			}
		}
	}
}

// TestRuleCatchesViolations proves the rule above can fail.
func TestRuleCatchesViolations(t *testing.T) {
	bad := [][2]string{
		{module + "/domain", "github.com/redis/rueidis"},
		{module + "/domain", module + "/ports"},
		{module + "/ports", module + "/app"},
		{module + "/app", module + "/adapters/redis"},
		{module + "/app", module + "/adapters/local"},
		{module + "/adapters/httpmw", module + "/examples/demo"},
		{module + "/adapters/httpmw", module + "/adapters/redis"},
		{module + "/conformance", module + "/adapters/local"},
	}
	for _, b := range bad {
		if violation(b[0], b[1]) == "" {
			t.Errorf("%s → %s should violate the import rule", rel(b[0]), b[1])
		}
	}
	good := [][2]string{
		{module + "/domain", "time"},
		{module + "/ports", module + "/domain"},
		{module + "/app", module + "/ports"},
		{module + "/app", "github.com/go-playground/validator/v10"},
		{module + "/adapters/httpmw", module + "/app"},
		{module + "/adapters/redis", "github.com/redis/rueidis"},
		{module + "/examples/demo", module + "/adapters/local"},
	}
	for _, g := range good {
		if why := violation(g[0], g[1]); why != "" {
			t.Errorf("%s → %s should be allowed, got %q", rel(g[0]), g[1], why)
		}
	}
}
