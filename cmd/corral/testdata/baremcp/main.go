// Command baremcp is the baseline of BenchmarkMCPExecTrue: a go-sdk MCP
// server on stdio whose one tool forks "sh -c CODE" per call and keeps no
// state.
package main

import (
	"context"
	"os/exec"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type in struct {
	Command string `json:"command"`
}

type out struct {
	Output   string `json:"output"`
	ExitCode int    `json:"exit_code"`
}

func main() {
	s := mcp.NewServer(&mcp.Implementation{Name: "baremcp", Version: "0"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "exec"}, func(ctx context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, out, error) {
		b, err := exec.CommandContext(ctx, "sh", "-c", a.Command).CombinedOutput()
		o := out{Output: string(b)}
		if ee, ok := err.(*exec.ExitError); ok {
			o.ExitCode = ee.ExitCode()
		} else if err != nil {
			return nil, o, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: o.Output}}}, o, nil
	})
	s.Run(context.Background(), &mcp.StdioTransport{})
}
