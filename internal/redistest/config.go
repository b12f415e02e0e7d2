package redistest

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Config is how a dedicated server is started (NewServerWith). The zero
// value is the plain server NewServer starts: no password, no TLS, no
// memory limit, no persistence.
type Config struct {
	// MaxMemory is redis-server's maxmemory, e.g. "2mb" or "1048576";
	// empty means no limit.
	MaxMemory string
	// MaxMemoryPolicy is what Redis does at MaxMemory, e.g. "noeviction"
	// (refuse writes: the "Redis is full" drill) or "allkeys-lru"; empty
	// means Redis' default, noeviction.
	MaxMemoryPolicy string

	// Persistence says what survives a restart; the zero value,
	// PersistNone, restarts empty.
	Persistence Persistence

	// Password, when set, is required of the default user (requirepass).
	// URL carries it; Do and the harness' own checks authenticate with it.
	Password string
	// Users are ACL users created at start, in addition to the default
	// user. URLWith builds a URL for any of them.
	Users []User

	// TLS makes the server speak TLS only, on its one port, with a
	// certificate for 127.0.0.1, ::1 and localhost issued by a CA
	// generated for the server (see TLSConfig, CAPool and CAFile).
	TLS bool
	// ClientCerts, with TLS, makes the server require a client
	// certificate issued by the same CA; TLSConfig then carries one.
	ClientCerts bool

	// Args are extra redis-server arguments, e.g. "--hz", "100". They come
	// after everything the harness sets, so they win.
	Args []string

	// Stopped reserves the server's port and writes its configuration,
	// but leaves it stopped: Addr and URL name it before any process
	// listens there, and the test starts it with Start, e.g. after a
	// service that must start during an outage.
	Stopped bool
}

// User is an ACL user (ACL SETUSER).
type User struct {
	// Name is the user name; it may not be "default" (use
	// Config.Password for the default user).
	Name string
	// Password is the user's password; it may not be empty.
	Password string
	// Rules are the user's ACL rules, e.g. "~rl:*", "+@all", "-flushall";
	// empty means every key, channel and command ("~*", "&*", "+@all").
	Rules []string
}

// Persistence says what a server keeps across Stop, Kill and Start.
type Persistence int

const (
	// PersistNone: nothing is written to disk and every start is empty,
	// whatever stopped the server and even after an explicit SAVE (the
	// harness removes any RDB or AOF before starting). The drills' "Redis
	// restarts empty".
	PersistNone Persistence = iota
	// PersistRDB: an RDB snapshot is written when the server is stopped
	// gracefully (Stop, Restart) and loaded at start. Kill writes
	// nothing, so what was written since the last snapshot (or SAVE) is
	// lost.
	PersistRDB
	// PersistAOF: an append-only file synced on every write; every write
	// the server acknowledged survives even Kill.
	PersistAOF
)

// String returns the constant's name.
func (p Persistence) String() string {
	switch p {
	case PersistNone:
		return "PersistNone"
	case PersistRDB:
		return "PersistRDB"
	case PersistAOF:
		return "PersistAOF"
	}
	return "Persistence(" + strconv.Itoa(int(p)) + ")"
}

// validate rejects what redis-server would misread or what the harness
// cannot honour, with the field at fault.
func (c Config) validate() error {
	if c.Persistence < PersistNone || c.Persistence > PersistAOF {
		return fmt.Errorf("Config.Persistence: unknown value %d", int(c.Persistence))
	}
	if c.ClientCerts && !c.TLS {
		return fmt.Errorf("Config.ClientCerts needs Config.TLS")
	}
	seen := map[string]bool{}
	for i, u := range c.Users {
		switch {
		case u.Name == "" || strings.ContainsFunc(u.Name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
			return fmt.Errorf("Config.Users[%d].Name %q: want a non-empty name without spaces", i, u.Name)
		case u.Name == "default":
			return fmt.Errorf("Config.Users[%d]: the default user's password is Config.Password", i)
		case seen[u.Name]:
			return fmt.Errorf("Config.Users[%d]: user %q given twice", i, u.Name)
		case u.Password == "":
			return fmt.Errorf("Config.Users[%d] (%s): want a password", i, u.Name)
		}
		seen[u.Name] = true
	}
	return nil
}

// clusterNode is what a node of a cluster adds to its configuration.
type clusterNode struct {
	busPort     int
	nodeTimeout time.Duration
	// failoverTuning makes failover prompt and predictable, for the
	// dedicated clusters that drills kill nodes of.
	failoverTuning bool
}

// confFile renders the server's redis.conf: one directive per line,
// every value quoted, so that passwords and rules reach Redis verbatim.
func (s *Server) confFile() string {
	var b strings.Builder
	line := func(name string, values ...string) {
		b.WriteString(name)
		for _, v := range values {
			b.WriteByte(' ')
			b.WriteString(quoteConf(v))
		}
		b.WriteByte('\n')
	}
	port := strconv.Itoa(s.port)
	if s.cfg.TLS {
		line("port", "0")
		line("tls-port", port)
		line("tls-cert-file", filepath.Join(s.dir, serverCertFile))
		line("tls-key-file", filepath.Join(s.dir, serverKeyFile))
		line("tls-ca-cert-file", filepath.Join(s.dir, caCertFile))
		line("tls-auth-clients", yesNo(s.cfg.ClientCerts))
	} else {
		line("port", port)
	}
	line("bind", "127.0.0.1")
	line("dir", s.dir)
	line("logfile", filepath.Join(s.dir, logFile))
	line("daemonize", "no")
	line("protected-mode", "no")
	// A replica's first sync starts at once instead of waiting 5 s for
	// more replicas to share the transfer.
	line("repl-diskless-sync-delay", "0")
	// DEBUG SLEEP and friends make slow or stuck servers for drills.
	line("enable-debug-command", "yes")
	switch s.cfg.Persistence {
	case PersistNone:
		line("save", "")
		line("appendonly", "no")
	case PersistRDB:
		line("save", "3600 1")
		line("appendonly", "no")
	case PersistAOF:
		line("save", "")
		line("appendonly", "yes")
		line("appendfsync", "always")
	}
	if s.cfg.MaxMemory != "" {
		line("maxmemory", s.cfg.MaxMemory)
	}
	if s.cfg.MaxMemoryPolicy != "" {
		line("maxmemory-policy", s.cfg.MaxMemoryPolicy)
	}
	if s.cfg.Password != "" {
		line("requirepass", s.cfg.Password)
		// Replicas of a cluster authenticate to their master as the
		// default user.
		line("masterauth", s.cfg.Password)
	}
	for _, u := range s.cfg.Users {
		rules := u.Rules
		if len(rules) == 0 {
			rules = []string{"~*", "&*", "+@all"}
		}
		line("user", append([]string{u.Name, "on", ">" + u.Password}, rules...)...)
	}
	if c := s.cluster; c != nil {
		line("cluster-enabled", "yes")
		line("cluster-port", strconv.Itoa(c.busPort))
		line("cluster-config-file", filepath.Join(s.dir, "nodes.conf"))
		line("cluster-node-timeout", strconv.FormatInt(c.nodeTimeout.Milliseconds(), 10))
		if c.failoverTuning {
			// A replica may always take over, however long it was cut off,
			// and replicas stay with their master: the topology a drill
			// sees is the one it caused.
			line("cluster-replica-validity-factor", "0")
			line("cluster-allow-replica-migration", "no")
		}
	}
	return b.String()
}

// quoteConf quotes v for redis.conf, whose parser (sdssplitargs) reads
// \" \\ \n \r \t and \xHH inside double quotes.
func quoteConf(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, `\x%02x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
