package otel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/adapters/otel"
	"github.com/sluicehq/sluice/domain"
	"github.com/sluicehq/sluice/ports"
)

// The deploy/ files, from this package's directory.
var (
	alertsFile    = filepath.Join("..", "..", "deploy", "prometheus", "sluice-alerts.yaml")
	dashboardFile = filepath.Join("..", "..", "deploy", "grafana", "sluice-dashboard.json")
)

// schema is what the recorder exports: every series name (a histogram's
// _bucket, _sum and _count) with its labels and, per label, the values
// seen.
type schema map[string]map[string]map[string]bool

// openLabels take values from the deployment (profiles, instances,
// tenants, bucket bounds): the checks do not pin their values.
var openLabels = map[string]bool{
	otel.LabelRouteProfile: true, otel.LabelInstanceID: true, otel.LabelTenantID: true, "le": true, otel.LabelNode: true,
}

// exportedSchema drives a real Recorder through every state, cause,
// family, layer, transition, store operation and outcome, and reads back
// what its registry exports.
func exportedSchema(t *testing.T) schema {
	t.Helper()
	reg := prometheus.NewRegistry()
	rec, err := otel.New(otel.Config{Registry: reg, AppLog: discard, AuditLog: discard, InstanceID: "i"})
	require.NoError(t, err)
	defer rec.Close()
	ctx := context.Background()
	for st := domain.Allowed; st <= domain.RejectedInvalidContext; st++ {
		for _, cause := range domain.Causes() {
			for _, fam := range append(domain.Families(), 0) {
				for _, layer := range []domain.Layer{domain.LayerNone, domain.LayerTenant, domain.LayerUser} {
					require.NoError(t, rec.RecordDecision(ctx, ports.DecisionRecord{TenantID: "7e4a", Decision: domain.Decision{
						State: st, Cause: cause, Profile: "p", Family: fam, Layer: layer,
					}}))
				}
			}
		}
	}
	for _, c := range []domain.StateChange{
		{From: domain.Healthy, To: domain.Degraded}, {From: domain.Degraded, To: domain.Recovering},
		{From: domain.Recovering, To: domain.Healthy}, {From: domain.Recovering, To: domain.Degraded},
	} {
		require.NoError(t, rec.RecordTransition(ctx, c, t0))
		require.NoError(t, rec.RecordNodeTransition(ctx, "10.0.0.1:7000", c, t0))
	}
	for _, op := range []ports.StoreOp{ports.OpEvaluate, ports.OpPeek, ports.OpReset, ports.OpReserve, ports.OpSettle, ports.OpRenew} {
		for _, err := range []error{nil, errOutage, domain.ErrStoreTimeout, &domain.LimitError{Index: -1}, domain.ErrCrossSlot, context.Canceled, errors.New("other")} {
			rec.RecordStoreCall(ctx, ports.StoreCall{Op: op, Start: t0, Latency: time.Millisecond, Err: err})
		}
	}
	fams, err := reg.Gather()
	require.NoError(t, err)
	s := schema{}
	add := func(name string, pairs []*dto.LabelPair, extra ...string) {
		if s[name] == nil {
			s[name] = map[string]map[string]bool{}
		}
		for _, lp := range pairs {
			if s[name][lp.GetName()] == nil {
				s[name][lp.GetName()] = map[string]bool{}
			}
			s[name][lp.GetName()][lp.GetValue()] = true
		}
		for _, l := range extra {
			if s[name][l] == nil {
				s[name][l] = map[string]bool{}
			}
		}
	}
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			if mf.GetType() == dto.MetricType_HISTOGRAM {
				add(mf.GetName()+"_bucket", m.GetLabel(), "le")
				add(mf.GetName()+"_sum", m.GetLabel())
				add(mf.GetName()+"_count", m.GetLabel())
				continue
			}
			add(mf.GetName(), m.GetLabel())
		}
	}
	return s
}

// literalAlternation is a regex matcher the checks can read: names
// separated by |.
var literalAlternation = regexp.MustCompile(`^[A-Za-z0-9_]+(\|[A-Za-z0-9_]+)*$`)

// check parses expr with Prometheus' PromQL parser and returns every
// metric, label or value it uses that the recorder does not export.
func (s schema) check(expr string) (problems []string, metrics []string) {
	node, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return []string{err.Error()}, nil
	}
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			metrics = append(metrics, n.Name)
			problems = append(problems, s.checkSelector(n)...)
		case *parser.AggregateExpr:
			problems = append(problems, s.checkLabels(n.Grouping, n.Expr)...)
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				ls := append(append([]string(nil), n.VectorMatching.MatchingLabels...), n.VectorMatching.Include...)
				problems = append(problems, s.checkLabels(ls, n.LHS)...)
				problems = append(problems, s.checkLabels(ls, n.RHS)...)
			}
		}
		return nil
	})
	if len(metrics) == 0 {
		problems = append(problems, "no metric")
	}
	return problems, metrics
}

func (s schema) checkSelector(vs *parser.VectorSelector) (problems []string) {
	ls, ok := s[vs.Name]
	if !ok {
		return []string{fmt.Sprintf("%s: not exported", vs.Name)}
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			continue
		}
		values, ok := ls[m.Name]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("%s has no label %s", vs.Name, m.Name))
			continue
		case openLabels[m.Name]:
			continue
		}
		var want []string
		switch {
		case m.Type == labels.MatchEqual || m.Type == labels.MatchNotEqual:
			want = []string{m.Value}
		case literalAlternation.MatchString(m.Value):
			want = strings.Split(m.Value, "|")
		case m.Value != ".*":
			problems = append(problems, fmt.Sprintf("%s{%s}: regex %q cannot be checked", vs.Name, m.Name, m.Value))
		}
		for _, v := range want {
			if !values[v] {
				problems = append(problems, fmt.Sprintf("%s{%s}: value %q never exported", vs.Name, m.Name, v))
			}
		}
	}
	return problems
}

// checkLabels checks that every metric under node carries each label.
func (s schema) checkLabels(ls []string, node parser.Node) (problems []string) {
	parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && s[vs.Name] != nil {
			for _, l := range ls {
				if _, ok := s[vs.Name][l]; !ok {
					problems = append(problems, fmt.Sprintf("%s has no label %s (grouping or matching)", vs.Name, l))
				}
			}
		}
		return nil
	})
	return problems
}

// checkTemplateLabels checks the labels a legend or an annotation names
// ({{x}}, {{ $labels.x }}) against the metrics of its expression.
func (s schema) checkTemplateLabels(text string, metrics []string) (problems []string) {
	for _, m := range regexp.MustCompile(`\{\{\s*(?:\$labels\.)?([a-z_]+)\s*\}\}`).FindAllStringSubmatch(text, -1) {
		found := false
		for _, name := range metrics {
			if _, ok := s[name][m[1]]; ok {
				found = true
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("template names label %s that no metric of its expression has", m[1]))
		}
	}
	return problems
}

// TestDeployCheckerCatchesRot: the checks fail what they should, so the
// tests below cannot pass vacuously.
func TestDeployCheckerCatchesRot(t *testing.T) {
	s := exportedSchema(t)
	for _, bad := range []string{
		`sluice_decision_total`,
		`sluice_decisions_total{decision_sate="THROTTLED"}`,
		`sluice_decisions_total{decision_state="THROTTLE"}`,
		`sluice_decisions_total{decision_state=~"THROTTLED|DENIED"}`,
		`sluice_decisions_total{cause=~"limit.*"}`,
		`sum by (tenant_id) (sluice_decisions_total)`,
		`sluice_breaker_open > on (state) sluice_store_deadline_seconds`,
		`sluice_store_latency_seconds_bucket{op="get"}`,
		`sluice_store_latency_seconds{op="evaluate"}`,
		`vector(1)`,
		`sum(rate(sluice_decisions_total[5m]`,
	} {
		problems, _ := s.check(bad)
		assert.NotEmpty(t, problems, bad)
	}
	problems, metrics := s.check(`sum by (route_profile) (rate(sluice_decisions_total{decision_state=~"THROTTLED|DENIED_DEGRADED"}[5m]))`)
	assert.Empty(t, problems)
	assert.Equal(t, []string{"sluice_decisions_total"}, metrics)
	assert.NotEmpty(t, s.checkTemplateLabels("{{ $labels.instance }}", []string{"sluice_breaker_open"}))
}

// alertRules is the rule file's shape; unknown fields are errors, as they
// are for Prometheus.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestAlertRulesUseExportedMetrics: every alert parses, names only what
// the recorder exports, and the four alerts the operators rely on exist.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	s := exportedSchema(t)
	data, err := os.ReadFile(alertsFile)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var file alertRules
	require.NoError(t, dec.Decode(&file))
	var alerts []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			problems, metrics := s.check(r.Expr)
			assert.Empty(t, problems, r.Alert)
			_, err := model.ParseDuration(r.For)
			assert.NoError(t, err, "%s: for", r.Alert)
			assert.NotEmpty(t, r.Labels["severity"], r.Alert)
			for _, text := range r.Annotations {
				assert.Empty(t, s.checkTemplateLabels(text, metrics), r.Alert)
			}
		}
	}
	assert.ElementsMatch(t, []string{
		"SluiceBreakerOpen", "SluiceDegraded", "SluiceStoreNodeDegraded", "SluiceRejectionRatioSpike", "SluiceStoreLatencyAboveDeadline",
		"SluiceBreakerFlapping",
	}, alerts)
}

// dashboard is the part of the Grafana dashboard model the checks read.
type dashboard struct {
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type dashboardPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's
}

// grafanaVariables stand for what Grafana substitutes before querying.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h", "${instance_id}", ".*", "$instance_id", ".*",
)

// TestDashboardUsesExportedMetrics: every panel query parses and names
// only what the recorder exports, legends name labels the query has, and
// every metric the recorder exports has a panel.
func TestDashboardUsesExportedMetrics(t *testing.T) {
	s := exportedSchema(t)
	data, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(data, &d))
	used := map[string]bool{}
	var walk func([]dashboardPanel)
	walk = func(panels []dashboardPanel) {
		for _, p := range panels {
			if p.Type != "row" {
				assert.NotEmpty(t, p.Targets, p.Title)
			}
			for _, tg := range p.Targets {
				problems, metrics := s.check(grafanaVariables.Replace(tg.Expr))
				assert.Empty(t, problems, "%s: %s", p.Title, tg.Expr)
				assert.Empty(t, s.checkTemplateLabels(tg.LegendFormat, metrics), p.Title)
				for _, m := range metrics {
					used[strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_sum"), "_count")] = true
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`)
	for _, v := range d.Templating.List {
		var q struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &q) != nil {
			continue // the data source variable's query is a plain string
		}
		m := labelValues.FindStringSubmatch(q.Query)
		require.NotNil(t, m, "variable %s: %q", v.Name, q.Query)
		_, ok := s[m[1]][m[2]]
		assert.True(t, ok, "variable %s: %s has no label %s", v.Name, m[1], m[2])
	}
	for name := range s {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		assert.True(t, used[base], "no panel shows %s", base)
	}
}
