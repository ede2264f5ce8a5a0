package testserver

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// PostgresURLEnv names the environment variable that points the tests at
// a running PostgreSQL (a postgres:// URL) instead of starting one.
const PostgresURLEnv = "JOBKIT_PG_URL"

var (
	pgOnce sync.Once
	pgURL  string
	pgErr  error
)

// Postgres returns the URL of a PostgreSQL for this test binary: the one
// $JOBKIT_PG_URL names when it is set, otherwise one started on first use
// (StartPostgres) and stopped by StopAll. When none can be started the
// test fails and says how to install it.
func Postgres(t TB) string {
	t.Helper()
	if u, ok := envOr(PostgresURLEnv); ok {
		return u
	}
	pgOnce.Do(func() {
		var p *Process
		p, pgErr = startPostgres()
		if pgErr == nil {
			pgURL = PostgresURL(p)
		}
	})
	if pgErr != nil {
		t.Fatalf("%v", pgErr)
	}
	return pgURL
}

// PostgresURL returns the URL of p, a server StartPostgres started.
func PostgresURL(p *Process) string {
	return "postgres://jobkit@" + p.Addr + "/postgres?sslmode=disable"
}

// StartPostgres starts a PostgreSQL of the test's own (initdb in a
// temporary directory, a free loopback port, fsync off), for tests that
// kill or restart it. As root, initdb and postgres run with the uid and
// gid of Debian's "postgres" user, as PostgreSQL refuses root; the server
// is still this process's child. It is stopped by StopAll, or earlier by
// its Stop or Kill (which kills its whole process group, as a crash).
func StartPostgres(t TB) *Process {
	t.Helper()
	p, err := startPostgres()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// RestartPostgres starts PostgreSQL again on old's port and data
// directory after old has exited (Stop or Kill it first): after a Kill it
// runs crash recovery, as after a real crash.
func RestartPostgres(t TB, old *Process) *Process {
	t.Helper()
	select {
	case <-old.Exited():
	default:
		t.Fatalf("testserver: RestartPostgres: %s (pid %d) is still running; Stop or Kill it first", old.Name, old.PID())
	}
	bin, cred, err := pgSetup()
	if err != nil {
		t.Fatalf("%v", err)
	}
	var p *Process
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The killed server's processes may hold its shared memory for
		// a moment: try again until the new one starts.
		p, err = start(old.Name, filepath.Join(bin, "postgres"), old.cmd.Args[1:], old.Dir, old.Addr, 30*time.Second, cred)
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("%v", err)
	}
	p.group = true
	if err := pgReady(bin, p); err != nil {
		t.Fatalf("%v", err)
	}
	return p
}

// pgReady waits until p accepts queries: PostgreSQL listens before it
// has finished starting (or recovering after a crash) and refuses
// connections meanwhile ("the database system is starting up").
func pgReady(bin string, p *Process) error {
	host, port, _ := net.SplitHostPort(p.Addr)
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := exec.Command(filepath.Join(bin, "pg_isready"), "-q", "-h", host, "-p", port, "-U", "jobkit", "-d", "postgres").Run()
		if err == nil {
			return nil
		}
		select {
		case <-p.Exited():
			return fmt.Errorf("testserver: postgres exited while starting; output:\n%s", p.Output())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testserver: postgres on %s not ready within 60 s (pg_isready: %v); output:\n%s", p.Addr, err, p.Output())
		}
	}
}

// pgSetup finds PostgreSQL's programs and the credentials to run them.
func pgSetup() (bin string, cred *syscall.Credential, err error) {
	ms, _ := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	sort.Slice(ms, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(ms[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(ms[j]))))
		return vi < vj
	})
	switch {
	case len(ms) > 0:
		bin = filepath.Dir(ms[len(ms)-1])
	default:
		path, lerr := exec.LookPath("postgres")
		if lerr != nil {
			return "", nil, fmt.Errorf("testserver: PostgreSQL not found (no /usr/lib/postgresql/*/bin/postgres, none on PATH); on Debian run `apt-get install postgresql`, or run `make test`, which installs it and sets %s", PostgresURLEnv)
		}
		bin = filepath.Dir(path)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", nil, fmt.Errorf("testserver: running as root, and PostgreSQL refuses root: no postgres user to run it as (%v); install Debian's postgresql package", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	return bin, cred, nil
}

func startPostgres() (*Process, error) {
	bin, cred, err := pgSetup()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "jobkit-pg-")
	if err != nil {
		return nil, fmt.Errorf("testserver: postgres temp dir: %w", err)
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("testserver: postgres temp dir: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "jobkit", "--auth=trust", "-E", "UTF8", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("testserver: initdb: %v\n%s", err, out)
	}
	var lastErr error
	for range 3 {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		addr := net.JoinHostPort("127.0.0.1", itoa(port))
		p, err := start("postgres", filepath.Join(bin, "postgres"), []string{"-D", data, "-p", itoa(port), "-k", dir,
			"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=300"},
			dir, addr, 30*time.Second, cred)
		if err == nil {
			p.group = true
			if err := pgReady(bin, p); err != nil {
				p.Kill()
				return nil, err
			}
			return p, nil
		}
		lastErr = err
	}
	return nil, lastErr
}
