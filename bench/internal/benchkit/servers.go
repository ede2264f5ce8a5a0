package benchkit

import (
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/jobkit/job/internal/testserver"
)

// programTB lets a program start servers through internal/testserver: a
// failure ends the program.
type programTB struct{}

func (programTB) Helper()                        {}
func (programTB) Fatalf(format string, a ...any) { log.Fatalf(format, a...) }
func (programTB) Logf(format string, a ...any)   { log.Printf(format, a...) }

// StartRedis returns the address of a redis-server: addr when it is set,
// otherwise a server started on a free loopback port (stopped by
// StopServers).
func StartRedis(addr string) string {
	if addr != "" {
		return addr
	}
	return testserver.StartRedis(programTB{}).Addr
}

// StartEtcd returns etcd endpoints: those in the comma-separated eps when
// set, otherwise a server started on free loopback ports.
func StartEtcd(eps string) []string {
	if eps != "" {
		return strings.Split(eps, ",")
	}
	return []string{testserver.StartEtcd(programTB{}).Addr}
}

// StartEtcdArgs starts an etcd of its own on free loopback ports with
// extra flags after internal/testserver's (a flag given again takes the
// later value) and returns its endpoint. StopServers stops it.
func StartEtcdArgs(args ...string) string {
	return testserver.StartEtcd(programTB{}, args...).Addr
}

// StopServers stops every server StartRedis, StartEtcd and StartEtcdArgs started.
func StopServers() { testserver.StopAll() }

// Exit stops the servers and exits with code; use it instead of os.Exit
// once servers run.
func Exit(code int) {
	StopServers()
	os.Exit(code)
}

// Fatalf prints, stops the servers and exits 1.
func Fatalf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", a...)
	Exit(1)
}
