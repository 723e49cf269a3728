// Package messages is the Messages API use case: the wire-independent tool
// loop that asks a Model for the next step, runs the code-execution
// sub-tools in the container's sandbox through a ToolExecutor, feeds the
// results back and reports everything as a stream of Events. It also holds
// the JSON data model of the API (requests, content blocks, responses,
// stream events), faithful to Anthropic's so the official SDKs parse it.
//
// The web layer decodes a Request, resolves the container and calls
// Service.Run with a Sink that writes each Event as one SSE event (event
// name = Event.Type), or Service.Create, which folds the same events into a
// Response with a Collector. When Run fails after events were sent, the
// stream ends with ErrorEvent(err); ErrorStatus maps an error to the HTTP
// status and error body otherwise (ErrUpstreamUnavailable is 503).
//
// Decisions where the contract is silent:
//
//   - When the model makes several server calls in one step, the blocks
//     after the first call are held back until the calls before them have
//     run, so each server_tool_use block is directly followed by its result.
//   - When the model calls client tools and server sub-tools in the same
//     step, the server calls are returned without results (stop_reason
//     tool_use); they run at the start of the next request, whose content
//     opens with their result blocks.
//   - Sub-tool results reach the model as tool_result blocks holding the
//     result's JSON, with the error detail even for Anthropic tool types.
//   - A history's server_tool_use/result blocks become tool_use/tool_result
//     pairs for the model; container_upload blocks become a text note naming
//     the file's sandbox path.
//   - A tool_choice naming code_execution becomes {"type":"any"}.
//   - Programmatic tool calling (programmatic.go): a code_execution cell
//     that awaits client tools ends the turn with their tool_use blocks
//     (caller: the cell) and stop_reason tool_use; the client's results in
//     the next request resume the cell before the model is asked again,
//     and the model's history never holds those calls.
//   - pause_turn is given after Config.MaxToolIterations rounds of sub-tool
//     calls or Config.TurnTimeout, always right after a result block, so
//     that sending the response back continues the turn.
//   - usage sums the tokens of every model step of the request.
//   - The sandbox_v1 tool type expands into its own tools (sandbox.go),
//     whose calls run and answer like the code-execution sub-tools.
//   - The web_fetch tool types run here too (webfetch.go, Tools.WebFetch):
//     the model gets a plain web_fetch tool; a call whose URL the
//     conversation never named, or past max_uses, is answered with the
//     tool's error code without running.
package messages
