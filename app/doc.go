// Package app is sluice's application service: the decision pipeline
// (Limiter.Evaluate), its configuration (Config, loaded from YAML and the
// environment and validated at boot), the health loop and breaker, and the
// ADR-002 compatibility façades (Allow, AllowDual and their context
// variants).
//
// The package depends on domain and ports only; adapters plug in through
// Deps. Everything time-driven reads the ports.Clock, so tests step a fake
// clock through every health transition without sleeping.
//
// No raw identifier leaves Evaluate in a store key or a recorded label:
// identities are normalised and pseudonymised (HMAC-SHA256 under the
// configured secret) before any key is built. The raw client address is
// handed to the Recorder only as DecisionRecord.ClientIP, for the
// security-audit channel.
package app
