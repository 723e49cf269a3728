package main

import (
	"log/slog"

	"threadbox/domain/sandbox"
)

// otherBackend builds the backends other than docker.
func otherBackend(name string, cfg Config, limits sandbox.Limits, log *slog.Logger) sandbox.Backend {
	log.Warn("sandbox backend not built into this server yet", "backend", name)
	return nil
}
