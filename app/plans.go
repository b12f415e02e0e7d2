package app

import (
	"fmt"
	"math"

	"github.com/sluicehq/sluice/domain"
)

// PlanConfig is a named plan: the tenants and api keys it is sold to, and
// how it changes the limits of some profiles (docs/adr/006). A plan scales
// or replaces a profile's limits within Config.PlanCeiling; it never
// removes a window, and it changes how much a window admits, never how it
// counts (period and algorithm stay the profile's).
type PlanConfig struct {
	// Name labels decisions taken under the plan (Decision.Plan): 1 to 64
	// of [a-z0-9_-].
	Name string `yaml:"name" validate:"required,routekey"`
	// Tenants and APIKeys are the raw identities on the plan, as requests
	// carry them; they are pseudonymised at boot and never stored raw. An
	// api key's plan wins over its tenant's.
	Tenants []string `yaml:"tenants" validate:"max=100000,dive,required,max=256"`
	APIKeys []string `yaml:"api_keys" validate:"max=100000,dive,required,max=256"`
	// Profiles maps a profile's name to the plan's change to it; profiles
	// not listed keep their own limits.
	Profiles map[string]PlanProfileConfig `yaml:"profiles" validate:"required,min=1,dive,keys,routekey,endkeys"`
}

// PlanProfileConfig is a plan's change to one profile: every window scaled
// by Multiplier (when set), then the windows named in Windows set to their
// explicit limit.
type PlanProfileConfig struct {
	// Multiplier scales every window's limit, rounded down, at least 1.
	Multiplier float64 `yaml:"multiplier" validate:"min=0"`
	// Windows replaces the limit of the named windows, per dimension.
	Windows PlanWindowsConfig `yaml:"windows"`
}

// PlanWindowsConfig names, per dimension, the windows whose limit a plan
// replaces.
type PlanWindowsConfig struct {
	IP           []PlanWindowConfig `yaml:"ip" validate:"max=4,unique=Name,dive"`
	User         []PlanWindowConfig `yaml:"user" validate:"max=4,unique=Name,dive"`
	APIKey       []PlanWindowConfig `yaml:"apikey" validate:"max=4,unique=Name,dive"`
	Tenant       []PlanWindowConfig `yaml:"tenant" validate:"max=4,unique=Name,dive"`
	TenantGlobal []PlanWindowConfig `yaml:"tenant_global" validate:"max=4,unique=Name,dive"`
}

// PlanWindowConfig sets one window's limit under a plan.
type PlanWindowConfig struct {
	Name  string `yaml:"name" validate:"required,windowname"`
	Limit int64  `yaml:"limit" validate:"windowlimit"`
}

// plan is a compiled plan: a variant of each profile it changes.
type plan struct {
	name     string
	profiles map[string]*profile
	// tenants and apiKeys are normalised identities, pseudonymised by New.
	tenants, apiKeys []string
}

// buildPlans compiles every plan against the profiles and checks that no
// identity is on two plans.
func buildPlans(c Config, set *profileSet) (map[string]*plan, error) {
	plans := make(map[string]*plan, len(c.Plans))
	owner := map[string]string{} // "tenant:<id>" or "apikey:<id>" → plan
	for _, pc := range c.Plans {
		path := "plans[" + pc.Name + "]"
		pl := &plan{name: pc.Name, profiles: map[string]*profile{}}
		for name, change := range pc.Profiles {
			base, ok := set.byName[name]
			if !ok {
				return nil, &domain.ConfigError{Field: path + ".profiles." + name, Reason: "no profile of that name"}
			}
			v, err := planVariant(base, change, c.PlanCeiling, pc.Name, path+".profiles."+name)
			if err != nil {
				return nil, err
			}
			// A plan keeps every window's period and algorithm, so its
			// variant names the profile's keys; its limits are checked
			// against the shared logs again (docs/adr/015).
			if err := set.layKeys(v, path+".profiles."+name); err != nil {
				return nil, err
			}
			pl.profiles[name] = v
		}
		for _, a := range []struct {
			kind, field string
			raw         []string
			dst         *[]string
		}{{"tenant", ".tenants", pc.Tenants, &pl.tenants}, {"apikey", ".api_keys", pc.APIKeys, &pl.apiKeys}} {
			for i, raw := range a.raw {
				field := fmt.Sprintf("%s%s[%d]", path, a.field, i)
				id, err := domain.NormaliseIdentifier(raw)
				if err != nil {
					return nil, &domain.ConfigError{Field: field, Reason: "not a valid identifier", Err: err}
				}
				if prev, ok := owner[a.kind+":"+id]; ok {
					return nil, &domain.ConfigError{Field: field, Reason: fmt.Sprintf("already on plan %q: an identity has one plan", prev)}
				}
				owner[a.kind+":"+id] = pc.Name
				*a.dst = append(*a.dst, id)
			}
		}
		plans[pc.Name] = pl
	}
	return plans, nil
}

// planVariant returns base with the plan's limits, checked against the
// ceiling: every window keeps a limit of at least 1 and at most ceiling
// times its own.
func planVariant(base *profile, change PlanProfileConfig, ceiling float64, planName, path string) (*profile, error) {
	v := *base
	v.plan = planName
	v.Dimensions = make([]domain.DimensionWindows, len(base.Dimensions))
	explicit := explicitLimits(change.Windows)
	used := 0
	for i, d := range base.Dimensions {
		ws := append([]domain.Window(nil), d.Windows...)
		for j := range ws {
			w := &ws[j]
			limit := w.Limit
			if change.Multiplier > 0 {
				limit = int64(max(1, math.Floor(float64(w.Limit)*change.Multiplier)))
			}
			if l, ok := explicit[d.Dimension][w.Name]; ok {
				limit, used = l, used+1
			}
			wpath := fmt.Sprintf("%s.windows.%s[%s]", path, d.Dimension, w.Name)
			if float64(limit) > ceiling*float64(w.Limit) {
				return nil, &domain.ConfigError{Field: wpath, Reason: fmt.Sprintf("limit %d exceeds plan_ceiling × %d", limit, w.Limit), Err: ErrPlanRemovesLimit}
			}
			w.Limit = limit
			if err := windowError(wpath, w.Validate()); err != nil {
				return nil, err
			}
		}
		v.Dimensions[i] = domain.DimensionWindows{Dimension: d.Dimension, Windows: ws}
	}
	if total := countLimits(explicit); used != total {
		return nil, &domain.ConfigError{Field: path + ".windows", Reason: "names a window the profile does not have: a plan changes limits, it cannot add or remove windows", Err: ErrPlanRemovesLimit}
	}
	if change.Multiplier == 0 && used == 0 {
		return nil, &domain.ConfigError{Field: path, Reason: "changes nothing: give a multiplier or windows"}
	}
	if err := v.finish(path); err != nil {
		return nil, err
	}
	return &v, nil
}

func explicitLimits(w PlanWindowsConfig) map[domain.Dimension]map[string]int64 {
	out := map[domain.Dimension]map[string]int64{}
	for dim, list := range map[domain.Dimension][]PlanWindowConfig{
		domain.DimensionIP: w.IP, domain.DimensionUser: w.User, domain.DimensionAPIKey: w.APIKey,
		domain.DimensionTenant: w.Tenant, domain.DimensionTenantGlobal: w.TenantGlobal,
	} {
		for _, pw := range list {
			if out[dim] == nil {
				out[dim] = map[string]int64{}
			}
			out[dim][pw.Name] = pw.Limit
		}
	}
	return out
}

func countLimits(m map[domain.Dimension]map[string]int64) int {
	n := 0
	for _, ws := range m {
		n += len(ws)
	}
	return n
}
