package testproc

import (
	"os"
	"unsafe"

	"golang.org/x/sys/windows"
)

// Survivors lists the live processes whose environment holds kv. Windows
// has no /proc: each process's environment block is read from its memory
// (its PEB, then its process parameters), as Process Explorer shows it.
// Processes this one may not read (other users', protected ones) cannot
// carry a test's marker and are passed over.
func Survivors(kv string) []int {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPPROCESS, 0)
	if err != nil {
		return nil
	}
	defer windows.CloseHandle(snap)
	want, err := windows.UTF16FromString(kv)
	if err != nil {
		return nil
	}
	want = want[:len(want)-1]
	self := uint32(os.Getpid())
	var out []int
	var pe windows.ProcessEntry32
	pe.Size = uint32(unsafe.Sizeof(pe))
	for err = windows.Process32First(snap, &pe); err == nil; err = windows.Process32Next(snap, &pe) {
		if pe.ProcessID == self || pe.ProcessID == 0 {
			continue
		}
		if env, ok := environOf(pe.ProcessID); ok && hasEntry(env, want) && alive(pe.ProcessID) {
			out = append(out, int(pe.ProcessID))
		}
	}
	return out
}

// envBound is the most of an environment block read (the system's own
// limit is 32767 characters per variable, and blocks are rarely larger).
const envBound = 1 << 20

// environOf reads the environment block of process pid: NUL-separated
// UTF-16 entries.
func environOf(pid uint32) ([]uint16, bool) {
	h, err := windows.OpenProcess(windows.PROCESS_QUERY_INFORMATION|windows.PROCESS_VM_READ, false, pid)
	if err != nil {
		return nil, false
	}
	defer windows.CloseHandle(h)
	var pbi windows.PROCESS_BASIC_INFORMATION
	if windows.NtQueryInformationProcess(h, windows.ProcessBasicInformation, unsafe.Pointer(&pbi), uint32(unsafe.Sizeof(pbi)), nil) != nil {
		return nil, false
	}
	// The foreign structures hold foreign pointers: read the fields
	// needed as plain numbers, never into Go values of those types.
	word := func(addr uintptr) (uintptr, bool) {
		var v uintptr
		err := windows.ReadProcessMemory(h, addr, (*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v), nil)
		return v, err == nil
	}
	var peb windows.PEB
	var params windows.RTL_USER_PROCESS_PARAMETERS
	pp, ok := word(uintptr(unsafe.Pointer(pbi.PebBaseAddress)) + unsafe.Offsetof(peb.ProcessParameters))
	if !ok || pp == 0 {
		return nil, false
	}
	env, ok := word(pp + unsafe.Offsetof(params.Environment))
	if !ok || env == 0 {
		return nil, false
	}
	size, _ := word(pp + unsafe.Offsetof(params.EnvironmentSize))
	if size == 0 || size > envBound {
		size = 64 << 10 // not recorded (Wine): read what is there
	}
	buf := make([]uint16, size/2)
	var n uintptr
	if err := windows.ReadProcessMemory(h, env, (*byte)(unsafe.Pointer(&buf[0])), uintptr(len(buf))*2, &n); err != nil && n == 0 {
		return nil, false
	}
	return buf[:n/2], true
}

// hasEntry reports whether the block env holds the entry want exactly.
func hasEntry(env, want []uint16) bool {
	for len(env) > 0 && env[0] != 0 {
		i := 0
		for i < len(env) && env[i] != 0 {
			i++
		}
		if equal(env[:i], want) {
			return true
		}
		if i == len(env) {
			break
		}
		env = env[i+1:]
	}
	return false
}

func equal(a, b []uint16) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// alive reports whether pid has not exited (a process that exited can
// stay in the table while a handle to it is open).
func alive(pid uint32) bool {
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, pid)
	if err != nil {
		return false
	}
	defer windows.CloseHandle(h)
	ev, _ := windows.WaitForSingleObject(h, 0)
	return ev == uint32(windows.WAIT_TIMEOUT)
}
