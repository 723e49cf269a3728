package web

import (
	"time"

	"github.com/gofiber/fiber/v2"

	"threadbox/domain/fault"
)

// routes registers every route of the server.
func (s *Server) routes() {
	a := s.app
	a.Use(s.recoverPanics, s.accessLog)
	a.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	a.Get("/readyz", newReadiness(s, readyTTL, time.Now).serve)
	a.Get("/metrics", s.metrics)
	a.Get("/api/openapi.json", s.openAPI)

	a.Post("/api/v1/app/auth/login", s.login)
	a.Post(refreshPath, s.refreshSession)
	a.Delete(refreshPath, s.endSession)
	// Downloads a plain link may open with a ticket (web/downloads.go),
	// or with a bearer token as the rest of the API.
	a.Get("/api/v1/app/thread/:id/download-file", s.ticketAuth(func(c *fiber.Ctx) string {
		return threadFileResource(c.Params("id"), c.Query("path"))
	}), s.threadDownload)
	a.Get("/api/v1/app/artifact/:id/content", s.ticketAuth(func(c *fiber.Ctx) string {
		return artifactResource(c.Params("id"))
	}), s.artifactContent)

	app, ws := a.Group("/api/v1/app", s.authenticate), s.svc.Workspace
	app.Get("/me", s.me)

	app.Post("/project", withJSON(parseJSON, s.createProject))
	app.Get("/project", s.listProjects)
	app.Get("/project/:id", getByParam("id", ws.Project, viewProject))
	app.Patch("/project/:id", withJSON(parseJSON, s.patchProject))
	app.Delete("/project/:id", deleteByParam("id", ws.DeleteProject))

	app.Post("/thread", withJSON(parseJSON, s.createThread))
	app.Get("/thread", s.listThreads)
	app.Get("/thread/:id", getByParam("id", ws.Thread, viewThread))
	app.Patch("/thread/:id", withJSON(parseJSON, s.patchThread))
	app.Delete("/thread/:id", deleteByParam("id", ws.DeleteThread))

	// Workspace API (docs/api.md)
	app.Post("/thread/:id/upload-file", s.threadUpload)
	app.Put("/thread/:id/put-file/*", s.threadPut)
	app.Post("/thread/:id/messages", withJSON(parseJSON, s.threadTurn))
	app.Get("/thread/:id/messages", s.threadMessages)
	app.Get("/thread/:id/turns/:turn/events", s.turnEvents)
	app.Post("/thread/:id/turns/:turn/stop", s.stopTurn)
	app.Post("/thread/:id/fork", withJSON(parseOptionalJSON, s.forkThread))
	app.Post("/thread/:id/rewind", withJSON(parseJSON, s.rewindThread))
	app.Get("/thread/:id/terminals", s.threadTerminals)
	app.Get("/thread/:id/terminals/:session/output", s.terminalOutput)
	app.Post("/thread/:id/terminals/:session/input", withJSON(parseJSON, s.terminalInput))
	app.Get("/thread/:id/changes", s.threadChanges)
	app.Get("/thread/:id/calls/:callId/changes", s.callChanges)
	app.Post("/thread/:id/calls/:callId/revert", withJSON(parseOptionalJSON, s.revertCall))
	app.Post("/skills", s.uploadSkill)
	app.Get("/skills", s.listSkills)
	app.Delete("/skills/:id", s.deleteSkill)
	app.Get("/project/:id/artifacts", s.projectArtifacts)
	app.Get("/artifact/:id", getByParam("id", ws.Artifact, viewArtifact))
	app.Post("/download-url", withJSON(parseJSON, s.downloadURL))

	app.Get("/org/features", s.getFeatures)
	app.Patch("/org/features", s.patchFeatures)
	app.Get("/org/audit", s.listAudit)
	app.Get("/org/egress", s.listEgress)
	app.Get("/org/egress/secrets", s.listEgressSecrets)
	app.Put("/org/egress/secrets/:name", withJSON(parseJSON, s.putEgressSecret))
	app.Delete("/org/egress/secrets/:name", deleteByParam("name", s.svc.Admin.DeleteEgressSecret))
	app.Get("/org/usage", s.getUsage)
	app.Get("/org/users", s.listUsers)
	app.Post("/org/users", withJSON(parseJSON, s.createUser))
	app.Patch("/org/users/:id", withJSON(parseJSON, s.patchUser))

	app.Post("/tokens", withJSON(parseJSON, s.createToken))
	app.Get("/tokens", s.listTokens)
	app.Delete("/tokens/:id", deleteByParam("id", s.svc.Auth.RevokeOwn))

	a.Group("/api/gpt", s.authenticate)
	a.Get("/api/gpt/v1/sandbox/backends", s.authenticate, s.sandboxBackends)

	// Messages API (docs/api.md); authenticated by the /api/gpt group above.
	a.Post("/api/gpt/v1/messages", s.createMessage)
	a.Post("/api/gpt/v1/messages/validate", s.validateMessage)
	a.Post("/api/gpt/v1/messages/count_tokens", s.countTokens)
	// Message Batches (docs/batches.md).
	a.Post("/api/gpt/v1/messages/batches", s.batchesOn, s.createBatch)
	a.Get("/api/gpt/v1/messages/batches", s.batchesOn, s.listBatches)
	a.Get("/api/gpt/v1/messages/batches/:message_batch_id", s.batchesOn, s.getBatch)
	a.Delete("/api/gpt/v1/messages/batches/:message_batch_id", s.batchesOn, s.deleteBatch)
	a.Post("/api/gpt/v1/messages/batches/:message_batch_id/cancel", s.batchesOn, s.cancelBatch)
	a.Get("/api/gpt/v1/messages/batches/:message_batch_id/results", s.batchesOn, s.batchResults)
	a.Get("/api/gpt/v1/models", s.listModels)
	a.Get("/api/gpt/v1/models/:id", s.getModel)

	// Skills API (docs/messages.md): the org's skills in Anthropic's shapes.
	a.Post("/api/gpt/v1/skills", s.createSkill)
	a.Get("/api/gpt/v1/skills", s.listAPISkills)
	a.Get("/api/gpt/v1/skills/:skill_id", getByParam("skill_id", s.svc.Skills.Get, viewAPISkill))
	a.Delete("/api/gpt/v1/skills/:skill_id", s.deleteAPISkill)
	a.Post("/api/gpt/v1/skills/:skill_id/versions", s.createSkillVersion)
	a.Get("/api/gpt/v1/skills/:skill_id/versions", s.listSkillVersions)
	a.Get("/api/gpt/v1/skills/:skill_id/versions/:version", s.getSkillVersion)
	a.Delete("/api/gpt/v1/skills/:skill_id/versions/:version", s.deleteSkillVersion)
	a.Get("/api/gpt/v1/skills/:skill_id/versions/:version/content", s.skillVersionContent)

	// Files API (docs/api.md); authenticated by the /api/gpt group above.
	// Per-file routes read the id or key from the raw path (web/files.go).
	a.Get(filesPrefix, s.listFiles)
	a.Post(filesPrefix, s.uploadFile)
	a.Delete(filesPrefix, s.deletePrefix)
	a.Put(filesPrefix+"/*", s.putFile)
	a.Head(filesPrefix+"/*", s.fileRoute)
	a.Get(filesPrefix+"/*", s.fileRoute)
	a.Delete(filesPrefix+"/*", s.fileRoute)

	// MCP server (docs/mcp.md): the streamable HTTP transport, its
	// protected resource metadata for clients that discover how to
	// authenticate.
	a.Get(resourceMetadataPath, s.resourceMetadata)
	a.Get(resourceMetadataPath+mcpPath, s.resourceMetadata)
	for _, path := range []string{mcpPath, mcpPath + "/threads/:id"} {
		a.Get(path, s.mcpAuthenticate, s.serveMCP)
		a.Post(path, s.mcpAuthenticate, s.serveMCP)
		a.Delete(path, s.mcpAuthenticate, s.serveMCP)
	}

	// Frontend (docs/frontend.md): the page at / and its assets under /ui/; every
	// other path keeps its API route or the JSON 404 below.
	a.Get("/", s.uiIndex)
	a.Get("/ui/*", s.uiAsset)

	a.Use(func(c *fiber.Ctx) error { return fault.New(fault.NotFound, "no route for "+c.Method()+" "+c.Path()) })
}
