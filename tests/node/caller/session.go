package main

// The caller's modes for servers the operator runs (issue 23):
//
//	caller list -url URL -key KEY [-era modern|legacy]
//	    lists the tools; prints {"ok":..,"tools":[names]}.
//	caller session -url URL -key KEY -era modern|legacy -tool NAME [-args JSON] [-n 50] [-pause D] [-fresh]
//	    [-parallel P]  (modern: P sessions at once, n/P calls each; each ends with its own summary)
//	    legacy: one session (initialize, then n calls with its Mcp-Session-Id; a 404 opens a new
//	    session, as the transport says); modern: n stateless calls. One line per call {"n":..,"ok":..,"status":..,"text":..} (the
//	    tool's text, or the error), then {"done":true,"failed":k}; exits 1 if any failed.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

const legacyVersion = "2025-11-25"

type mcp struct {
	c       *caller
	era     string
	session string
	next    int
}

// rpc sends one JSON-RPC message; for a request it returns the answer (from a JSON body or the
// last message with an id of an SSE body).
func (m *mcp) rpc(method string, params map[string]any, notification bool) (int, map[string]any, http.Header, error) {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params == nil {
		params = map[string]any{}
	}
	if m.era == "modern" {
		params["_meta"] = map[string]any{
			"io.modelcontextprotocol/protocolVersion":    protocolVersion,
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
			"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "switchboard-node-caller", "version": "0"},
		}
	}
	msg["params"] = params
	if !notification {
		m.next++
		msg["id"] = m.next
	}
	body, _ := json.Marshal(msg)
	req, err := http.NewRequest(http.MethodPost, m.c.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	cred, err := m.c.credential()
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+cred)
	if m.era == "modern" {
		req.Header.Set("MCP-Protocol-Version", protocolVersion)
		req.Header.Set("Mcp-Method", method)
		if name, ok := params["name"].(string); ok {
			req.Header.Set("Mcp-Name", name)
		}
	} else if method != "initialize" {
		req.Header.Set("MCP-Protocol-Version", legacyVersion)
		req.Header.Set("Mcp-Session-Id", m.session)
	}
	resp, err := m.c.client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return resp.StatusCode, nil, resp.Header, err
	}
	if notification {
		return resp.StatusCode, nil, resp.Header, nil
	}
	var answer map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 1<<20), 4<<20)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data:"); ok {
				var one map[string]any
				if json.Unmarshal([]byte(strings.TrimSpace(data)), &one) == nil && one["id"] != nil {
					answer = one
				}
			}
		}
	} else if err := json.Unmarshal(raw, &answer); err != nil {
		return resp.StatusCode, nil, resp.Header, fmt.Errorf("HTTP %d, not JSON: %.200s", resp.StatusCode, raw)
	}
	if answer == nil {
		return resp.StatusCode, nil, resp.Header, fmt.Errorf("HTTP %d, no answer: %.200s", resp.StatusCode, raw)
	}
	if e, ok := answer["error"].(map[string]any); ok {
		return resp.StatusCode, answer, resp.Header, fmt.Errorf("HTTP %d, JSON-RPC error %v: %v", resp.StatusCode, e["code"], e["message"])
	}
	return resp.StatusCode, answer, resp.Header, nil
}

func (m *mcp) open() error {
	if m.era != "legacy" {
		return nil
	}
	_, _, h, err := m.rpc("initialize", map[string]any{
		"protocolVersion": legacyVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "switchboard-node-caller", "version": "0"},
	}, false)
	if err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	m.session = h.Get("Mcp-Session-Id")
	if m.session == "" {
		return fmt.Errorf("initialize: no Mcp-Session-Id")
	}
	_, _, _, err = m.rpc("notifications/initialized", nil, true)
	return err
}

// text is a tool result's text content, joined.
func text(answer map[string]any) (string, bool) {
	result, _ := answer["result"].(map[string]any)
	if result == nil {
		return "", false
	}
	var b strings.Builder
	content, _ := result["content"].([]any)
	for _, c := range content {
		if item, ok := c.(map[string]any); ok {
			if t, ok := item["text"].(string); ok {
				b.WriteString(t)
			}
		}
	}
	isError, _ := result["isError"].(bool)
	return b.String(), !isError
}

func printJSON(v any) {
	line, _ := json.Marshal(v)
	fmt.Println(string(line))
}

func listTools(c *caller, era string) bool {
	m := &mcp{c: c, era: era}
	if err := m.open(); err != nil {
		printJSON(map[string]any{"ok": false, "error": err.Error()})
		return false
	}
	_, answer, _, err := m.rpc("tools/list", nil, false)
	if err != nil {
		printJSON(map[string]any{"ok": false, "error": err.Error()})
		return false
	}
	var names []string
	result, _ := answer["result"].(map[string]any)
	tools, _ := result["tools"].([]any)
	for _, t := range tools {
		if tool, ok := t.(map[string]any); ok {
			if name, ok := tool["name"].(string); ok {
				names = append(names, name)
			}
		}
	}
	printJSON(map[string]any{"ok": true, "tools": names})
	return true
}

// sessions runs `parallel` sessions at once (2026-07-28 only: a legacy session is one
// sequence), each making n/parallel calls; lines of all of them, then one summary.
func sessions(c *caller, era, tool, args string, n int, pause time.Duration, parallel int) bool {
	if parallel <= 1 || era != "modern" {
		return session(c, era, tool, args, n, pause)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := true
	for p := 0; p < parallel; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if !session(c, era, tool, args, n/parallel, pause) {
				mu.Lock()
				ok = false
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return ok
}

func session(c *caller, era, tool, args string, n int, pause time.Duration) bool {
	m := &mcp{c: c, era: era}
	if err := m.open(); err != nil {
		printJSON(map[string]any{"done": true, "failed": n, "error": err.Error()})
		return false
	}
	arguments := map[string]any{}
	if args != "" {
		if err := json.Unmarshal([]byte(args), &arguments); err != nil {
			printJSON(map[string]any{"done": true, "failed": n, "error": "-args: " + err.Error()})
			return false
		}
	}
	failed := 0
	for i := 1; i <= n; i++ {
		status, answer, _, err := m.rpc("tools/call", map[string]any{"name": tool, "arguments": arguments}, false)
		out := map[string]any{"n": i, "status": status}
		if err != nil {
			out["ok"], out["text"] = false, err.Error()
			failed++
			// A legacy session the server ended (404): a new one, as the transport says.
			if era == "legacy" && status == http.StatusNotFound {
				if err := m.open(); err != nil {
					out["reopened"] = err.Error()
				} else {
					out["reopened"] = true
				}
			}
		} else {
			t, ok := text(answer)
			out["ok"], out["text"] = ok, t
			if !ok {
				failed++
			}
		}
		printJSON(out)
		time.Sleep(pause)
	}
	printJSON(map[string]any{"done": true, "failed": failed})
	return failed == 0
}
