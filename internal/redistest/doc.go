// Package redistest starts real redis-server processes for tests: one
// shared standalone server and one shared three-master Redis Cluster, each
// started lazily, at most once per test binary, on free loopback ports; and
// dedicated standalone servers (NewServer) that a test may stop and restart
// on the same port for outage drills.
//
// Every package that uses the shared servers stops them from its TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// When REDIS_URL is set, Standalone and StandaloneURL return it instead of
// starting a server; when REDIS_CLUSTER_ADDRS (a comma-separated list of
// host:port) is set, Cluster returns it. NewServer always starts its own
// process, since a drill stops it.
//
// A missing redis-server binary fails the test with instructions (`make
// deps` or `apt-get install redis-server`); it never skips: a test that
// needs Redis and does not run proves nothing.
//
// Processes run with persistence off (--save "" --appendonly no) in
// temporary directories. On Linux they are also tied to the test binary
// with a parent-death signal, so a test binary killed by a timeout leaves
// no server behind.
package redistest
