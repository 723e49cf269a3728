package messages

// The Anthropic wire format's types and codec live in app/messages/wire;
// the tool loop and its callers use them under these names.

import (
	"encoding/json"

	"threadbox/app/messages/wire"
)

// Types of the wire format (aliases: the same types).
type (
	Request        = wire.Request
	ContainerParam = wire.ContainerParam
	SkillParam     = wire.SkillParam
	Message        = wire.Message
	Tool           = wire.Tool
	ContentBlock   = wire.ContentBlock
	OutputFile     = wire.OutputFile
	ErrorDetail    = wire.ErrorDetail
	ToolResult     = wire.ToolResult
	Usage          = wire.Usage
	ServerToolUse  = wire.ServerToolUse
	Container      = wire.Container
	Response       = wire.Response
	Event          = wire.Event
	BlockDelta     = wire.BlockDelta
	MessageDelta   = wire.MessageDelta
	ErrorBody      = wire.ErrorBody
	ToolOutput     = wire.ToolOutput
	Caller         = wire.Caller
	PendingCall    = wire.PendingCall
)

// Constants of the wire format.
const (
	RoleUser                  = wire.RoleUser
	RoleAssistant             = wire.RoleAssistant
	StopEndTurn               = wire.StopEndTurn
	StopToolUse               = wire.StopToolUse
	StopMaxTokens             = wire.StopMaxTokens
	StopSequence              = wire.StopSequence
	StopPauseTurn             = wire.StopPauseTurn
	StopRefusal               = wire.StopRefusal
	BlockText                 = wire.BlockText
	BlockThinking             = wire.BlockThinking
	BlockRedactedThinking     = wire.BlockRedactedThinking
	BlockToolUse              = wire.BlockToolUse
	BlockToolResult           = wire.BlockToolResult
	BlockServerToolUse        = wire.BlockServerToolUse
	BlockBashResult           = wire.BlockBashResult
	BlockTextEditorResult     = wire.BlockTextEditorResult
	BlockContainerUpload      = wire.BlockContainerUpload
	BlockImage                = wire.BlockImage
	BlockDocument             = wire.BlockDocument
	ResultBash                = wire.ResultBash
	ResultBashError           = wire.ResultBashError
	ResultBashOutput          = wire.ResultBashOutput
	ResultEditorView          = wire.ResultEditorView
	ResultEditorCreate        = wire.ResultEditorCreate
	ResultEditorStrReplace    = wire.ResultEditorStrReplace
	ResultEditorError         = wire.ResultEditorError
	SubToolBash               = wire.SubToolBash
	SubToolTextEditor         = wire.SubToolTextEditor
	ToolTypeCodeExecutionV1   = wire.ToolTypeCodeExecutionV1
	ToolTypeCodeExecution2508 = wire.ToolTypeCodeExecution2508
	ToolTypeCodeExecution2601 = wire.ToolTypeCodeExecution2601
	ToolTypeCodeExecution2605 = wire.ToolTypeCodeExecution2605
	ToolTypeSandboxV1         = wire.ToolTypeSandboxV1
	ToolTypeCustom            = wire.ToolTypeCustom
	CodeUnavailable           = wire.CodeUnavailable
	CodeExecutionTimeExceeded = wire.CodeExecutionTimeExceeded
	CodeInvalidToolInput      = wire.CodeInvalidToolInput
	CodeTooManyRequests       = wire.CodeTooManyRequests
	CodeOutputFileTooLarge    = wire.CodeOutputFileTooLarge
	CodeFileNotFound          = wire.CodeFileNotFound
	EventMessageStart         = wire.EventMessageStart
	EventContentBlockStart    = wire.EventContentBlockStart
	EventContentBlockDelta    = wire.EventContentBlockDelta
	EventContentBlockStop     = wire.EventContentBlockStop
	EventMessageDelta         = wire.EventMessageDelta
	EventMessageStop          = wire.EventMessageStop
	EventPing                 = wire.EventPing
	EventError                = wire.EventError
	DeltaText                 = wire.DeltaText
	DeltaInputJSON            = wire.DeltaInputJSON
	DeltaThinking             = wire.DeltaThinking
	DeltaSignature            = wire.DeltaSignature
	DeltaCitations            = wire.DeltaCitations
	BlockSandboxResult        = wire.BlockSandboxResult
	ResultSandboxError        = wire.ResultSandboxError
	ResultSandboxBody         = wire.ResultSandboxBody
	BlockCodeExecutionResult  = wire.BlockCodeExecutionResult
	ResultCodeExecution       = wire.ResultCodeExecution
	ResultCodeExecutionError  = wire.ResultCodeExecutionError
	ResultCodeExecutionOutput = wire.ResultCodeExecutionOutput
	EventToolOutput           = wire.EventToolOutput
	CallerDirect              = wire.CallerDirect
)

func MarshalMessages(msgs []Message) ([]byte, error) { return wire.MarshalMessages(msgs) }

func SandboxResult(body json.RawMessage) *ToolResult { return wire.SandboxResult(body) }
