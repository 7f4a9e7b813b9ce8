package session

import "strings"

// isStartupHook reports whether kv names one of the variables a shell reads as it starts, before any
// command of ours, to run code or to change how it runs every command
// after. A session's shell never gets them: not from its creator's
// environment (bash sources $BASH_ENV even with --noprofile --norc, so a
// client's BASH_ENV that redefines printf made the session unstartable),
// and not from a record (whoever could once write the record must not
// choose code for every future shell). Which are hooks:
//
//   - BASH_ENV: sourced by every non-interactive bash, ours included.
//   - ENV: sourced by interactive sh, dash, ksh, mksh and bash in POSIX
//     mode; ours are not interactive, but a shell that reads $ENV on some
//     other path (sh -i in a wrapper, a future flag) must not find one.
//   - SHELLOPTS, BASHOPTS: bash turns on every option they list before it
//     reads a line: noexec makes it run nothing, errexit or onecmd ends it
//     at the first failure, xtrace with an inherited PS4 containing $(...)
//     runs that code before every command (bash ignores PS4 from the
//     environment only when run as root), and extdebug makes it source its
//     debugger's start-up file.
//   - BASH_FUNC_name%%: bash imports these as functions as it starts; a
//     function shadows a builtin of the same name (printf, command,
//     builtin itself), so they can take over whatever the protocol calls.
//
// Left alone, because they run nothing unless a command asks for it: PS4
// (used only under xtrace, which the hooks above no longer turn on),
// PS1, PS0 and PROMPT_COMMAND (interactive shells only), and LD_PRELOAD
// and the like (not the shell's: what the user set for every program).
//
// Commands in the session do not see the dropped variables either: the
// shell's environment is what its commands inherit, and a hook that
// worked until the session's first restart, then silently vanished (a
// record never brings it back), would be worse than one that is never
// there. A command that wants one sets it itself (BASH_ENV=f ./script).
func isStartupHook(kv string) bool {
	name, _, _ := strings.Cut(kv, "=")
	switch name {
	case "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS":
		return true
	}
	return strings.HasPrefix(name, "BASH_FUNC_")
}

// withoutStartupHooks returns a copy of env without startupHooks.
func withoutStartupHooks(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !isStartupHook(kv) {
			out = append(out, kv)
		}
	}
	return out
}
