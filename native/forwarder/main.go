// Command oz0-forwarder is activities/sandbox/forwarder.ts in Go, with the same contract: it runs inside a sandbox
// whose network is its own (I3), listens on 127.0.0.1 ports there and leads each connection to a Unix socket of the
// node (bound into the sandbox), then runs the sandbox's program and exits as it exits. Usage:
//
//	oz0-forwarder PORT=SOCKET... -- COMMAND ARGS...
//
// It holds no authority: the node decides, on its side of each socket, what a connection may reach. It exists because
// a Go program starts in about a millisecond where Node.js takes 40 ms and more (SPEC I7: a sandbox's start costs at
// most 50 ms more than a plain process). The standard library only, built static (no cgo) by the node
// (activities/sandbox/native-forwarder.ts).
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// How long a side whose peer broke off still stands, unread, before it is reset: its answer is read meanwhile.
const resetAfter = 500 * time.Millisecond

// A bad command line or a port it cannot listen on; 127 is a program that cannot start (as a shell says).
const (
	exitUsage   = 125
	exitNoStart = 127
)

type route struct {
	port   int
	socket string
}

func main() {
	routes, command, err := parseArgs(os.Args[1:])
	if err != nil {
		fail(exitUsage, err.Error())
	}
	// The node stops a sandbox by signalling its process group: this process waits for the program's own end. Caught,
	// not ignored: an ignored signal stays ignored in the program it starts, a caught one is reset by exec.
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for range signals {
		}
	}()
	for _, r := range routes {
		listener, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)))
		if err != nil {
			fail(exitUsage, fmt.Sprintf("cannot listen on 127.0.0.1:%d: %s", r.port, reason(err)))
		}
		go serve(listener, r.socket)
	}
	os.Exit(run(command))
}

func parseArgs(argv []string) ([]route, []string, error) {
	usage := errors.New("usage: oz0-forwarder PORT=SOCKET... -- COMMAND ARGS...")
	split := -1
	for i, a := range argv {
		if a == "--" {
			split = i
			break
		}
	}
	if split < 1 || split == len(argv)-1 {
		return nil, nil, usage
	}
	routes := make([]route, 0, split)
	for _, spec := range argv[:split] {
		port, socket, ok := strings.Cut(spec, "=")
		n, err := strconv.Atoi(port)
		if !ok || err != nil || n < 1 || n > 65535 || socket == "" {
			return nil, nil, fmt.Errorf("%q is not PORT=SOCKET; %s", spec, usage)
		}
		routes = append(routes, route{n, socket})
	}
	return routes, argv[split+1:], nil
}

// The program, on this process's stdio; its end is this process's end (a signal as 128 + its number).
func run(command []string) int {
	child := exec.Command(command[0], command[1:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := child.Start(); err != nil {
		fail(exitNoStart, fmt.Sprintf("cannot start %s: %s", command[0], reason(err)))
	}
	err := child.Wait()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fail(exitNoStart, fmt.Sprintf("lost %s: %s", command[0], reason(err)))
	}
	status := child.ProcessState.Sys().(syscall.WaitStatus)
	if status.Signaled() {
		return 128 + int(status.Signal())
	}
	return status.ExitStatus()
}

func serve(listener net.Listener, socket string) {
	for {
		inside, err := listener.Accept()
		if err != nil {
			var temporary interface{ Temporary() bool }
			if errors.As(err, &temporary) && temporary.Temporary() {
				// Out of descriptors (its limits): the connection waits in the backlog a moment.
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		go func() {
			outside, err := net.Dial("unix", socket)
			if err != nil {
				// As a broken peer: the connection is reset once it could have read an answer.
				time.AfterFunc(resetAfter, func() { reset(inside) })
				return
			}
			splice(inside.(*net.TCPConn), outside.(*net.UnixConn))
		}()
	}
}

// Both of a TCP connection's and a Unix socket's halves.
type duplex interface {
	net.Conn
	CloseWrite() error
}

// One connection's two sides. A side's clean end (its peer shut its writing) ends the other's writing once what was
// on its way is written; the other way still runs, as TCP's half-close does. A broken one — its peer closed with data
// unread, as a server that stopped reading does after an answer such as a 413 for a body too large — is passed on as
// the server itself would: the other side is no longer read (a client still sending blocks, and reads the answer),
// and is reset a moment later.
type link struct {
	sides  [2]duplex
	mu     sync.Mutex
	broken [2]bool
	ended  int
	closed bool
}

func splice(a, b duplex) {
	l := &link{sides: [2]duplex{a, b}}
	go l.pump(0, 1)
	go l.pump(1, 0)
}

func (l *link) pump(from, to int) {
	src, dst := l.sides[from], l.sides[to]
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if l.isBroken(to) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				l.breaks(to)
				return
			}
		}
		if errors.Is(err, io.EOF) {
			_ = dst.CloseWrite()
			l.end()
			return
		}
		if err != nil {
			l.breaks(from)
			return
		}
	}
}

func (l *link) isBroken(side int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.broken[side]
}

// A side broke: the other is reset after resetAfter, and both are closed then.
func (l *link) breaks(side int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken[side] || l.closed {
		return
	}
	l.broken[side] = true
	time.AfterFunc(resetAfter, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.closed {
			return
		}
		l.closed = true
		_ = l.sides[side].Close()
		reset(l.sides[1-side])
	})
}

// One way ended cleanly; once both have, the connection is closed.
func (l *link) end() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended++; l.ended == 2 && !l.closed && !l.broken[0] && !l.broken[1] {
		l.closed = true
		_ = l.sides[0].Close()
		_ = l.sides[1].Close()
	}
}

// Closes a connection with a reset where it is TCP (a Unix socket has none: closed).
func reset(c net.Conn) {
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0)
	}
	_ = c.Close()
}

// An error's own words, without Go's operation prefix ("listen tcp4 127.0.0.1:80: bind: address already in use").
func reason(err error) string {
	var sys *os.SyscallError
	if errors.As(err, &sys) {
		return sys.Err.Error()
	}
	var path *os.PathError
	if errors.As(err, &path) {
		return path.Err.Error()
	}
	return err.Error()
}

func fail(code int, message string) {
	fmt.Fprintf(os.Stderr, "oz0 forwarder: %s\n", message)
	os.Exit(code)
}
