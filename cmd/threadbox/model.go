package main

import (
	"log/slog"
	"net/url"
	"strings"

	"threadbox/app/mcpserver"
	"threadbox/app/messages"
	"threadbox/app/tools"
	"threadbox/app/turns"
	"threadbox/infra/llm/anthropic"
	"threadbox/infra/llm/openai"
	"threadbox/infra/llm/runner"
	"threadbox/infra/webfetch"
)

// newModel returns the model adapter MODEL_PROVIDER names: an
// Anthropic-compatible upstream through the official SDK, an
// OpenAI-compatible chat-completions server, or the offline runner (the
// default when no upstream is configured). Each upstream adapter keeps one
// pool of kept-alive connections.
func newModel(cfg Config) messages.Model {
	switch cfg.ModelProvider {
	case "anthropic":
		return anthropic.New(anthropic.Config{BaseURL: cfg.ModelBaseURL, APIKey: cfg.ModelAPIKey, Model: cfg.ModelName})
	case "openai":
		return openai.New(openai.Config{BaseURL: openAIBaseURL(cfg.ModelBaseURL), APIKey: cfg.ModelAPIKey, Model: cfg.ModelName})
	}
	return runner.New()
}

// openAIBaseURL adds the /v1 API root to a bare server address
// (http://host:port), as vLLM, Ollama and llama.cpp serve it there; a URL
// with a path is kept as given.
func openAIBaseURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || raw == "" || strings.Trim(u.Path, "/") != "" {
		return raw
	}
	return strings.TrimRight(raw, "/") + "/v1"
}

// newMessages builds the Messages API tool loop: the configured model and
// the tool kit running both tool families (the code-execution sub-tools
// and the sandbox_v1 tools) in the containers' sandboxes, with host-side
// file access through the file jail.
func newMessages(cfg Config, sys *system, fs containerFiles, log *slog.Logger) *messages.Service {
	executor := tools.New(sys.containers, fs, tools.Config{MaxOutput: int(cfg.ToolMaxOutput), MaxOutputFileBytes: cfg.MaxArtifactBytes, Log: log.With("component", "tools"), Meter: sys.usage, CellTimeout: cfg.PythonCellTimeout, ToolResultTimeout: cfg.PythonToolResultTimeout, Egress: egressNotes(sys.egress)})
	kit := sys.metrics.Tools(executor)
	sys.terminals = executor
	urls := webfetch.New(webfetch.Config{MaxBytes: cfg.URLFetchMaxBytes, Allow: cfg.URLFetchAllow})
	provider := cfg.ModelProvider
	if provider == "" {
		provider = "runner"
	}
	model := sys.metrics.Model(newModel(cfg), provider)
	sys.kit = kit
	return messages.New(model, messages.Tools{CodeExecution: kit, Sandbox: kit, WebFetch: webFetchTool(sys, log)}, messages.Config{
		MaxToolIterations: cfg.MaxToolIters,
		TurnTimeout:       cfg.TurnTimeout,
		AllowedToolTypes:  cfg.AllowToolTypes,
		URLs:              urls,
		Tokens:            sys.usage,
	})
}

// newMCP wires the MCP server over the tool kit of the Messages API: the
// same executor (metered, measured), the front door of turns for each
// call's container, the Files API's use cases, the threads and the org
// policy.
func newMCP(sys *system, log *slog.Logger) *mcpserver.Service {
	return mcpserver.New(mcpserver.Deps{
		Tools: sys.kit, Sandboxes: sys.turns, Files: sys.files, Threads: sys.workspace, Policies: sys.admin,
		Log: log.With("component", "mcp"),
	})
}

// newTurns wires the head of Messages API requests and chat turns: the
// tool loop, the containers, quotas, skills, container files and the
// sandbox's API variables, one default model for both, and the store of
// the detached turns' logs.
func newTurns(cfg Config, sys *system, log *slog.Logger) *turns.Service {
	return turns.New(turns.Deps{
		Engine: sys.messages, Containers: sys.containers, Restores: sys.containers, Quota: sys.quota, Skills: sys.skills,
		Files: sys.files, SandboxEnv: sys.sandbox.env, DefaultModel: cfg.ModelName,
		Records: sys.store.Turns(), Log: log.With("component", "turns"),
	})
}
