package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ReadStat reads /proc/PID/stat.
//
// It reads with open, read and close and nothing else: os.ReadFile adds an
// fstat, an attempt to register the file with the poller and a second read,
// which doubled the cost of the per-process stat reads of a stop (1000 of
// them in a 1000-process tree). A stat line is well under statBufSize
// (52 fields of at most 20 digits, and a name of at most 64 bytes).
func ReadStat(pid int) (Stat, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	var buf [statBufSize]byte
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	for err == syscall.EINTR {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		if err == syscall.ENOENT || err == errESRCH {
			return Stat{}, ErrGone
		}
		return Stat{}, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	n, err := syscall.Read(fd, buf[:])
	for err == syscall.EINTR {
		n, err = syscall.Read(fd, buf[:])
	}
	syscall.Close(fd)
	if err != nil {
		if err == errESRCH {
			return Stat{}, ErrGone
		}
		return Stat{}, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if n == len(buf) {
		return Stat{}, fmt.Errorf("proc: stat of pid %d longer than %d bytes", pid, len(buf))
	}
	return parseStat(pid, buf[:n])
}

// statBufSize bounds the one read of a stat line.
const statBufSize = 2048

// parseStat parses the stat line. The command name (field 2) is in
// parentheses and may itself contain spaces and parentheses, so the fields
// after it are found from the last ')'.
func parseStat(pid int, b []byte) (Stat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return Stat{}, fmt.Errorf("proc: malformed stat for pid %d", pid)
	}
	f := strings.Fields(string(b[i+2:]))
	// f[0] is field 3 (state); field N is f[N-3].
	if len(f) < 20 {
		return Stat{}, fmt.Errorf("proc: short stat for pid %d", pid)
	}
	s := Stat{Pid: pid, State: f[0][0]}
	var err error
	if s.Ppid, err = strconv.Atoi(f[1]); err != nil {
		return Stat{}, fmt.Errorf("proc: stat ppid of %d: %w", pid, err)
	}
	if s.Pgid, err = strconv.Atoi(f[2]); err != nil {
		return Stat{}, fmt.Errorf("proc: stat pgid of %d: %w", pid, err)
	}
	if s.Sid, err = strconv.Atoi(f[3]); err != nil {
		return Stat{}, fmt.Errorf("proc: stat sid of %d: %w", pid, err)
	}
	if s.StartTime, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return Stat{}, fmt.Errorf("proc: stat starttime of %d: %w", pid, err)
	}
	return s, nil
}

var bootID = sync.OnceValues(func() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("proc: boot id: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
})

// BootID returns this boot's id; a recorded start time means nothing under
// another boot id.
func BootID() (string, error) { return bootID() }

// Pids lists the pids of every process now in /proc.
func Pids() ([]int, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if n[0] < '0' || n[0] > '9' {
			continue
		}
		if pid, err := strconv.Atoi(n); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// HasEnv reports whether the process's initial environment holds the exact
// entry kv ("NAME=value"). A zombie or a kernel thread has no environment.
func HasEnv(pid int, kv string) (bool, error) {
	// A live process reads back an empty environment only while it is in
	// the middle of execve (its old memory gone, the new not yet set up),
	// so an empty read is retried for a short while; a zombie or kernel
	// thread stays empty.
	var b []byte
	for try := 0; ; try++ {
		var err error
		b, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errESRCH) {
				return false, ErrGone
			}
			return false, err
		}
		if len(b) > 0 || try == 50 {
			break
		}
		if st, err := ReadStat(pid); err != nil || st.Zombie() || st.Ppid == 2 || pid == 2 {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	for _, e := range bytes.Split(b, []byte{0}) {
		if string(e) == kv {
			return true, nil
		}
	}
	return false, nil
}

// Children lists the children of pid, over all its threads.
func Children(pid int) ([]int, error) {
	tasks, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, ErrGone
		}
		return nil, err
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + t.Name() + "/children")
		if err != nil {
			continue // thread exited while we read
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out, nil
}
