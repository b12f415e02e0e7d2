// Package redistest starts real redis-server processes for tests, on free
// loopback ports, and stops them by PID. Nothing is mocked: a test that
// needs Redis talks to Redis.
//
// # Shared servers
//
// Most tests only read and write keys. They share one standalone server
// (Standalone, StandaloneURL) and one three-master Redis Cluster
// (Cluster), each started lazily, at most once per test binary. Use keys
// unique to the test, and never flush, reconfigure or stop a shared
// server. Every package that uses the harness stops its servers from its
// TestMain:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
//
// When REDIS_URL is set, Standalone and StandaloneURL return it instead of
// starting a server; when REDIS_CLUSTER_ADDRS (a comma-separated list of
// host:port) is set, Cluster returns it.
//
// # Dedicated servers, for tests that change or break them
//
// NewServer and NewServerWith start a server that belongs to one test and
// is stopped on t.Cleanup. The test may break it the ways the reliability
// drills need (docs/runbook.md describes the outages they rehearse):
//
//	srv := redistest.NewServerWith(t, redistest.Config{MaxMemory: "2mb"})
//	srv.Kill()    // SIGKILL: the outage
//	srv.Start()   // back on the same port, empty (PersistNone)
//	srv.Pause()   // SIGSTOP: connections hang until Resume
//	srv.Do(ctx, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
//
// Start works whatever stopped the process, including a kill -9 from
// outside the harness; PID and Running tell whether it is alive.
// Config.Persistence says whether data survives a restart. Config.Password
// and Config.Users require authentication (URL and URLWith carry the
// credentials); Config.TLS makes the server speak TLS only, with a CA
// generated for it at test time (TLSConfig, CAPool, CAFile).
//
// NewCluster and ClusterWithReplicas start a cluster that belongs to one
// test, with replicas and a short cluster-node-timeout, so that a test can
// kill a master (KillMasterOf), wait for its replica to take over
// (WaitHealthy), and start the master again, which rejoins as a replica.
// MigrateSlot moves a slot between masters under traffic, as `redis-cli
// --cluster reshard` does; Config.Args passes redis-server options to
// every node (e.g. "--cluster-require-full-coverage", "no", so that the
// other masters keep serving while one is down).
//
// To make Redis slow, or cut a reply in half, put the fault-injecting
// proxy of package internal/faultproxy between the client and the server.
//
// # Processes and ports
//
// A missing redis-server binary fails the test with instructions (`make
// deps` or `apt-get install redis-server`); it never skips: a test that
// needs Redis and does not run proves nothing.
//
// Data directories are temporary. On Linux every process is tied to the
// test binary with a parent-death signal, so a test binary killed by a
// timeout leaves no server behind.
//
// Ports are chosen outside the kernel's ephemeral range, so no outgoing
// connection takes the port of a server that is down, and each is
// reserved for the life of its server with a lock file under
// $TMPDIR/redistest-ports that every test binary honours: `go test ./...`
// runs packages in parallel, and one package's server never starts on
// another's port, even while that one is killed.
package redistest
