package contain

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

func holders(pids []int, files []*os.File) ([]int, error) {
	want := map[string]bool{}
	for _, f := range files {
		fi, err := f.Stat()
		if err != nil {
			return nil, err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil, ErrUnsupported
		}
		want[fmt.Sprintf("pipe:[%d]", st.Ino)] = true
	}
	var out []int
	for _, pid := range pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd/"
		d, err := os.Open(dir)
		if err != nil {
			continue // gone
		}
		names, _ := d.Readdirnames(-1)
		d.Close()
		for _, n := range names {
			if l, err := os.Readlink(dir + n); err == nil && want[l] {
				out = append(out, pid)
				break
			}
		}
	}
	return out, nil
}
