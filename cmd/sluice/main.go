// Command sluice is the operator's tool: it checks a configuration before
// a deploy, explains what a route counts, and peeks at and resets the
// counts of an identity on the shared store, for sluice's own
// configuration (the services that embed app.Limiter) and for
// sluice-rls's Envoy descriptors.
//
//	go install github.com/sluicehq/sluice/cmd/sluice@latest
//
//	sluice check   -config sluice.yaml [-envoy-config DIR [-envoy-routes envoy.yaml]] [-identities N] [-expose ROUTE]...
//	sluice explain -config sluice.yaml -route 'GET /api/v1/search' [-user U] [-tenant T] [-ip A] [-apikey K]
//	sluice peek    -config sluice.yaml [-route R] -user alice@example.org [-tenant acme]
//	sluice reset   -config sluice.yaml -user alice@example.org -actor support-7 [-yes]
//	sluice peek    -envoy-config deploy/envoy/config -domain edge -descriptor tenant=acme
//	sluice reset   -envoy-config deploy/envoy/config -domain edge -descriptor tenant=acme -actor support-7
//
// Every subcommand has --help; -json prints one JSON document for
// scripts instead of the tables. peek and reset read the store and the
// secret as the services do: REDIS_URL (or redis_url in the file; else
// REDIS_CLUSTER_ADDRS, comma-separated host:port of cluster nodes) and
// RATE_LIMIT_HMAC_SECRET, and go through app.Limiter (Peek, Reset,
// PeekWindows, ResetWindows), which builds the keys: no key is built
// here. A reset is written to the security-audit channel (stderr, or
// -audit-log FILE) with its -actor, as Limiter.Reset records it: before
// any key is deleted, and with the keys it deleted after.
//
// check reads the file apart from the environment: without
// RATE_LIMIT_HMAC_SECRET it checks the file and warns (exit 0); a
// malformed secret is exit 3. With -envoy-routes it walks each of Envoy's
// rate_limits descriptors through sluice-rls's files and warns on one
// that reaches no limit.
//
// Exit codes (also in --help):
//
//	0  success (check: the configuration is valid; warnings included)
//	1  the configuration is invalid (every error names file, line and field)
//	2  usage: unknown subcommand or flag, missing or bad argument
//	3  the HMAC secret is malformed, or missing where keys are needed (explain, peek, reset)
//	4  the store is unreachable, timed out, or not configured
//	5  unknown route, profile, domain, or descriptor matching no limit
//	6  an identity is malformed (an ip that does not parse, an id too long)
//	7  reset not confirmed
//	8  reset deleted nothing: no key it names held a count
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes: one per failure an operator or a script tells apart.
const (
	exitOK           = 0
	exitInvalid      = 1
	exitUsage        = 2
	exitSecret       = 3
	exitStore        = 4
	exitUnknown      = 5
	exitBadIdentity  = 6
	exitNotConfirmed = 7
	exitNothingReset = 8
)

// exitCodesHelp documents the exit codes in every --help.
const exitCodesHelp = `Exit codes:
  0  success (check: the configuration is valid; warnings included, a
     missing RATE_LIMIT_HMAC_SECRET among them)
  1  the configuration is invalid (each error names file, line and field)
  2  usage: unknown subcommand or flag, missing or bad argument
  3  the HMAC secret is malformed, or missing where keys are needed
     (explain, peek, reset) (RATE_LIMIT_HMAC_SECRET)
  4  the store is unreachable, timed out, or not configured
     (REDIS_URL or REDIS_CLUSTER_ADDRS)
  5  unknown route, profile, domain, or a descriptor matching no limit
  6  an identity is malformed (an ip that does not parse, an id too long)
  7  reset not confirmed
  8  reset deleted nothing: no key it names held a count (nothing
     counted yet, another RATE_LIMIT_HMAC_SECRET, a missing -tenant)
`

const usage = `sluice: the operator's tool for sluice rate limiting.

Usage:
  sluice check   -config FILE [-envoy-config PATH [-envoy-routes ENVOY.yaml]...] [-identities N] [-expose ROUTE]...
  sluice explain -config FILE -route ROUTE [-user U] [-tenant T] [-ip A] [-apikey K]
  sluice explain -envoy-config PATH -domain D -descriptor k=v[,k=v]...
  sluice peek    -config FILE [-route ROUTE] IDENTITY...   (or -envoy-config ... -domain ... -descriptor ...)
  sluice reset   -config FILE IDENTITY... -actor WHO [-yes] (or -envoy-config ... -domain ... -descriptor ...)

Run 'sluice COMMAND --help' for a command's flags. -json prints JSON.
Environment: REDIS_URL, REDIS_CLUSTER_ADDRS, RATE_LIMIT_HMAC_SECRET, read
as the services read them.

` + exitCodesHelp

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs one subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	io := ioSet{in: stdin, out: stdout, err: stderr}
	var err error
	switch args[0] {
	case "check":
		err = runCheck(args[1:], io)
	case "explain":
		err = runExplain(args[1:], io)
	case "peek":
		err = runPeek(ctx, args[1:], io)
	case "reset":
		err = runReset(ctx, args[1:], io)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	return report(err, stderr)
}

// ioSet is a command's standard streams.
type ioSet struct {
	in       io.Reader
	out, err io.Writer
}
