package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/adapters/envoyrls"
	"github.com/sluicehq/sluice/app"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/internal/boot"
)

// secretHint ends the message of a missing secret, as the services' own
// hint does ("or run with -dev").
const secretHint = "as the service has it"

// loadAppConfig reads sluice's configuration as the services do at boot
// (internal/boot.Config: the file, then REDIS_URL and
// RATE_LIMIT_HMAC_SECRET), so that its errors are theirs. path "" is an
// empty document: sluice-rls without -sluice-config. env, when set,
// replaces the process environment (check, which checks the secret apart).
func loadAppConfig(path string, env app.LookupEnv) (app.Config, []byte, error) {
	data := []byte("{}")
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return app.Config{}, nil, fail(exitInvalid, fmt.Errorf("%s: %w", path, err))
		}
	}
	var cfg app.Config
	var err error
	if env == nil {
		cfg, _, err = boot.Config(data, false, secretHint)
	} else {
		cfg, err = app.ParseConfig(data, env)
	}
	return cfg, data, err
}

// located is one configuration error with where it is.
type located struct {
	File  string `json:"file"`
	Line  int    `json:"line,omitempty"`
	Field string `json:"field,omitempty"`
	// Message is the error's text, as the service prints it.
	Message string `json:"message"`
	err     error
}

func (l located) String() string {
	if l.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", l.File, l.Line, l.Message)
	}
	return fmt.Sprintf("%s: %s", l.File, l.Message)
}

var lineRE = regexp.MustCompile(`\(line (\d+)\)|line (\d+):`)

// lineIn returns a "line N" the message itself names, 0 without.
func lineIn(msg string) int {
	m := lineRE.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1] + m[2])
	return n
}

// locateApp splits err, sluice's configuration error, into its
// ConfigErrors, each with its line in data.
func locateApp(file string, data []byte, err error) []located {
	hint, err := splitHint(err)
	var out []located
	for _, e := range leaves(err) {
		l := located{File: displayName(file), Message: e.Error(), err: e}
		var ce *domain.ConfigError
		if errors.As(e, &ce) {
			l.Field = ce.Field
			if l.Line = lineIn(l.Message); l.Line == 0 {
				l.Line = app.FieldLine(data, ce.Field)
			}
		}
		out = append(out, l)
	}
	// The hint says how to set the secret: it goes with the secret's error.
	for i := range out {
		if hint != "" && errors.Is(out[i].err, app.ErrSecretMissing) {
			out[i].Message += hint
			hint = ""
		}
	}
	if hint != "" && len(out) > 0 {
		out[len(out)-1].Message += hint
	}
	return out
}

// splitHint separates boot.Config's hint, which wraps the joined errors
// of a configuration without a secret, from those errors.
func splitHint(err error) (string, error) {
	inner := errors.Unwrap(err)
	if inner == nil {
		return "", err
	}
	if _, joined := inner.(interface{ Unwrap() []error }); !joined {
		return "", err
	}
	msg, in := err.Error(), inner.Error()
	if !strings.HasPrefix(msg, in) {
		return "", err
	}
	return msg[len(in):], inner
}

func displayName(file string) string {
	if file == "" {
		return "(no -config: an empty document and the environment)"
	}
	return file
}

// envoyFiles lists what envoyrls.LoadConfig reads at path.
func envoyFiles(path string) []string {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return []string{path}
	}
	var files []string
	for _, pat := range []string{"*.yaml", "*.yml"} {
		m, _ := filepath.Glob(filepath.Join(path, pat))
		files = append(files, m...)
	}
	slices.Sort(files)
	return files
}

// locateEnvoy finds the file and line of err, a sluice-rls configuration
// error from envoyrls.LoadConfig(path): the file the message names, else
// the one file that alone fails with the same message, else the one
// whose domain the field starts with.
func locateEnvoy(path string, err error) []located {
	files := envoyFiles(path)
	var out []located
	for _, e := range leaves(err) {
		l := located{File: path, Message: e.Error(), err: e}
		var ce *domain.ConfigError
		if errors.As(e, &ce) {
			l.Field = ce.Field
		}
		file, data := envoyFileOf(files, e, l.Field)
		if file != "" {
			l.File = file
			if l.Line = lineIn(l.Message); l.Line == 0 && l.Field != "" {
				l.Line = app.FieldLine(data, fieldInDomain(data, l.Field))
			}
		}
		out = append(out, l)
	}
	return out
}

func envoyFileOf(files []string, e error, field string) (string, []byte) {
	msg := e.Error()
	read := func(f string) []byte {
		b, _ := readBounded(f)
		return b
	}
	for _, f := range files {
		if strings.Contains(msg, f) {
			return f, read(f)
		}
	}
	for _, f := range files {
		b := read(f)
		if b == nil {
			continue
		}
		if _, err := envoyrls.ParseConfig(b); err != nil && err.Error() == msg {
			return f, b
		}
	}
	for _, f := range files {
		b := read(f)
		if d := domainOf(b); d != "" && strings.HasPrefix(field, d+".") {
			return f, b
		}
	}
	return "", nil
}

// fieldInDomain drops the domain that starts sluice-rls's field paths
// ("edge.descriptors[0].rate_limit.unit").
func fieldInDomain(data []byte, field string) string {
	if d := domainOf(data); d != "" {
		if rest, ok := strings.CutPrefix(field, d+"."); ok {
			return rest
		}
	}
	return field
}

// domainOf reads a sluice-rls file's domain, "" when it has none.
func domainOf(data []byte) string {
	var f struct {
		Domain string `yaml:"domain"`
	}
	if yaml.Unmarshal(data, &f) != nil {
		return ""
	}
	return f.Domain
}

// readBounded reads a file of at most app.MaxConfigBytes, as the loaders
// do.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, app.MaxConfigBytes+1))
	if err == nil && len(b) > app.MaxConfigBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, app.MaxConfigBytes)
	}
	return b, err
}

// printLocated writes the errors, one a line, and returns the exit error
// of an invalid configuration: the secret's own code when the secret is
// all that is wrong (unless check, whose codes are 0 or 1).
func printLocated(w io.Writer, errs []located, forCheck bool) error {
	secretOnly := true
	for _, l := range errs {
		fmt.Fprintln(w, l.String())
		if !isSecretError(l.err) {
			secretOnly = false
		}
	}
	code := exitInvalid
	if secretOnly && !forCheck {
		code = exitSecret
	}
	return &exitError{code: code, err: errors.New("invalid configuration"), printed: true}
}

// envoyLoadFlags adds sluice-rls's loader settings to fs, with the
// defaults sluice-rls takes from its environment (MERGE_DOMAIN_CONFIG),
// so that the files are read as the service started beside them reads
// them.
func envoyLoadFlags(fs *flag.FlagSet) *envoyrls.LoadOptions {
	o := &envoyrls.LoadOptions{}
	merge, _ := strconv.ParseBool(os.Getenv("MERGE_DOMAIN_CONFIG"))
	fs.BoolVar(&o.MergeDomains, "merge-domain-config", merge, "with -envoy-config: merge the files of one domain, as sluice-rls -merge-domain-config (default $MERGE_DOMAIN_CONFIG)")
	fs.BoolVar(&o.AcceptUnlimited, "accept-unlimited", false, "with -envoy-config: load unlimited and requests_per_unit: 0, as sluice-rls -accept-unlimited")
	return o
}
