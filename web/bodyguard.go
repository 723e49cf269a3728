package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"
)

// guardRequests wraps the handler that every request of a connection
// passes, below Fiber's router and its middleware: Fiber answers a method
// it does not route (PROPFIND, a lowercase get) before any middleware
// runs, and fasthttp parses whatever a request leaves unread of its body as
// the next request on the connection. Behind a proxy that reuses its
// connections to the server, such a body would be another client's
// request. So here, whatever answered the request:
//
//   - a request whose framing two HTTP parsers could read differently
//     (several Content-Length or Transfer-Encoding headers, both together,
//     a transfer coding other than chunked, a folded header line) is
//     refused with 400 and its connection closed, its body unread;
//   - a method the server does not route is answered 501 here, in the
//     error envelope;
//   - what the request left unread of its body is discarded within bounds,
//     or the connection is closed after the answer (requestBody.finish).
func guardRequests(next fasthttp.RequestHandler, methods []string) fasthttp.RequestHandler {
	known := make(map[string]bool, len(methods))
	for _, m := range methods {
		known[m] = true
	}
	return func(ctx *fasthttp.RequestCtx) {
		if msg := ambiguousFraming(ctx.Request.Header.RawHeaders()); msg != "" {
			answerBeforeRouting(ctx, fiber.StatusBadRequest, msg)
			ctx.SetConnectionClose()
			return
		}
		if known[string(ctx.Method())] {
			next(ctx)
		} else {
			answerBeforeRouting(ctx, fiber.StatusNotImplemented, fmt.Sprintf("the method %q is not supported (methods are case-sensitive)", ctx.Method()))
		}
		if ctx.RequestBodyStream() == nil || ctx.Response.ConnectionClose() {
			return
		}
		if b := requestBodyOf(ctx); !b.eof {
			b.finish(ctx)
		}
	}
}

// ambiguousFraming returns why a request's raw header lines frame its body
// ambiguously, or "" when they do not. fasthttp takes the last of several
// Content-Length headers and any transfer coding for chunked; a proxy in
// front of the server may take the first, or the other coding, and so see
// a different end of the body (RFC 9112 §6.3).
func ambiguousFraming(raw []byte) string {
	var lengths, codings int
	coding := ""
	for len(raw) > 0 {
		line := raw
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			line, raw = raw[:i], raw[i+1:]
		} else {
			raw = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			return "folded header lines are not accepted"
		}
		name, value, _ := bytes.Cut(line, []byte(":"))
		switch {
		case bytes.EqualFold(bytes.TrimRight(name, " \t"), []byte(fiber.HeaderContentLength)):
			lengths++
		case bytes.EqualFold(bytes.TrimRight(name, " \t"), []byte(fiber.HeaderTransferEncoding)):
			codings++
			coding = string(bytes.TrimSpace(value))
		}
	}
	switch {
	case lengths > 1:
		return "a request may carry one Content-Length header"
	case codings > 1:
		return "a request may carry one Transfer-Encoding header"
	case codings == 1 && lengths == 1:
		return "a request may not carry both Content-Length and Transfer-Encoding"
	case codings == 1 && !strings.EqualFold(coding, "chunked"):
		return fmt.Sprintf("the transfer coding %q is not supported: only chunked", coding)
	}
	return ""
}

// answerBeforeRouting answers a request that never reached the router, in
// the error envelope.
func answerBeforeRouting(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	if ctx.IsHead() {
		return
	}
	b, _ := json.Marshal(envelope{Type: "error", Error: envelopeBody{Type: typeOf(status), Message: msg}})
	ctx.SetContentType(fiber.MIMEApplicationJSON)
	ctx.SetBody(b)
}
