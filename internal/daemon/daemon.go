// Package daemon is corral's daemon: the registry of named sessions, the
// gateway clients talk to, and the reaper of what crashed keepers left.
//
// Each session is held by its own keeper process (the corral binary in its
// keeper role), started as a contained tree of its own, which outlives the
// daemon: killing the daemon costs no session. The daemon keeps a durable
// record of every session (internal/store) with its keeper's identity,
// written before the keeper runs its first instruction; when it starts, it
// re-adopts live keepers (pid, start time and boot id must match, and the
// keeper must answer on its socket) and marks the others down. A session
// that is down gets a new keeper, in its saved directory and environment,
// on its next command.
//
//	<state>/
//	    corral.sock          the Daemon API (0600; other uids are refused)
//	    corral.db            session records
//	    daemon.pid
//	    keepers/k-<hash>.sock, k-<hash>.log
package daemon

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/corral-dev/corral"
	pb "github.com/corral-dev/corral/api/corralv1"
	"github.com/corral-dev/corral/internal/contain"
	"github.com/corral-dev/corral/internal/keeper"
	"github.com/corral-dev/corral/internal/store"
	"github.com/corral-dev/corral/internal/unixsock"
	"github.com/corral-dev/corral/session"
)

// Config describes a daemon.
type Config struct {
	// StateDir holds the socket, the store and the keepers' sockets.
	StateDir string
	// Exe is the corral binary that keepers are started from.
	Exe string
	// KeeperRole is the argv[1] that makes Exe a keeper.
	KeeperRole string
}

// Daemon serves the Daemon API.
type Daemon struct {
	cfg     Config
	store   *store.Store
	lis     net.Listener
	srv     *grpc.Server
	started time.Time
	stopped chan struct{}
	once    sync.Once // shutdown
	stopReq sync.Once // closes stopped

	// mu guards the fields that follow.
	mu      sync.Mutex
	keepers map[string]*keeperConn
	creates map[string]*sync.Mutex // one keeper start at a time per name

	pb.UnimplementedDaemonServer
}

// keeperConn is a live, verified keeper.
type keeperConn struct {
	conn   *grpc.ClientConn
	client pb.KeeperClient
	pid    int
	gone   chan struct{} // closed when the keeper is known to be gone
}

// SocketPath is where the daemon of stateDir listens.
func SocketPath(stateDir string) string { return filepath.Join(stateDir, "corral.sock") }

// Open prepares a daemon: the store, the keepers' directory, the socket,
// and the re-adoption of live keepers. Serve then answers clients.
func Open(cfg Config) (*Daemon, error) {
	if err := os.MkdirAll(filepath.Join(cfg.StateDir, "keepers"), 0o700); err != nil {
		return nil, err
	}
	st, err := store.Open(filepath.Join(cfg.StateDir, "corral.db"))
	if err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, store: st, started: time.Now(), stopped: make(chan struct{}),
		keepers: map[string]*keeperConn{}, creates: map[string]*sync.Mutex{}}
	d.recover()
	lis, err := unixsock.Listen(SocketPath(cfg.StateDir))
	if errors.Is(err, unixsock.ErrInUse) {
		err = fmt.Errorf("%w: %w", ErrRunning, err)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	if d.lis, err = unixsock.OwnerOnly(lis); err != nil {
		lis.Close()
		st.Close()
		return nil, err
	}
	d.srv = grpc.NewServer()
	pb.RegisterDaemonServer(d.srv, d)
	os.WriteFile(filepath.Join(cfg.StateDir, "daemon.pid"), []byte(fmt.Sprintf("%d\n", os.Getpid())), 0o600)
	return d, nil
}

// ErrRunning means another daemon serves this state directory.
var ErrRunning = errors.New("a daemon is already running")

// Serve answers clients until Stop is called or ctx ends. Keepers keep
// running after it returns.
func (d *Daemon) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- d.srv.Serve(d.lis) }()
	select {
	case <-ctx.Done():
	case <-d.stopped:
	case err := <-errc:
		d.shutdown()
		return err
	}
	d.shutdown()
	return nil
}

// shutdown stops serving: it stops accepting, lets in-flight calls end
// (their commands are cancelled by the keepers when the streams go), and
// releases the store. It touches no keeper and no record.
func (d *Daemon) shutdown() {
	d.once.Do(func() {
		keeper.StopServer(d.srv, 5*time.Second)
		d.mu.Lock()
		for _, k := range d.keepers {
			k.conn.Close()
		}
		d.mu.Unlock()
		d.store.Close()
		os.Remove(filepath.Join(d.cfg.StateDir, "daemon.pid"))
	})
}

func keeperPaths(stateDir, name string) (sock, log string) {
	h := sha256.Sum256([]byte(name))
	base := filepath.Join(stateDir, "keepers", "k-"+hex.EncodeToString(h[:8]))
	return base + ".sock", base + ".log"
}

// recover re-adopts the keepers of the recorded sessions that are alive and
// answer, kills what is left of those that are not (through their recorded
// identity), and marks them down. Each record is updated in one
// transaction, so a listing sees it either before or after, never half.
func (d *Daemon) recover() {
	recs, err := d.store.List()
	if err != nil {
		return
	}
	for _, rec := range recs {
		if rec.Keeper == nil {
			continue
		}
		if kc := d.adopt(rec.Keeper); kc != nil {
			d.mu.Lock()
			d.keepers[rec.Name] = kc
			d.mu.Unlock()
			d.store.Update(rec.Name, func(r *store.Session) error { r.State = store.Up; return nil })
			continue
		}
		reapKeeper(rec.Keeper)
		d.store.Update(rec.Name, func(r *store.Session) error { r.State, r.Keeper = store.Down, nil; return nil })
	}
}

// adopt returns a connection to the recorded keeper if it is the process
// recorded (pid and start time) and answers on its socket.
func (d *Daemon) adopt(k *store.Keeper) *keeperConn {
	if !contain.ProcessAlive(k.Pid, k.StartTime) {
		return nil
	}
	kc, err := dialKeeper(k.Socket, k.Pid)
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := kc.client.Info(ctx, &pb.KeeperInfoRequest{})
	if err != nil || int(info.Pid) != k.Pid {
		kc.conn.Close()
		return nil
	}
	go watchPid(kc, k.Pid, k.StartTime)
	return kc
}

// watchPid closes kc.gone once the keeper process is gone.
func watchPid(kc *keeperConn, pid int, start uint64) {
	for contain.ProcessAlive(pid, start) {
		time.Sleep(100 * time.Millisecond)
	}
	close(kc.gone)
}

// reapKeeper kills whatever is left of a keeper's tree (a session shell and
// its commands, after the keeper died) through the recorded identity.
func reapKeeper(k *store.Keeper) {
	o, err := contain.Adopt(contain.Identity{
		Isolation: contain.Isolation(k.Isolation), Pid: k.Pid, Pgid: k.Pgid,
		Cgroup: k.Cgroup, StartTime: k.StartTime, BootID: k.BootID, Marker: k.Marker,
	})
	if err != nil {
		return // gone (or another boot): nothing to kill
	}
	if pids, err := o.Members(); err == nil && len(pids) > 0 {
		o.Kill()
		o.WaitEmpty(contain.KillBound)
	}
	o.Remove()
}

func dialKeeper(sock string, pid int) (*keeperConn, error) {
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &keeperConn{conn: conn, client: pb.NewKeeperClient(conn), pid: pid, gone: make(chan struct{})}, nil
}

// keeperFor returns the live keeper of name, creating the session's record
// (from start's cwd and env) on first use and starting a keeper if there is
// none.
func (d *Daemon) keeperFor(name string, start *pb.ExecStart) (*keeperConn, error) {
	d.mu.Lock()
	lock := d.creates[name]
	if lock == nil {
		lock = &sync.Mutex{}
		d.creates[name] = lock
	}
	d.mu.Unlock()
	lock.Lock()
	defer lock.Unlock()
	d.mu.Lock()
	kc := d.keepers[name]
	d.mu.Unlock()
	if kc != nil {
		select {
		case <-kc.gone:
		default:
			return kc, nil
		}
	}
	rec, err := d.store.Get(name)
	if errors.Is(err, store.ErrNotFound) {
		now := time.Now().UTC()
		rec = &store.Session{Name: name, Created: now, LastUsed: now, Shell: shellOf(start.Env),
			Cwd: start.Cwd, Env: start.Env, State: store.Down}
		if err := d.store.Put(rec); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, err
	}
	if rec.Keeper != nil {
		reapKeeper(rec.Keeper)
	}
	kc, err = d.startKeeper(rec)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.keepers[name] = kc
	d.mu.Unlock()
	return kc, nil
}

// shellOf picks the session's shell from the creating client's $SHELL.
func shellOf(env []string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "SHELL="); ok {
			switch filepath.Base(v) {
			case "bash", "zsh", "dash", "ksh", "mksh", "sh":
				return v
			}
		}
	}
	return "/bin/sh"
}

// startKeeper starts a keeper for rec as a contained tree of its own. Its
// identity is recorded before it runs; it says "ready" once it serves.
func (d *Daemon) startKeeper(rec *store.Session) (*keeperConn, error) {
	sock, logPath := keeperPaths(d.cfg.StateDir, rec.Name)
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	dir := rec.Cwd
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		dir = "/"
	}
	marker := corral.MarkerEnv + "=" + randomID()
	tree, err := contain.Start(contain.Auto, &contain.Spec{
		Path:   d.cfg.Exe,
		Argv:   []string{d.cfg.Exe, d.cfg.KeeperRole, "--name", rec.Name, "--socket", sock, "--shell", rec.Shell, "--dir", dir},
		Env:    rec.Env,
		Dir:    dir,
		Files:  []*os.File{null, logf, logf, readyW},
		Marker: marker,
		Hold: func(id contain.Identity) error {
			return d.store.Update(rec.Name, func(r *store.Session) error {
				r.Keeper = &store.Keeper{Pid: id.Pid, StartTime: id.StartTime, BootID: id.BootID,
					Isolation: string(id.Isolation), Pgid: id.Pgid, Cgroup: id.Cgroup, Marker: id.Marker, Socket: sock}
				r.State = store.Down
				return nil
			})
		},
	})
	readyW.Close()
	if err != nil {
		return nil, fmt.Errorf("start keeper: %w", err)
	}
	ready := make(chan bool, 1)
	go func() {
		buf := make([]byte, 6)
		n, _ := io.ReadFull(readyR, buf)
		ready <- n == 6 && string(buf) == "ready\n"
	}()
	ok := false
	select {
	case ok = <-ready:
	case <-time.After(10 * time.Second):
	}
	id := tree.Identity()
	if !ok {
		contain.Stop(tree, -1, contain.KillBound, nil)
		tree.Close()
		tail, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("keeper for %q did not start: %s", rec.Name, lastLine(tail))
	}
	kc, err := dialKeeper(sock, id.Pid)
	if err != nil {
		return nil, err
	}
	go d.watchTree(rec.Name, tree, kc)
	d.store.Update(rec.Name, func(r *store.Session) error { r.State = store.Up; return nil })
	return kc, nil
}

// watchTree waits for a keeper this daemon started to exit, stops what it
// left behind, and marks the session down.
func (d *Daemon) watchTree(name string, tree contain.Tree, kc *keeperConn) {
	<-tree.Exited()
	contain.Stop(tree, -1, contain.KillBound, nil)
	tree.Close()
	close(kc.gone)
	d.mu.Lock()
	if d.keepers[name] == kc {
		delete(d.keepers, name)
	}
	d.mu.Unlock()
	d.store.Update(name, func(r *store.Session) error {
		if r.Keeper != nil && r.Keeper.Pid == kc.pid {
			r.State, r.Keeper = store.Down, nil
		}
		return nil
	})
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func randomID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return fmt.Sprint(time.Now().UnixNano())
	}
	return hex.EncodeToString(b[:])
}

// Exec runs one command: in a oneshot shell, or in its session's keeper,
// creating the session on first use. The client's stream ending cancels it.
func (d *Daemon) Exec(stream pb.Daemon_ExecServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "the first message must be an ExecStart")
	}
	if err := CheckStart(start); err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if start.Oneshot {
		return keeper.ServeExec(&replay{Daemon_ExecServer: stream, first: first}, func(ctx context.Context, s *pb.ExecStart, opts session.Options) (*corral.Result, error) {
			return session.RunOnce(ctx, session.Config{Shell: shellOf(s.Env), Dir: s.Cwd, Env: s.Env}, s.Command, opts)
		})
	}
	kc, err := d.keeperFor(start.Session, start)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	err = proxyExec(stream, first, kc)
	name := start.Session
	// Record the session's state as of this command. Bounded: a keeper
	// that does not answer must not hold this call open.
	ictx, icancel := context.WithTimeout(context.Background(), 2*time.Second)
	info, ierr := kc.client.Info(ictx, &pb.KeeperInfoRequest{})
	icancel()
	d.store.Update(name, func(r *store.Session) error {
		r.LastUsed = time.Now().UTC()
		if ierr == nil {
			r.Cwd, r.Env = info.Cwd, info.Env
		}
		return nil
	})
	return err
}

// MaxCommand bounds the shell code of one command.
const MaxCommand = 1 << 20

// CheckStart validates an ExecStart from a client before anything is
// created or started.
func CheckStart(s *pb.ExecStart) error {
	switch {
	case s.TimeoutMs < 0:
		return errors.New("negative timeout")
	case s.MaxOutput < 0:
		return errors.New("negative output limit")
	case len(s.Command) > MaxCommand:
		return fmt.Errorf("command of %d bytes (at most %d)", len(s.Command), MaxCommand)
	case strings.IndexByte(s.Command, 0) >= 0:
		return errors.New("NUL byte in command")
	case s.Cwd != "" && !filepath.IsAbs(s.Cwd):
		return fmt.Errorf("cwd %q is not absolute", s.Cwd)
	}
	for _, kv := range s.Env {
		if strings.IndexByte(kv, 0) >= 0 || !strings.Contains(kv, "=") {
			return fmt.Errorf("malformed environment entry %q", kv)
		}
	}
	if s.Oneshot {
		return nil
	}
	return store.CheckName(s.Session)
}

// replay hands back the first message once more, for ServeExec.
type replay struct {
	pb.Daemon_ExecServer
	first *pb.ExecRequest
}

func (r *replay) Recv() (*pb.ExecRequest, error) {
	if m := r.first; m != nil {
		r.first = nil
		return m, nil
	}
	return r.Daemon_ExecServer.Recv()
}

// proxyExec forwards one Exec stream between the client and the keeper.
func proxyExec(client pb.Daemon_ExecServer, first *pb.ExecRequest, kc *keeperConn) error {
	ctx, cancel := context.WithCancel(client.Context())
	defer cancel()
	up, err := kc.client.Exec(ctx)
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	if err := up.Send(first); err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	go func() {
		for {
			m, err := client.Recv()
			if err != nil {
				up.CloseSend()
				return
			}
			if up.Send(m) != nil {
				return
			}
		}
	}()
	for {
		m, err := up.Recv()
		if err == io.EOF {
			return status.Error(codes.Unavailable, "the session's keeper ended the command without a result")
		}
		if err != nil {
			if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
				return err
			}
			return status.Error(codes.Unavailable, "the session's keeper went away: "+err.Error())
		}
		if err := client.Send(m); err != nil {
			return err
		}
		if m.GetResult() != nil {
			return nil
		}
	}
}

// List lists the sessions from one consistent snapshot of the store.
func (d *Daemon) List(ctx context.Context, _ *pb.ListRequest) (*pb.ListResponse, error) {
	recs, err := d.store.List()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	out := &pb.ListResponse{}
	for _, r := range recs {
		si := &pb.SessionInfo{Name: r.Name, State: string(r.State), Shell: r.Shell, Cwd: r.Cwd,
			CreatedUnix: r.Created.Unix(), LastUsedUnix: r.LastUsed.Unix()}
		if r.Keeper != nil {
			si.KeeperPid = int32(r.Keeper.Pid)
		}
		out.Sessions = append(out.Sessions, si)
	}
	return out, nil
}

// Kill ends sessions (their keepers and whole trees) and deletes their
// records.
func (d *Daemon) Kill(ctx context.Context, req *pb.KillRequest) (*pb.KillResponse, error) {
	names := req.Names
	if req.All {
		recs, err := d.store.List()
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		names = nil
		for _, r := range recs {
			names = append(names, r.Name)
		}
	}
	out := &pb.KillResponse{}
	for _, name := range names {
		if err := store.CheckName(name); err != nil {
			return out, status.Error(codes.InvalidArgument, err.Error())
		}
		rec, err := d.store.Get(name)
		if errors.Is(err, store.ErrNotFound) {
			return out, status.Error(codes.NotFound, err.Error())
		}
		if err != nil {
			return out, status.Error(codes.Internal, err.Error())
		}
		d.mu.Lock()
		kc := d.keepers[name]
		delete(d.keepers, name)
		d.mu.Unlock()
		if kc != nil {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			kc.client.Shutdown(sctx, &pb.ShutdownRequest{})
			cancel()
			select {
			case <-kc.gone:
			case <-time.After(10 * time.Second):
			}
			kc.conn.Close()
		}
		if rec.Keeper != nil {
			reapKeeper(rec.Keeper)
		}
		if err := d.store.Delete(name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return out, status.Error(codes.Internal, err.Error())
		}
		out.Killed = append(out.Killed, name)
	}
	return out, nil
}

// Status describes the daemon.
func (d *Daemon) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.StatusResponse, error) {
	recs, _ := d.store.List()
	return &pb.StatusResponse{Pid: int32(os.Getpid()), Socket: SocketPath(d.cfg.StateDir),
		StateDir: d.cfg.StateDir, Sessions: int32(len(recs)), StartedUnix: d.started.Unix()}, nil
}

// Stop ends Serve after answering; keepers and records stay.
func (d *Daemon) Stop(ctx context.Context, _ *pb.StopRequest) (*pb.StopResponse, error) {
	d.stopReq.Do(func() { close(d.stopped) })
	return &pb.StopResponse{}, nil
}
