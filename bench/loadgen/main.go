// Command loadgen is the open-loop HTTP/1.1 load generator of bench/overload.py (Go standard
// library only; `go build` works offline in seconds).
//
// Open loop (-rate R): requests are due on a fixed schedule, R per second, whatever the answers
// do, and each one's latency is measured from the time it was due, so a slow server cannot
// slow the offered load down and hide its own queue (no coordinated omission). Requests go out
// on -conns persistent connections; a request due while every connection is busy waits in the
// client, and that wait counts in its latency (`client_wait_*` says how much of it there was:
// with enough connections, none). A request unanswered -timeout after it was due is a timeout
// (its connection is closed and reopened).
//
// Closed loop (-rate 0): -conns connections each send the next request as soon as the last is
// answered (the replica's capacity).
//
// It sends one fixed request (-url, -d, repeated -H) and prints one JSON object: per HTTP status,
// the count and latency percentiles; timeouts and errors; per second, what was answered.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

type headers []string

func (h *headers) String() string     { return strings.Join(*h, ", ") }
func (h *headers) Set(v string) error { *h = append(*h, v); return nil }

type job struct{ due time.Time }

type sample struct {
	due    time.Duration // since start
	status int           // 0: timeout, -1: error
	lat    time.Duration // from due to answered
	wait   time.Duration // from due to written on a connection
	done   time.Duration // since start
}

type recorder struct {
	mu      sync.Mutex
	samples []sample
	errs    map[string]int
}

func (r *recorder) add(s sample) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.mu.Unlock()
}

func (r *recorder) err(kind string) {
	r.mu.Lock()
	r.errs[kind]++
	r.mu.Unlock()
}

// conn is one persistent HTTP/1.1 connection.
type conn struct {
	addr string
	c    net.Conn
	br   *bufio.Reader
}

func (k *conn) close() {
	if k.c != nil {
		k.c.Close()
		k.c = nil
	}
}

// dials counts connections opened (a server that closes connections makes the client reopen).
var dials atomic.Int64

func (k *conn) ensure(deadline time.Time) error {
	if k.c != nil {
		return nil
	}
	dials.Add(1)
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", k.addr)
	if err != nil {
		return err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	k.c = c
	k.br = bufio.NewReaderSize(c, 16*1024)
	return nil
}

// roundTrip writes req and reads one whole response; returns its status and whether the
// connection may be reused.
func (k *conn) roundTrip(req []byte, deadline time.Time) (int, bool, error) {
	if err := k.ensure(deadline); err != nil {
		return 0, false, err
	}
	k.c.SetDeadline(deadline)
	if _, err := k.c.Write(req); err != nil {
		return 0, false, err
	}
	line, err := k.br.ReadString('\n')
	if err != nil {
		return 0, false, err
	}
	parts := strings.SplitN(strings.TrimSpace(line), " ", 3)
	if len(parts) < 2 {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	status, err := strconv.Atoi(parts[1])
	if err != nil {
		return 0, false, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, keep := -1, false, true
	for {
		h, err := k.br.ReadString('\n')
		if err != nil {
			return 0, false, err
		}
		h = strings.TrimRight(h, "\r\n")
		if h == "" {
			break
		}
		name, value, _ := strings.Cut(h, ":")
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-length":
			length, _ = strconv.Atoi(value)
		case "transfer-encoding":
			chunked = strings.Contains(strings.ToLower(value), "chunked")
		case "connection":
			keep = !strings.EqualFold(value, "close")
		}
	}
	switch {
	case chunked:
		for {
			sz, err := k.br.ReadString('\n')
			if err != nil {
				return 0, false, err
			}
			n, err := strconv.ParseInt(strings.TrimSpace(strings.SplitN(sz, ";", 2)[0]), 16, 64)
			if err != nil {
				return 0, false, err
			}
			if _, err := k.br.Discard(int(n) + 2); err != nil {
				return 0, false, err
			}
			if n == 0 {
				break
			}
		}
	case length >= 0:
		if _, err := k.br.Discard(length); err != nil {
			return 0, false, err
		}
	default:
		if _, err := io.Copy(io.Discard, k.br); err != nil {
			return 0, false, err
		}
		keep = false
	}
	return status, keep, nil
}

func pct(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted)) + 0.5)
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	if i < 0 {
		i = 0
	}
	return float64(sorted[i]) / 1e6
}

type stats struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(lats []time.Duration) stats {
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	s := stats{Count: len(lats)}
	if len(lats) > 0 {
		s.P50, s.P90, s.P99 = pct(lats, 50), pct(lats, 90), pct(lats, 99)
		s.Max = float64(lats[len(lats)-1]) / 1e6
	}
	return s
}

func main() {
	var hs headers
	target := flag.String("url", "", "URL to POST to")
	body := flag.String("d", "", "request body")
	method := flag.String("m", "POST", "method")
	rate := flag.Float64("rate", 0, "requests per second, open loop (0: closed loop)")
	duration := flag.Duration("duration", 10*time.Second, "how long to send")
	conns := flag.Int("conns", 64, "connections")
	timeout := flag.Duration("timeout", 5*time.Second, "a request unanswered this long after it was due is a timeout")
	flag.Var(&hs, "H", "header `Name: value` (repeatable)")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Host == "" {
		fmt.Fprintln(os.Stderr, "loadgen: -url is required")
		os.Exit(2)
	}
	path := u.RequestURI()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", *method, path, u.Host)
	for _, h := range hs {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(*body), *body)
	req := []byte(b.String())

	rec := &recorder{errs: map[string]int{}}
	start := time.Now()
	end := start.Add(*duration)
	jobs := make(chan job, 1<<20)
	var wg sync.WaitGroup
	closed := *rate <= 0

	worker := func(k *conn) {
		defer wg.Done()
		defer k.close()
		for {
			var due time.Time
			if closed {
				due = time.Now()
				if !due.Before(end) {
					return
				}
			} else {
				j, ok := <-jobs
				if !ok {
					return
				}
				due = j.due
			}
			deadline := due.Add(*timeout)
			now := time.Now()
			if !now.Before(deadline) {
				// It waited in the client past its deadline: never sent.
				rec.add(sample{due: due.Sub(start), status: 0, lat: now.Sub(due), wait: now.Sub(due), done: now.Sub(start)})
				continue
			}
			wait := now.Sub(due)
			status, keep, err := k.roundTrip(req, deadline)
			answered := time.Now()
			lat, done := answered.Sub(due), answered.Sub(start)
			if err != nil {
				k.close()
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					rec.add(sample{due: due.Sub(start), status: 0, lat: lat, wait: wait, done: done})
				} else {
					rec.add(sample{due: due.Sub(start), status: -1, lat: lat, wait: wait, done: done})
					msg := err.Error()
					if i := strings.LastIndex(msg, ": "); i >= 0 {
						msg = msg[i+2:]
					}
					rec.err(msg)
				}
				continue
			}
			if !keep {
				k.close()
			}
			rec.add(sample{due: due.Sub(start), status: status, lat: lat, wait: wait, done: done})
		}
	}
	// Every connection is open (and has carried one request) before the first request is due:
	// dialing is not measured, and the server sees the same connections in every run.
	// (64 at a time: a listener's accept queue overflowing costs a dial a 1 s retry.)
	pool := make(chan *conn, *conns)
	todo := make(chan int, *conns)
	for i := 0; i < *conns; i++ {
		todo <- i
	}
	close(todo)
	var dialing sync.WaitGroup
	for d := 0; d < 64; d++ {
		dialing.Add(1)
		go func() {
			defer dialing.Done()
			for i := range todo {
				// One request on each connection before the run: the server has accepted it
				// and set it up (a request on a connection still in the accept queue waits).
				k := &conn{addr: u.Host}
				_, keep, err := k.roundTrip(req, time.Now().Add(30*time.Second))
				if err != nil {
					fmt.Fprintf(os.Stderr, "loadgen: connection %d: %v\n", i, err)
					os.Exit(1)
				}
				if !keep {
					k.close()
				}
				pool <- k
			}
		}()
	}
	dialing.Wait()
	opened := dials.Load()
	start = time.Now()
	end = start.Add(*duration)
	for i := 0; i < *conns; i++ {
		wg.Add(1)
		go worker(<-pool)
	}
	sent := 0
	if !closed {
		interval := time.Duration(float64(time.Second) / *rate)
		ticker := time.NewTicker(time.Millisecond)
		for now := range ticker.C {
			for {
				due := start.Add(time.Duration(sent) * interval)
				if due.After(now) || !due.Before(end) {
					break
				}
				jobs <- job{due: due}
				sent++
			}
			if !now.Before(end) {
				break
			}
		}
		ticker.Stop()
		close(jobs)
	}
	wg.Wait()
	wall := time.Since(start)

	byStatus := map[string][]time.Duration{}
	okInWindow := 0
	var waits []time.Duration
	type second struct {
		Second int     `json:"second"`
		Due    int     `json:"due"`
		OK     int     `json:"ok"`
		Shed   int     `json:"shed"`
		Failed int     `json:"failed"`
		OKP99  float64 `json:"ok_p99_ms"`
		okLats []time.Duration
	}
	secs := make([]*second, int(duration.Seconds())+1)
	for i := range secs {
		secs[i] = &second{Second: i}
	}
	for _, s := range rec.samples {
		key := strconv.Itoa(s.status)
		switch s.status {
		case 0:
			key = "timeout"
		case -1:
			key = "error"
		}
		byStatus[key] = append(byStatus[key], s.lat)
		if s.status == 200 && s.done <= *duration {
			okInWindow++
		}
		waits = append(waits, s.wait)
		i := int(s.due / time.Second)
		if i >= len(secs) {
			i = len(secs) - 1
		}
		sec := secs[i]
		sec.Due++
		switch {
		case s.status == 200:
			sec.OK++
			sec.okLats = append(sec.okLats, s.lat)
		case s.status == 503 || s.status == 429:
			sec.Shed++
		default:
			sec.Failed++
		}
	}
	for _, sec := range secs {
		sec.OKP99 = summarize(sec.okLats).P99
	}
	out := map[string]any{
		"mode":       map[bool]string{true: "closed", false: "open"}[closed],
		"rate":       *rate,
		"conns":      *conns,
		"duration_s": duration.Seconds(),
		"wall_s":     wall.Seconds(),
		"requests":   len(rec.samples),
		// 200s answered while requests were being sent (a backlog answered after the end
		// does not count): the throughput of the offered window.
		"ok_in_window": okInWindow,
		"statuses":     map[string]stats{},
		"errors":       rec.errs,
		"client_wait":  summarize(waits),
		"reconnects":   dials.Load() - opened,
		"per_second":   secs,
	}
	for k, v := range byStatus {
		out["statuses"].(map[string]stats)[k] = summarize(v)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
