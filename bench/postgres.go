package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobkit/job/internal/testserver"
)

// postgres is a PostgreSQL server this program started.
type postgres struct {
	URL     string
	Version string
	dir     string
	cmd     *exec.Cmd
	done    chan struct{}
	log     *os.File
}

// pgBinDir finds Debian's PostgreSQL binaries (the newest major version).
func pgBinDir() (string, error) {
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if len(ms) == 0 {
		if p, err := exec.LookPath("postgres"); err == nil {
			return filepath.Dir(p), nil
		}
		return "", fmt.Errorf("no PostgreSQL server found: on Debian run `apt-get install postgresql` (scripts/bench.sh does it as root), or pass -pg-url")
	}
	sort.Slice(ms, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(ms[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(ms[j]))))
		return vi < vj
	})
	return filepath.Dir(ms[len(ms)-1]), nil
}

// startPostgres runs initdb and postgres in a temporary directory on a free
// loopback port. PostgreSQL refuses to run as root, so as root both run
// with the uid and gid of the "postgres" user (Debian's package creates
// it); the server is still this process's child and is stopped by its PID.
// Durability is off (fsync, synchronous_commit, full_page_writes), like the
// redis-server of the run, which keeps no AOF or RDB.
func startPostgres(ctx context.Context) (*postgres, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "jobkit-bench-pg-")
	if err != nil {
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: no postgres user to run it as (%v); install Debian's postgresql package", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	run := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, name), args...)
		c.Dir = dir
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
		return c
	}
	data := filepath.Join(dir, "data")
	if out, err := run("initdb", "-D", data, "-U", "bench", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %v\n%s", err, out)
	}
	port, err := testserver.FreePort()
	if err != nil {
		return nil, err
	}
	p := &postgres{dir: dir, done: make(chan struct{})}
	p.log, _ = os.Create(filepath.Join(dir, "postgres.log"))
	p.cmd = run("postgres", "-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "shared_buffers=256MB", "-c", "max_connections=200")
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p.URL = "postgres://bench@" + addr + "/postgres?sslmode=disable"
	deadline := time.Now().Add(30 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, p.URL)
		if err == nil {
			_ = conn.QueryRow(ctx, "SHOW server_version").Scan(&p.Version)
			conn.Close(ctx)
			break
		}
		select {
		case <-p.done:
			b, _ := os.ReadFile(p.log.Name())
			os.RemoveAll(dir)
			return nil, fmt.Errorf("postgres exited: %s", b)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("postgres did not accept connections on %s within 30 s: %v", addr, err)
		}
	}
	return p, nil
}

// stop ends the server (SIGINT: fast shutdown) by its PID, kills it after
// ten seconds, and removes its directory.
func (p *postgres) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
	p.log.Close()
	os.RemoveAll(p.dir)
}

func firstLine(s string) string { return strings.TrimSpace(strings.SplitN(s, "\n", 2)[0]) }
