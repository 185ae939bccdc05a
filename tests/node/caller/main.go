// caller is the client the one-node cluster's test pods run: a static binary (standard library
// only) in an image FROM scratch. It calls the gateway's MCP endpoint the way a workload does,
// with a key or with the pod's projected ServiceAccount token, and checks every answer.
//
//	caller once -url URL (-key KEY | -token-file FILE)
//	    one tools/call of `echo`; prints one JSON line {"status":..,"ok":..,"body":..};
//	    exits 0 when the call was answered with the echoed text, 1 otherwise.
//	caller list|session ...  (session.go: tools of servers the operator runs, in both eras)
//	caller loop -url URL -key KEY [-interval 20ms]
//	    calls until SIGTERM; one line per call: "<unix ms> ok <ms> conn=<conn>" or
//	    "<unix ms> FAIL <reason> conn=<conn>". Connections are kept alive and reused, as an SDK's
//	    client does; <conn> names the one the call went on: "<local address>/reused" (kept alive
//	    from an earlier call), "<local address>/new" (dialled for this call) or
//	    "<local address>/retried" (the transport tried another connection first, which failed
//	    before the request was written), or "none" when the call never had a connection. The
//	    local address is this pod's end (IP:port): the Service address the pod dials is rewritten
//	    to a gateway pod's by the node (kube-proxy's DNAT), so the node's conntrack table maps it
//	    to the gateway pod that holds the connection. A line ends in " closing" when the answer
//	    said `Connection: close` (the gateway ends the connection after it: a stopping replica
//	    does), so a connection left afterwards is told from one that broke. When a connection
//	    ends, one line says which end ended it (trackedConn):
//	    "<unix ms> ended conn=<local address> by=caller" (this process closed it: its transport
//	    let go of it) or "<unix ms> ended conn=<local address> by=peer <what the read saw>"
//	    (EOF: the other end closed it; an error such as a reset: the other end or the network).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

const protocolVersion = "2026-07-28"

type caller struct {
	url, key, tokenFile string
	client              *http.Client
}

// credential re-reads the token file on every call: the kubelet rotates projected tokens.
func (c *caller) credential() (string, error) {
	if c.tokenFile == "" {
		return c.key, nil
	}
	b, err := os.ReadFile(c.tokenFile)
	return strings.TrimSpace(string(b)), err
}

// connUse records which connection a call went on (see the loop's <conn> above). The trace's
// hooks may run on the transport's goroutines, even after the call returned: hence the lock.
type connUse struct {
	mu      sync.Mutex
	local   string
	reused  bool
	tries   int
	closing bool
}

// answered notes whether the answer said `Connection: close`.
func (u *connUse) answered(close bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.closing = close
}

// suffix is " closing" after an answer that said `Connection: close`.
func (u *connUse) suffix() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closing {
		return " closing"
	}
	return ""
}

func (u *connUse) got(info httptrace.GotConnInfo) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.tries++
	u.local = info.Conn.LocalAddr().String()
	u.reused = info.Reused
}

func (u *connUse) String() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	switch {
	case u.tries == 0:
		return "none"
	case u.tries > 1:
		return u.local + "/retried"
	case u.reused:
		return u.local + "/reused"
	default:
		return u.local + "/new"
	}
}

// trackedConn is a connection of the loop's transport that says, once, which end ended it. Go's
// transport closes a kept-alive connection on its own in a few cases besides an answer's
// `Connection: close` and a failed call: notably when, after reading an answer, it cannot tell
// within 50 ms that its writer finished writing the request (net/http's
// maxWriteWaitBeforeConnReuse), which a process starved of CPU meets. The line tells such a
// letting go (by=caller) from a connection the other end or the network ended (by=peer).
type trackedConn struct {
	net.Conn
	once sync.Once
}

func (c *trackedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if err != nil {
		c.ended("peer " + err.Error())
	}
	return n, err
}

func (c *trackedConn) Close() error {
	c.ended("caller")
	return c.Conn.Close()
}

func (c *trackedConn) ended(by string) {
	c.once.Do(func() {
		fmt.Printf("%d ended conn=%s by=%s\n", time.Now().UnixMilli(), c.LocalAddr(), strings.ReplaceAll(by, "\n", " "))
	})
}

// trackingTransport is Go's default transport with every connection it dials a trackedConn.
func trackingTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	dial := t.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &trackedConn{Conn: conn}, nil
	}
	return t
}

// call makes one tools/call and returns the HTTP status, the body and whether the answer is the
// echoed text (a JSON-RPC result without isError); `conn`, when given, learns which connection
// the call went on.
func (c *caller) call(n int, conn *connUse) (int, string, error) {
	text := fmt.Sprintf("call-%d", n)
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0", "id": n, "method": "tools/call",
		"params": map[string]any{
			"name": "echo", "arguments": map[string]any{"text": text},
			"_meta": map[string]any{
				"io.modelcontextprotocol/protocolVersion":    protocolVersion,
				"io.modelcontextprotocol/clientCapabilities": map[string]any{},
				"io.modelcontextprotocol/clientInfo":         map[string]any{"name": "switchboard-node-caller", "version": "0"},
			},
		},
	})
	cred, err := c.credential()
	if err != nil {
		return 0, "", fmt.Errorf("reading the token: %w", err)
	}
	req, err := http.NewRequest(http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+cred)
	req.Header.Set("MCP-Protocol-Version", protocolVersion)
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "echo")
	if conn != nil {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{GotConn: conn.got}))
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if conn != nil {
		conn.answered(resp.Close)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp.StatusCode, "", fmt.Errorf("reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, string(raw), fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var reply struct {
		Result *struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return resp.StatusCode, string(raw), fmt.Errorf("not JSON: %w", err)
	}
	switch {
	case reply.Error != nil:
		return resp.StatusCode, string(raw), fmt.Errorf("JSON-RPC error: %s", reply.Error.Message)
	case reply.Result == nil || reply.Result.IsError || len(reply.Result.Content) == 0:
		return resp.StatusCode, string(raw), fmt.Errorf("no tool result")
	case reply.Result.Content[0].Text != text:
		return resp.StatusCode, string(raw), fmt.Errorf("echoed %q, sent %q", reply.Result.Content[0].Text, text)
	}
	return resp.StatusCode, string(raw), nil
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: caller once|loop -url URL (-key KEY | -token-file FILE) [-interval D]")
		os.Exit(2)
	}
	mode := os.Args[1]
	flags := flag.NewFlagSet(mode, flag.ExitOnError)
	url := flags.String("url", "", "the gateway's MCP endpoint, e.g. http://switchboard-gateway.switchboard.svc:8080/mcp/demo")
	key := flags.String("key", "", "a Switchboard key")
	tokenFile := flags.String("token-file", "", "a file holding a ServiceAccount token (read on every call)")
	interval := flags.Duration("interval", 20*time.Millisecond, "loop: pause between calls")
	timeout := flags.Duration("timeout", 10*time.Second, "time limit of one call")
	era := flags.String("era", "modern", "list, session: modern (2026-07-28) or legacy (a session)")
	tool := flags.String("tool", "", "session: the tool to call")
	args := flags.String("args", "", "session: the tool's arguments (JSON)")
	count := flags.Int("n", 50, "session: how many calls")
	pause := flags.Duration("pause", 0, "session: pause between calls")
	parallel := flags.Int("parallel", 1, "session: 2026-07-28 calls from this many goroutines at once")
	fresh := flags.Bool("fresh", false, "a new connection for every request (so a Service spreads them over its pods)")
	_ = flags.Parse(os.Args[2:])
	if *url == "" || (*key == "") == (*tokenFile == "") {
		fmt.Fprintln(os.Stderr, "caller: give -url and exactly one of -key, -token-file")
		os.Exit(2)
	}
	c := &caller{url: *url, key: *key, tokenFile: *tokenFile, client: &http.Client{Timeout: *timeout}}
	if *fresh {
		c.client.Transport = &http.Transport{DisableKeepAlives: true}
	} else if mode == "loop" {
		c.client.Transport = trackingTransport()
	}
	switch mode {
	case "once":
		status, body, err := c.call(1, nil)
		out := map[string]any{"status": status, "ok": err == nil, "body": body}
		if err != nil {
			out["error"] = err.Error()
		}
		line, _ := json.Marshal(out)
		fmt.Println(string(line))
		if err != nil {
			os.Exit(1)
		}
	case "loop":
		stop := make(chan os.Signal, 1)
		signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
		for n := 1; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			start := time.Now()
			var conn connUse
			_, _, err := c.call(n, &conn)
			if err != nil {
				fmt.Printf("%d FAIL %s conn=%s%s\n", start.UnixMilli(), strings.ReplaceAll(err.Error(), "\n", " "), &conn, conn.suffix())
			} else {
				fmt.Printf("%d ok %.1f conn=%s%s\n", start.UnixMilli(), float64(time.Since(start).Microseconds())/1000, &conn, conn.suffix())
			}
			time.Sleep(*interval)
		}
	case "list":
		if !listTools(c, *era) {
			os.Exit(1)
		}
	case "session":
		if !sessions(c, *era, *tool, *args, *count, *pause, *parallel) {
			os.Exit(1)
		}
	default:
		fmt.Fprintf(os.Stderr, "caller: unknown mode %q\n", mode)
		os.Exit(2)
	}
}
