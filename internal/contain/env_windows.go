package contain

import (
	"fmt"
	"os"
	"strings"
)

// windowsEnv is env as os/exec hands it to a Windows program: one entry
// per name, names compared without case and the last entry winning (a
// Windows block is looked up by the first match, so a later entry, the
// tree's marker among them, would otherwise lose to an earlier one that
// differs only in case), and SYSTEMROOT added from this process when env
// lacks it (without it many programs cannot load their DLLs or open a
// socket). An entry with a NUL byte cannot be passed and is an error.
func windowsEnv(env []string) ([]string, error) {
	out := make([]string, 0, len(env)+1)
	saw := make(map[string]bool, len(env))
	for i := len(env) - 1; i >= 0; i-- {
		kv := env[i]
		if strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("environment entry %q contains a NUL byte, which a Windows environment cannot hold", kv)
		}
		// A name may begin with "=" (the per-drive current directories,
		// "=C:=C:\\x"); it ends at the next "=".
		from := 0
		if strings.HasPrefix(kv, "=") {
			from = 1
		}
		n := strings.IndexByte(kv[from:], '=')
		if n < 0 {
			if kv != "" {
				out = append(out, kv) // not NAME=value: passed as it is, as os/exec does
			}
			continue
		}
		k := strings.ToUpper(kv[:from+n])
		if saw[k] {
			continue
		}
		saw[k] = true
		out = append(out, kv)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	if !saw["SYSTEMROOT"] {
		out = append(out, "SYSTEMROOT="+os.Getenv("SYSTEMROOT"))
	}
	return out, nil
}
